"""An official Python SDK client (mcp 2.x or 1.x, run by the test venvs of
tests/realpeers.py) using a ``trunkline serve --http`` gateway as several users in turn, each
with its own bearer token, each signing in to the gateway's per-user servers when asked:
its URL-mode elicitation is answered by following the URL as a browser would (the
gateway's sign-in page, the authorization server's login form, filled with the user's
name there, and the redirect back to the gateway), then accepting. Prints one JSON
document.

    SDK_SIGN_IN_PLAN='[{"bearer": TOKEN, "login": {"username": U, "claims": {CLIENT: {...}}},
                        "steps": [["list"], ["call", TOOL, ARGS], ...]}, ...]' \\
        .peers/py-modern/bin/python tests/peers/sdk_sign_in_client.py http://HOST:PORT/mcp

A login form gets the user's name and the claims meant for the client whose login it is
(by the ``client_id`` of its URL). ``login: null`` declines every elicitation instead.
For each user it prints {"protocol", "steps": [...], "asked": [...]}: a list step's tool
names, a call step's ``{"result": ...}`` or ``{"error": ...}``, and each elicitation it was
asked with what the browser saw (``pages``: each page's status). The plan comes in the
environment, since it carries credentials.
"""

from __future__ import annotations

import asyncio
import http.cookiejar
import json
import os
import re
import sys
import urllib.error
import urllib.request
from importlib.metadata import version
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

DUMP = {"mode": "json", "by_alias": True, "exclude_none": True}


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kw: Any) -> None:
        return None  # each redirect is followed below, and recorded


def _browse(url: str, login: dict[str, Any]) -> list[list[Any]]:
    """Follow a sign-in URL as a browser: each page as [status, url, text's start]."""
    pages: list[list[Any]] = []
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirects())
    data: bytes | None = None
    for _ in range(10):
        try:
            with opener.open(urllib.request.Request(url, data=data), timeout=30) as page:
                status, headers, text = page.status, page.headers, page.read().decode()
        except urllib.error.HTTPError as refused:
            status, headers, text = refused.code, refused.headers, refused.read().decode()
        pages.append([status, url.split("?")[0], text[:300]])
        if status in (301, 302, 303, 307):
            url, data = urljoin(url, headers["Location"]), None
            continue
        if status == 200 and re.search(r'<form[^>]*method="post"', text):
            # The authorization server's login form, posted back to its own URL: the user,
            # and the claims meant for the client that asked (by its client_id).
            client = parse_qs(urlsplit(url).query).get("client_id", [""])[0]
            claims = (login.get("claims") or {}).get(client, {})
            data = urlencode({"username": login["username"],
                              "claims": json.dumps(claims)}).encode()
            continue
        return pages
    return pages


async def browse(url: str, login: dict[str, Any]) -> list[list[Any]]:
    return await asyncio.to_thread(_browse, url, login)


def elicitation(asked: list[dict[str, Any]], login: dict[str, Any] | None) -> Any:
    from mcp import types

    async def callback(context: Any, params: Any) -> Any:
        seen = params.model_dump(**DUMP)
        entry: dict[str, Any] = {"params": seen}
        asked.append(entry)
        if login is None or seen.get("mode") != "url":
            return types.ElicitResult(action="decline")
        entry["pages"] = await browse(seen["url"], login)
        return types.ElicitResult(action="accept")
    return callback


async def run_steps(steps: list[list[Any]], list_page: Any, call: Any) -> list[Any]:
    try:
        from mcp.shared.exceptions import MCPError as Refused
    except ImportError:  # mcp 1.x
        from mcp.shared.exceptions import McpError as Refused
    done: list[Any] = []
    for step in steps:
        print("step", step[:2], file=sys.stderr, flush=True)  # where a hang is, if one is
        if step[0] == "list":
            names: list[str] = []
            cursor = None
            while True:
                page = await list_page(cursor)
                names += [tool.name for tool in page.tools]
                cursor = getattr(page, "nextCursor", None) or getattr(page, "next_cursor", None)
                if cursor is None:
                    break
            done.append(sorted(names))
        else:
            try:
                result = await call(step[1], step[2])
            except Refused as exc:
                done.append({"error": exc.error.model_dump(**DUMP)})
            else:
                done.append({"result": result.model_dump(**DUMP)})
    return done


async def modern(url: str, user: dict[str, Any]) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    asked: list[dict[str, Any]] = []
    target = streamable_http_client(url, http_client=create_mcp_http_client(
        headers={"Authorization": f"Bearer {user['bearer']}"}))
    async with Client(target, mode="auto",
                      elicitation_callback=elicitation(asked, user.get("login"))) as client:
        steps = await run_steps(user["steps"],
                                lambda cursor: client.list_tools(cursor=cursor),
                                client.call_tool)
        return {"protocol": str(getattr(client, "protocol_version", None)), "steps": steps,
                "asked": asked}


async def legacy(url: str, user: dict[str, Any]) -> dict[str, Any]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    asked: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {user['bearer']}"}
    async with streamablehttp_client(url, headers=headers) as (r, w, *_), \
            ClientSession(r, w, elicitation_callback=elicitation(
                asked, user.get("login"))) as session:
        init = await session.initialize()
        steps = await run_steps(user["steps"],
                                lambda cursor: session.list_tools(cursor=cursor),
                                session.call_tool)
        return {"protocol": init.protocolVersion, "steps": steps, "asked": asked}


async def main(url: str, plan: list[dict[str, Any]], sdk: str) -> list[dict[str, Any]]:
    use = modern if int(sdk.split(".")[0]) >= 2 else legacy
    print("users", len(plan), file=sys.stderr, flush=True)
    return [await use(url, user) for user in plan]


if __name__ == "__main__":
    sdk = version("mcp")
    users = asyncio.run(main(sys.argv[1], json.loads(os.environ["SDK_SIGN_IN_PLAN"]), sdk))
    print(json.dumps({"sdk": sdk, "users": users}))
