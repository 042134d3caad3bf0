"""The user-agent step when a person signs in, and when nobody can.

- ``LoopbackAuthorizer``: the native-app pattern (RFC 8252 §7.3). It listens on the
  loopback address and port of the configured redirect URI, shows the authorization URL
  (``show``: print it, open a browser), and returns the URL the browser is sent back to,
  with its ``code``, ``state`` and ``iss``, for ``OAuthClient`` to check. Only the redirect
  path is answered; the listener lives for one sign-in, bounded by ``timeout_s``.
- ``SignInRequired``: for hosts nobody sits at (``trunkline serve``, ``tools``, ``call``):
  an authorization that needs a person fails at once, saying which command signs in.
  Tokens a sign-in stored are still used and refreshed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import web

from ..errors import AuthorizationFailed

_PAGE = (b"<!doctype html><title>trunkline</title><p>Signed in. You can close this tab.</p>")


class LoopbackAuthorizer:
    def __init__(self, redirect_uri: str, show: Callable[[str], None], *,
                 timeout_s: float = 300.0) -> None:
        parts = urlsplit(redirect_uri)
        if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1") \
                or parts.port is None:
            raise ValueError(f"a sign-in redirect URI must be http on a loopback address with "
                             f"a port, not {redirect_uri!r}")
        self._host = parts.hostname
        self._port = parts.port
        self._path = parts.path or "/"
        self._show = show
        self.timeout_s = timeout_s

    async def __call__(self, authorization_url: str) -> str:
        landed: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def redirected(request: web.Request) -> web.Response:
            if not landed.done():
                landed.set_result(str(request.url))
            return web.Response(body=_PAGE, content_type="text/html")

        app = web.Application()
        app.router.add_get(self._path, redirected)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
            self._show(authorization_url)
            try:
                async with asyncio.timeout(self.timeout_s):
                    return await landed
            except TimeoutError:
                raise AuthorizationFailed(
                    f"nobody signed in within {self.timeout_s:g} s",
                    reason="sign_in_timeout") from None
        finally:
            await runner.cleanup()


class SignInRequired:
    """The user agent of a host no person watches: an authorization that needs one fails,
    saying how to sign in ahead of time."""

    def __init__(self, how: str) -> None:
        """``how``: what to do, e.g. ``run `trunkline login mcp.json tracker```."""
        self._how = how

    async def __call__(self, authorization_url: str) -> str:
        raise AuthorizationFailed(
            f"a person must sign in to this server first: {self._how}",
            reason="sign_in_required")
