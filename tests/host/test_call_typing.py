"""``call_tool``'s common path needs no narrowing under a type checker: it is typed to
return ``CallToolResult``; a call whose rounds may come back to its caller is
``call_tool_relayed``'s, typed ``CallToolResult | InputRequired``. Checked by running
mypy on a small host program, as a host developer would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import trunkline

PROGRAM = '''
from trunkline.parent.host import CallToolResult, Host
from trunkline.parent.mrtr import CallInput, InputRequired


async def common(host: Host) -> str:
    result = await host.call_tool("echo", {"x": 1})
    return result.text


async def relayed(host: Host) -> str:
    result = await host.call_tool_relayed("echo", {}, call_input=CallInput(relay=True))
    if isinstance(result, InputRequired):
        return result.server
    answered: CallToolResult = result
    return answered.text
'''


def test_call_tool_needs_no_narrowing_and_the_relayed_call_says_it_may_ask(tmp_path: Path):
    program = tmp_path / "host_program.py"
    program.write_text(PROGRAM)
    env = dict(os.environ)
    package_root = Path(trunkline.__file__).resolve().parent.parent
    if package_root.name != "site-packages":
        # The checkout's python/ (on PYTHONPATH, which mypy does not read); an installed
        # trunkline mypy finds in site-packages itself, and refuses it in MYPYPATH.
        env["MYPYPATH"] = str(package_root)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
         "--cache-dir", os.devnull, "--python-version", "3.11", str(program)],
        capture_output=True, text=True, cwd=tmp_path, timeout=240, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
