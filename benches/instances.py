"""Per-user instances of one stdio server (``"instances": "per_user"``): what N identities'
own workers cost to start and to keep, beside N ordinary servers' (``scale.py``).

One round: a fresh interpreter builds a ``Host`` (uvloop, workers forked from the
template) with one per-user C echo server (``echo_server/echo.c``), its ``secret_env``
one variable each identity's ``UserSecrets`` fills, bounds of N, and measures

* **start-up**: wall time from N identities' first calls, made at once, until every one
  is answered (each answer checked): each call starts its identity's instance (its
  secrets asked, a worker forked, its server started, its era decided) and is then
  served by it;
* **memory**: the proportional set size (``Pss`` of ``/proc/<pid>/smaps_rollup``) of every
  instance's worker process, idle, summed and per instance (the echo servers, and the
  shared catalog instance, are not counted);
* **reaped**: seconds from the last answer until every instance has been reaped after its
  idle time (``instanceIdleS`` 5 s), the processes gone.

Command line (prints one JSON object):

    .venv/bin/python benches/instances.py 256
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trunkline import CallOptions, Host, Identity
from trunkline.params import stdio
from trunkline.protocol import NegotiationConfig
from trunkline.settings import HostSettings, ServerConfig

BENCHES = Path(__file__).resolve().parent
if str(BENCHES) not in sys.path:
    sys.path.insert(0, str(BENCHES))
import fanout  # noqa: E402 - on sys.path above
from scale import pss_bytes  # noqa: E402 - on sys.path above

IDLE_S = 5.0


@dataclass
class InstancesResult:
    identities: int
    startup_s: float
    worker_pss_bytes: int  # every instance's worker together
    pss_per_instance_bytes: float
    reaped_s: float


class Secrets:
    """Each identity's token, made up from its subject (a store would read it)."""

    async def secrets_for(self, server: str, identity: Identity,
                          names: Sequence[str]) -> dict[str, str]:
        return {name: f"token-of-{identity.subject}" for name in names}


def _workers_of(template: int) -> list[int]:
    """The processes the worker template forked (the workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == template and fields[0] != b"Z":
                found.append(int(entry))
    return found


def _template() -> int:
    """The worker template: this process's child running ``trunkline.worker.zygote``."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if ppid == me and b"trunkline.worker.zygote" in cmdline:
                return int(entry)
    raise RuntimeError("no worker template")


async def measure(identities: int) -> InstancesResult:
    exe = str(fanout.build_echo_server())
    config = ServerConfig("echo", stdio(exe), instances="per_user", secret_env=("TOKEN",),
                          max_instances=identities, instance_idle_s=IDLE_S)
    settings = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=120.0),
                            worker_start="zygote", max_user_instances=identities)
    async with Host(settings=settings, calls=CallOptions(call_timeout_s=120.0),
                    user_secrets=Secrets()) as host:
        await host.add_servers([config])
        tool = host.tools()[0].name
        catalog_worker = host.servers()[0].worker_pid

        async def first_call(n: int) -> None:
            token = f"id{n}"
            result = await host.call_tool(tool, {"token": token},
                                          identity=Identity.user(f"user-{n}"))
            if result.is_error or result.content[0]["text"] != token:
                raise RuntimeError(f"wrong answer for {token}: {result.raw!r}")

        started = time.perf_counter()
        await asyncio.gather(*(first_call(n) for n in range(identities)))
        startup = time.perf_counter() - started
        answered = time.perf_counter()
        if host.user_instances != identities:
            raise RuntimeError(f"{host.user_instances} instances for {identities} identities")
        await asyncio.sleep(0.5)  # start-up garbage gone, none reaped yet
        workers = [pid for pid in _workers_of(_template()) if pid != catalog_worker]
        if len(workers) != identities:
            raise RuntimeError(f"{len(workers)} instance workers for {identities} identities")
        pss = sum(pss_bytes(pid) for pid in workers)
        while host.user_instances or len(_workers_of(_template())) > 1:
            await asyncio.sleep(0.01)
        reaped = time.perf_counter() - answered
    return InstancesResult(identities, startup, pss, pss / identities, reaped)


def run_round(identities: int) -> InstancesResult:
    """One round in a fresh interpreter (no earlier round's heap or processes)."""
    return InstancesResult(**fanout.fresh_round(
        [sys.executable, str(Path(__file__).resolve()), str(identities)],
        f"instances {identities}"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("identities", type=int)
    ns = ap.parse_args(argv)
    import uvloop
    result = uvloop.run(measure(ns.identities))
    print(json.dumps(asdict(result)))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
