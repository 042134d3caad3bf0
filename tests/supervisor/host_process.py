"""A host process for the orphan test: starts a Supervisor with the servers named on the
command line (scripted peers; workers started as the second argument says, ``spawn`` by
default), prints one JSON line with the pids of its workers and their servers, then waits
forever. The test SIGKILLs this process and checks that no worker or server survives
it."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from trunkline.params import stdio
from trunkline.parent.supervisor import Supervisor
from trunkline.settings import HostSettings, ServerConfig

PEERS = Path(__file__).resolve().parents[1] / "peers"


async def main(count: int, start: str) -> None:
    sup = Supervisor(HostSettings(worker_start=start))
    configs = [ServerConfig(f"s{i}", stdio(sys.executable, str(PEERS / "scripted.py")))
               for i in range(count)]
    statuses = await sup.add_many(configs)
    print(json.dumps({
        "host": __import__("os").getpid(),
        "workers": [s.worker_pid for s in statuses],
        "servers": [s.server_pid for s in statuses],
        "states": [s.state.value for s in statuses],
    }), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "spawn"))
