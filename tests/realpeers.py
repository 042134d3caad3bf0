"""Real MCP servers for the test suite: where they live and how to spawn them.

`.ci/install-peers` installs every server below into ``<repo>/.peers/``
(gitignored). This module is the single source of truth for the pinned
versions: the install script reads them with
``python3 tests/realpeers.py --shell`` so the two cannot drift.

Each server is a :class:`RealServer`; spawn it from anywhere with::

    proc = subprocess.Popen(srv.argv, env=spawn_env(srv), cwd=REPO_ROOT,
                            stdin=PIPE, stdout=PIPE, stderr=PIPE)

``installed(srv)`` is exact: it checks the entry point exists *and* that the
pinned package versions are the ones on disk (dist-info / package.json), and
for our own scripts that the installed copy matches the source. Tests marked
``real_servers`` should ``pytest.fail`` (not skip) in CI when it is False:
use :func:`require`.

The Streamable HTTP servers (``HTTP``: our SDK scripts and server-everything in
``streamableHttp`` mode) take ``--port 0`` and print ``LISTENING <url>``; start them with
``tests/httppeers.py``, which waits for that line and kills the process group after.

Observed wire behaviour of each server is documented in
``tests/peers/REAL_SERVERS.md``. Cold start (spawn -> first reply) is
~0.4-0.6 s for the Node servers and ~1-2 s (up to ~3 s under load) for the
Python ones: use probe/handshake timeouts of >= 5 s against them.

Run ``python3 tests/realpeers.py`` for a status table (exit 1 if any missing);
``python3 tests/realpeers.py --mcp-entry NAME`` prints one installed server as an
``mcpServers`` entry (exit 1 if it is not installed).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PEERS_DIR = REPO_ROOT / ".peers"
PEERS_SRC = REPO_ROOT / "tests" / "peers"

# ---- pins (read by .ci/install-peers via --shell) ---------------------------
PINS: dict[str, str] = {
    "LEGACY_PY_MCP": "1.30.0",
    "LEGACY_PY_TIME": "2026.10.10",
    "MODERN_PY_MCP": "2.3.0",
    "MODERN_PY_TIME": "2026.10.19",
    # fastmcp 4.x runs on the official mcp 2.x SDK (the same MODERN_PY_MCP pin)
    "FASTMCP": "4.2.3",
    # npm pins live in the committed package.json / package-lock.json files;
    # repeated here so installed() can verify what is on disk.
    "LEGACY_TS_EVERYTHING": "2026.8.31",
    "MODERN_TS_SERVER": "2.4.0",
}

PY_LEGACY_VENV = PEERS_DIR / "py-legacy"
PY_MODERN_VENV = PEERS_DIR / "py-modern"
FASTMCP_VENV = PEERS_DIR / "fastmcp"
NPM_DIR = PEERS_DIR / "npm"  # server-everything (tests/peers/npm/)
TS_MODERN_DIR = PEERS_DIR / "ts-modern"  # our v2 server (tests/peers/ts-modern/)

#: Node used for the npm servers. Both need >=20 (engines); Node 20 is fine.
NODE = shutil.which("node") or "node"

# Deterministic time server output regardless of the machine's /etc/localtime.
_TZ_ARGS = ["--local-timezone", "UTC"]
_PY_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(frozen=True)
class RealServer:
    """One real server. ``env`` holds only overrides; see :func:`spawn_env`."""

    name: str
    argv: list[str]
    env: Mapping[str, str]
    era_expected: str  # "legacy" | "modern" | "dual" (answers both eras)
    notes: str = ""
    # what installed() checks: (path, kind, expected) with kind in
    # {"exists", "dist-info", "npm-version", "same-as"}
    checks: tuple[tuple[Path, str, str], ...] = field(default=(), repr=False)

    def __hash__(self) -> int:  # argv/env are unhashable; name is unique
        return hash(self.name)


def _site_packages(venv: Path) -> Path | None:
    hits = sorted((venv / "lib").glob("python3*/site-packages"))
    return hits[0] if hits else None


def _dist_installed(venv: Path, dist: str, version: str) -> bool:
    sp = _site_packages(venv)
    return sp is not None and (sp / f"{dist}-{version}.dist-info" / "METADATA").is_file()


def _npm_version(pkg_dir: Path) -> str | None:
    try:
        return json.loads((pkg_dir / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def installed(server: RealServer) -> bool:
    """True iff ``server`` is installed at exactly the pinned versions."""
    for path, kind, expected in server.checks:
        if kind == "exists":
            if not path.is_file():
                return False
        elif kind == "dist-info":
            if not _dist_installed(path, *expected.split("==")):
                return False
        elif kind == "npm-version":
            if _npm_version(path) != expected:
                return False
        elif kind == "same-as":
            try:
                if path.read_bytes() != Path(expected).read_bytes():
                    return False
            except OSError:
                return False
        else:  # pragma: no cover
            raise ValueError(kind)
    return not (server.argv and server.argv[0] == NODE and shutil.which(NODE) is None)


def missing_reason(server: RealServer) -> str:
    return (
        f"real server {server.name!r} is not installed at its pinned version "
        f"under {PEERS_DIR}; run: bash .ci/install-peers"
    )


def require(server: RealServer) -> RealServer:
    """Return ``server``; pytest.fail (never skip) when it is not installed."""
    if not installed(server):
        import pytest

        pytest.fail(missing_reason(server), pytrace=False)
    return server


def spawn_env(server: RealServer, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default os.environ) with the server's overrides applied."""
    env = dict(os.environ if base is None else base)
    env.update(server.env)
    return env


# ---- the servers -------------------------------------------------------------

LEGACY_PY_TIME = RealServer(
    name="legacy-py-time",
    argv=[str(PY_LEGACY_VENV / "bin" / "mcp-server-time"), *_TZ_ARGS],
    env=_PY_ENV,
    era_expected="legacy",
    notes=(
        f"mcp-server-time=={PINS['LEGACY_PY_TIME']} on mcp=={PINS['LEGACY_PY_MCP']} "
        "(Python SDK 1.x, lowlevel Server). "
        "Probe server/discover -> -32602 'Invalid request parameters' data ''; "
        "initialize still works after it. tools/call before initialize -> -32602. "
        "Tools: get_current_time, convert_time."
    ),
    checks=(
        (PY_LEGACY_VENV / "bin" / "mcp-server-time", "exists", ""),
        (PY_LEGACY_VENV, "dist-info", f"mcp=={PINS['LEGACY_PY_MCP']}"),
        (PY_LEGACY_VENV, "dist-info", f"mcp_server_time=={PINS['LEGACY_PY_TIME']}"),
    ),
)

MODERN_PY_TIME = RealServer(
    name="modern-py-time",
    argv=[str(PY_MODERN_VENV / "bin" / "mcp-server-time"), *_TZ_ARGS],
    env=_PY_ENV,
    era_expected="dual",
    notes=(
        f"mcp-server-time=={PINS['MODERN_PY_TIME']} on mcp=={PINS['MODERN_PY_MCP']} "
        "(Python SDK 2.x MCPServer, dual-era stdio loop: first request pins the era; "
        "after server/discover an "
        "initialize gets -32022). Tools: get_current_time, convert_time."
    ),
    checks=(
        (PY_MODERN_VENV / "bin" / "mcp-server-time", "exists", ""),
        (PY_MODERN_VENV, "dist-info", f"mcp=={PINS['MODERN_PY_MCP']}"),
        (PY_MODERN_VENV, "dist-info", f"mcp_server_time=={PINS['MODERN_PY_TIME']}"),
    ),
)

MODERN_PY_ECHO = RealServer(
    name="modern-py-echo",
    argv=[str(PY_MODERN_VENV / "bin" / "python"), str(PEERS_SRC / "py_modern_echo.py")],
    env=_PY_ENV,
    era_expected="dual",
    notes=(
        f"our tests/peers/py_modern_echo.py on mcp=={PINS['MODERN_PY_MCP']} MCPServer; "
        "tools echo{text}, search{query,limit?}, sleep{ms}."
    ),
    checks=(
        (PY_MODERN_VENV / "bin" / "python", "exists", ""),
        (PY_MODERN_VENV, "dist-info", f"mcp=={PINS['MODERN_PY_MCP']}"),
        (PEERS_SRC / "py_modern_echo.py", "exists", ""),
    ),
)

#: The conformance suite's "everything server" (tests/conformance/run_server.sh runs it
#: over HTTP); on stdio, for tests of what only its fixture tools trigger. Not in ``ALL``.
CONFORMANCE_EVERYTHING = RealServer(
    name="conformance-everything",
    argv=[str(PY_MODERN_VENV / "bin" / "python"), str(PEERS_SRC / "conformance_everything.py"),
          "--stdio"],
    env=_PY_ENV,
    era_expected="dual",
    notes=(
        f"our tests/peers/conformance_everything.py on mcp=={PINS['MODERN_PY_MCP']} MCPServer; "
        "the suite's fixture tools, e.g. test_trigger_prompt_change and "
        "test_trigger_tool_change (list changes announced on listen streams)."
    ),
    checks=(
        (PY_MODERN_VENV / "bin" / "python", "exists", ""),
        (PY_MODERN_VENV, "dist-info", f"mcp=={PINS['MODERN_PY_MCP']}"),
        (PEERS_SRC / "conformance_everything.py", "exists", ""),
    ),
)

#: fastmcp as a skills (SEP-2640) and MCP Apps server over stdio; its options choose what
#: it serves (tests/peers/fastmcp_skills.py). Not in ``ALL``: it serves nothing without them.
FASTMCP_SKILLS = RealServer(
    name="fastmcp-skills",
    argv=[str(FASTMCP_VENV / "bin" / "python"), str(PEERS_SRC / "fastmcp_skills.py")],
    env=_PY_ENV,
    era_expected="dual",
    notes=(
        f"our tests/peers/fastmcp_skills.py on fastmcp=={PINS['FASTMCP']} "
        f"(mcp=={PINS['MODERN_PY_MCP']}): --skills DIR (SkillsDirectoryProvider, re-read "
        "per request), --drifted (a SkillManifestProvider whose manifest's frontmatter is "
        "not its file's), --app (tool clock with _meta.ui.resourceUri ui://clock/view). "
        "Declares io.modelcontextprotocol/ui always, io.modelcontextprotocol/skills with a "
        "skills provider; skills/list and skills/get only at 2026-07-28."
    ),
    checks=(
        (FASTMCP_VENV / "bin" / "python", "exists", ""),
        (FASTMCP_VENV, "dist-info", f"fastmcp=={PINS['FASTMCP']}"),
        (PEERS_SRC / "fastmcp_skills.py", "exists", ""),
    ),
)

_EVERYTHING_PKG = NPM_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything"
LEGACY_TS_EVERYTHING = RealServer(
    name="legacy-ts-everything",
    argv=[NODE, str(_EVERYTHING_PKG / "dist" / "index.js"), "stdio"],
    env={},
    era_expected="legacy",
    notes=(
        f"@modelcontextprotocol/server-everything@{PINS['LEGACY_TS_EVERYTHING']} (TS SDK 1.x) "
        "in stdio mode. Probe server/discover -> -32601. Executes tools/call before initialize; "
        "sends notifications/tools/list_changed right after notifications/initialized."
    ),
    checks=(
        (_EVERYTHING_PKG / "dist" / "index.js", "exists", ""),
        (_EVERYTHING_PKG, "npm-version", PINS["LEGACY_TS_EVERYTHING"]),
    ),
)

_TS_SDK_PKG = TS_MODERN_DIR / "node_modules" / "@modelcontextprotocol" / "server"
_TS_CHECKS = (
    (TS_MODERN_DIR / "server.mjs", "same-as", str(PEERS_SRC / "ts-modern" / "server.mjs")),
    (_TS_SDK_PKG, "npm-version", PINS["MODERN_TS_SERVER"]),
)
MODERN_TS = RealServer(
    name="modern-ts",
    argv=[NODE, str(TS_MODERN_DIR / "server.mjs")],
    env={},
    era_expected="dual",
    notes=(
        "our tests/peers/ts-modern/server.mjs on "
        f"@modelcontextprotocol/server@{PINS['MODERN_TS_SERVER']} "
        "serveStdio(legacy:'serve'); tools echo{text}, search{query,limit?}, sleep{ms}. "
        "server/discover does not pin the era (a later initialize is served as legacy); a "
        "claim-less tools/call is executed without initialize."
    ),
    checks=_TS_CHECKS,
)

MODERN_TS_STRICT = RealServer(
    name="modern-ts-strict",
    argv=[NODE, str(TS_MODERN_DIR / "server.mjs"), "--legacy=reject"],
    env={},
    era_expected="modern",
    notes=(
        "same as modern-ts with serveStdio(legacy:'reject'): initialize and any claim-less "
        "request -> -32022 (claim-less ones without data.requested)."
    ),
    checks=_TS_CHECKS,
)

# ---- the same SDKs over Streamable HTTP ---------------------------------------------
# Each prints `LISTENING http://127.0.0.1:<port>/mcp` on stdout once it accepts
# connections and binds 127.0.0.1 only; start them with tests/httppeers.py. Our Python
# scripts also take `--record PATH` (one JSON line per HTTP request: method, path,
# lower-cased headers, body) and `--json-response`. Wire behaviour: REAL_SERVERS.md §7.

def _py_http(name: str, venv: Path, script: str, era: str, notes: str,
             *dists: str) -> RealServer:
    """One of our SDK scripts served by tests/peers/asgi_serve.py from ``venv``."""
    return RealServer(
        name=name,
        argv=[str(venv / "bin" / "python"), str(PEERS_SRC / script), "--port", "0"],
        env=_PY_ENV,
        era_expected=era,
        notes=notes,
        checks=(
            (venv / "bin" / "python", "exists", ""),
            *((venv, "dist-info", d) for d in dists),
            (PEERS_SRC / script, "exists", ""),
            (PEERS_SRC / "asgi_serve.py", "exists", ""),
        ),
    )


PY_HTTP_MODERN = _py_http(
    "py-http-modern",
    PY_MODERN_VENV,
    "py_http_modern.py",
    "dual",
    f"our tests/peers/py_http_modern.py: mcp=={PINS['MODERN_PY_MCP']} "
    "MCPServer.streamable_http_app; "
    "a 2026-07-28 MCP-Protocol-Version header routes to the modern single-exchange handler, "
    "anything else to the legacy stateful (Mcp-Session-Id) transport. "
    "Tools add, echo, headered (x-mcp-header Region/Count/Flag), count, slow.",
    f"mcp=={PINS['MODERN_PY_MCP']}",
)
PY_HTTP_LEGACY = _py_http(
    "py-http-legacy", PY_LEGACY_VENV, "py_http_legacy.py", "legacy",
    f"our tests/peers/py_http_legacy.py: mcp=={PINS['LEGACY_PY_MCP']} FastMCP streamable-http, "
    "stateful: initialize mints Mcp-Session-Id; anything else without it -> 400 -32600. "
    "Same tools as py-http-modern.",
    f"mcp=={PINS['LEGACY_PY_MCP']}",
)
FASTMCP_HTTP = _py_http(
    "fastmcp-http",
    FASTMCP_VENV,
    "fastmcp_http.py",
    "dual",
    f"our tests/peers/fastmcp_http.py: fastmcp=={PINS['FASTMCP']} "
    f"(on mcp=={PINS['MODERN_PY_MCP']}) "
    "FastMCP.http_app; dual-era like py-http-modern. Same tools.",
    f"fastmcp=={PINS['FASTMCP']}",
    f"mcp=={PINS['MODERN_PY_MCP']}",
)

LOOPBACK_ONLY_CJS = PEERS_SRC / "loopback-only.cjs"
TS_EVERYTHING_HTTP = RealServer(
    name="ts-everything-http",
    argv=[NODE, str(_EVERYTHING_PKG / "dist" / "index.js"), "streamableHttp"],
    env={
        "PORT": "0",
        "NODE_OPTIONS": f'--require "{LOOPBACK_ONLY_CJS}"',
        "TRUNKLINE_LISTENING_PATH": "/mcp",
    },
    era_expected="legacy",
    notes=(
        f"@modelcontextprotocol/server-everything@{PINS['LEGACY_TS_EVERYTHING']} streamableHttp "
        "(TS SDK 1.x, stateful, SSE answers with event ids); tests/peers/loopback-only.cjs "
        "binds it to 127.0.0.1 and prints the LISTENING line. It logs to stdout too."
    ),
    checks=(
        (_EVERYTHING_PKG / "dist" / "index.js", "exists", ""),
        (_EVERYTHING_PKG, "npm-version", PINS["LEGACY_TS_EVERYTHING"]),
        (LOOPBACK_ONLY_CJS, "exists", ""),
    ),
)

#: the stdio servers (tests/peers/probe_real.py probes these)
ALL: tuple[RealServer, ...] = (
    LEGACY_PY_TIME,
    MODERN_PY_TIME,
    MODERN_PY_ECHO,
    LEGACY_TS_EVERYTHING,
    MODERN_TS,
    MODERN_TS_STRICT,
)
#: the Streamable HTTP servers (tests/httppeers.py starts these)
HTTP: tuple[RealServer, ...] = (PY_HTTP_MODERN, PY_HTTP_LEGACY, FASTMCP_HTTP, TS_EVERYTHING_HTTP)
BY_NAME: dict[str, RealServer] = {s.name: s for s in (*ALL, *HTTP, FASTMCP_SKILLS)}


def _main(argv: list[str]) -> int:
    if argv[1:] == ["--shell"]:
        for k, v in PINS.items():
            print(f"PIN_{k}={v}")
        return 0
    if argv[1:2] == ["--mcp-entry"] and len(argv) == 3:
        # One server as an ``mcpServers`` entry (tests/conformance/run_server.sh).
        server = BY_NAME.get(argv[2])
        if server is None or not installed(server):
            print(missing_reason(server) if server else f"no real server {argv[2]!r}",
                  file=sys.stderr)
            return 1
        print(json.dumps({"command": server.argv[0], "args": server.argv[1:],
                          "env": dict(server.env)}))
        return 0
    bad = 0
    for s in ALL + HTTP:
        ok = installed(s)
        bad += not ok
        print(f"{'ok     ' if ok else 'MISSING'} {s.name:22} {' '.join(s.argv)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
