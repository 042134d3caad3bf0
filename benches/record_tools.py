"""Record real MCP servers' tool definitions (``tools/list``, as each server sent them)
into the fixture the tool-search benchmark and recall test build their catalogs from
(``tests/catalog/real_tools.json``). Run once, by hand, with the servers installed where
the arguments say; the fixture is committed, so nothing here runs in CI.

    python benches/record_tools.py OUT.json NAME=PACKAGE@VERSION=COMMAND [ARGS...] ...

Each server is added to one ``Host`` (allowlisted for the legacy era: several of these
servers speak only 2025-11-25) and its definitions are written under its name with the
package and version it came from.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys

import trunkline


async def record(specs: list[str]) -> dict[str, object]:
    servers: list[dict[str, object]] = []
    async with trunkline.Host() as host:
        for spec in specs:
            name, package, command = spec.split("=", 2)
            argv = shlex.split(command)
            status = await host.add_server(name, trunkline.stdio(argv[0], *argv[1:]),
                                           allow_legacy=True, discover_timeout_s=30)
            if status.state.value != "ready":
                raise SystemExit(f"{name}: {status.state.value}: {status.reason}")
            tools = [dict(e.raw) for e in host.tools() if e.server == name]
            servers.append({"server": name, "package": package, "era": status.era,
                            "tools": tools})
    return {"recorded_with": "benches/record_tools.py", "servers": servers}


def main() -> None:
    out, *specs = sys.argv[1:]
    fixture = asyncio.run(record(specs))
    with open(out, "w") as f:
        json.dump(fixture, f, indent=1, sort_keys=True)
        f.write("\n")
    for server in fixture["servers"]:  # type: ignore[union-attr]  # the fixture's known shape
        print(server["server"], len(server["tools"]))


if __name__ == "__main__":
    main()
