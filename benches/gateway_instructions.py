"""Instructions the gateway process executes per ``tools/call`` under load: a count that
does not move with the machine, for comparing two trees.

On this shared two-core machine the gateway's CPU time per call moves by half or more
between runs of the same code seconds apart (97-169 µs in one interleaved series), so a
change worth 5% cannot be seen in it. The number of instructions executed per call can:
``trunkline serve`` runs under valgrind's callgrind with instrumentation off until the
load is on (start-up costs nothing), wrk drives it at ``connections`` in flight for
``seconds``, and the instructions counted in that window are divided by the calls wrk saw
answered (all of them checked, as in ``gateway_load.py``). Repeated runs of one tree agree
within about 2%. Under valgrind the gateway runs some 50 times slower, so more requests
queue per loop turn than in a real run: compare trees with it, never read it as a time.

    apt-get install -y valgrind    # Debian's package; wrk too, as for gateway_load.py
    python benches/gateway_instructions.py [--pythonpath TREE/python] [--connections 64]
        [--seconds 8]

It prints one JSON line: ``calls``, ``instructions``, ``instructions_per_call``.
``--pythonpath`` runs the gateway from another tree (a ``git worktree`` of an older
commit, with this tree's built ``_codec`` copied into it) for an A/B.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fanout  # the benches folder is put on the path just above
import gateway_load


def _counted_instructions(dump: Path) -> int:
    """The ``summary:`` (or ``totals:``) line of a callgrind dump: instructions executed."""
    counts = [int(found.group(1)) for line in dump.read_text().splitlines()
              if (found := re.match(r"(?:summary|totals): (\d+)", line))]
    if not counts:
        raise RuntimeError(f"no instruction count in {dump}")
    return max(counts)


def measure(pythonpath: str | None, connections: int, seconds: int, *flags: str,
            config_more: dict[str, Any] | None = None,
            script: Path = gateway_load.WRK_SCRIPT, script_args: Sequence[str] = (),
            warm_s: int = 2, dump_to: Path | None = None) -> dict[str, float]:
    """The count for one tree; ``flags``, ``config_more``, ``script`` and ``script_args``
    as ``gateway_load.start_trunkline`` and ``run_wrk`` take them; ``warm_s``: the
    uncounted run first; ``dump_to``: where to keep callgrind's dump (for
    ``callgrind_annotate``)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("valgrind is not installed (apt-get install -y valgrind)")
    exe = str(fanout.build_echo_server())
    workdir = tempfile.TemporaryDirectory(prefix="bench-gw-instructions-")
    config = gateway_load.write_config(Path(workdir.name) / "mcp.json", {"echo": [exe]},
                                       config_more)
    out = Path(workdir.name) / "callgrind.out"
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}", sys.executable, "-m", "trunkline", "serve",
            str(config), "--http", "127.0.0.1:0", *flags]
    proc, url, err = gateway_load._spawn("trunkline", argv, b"LISTENING ", workdir,
                                         stdin=subprocess.DEVNULL, env=env)
    target = gateway_load.Target("trunkline", proc, url, upstream_exe=exe, stderr_path=err,
                                 workdir=workdir)
    try:
        def callgrind(*options: str) -> None:
            subprocess.run(["callgrind_control", *options, str(proc.pid)], check=True,
                           capture_output=True)

        wrk = {"timeout_s": 60, "script": script, "script_args": script_args}
        gateway_load.run_wrk(target, connections, warm_s, **wrk)  # warm: caches, imports
        callgrind("-i", "on")
        result = gateway_load.run_wrk(target, connections, seconds, **wrk)
        callgrind("-i", "off")
        callgrind("-d")
        dumps = sorted(Path(workdir.name).glob("callgrind.out.*"))
        if not dumps:
            raise RuntimeError("callgrind wrote no dump")
        instructions = _counted_instructions(dumps[-1])
        if dump_to is not None:
            shutil.copyfile(dumps[-1], dump_to)
    finally:
        target.stop()
    return {"calls": result.calls, "instructions": instructions,
            "instructions_per_call": round(instructions / result.calls)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pythonpath", help="run the gateway from this tree's python/")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=8)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.pythonpath, args.connections, args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
