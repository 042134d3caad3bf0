"""A real HAProxy (Debian's ``haproxy`` package, installed by ``.ci/install-system``) in
front of ``trunkline serve --http`` replicas, for the replica tests.

The config is generated into the test's directory and HAProxy runs in the foreground
(``-db``) as a child of the test, which stops it (``stop``; never left behind). What the
tests rely on:

- ``balance roundrobin``, one backend connection per request (``http-server-close``), so
  consecutive requests go to consecutive replicas;
- no retry once a request was sent: only a failed *connect* is retried, on another
  replica (``retry-on conn-failure`` + ``redispatch``), so a ``tools/call`` never runs
  twice;
- health checks of ``/readyz`` every 200 ms (a draining replica answers 503 there);
- ``X-Replica`` on every response, HAProxy's own errors included: the replica that
  answered (or was being asked);
- with ``affinity``, the recipe of docs/how-to/load-balancer.md: a request whose
  ``Mcp-Session-Id`` starts with a replica's name (each replica runs ``--replica NAME``,
  its server name here) goes to that replica, and everything else round-robin;
- one log line per request on stderr (kept in a file): replica, method, path, status,
  HAProxy's termination state, its connect retries and the ``Mcp-Method`` header;
- the stats page at ``/lb-stats`` (``;csv``), read by ``states`` to see a replica go DOWN.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from conftest import end_process

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
STATS_PATH = "/lb-stats"
BACKEND = "replicas"
_LOG_TAG = "lb-request"

_CONFIG = """\
global
    log stderr format raw local0
    maxconn 2000

defaults
    mode http
    log global
    option dontlognull
    log-format "{tag} %s %HM %HP %ST %tsc %rc %[capture.req.hdr(0)]"
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    # A failed connect (the replica is gone) is retried on another one; nothing sent
    # to a replica is ever sent again.
    retries 2
    retry-on conn-failure
    option redispatch 1
    option http-server-close

frontend mcp
    bind 127.0.0.1:{port}
    http-request capture req.hdr(Mcp-Method) len 64
    stats uri {stats}
    default_backend {backend}

backend {backend}
    balance roundrobin
{affinity}    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host 127.0.0.1
    http-check expect status 200
    default-server check inter 200ms fall 1 rise 2
    http-after-response set-header X-Replica %[srv_name]
{servers}
"""


@dataclass(frozen=True)
class Logged:
    """One request as HAProxy logged it."""

    replica: str  # "<NOSRV>" when none was picked
    method: str
    path: str
    status: int  # -1: no response reached the client (the exchange was cut)
    termination: str  # HAProxy's termination state, "----" for a clean end
    retries: str  # connect retries; "+" first when it was redispatched to another replica
    mcp_method: str  # the Mcp-Method header ("" when absent)


def free_port() -> int:
    """A port nothing listens on right now (HAProxy binds it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Haproxy:
    """One HAProxy process balancing ``/mcp`` over the replicas it was started with."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int, log_path: Path,
                 replicas: tuple[str, ...]) -> None:
        self.proc = proc
        self.base = f"http://127.0.0.1:{port}"
        self.url = f"{self.base}/mcp"
        self.log_path = log_path
        self.replicas = replicas

    @classmethod
    async def start(cls, directory: Path, replicas: Mapping[str, str],
                    seconds: float = 20, affinity: bool = False) -> Haproxy:
        """HAProxy in front of ``replicas`` (name -> the replica's ``/mcp`` URL), once
        every replica is UP by its health check; ``affinity``: a legacy session's requests
        go to the replica whose name leads its id."""
        port = free_port()
        servers = "\n".join(f"    server {name} {url.split('/')[2]}"
                            for name, url in replicas.items())
        rules = "".join(
            f"    use-server {name} if {{ req.hdr(mcp-session-id) -m reg ^{name}[._] }}\n"
            for name in replicas) if affinity else ""
        config = directory / "haproxy.cfg"
        config.write_text(_CONFIG.format(tag=_LOG_TAG, port=port, stats=STATS_PATH,
                                         backend=BACKEND, servers=servers, affinity=rules))
        log_path = directory / "haproxy.log"
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            proc = await asyncio.create_subprocess_exec(
                HAPROXY, "-db", "-f", str(config), stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log)
        finally:
            os.close(log)  # HAProxy holds its own copy
        lb = cls(proc, port, log_path, tuple(replicas))
        try:
            await lb.wait_for(lambda states: all(s == "UP" for s in states.values()), seconds)
        except BaseException:
            await lb.stop()
            raise
        return lb

    async def states(self) -> dict[str, str]:
        """Each replica's state as HAProxy sees it ("UP", "DOWN", ...), from the stats
        CSV."""
        async with (aiohttp.ClientSession() as http,
                    http.get(f"{self.base}{STATS_PATH};csv") as response):
            text = await response.text()
        header, *rows = text.splitlines()
        columns = header.lstrip("# ").split(",")
        found = {}
        for row in rows:
            fields = dict(zip(columns, row.split(","), strict=False))
            if fields.get("pxname") == BACKEND and fields.get("svname") in self.replicas:
                found[fields["svname"]] = fields["status"]
        return found

    async def wait_for(self, predicate: Callable[[dict[str, str]], bool],
                       seconds: float) -> dict[str, str]:
        """Poll ``states`` until ``predicate(states)`` holds; fail (with HAProxy's own
        output) if it does not within ``seconds`` or HAProxy ends."""
        states: dict[str, str] = {}
        for _ in range(int(seconds / 0.05)):
            if self.proc.returncode is not None:
                break
            with contextlib.suppress(aiohttp.ClientError, ValueError):
                states = await self.states()
                if len(states) == len(self.replicas) and predicate(states):
                    return states
            await asyncio.sleep(0.05)
        raise AssertionError(f"HAProxy: replicas are {states} (exit {self.proc.returncode}):"
                             f"\n{self.output()[-3000:]}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def requests(self) -> list[Logged]:
        """Every request logged so far (health checks are not requests)."""
        found = []
        for line in self.output().splitlines():
            fields = line.split(" ")
            if fields[0] != _LOG_TAG or len(fields) != 8:
                continue
            mcp_method = fields[7] if fields[7] != "-" else ""
            found.append(Logged(fields[1], fields[2], fields[3], int(fields[4]), fields[5],
                                fields[6], mcp_method))
        return found

    async def stop(self, seconds: float = 10) -> int | None:
        """Stop HAProxy (SIGTERM: at once) and reap it."""
        return await end_process(self.proc, signal.SIGTERM, seconds)
