"""The MCP servers ``bench_gateway.py`` puts under load over HTTP, and the load: wrk, and
idle clients held open to weigh what a connected client costs.

Targets (each a process tree started here, bound to 127.0.0.1 on an ephemeral port):

* ``direct``     ``http_echo_server.py``'s ``/mcp/echo``: an echo MCP server over HTTP with
                 no gateway in between. It keeps up with wrk (docs/benchmarks.md), so this
                 column is the ceiling of the load generator itself.
* ``trunkline``  ``python -m trunkline serve CONFIG --http 127.0.0.1:0``, CONFIG naming the
                 C echo server (``echo_server/echo.c``) as its stdio upstream; the gateway,
                 its worker process and the upstream.
* ``trunkline-x2`` the same with ``--processes 2``: two gateway processes on one socket,
                 each with its own worker and upstream.
* ``fastmcp``    ``fastmcp_proxy.py`` under ``.peers/fastmcp`` (fastmcp 4.2.3): its proxy
                 over the same ``mcpServers`` file, over Streamable HTTP (uvicorn).
* ``agentgateway`` agentgateway (Rust), the binary ``TRUNKLINE_BENCH_AGENTGATEWAY`` names
                 (``agentgateway/build.sh`` builds it), as an MCP gateway over Streamable
                 HTTP with the C echo server as its one stdio target (``mcp.targets``).

A target called the 2025-11-25 way (``-legacy``) first gets a session:
``open_legacy_session`` sends ``initialize`` and ``notifications/initialized``, lists the
tools and makes one checked call; wrk's calls then carry its ``Mcp-Session-Id`` and accept
SSE, and each answer must be an event stream.

wrk runs ``wrk/tools_call.lua`` (one thread, N connections, so N calls in flight), which
checks every answer; ``run_wrk`` fails when any call failed. Around each run it reads the
CPU the target's processes and wrk used, since they all share the machine's cores.

Command line, for one-off runs against targets it starts itself:

    .venv/bin/python benches/gateway_load.py wrk trunkline 64 --seconds 5
    .venv/bin/python benches/gateway_load.py wrk agentgateway-legacy 64   # or trunkline-legacy
    .venv/bin/python benches/gateway_load.py wrk agentgateway 64   # its 2026-07-28 path
    .venv/bin/python benches/gateway_load.py idle trunkline keepalive 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

BENCHES = Path(__file__).resolve().parent
REPO = BENCHES.parent
if str(BENCHES) not in sys.path:
    sys.path.insert(0, str(BENCHES))
import fanout  # noqa: E402 - on sys.path above
from proc_tree import cpu_by_pid, cpu_used, descendants, rss_bytes  # noqa: E402 - on sys.path above

WRK_SCRIPT = BENCHES / "wrk" / "tools_call.lua"
HTTP_ECHO = BENCHES / "http_echo_server.py"
FASTMCP_PROXY = BENCHES / "fastmcp_proxy.py"
FASTMCP_PYTHON = Path(os.environ.get("TRUNKLINE_BENCH_FASTMCP_PYTHON",
                                     REPO / ".peers" / "fastmcp" / "bin" / "python"))
AGENTGATEWAY_ENV = "TRUNKLINE_BENCH_AGENTGATEWAY"
AGENTGATEWAY_BUILD = BENCHES / "agentgateway" / "build.sh"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
JSON_ONLY = "application/json"
BOTH = "application/json, text/event-stream"
START_TIMEOUT_S = 60


# ------------------------------------------------------------------ process trees


def open_sockets(pid: int) -> int:
    """Sockets this process holds (its fds that are sockets)."""
    n = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    n += 1
            except OSError:
                pass
    except OSError:
        pass
    return n


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------------- targets


@dataclass
class Target:
    """One server under test: a process tree, the URL of its MCP endpoint, and how wrk
    calls its echo tool (tool name, argument name, ``Accept``)."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    tool: str = "echo"
    arg: str = "token"
    accept: str = JSON_ONLY
    upstream_exe: str = ""  # the stdio upstream's path, to tell it from the gateway's own
    session: str = ""  # a 2025-11-25 session's Mcp-Session-Id (open_legacy_session)
    stderr_path: Path | None = None
    workdir: Any = None  # a TemporaryDirectory kept alive as long as the target

    @property
    def port(self) -> int:
        return int(self.url.split(":")[2].split("/")[0])

    def pids(self) -> list[int]:
        return descendants(self.proc.pid)

    def roles(self) -> dict[str, list[int]]:
        """The tree by role: the serving process, its workers, its upstream servers."""
        out: dict[str, list[int]] = {"gateway": [], "workers": [], "upstreams": []}
        for pid in self.pids():
            # A copy of `serve --processes N` is a gateway too (it has --listen-fd).
            if pid == self.proc.pid or "--listen-fd" in cmdline(pid):
                out["gateway"].append(pid)
            elif self.upstream_exe and self.upstream_exe in cmdline(pid):
                out["upstreams"].append(pid)
            else:
                out["workers"].append(pid)
        return out

    def rss(self) -> dict[str, int]:
        """RSS in bytes per role (summed over its processes)."""
        return {role: sum(rss_bytes(p) for p in pids) for role, pids in self.roles().items()}

    def as_column(self, name: str, accept: str) -> Target:
        """The same process, called with another ``Accept`` (a second column)."""
        return replace(self, name=name, accept=accept)

    def stderr_tail(self) -> str:
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        return self.stderr_path.read_bytes()[-3000:].decode(errors="replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; every process of the tree is gone after."""
        tree = self.pids()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        deadline = time.monotonic() + 5
        for pid in tree[1:]:  # children end with their parent (EOF, PDEATHSIG); make sure
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.02)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if isinstance(self.workdir, tempfile.TemporaryDirectory):
            self.workdir.cleanup()  # idempotent: columns of one process share it


def write_config(path: Path, upstreams: dict[str, list[str]],
                 more: dict[str, Any] | None = None) -> Path:
    """An ``mcpServers`` file: name -> argv of a stdio server; ``more``: other top-level
    keys (a ``policy``)."""
    entries = {name: {"command": argv[0], "args": argv[1:]} for name, argv in upstreams.items()}
    path.write_text(json.dumps({"mcpServers": entries, **(more or {})}))
    return path


def _spawn(name: str, argv: list[str], prefix: bytes, workdir: Any, stdin: int | None = None,
           **kw: Any) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Start ``argv``; wait for its stdout line starting with ``prefix``; return the process,
    the rest of that line, and where its stderr goes."""
    err = Path(workdir.name) / f"{name}.stderr"
    with open(err, "wb") as errf:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE, stderr=errf, **kw)
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    line = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if line.startswith(prefix) or not line:
                break
        elif proc.poll() is not None:
            break
    if not line.startswith(prefix):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"{name} did not start ({argv}): {line!r}\n"
                           f"{err.read_bytes()[-3000:].decode(errors='replace')}")
    return proc, line[len(prefix):].decode().strip(), err


def start_direct() -> Target:
    workdir = tempfile.TemporaryDirectory(prefix="bench-gw-direct-")
    proc, port, err = _spawn("direct", [sys.executable, str(HTTP_ECHO)], b"PORT ", workdir,
                             stdin=subprocess.PIPE)  # it exits on stdin EOF
    return Target("direct", proc, f"http://127.0.0.1:{port}/mcp/echo", arg="text",
                  stderr_path=err, workdir=workdir)


def start_trunkline(upstreams: int = 1, *flags: str,
                    config_more: dict[str, Any] | None = None) -> Target:
    """``trunkline serve --http`` over ``upstreams`` copies of the C echo server (named
    ``echo``, ``echo1``, ...; the first one's tool is ``echo``); ``config_more``: other
    top-level keys of its configuration (``write_config``)."""
    exe = str(fanout.build_echo_server())
    workdir = tempfile.TemporaryDirectory(prefix="bench-gw-trunkline-")
    names = ["echo"] + [f"echo{i}" for i in range(1, upstreams)]
    config = write_config(Path(workdir.name) / "mcp.json", {n: [exe] for n in names},
                          config_more)
    # wrk and the idle clients all connect from 127.0.0.1, more than one address's
    # share of connections (serve's limit peer_connections).
    proc, url, err = _spawn(
        "trunkline", [sys.executable, "-m", "trunkline", "serve", str(config), "--http",
                      "127.0.0.1:0", "--limit", "peer_connections=65536", *flags],
        b"LISTENING ", workdir,
        stdin=subprocess.DEVNULL)
    return Target("trunkline", proc, url, upstream_exe=exe, stderr_path=err, workdir=workdir)


def start_fastmcp(keep_alive_s: float | None = None) -> Target:
    if not FASTMCP_PYTHON.exists():
        raise FileNotFoundError(f"the fastmcp column needs {FASTMCP_PYTHON} "
                                "(.ci/install-peers creates it)")
    exe = str(fanout.build_echo_server())
    workdir = tempfile.TemporaryDirectory(prefix="bench-gw-fastmcp-")
    config = write_config(Path(workdir.name) / "mcp.json", {"echo": [exe]})
    argv = [str(FASTMCP_PYTHON), str(FASTMCP_PROXY), str(config)]
    if keep_alive_s is not None:
        argv += ["--keep-alive-s", str(keep_alive_s)]
    proc, url, err = _spawn("fastmcp", argv, b"LISTENING ", workdir, stdin=subprocess.DEVNULL)
    # fastmcp answers 406 unless the client accepts both JSON and SSE (it answers JSON).
    return Target("fastmcp", proc, url, accept=BOTH, upstream_exe=exe, stderr_path=err,
                  workdir=workdir)


def agentgateway_missing() -> str | None:
    """Why the agentgateway target cannot be started here (None: it can)."""
    if not os.environ.get(AGENTGATEWAY_ENV):
        return (f"agentgateway: set {AGENTGATEWAY_ENV} to its binary (build it with "
                f"{AGENTGATEWAY_BUILD.relative_to(REPO)})")
    return None



def cpu_us_per_call(r: dict[str, Any], role: str | None = None) -> float:
    """A round's CPU per call, in µs: the target's (gateway and workers), or one role's."""
    cpu = r["target_cpu_s"] if role is None else r["target_cpu_by_role"][role]
    return 1e6 * cpu / r["calls"]


def paired_rounds(before: list[dict[str, Any]], after: list[dict[str, Any]]
                  ) -> dict[str, Any]:
    """Each ``after`` round against the ``before`` round just before it (two columns run
    interleaved): the medians of the ratios and differences."""
    pairs = list(zip(before, after, strict=True))
    return {
        "calls_per_s_ratio": statistics.median(b["calls_per_s"] / a["calls_per_s"]
                                               for a, b in pairs),
        "cpu_us_added": statistics.median(cpu_us_per_call(b) - cpu_us_per_call(a)
                                          for a, b in pairs),
        "gateway_cpu_us_added": statistics.median(
            cpu_us_per_call(b, "gateway") - cpu_us_per_call(a, "gateway") for a, b in pairs),
        "p50_ms_added": statistics.median(b["p50_ms"] - a["p50_ms"] for a, b in pairs),
        "p99_ms_added": statistics.median(b["p99_ms"] - a["p99_ms"] for a, b in pairs)}

def _free_port() -> int:
    """A port nothing listens on now (agentgateway binds the port its config names)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_agentgateway() -> Target:
    """agentgateway over the C echo server as its one stdio MCP target, named ``echo``,
    serving Streamable HTTP at ``/mcp`` (its defaults otherwise: stateful sessions, a tool
    name prefixed only when there are several targets, its worker threads one per core).
    Its admin, stats and readiness servers are off, as is the access log (one line per
    request; trunkline writes none)."""
    reason = agentgateway_missing()
    if reason:
        raise FileNotFoundError(reason)
    binary = os.environ[AGENTGATEWAY_ENV]
    if not os.access(binary, os.X_OK):
        raise FileNotFoundError(f"{AGENTGATEWAY_ENV}={binary} is not an executable "
                                f"(build it with {AGENTGATEWAY_BUILD.relative_to(REPO)})")
    exe = str(fanout.build_echo_server())
    workdir = tempfile.TemporaryDirectory(prefix="bench-gw-agentgateway-")
    port = _free_port()
    config = Path(workdir.name) / "config.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "config": {"adminAddr": "off", "statsAddr": "off", "readinessAddr": "off",
                   "logging": {"filter": "false"}},
        "mcp": {"port": port, "targets": [{"name": "echo", "stdio": {"cmd": exe}}]}}))
    err = Path(workdir.name) / "agentgateway.stderr"
    with open(err, "wb") as errf:  # its log: to a file, never a pipe nobody reads
        proc = subprocess.Popen([binary, "-f", str(config)], stdin=subprocess.DEVNULL,
                                stdout=errf, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise RuntimeError(f"agentgateway did not listen on {port}:\n"
                                   f"{err.read_bytes()[-3000:].decode(errors='replace')}"
                                   ) from None
            time.sleep(0.05)
    return Target("agentgateway", proc, url, accept=BOTH, upstream_exe=exe, stderr_path=err,
                  workdir=workdir)


STARTERS = {"direct": start_direct, "trunkline": start_trunkline,
            "trunkline-x2": lambda: start_trunkline(1, "--processes", "2"),
            "fastmcp": start_fastmcp, "agentgateway": start_agentgateway}


# ------------------------------------------------------------- legacy sessions


def _legacy_post(target: Target, message: dict[str, Any], session: str = ""
                 ) -> tuple[int, str, dict[str, str], Any]:
    """One 2025-11-25 POST: its status, Content-Type, headers (lower-cased names) and
    answer (the JSON body, or an event stream's JSON-RPC response; None when empty)."""
    headers = {"Content-Type": "application/json", "Accept": BOTH}
    if session:
        headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}
    request = urllib.request.Request(target.url, data=json.dumps(message).encode(),
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            status, got, body = r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{target.name}: {message.get('method')} answered {e.code}: "
                           f"{e.read()[:500]!r}") from None
    kind = got.get("content-type", "")
    if not body:
        return status, kind, got, None
    if kind.startswith("text/event-stream"):
        answers = [json.loads(line.split(":", 1)[1]) for line in body.decode().splitlines()
                   if line.startswith("data:") and line.split(":", 1)[1].strip()]
        responses = [a for a in answers if "id" in a and ("result" in a or "error" in a)]
        if len(responses) != 1:
            raise RuntimeError(f"{target.name}: not one response in {body[:500]!r}")
        return status, kind, got, responses[0]
    return status, kind, got, json.loads(body)


def open_legacy_session(target: Target) -> Target:
    """A 2025-11-25 session on ``target``: ``initialize``, ``notifications/initialized``,
    ``tools/list`` (one tool: the echo, under the name the gateway gives it) and one checked
    ``tools/call`` that must be answered as an event stream. Returns the target with that
    session and tool name, as the column ``<name>-legacy``; ``close_legacy_session`` ends
    it."""
    status, _, got, answer = _legacy_post(target, {
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LEGACY, "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}})
    session = got.get("mcp-session-id", "")
    if status != 200 or not session or (answer or {}).get("result", {}).get(
            "protocolVersion") != LEGACY:
        raise RuntimeError(f"{target.name}: initialize: {status} {got} {answer}")
    status, _, _, _ = _legacy_post(target, {"jsonrpc": "2.0",
                                            "method": "notifications/initialized"}, session)
    if status != 202:
        raise RuntimeError(f"{target.name}: notifications/initialized answered {status}")
    _, _, _, answer = _legacy_post(target, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                                   session)
    tools = [t["name"] for t in (answer or {}).get("result", {}).get("tools", [])]
    if len(tools) != 1 or not tools[0].endswith("echo"):
        raise RuntimeError(f"{target.name}: expected the echo tool alone: {answer}")
    legacy = replace(target, name=f"{target.name}-legacy", tool=tools[0], accept=BOTH,
                     session=session)
    status, kind, _, answer = _legacy_post(legacy, {
        "jsonrpc": "2.0", "id": "probe", "method": "tools/call",
        "params": {"name": legacy.tool, "arguments": {legacy.arg: "probe"}}}, session)
    text = (answer or {}).get("result", {}).get("content", [{}])[0].get("text")
    if status != 200 or not kind.startswith("text/event-stream") or text != "probe":
        raise RuntimeError(f"{target.name}: a call in the session: {status} {kind} {answer}")
    return legacy


def close_legacy_session(target: Target) -> None:
    """DELETE the session (its upstream, when the gateway keeps one per session, goes
    with it); a session already gone, or a gateway already stopped, is left alone."""
    request = urllib.request.Request(target.url, method="DELETE", headers={
        "Mcp-Session-Id": target.session, "MCP-Protocol-Version": LEGACY})
    try:
        with urllib.request.urlopen(request, timeout=30):
            pass
    except (urllib.error.HTTPError, OSError):
        pass


def http_get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


# -------------------------------------------------------------------------- wrk


class CallsFailed(AssertionError):
    """wrk saw a failed call: a non-2xx status, a JSON-RPC error or a wrong result, a
    socket error or a timeout."""


@dataclass
class WrkResult:
    target: str
    connections: int
    seconds: float
    calls: int  # answered calls in the timed window (all of them checked and correct)
    calls_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    sent: int  # requests written, answered or not (the ones in flight at the end are not)
    target_cpu_s: float  # CPU the target's process tree used during the run
    target_cpu_by_role: dict[str, float]  # the same by role: gateway, workers, upstreams
    wrk_cpu_s: float
    upstream_calls: int | None = None  # what the direct server counted, when it counts


def run_wrk(target: Target, connections: int, seconds: int, timeout_s: int = 30,
            script: Path = WRK_SCRIPT, script_args: Sequence[str] = ()) -> WrkResult:
    """One wrk run (one thread, ``connections`` connections, ``seconds`` long) of
    ``tools/call`` against ``target``; raises ``CallsFailed`` unless every answer was a 2xx
    carrying the right result. ``script``: a Lua script that builds and checks the calls
    as ``wrk/tools_call.lua`` does (its arguments: tool, argument, Accept, then
    ``script_args``)."""
    if not target.url.startswith("http://"):
        raise ValueError(target.url)
    stats_url = target.url.rsplit("/mcp", 1)[0] + "/stats" if target.name == "direct" else None
    before = http_get_json(stats_url) if stats_url else None
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", f"--timeout={timeout_s}s",
            "-s", str(script), target.url, "--", target.tool, target.arg, target.accept]
    if target.session:
        argv.append(target.session)
    argv += script_args
    cpu0 = {role: cpu_by_pid(pids) for role, pids in target.roles().items()}
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False,
                          timeout=seconds + timeout_s + 30)
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {role: cpu_used(cpu0.get(role, {}), cpu_by_pid(pids))
           for role, pids in target.roles().items()}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("WRK_RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout[-2000:]}"
                           f"{proc.stderr[-2000:]}")
    doc = json.loads(line.split(" ", 1)[1])
    errors = {k: v for k, v in doc["errors"].items() if v}
    wrong = {k: doc[k] for k in ("non2xx", "bad", "dup") if doc[k]}
    if errors or wrong or doc["ok"] != doc["requests"] or doc["requests"] == 0:
        raise CallsFailed(
            f"{target.name} at {connections} connections: {doc['requests']} answered, "
            f"{doc['ok']} correct; socket errors {errors}, failures {wrong}; "
            f"first failed answer: {doc['sample']!r}\n{target.stderr_tail()}")
    upstream_calls = None
    if stats_url:
        after = http_get_json(stats_url)
        if after["header_violations"] != before["header_violations"]:
            raise CallsFailed(f"requests without the right MCP headers: "
                              f"{after['violation_samples']}")
        upstream_calls = (after["echo_methods"].get("tools/call", 0)
                          - before["echo_methods"].get("tools/call", 0))
        if not doc["requests"] <= upstream_calls <= doc["sent"]:
            raise CallsFailed(f"the server counted {upstream_calls} tools/call for "
                              f"{doc['requests']} answered and {doc['sent']} sent")
    secs = doc["duration_us"] / 1e6
    lat = doc["latency_us"]
    wrk_cpu = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    return WrkResult(target=target.name, connections=connections, seconds=secs,
                     calls=doc["requests"], calls_per_s=doc["requests"] / secs,
                     p50_ms=lat["p50"] / 1e3, p90_ms=lat["p90"] / 1e3, p99_ms=lat["p99"] / 1e3,
                     max_ms=lat["max"] / 1e3, sent=doc["sent"], target_cpu_s=sum(cpu.values()),
                     target_cpu_by_role=cpu, wrk_cpu_s=wrk_cpu, upstream_calls=upstream_calls)


# ----------------------------------------------------------------- idle clients


def tools_call_request(target: Target, host_port: str, rid: str) -> bytes:
    """The HTTP request wrk sends (the same headers and body shape), as bytes."""
    body = json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": {
        "name": target.tool, "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                       "io.modelcontextprotocol/clientCapabilities": {}},
        "arguments": {target.arg: rid}}, "id": rid}, separators=(",", ":")).encode()
    return _post(target, host_port, body, {"Accept": target.accept, "Mcp-Method": "tools/call",
                                           "Mcp-Name": target.tool})


def listen_request(target: Target, host_port: str, rid: str) -> bytes:
    """A 2026-07-28 ``subscriptions/listen`` asking for tool-list changes."""
    body = json.dumps({"jsonrpc": "2.0", "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": True},
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                  "io.modelcontextprotocol/clientCapabilities": {}}}, "id": rid},
        separators=(",", ":")).encode()
    return _post(target, host_port, body, {"Accept": "text/event-stream",
                                           "Mcp-Method": "subscriptions/listen"})


def _post(target: Target, host_port: str, body: bytes, headers: dict[str, str]) -> bytes:
    path = "/" + target.url.split("/", 3)[3]
    head = [f"POST {path} HTTP/1.1", f"Host: {host_port}", "Content-Type: application/json",
            f"MCP-Protocol-Version: {MODERN}", f"Content-Length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP response with a Content-Length: its status and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), None)
    if length is None:
        raise AssertionError(f"expected a Content-Length answer: {head!r}")
    return status, await reader.readexactly(length)


@dataclass
class IdleClients:
    """``n`` connections held open; ``close`` ends them."""

    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def close(self) -> None:
        for w in self.writers:
            w.close()
        await asyncio.gather(*(w.wait_closed() for w in self.writers), return_exceptions=True)
        self.writers.clear()


async def open_idle_clients(target: Target, kind: str, n: int, at_once: int = 32) -> IdleClients:
    """``n`` clients, each on its own connection: ``keepalive`` makes one checked
    ``tools/call`` and leaves the connection open and idle; ``listen`` opens a
    ``subscriptions/listen`` stream and waits for its acknowledgement."""
    host, port = "127.0.0.1", target.port
    host_port = f"{host}:{port}"
    held = IdleClients()
    gate = asyncio.Semaphore(at_once)  # the listen backlog is finite: no SYN storm

    async def one(i: int) -> None:
        async with gate:
            reader, writer = await asyncio.open_connection(host, port)
            held.writers.append(writer)
            rid = f"idle-{i}"
            if kind == "keepalive":
                writer.write(tools_call_request(target, host_port, rid))
                status, body = await asyncio.wait_for(_read_answer(reader), 60)
                doc = json.loads(body)
                if status != 200 or doc.get("id") != rid or \
                        doc.get("result", {}).get("content", [{}])[0].get("text") != rid:
                    raise AssertionError(f"idle client {i}: {status} {body[:300]!r}")
            elif kind == "listen":
                writer.write(listen_request(target, host_port, rid))
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
                if b" 200 " not in head.split(b"\r\n", 1)[0] or b"text/event-stream" not in head:
                    raise AssertionError(f"listen {i}: {head!r}")
                first = await asyncio.wait_for(reader.readuntil(b"\n\n"), 60)
                if b"notifications/subscriptions/acknowledged" not in first:
                    raise AssertionError(f"listen {i}: no acknowledgement: {first[:300]!r}")
            else:
                raise ValueError(kind)

    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    except BaseException:
        await held.close()
        raise
    return held


@dataclass
class IdleCost:
    target: str
    kind: str
    clients: int
    rss_before: dict[str, int]
    rss_after: dict[str, int]
    sockets_added: int  # sockets the serving process gained: must be >= clients

    @property
    def bytes_per_client(self) -> float:
        """Gateway + workers (not the upstream servers) per client."""
        grow = sum(self.rss_after[r] - self.rss_before[r] for r in ("gateway", "workers"))
        return grow / self.clients

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bytes_per_client": self.bytes_per_client}


async def measure_idle_cost(target: Target, kind: str, n: int, settle_s: float = 1.0) -> IdleCost:
    """RSS of the target's tree with no client, then with ``n`` idle clients connected.

    The target is warmed first (a few checked calls on a few connections, closed) so that
    the first client does not pay for imports and caches."""
    warm = await open_idle_clients(target, "keepalive", 4)
    await warm.close()
    await asyncio.sleep(settle_s)
    before, sockets0 = target.rss(), open_sockets(target.proc.pid)
    held = await open_idle_clients(target, kind, n)
    try:
        await asyncio.sleep(settle_s)
        after, sockets1 = target.rss(), open_sockets(target.proc.pid)
    finally:
        await held.close()
    cost = IdleCost(target.name, kind, n, before, after, sockets1 - sockets0)
    if cost.sockets_added < n:
        raise AssertionError(f"{target.name} holds {cost.sockets_added} more sockets with "
                             f"{n} {kind} clients connected: some were closed")
    return cost


# ------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("wrk", help="one wrk run against a target started for it")
    w.add_argument("target", choices=[*STARTERS, "trunkline-sse", "trunkline-legacy",
                                      "agentgateway-legacy"])
    w.add_argument("connections", type=int)
    w.add_argument("--seconds", type=int, default=5)
    i = sub.add_parser("idle", help="RSS with 0 and N idle clients")
    i.add_argument("target", choices=["trunkline", "fastmcp"])
    i.add_argument("kind", choices=["keepalive", "listen"])
    i.add_argument("clients", type=int)
    ns = ap.parse_args(argv)
    if ns.cmd == "wrk":
        target = STARTERS[ns.target.removesuffix("-sse").removesuffix("-legacy")]()
        if ns.target == "trunkline-sse":
            target = target.as_column("trunkline-sse", BOTH)
        try:
            if ns.target.endswith("-legacy"):
                target = open_legacy_session(target)
            run_wrk(target, ns.connections, 1)  # warm-up
            print(json.dumps(asdict(run_wrk(target, ns.connections, ns.seconds))))
        finally:
            target.stop()
        return 0
    target = start_fastmcp(keep_alive_s=600) if ns.target == "fastmcp" else start_trunkline()
    try:
        print(json.dumps(asyncio.run(measure_idle_cost(target, ns.kind, ns.clients)).as_dict()))
    finally:
        target.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
