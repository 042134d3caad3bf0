"""``trunkline login CONFIG SERVER``: a person signs in to one configured Streamable HTTP
server, and the token goes to the store the file names (``"oauth": {"store": ...}``), where
``serve``, ``tools`` and ``call`` (and any ``Host.from_config``) find and refresh it.

How: one unauthenticated ``server/discover`` POST asks the server what it wants. A 401 or
403 with its ``WWW-Authenticate`` goes to the OAuth client, whose user-agent step is the
loopback listener of ``auth.sign_in`` (the authorization URL printed, and opened in the
browser unless ``--no-browser``). This runs outside any worker on purpose: a person takes
longer than a request's deadline, and a sign-in must not be one request's side effect.
"""

from __future__ import annotations

import sys
import uuid
import webbrowser

import aiohttp
import orjson

from ..config import load_config, load_oauth_config
from ..errors import ConfigurationError
from ..params import HttpParams
from ..protocol.versions import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSIONS

_PROBE_TIMEOUT_S = 30.0
_VERSION = MODERN_VERSIONS[0]


async def login(path: str, server: str, *, open_browser: bool) -> int:
    by_name = {c.name: c for c in load_config(path)}
    config = by_name.get(server)
    if config is None:
        raise ConfigurationError(f"{path}: no server named {server!r} (have: "
                                 f"{', '.join(sorted(by_name)) or 'none'})")
    if not isinstance(config.params, HttpParams):
        raise ConfigurationError(f"{path}: server {server!r} runs over stdio: only a "
                                 "Streamable HTTP server signs people in")
    from ..auth.configured import oauth_client_from
    from ..auth.sign_in import LoopbackAuthorizer

    oauth_config = load_oauth_config(path)

    def show(url: str) -> None:
        print(f"To sign in to {server}, open:\n{url}", flush=True)
        if open_browser:
            webbrowser.open(url)

    url = config.params.url
    async with oauth_client_from(oauth_config,
                                 LoopbackAuthorizer(oauth_config.redirect_uri, show)) as oauth:
        status, challenge = await _ask_unauthenticated(config.params)
        if status not in (401, 403):
            print(f"{server} did not ask for credentials (HTTP {status}); nothing stored",
                  flush=True)
            return 0
        await oauth.on_challenge(url, status, challenge, rejected=None)
    # A Redis URL may carry a password: it is named, never printed.
    where = "the Redis store" if isinstance(oauth_config.store, str) else oauth_config.store
    print(f"Signed in to {server}; its token is kept in {where}", flush=True, file=sys.stdout)
    return 0


async def _ask_unauthenticated(params: HttpParams) -> tuple[int, str | None]:
    """The status and ``WWW-Authenticate`` of one unauthenticated modern request."""
    body = orjson.dumps({"jsonrpc": "2.0", "id": f"login-{uuid.uuid4().hex[:8]}",
                         "method": "server/discover", "params": {"_meta": {
                             META_PROTOCOL_VERSION: _VERSION,
                             META_CLIENT_CAPABILITIES: {}}}})
    headers = {**params.headers, "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": _VERSION, "Mcp-Method": "server/discover"}
    timeout = aiohttp.ClientTimeout(total=_PROBE_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.post(
            params.url, data=body, headers=headers, allow_redirects=False,
            ssl=params.verify_tls) as response:
        await response.read()
        return response.status, response.headers.get("WWW-Authenticate")
