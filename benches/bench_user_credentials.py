"""What each user's own credential costs a call through ``trunkline serve`` (issue 41): one
HTTP upstream reached with one shared credential beside the same upstream reached as each
of 1,000 identities, each with its own token already stored.

The upstream is ``http_echo_server.py``'s ``/mcp/echo`` (one process for both targets; it
asks for no credential and counts each ``tools/call``'s ``Authorization`` value). Two
targets started the same way, ``trunkline serve CONFIG --http --api-key-file KEYS`` with
1,000 named API keys (the cheapest identities: ``{"name": "u0001", "key": ...}``):

* ``shared``    the server with ``"credentials": "shared"`` and one static
                ``Authorization`` header (``"headers"``): every call carries the same token;
* ``per_user``  the server with ``"credentials": "per_user"``, the configuration's
                ``"oauth"`` ``"store"`` a sealed ``FileStore`` (``TRUNKLINE_STORE_KEY``)
                where each of the 1,000 identities' token records was written before the
                gateway started (``UserTokenStore(store, identity).save``), valid for a
                year: no sign-in, no refresh, only each identity's own catalog and
                credential slot.

Before anything is timed, every identity makes one checked call through each target (the
per-user one lists the upstream as that identity then), and the upstream is checked to
have seen each identity's own token on its call (``per_user``) or the one shared token
(``shared``). wrk runs ``wrk/tools_call_keys.lua``: the requests take the 1,000 keys in
turn, so the calls in flight present different identities and every round presents them
all. At 64 connections, then 1 (for latency), the rounds run interleaved (shared,
per_user, shared, ...) so both see the same machine. Per round: calls/s, p50/p99, the CPU
the gateway process and its worker used per call (the upstream's own CPU apart, from its
``/stats``), the load average, and which tokens the upstream saw. A ratio or a difference
is the median over rounds of one per_user round against the shared round just before it.

    .venv/bin/pytest benches/bench_user_credentials.py --benchmark-json=UC.json   # ~2.5 min
    .venv/bin/python benches/bench_user_credentials.py report UC.json
    .venv/bin/pytest benches/bench_user_credentials.py --benchmark-disable        # smoke (CI)

The smoke pass uses 8 identities and one short round per column.

``TRUNKLINE_BENCH_PROFILE=DIR`` runs each gateway under cProfile, its statistics written
to ``DIR/<column>.prof`` when it stops (a profiled run's timings are not comparable).

Timings are never pass/fail. A case fails when a call fails (a non-2xx, a JSON-RPC error,
a result that is not the echo of that very call, a socket error or a wrk timeout), or when
the upstream saw fewer calls than wrk counted with the column's own token (the shared one,
or the identities'), more than the run's connections with the other column's (the calls
still in flight when the run before ended), a call with no token or any other one, or a
round's per_user calls not spread over every identity the round presented.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

import formats
import gateway_load
from trunkline.auth.resource import canonical_uri
from trunkline.auth.sealing import KEY_ENV, StoreKeys, new_key
from trunkline.auth.secret import Secret
from trunkline.auth.store import Binding, FileStore
from trunkline.auth.tokens import Token
from trunkline.auth.user_store import UserTokenStore
from trunkline.policy.identity import Identity

KEYS = 1_000
SMOKE_KEYS = 8
ORDER = ("shared", "per_user")
CONNECTIONS = (64, 1)
ROUNDS = 6
ROUND_S = 5
SMOKE_S = 1
LUA = gateway_load.BENCHES / "wrk" / "tools_call_keys.lua"
SHARED_TOKEN = "Bearer shared-bench-token"
ISSUER = "https://issuer.bench.invalid"  # never asked: the stored tokens are all valid
TOKEN_LIFETIME_S = 365 * 24 * 3600.0
PROFILE_ENV = "TRUNKLINE_BENCH_PROFILE"


def user_token(i: int) -> str:
    return f"user-bench-token-{i:04d}"


class Targets:
    """The upstream, the two gateways, their key files and the per-user store, started on
    first use."""

    def __init__(self, keys: int) -> None:
        self.keys = keys
        self.dir = tempfile.TemporaryDirectory(prefix="bench-user-creds-")
        here = Path(self.dir.name)
        self.entries = [{"name": f"u{i:04d}", "key": f"tk-user-{i:04d}-{os.urandom(8).hex()}"}
                        for i in range(keys)]
        self.key_file = here / "keys.json"
        self.key_file.write_text(json.dumps({"keys": self.entries}))
        self.wrk_keys = here / "keys.txt"  # for wrk: the values alone, one a line
        self.wrk_keys.write_text("".join(f"{k['key']}\n" for k in self.entries))
        self.store_dir = here / "store"
        self.store_key = new_key()
        self.upstream = gateway_load._spawn(
            "upstream", [sys.executable, str(gateway_load.HTTP_ECHO)], b"PORT ", self.dir,
            stdin=subprocess.PIPE)[0:2]
        self.upstream_url = f"http://127.0.0.1:{self.upstream[1]}/mcp/echo"
        self._started: dict[str, gateway_load.Target] = {}

    def stats(self) -> dict[str, Any]:
        return gateway_load.http_get_json(self.upstream_url.rsplit("/mcp", 1)[0] + "/stats")

    async def _store_tokens(self) -> None:
        store = FileStore(self.store_dir, keys=StoreKeys.from_environment(
            {KEY_ENV: self.store_key}))
        server = canonical_uri(self.upstream_url)
        now = time.time()
        for i, entry in enumerate(self.entries):
            token = Token(access_token=Secret(user_token(i)), issued_at=now,
                          expires_at=now + TOKEN_LIFETIME_S, refresh_token=None, scope=None,
                          issuer=ISSUER, resource=server)
            await UserTokenStore(store, Identity.api_key(entry["name"])).save(
                Binding(server=server, issuer=ISSUER, token=token))

    def get(self, column: str) -> gateway_load.Target:
        if column not in self._started:
            self._started[column] = self._start(column)
        return self._started[column]

    def _start(self, column: str) -> gateway_load.Target:
        workdir = tempfile.TemporaryDirectory(prefix=f"bench-user-creds-{column}-")
        server: dict[str, Any] = {"url": self.upstream_url}
        config: dict[str, Any] = {"mcpServers": {"echo": server}}
        env = dict(os.environ)
        if column == "shared":
            server.update(credentials="shared", headers={"Authorization": SHARED_TOKEN})
        else:
            asyncio.run(self._store_tokens())
            server["credentials"] = "per_user"
            config["oauth"] = {"store": str(self.store_dir)}
            env[KEY_ENV] = self.store_key
        path = Path(workdir.name) / "mcp.json"
        path.write_text(json.dumps(config))
        argv = [sys.executable]
        profile_dir = os.environ.get(PROFILE_ENV)
        if profile_dir:
            argv += ["-m", "cProfile", "-o", str(Path(profile_dir) / f"{column}.prof")]
        argv += ["-m", "trunkline", "serve", str(path), "--http", "127.0.0.1:0",
                 "--limit", "peer_connections=65536", "--api-key-file", str(self.key_file)]
        proc, url, err = gateway_load._spawn(column, argv, b"LISTENING ", workdir,
                                             stdin=subprocess.DEVNULL, env=env)
        return gateway_load.Target(column, proc, url, arg="text", stderr_path=err,
                                   workdir=workdir)

    def warm(self, column: str) -> None:
        """One checked call per identity, in order (the per-user target lists the
        upstream as each identity on its first)."""
        target = self.get(column)
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=30)
        try:
            for i, entry in enumerate(self.entries):
                rid = f"warm-{column}-{i}"
                body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                                   "params": {"name": "echo", "arguments": {"text": rid},
                                              "_meta": {
                                                  "io.modelcontextprotocol/protocolVersion":
                                                      gateway_load.MODERN,
                                                  "io.modelcontextprotocol/clientCapabilities":
                                                      {}}}})
                conn.request("POST", "/mcp", body, {
                    "Content-Type": "application/json", "Accept": gateway_load.JSON_ONLY,
                    "MCP-Protocol-Version": gateway_load.MODERN, "Mcp-Method": "tools/call",
                    "Mcp-Name": "echo", "Authorization": f"Bearer {entry['key']}"})
                answer = conn.getresponse()
                doc = json.loads(answer.read())
                text = doc.get("result", {}).get("content", [{}])[0].get("text")
                assert answer.status == 200 and text == rid, (answer.status, doc,
                                                              target.stderr_tail())
        finally:
            conn.close()

    def stop(self) -> None:
        for target in self._started.values():
            target.stop()
        self._started.clear()
        proc = self.upstream[0]
        assert proc.stdin is not None
        proc.stdin.close()  # it exits on stdin EOF
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        self.dir.cleanup()


def check_tokens(targets: Targets, column: str, seen: dict[str, int], calls: int,
                 stragglers: int = 0) -> int:
    """The upstream saw at least ``calls`` calls with the shared token (``shared``), or with
    the identities' own tokens, spread over at least ``calls`` of them (at most all:
    ``per_user``); besides them at most ``stragglers`` with the other column's token (the
    calls in flight when the run before ended reach the upstream after it); never any
    other value, and never no token. The number of distinct identities' tokens seen."""
    users = {f"Bearer {user_token(i)}" for i in range(targets.keys)}
    assert set(seen) <= users | {SHARED_TOKEN}, sorted(set(seen) - users - {SHARED_TOKEN})[:5]
    own = {v: n for v, n in seen.items() if (v == SHARED_TOKEN) == (column == "shared")}
    other = sum(seen.values()) - sum(own.values())
    assert sum(own.values()) >= calls and other <= stragglers, (column, calls, other, stragglers)
    if column == "per_user":
        assert len(own) >= min(calls, targets.keys), (len(own), calls)
    return len(own) if column == "per_user" else 0


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


@pytest.fixture(scope="module")
def targets(request: pytest.FixtureRequest) -> Iterator[Targets]:
    if shutil.which("wrk") is None:
        pytest.fail("wrk is not installed (.ci/install-system installs it)")
    smoke = request.config.getoption("benchmark_disable", False)
    held = Targets(SMOKE_KEYS if smoke else KEYS)
    try:
        for column in ORDER:
            before = held.stats()["echo_authorizations"]
            held.warm(column)
            seen = _delta(before, held.stats()["echo_authorizations"])
            check_tokens(held, column, seen, held.keys)
            if column == "per_user":  # one call each, each with its own token
                assert set(seen.values()) == {1}, seen
        yield held
    finally:
        held.stop()


def _wrk(targets: Targets, column: str, connections: int, seconds: int) -> dict[str, Any]:
    load0 = os.getloadavg()[0]
    stats0 = targets.stats()
    result = gateway_load.run_wrk(targets.get(column), connections, seconds, script=LUA,
                                  script_args=(str(targets.wrk_keys),))
    stats1 = targets.stats()
    seen = _delta(stats0["echo_authorizations"], stats1["echo_authorizations"])
    tokens = check_tokens(targets, column, seen, result.calls, stragglers=connections)
    return {**asdict(result), "upstream_cpu_s": stats1["cpu_s"] - stats0["cpu_s"],
            "tokens_seen": tokens, "load1": [load0, os.getloadavg()[0]]}


@pytest.mark.parametrize("connections", [pytest.param(n, id=f"c{n}") for n in CONNECTIONS])
def test_user_credentials(benchmark: Any, targets: Targets, connections: int) -> None:
    smoke = bool(benchmark.disabled)
    rounds: dict[str, list[dict[str, Any]]] = {c: [] for c in ORDER}

    def one_round() -> None:
        for column in ORDER:  # interleaved: each round runs both, shared first
            rounds[column].append(_wrk(targets, column, connections,
                                       SMOKE_S if smoke else ROUND_S))

    benchmark.group = f"user-credentials-c{connections}"
    benchmark.pedantic(one_round, rounds=1 if smoke else ROUNDS, iterations=1,
                       warmup_rounds=0)
    benchmark.extra_info.update(
        user_credentials="http", connections=connections, smoke=smoke, keys=targets.keys,
        columns={c: _summary(rs) for c, rs in rounds.items()},
        paired=gateway_load.paired_rounds(rounds["shared"], rounds["per_user"]))


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """A column's medians over its rounds, and the rounds."""
    med = {k: statistics.median(r[k] for r in rounds) for k in ("calls_per_s", "p50_ms", "p99_ms")}
    return dict(rounds=len(rounds), **med,
                cpu_us_per_call=statistics.median(gateway_load.cpu_us_per_call(r) for r in rounds),
                cpu_us_per_call_by_role={
                    role: statistics.median(gateway_load.cpu_us_per_call(r, role) for r in rounds)
                    for role in ("gateway", "workers")},
                upstream_cpu_us_per_call=statistics.median(
                    1e6 * r["upstream_cpu_s"] / r["calls"] for r in rounds),
                wrk_cpu_share=statistics.median(r["wrk_cpu_s"] / r["seconds"] for r in rounds),
                tokens_seen=min(r["tokens_seen"] for r in rounds),
                load1=[min(min(r["load1"]) for r in rounds), max(max(r["load1"]) for r in rounds)],
                per_round=rounds)


# -- reporting ---------------------------------------------------------------------------

def _table(out: list[str], title: str, head: list[str], rows: list[list[str]]) -> None:
    out += [f"{title}\n", "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out.append("")


def render(path: Path) -> str:
    """The markdown tables of a ``--benchmark-json`` file."""
    doc = json.loads(path.read_text())
    runs = sorted((b["extra_info"] for b in doc.get("benchmarks", [])
                   if (b.get("extra_info") or {}).get("user_credentials") == "http"),
                  key=lambda i: -i["connections"])
    if not runs:
        return ""
    out: list[str] = []
    if any(i.get("smoke") for i in runs):
        out.append("> **Smoke run** (`--benchmark-disable`, tiny counts): these numbers mean "
                   "nothing.\n")
    loads = [x for i in runs for c in i["columns"].values() for x in c["load1"]]
    out.append(f"{runs[0]['keys']:,} API keys taken in turn, one HTTP upstream; "
               f"{runs[0]['columns']['shared']['rounds']} rounds per column, interleaved; "
               f"load average (1 min) {min(loads):.2f}-{max(loads):.2f} during the runs "
               f"(2 cores).\n")
    _table(out, "Calls/s and latency (median of rounds); per_user / shared is the median of "
           "each per_user round against the shared round before it:",
           ["in flight", "shared calls/s", "per_user calls/s", "per_user / shared",
            "shared p50 / p99 ms", "per_user p50 / p99 ms", "p50 / p99 added (ms)"],
           [[str(i["connections"]),
             *(formats.rate(i["columns"][c]["calls_per_s"]) for c in ORDER),
             f"{i['paired']['calls_per_s_ratio']:.3f}",
             *(f"{formats.ms(i['columns'][c]['p50_ms'])} / "
               f"{formats.ms(i['columns'][c]['p99_ms'])}" for c in ORDER),
             f"{i['paired']['p50_ms_added']:+.3f} / {i['paired']['p99_ms_added']:+.3f}"]
            for i in runs])

    def split(c: dict[str, Any]) -> str:
        by = c["cpu_us_per_call_by_role"]
        return f"{c['cpu_us_per_call']:.0f} = {by['gateway']:.0f} + {by['workers']:.0f}"

    _table(out, "CPU per call in µs (gateway + worker; median of rounds), what per_user adds "
           "(median of the rounds' differences), and the upstream's own:",
           ["in flight", "shared", "per_user", "added, gateway process", "added, both",
            "upstream (shared, per_user)", "wrk's share of a core (shared, per_user)"],
           [[str(i["connections"]), *(split(i["columns"][c]) for c in ORDER),
             f"{i['paired']['gateway_cpu_us_added']:+.1f}",
             f"{i['paired']['cpu_us_added']:+.1f}",
             ", ".join(f"{i['columns'][c]['upstream_cpu_us_per_call']:.0f}" for c in ORDER),
             ", ".join(f"{100 * i['columns'][c]['wrk_cpu_share']:.0f}%" for c in ORDER)]
            for i in runs])
    out.append("Distinct tokens the upstream saw in a per_user round (fewest over rounds): "
               + ", ".join(f"{i['columns']['per_user']['tokens_seen']:,} at "
                           f"{i['connections']} in flight" for i in runs) + ".\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("report", help="the markdown tables from a pytest --benchmark-json file")
    p.add_argument("json", type=Path)
    ns = ap.parse_args(argv)
    sys.stdout.write(render(ns.json) or f"No user credentials results in {ns.json}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
