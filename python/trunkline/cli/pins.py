"""``trunkline pins list|diff|approve CONFIG ...``: the pins of a configuration's servers,
read from (and approved in) the store ``Host.from_config`` and ``trunkline serve`` use,
without starting any server. An approval counts in a running host (a gateway, a replica
sharing the Redis store) at the server's next listing: its next list change, restart or
``refresh_tools``.
"""

from __future__ import annotations

import sys
from typing import Any

import orjson

from ..catalog.pins import PinRecord, approve, diff, server_identity
from ..config import load_config, load_oauth_config
from ..errors import ConfigurationError
from ..parent.pin_store import PinStore, pins_for
from ..settings import ServerConfig

EXIT_OK = 0


async def pins(path: str, action: str, server: str | None, tool: str | None,
               json_mode: bool) -> int:
    configs = {c.name: c for c in load_config(path)}
    store = pins_for(load_oauth_config(path).store)
    try:
        if action == "list":
            return await _list(store, configs, json_mode)
        config = _configured(configs, server)
        record = await store.load(server_identity(config.params.identity()))
        if tool is None:
            raise ConfigurationError(f"trunkline pins {action} needs a TOOL")
        if action == "diff":
            return _diff(record, config, tool, json_mode)
        try:
            approved = approve(record, tool)
        except KeyError:
            raise ConfigurationError(f"server {config.name!r}: no definition of tool {tool!r} "
                                     f"waits for approval") from None
        await store.save(approved)
        print(f"approved: server {config.name!r}, tool {tool!r}; a running host admits it "
              f"at the server's next listing")
        return EXIT_OK
    finally:
        await store.aclose()


def _configured(configs: dict[str, ServerConfig], server: str | None) -> ServerConfig:
    if server is None or server not in configs:
        raise ConfigurationError(f"no server named {server!r} in the configuration "
                                 f"(servers: {', '.join(configs) or 'none'})")
    return configs[server]


def _status(record: PinRecord, tool: str) -> dict[str, Any]:
    if tool not in record.pending:
        return {"server": record.server, "tool": tool, "state": "approved"}
    before = record.approved.get(tool)
    if before is None:
        return {"server": record.server, "tool": tool, "state": "waiting", "reason": "new"}
    return {"server": record.server, "tool": tool, "state": "waiting", "reason": "changed",
            "changes": list(diff(before.definition, record.pending[tool].definition))}


async def _list(store: PinStore, configs: dict[str, ServerConfig], json_mode: bool) -> int:
    rows: list[dict[str, Any]] = []
    for name, config in configs.items():
        record = await store.load(server_identity(config.params.identity()))
        record = PinRecord(record.identity, name, config.params.describe(), record.approved,
                           record.pending)
        rows.extend(_status(record, tool)
                    for tool in sorted(set(record.approved) | set(record.pending)))
    show_rows(rows, json_mode)
    return EXIT_OK


def show_rows(rows: list[dict[str, Any]], json_mode: bool) -> None:
    """Print pins, one a line (server, tool, state and why it waits), or as JSON."""
    if json_mode:
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    for row in rows:
        line = f"{row['server']}\t{row['tool']}\t{row['state']}"
        if row["state"] == "waiting":
            line += f" ({row['reason']}"
            line += f": {', '.join(row['changes'])})" if row.get("changes") else ")"
        print(line)


def _diff(record: PinRecord, config: ServerConfig, tool: str, json_mode: bool) -> int:
    pending = record.pending.get(tool)
    if pending is None:
        raise ConfigurationError(f"server {config.name!r}: no definition of tool {tool!r} "
                                 f"waits for approval")
    before = record.approved.get(tool)
    show_diff(f"server {config.name!r} ({config.params.describe()})", config.name, tool,
              None if before is None else before.definition, pending.definition, json_mode)
    return EXIT_OK


def show_diff(label: str, server: str, tool: str, approved: Any, current: Any,
              json_mode: bool) -> None:
    """Print what changed between a tool's ``approved`` definition (None: never approved)
    and the one waiting (``current``), path by path; as JSON with ``json_mode``."""
    changes = [] if approved is None else [
        {"path": path, "approved": _at(approved, path), "now": _at(current, path)}
        for path in diff(approved, current)]
    if json_mode:
        doc = {"server": server, "tool": tool, "changes": changes, "definition": current}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    print(f"{label}, tool {tool!r}:")
    if approved is None:
        print("new (never approved):")
        print(orjson.dumps(current, option=orjson.OPT_INDENT_2).decode())
    for change in changes:
        print(f"{change['path']}:\n  approved: {_show(change['approved'])}\n"
              f"  now:      {_show(change['now'])}")


def _at(definition: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(definition, dict) or key not in definition:
            return None
        definition = definition[key]
    return definition


def _show(value: Any) -> str:
    return "(absent)" if value is None else orjson.dumps(value).decode()
