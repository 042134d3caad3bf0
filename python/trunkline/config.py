"""The ``{"mcpServers": {...}}`` configuration file used by Claude Desktop, Cursor and
VS Code, plus trunkline's own per-server ``allowLegacy`` key.

Everything is checked up front: a host that starts with half its configuration silently
ignored is worse than one that refuses to start and says which key is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .errors import ConfigurationError
from .transports.stdio import StdioParams


@dataclass(frozen=True)
class ServerEntry:
    name: str
    params: StdioParams
    allow_legacy: bool = False
    #: Tools (by the server's local names) that are safe to repeat after a failure that
    #: may have reached the server.
    idempotent_tools: tuple[str, ...] = ()


_KNOWN_KEYS = {"command", "args", "env", "cwd", "allowLegacy", "idempotentTools", "type",
               "disabled"}


def _fail(path: str, name: str | None, message: str) -> ConfigurationError:
    where = f"{path}: server {name!r}" if name is not None else path
    return ConfigurationError(f"{where}: {message}")


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def parse_entry(name: str, raw: Any, *, source: str, base_dir: Path | None) -> ServerEntry | None:
    """One server entry; ``None`` for an entry marked ``"disabled": true``."""
    if not isinstance(raw, dict):
        raise _fail(source, name, "entry must be an object")
    if raw.get("disabled") is True:
        return None
    if "url" in raw:
        raise _fail(source, name, "Streamable HTTP servers (\"url\") are not supported yet; "
                    "only stdio servers (\"command\") are")
    unknown = set(raw) - _KNOWN_KEYS
    if unknown:
        raise _fail(source, name, f"unknown keys {sorted(unknown)}")
    if raw.get("type", "stdio") != "stdio":
        raise _fail(source, name, f"transport type {raw.get('type')!r} is not supported")
    command = raw.get("command")
    if not isinstance(command, str) or not command:
        raise _fail(source, name, "\"command\" must be a non-empty string")
    args = raw.get("args", [])
    if not _str_list(args):
        raise _fail(source, name, "\"args\" must be a list of strings")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise _fail(source, name, "\"env\" must map strings to strings")
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise _fail(source, name, "\"cwd\" must be a string")
    if cwd is not None and base_dir is not None and not os.path.isabs(cwd):
        cwd = str(base_dir / cwd)
    allow_legacy = raw.get("allowLegacy", False)
    if not isinstance(allow_legacy, bool):
        raise _fail(source, name, "\"allowLegacy\" must be true or false")
    idempotent = raw.get("idempotentTools", [])
    if not _str_list(idempotent):
        raise _fail(source, name, "\"idempotentTools\" must be a list of tool names")
    return ServerEntry(name, StdioParams(command, tuple(args), dict(env), cwd), allow_legacy,
                       tuple(idempotent))


def parse_config(data: Any, *, source: str = "<config>",
                 base_dir: Path | None = None) -> list[ServerEntry]:
    """Servers in file order (the order that decides who keeps a contested tool name)."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise _fail(source, None, "expected an object with an \"mcpServers\" object")
    servers: Mapping[str, Any] = data["mcpServers"]
    entries = []
    for name, raw in servers.items():
        if not name or "/" in name:
            # "/" separates server and tool in prefixed names: it must stay unambiguous.
            raise _fail(source, name, "server names must be non-empty and contain no '/'")
        entry = parse_entry(name, raw, source=source, base_dir=base_dir)
        if entry is not None:
            entries.append(entry)
    return entries


def load_config(path: str | os.PathLike[str]) -> list[ServerEntry]:
    p = Path(path)
    try:
        data = orjson.loads(p.read_bytes())
    except OSError as exc:
        raise ConfigurationError(f"{p}: cannot read: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise ConfigurationError(f"{p}: not valid JSON: {exc}") from exc
    return parse_config(data, source=str(p), base_dir=p.parent)
