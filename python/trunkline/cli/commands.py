"""The ``trunkline`` command line: ``demo``, ``probe``, ``tools``, ``call``, ``serve``,
``status``, ``reload``, ``login``, ``pins``, ``credentials``.

Exit codes: 0 success; 1 a call failed or returned ``isError``, or the host failed
(a ``TrunklineError``); 2 bad usage or configuration; 3 a server is unavailable
(``probe``); 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import IO, TYPE_CHECKING, Any, cast

import orjson

from .. import __version__
from ..channel import ServerState
from ..config import load_config
from ..errors import ConfigurationError, TrunklineError
from ..log_format import FORMATS, LEVELS
from ..log_format import configure as configure_logs
from ..parent.handle import ServerStatus
from ..parent.host import Host
from ..parent.results import CallToolResult
from ..parent.supervisor import Supervisor
from ..settings import ServerConfig
from .progress import FleetProgress, log_change

if TYPE_CHECKING:
    from ..gateway.bearer import ResourceSettings
    from ..gateway.serve import GatewaySettings

EXIT_OK, EXIT_CALL_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3


# --- JSON shapes shared by --json output and the renderer -----------------------------


def status_json(s: ServerStatus) -> dict[str, Any]:
    return {
        "name": s.name, "state": s.state.value, "era": s.era, "version": s.version,
        "server_info": s.server_info, "reason": s.reason, "hint": s.hint,
        "evidence": list(s.evidence),
        "stderr_tail": s.stderr_tail, "time_to_verdict_s": s.time_to_verdict_s,
        "restarts": s.restarts, "in_flight": s.in_flight, "late_replies": s.late_replies,
        "protocol_violations": s.protocol_violations, "last_error": s.last_error,
        "listing_error": s.listing_error, "extensions": list(s.extensions),
    }


def result_json(r: CallToolResult) -> dict[str, Any]:
    return {"tool": r.tool, "server": r.server, "is_error": r.is_error, "text": r.text,
            "structured_content": r.structured_content}


def tools_json(host: Host) -> list[dict[str, Any]]:
    return [{"name": t.name, "server": t.server, "local_name": t.local_name,
             "alias": t.alias, "title": t.display_name, "description": t.description}
            for t in host.tools()]


# --- rendering ------------------------------------------------------------------------


class Out:
    """Readable terminal output (rich), or nothing when ``--json`` collects a document."""

    def __init__(self, json_mode: bool) -> None:
        self.json_mode = json_mode
        if not json_mode:
            from rich.console import Console

            self.console = Console(highlight=False)

    def heading(self, text: str) -> None:
        if not self.json_mode:
            self.console.rule(f"[bold]{text}")

    def line(self, text: str) -> None:
        if not self.json_mode:
            self.console.print(text)

    def servers(self, statuses: Sequence[ServerStatus]) -> None:
        if self.json_mode:
            return
        from rich.markup import escape
        from rich.table import Table

        table = Table(show_lines=True)
        for col in ("server", "state", "era", "version", "verdict in",
                    "evidence / reason / stderr tail"):
            table.add_column(col)
        for s in statuses:
            colour = {"ready": "green", "unavailable": "red"}.get(s.state.value, "yellow")
            parts = [escape(line) for line in s.evidence]
            if s.reason:
                parts.append(f"[red]{escape(s.reason)}[/red]")
            if s.hint:
                parts.append(f"[yellow]hint: {escape(s.hint)}[/yellow]")
            if s.listing_error:
                parts.append(f"[yellow]{escape(s.listing_error)}[/yellow]")
            if s.extensions:
                parts.append(f"extensions: {escape(', '.join(s.extensions))}")
            if s.stderr_tail and s.state is not ServerState.READY:
                parts.append(f"[dim]stderr:\n{escape(s.stderr_tail)}[/dim]")
            took = "-" if s.time_to_verdict_s is None else f"{s.time_to_verdict_s:.2f} s"
            table.add_row(s.name, f"[{colour}]{s.state.value}[/{colour}]", s.era or "-",
                          s.version or "-", took, "\n".join(parts) or "-")
        self.console.print(table)

    def tools(self, host: Host) -> None:
        if self.json_mode:
            return
        from rich.table import Table

        table = Table()
        for col in ("tool (canonical)", "server", "local name", "description"):
            table.add_column(col)
        for t in host.tools():
            table.add_row(t.name, t.server, t.local_name, _first_sentence(t.description))
        self.console.print(table)
        for w in host.warnings:
            self.console.print(f"[yellow]warning:[/yellow] {w}")

    def call(self, name: str, args: dict[str, Any], r: CallToolResult) -> None:
        if self.json_mode:
            return
        mark = "[red]isError[/red]" if r.is_error else "[green]ok[/green]"
        self.console.print(f"[bold]{name}[/bold] {orjson.dumps(args).decode()} -> "
                           f"server [cyan]{r.server}[/cyan] {mark}")
        first = r.text.strip().splitlines()[:3]
        for text in first:
            self.console.print(f"    {text[:100]}")


def _first_sentence(text: str | None) -> str:
    if not text:
        return ""
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


# --- commands ---------------------------------------------------------------------------


async def demo(json_mode: bool) -> int:
    """Bundled servers: two modern servers and one allowlisted legacy server, all three
    exposing ``search``, plus the same legacy server *not* allowlisted to show the
    fail-closed verdict."""
    from ..demo import demo_servers
    from ..params import stdio

    out = Out(json_mode)
    doc: dict[str, Any] = {}
    entries = [ServerConfig(d.name, stdio(*d.argv), allow_legacy=d.allow_legacy)
               for d in demo_servers()]
    archive = next(d for d in demo_servers() if d.allow_legacy)
    entries.append(ServerConfig("unlisted", stdio(*archive.argv), allow_legacy=False))
    async with Host() as host:
        await host.add_servers(entries)
        out.heading("1. Era verdicts, from positive evidence only")
        out.line("'unlisted' runs the same legacy server as 'archive' but is not allowlisted: "
                 "it never receives initialize.")
        out.servers(host.servers())
        doc["servers"] = [status_json(s) for s in host.servers()]

        out.heading("2. The merged catalog (collision policy: prefix)")
        out.tools(host)
        doc["tools"] = tools_json(host)
        doc["warnings"] = [str(w) for w in host.warnings]

        out.heading("3. Calls routed to their owners")
        doc["calls"] = []
        for name, args in (("web_search", {"query": "model context protocol"}),
                           ("docs_search", {"query": "server discover"}),
                           ("summarize", {"text": "Routing is a lookup. Nothing else."}),
                           ("lookup", {"id": "mcp-2025-06-18"}),
                           ("archive_search", {"query": "streamable http"})):
            result = await host.call_tool(name, args, timeout=30)
            out.call(name, args, result)
            doc["calls"].append({"name": name, "arguments": args, **result_json(result)})

        out.heading("4. A server killed (SIGKILL) and restarted; its calls still answered")
        victim = next(s for s in host.servers() if s.name == "docs")
        assert victim.server_pid is not None
        gone = asyncio.Event()

        def watch_docs(status: ServerStatus) -> None:
            if status.name == "docs" and status.state is not ServerState.READY:
                gone.set()

        unwatch = host.watch_servers(watch_docs)
        os.kill(victim.server_pid, signal.SIGKILL)
        await gone.wait()
        unwatch()
        out.line(f"killed docs server pid {victim.server_pid}; state now "
                 f"{next(s for s in host.servers() if s.name == 'docs').state.value}")
        args = {"query": "cancellation"}
        result = await host.call_tool("docs_search", args, timeout=30)
        out.call("docs_search", args, result)
        after = next(s for s in host.servers() if s.name == "docs")
        out.line(f"docs is {after.state.value} again after {after.restarts} restart(s), "
                 f"server pid {after.server_pid}, era {after.era} renegotiated")
        doc["restart"] = {"server": "docs", "killed_pid": victim.server_pid,
                          "new_pid": after.server_pid, "state": after.state.value,
                          "restarts": after.restarts,
                          "call": {"name": "docs_search", "arguments": args,
                                   **result_json(result)}}
    if json_mode:
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    return EXIT_OK


async def probe(path: str, json_mode: bool, discover_timeout_s: float | None,
                log_format: str | None = None) -> int:
    """Era verdict, evidence, time to verdict and stderr tail per server; no tool is
    listed or called."""
    configs = load_config(path, discover_timeout_s=discover_timeout_s)
    out = Out(json_mode)
    progress = FleetProgress(FleetProgress.mode_for(json_mode, log_format), transient=True)
    try:
        async with Supervisor(on_state=lambda handle: progress.update(handle.status())) as sup:
            statuses = await sup.add_many(configs)
            progress.close()  # the verdicts are in; stopping the servers is no news
    finally:
        progress.close()
    out.servers(statuses)
    if json_mode:
        sys.stdout.write(orjson.dumps([status_json(s) for s in statuses],
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
    bad = [s.name for s in statuses if s.state is not ServerState.READY]
    if bad:
        print(f"trunkline: {len(bad)} of {len(statuses)} servers unavailable: "
              f"{', '.join(bad)}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return EXIT_OK


async def tools(path: str, json_mode: bool, discover_timeout_s: float | None,
                log_format: str | None = None) -> int:
    out = Out(json_mode)
    async with _started(Host.from_config(path, discover_timeout_s=discover_timeout_s),
                        FleetProgress.mode_for(json_mode, log_format)) as host:
        out.tools(host)
        if json_mode:
            sys.stdout.write(orjson.dumps(tools_json(host), option=orjson.OPT_INDENT_2)
                             .decode() + "\n")
    return EXIT_OK


async def call(path: str, tool: str, arguments: str, json_mode: bool,
               discover_timeout_s: float | None, log_format: str | None = None) -> int:
    try:
        args = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        raise ConfigurationError(f"arguments are not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise ConfigurationError("arguments must be a JSON object")
    async with _started(Host.from_config(path, discover_timeout_s=discover_timeout_s),
                        FleetProgress.mode_for(json_mode, log_format)) as host:
        # An unknown tool's error names the servers not ready that could own it, and why.
        result = await host.call_tool(tool, args)
    if json_mode:
        sys.stdout.write(orjson.dumps(result_json(result), option=orjson.OPT_INDENT_2)
                         .decode() + "\n")
    else:
        print(result.text)
    return EXIT_CALL_FAILED if result.is_error else EXIT_OK


@asynccontextmanager
async def _started(host: Host, progress_mode: str, *,
                   transient: bool = True) -> AsyncIterator[Host]:
    """``async with host``, showing each server's state on stderr while the fleet comes
    up (``progress``); the display ends once the host is entered."""
    with FleetProgress(progress_mode, transient=transient) as progress:
        unwatch = host.watch_servers(progress)
        try:
            entered = await host.__aenter__()
        finally:
            unwatch()
    try:
        yield entered
    finally:
        await host.__aexit__(None, None, None)


async def serve(ns: argparse.Namespace) -> int:
    """The whole fleet as one MCP server (``gateway.serve``, from ``gateway_settings``):
    on stdin/stdout until the client closes stdin (stdout then carries protocol messages
    only), or over HTTP until SIGTERM, which drains; with ``--processes N``, N such HTTP
    gateways on one socket. The fleet coming up is shown on stderr, ``LISTENING <url>``
    printed once HTTP clients can be served, later changes of the servers logged."""
    from ..gateway.serve import serve as serve_gateway

    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main.cancel)
    settings = gateway_settings(ns)
    shown: list[FleetProgress] = []

    def starting(status: ServerStatus) -> None:
        if not shown:
            shown.append(FleetProgress(_serve_progress(ns), transient=False))
        shown[0].update(status)

    def serving(url: str | None) -> None:
        for progress in shown:
            progress.close()
        if settings.processes == 1:
            _settle_heap()
        if url is not None:
            print(f"LISTENING {url}", flush=True)

    try:
        return await serve_gateway(settings, starting=starting, watch=log_change,
                                   serving=serving)
    except asyncio.CancelledError:
        main.uncancel()
        return EXIT_OK
    finally:
        for progress in shown:
            progress.close()


def gateway_settings(ns: argparse.Namespace) -> GatewaySettings:
    """``serve``'s arguments as a gateway's settings, with what its environment adds over
    HTTP: ``TRUNKLINE_API_KEYS``, ``TRUNKLINE_ADMIN_KEYS``, ``TRUNKLINE_SESSION_KEY``,
    ``TRUNKLINE_REPLICA``; and
    ``TRUNKLINE_AUDIT_KEY`` with ``--audit-hash-arguments``."""
    from ..gateway.admin_access import read_admin_keys
    from ..gateway.api_keys import read_api_keys
    from ..gateway.limits import Limits
    from ..gateway.processes import REPLICA_ENV
    from ..gateway.serve import GatewaySettings

    http: dict[str, Any] = {}
    if ns.http:
        bind, port = _bind_address(ns.http)
        api_keys = read_api_keys(ns.api_key_file)
        http = {"bind": bind, "port": port, "api_keys": api_keys,
                "admin_keys": read_admin_keys(ns.admin_key_file, api_keys=api_keys),
                "admin_scope": ns.admin_scope or None,
                "oauth": _oauth(ns), "session_key": _session_key(),
                "replica": ns.replica or os.environ.get(REPLICA_ENV),
                "host_names": tuple(ns.host_names),
                "copy_arguments": _copy_arguments(ns.argv)}
    return GatewaySettings(
        config=ns.config, stdio=ns.stdio, call_timeout_s=ns.call_timeout_s,
        discover_timeout_s=ns.discover_timeout_s,
        max_discover_timeout_s=ns.max_discover_timeout_s,
        model_safe_names=ns.model_safe_names, tool_search=ns.tool_search,
        max_in_flight=ns.max_in_flight, max_per_server=ns.max_per_server,
        limits=Limits.parse(ns.limit), max_body_bytes=ns.max_body_bytes,
        drain_timeout_s=ns.drain_timeout_s, metrics=ns.metrics, processes=ns.processes,
        listen_fd=ns.listen_fd, audit=ns.audit, watch_config=ns.watch_config,
        drain_notice_s=ns.drain_notice_s,
        audit_key=_audit_key() if ns.audit_hash_arguments else None, **http)


def _serve_progress(ns: argparse.Namespace) -> str:
    """A copy of ``serve --processes N`` shares its terminal with N-1 others: lines."""
    mode = FleetProgress.mode_for(False, ns.log_format)
    return "lines" if mode == "live" and ns.listen_fd is not None else mode


def _copy_arguments(argv: list[str]) -> tuple[str, ...]:
    """The arguments of one copy of ``serve --processes N``: the command's without
    ``--processes``."""
    one = [a for a in argv if not a.startswith("--processes")]
    if "--processes" in argv:  # "--processes N" as two arguments
        at = argv.index("--processes")
        one = [*argv[:at], *argv[at + 2:]]
    return tuple(one)


#: The width of a table written to a file or pipe (nothing there wraps it for us).
_UNWRAPPED = 1000


async def status(ns: argparse.Namespace) -> int:
    """A running gateway's servers (``status_view``): once, or every ``--interval``
    seconds with ``--watch`` (redrawn in place on a terminal) until interrupted. Its
    output is written from the loop (``output.Output``): a terminal or pipe nobody reads
    never keeps a SIGINT from ending it (``interrupt.py``)."""
    import aiohttp
    from rich.console import Console

    from .operator import api_url, read_admin_key
    from .output import Output
    from .status_view import StatusUnavailable, fetch_status, read_token, status_table, status_url

    token = read_admin_key(ns.admin_key_file, required=False)
    if token is not None:  # the operator API's fleet: evidence and tools besides
        url = api_url(ns.url, "servers")
    else:
        url, token = status_url(ns.url), read_token(ns.token_file)
    out, err = Output(sys.stdout), Output(sys.stderr)
    live: Any = None
    try:
        stream = cast("IO[str]", out)  # what rich writes to: Output is a stream of text
        console = Console(file=stream, highlight=False)
        if not console.is_terminal:
            console = Console(file=stream, highlight=False, width=_UNWRAPPED)  # whole lines
        if ns.watch and not ns.json and console.is_terminal:
            from rich.live import Live

            live = Live(console=console, auto_refresh=False)
            live.start()
            await out.drain()
        timeout = aiohttp.ClientTimeout(total=ns.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                try:
                    doc: dict[str, Any] | None = await fetch_status(session, url, token)
                    failure = None
                except StatusUnavailable as exc:
                    if not ns.watch:
                        raise
                    doc, failure = None, f"trunkline: {exc}"
                if ns.json:
                    if doc is not None:
                        option = 0 if ns.watch else orjson.OPT_INDENT_2  # watch: JSON lines
                        out.write(orjson.dumps(doc, option=option).decode() + "\n")
                    else:
                        err.write(f"{failure}\n")
                elif live is not None:
                    from rich.text import Text

                    live.update(status_table(doc) if doc is not None
                                else Text(failure or "", style="red"), refresh=True)
                elif doc is not None:
                    console.print(status_table(doc))
                else:
                    err.write(f"{failure}\n")
                await out.drain()
                await err.drain()
                if not ns.watch:
                    return EXIT_OK
                await asyncio.sleep(ns.interval)
    finally:
        if live is not None:
            live.stop()
        out.close()
        err.close()


def _bind_address(text: str) -> tuple[str, int]:
    bind, _, port = text.rpartition(":")
    return bind.strip("[]") or "127.0.0.1", int(port or 0)


def _oauth(ns: argparse.Namespace) -> ResourceSettings | None:
    """The gateway as an OAuth protected resource, if ``--oauth-issuer`` says so."""
    if not ns.oauth_issuer:
        for flag in ("oauth_resource", "oauth_audience", "oauth_scopes"):
            if getattr(ns, flag):
                raise ConfigurationError(f"--{flag.replace('_', '-')} needs --oauth-issuer")
        return None
    from ..auth.discovery import check_issuer
    from ..auth.resource import canonical_uri
    from ..errors import AuthorizationFailed
    from ..gateway.bearer import ResourceSettings

    for issuer in ns.oauth_issuer:
        try:
            check_issuer(issuer)
        except AuthorizationFailed as exc:
            raise ConfigurationError(f"--oauth-issuer: {exc}") from None
    resource = None
    if ns.oauth_resource:
        try:
            resource = canonical_uri(ns.oauth_resource)
        except ValueError:
            raise ConfigurationError(
                f"--oauth-resource {ns.oauth_resource}: not an http(s) URL") from None
    return ResourceSettings(tuple(dict.fromkeys(ns.oauth_issuer)), resource,
                            ns.oauth_audience, tuple((ns.oauth_scopes or "").split()))


def _session_key() -> bytes | None:
    """The key legacy session ids are signed with: ``TRUNKLINE_SESSION_KEY`` when replicas
    share their sessions, else None (a fresh one for this process)."""
    key = os.environ.get("TRUNKLINE_SESSION_KEY")
    if key is None:
        return None
    if len(key) < 16:
        raise ConfigurationError("TRUNKLINE_SESSION_KEY needs at least 16 characters")
    return key.encode()


#: Where ``serve --audit-hash-arguments`` finds its key.
AUDIT_KEY_ENV = "TRUNKLINE_AUDIT_KEY"


def _audit_key() -> bytes:
    """The key of the audit records' ``arguments_hash``: ``TRUNKLINE_AUDIT_KEY``, at least
    16 bytes. Never echoed anywhere."""
    from ..telemetry.audit import MIN_KEY_BYTES

    key = os.environ.get(AUDIT_KEY_ENV, "").encode()
    if not key:
        raise ConfigurationError(f"--audit-hash-arguments needs its key in {AUDIT_KEY_ENV}")
    if len(key) < MIN_KEY_BYTES:
        raise ConfigurationError(f"{AUDIT_KEY_ENV} needs at least {MIN_KEY_BYTES} bytes")
    return key


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trunkline",
        description="A high-fanout MCP client host with fail-closed era negotiation.",
    )
    parser.add_argument("--version", action="version", version=f"trunkline {__version__}")
    sub = parser.add_subparsers(dest="command")
    d = sub.add_parser("demo", help="run the bundled demo servers (no network, no config)")
    d.add_argument("--json", action="store_true", help="print the same as JSON")
    p = sub.add_parser("probe", help="era verdict and evidence per configured server")
    t = sub.add_parser("tools", help="the merged tool catalog of a configuration")
    c = sub.add_parser("call", help="call one tool and print its result")
    g = sub.add_parser("serve", help="serve the configured servers as one MCP server")
    st = sub.add_parser("status", help="a running gateway's servers: state, era, calls in "
                                       "flight, latency, restarts, last error")
    st.add_argument("url", help="the gateway's URL (as serve printed it, or its base)")
    st.add_argument("--watch", action="store_true",
                    help="refresh every --interval seconds until interrupted")
    st.add_argument("--interval", type=_seconds, default=2.0, metavar="SECONDS",
                    help="with --watch: seconds between refreshes (default 2)")
    st.add_argument("--timeout", type=_seconds, default=10.0, metavar="SECONDS",
                    help="how long to wait for the gateway's answer (default 10)")
    st.add_argument("--token-file", metavar="PATH",
                    help="the API key or OAuth access token to send (also TRUNKLINE_TOKEN)")
    st.add_argument("--json", action="store_true",
                    help="print the gateway's status document (with --watch: one per line)")
    st.add_argument("--admin-key-file", metavar="PATH",
                    help="an admin key (also TRUNKLINE_ADMIN_KEY): the operator API's "
                         "fleet (/admin/api/servers) instead of /status")
    rl = sub.add_parser("reload", help="a running gateway reads its configuration again "
                                       "and changes its fleet by difference (operator API)")
    rl.add_argument("url", help="the gateway's URL (as serve printed it, or its base)")
    rl.add_argument("--admin-key-file", metavar="PATH",
                    help="the admin key to send (also TRUNKLINE_ADMIN_KEY)")
    rl.add_argument("--json", action="store_true", help="print the reload's outcome as JSON")
    lg = sub.add_parser("login", help="sign in to a configured server that uses OAuth; the "
                                      "token is stored for serve, tools and call")
    lg.add_argument("config", help="an mcpServers JSON file")
    lg.add_argument("server", help="the server's name in that file")
    lg.add_argument("--no-browser", action="store_true",
                    help="only print the sign-in URL (do not open a browser)")
    pn = sub.add_parser("pins", help="pinned tool definitions: list them, show what changed, "
                                     "approve a quarantined one")
    pn.add_argument("action", choices=("list", "diff", "approve"),
                    help="list every pin, diff one tool's definition with its pin, or "
                         "approve it")
    pn.add_argument("config", help="an mcpServers JSON file, or a running gateway's URL "
                                   "(its operator API: what waits for approval there)")
    pn.add_argument("server", nargs="?", help="the server's name in that file (diff, approve)")
    pn.add_argument("tool", nargs="?", help="the server's own name of the tool (diff, approve)")
    pn.add_argument("--json", action="store_true", help="print the same as JSON")
    pn.add_argument("--admin-key-file", metavar="PATH",
                    help="with a URL: the admin key to send (also TRUNKLINE_ADMIN_KEY)")
    cr = sub.add_parser("credentials", help="what the token store keeps, per user and shared: "
                                            "list, revoke, put a user's secret, rekey")
    actions = cr.add_subparsers(dest="action", required=True, metavar="ACTION",
                                help="what to do (each has its own section below)")
    actions.add_parser("new-key", help="print a fresh TRUNKLINE_STORE_KEY")
    cl = actions.add_parser("list", help="the records: user, server, issuer, kind, expiry, "
                                         "whether a refresh token is held (never a value)")
    cp = actions.add_parser("put", help="set a user's secret for a server (the value is read "
                                        "from standard input)")
    cv = actions.add_parser("revoke", help="revoke (RFC 7009, where advertised) and delete a "
                                           "user's records")
    ck = actions.add_parser("rekey", help="seal every record under TRUNKLINE_STORE_KEY")
    for action in (cp, ck):
        action.add_argument("config", help="an mcpServers JSON file")
    for action in (cl, cv):
        action.add_argument("config", help="an mcpServers JSON file, or a running gateway's "
                                           "URL (its operator API: its store, and a "
                                           "revocation the gateway forgets at once)")
    cp.add_argument("name", help="the environment variable's NAME (e.g. GITHUB_TOKEN)")
    for action, required in ((cl, False), (cp, True), (cv, True)):
        action.add_argument("--user", required=required, metavar="KIND:SUBJECT@ISSUER",
                            help="the user (e.g. oauth:alice@https://idp.example, "
                                 "api_key:ci-bot)")
    for action, required in ((cl, False), (cp, True), (cv, False)):
        action.add_argument("--server", required=required, metavar="NAME",
                            help="the server's name in the file")
    cl.add_argument("--json", action="store_true", help="print the same as JSON")
    for action in (cl, cv):
        action.add_argument("--admin-key-file", metavar="PATH",
                            help="with a URL: the admin key to send (also "
                                 "TRUNKLINE_ADMIN_KEY)")
    pc = sub.add_parser("policy", help="check an authorization policy before a gateway reads "
                                       "it (serve reads it again on SIGHUP)")
    pc.add_argument("action", choices=("check",), help="compile it, and say what in it "
                                                       "could never match")
    pc.add_argument("file", help="a policy JSON file, or an mcpServers file whose "
                                 "\"policy\" is checked (then its servers are known too)")
    for command in (p, t, c, g):
        command.add_argument("config", help="an mcpServers JSON file")
    c.add_argument("tool", help="the tool's name in the merged catalog (as tools lists it)")
    c.add_argument("arguments", nargs="?", default="{}",
                   help="the tool's arguments, a JSON object")
    face = g.add_mutually_exclusive_group(required=True)
    face.add_argument("--stdio", action="store_true",
                      help="on stdin/stdout, for a desktop client's mcpServers entry")
    face.add_argument("--http", metavar="HOST:PORT",
                      help="Streamable HTTP at http://HOST:PORT/mcp (127.0.0.1 by default; "
                           "any other address needs API keys or --oauth-issuer)")
    g.add_argument("--api-key-file", metavar="PATH",
                   help="API keys: one per line, or JSON {\"keys\": [{\"name\", \"key\", "
                   "\"groups\", ...}]} naming each (also TRUNKLINE_API_KEYS, "
                   "comma-separated)")
    g.add_argument("--admin-key-file", metavar="PATH",
                   help="with --http: the operator's keys, for the operator API and "
                        "dashboard under /admin (one per line, or JSON like "
                        "--api-key-file; also TRUNKLINE_ADMIN_KEYS, comma-separated); "
                        "never accepted at /mcp")
    g.add_argument("--admin-scope", metavar="SCOPE", default="trunkline:admin",
                   help="with --oauth-issuer: the scope an access token needs to be an "
                        "operator's under /admin (default trunkline:admin; '' for none)")
    g.add_argument("--host-name", dest="host_names", metavar="NAME", action="append",
                   default=[],
                   help="with --http: a name clients reach the gateway by besides its bind "
                        "address (its DNS name, a load balancer's address); a request "
                        "addressed to any other Host is refused (403); repeatable")
    g.add_argument("--oauth-issuer", metavar="URL", action="append",
                   help="with --http: accept OAuth access tokens (JWTs) issued by this "
                        "authorization server, checked against its published keys; "
                        "repeatable; alone or besides API keys")
    g.add_argument("--oauth-resource", metavar="URL",
                   help="the gateway's /mcp URL as clients reach it, named in its protected "
                        "resource metadata (default: http://HOST:PORT/mcp of a loopback "
                        "bind; required on any other)")
    g.add_argument("--oauth-audience", metavar="AUD",
                   help="what a token's aud must contain (default: the resource URL)")
    g.add_argument("--oauth-scopes", metavar="\"SCOPE ...\"",
                   help="scopes every token must carry (space-separated); a token lacking "
                        "one is 403 insufficient_scope")
    g.add_argument("--max-body-bytes", type=_positive_int, default=None, metavar="BYTES",
                   help="largest request body over HTTP (default: the largest message line, "
                        "16 MiB)")
    g.add_argument("--model-safe-names", action="store_true",
                   help="deprecated: every tool name is model-safe ([A-Za-z0-9_-], at most "
                        "64 characters)")
    g.add_argument("--tool-search", action="store_true",
                   help="serve two tools, search_tools and call_tool, instead of the whole "
                        "catalog: a model finds and calls any tool at a constant context cost")
    g.add_argument("--max-in-flight", type=_positive_int, default=16384, metavar="N",
                   help="requests behind the gateway at once; beyond it: 503 / an error "
                        "asking to retry (default 16384)")
    g.add_argument("--max-per-server", type=_positive_int, default=2048, metavar="N",
                   help="requests behind the gateway at once for one server; beyond it: "
                        "429 / an error asking to retry (default 2048)")
    g.add_argument("--limit", action="append", metavar="NAME=VALUE",
                   help="one of the bounds on what a client may make the gateway hold, "
                        "or how often it may start calls (gateway/limits.py: client_calls, "
                        "client_rate, listen_uris, session_idle_s, connections, ...); "
                        "repeatable")
    g.add_argument("--call-timeout", dest="call_timeout_s", type=_seconds, default=None,
                   metavar="SECONDS",
                   help="seconds a call behind the gateway is given when its server's entry "
                        "sets no callTimeoutMs (default 60)")
    g.add_argument("--drain-timeout", dest="drain_timeout_s", type=_seconds, default=10.0,
                   metavar="SECONDS",
                   help="on SIGTERM, how long calls in flight may take to finish; on a "
                        "reload, how long a removed or replaced server's calls in flight may")
    g.add_argument("--drain-notice", dest="drain_notice_s", type=_seconds, default=0.0,
                   metavar="SECONDS",
                   help="with --http: on SIGTERM, answer 503 at /readyz for SECONDS first "
                        "while still serving, so a load balancer takes this gateway out "
                        "before it stops taking requests (default 0)")
    g.add_argument("--watch-config", action="store_true",
                   help="reload whenever the configuration file's content changes (as "
                        "SIGHUP does: servers added, removed or replaced by difference, the "
                        "policy; a wrong file is refused and the fleet in force stays)")
    g.add_argument("--replica", metavar="NAME", default=None,
                   help="with --http: this gateway's name among its replicas (letters, "
                        "digits, '-'; also TRUNKLINE_REPLICA; default: a random one). A "
                        "legacy session id starts with it, so a load balancer can route a "
                        "session's requests to the replica that holds it")
    g.add_argument("--processes", type=_positive_int, default=1, metavar="N",
                   help="with --http: N gateway processes on one socket, each with its own "
                        "workers (about one core each; default 1)")
    g.add_argument("--metrics", action="store_true",
                   help="with --http: Prometheus metrics at /metrics (needs trunkline[otel]; "
                        "traces and OTLP metrics are configured by OTEL_* variables)")
    g.add_argument("--audit", metavar="TARGET", default=None,
                   help="an audit record of each request (who, server, tool, allowed or "
                        "denied and by which rule, outcome, duration, request and trace "
                        "ids; never argument values), as JSON lines appended to the file "
                        "TARGET (created 0600, reopened when rotated), to stderr ('-'), or "
                        "as OpenTelemetry log records ('otel', exported as OTEL_* says)")
    g.add_argument("--audit-hash-arguments", action="store_true",
                   help="with --audit: each call's arguments_hash, an HMAC-SHA256 of its "
                        "arguments (RFC 8785 canonical JSON) under the key in "
                        "TRUNKLINE_AUDIT_KEY (at least 16 bytes): equal arguments, equal "
                        "hashes, and no values")
    g.add_argument("--listen-fd", type=int, default=None, help=argparse.SUPPRESS)
    for command, printed in ((p, "each server's verdict"), (t, "the catalog"),
                             (c, "the result")):
        command.add_argument("--json", action="store_true", help=f"print {printed} as JSON")
    for command in (p, t, c, g):
        command.add_argument("--log-format", choices=FORMATS, default=None,
                             help="how log lines are written to stderr: text (default) or "
                                  "json, one object a line with server, tool, request_id "
                                  "and trace_id")
        command.add_argument("--log-level", choices=LEVELS, default=None,
                             help="the least severe log lines written (default: warning)")
    for command in (p, t, c, g):
        command.add_argument(
            "--discover-timeout", dest="discover_timeout_s", type=_seconds, default=None,
            metavar="SECONDS",
            help="deadline of each server/discover, for servers whose entry sets no "
                 "\"discoverTimeoutMs\" (default: 10)")
    g.add_argument(
        "--max-discover-timeout", dest="max_discover_timeout_s", type=_seconds,
        default=None, metavar="SECONDS",
        help="how far each server/discover deadline may grow while a server stays silent "
             "(it doubles with each silent start), for servers whose entry sets no "
             "\"maxDiscoverTimeoutMs\" (default: 120)")
    return parser


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return value


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, not {text!r}")
    return int(text)


#: The young generation's collection threshold while serving (CPython's default: 700).
#: Each call in flight holds a dozen or so tracked objects, so at 64 in flight the
#: default collects every ~20 calls, ~15 µs of the gateway's CPU per call; at this
#: threshold a steady load collects about never, and garbage cycles still go within
#: 10,000 allocations.
GC_YOUNG_THRESHOLD = 10_000


def _settle_heap() -> None:
    """Start-up is over: what it built lives as long as the process, so no collection
    walks it again (``gc.freeze``), and the young generation gets room for the calls in
    flight."""
    gc.freeze()
    _young, *older = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *older)


def _serving_loop() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop for ``serve`` where it is installed: the gateway's HTTP server costs
    about a quarter less per request on it."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    ns.argv = list(sys.argv[1:] if argv is None else argv)
    if ns.command == "serve" and ns.processes > 1 and not ns.http:
        parser.error("--processes needs --http")
    if ns.command == "serve" and ns.metrics and not ns.http:
        parser.error("--metrics needs --http (the page is served at /metrics)")
    if ns.command == "serve" and ns.oauth_issuer and not ns.http:
        parser.error("--oauth-issuer needs --http")
    if ns.command == "serve" and ns.admin_key_file and not ns.http:
        parser.error("--admin-key-file needs --http (the operator API is served under "
                     "/admin)")
    if ns.command == "serve" and ns.audit_hash_arguments and ns.audit is None:
        parser.error("--audit-hash-arguments needs --audit")
    if ns.command is None:
        parser.print_help()
        return EXIT_USAGE
    interrupt = None
    if ns.command == "status":  # watched until Ctrl-C: ended by it wherever it lands
        from .interrupt import Interrupt

        interrupt = Interrupt()
        interrupt.install()
    try:
        configure_logs(getattr(ns, "log_format", None), getattr(ns, "log_level", None))
        if interrupt is not None:
            return interrupt.run(lambda: status(ns))
        coro = _command(ns)
        with asyncio.Runner(loop_factory=_serving_loop() if ns.command == "serve"
                            else None) as runner:
            return runner.run(coro)
    except ConfigurationError as exc:
        print(f"trunkline: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except TrunklineError as exc:
        print(f"trunkline: {str(exc).splitlines()[0]}", file=sys.stderr)
        return EXIT_CALL_FAILED
    except KeyboardInterrupt:
        return 130


async def _returning(code: int) -> int:
    return code


def _command(ns: argparse.Namespace) -> Coroutine[Any, Any, int]:
    """The coroutine of a command but ``status`` (``main`` runs that one itself)."""
    if ns.command == "demo":
        return demo(ns.json)
    if ns.command == "probe":
        return probe(ns.config, ns.json, ns.discover_timeout_s, ns.log_format)
    if ns.command == "tools":
        return tools(ns.config, ns.json, ns.discover_timeout_s, ns.log_format)
    if ns.command == "serve":
        return serve(ns)
    if ns.command == "pins":
        from .operator import is_url
        from .pins import pins

        if is_url(ns.config):
            from . import operator

            return operator.pins(ns.config, ns.action, ns.server, ns.tool,
                                 ns.admin_key_file, ns.json)
        return pins(ns.config, ns.action, ns.server, ns.tool, ns.json)
    if ns.command == "reload":
        from .operator import reload

        return reload(ns.url, ns.admin_key_file, ns.json)
    if ns.command == "credentials":
        from .credentials import credentials, print_new_key

        if ns.action == "new-key":
            return _returning(print_new_key())
        from .operator import is_url

        if ns.action in ("list", "revoke") and is_url(ns.config):
            from . import operator

            return operator.credentials(ns.config, ns.action, ns.user, ns.server,
                                        ns.admin_key_file, getattr(ns, "json", False))
        return credentials(ns.action, ns.config, user=getattr(ns, "user", None),
                           server=getattr(ns, "server", None), name=getattr(ns, "name", None),
                           json_mode=getattr(ns, "json", False))
    if ns.command == "policy":
        from .policy import check_policy

        return check_policy(ns.file)
    if ns.command == "login":
        from .login import login

        return login(ns.config, ns.server, open_browser=not ns.no_browser)
    return call(ns.config, ns.tool, ns.arguments, ns.json, ns.discover_timeout_s,
                ns.log_format)

