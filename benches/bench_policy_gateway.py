"""What an authorization policy costs a call through ``trunkline serve`` (issue 40): the
gateway with 1,000 named API keys and no policy beside the same gateway under a 50-rule
policy, and the decision layer (``policy.Access``) alone.

One generator with a fixed seed writes the scenario: 1,000 named API keys (the
``--api-key-file`` JSON: each key's groups out of 20, scopes out of 10, sometimes a role,
attributes ``org``, ``region`` and ``tier``), 10 servers of 20 tools (``echo`` one of them;
most tools annotated as their verb says) and a 50-rule policy of the shapes an operator
writes: allows by group per server and per tool glob, scope denies (``*/delete_*``,
``*/write_*``, a server needing its scope), allows by annotation, ``when`` conditions on
email domains, attributes and roles, a kill switch for suspended keys, and ``arguments``
conditions on a ``path`` (tools of ``files`` and ``s3``). Three rules allow the benchmarked
call (``echo/echo``), by organisation, by group and by region; every one of the 1,000 keys
is checked to be allowed it before anything is timed.

Over HTTP (``test_policy_gateway``; wrk, ``gateway_load.py``), two targets started the same
way, ``trunkline serve CONFIG --http --api-key-file KEYS`` over the C echo server:

* ``keys``         the configuration without a policy,
* ``keys+policy``  the same with the policy as its ``"policy"``.

wrk runs ``wrk/tools_call_keys.lua``: ``tools/call`` of ``echo`` as ``tools_call.lua``
sends and checks it, the requests taking the 1,000 keys in turn, so the 64 calls in flight
present 64 identities and every round presents all 1,000. At 64 connections, then 1 (for
latency), each target gets one unrecorded run first (full mode; it decides every
identity's first call, so the rounds measure decisions already made), then the rounds run
interleaved (keys, keys+policy, keys, keys+policy, ...) so both see the same machine. Per
round: calls/s, p50/p99, the CPU the target's processes used per call (the gateway
process, its worker, the upstream), the load average. A ratio or a difference is the
median over rounds of one policy round against the keys round just before it.

The decision layer alone (``test_decision_*``; pytest-benchmark timers, over the same
policy and keys, a catalog of ``ToolEntry``\\ s for the 200 tools):

* ``cached-one``   ``Access.may_call_tool`` on one (identity, tool) pair already decided;
* ``cached-1000``  the same over the 1,000 key identities in turn, each decided already
                   (the gateway's pattern: the timing is per decision, loop included);
* ``nothing``      a Python function that does nothing, called the way ``cached-one``
                   is: what the timer's loop and a call cost by themselves;
* ``cold``         a fresh identity's first decision on ``echo``: its view and CEL
                   context made, every rule about the tool evaluated;
* ``listing``      ``Access.tools_visible`` over the 200 tools, for an identity whose
                   decisions are all made; ``listing-cold`` a fresh identity's first;
* ``api-key``      ``ApiKeys.identity_of`` over the 1,000 keys: what authenticating one
                   request costs both targets (not the policy's cost: both pay it).

    .venv/bin/pytest benches/bench_policy_gateway.py --benchmark-json=PG.json   # ~2.5 min
    .venv/bin/python benches/bench_policy_gateway.py report PG.json
    .venv/bin/pytest benches/bench_policy_gateway.py --benchmark-disable        # smoke (CI)
    .venv/bin/python benches/bench_policy_gateway.py instructions [--dump-dir DIR]  # ~5 min

``instructions`` runs both columns under callgrind (``gateway_instructions.py``: the
instructions the gateway process executes per call, a count the shared machine moves
far less than CPU time), interleaved, one JSON line per run.

Timings are never pass/fail. A case fails when a call fails (a non-2xx, a JSON-RPC error,
a result that is not the echo of that very call, a socket error or a wrk timeout), when
the policy gateway's ``/status`` says it decided for fewer identities than the keys a
round presented, or denied a call; or when a decision or listing is not what the same
policy decides afresh.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

import formats
import gateway_instructions
import gateway_load
from bench_policy_engines import GROUPS, SCOPES  # the same kinds of identity
from trunkline.catalog.model import ToolEntry
from trunkline.gateway.api_keys import ApiKeys, read_api_keys
from trunkline.policy import Access, Identity, Policy
from trunkline.policy.decisions import Allowed, _about, tool_item

SEED = 40
KEYS = 1_000
SERVERS = ("echo", "github", "gitlab", "tickets", "wiki", "slack", "files", "postgres", "s3",
           "kubernetes")
TOOLS_PER_SERVER = 20
ROLES = ("cluster-admin", "dba", "auditor")
ORGS = (("acme", 8), ("globex", 2))
REGIONS = ("eu", "us", "apac")
TIERS = ("free", "pro", "enterprise")
READ_VERBS = ("read", "get", "list", "search")
VERBS = (*READ_VERBS, "create", "update", "write", "delete")
NOUNS = ("issue", "file", "page", "message", "table", "bucket", "pod", "event", "user",
         "comment", "project", "branch", "query", "report", "secret")
UNANNOTATED = 0.2  # the share of tools with no annotations (the echo has none)
PATH_PREFIXES = ("/srv/shared/", "/home/public/", "/data/reports/", "/tmp/scratch/")
RULES = 50

ORDER = ("keys", "keys+policy")
CONNECTIONS = (64, 1)
ROUNDS = 6
ROUND_S = 5
WARMUP_S = 2
SMOKE_S = 1
LUA = gateway_load.BENCHES / "wrk" / "tools_call_keys.lua"

#: pytest-benchmark rounds of the decision layer's timers (full mode).
CACHED_ITERATIONS, CACHED_ROUNDS = 20_000, 50
COLD_ROUNDS = 500
LISTING_ROUNDS = 200


# -- the scenario ------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    keys: tuple[dict[str, Any], ...]  # the --api-key-file entries
    tools: tuple[ToolEntry, ...]
    policy: dict[str, Any]  # the document, as the configuration's "policy"


def _keys(rng: random.Random) -> tuple[dict[str, Any], ...]:
    orgs = [o for o, _ in ORGS]
    weights = [w for _, w in ORGS]
    keys = []
    for i in range(KEYS):
        entry: dict[str, Any] = {
            "name": f"agent-{i:04d}", "key": f"tk-{rng.getrandbits(160):040x}",
            "groups": sorted(rng.sample(GROUPS, rng.randint(0, 4))),
            "scopes": sorted(rng.sample(SCOPES, rng.randint(0, 3))),
            "attributes": {"org": rng.choices(orgs, weights)[0],
                           "region": rng.choice(REGIONS), "tier": rng.choice(TIERS)}}
        if rng.random() < 0.1:
            entry["roles"] = [rng.choice(ROLES)]
        keys.append(entry)
    return tuple(keys)


def _tools(rng: random.Random) -> tuple[ToolEntry, ...]:
    tools = []
    for server in SERVERS:
        names = rng.sample([f"{verb}_{noun}" for verb in VERBS for noun in NOUNS],
                           TOOLS_PER_SERVER - (server == "echo"))
        for name in sorted(names) + (["echo"] if server == "echo" else []):
            verb = name.split("_", 1)[0]
            annotations = None if name == "echo" or rng.random() < UNANNOTATED else {
                "readOnlyHint": verb in READ_VERBS, "destructiveHint": verb == "delete"}
            tools.append(ToolEntry(
                name=name if server == "echo" else f"{server}_{name}", server=server,
                local_name=name, title=None, description=f"{name} on {server}",
                input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
                annotations=annotations))
    return tuple(tools)


def _in(group: str) -> str:
    return f"'{group}' in identity.groups"


def _scope(scope: str) -> str:
    return f"'{scope}' in identity.scopes"


def _email_at(domain: str) -> str:
    return f"identity.email.endsWith('@{domain}')"


def _rules(rng: random.Random, tools: tuple[ToolEntry, ...]) -> list[dict[str, Any]]:
    both = ["list", "call"]
    others = [s for s in SERVERS if s != "echo"]
    rules: list[dict[str, Any]] = [
        # Read-only tools, for everyone.
        {"allow": both, "tools": ["*"], "annotations": {"readOnlyHint": True}},
        # Destructive tools and a cluster, never for contractors (OAuth users' email).
        {"deny": both, "tools": ["*"], "annotations": {"destructiveHint": True},
         "when": _email_at("contractors.example")},
        {"deny": both, "servers": ["kubernetes"], "when": _email_at("contractors.example")},
        # A suspended key sees nothing (an identity without the attribute is not one).
        {"deny": both, "servers": ["*"],
         "when": "has(identity.attributes.tier) && identity.attributes.tier == 'suspended'"},
        # The benchmarked call's server: by organisation, by group; its tool by region.
        {"allow": both, "servers": ["echo"],
         "when": "has(identity.attributes.org) && identity.attributes.org in "
                 "['acme', 'globex']"},
        {"allow": both, "servers": ["echo"], "when": f"{_in('eng')} || {_in('sre')}"},
        {"allow": ["call"], "tools": ["echo/echo"], "when": "identity.attributes.region == 'eu'"},
    ]
    # A server for a group; some of a server's tools for a group.
    rules += [{"allow": both, "servers": [rng.choice(others)], "when": _in(rng.choice(GROUPS))}
              for _ in range(10)]
    rules += [{"allow": both, "servers": [rng.choice((*others, "git*", "*s"))],
               "tools": [f"{rng.choice(VERBS)}_*"], "when": _in(rng.choice(GROUPS))}
              for _ in range(7)]
    # Scope denies.
    rules += [{"deny": ["call"], "tools": ["*/delete_*"], "when": f"!({_scope('admin')})"},
              {"deny": both, "tools": ["*/write_*"], "when": f"!({_scope('write')})"},
              {"deny": ["call"], "servers": ["postgres"], "when": f"!({_scope('pii')})"},
              {"deny": both, "servers": ["s3"],
               "when": f"!({_scope('export')} || {_scope('admin')})"},
              {"deny": ["call"], "tools": ["*/update_*"],
               "when": f"!({_scope('write')}) && !({_in('admins')})"}]
    # Email domains (OAuth users): a partner on a few servers, employees on reads.
    rules += [{"allow": both, "servers": [rng.choice(others)],
               "when": _email_at("partner.example")} for _ in range(2)]
    rules += [{"allow": both, "servers": [rng.choice(others)],
               "tools": [rng.choice(("get_*", "list_*", "search_*"))],
               "when": _email_at("example.com")} for _ in range(3)]
    # Attributes.
    rules += [{"allow": both, "servers": [rng.choice(others)],
               "when": "identity.attributes.tier == 'enterprise'"},
              {"allow": both, "servers": [rng.choice(others)],
               "when": f"identity.attributes.region == 'us' && {_in('data')}"},
              {"deny": both, "servers": ["slack"],
               "when": "has(identity.attributes.org) && identity.attributes.org == 'globex'"},
              {"allow": both, "servers": ["wiki"], "when": "identity.attributes.org == 'acme'"}]
    # A group holding a scope; either of two groups; a role.
    rules += [{"allow": both, "servers": [rng.choice(others)],
               "when": f"{_in(rng.choice(GROUPS))} && {_scope(rng.choice(SCOPES))}"}
              for _ in range(3)]
    rules += [{"allow": both, "servers": [rng.choice(others)],
               "when": " || ".join(_in(g) for g in rng.sample(GROUPS, 2))}
              for _ in range(2)]
    rules.append({"allow": both, "servers": ["kubernetes"],
                  "when": "'cluster-admin' in identity.roles"})
    # Annotations and a condition.
    rules += [{"allow": both, "tools": ["*"], "annotations": {"destructiveHint": True},
               "when": f"{_email_at('example.com')} && {_in('sre')}"},
              {"allow": both, "servers": [rng.choice(others)],
               "annotations": {"readOnlyHint": False}, "when": _in("ops")}]
    # Arguments: a tool's path under a prefix, as a deny (outside it) and as an allow.
    named = rng.sample([t for t in tools if t.server in ("files", "s3")], 4)
    for i, tool in enumerate(named):
        under = f"has(arguments.path) && arguments.path.startsWith('{PATH_PREFIXES[i]}')"
        if i % 2:
            rules.append({"allow": ["call"], "tools": [f"{tool.server}/{tool.local_name}"],
                          "when": _in(rng.choice(GROUPS)), "arguments": under})
        else:
            rules.append({"deny": ["call"], "tools": [f"{tool.server}/{tool.local_name}"],
                          "arguments": f"!({under})"})
    assert len(rules) == RULES, len(rules)
    return [{"id": f"r{i:02d}", **rule} for i, rule in enumerate(rules)]


def scenario(seed: int = SEED) -> Scenario:
    rng = random.Random(seed)
    tools = _tools(rng)
    return Scenario(_keys(rng), tools, {
        "description": f"bench_policy_gateway.py, seed {seed}", "rules": _rules(rng, tools)})


SCENARIO = scenario()
ECHO = next(t for t in SCENARIO.tools if t.server == "echo" and t.local_name == "echo")


def key_identity(entry: dict[str, Any]) -> Identity:
    """A key entry's identity, as the gateway reads it (``api_keys``)."""
    return Identity.api_key(entry["name"], scopes=entry["scopes"], groups=entry["groups"],
                            roles=entry.get("roles", ()), attributes=entry["attributes"])


def check_scenario(policy: Policy) -> int:
    """Every key may call the echo (a fresh ``Access`` per question); the rules about it."""
    for entry in SCENARIO.keys:
        decision = Access(policy).may_call_tool(key_identity(entry), ECHO)
        assert type(decision) is Allowed, (entry["name"], decision)
    item = tool_item(ECHO)
    return sum(_about(rule, item) for rule in policy.rules)


# -- the gateway over HTTP ---------------------------------------------------------------

class Targets:
    """The two gateways, their key and policy files, started on first use."""

    def __init__(self) -> None:
        self.dir = tempfile.TemporaryDirectory(prefix="bench-policy-gw-")
        here = Path(self.dir.name)
        self.key_file = here / "keys.json"
        self.key_file.write_text(json.dumps({"keys": list(SCENARIO.keys)}))
        self.wrk_keys = here / "keys.txt"  # for wrk: the values alone, one a line
        self.wrk_keys.write_text("".join(f"{k['key']}\n" for k in SCENARIO.keys))
        self._started: dict[str, gateway_load.Target] = {}

    def get(self, column: str) -> gateway_load.Target:
        if column not in self._started:
            more = {"policy": SCENARIO.policy} if column == "keys+policy" else None
            target = gateway_load.start_trunkline(
                1, "--api-key-file", str(self.key_file), config_more=more)
            target.name = column
            self._started[column] = target
        return self._started[column]

    def status(self, column: str) -> dict[str, Any]:
        target = self.get(column)
        request = urllib.request.Request(
            target.url.rsplit("/mcp", 1)[0] + "/status",
            headers={"Authorization": f"Bearer {SCENARIO.keys[0]['key']}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        for target in self._started.values():
            target.stop()
        self._started.clear()
        self.dir.cleanup()


@pytest.fixture(scope="module")
def targets() -> Iterator[Targets]:
    if shutil.which("wrk") is None:
        pytest.fail("wrk is not installed (.ci/install-system installs it)")
    check_scenario(Policy.compile(SCENARIO.policy))
    held = Targets()
    try:
        yield held
    finally:
        held.stop()


def _wrk(targets: Targets, column: str, connections: int, seconds: int) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    result = gateway_load.run_wrk(targets.get(column), connections, seconds, script=LUA,
                                  script_args=(str(targets.wrk_keys),))
    return {**asdict(result), "load1": [load0, os.getloadavg()[0]]}


@pytest.mark.parametrize("connections", [pytest.param(n, id=f"c{n}") for n in CONNECTIONS])
def test_policy_gateway(benchmark: Any, targets: Targets, connections: int) -> None:
    smoke = bool(benchmark.disabled)
    rounds: dict[str, list[dict[str, Any]]] = {c: [] for c in ORDER}
    before = targets.status("keys+policy")["policy"]
    if not smoke:
        for column in ORDER:
            _wrk(targets, column, connections, WARMUP_S)

    def one_round() -> None:
        for column in ORDER:  # interleaved: each round runs both, keys first
            rounds[column].append(_wrk(targets, column, connections,
                                       SMOKE_S if smoke else ROUND_S))

    benchmark.group = f"policy-gateway-c{connections}"
    benchmark.pedantic(one_round, rounds=1 if smoke else ROUNDS, iterations=1,
                       warmup_rounds=0)
    after = targets.status("keys+policy")["policy"]
    assert "policy" not in targets.status("keys")
    assert after["rules"] == RULES
    # Every key a round presented was decided for (the keys were taken in turn), and no
    # call was refused.
    least = min(KEYS, min(r["calls"] for r in rounds["keys+policy"]))
    assert least <= after["identities"] <= KEYS, after
    assert after["denied"] == before["denied"] == 0, after
    assert after["allowed"] - before["allowed"] >= sum(r["calls"] for r in rounds["keys+policy"])
    benchmark.extra_info.update(
        policy_gateway="http", connections=connections, smoke=smoke, keys=KEYS, rules=RULES,
        status=after, columns={c: _summary(rs) for c, rs in rounds.items()},
        paired=gateway_load.paired_rounds(rounds["keys"], rounds["keys+policy"]))


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A column's medians over its rounds, and the rounds."""
    med = {k: statistics.median(r[k] for r in rounds) for k in ("calls_per_s", "p50_ms", "p99_ms")}
    return dict(rounds=len(rounds), **med,
                cpu_us_per_call=statistics.median(gateway_load.cpu_us_per_call(r) for r in rounds),
                cpu_us_per_call_by_role={
                    role: statistics.median(gateway_load.cpu_us_per_call(r, role) for r in rounds)
                    for role in rounds[0]["target_cpu_by_role"]},
                wrk_cpu_share=statistics.median(r["wrk_cpu_s"] / r["seconds"] for r in rounds),
                load1=[min(min(r["load1"]) for r in rounds), max(max(r["load1"]) for r in rounds)],
                per_round=rounds)


# -- the decision layer alone ------------------------------------------------------------

@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.compile(SCENARIO.policy)


@pytest.fixture(scope="module")
def identities() -> list[Identity]:
    return [key_identity(k) for k in SCENARIO.keys]


def _rounds(benchmark: Any, rounds: int, iterations: int = 1) -> dict[str, int]:
    if benchmark.disabled:
        return {"rounds": 1, "iterations": 1, "warmup_rounds": 0}
    return {"rounds": rounds, "iterations": iterations, "warmup_rounds": 1}


def _nothing(identity: Identity, entry: ToolEntry) -> None:
    return None


def test_decision_cached_one(benchmark: Any, policy: Policy,
                             identities: list[Identity]) -> None:
    access = Access(policy)
    assert type(access.may_call_tool(identities[0], ECHO)) is Allowed  # decided once
    benchmark.group = "decision"
    got = benchmark.pedantic(access.may_call_tool, args=(identities[0], ECHO),
                             **_rounds(benchmark, CACHED_ROUNDS, CACHED_ITERATIONS))
    assert type(got) is Allowed and access.identities == 1
    benchmark.extra_info.update(decisions=1)


def test_decision_cached_1000(benchmark: Any, policy: Policy,
                              identities: list[Identity]) -> None:
    access = Access(policy)
    for identity in identities:  # every identity's decision made once
        access.may_call_tool(identity, ECHO)
    may_call_tool = access.may_call_tool

    def each() -> list[Any]:
        return [may_call_tool(identity, ECHO) for identity in identities]

    benchmark.group = "decision"
    got = benchmark.pedantic(each, **_rounds(benchmark, CACHED_ROUNDS))
    assert all(type(d) is Allowed for d in got) and access.identities == KEYS
    benchmark.extra_info.update(decisions=len(identities))


def test_decision_nothing(benchmark: Any, identities: list[Identity]) -> None:
    benchmark.group = "decision"
    benchmark.pedantic(_nothing, args=(identities[0], ECHO),
                       **_rounds(benchmark, CACHED_ROUNDS, CACHED_ITERATIONS))
    benchmark.extra_info.update(decisions=1)


def _fresh(n: Iterator[int], identities: list[Identity]) -> Identity:
    """A new identity, never seen, like one of ``identities`` in turn (its groups, scopes,
    roles, attributes)."""
    i = next(n)
    template = identities[i % len(identities)]
    return Identity.api_key(f"fresh-{i}", scopes=template.scopes,
                            groups=template.groups, roles=template.roles,
                            attributes=dict(template.attributes))


def test_decision_cold(benchmark: Any, policy: Policy, identities: list[Identity]) -> None:
    access = Access(policy)
    n = itertools.count()
    benchmark.group = "decision"
    decided: list[Any] = []

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (_fresh(n, identities), ECHO), {}

    def decide(identity: Identity, entry: ToolEntry) -> None:
        decided.append(access.may_call_tool(identity, entry))

    rounds = _rounds(benchmark, COLD_ROUNDS)
    benchmark.pedantic(decide, setup=setup, rounds=rounds["rounds"],
                       warmup_rounds=rounds["warmup_rounds"])
    assert decided and all(type(d) is Allowed for d in decided)
    benchmark.extra_info.update(decisions=1, rules_about_the_tool=check_scenario(policy))


def _expected_listing(policy: Policy, identity: Identity) -> tuple[ToolEntry, ...]:
    """What ``identity`` may list of the catalog, each tool asked of a fresh ``Access``."""
    return tuple(e for e in SCENARIO.tools if Access(policy).may_list(identity, tool_item(e)))


def test_listing_cached(benchmark: Any, policy: Policy, identities: list[Identity]) -> None:
    access = Access(policy)
    entries = SCENARIO.tools
    first = access.tools_visible(identities[0], entries)  # every decision made once
    benchmark.group = "listing"
    got = benchmark.pedantic(access.tools_visible, args=(identities[0], entries),
                             **_rounds(benchmark, LISTING_ROUNDS, 100))
    assert got is first and tuple(got) == _expected_listing(policy, identities[0])
    benchmark.extra_info.update(tools=len(entries), listed=len(got))


def test_listing_cold(benchmark: Any, policy: Policy, identities: list[Identity]) -> None:
    access = Access(policy)
    entries = SCENARIO.tools
    n = itertools.count()
    seen: list[tuple[Identity, Any]] = []

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (_fresh(n, identities), entries), {}

    def listing(identity: Identity, items: tuple[ToolEntry, ...]) -> None:
        seen.append((identity, access.tools_visible(identity, items)))

    benchmark.group = "listing"
    rounds = _rounds(benchmark, LISTING_ROUNDS // 4)
    benchmark.pedantic(listing, setup=setup, rounds=rounds["rounds"],
                       warmup_rounds=rounds["warmup_rounds"])
    for identity, got in seen[:5]:
        assert tuple(got) == _expected_listing(policy, identity)
    benchmark.extra_info.update(tools=len(entries),
                                listed=statistics.mean(len(g) for _, g in seen))


def test_api_key_match(benchmark: Any, tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": list(SCENARIO.keys)}))
    keys: ApiKeys = read_api_keys(str(path), env={})
    entry = SCENARIO.keys[KEYS // 2]
    header = f"Bearer {entry['key']}"
    benchmark.group = "api-key"
    got = benchmark.pedantic(keys.identity_of, args=(header,), **_rounds(benchmark, 50, 20))
    assert got == key_identity(entry)
    benchmark.extra_info.update(keys=KEYS)


# -- reporting ---------------------------------------------------------------------------

def _table(out: list[str], title: str, head: list[str], rows: list[list[str]]) -> None:
    out += [f"{title}\n", "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out.append("")


def _timer(row: dict[str, Any] | None, scale: float, per: str, digits: int) -> str:
    """The median, then the minimum in brackets, divided by ``extra_info[per]``."""
    if row is None or "stats" not in row:
        return "–"
    each = scale / row["extra_info"].get(per, 1)
    return (f"{row['stats']['median'] * each:,.{digits}f} "
            f"({row['stats']['min'] * each:,.{digits}f})")


def render(path: Path) -> str:
    """The markdown tables of a ``--benchmark-json`` file."""
    doc = json.loads(path.read_text())
    benches = doc.get("benchmarks", [])
    http = sorted((b["extra_info"] for b in benches
                   if (b.get("extra_info") or {}).get("policy_gateway") == "http"),
                  key=lambda i: -i["connections"])
    timers = {b["name"].split("[")[0].removeprefix("test_"): b for b in benches}
    out: list[str] = []
    if any(i.get("smoke") for i in http):
        out.append("> **Smoke run** (`--benchmark-disable`, tiny counts): these numbers mean "
                   "nothing.\n")
    if http:
        loads = [x for i in http for c in i["columns"].values() for x in c["load1"]]
        out.append(f"{KEYS:,} API keys taken in turn, {RULES}-rule policy; "
                   f"{http[0]['columns']['keys']['rounds']} rounds per column, interleaved; "
                   f"load average (1 min) {min(loads):.2f}-{max(loads):.2f} during the runs "
                   f"(2 cores).\n")
        _table(out, "Calls/s and latency (median of rounds); keys+policy / keys is the median "
               "of each policy round against the keys round before it:",
               ["in flight", "keys calls/s", "keys+policy calls/s", "keys+policy / keys",
                "keys p50 / p99 ms", "keys+policy p50 / p99 ms", "p50 / p99 added (ms)"],
               [[str(i["connections"]),
                 *(formats.rate(i["columns"][c]["calls_per_s"]) for c in ORDER),
                 f"{i['paired']['calls_per_s_ratio']:.3f}",
                 *(f"{formats.ms(i['columns'][c]['p50_ms'])} / "
                   f"{formats.ms(i['columns'][c]['p99_ms'])}" for c in ORDER),
                 f"{i['paired']['p50_ms_added']:+.3f} / {i['paired']['p99_ms_added']:+.3f}"]
                for i in http])

        def split(c: dict[str, Any]) -> str:
            by = c["cpu_us_per_call_by_role"]
            return (f"{c['cpu_us_per_call']:.0f} = "
                    + " + ".join(f"{by[r]:.0f}" for r in ("gateway", "workers", "upstreams")))

        _table(out, "CPU per call in µs, the target's processes (all = gateway + worker + "
               "upstream; median of rounds), and what the policy adds (median of the rounds' "
               "differences):",
               ["in flight", "keys", "keys+policy", "added, gateway process",
                "added, all processes", "wrk's share of a core (keys, keys+policy)"],
               [[str(i["connections"]), *(split(i["columns"][c]) for c in ORDER),
                 f"{i['paired']['gateway_cpu_us_added']:+.1f}",
                 f"{i['paired']['cpu_us_added']:+.1f}",
                 ", ".join(f"{100 * i['columns'][c]['wrk_cpu_share']:.0f}%" for c in ORDER)]
                for i in http])
        last = http[-1]["status"]
        out.append(f"The policy gateway's `/status` after its runs: {last['identities']:,} "
                   f"identities decided for, {last['allowed']:,} calls allowed, "
                   f"{last['denied']} denied.\n")
    rows = [
        ("decision, cached (one identity, the echo)", "decision_cached_one", 1e9, "decisions",
         0, "ns"),
        ("decision, cached (1,000 identities in turn)", "decision_cached_1000", 1e9,
         "decisions", 0, "ns"),
        ("a call that does nothing (the timer's own cost)", "decision_nothing", 1e9,
         "decisions", 0, "ns"),
        ("decision, a fresh identity (cold)", "decision_cold", 1e6, "decisions", 1, "µs"),
        ("200-tool listing, cached", "listing_cached", 1e6, "", 2, "µs"),
        ("200-tool listing, a fresh identity", "listing_cold", 1e6, "", 0, "µs"),
        ("API key matched among 1,000 (both targets pay it)", "api_key_match", 1e6, "", 1,
         "µs")]
    if any(t in timers for _, t, *_ in rows):
        cold = timers.get("decision_cold", {}).get("extra_info", {})
        listed = timers.get("listing_cached", {}).get("extra_info", {})
        _table(out, f"The decision layer alone (median (minimum) of the rounds); "
               f"{cold.get('rules_about_the_tool', '?')} of the {RULES} rules are about the "
               f"echo; the listing shows {listed.get('listed', '?')} of "
               f"{listed.get('tools', '?')} tools:",
               ["what", "time", "unit"],
               [[what, _timer(timers.get(name), scale, per, digits), unit]
                for what, name, scale, per, digits, unit in rows])
    return "\n".join(out) if out else ""


def instructions(rounds: int, connections: int, seconds: int, warm_s: int,
                 dump_dir: Path | None) -> Iterator[dict[str, Any]]:
    """``gateway_instructions.measure`` of both columns, interleaved: the instructions the
    gateway process executes per call, a count the shared machine does not move."""
    with tempfile.TemporaryDirectory(prefix="bench-policy-instr-") as tmp:
        key_file, wrk_keys = Path(tmp) / "keys.json", Path(tmp) / "keys.txt"
        key_file.write_text(json.dumps({"keys": list(SCENARIO.keys)}))
        wrk_keys.write_text("".join(f"{k['key']}\n" for k in SCENARIO.keys))
        for n in range(rounds):
            for column in ORDER:
                dump = None if dump_dir is None else \
                    dump_dir / f"callgrind.{column.replace('+', '-')}.{n}"
                yield {"column": column, "round": n, **gateway_instructions.measure(
                    None, connections, seconds, "--api-key-file", str(key_file),
                    config_more={"policy": SCENARIO.policy} if column == "keys+policy"
                    else None, script=LUA, script_args=(str(wrk_keys),), warm_s=warm_s,
                    dump_to=dump)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("report", help="the markdown tables from a pytest --benchmark-json file")
    p.add_argument("json", type=Path)
    i = sub.add_parser("instructions", help="instructions per call of both columns under "
                       "callgrind (gateway_instructions.py), one JSON line per run")
    i.add_argument("--rounds", type=int, default=2)
    i.add_argument("--connections", type=int, default=64)
    i.add_argument("--seconds", type=int, default=20)
    i.add_argument("--warm-seconds", type=int, default=30,
                   help="the uncounted run first: long enough to present every key")
    i.add_argument("--dump-dir", type=Path, help="keep each run's callgrind dump here")
    ns = ap.parse_args(argv)
    if ns.cmd == "instructions":
        for line in instructions(ns.rounds, ns.connections, ns.seconds, ns.warm_seconds,
                                 ns.dump_dir):
            print(json.dumps(line), flush=True)
        return 0
    sys.stdout.write(render(ns.json) or f"No policy gateway results in {ns.json}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
