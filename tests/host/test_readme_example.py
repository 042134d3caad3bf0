"""The README's first example is a program that runs: its code, as the README has it, on
the three servers its ``mcp.json`` names (the installed real ones), with a stand-in for
the model that checks the tools it is handed and makes 20 calls at once."""

from __future__ import annotations

import json
import re
import runpy

import jsonschema
import pytest

import realpeers
from conftest import run

README = realpeers.REPO_ROOT / "README.md"

#: What Anthropic's Messages API takes as one tool (its documented fields), not imported.
ANTHROPIC_TOOL = {
    "type": "object", "required": ["name", "input_schema"], "additionalProperties": False,
    "properties": {"name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"},
                   "description": {"type": "string"},
                   "input_schema": {"type": "object", "required": ["type"],
                                    "properties": {"type": {"const": "object"}}}},
}


def first_example() -> tuple[dict, str]:
    """The ``mcp.json`` and the Python program of the README's "Using it" section."""
    section = README.read_text().split("## Using it\n", 1)[1]
    config = re.search(r"```json\n(.*?)```", section, re.S)
    program = re.search(r"```python\n(.*?)```", section, re.S)
    assert config and program, "the README's first example moved"
    return json.loads(config.group(1)), program.group(1)


def entry(server: realpeers.RealServer) -> dict:
    realpeers.require(server)
    return {"command": server.argv[0], "args": server.argv[1:], "env": dict(server.env)}


@pytest.mark.real_servers
def test_the_readme_host_program_runs_with_20_calls_and_a_collision(tmp_path, capsys,
                                                                    no_leaks):
    config, program = first_example()
    # The README's servers, each the installed real one: mcp-server-time, the legacy
    # server-everything (as allowlisted there) and a server of one's own with an "echo".
    assert list(config["mcpServers"]) == ["time", "everything", "mine"]
    assert config["mcpServers"]["everything"]["allowLegacy"] is True
    installed = {"time": entry(realpeers.MODERN_PY_TIME),
                 "everything": {**entry(realpeers.LEGACY_TS_EVERYTHING), "allowLegacy": True},
                 "mine": entry(realpeers.MODERN_PY_ECHO)}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": installed}))
    script = tmp_path / "host_program.py"
    script.write_text(program)
    example = runpy.run_path(str(script), run_name="readme_example")

    handed: list[list[dict]] = []

    async def model(tools: list[dict]) -> list[tuple[str, dict]]:
        handed.append(tools)
        zones = ["Asia/Tokyo", "America/Lima", "Europe/Oslo", "UTC"]
        return ([("get_current_time", {"timezone": zones[n % 4]}) for n in range(10)]
                + [("everything_echo", {"message": f"e{n}"}) for n in range(5)]
                + [("mine_echo", {"text": f"m{n}"}) for n in range(5)])

    run(example["main"](str(path), ask=model), timeout=180)
    [tools] = handed
    for tool in tools:
        jsonschema.validate(tool, ANTHROPIC_TOOL)
    names = [tool["name"] for tool in tools]
    assert len(set(names)) == len(names)
    # The collision: "echo" is offered by two servers, and each is named after its own.
    assert {"everything_echo", "mine_echo", "get_current_time"} <= set(names)
    assert "echo" not in names

    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:3]] == [
        ["time", "ready"], ["everything", "ready"], ["mine", "ready"]]
    answered = [line for line in lines[3:] if " -> " in line]
    assert len(answered) == 20 and not any("failed:" in line for line in lines), lines
    assert sum("Asia/Tokyo" in line for line in answered) == 3
    assert [line.split(" -> ")[1].strip() for line in answered[15:]] == [
        f"m{n}" for n in range(5)]
    assert all("e" + str(n) in answered[10 + n] for n in range(5))
