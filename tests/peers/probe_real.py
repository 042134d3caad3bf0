"""Probe the real MCP servers of tests/realpeers.py by hand, over stdio.

    python3 tests/peers/probe_real.py [--runs N] [--json OUT] [SERVER_NAME...]

Prints, per server and scenario, the exact bytes each reply line carried and
its timing. This is what tests/peers/REAL_SERVERS.md was written from; it is
not a test (it asserts nothing) and needs only the standard library.

Scenarios (each on a fresh process):
  discover_cold   send server/discover the instant the process is spawned
                  (reply time = startup + handling)
  discover_warm   wait --settle seconds, then send server/discover
  discover_badver server/discover claiming protocolVersion 2099-01-01
  probe_fallback  server/discover, then initialize/initialized/tools/list on
                  the same process (what a dual-era client does)
  legacy          initialize (2025-11-25), notifications/initialized, tools/list
  modern          server/discover, tools/list, tools/call (all with _meta)
  call_first_bare tools/call with no _meta and no initialize
  call_first_meta tools/call with _meta as the very first message (no probe)
  initialize_after_modern  discover, modern tools/list, then initialize
  ping_first      claim-less ping as the first message
  discover_no_meta / discover_no_caps  malformed probes (no _meta; no clientCapabilities)
  eof_idle        close stdin after --settle s idle; time to exit, exit code
  eof_after       one exchange, then close stdin; time to exit, exit code
  eof_inflight    close stdin while a ~3 s tools/call is running; what else is written
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import realpeers

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
CLIENT_INFO = {"name": "trunkline", "version": "0.1.0"}


def meta(version: str = MODERN) -> dict:
    return {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
    }


def line(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def discover(id_: int, version: str = MODERN) -> bytes:
    return line(
        {
            "jsonrpc": "2.0",
            "id": id_,
            "method": "server/discover",
            "params": {"_meta": meta(version)},
        }
    )


def initialize(id_: int) -> bytes:
    return line(
        {
            "jsonrpc": "2.0",
            "id": id_,
            "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO},
        }
    )


INITIALIZED = line({"jsonrpc": "2.0", "method": "notifications/initialized"})


def tools_list(id_: int, with_meta: bool) -> bytes:
    params = {"_meta": meta()} if with_meta else {}
    return line({"jsonrpc": "2.0", "id": id_, "method": "tools/list", "params": params})


def call_for(server: realpeers.RealServer) -> tuple[str, dict]:
    """A cheap, always-valid tools/call for each server."""
    if "time" in server.name:
        return "get_current_time", {"timezone": "UTC"}
    if "everything" in server.name:
        return "echo", {"message": "hello"}
    return "echo", {"text": "hello"}


def tools_call(server: realpeers.RealServer, id_: int, with_meta: bool) -> bytes:
    name, args = call_for(server)
    params: dict = {"name": name, "arguments": args}
    if with_meta:
        params["_meta"] = meta()
    return line({"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": params})


def slow_call(server: realpeers.RealServer) -> bytes | None:
    """tools/call id 2 that takes ~3 s, or None if the server has no such tool."""
    if "everything" in server.name:
        name, args = "trigger-long-running-operation", {"duration": 3, "steps": 1}
    elif "time" in server.name:
        return None
    else:
        name, args = "sleep", {"ms": 3000}
    params = {"name": name, "arguments": args, "_meta": meta()}
    return line({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})


class Peer:
    def __init__(self, server: realpeers.RealServer):
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            server.argv,
            env=realpeers.spawn_env(server),
            cwd=realpeers.REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )
        self.out: queue.Queue[tuple[float, bytes]] = queue.Queue()
        self.err = bytearray()
        threading.Thread(target=self._pump_out, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump_out(self) -> None:
        assert self.proc.stdout
        for raw in iter(self.proc.stdout.readline, b""):
            self.out.put((time.monotonic(), raw))
        self.out.put((time.monotonic(), b""))  # EOF marker

    def _pump_err(self) -> None:
        assert self.proc.stderr
        for raw in iter(self.proc.stderr.readline, b""):
            self.err += raw

    def send(self, data: bytes) -> float:
        assert self.proc.stdin
        t = time.monotonic()
        self.proc.stdin.write(data)
        self.proc.stdin.flush()
        return t

    def read(self, timeout: float) -> tuple[float, bytes] | None:
        try:
            return self.out.get(timeout=timeout)
        except queue.Empty:
            return None

    def until_id(self, id_: int, timeout: float) -> list[dict]:
        """Collect lines until the response with ``id_`` (or EOF/timeout)."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            item = self.read(max(left, 0)) if left > 0 else None
            if item is None:
                got.append({"timeout": timeout})
                return got
            t, raw = item
            if raw == b"":
                got.append({"eof_ms": ms(t - self.t0)})
                return got
            rec = {"at_ms": ms(t - self.t0), "raw": raw.decode(errors="replace").rstrip("\n")}
            got.append(rec)
            try:
                if json.loads(raw).get("id") == id_:
                    return got
            except ValueError:
                pass

    def close_stdin_and_wait(self, timeout: float = 10.0) -> dict:
        assert self.proc.stdin
        t = time.monotonic()
        self.proc.stdin.close()
        try:
            rc = self.proc.wait(timeout)
            res = {"exit_ms": ms(time.monotonic() - t), "returncode": rc}
        except subprocess.TimeoutExpired:
            res = {"exit_ms": None, "returncode": None, "note": f"still alive {timeout}s after EOF"}
        return res

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stderr_text(self) -> str:
        time.sleep(0.05)
        return self.err.decode(errors="replace")


def ms(s: float) -> float:
    return round(s * 1000, 1)


def exchange(p: Peer, data: bytes, id_: int | None, timeout: float) -> dict:
    sent = p.send(data)
    rec: dict = {"sent": data.decode().rstrip("\n"), "sent_at_ms": ms(sent - p.t0)}
    if id_ is None:
        return rec
    got = p.until_id(id_, timeout)
    rec["got"] = got
    last = got[-1]
    if "at_ms" in last:
        rec["reply_ms"] = round(last["at_ms"] - rec["sent_at_ms"], 1)
    return rec


def scenario(server: realpeers.RealServer, name: str, a: argparse.Namespace) -> dict:
    p = Peer(server)
    steps: list[dict] = []
    res: dict = {"scenario": name, "steps": steps}
    try:
        T = a.timeout
        if name == "discover_cold":
            steps.append(exchange(p, discover(1), 1, T))
        elif name == "discover_warm":
            time.sleep(a.settle)
            steps.append(exchange(p, discover(1), 1, T))
        elif name == "discover_badver":
            time.sleep(a.settle)
            steps.append(exchange(p, discover(1, "2099-01-01"), 1, T))
        elif name == "probe_fallback":
            steps.append(exchange(p, discover(1), 1, T))
            steps.append(exchange(p, initialize(2), 2, T))
            steps.append(exchange(p, INITIALIZED, None, T))
            steps.append(exchange(p, tools_list(3, False), 3, T))
        elif name == "legacy":
            steps.append(exchange(p, initialize(1), 1, T))
            steps.append(exchange(p, INITIALIZED, None, T))
            steps.append(exchange(p, tools_list(2, False), 2, T))
            steps.append(exchange(p, tools_call(server, 3, False), 3, T))
        elif name == "modern":
            steps.append(exchange(p, discover(1), 1, T))
            steps.append(exchange(p, tools_list(2, True), 2, T))
            steps.append(exchange(p, tools_call(server, 3, True), 3, T))
        elif name == "call_first_bare":
            steps.append(exchange(p, tools_call(server, 1, False), 1, T))
        elif name == "call_first_meta":
            steps.append(exchange(p, tools_call(server, 1, True), 1, T))
        elif name == "initialize_after_modern":
            steps.append(exchange(p, discover(1), 1, T))
            steps.append(exchange(p, tools_list(2, True), 2, T))
            steps.append(exchange(p, initialize(3), 3, T))
        elif name == "ping_first":
            steps.append(exchange(p, line({"jsonrpc": "2.0", "id": 1, "method": "ping"}), 1, T))
        elif name == "discover_no_meta":
            steps.append(
                exchange(
                    p,
                    line({"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}),
                    1,
                    T,
                )
            )
        elif name == "discover_no_caps":
            m = meta()
            del m["io.modelcontextprotocol/clientCapabilities"]
            msg = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": m}}
            steps.append(exchange(p, line(msg), 1, T))
        elif name == "eof_inflight":
            slow = slow_call(server)
            if slow is None:
                res["skipped"] = "no slow tool"
                return res
            steps.append(exchange(p, discover(1), 1, T))
            steps.append(exchange(p, slow, None, T))
            time.sleep(0.3)
        elif name == "eof_idle":
            time.sleep(a.settle)
        elif name == "eof_after":
            steps.append(exchange(p, discover(1), 1, T))
        else:
            raise ValueError(name)
        if name.startswith("eof"):
            res["eof"] = p.close_stdin_and_wait()
            rest = []
            while (item := p.read(0.2)) is not None and item[1] != b"":
                rest.append(item[1].decode(errors="replace").rstrip("\n"))
            if rest:
                res["after_eof_stdout"] = rest
    finally:
        p.kill()
        res["stderr"] = p.stderr_text()[:3000]
    return res


SCENARIOS = [
    "discover_cold",
    "discover_warm",
    "discover_badver",
    "probe_fallback",
    "legacy",
    "modern",
    "call_first_bare",
    "call_first_meta",
    "initialize_after_modern",
    "ping_first",
    "discover_no_meta",
    "discover_no_caps",
    "eof_idle",
    "eof_after",
    "eof_inflight",
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("servers", nargs="*")
    ap.add_argument(
        "--runs", type=int, default=1, help="repeat discover_cold/warm N times for timings"
    )
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--only", action="append", help="run only these scenarios")
    ap.add_argument("--json", help="write the full results here")
    a = ap.parse_args()
    servers = [realpeers.BY_NAME[n] for n in a.servers] if a.servers else list(realpeers.ALL)
    out = {}
    for s in servers:
        if not realpeers.installed(s):
            print(f"## {s.name}: NOT INSTALLED", flush=True)
            continue
        print(f"## {s.name}: {' '.join(s.argv)}", flush=True)
        results = []
        for sc in a.only or SCENARIOS:
            r = scenario(s, sc, a)
            results.append(r)
            print(f"### {sc}")
            for st in r["steps"]:
                print(f">> {st['sent'][:300]}")
                for g in st.get("got", []):
                    if "raw" in g:
                        print(f"<< [{g['at_ms']}ms] {g['raw'][:600]}")
                    else:
                        print(f"<< {g}")
                if "reply_ms" in st:
                    print(f"   reply {st['reply_ms']}ms after send")
            if "eof" in r:
                print(f"   EOF -> {r['eof']} {r.get('after_eof_stdout', '')}")
            if r["stderr"].strip():
                print("   stderr: " + r["stderr"].strip().replace("\n", "\n   stderr: ")[:600])
        for sc in ("discover_cold", "discover_warm"):
            if a.runs > 1 and (not a.only or sc in a.only):
                times = []
                for _ in range(a.runs):
                    r = scenario(s, sc, a)
                    times.append(r["steps"][0].get("reply_ms"))
                ok = [t for t in times if t is not None]
                summary = (
                    f"min {min(ok)} median {statistics.median(ok)} max {max(ok)} ms"
                    if ok
                    else "no reply"
                )
                print(f"### {sc} x{a.runs}: {summary}  ({times})")
                results.append({"scenario": f"{sc}_x{a.runs}", "times_ms": times})
        out[s.name] = results
        print(flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
