"""Two maintained policy engines for per-identity authorization, on the same policy: CEL
(``common-expression-language``: each rule's condition a compiled ``cel.Program``, its
server and tool globs matched in Python first) and Cedar (``cedarpy``: the rules one
``PolicySet``, the globs ``like`` tests in it, each identity's entities one ``Entities``
handle).

One generator with a fixed seed builds the scenario: 50 rules of the shapes an operator
writes (group allows per server and per tool glob, scope denies on ``delete_*`` and
``write_*``, allows by annotation, email-domain allows and denies, a few conditions on a
call's ``path`` argument), 1,000 identities (groups out of 20, scopes out of 10, emails
at four domains), 200 tools over 10 servers (most annotated). It writes each rule in both
languages. A decision on (identity, tool, action) allows when an allow rule that applies
holds and no deny rule that applies holds; everything else is denied (Cedar's own
semantics: default deny, forbid wins). Actions are ``list`` (the tool is listed) and
``call``.

What is timed (groups):

- ``compile``: loading the 50 rules (CEL: 50 programs and their globs' regexes; Cedar:
  ``PolicySet.from_str``).
- ``decision``: 1,000 uncached decisions on sampled (identity, tool, action), every rule
  that applies evaluated (CEL evaluates them all, no short cut on the first deny). CEL
  three ways: the variables a plain dict (converted at every ``execute``); one
  ``cel.Context`` built per decision and reused by its rules; the identity's
  ``cel.Context`` built once (as Cedar's entities are) with the tool added per decision.
  Cedar: one request per decision, ``is_authorized`` against the identity's handle.
- ``identity``: what a new identity costs once, before its first decision (its
  ``cel.Context``; its Cedar ``Entities`` handle: the catalog's entities plus its own).
- ``listing``: one new identity's decisions on the whole 200-tool catalog (what a
  ``tools/list`` costs the first time an identity asks), that identity's once-only cost
  included; Cedar also as one ``is_authorized_batch``.
- ``arguments``: 1,000 ``call`` decisions on the tools an argument rule names, with a
  ``path`` argument inside or outside the rule's prefix.

``test_engines_agree`` (not a timing) checks that both engines, and the three ways of
running CEL, decide alike on 2,000 triples (30 to which each rule applies, half of them
where it holds; 500 at random), that Cedar met no error, and that every rule both held
and failed in that sample. Each timed case checks its decisions against the other
engine's; timings are never judged.

    .venv/bin/pytest benches/bench_policy_engines.py --benchmark-json=POLICY.json
    .venv/bin/python benches/bench_policy_engines.py report POLICY.json

Smoke run (CI, ``--benchmark-disable``): one round each, every decision still checked.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import random
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import cedarpy
import cel
import pytest

SEED = 40
RULES = 50
IDENTITIES = 1_000
SERVERS = ("github", "gitlab", "tickets", "wiki", "slack", "files", "postgres", "s3",
           "kubernetes", "sentry")
TOOLS_PER_SERVER = 20
GROUPS = ("support", "eng", "sre", "data", "security", "sales", "finance", "legal", "hr",
          "design", "product", "qa", "ops", "research", "marketing", "exec", "interns",
          "contractors", "partners", "admins")
SCOPES = ("admin", "write", "read", "tickets", "deploy", "billing", "pii", "export",
          "audit", "ops")
#: Email domains and their weights: employees, a partner, contractors, anyone.
DOMAINS = (("example.com", 6), ("partner.example", 2), ("contractors.example", 1),
           ("mail.example", 1))
READ_VERBS = ("read", "get", "list", "search")
WRITE_VERBS = ("create", "update", "write")
VERBS = READ_VERBS + WRITE_VERBS + ("delete",)
NOUNS = ("issue", "file", "page", "message", "table", "bucket", "pod", "event", "user",
         "comment", "project", "branch", "query", "report", "secret")
#: A tool in this many has no annotations at all (MCP makes them optional).
UNANNOTATED = 0.2
PATH_PREFIXES = ("/srv/shared/", "/home/public/", "/data/reports/", "/tmp/scratch/")

DECISIONS = 1_000  # per timed round of the decision and argument groups
SAMPLE_PER_RULE = 30
SAMPLE_RANDOM = 500
ROUNDS = 20


# -- the scenario ---------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """One rule in both languages. ``server`` and ``tool`` are globs (``*`` only, which
    Cedar's ``like`` and ``fnmatch`` read alike); ``cel`` is the condition over
    ``identity``, ``tool`` and ``arguments``, ``cedar`` the same over ``principal``,
    ``resource`` and ``context``."""

    deny: bool
    actions: tuple[str, ...]
    server: str
    tool: str
    cel: str
    cedar: str


@dataclass(frozen=True)
class Scenario:
    rules: tuple[Rule, ...]
    identities: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]


BOTH = ("list", "call")


def _in_group(group: str) -> tuple[str, str]:
    return f"'{group}' in identity.groups", f'principal in Group::"{group}"'


def _has_scope(scope: str) -> tuple[str, str]:
    return f"'{scope}' in identity.scopes", f'principal.scopes.contains("{scope}")'


def _email_at(domain: str) -> tuple[str, str]:
    return f"identity.email.endsWith('@{domain}')", f'principal.email like "*@{domain}"'


def _hint(name: str) -> tuple[str, str]:
    return (f"has(tool.annotations.{name}) && tool.annotations.{name}",
            f"resource.annotations has {name} && resource.annotations.{name}")


def _path_under(prefix: str) -> tuple[str, str]:
    return (f"has(arguments.path) && arguments.path.startsWith('{prefix}')",
            f'context.arguments has path && context.arguments.path like "{prefix}*"')


def _and(*conditions: tuple[str, str]) -> tuple[str, str]:
    return (" && ".join(f"({c})" for c, _ in conditions),
            " && ".join(f"({c})" for _, c in conditions))


def _or(*conditions: tuple[str, str]) -> tuple[str, str]:
    return (" || ".join(f"({c})" for c, _ in conditions),
            " || ".join(f"({c})" for _, c in conditions))


def _not(condition: tuple[str, str]) -> tuple[str, str]:
    return f"!({condition[0]})", f"!({condition[1]})"


def _rule(deny: bool, actions: tuple[str, ...], server: str, tool: str,
          condition: tuple[str, str]) -> Rule:
    return Rule(deny, actions, server, tool, *condition)


def _tools(rng: random.Random) -> tuple[dict[str, Any], ...]:
    tools = []
    for server in SERVERS:
        names = rng.sample([f"{verb}_{noun}" for verb in VERBS for noun in NOUNS],
                           TOOLS_PER_SERVER)
        for name in sorted(names):
            verb = name.split("_", 1)[0]
            annotations = {} if rng.random() < UNANNOTATED else {
                "readOnlyHint": verb in READ_VERBS, "destructiveHint": verb == "delete"}
            tools.append({"server": server, "name": name, "annotations": annotations})
    return tuple(tools)


def _identities(rng: random.Random) -> tuple[dict[str, Any], ...]:
    domains = [d for d, _ in DOMAINS]
    weights = [w for _, w in DOMAINS]
    return tuple({"sub": f"user-{i:04d}",
                  "email": f"user{i}@{rng.choices(domains, weights)[0]}",
                  "groups": sorted(rng.sample(GROUPS, rng.randint(0, 4))),
                  "scopes": sorted(rng.sample(SCOPES, rng.randint(0, 3)))}
                 for i in range(IDENTITIES))


def _rules(rng: random.Random, tools: tuple[dict[str, Any], ...]) -> tuple[Rule, ...]:
    rules = [
        # Read-only tools, for everyone.
        _rule(False, BOTH, "*", "*", _hint("readOnlyHint")),
        # Server tickets, for support.
        _rule(False, BOTH, "tickets", "*", _in_group("support")),
        # Destructive tools, never for contractors.
        _rule(True, BOTH, "*", "*", _and(_email_at("contractors.example"),
                                         _hint("destructiveHint"))),
        _rule(True, BOTH, "kubernetes", "*", _email_at("contractors.example")),
    ]
    # A server for a group.
    rules += [_rule(False, BOTH, rng.choice(SERVERS), "*", _in_group(rng.choice(GROUPS)))
              for _ in range(12)]
    # Some of a server's tools for a group, the servers sometimes a glob.
    rules += [_rule(False, BOTH, rng.choice((*SERVERS, "git*", "*s")),
                    f"{rng.choice(VERBS)}_*", _in_group(rng.choice(GROUPS)))
              for _ in range(8)]
    # Scope denies: deleting needs admin, writing needs write; a server needs its scope.
    rules += [_rule(True, BOTH, "*", "delete_*", _not(_has_scope("admin"))),
              _rule(True, BOTH, "*", "write_*", _not(_has_scope("write"))),
              _rule(True, ("call",), "postgres", "*", _not(_has_scope("pii"))),
              _rule(True, BOTH, "s3", "*", _not(_or(_has_scope("export"),
                                                    _has_scope("admin")))),
              _rule(True, ("call",), "*", "update_*", _and(_not(_has_scope("write")),
                                                            _not(_in_group("admins"))))]
    # Email domains: the partner's domain on a few servers, employees on others.
    rules += [_rule(False, BOTH, rng.choice(SERVERS), "*", _email_at("partner.example"))
              for _ in range(4)]
    rules += [_rule(False, BOTH, rng.choice(SERVERS), rng.choice(("*", "get_*", "list_*")),
                    _email_at("example.com"))
              for _ in range(3)]
    # A group holding a scope; either of two groups.
    rules += [_rule(False, BOTH, rng.choice(SERVERS), "*",
                    _and(_in_group(rng.choice(GROUPS)), _has_scope(rng.choice(SCOPES))))
              for _ in range(5)]
    rules += [_rule(False, BOTH, rng.choice(SERVERS), "*",
                    _or(*(_in_group(g) for g in rng.sample(GROUPS, 2))))
              for _ in range(3)]
    # Annotations and a domain: unannotated or destructive tools for employees in sre.
    rules += [_rule(False, BOTH, "*", "*", _and(_email_at("example.com"),
                                                _in_group("sre"),
                                                _hint("destructiveHint"))),
              _rule(False, BOTH, rng.choice(SERVERS), "*",
                    _and(_not(_hint("readOnlyHint")), _in_group("ops")))]
    # Arguments: a tool's path under a prefix, as a deny (outside it) and as an allow.
    named = rng.sample([t for t in tools if t["server"] in ("files", "s3")], 4)
    for i, tool in enumerate(named):
        prefix = PATH_PREFIXES[i]
        if i % 2:
            rules.append(_rule(False, ("call",), tool["server"], tool["name"],
                               _and(_in_group(rng.choice(GROUPS)), _path_under(prefix))))
        else:
            rules.append(_rule(True, ("call",), tool["server"], tool["name"],
                               _not(_path_under(prefix))))
    assert len(rules) == RULES, len(rules)
    return tuple(rules)


def scenario(seed: int = SEED) -> Scenario:
    rng = random.Random(seed)
    tools = _tools(rng)
    return Scenario(_rules(rng, tools), _identities(rng), tools)


SCENARIO = scenario()
ARGUMENT_TOOLS = tuple(t for t in SCENARIO.tools
                       if any(r.actions == ("call",) and "arguments" in r.cel
                              and fnmatch.fnmatchcase(t["name"], r.tool)
                              and fnmatch.fnmatchcase(t["server"], r.server)
                              for r in SCENARIO.rules))


@dataclass(frozen=True)
class Ask:
    """One decision to take: who, on what, which action, with which arguments."""

    identity: int
    tool: int
    action: str
    arguments: dict[str, Any]


def _arguments(rng: random.Random) -> dict[str, Any]:
    return {"path": rng.choice(PATH_PREFIXES) + rng.choice(("a.txt", "deep/b.csv")),
            "recursive": rng.random() < 0.5}


def _ask(rng: random.Random, tool: int, action: str | None = None) -> Ask:
    action = action or rng.choice(BOTH)
    return Ask(rng.randrange(IDENTITIES), tool, action,
               _arguments(rng) if action == "call" else {})


def random_asks(seed: int, n: int) -> list[Ask]:
    rng = random.Random(seed)
    return [_ask(rng, rng.randrange(len(SCENARIO.tools))) for _ in range(n)]


def argument_asks(seed: int, n: int) -> list[Ask]:
    rng = random.Random(seed)
    indexes = [SCENARIO.tools.index(t) for t in ARGUMENT_TOOLS]
    return [_ask(rng, rng.choice(indexes), "call") for _ in range(n)]


def agreement_sample(seed: int, holds: Callable[[int, Ask], bool]) -> list[Ask]:
    """Triples to which each rule applies, half of them where its condition holds (found
    by trying random ones: ``holds(rule index, ask)``), then random ones."""
    rng = random.Random(seed)
    asks = []
    for i, rule in enumerate(SCENARIO.rules):
        tools = [t for t, tool in enumerate(SCENARIO.tools)
                 if fnmatch.fnmatchcase(tool["server"], rule.server)
                 and fnmatch.fnmatchcase(tool["name"], rule.tool)]
        candidates = (_ask(rng, rng.choice(tools), rng.choice(rule.actions))
                      for _ in range(100_000))
        asks += itertools.islice(candidates, SAMPLE_PER_RULE // 2)
        asks += itertools.islice((a for a in candidates if holds(i, a)), SAMPLE_PER_RULE // 2)
    return asks + random_asks(seed + 1, SAMPLE_RANDOM)


# -- CEL --------------------------------------------------------------------------------

@dataclass(frozen=True)
class CelRule:
    deny: bool
    actions: frozenset[str]
    server: Callable[[str], Any]
    tool: Callable[[str], Any]
    condition: cel.Program


class CelPolicy:
    """The rules compiled once: each glob a regex, each condition a ``cel.Program``.

    ``decide`` takes the variables already made (a dict, or a ``cel.Context``): how they
    are made is what the three ways of running CEL differ in."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = tuple(
            CelRule(r.deny, frozenset(r.actions), re.compile(fnmatch.translate(r.server)).match,
                    re.compile(fnmatch.translate(r.tool)).match, cel.compile(r.cel))
            for r in rules)

    def decide(self, tool: dict[str, Any], action: str, variables: Any) -> bool:
        allowed = denied = False
        server, name = tool["server"], tool["name"]
        for rule in self.rules:
            if (action in rule.actions and rule.server(server) and rule.tool(name)
                    and rule.condition.execute(variables)):
                if rule.deny:
                    denied = True
                else:
                    allowed = True
        return allowed and not denied

    def holds(self, index: int, ask: Ask) -> bool:
        """Whether rule ``index``'s condition holds for ``ask`` (the agreement sample)."""
        return bool(self.rules[index].condition.execute(_variables(ask)))

    def applied(self, ask: Ask) -> list[tuple[int, bool]]:
        """Which rules applied to ``ask`` and whether each held (the agreement test)."""
        tool = SCENARIO.tools[ask.tool]
        variables = _variables(ask)
        return [(i, bool(rule.condition.execute(variables)))
                for i, rule in enumerate(self.rules)
                if ask.action in rule.actions and rule.server(tool["server"])
                and rule.tool(tool["name"])]


def _variables(ask: Ask) -> dict[str, Any]:
    return {"identity": SCENARIO.identities[ask.identity], "tool": SCENARIO.tools[ask.tool],
            "arguments": ask.arguments}


def identity_context(identity: dict[str, Any]) -> cel.Context:
    """An identity's variables, converted once; the tool and arguments are added per
    decision."""
    return cel.Context(variables={"identity": identity, "arguments": {}})


def cel_dict(policy: CelPolicy, ask: Ask, _: Any = None) -> bool:
    return policy.decide(SCENARIO.tools[ask.tool], ask.action, _variables(ask))


def cel_context(policy: CelPolicy, ask: Ask, _: Any = None) -> bool:
    return policy.decide(SCENARIO.tools[ask.tool], ask.action,
                         cel.Context(variables=_variables(ask)))


def cel_identity_context(policy: CelPolicy, ask: Ask, contexts: list[cel.Context]) -> bool:
    tool = SCENARIO.tools[ask.tool]
    context = contexts[ask.identity]
    context.update({"tool": tool, "arguments": ask.arguments})
    return policy.decide(tool, ask.action, context)


CEL_WAYS: dict[str, Callable[[CelPolicy, Ask, Any], bool]] = {
    "cel-dict": cel_dict, "cel-context": cel_context,
    "cel-identity-context": cel_identity_context}


# -- Cedar ------------------------------------------------------------------------------

def cedar_policy_text(rules: tuple[Rule, ...]) -> str:
    """Each rule one policy, in order (``policy0`` ... ``policy49``). A server named
    exactly is the resource's parent in the scope; globs are ``like`` tests."""
    out = []
    for rule in rules:
        actions = ", ".join(f'Action::"{a}"' for a in rule.actions)
        resource = "resource"
        tests = []
        if "*" not in rule.server:
            resource = f'resource in Server::"{rule.server}"'
        elif rule.server != "*":
            tests.append(f'resource.server like "{rule.server}"')
        if rule.tool != "*":
            tests.append(f'resource.name like "{rule.tool}"')
        tests.append(f"({rule.cedar})")
        out.append(f"{'forbid' if rule.deny else 'permit'} (principal, "
                   f"action in [{actions}], {resource})\n"
                   f"when {{ {' && '.join(tests)} }};")
    return "\n".join(out)


def _tool_uid(tool: dict[str, Any]) -> dict[str, str]:
    return {"type": "Tool", "id": f"{tool['server']}/{tool['name']}"}


def catalog_entities() -> cedarpy.Entities:
    """Every identity's entities hold these: the groups, the servers, the tools."""
    entities = [{"uid": {"type": "Group", "id": g}, "attrs": {}, "parents": []}
                for g in GROUPS]
    entities += [{"uid": {"type": "Server", "id": s}, "attrs": {}, "parents": []}
                 for s in SERVERS]
    entities += [{"uid": _tool_uid(t), "attrs": t,
                  "parents": [{"type": "Server", "id": t["server"]}]}
                 for t in SCENARIO.tools]
    return cedarpy.Entities.from_json_str(json.dumps(entities))


def identity_entities(catalog: cedarpy.Entities, identity: dict[str, Any]) -> cedarpy.Entities:
    """The catalog's entities and the identity's own: a user in its groups."""
    user = {"uid": {"type": "User", "id": identity["sub"]},
            "attrs": {"email": identity["email"], "scopes": identity["scopes"]},
            "parents": [{"type": "Group", "id": g} for g in identity["groups"]]}
    return catalog.with_added_json_str(json.dumps([user]))


def cedar_request(ask: Ask) -> dict[str, Any]:
    return {"principal": {"type": "User", "id": SCENARIO.identities[ask.identity]["sub"]},
            "action": {"type": "Action", "id": ask.action},
            "resource": _tool_uid(SCENARIO.tools[ask.tool]),
            "context": {"arguments": ask.arguments}}


def cedar_decide(policies: cedarpy.PolicySet, ask: Ask,
                 entities: list[cedarpy.Entities]) -> bool:
    return cedarpy.is_authorized(cedar_request(ask), policies, entities[ask.identity]).allowed


# -- fixtures -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cel_policy() -> CelPolicy:
    return CelPolicy(SCENARIO.rules)


@pytest.fixture(scope="module")
def cedar_policies() -> cedarpy.PolicySet:
    return cedarpy.PolicySet.from_str(cedar_policy_text(SCENARIO.rules))


@pytest.fixture(scope="module")
def catalog() -> cedarpy.Entities:
    return catalog_entities()


@pytest.fixture(scope="module")
def entities(catalog: cedarpy.Entities) -> list[cedarpy.Entities]:
    return [identity_entities(catalog, identity) for identity in SCENARIO.identities]


@pytest.fixture(scope="module")
def contexts() -> list[cel.Context]:
    return [identity_context(identity) for identity in SCENARIO.identities]


def _rounds(benchmark: Any, rounds: int = ROUNDS) -> dict[str, int]:
    disabled = benchmark.disabled
    return {"rounds": 1 if disabled else rounds, "iterations": 1,
            "warmup_rounds": 0 if disabled else 1}


def _cedar_decisions(policies: cedarpy.PolicySet, entities: list[cedarpy.Entities],
                     asks: list[Ask]) -> list[bool]:
    return [cedar_decide(policies, ask, entities) for ask in asks]


# -- the agreement check (not a timing) -------------------------------------------------

def test_engines_agree(cel_policy: CelPolicy, cedar_policies: cedarpy.PolicySet,
                       entities: list[cedarpy.Entities], contexts: list[cel.Context]) -> None:
    asks = agreement_sample(SEED, cel_policy.holds)
    assert len(asks) == RULES * SAMPLE_PER_RULE + SAMPLE_RANDOM == 2_000
    held: dict[int, set[bool]] = {i: set() for i in range(RULES)}
    for ask in asks:
        for i, outcome in cel_policy.applied(ask):
            held[i].add(outcome)
        result = cedarpy.is_authorized(cedar_request(ask), cedar_policies,
                                       entities[ask.identity])
        assert result.diagnostics.errors == [], (ask, result.diagnostics.errors)
        cedar = result.allowed
        for way, decide in CEL_WAYS.items():
            assert decide(cel_policy, ask, contexts) == cedar, (way, ask, cedar)
    # Every rule made a difference somewhere in the sample: it held, and it failed.
    assert {i: v for i, v in held.items() if v != {True, False}} == {}


# -- timings ------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["cel", "cedar"])
def test_compile(benchmark: Any, engine: str) -> None:
    benchmark.group = "compile"
    text = cedar_policy_text(SCENARIO.rules)
    if engine == "cel":
        # re keeps compiled patterns: purged before each round, every glob is compiled.
        loaded = benchmark.pedantic(CelPolicy, args=(SCENARIO.rules,), setup=re.purge,
                                    **_rounds(benchmark, 50))
        assert len(loaded.rules) == RULES
    else:
        loaded = benchmark.pedantic(cedarpy.PolicySet.from_str, args=(text,),
                                    **_rounds(benchmark, 50))
        assert len(loaded.to_pst().static_policies) == RULES
    benchmark.extra_info.update(rules=RULES)


def _expected(cel_policy: CelPolicy, cedar_policies: cedarpy.PolicySet,
              entities: list[cedarpy.Entities], engine: str, asks: list[Ask]) -> list[bool]:
    """The other engine's decisions, which the timed one's must equal."""
    if engine == "cedar":
        return [cel_dict(cel_policy, ask) for ask in asks]
    return _cedar_decisions(cedar_policies, entities, asks)


def _decisions(benchmark: Any, group: str, engine: str, asks: list[Ask],
               cel_policy: CelPolicy, cedar_policies: cedarpy.PolicySet,
               entities: list[cedarpy.Entities], contexts: list[cel.Context]) -> None:
    benchmark.group = group
    if engine == "cedar":
        def run() -> list[bool]:
            return [cedar_decide(cedar_policies, ask, entities) for ask in asks]
    else:
        decide = CEL_WAYS[engine]

        def run() -> list[bool]:
            return [decide(cel_policy, ask, contexts) for ask in asks]
    got = benchmark.pedantic(run, **_rounds(benchmark))
    assert got == _expected(cel_policy, cedar_policies, entities, engine, asks)
    evaluated = sum(len(cel_policy.applied(ask)) for ask in asks)
    benchmark.extra_info.update(decisions=len(asks), allowed=sum(got),
                                conditions_per_decision=evaluated / len(asks))


ENGINES = [*CEL_WAYS, "cedar"]


@pytest.mark.parametrize("engine", ENGINES)
def test_decision(benchmark: Any, engine: str, cel_policy: CelPolicy,
                  cedar_policies: cedarpy.PolicySet, entities: list[cedarpy.Entities],
                  contexts: list[cel.Context]) -> None:
    _decisions(benchmark, "decision", engine, random_asks(SEED + 2, DECISIONS),
               cel_policy, cedar_policies, entities, contexts)


@pytest.mark.parametrize("engine", ENGINES)
def test_argument_check(benchmark: Any, engine: str, cel_policy: CelPolicy,
                        cedar_policies: cedarpy.PolicySet, entities: list[cedarpy.Entities],
                        contexts: list[cel.Context]) -> None:
    _decisions(benchmark, "arguments", engine, argument_asks(SEED + 3, DECISIONS),
               cel_policy, cedar_policies, entities, contexts)
    benchmark.extra_info.update(tools=len(ARGUMENT_TOOLS))


@pytest.mark.parametrize("engine", ["cel-identity-context", "cedar"])
def test_new_identity(benchmark: Any, engine: str, catalog: cedarpy.Entities) -> None:
    benchmark.group = "identity"
    identities = SCENARIO.identities[:100]
    if engine == "cedar":
        def run() -> list[Any]:
            return [identity_entities(catalog, identity) for identity in identities]
    else:
        def run() -> list[Any]:
            return [identity_context(identity) for identity in identities]
    built = benchmark.pedantic(run, **_rounds(benchmark))
    assert len(built) == len(identities)
    benchmark.extra_info.update(identities=len(identities))


def _listing(engine: str, identity: int, cel_policy: CelPolicy,
             cedar_policies: cedarpy.PolicySet, catalog: cedarpy.Entities) -> list[bool]:
    """One identity's ``list`` decisions on every tool, its once-only cost included."""
    asks = [Ask(identity, i, "list", {}) for i in range(len(SCENARIO.tools))]
    if engine == "cedar":
        handle = [identity_entities(catalog, SCENARIO.identities[identity])]
        return [cedarpy.is_authorized(cedar_request(ask), cedar_policies, handle[0]).allowed
                for ask in asks]
    if engine == "cedar-batch":
        handle = identity_entities(catalog, SCENARIO.identities[identity])
        return [r.allowed for r in cedarpy.is_authorized_batch(
            [cedar_request(ask) for ask in asks], cedar_policies, handle)]
    if engine == "cel-identity-context":
        context = identity_context(SCENARIO.identities[identity])
        out = []
        for tool in SCENARIO.tools:
            context.add_variable("tool", tool)
            out.append(cel_policy.decide(tool, "list", context))
        return out
    decide = CEL_WAYS[engine]
    return [decide(cel_policy, ask, None) for ask in asks]


@pytest.mark.parametrize("engine", [*ENGINES, "cedar-batch"])
def test_listing(benchmark: Any, engine: str, cel_policy: CelPolicy,
                 cedar_policies: cedarpy.PolicySet, catalog: cedarpy.Entities,
                 entities: list[cedarpy.Entities]) -> None:
    benchmark.group = "listing"
    rounds = _rounds(benchmark, 50)
    # Every round a new identity.
    order: Iterator[int] = itertools.cycle(random.Random(SEED + 4).sample(
        range(IDENTITIES), rounds["rounds"] + rounds["warmup_rounds"]))
    seen: list[tuple[int, list[bool]]] = []

    def run(identity: int) -> None:
        seen.append((identity, _listing(engine, identity, cel_policy, cedar_policies,
                                        catalog)))
    benchmark.pedantic(run, setup=lambda: ((next(order),), {}), **rounds)
    for identity, got in seen:
        asks = [Ask(identity, i, "list", {}) for i in range(len(SCENARIO.tools))]
        assert got == _expected(cel_policy, cedar_policies, entities,
                                "cedar" if engine.startswith("cedar") else "cel", asks)
    benchmark.extra_info.update(tools=len(SCENARIO.tools),
                                listed=sum(map(sum, (got for _, got in seen))) / len(seen))


# -- report -------------------------------------------------------------------------------

def report(path: str) -> str:
    with open(path) as f:
        data = json.load(f)
    rows = {(b["group"], b["params"]["engine"]): b for b in data["benchmarks"]}

    def stat(group: str, engine: str, per: str | None, scale: float, digits: int) -> str:
        """The median per decision (or identity), then the minimum in brackets."""
        row = rows.get((group, engine))
        if row is None:
            return "—"
        each = scale / (row["extra_info"][per] if per else 1)
        return (f"{row['stats']['median'] * each:,.{digits}f} "
                f"({row['stats']['min'] * each:,.{digits}f})")

    decision = rows.get(("decision", "cel-dict"), {}).get("extra_info", {})
    lines = [
        f"{RULES} rules, {IDENTITIES:,} identities, {len(SCENARIO.tools)} tools over "
        f"{len(SERVERS)} servers; median (minimum) of the rounds; a decision evaluates "
        f"{decision.get('conditions_per_decision', float('nan')):.1f} CEL conditions on "
        "average (the rules that apply to it).", "",
        "| engine | compile 50 rules (ms) | µs per decision | new identity (µs) "
        "| ms per 200-tool listing | µs per argument check |",
        "|---|---:|---:|---:|---:|---:|"]
    for engine in (*CEL_WAYS, "cedar", "cedar-batch"):
        base = "cel" if engine.startswith("cel") else "cedar"
        lines.append(
            f"| {engine} | {stat('compile', base, None, 1e3, 2)} "
            f"| {stat('decision', engine, 'decisions', 1e6, 1)} "
            f"| {stat('identity', engine, 'identities', 1e6, 1)} "
            f"| {stat('listing', engine, None, 1e3, 2)} "
            f"| {stat('arguments', engine, 'decisions', 1e6, 1)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "report":
        sys.exit("usage: bench_policy_engines.py report POLICY.json")
    print(report(sys.argv[2]))
