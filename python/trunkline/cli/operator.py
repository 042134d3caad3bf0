"""The commands that ask a running gateway's operator API (``gateway/operator_api.py``):
``trunkline reload URL``, ``trunkline pins list|diff|approve URL [SERVER TOOL]``,
``trunkline credentials list|revoke URL``, and ``trunkline status URL`` given an admin key
(``commands.status``).

Rules:

- ``URL`` is the gateway's ``/mcp`` URL as ``serve`` printed it, or its base URL; the API
  is under ``/admin/api`` beside it.
- The admin key comes from ``--admin-key-file PATH`` or ``TRUNKLINE_ADMIN_KEY``, is sent
  as ``Authorization: Bearer`` (an OAuth access token with the admin scope is sent the
  same way) and never printed.
- A refusal is one line on stderr with the gateway's own reason and the command's exit
  status: 1 for what the gateway refused or could not do (a refused reload, an unknown
  tool), 2 for bad usage (no key).
- ``pins list URL`` lists what waits for approval (the API shows the quarantined tools;
  the approved ones are in the gateway's catalog, ``trunkline tools``).
- ``credentials list URL`` prints what ``credentials list CONFIG`` prints, from the
  gateway's store; ``credentials revoke URL`` also has the running gateway (every copy)
  forget what it held for the user, which revoking by the file cannot.
"""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from ..errors import ConfigurationError, TrunklineError
from .status_view import gateway_url

#: Where the commands find the admin key without ``--admin-key-file``.
ADMIN_KEY_ENV = "TRUNKLINE_ADMIN_KEY"
EXIT_OK, EXIT_FAILED = 0, 1


class OperatorApiError(TrunklineError):
    """The gateway could not be asked, or refused."""


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def api_url(url: str, path: str) -> str:
    """``/admin/api/<path>`` of the gateway at ``url`` (its ``/mcp`` URL or its base)."""
    return gateway_url(url, f"admin/api/{path}")


def read_admin_key(path: str | None, *, required: bool = True) -> str | None:
    """The admin key of ``--admin-key-file`` ``path``, else ``TRUNKLINE_ADMIN_KEY``."""
    if path is not None:
        try:
            with open(path) as f:
                key = f.read().strip()
        except OSError as exc:
            raise ConfigurationError(f"{path}: cannot read the admin key: {exc.strerror}"
                                     ) from None
    else:
        key = os.environ.get(ADMIN_KEY_ENV, "").strip()
    if not key and required:
        raise ConfigurationError(f"the operator API needs the admin key: --admin-key-file "
                                 f"PATH or {ADMIN_KEY_ENV}")
    return key or None


async def ask(method: str, url: str, key: str, *, timeout_s: float = 120.0,
              body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """One request to the API (``body``: its JSON body, if any): its status and JSON
    document. ``OperatorApiError`` when there is no answer, or one that is not the
    API's."""
    import aiohttp

    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = orjson.dumps(body)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) \
                as session, session.request(method, url, headers=headers, data=data,
                                            allow_redirects=False) as response:
            content, status = await response.read(), response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise OperatorApiError(f"{url}: no answer: {exc or type(exc).__name__}") from None
    try:
        document = orjson.loads(content)
    except orjson.JSONDecodeError:
        document = None
    if not isinstance(document, dict):
        raise OperatorApiError(f"{url}: HTTP {status}, not the operator API's answer (is "
                               "the admin credential configured on the gateway?)")
    return status, document


def refused(url: str, status: int, document: dict[str, Any]) -> OperatorApiError:
    reason = document.get("error")
    return OperatorApiError(f"{url}: HTTP {status}" + (f": {reason}" if isinstance(
        reason, str) else ""))


async def reload(url: str, key_file: str | None, json_mode: bool) -> int:
    """``trunkline reload URL``: the gateway reads its configuration again."""
    target = api_url(url, "reload")
    status, outcome = await ask("POST", target, _key(key_file))
    if status not in (200, 422) or "ok" not in outcome:
        raise refused(target, status, outcome)
    if json_mode:
        sys.stdout.write(orjson.dumps(outcome, option=orjson.OPT_INDENT_2).decode() + "\n")
    if not outcome["ok"]:
        print(f"trunkline: the configuration was refused: {outcome.get('error')}; the "
              "gateway goes on with the one it had", file=sys.stderr)
        return EXIT_FAILED
    if not json_mode:
        said = [f"{what} {', '.join(outcome.get(what) or [])}"
                for what in ("added", "removed", "replaced") if outcome.get(what)]
        said.append(f"{len(outcome.get('unchanged') or [])} unchanged")
        if outcome.get("policy_changed"):
            said.append("policy changed")
        print("reloaded: " + "; ".join(said))
    return EXIT_OK


async def pins(url: str, action: str, server: str | None, tool: str | None,
               key_file: str | None, json_mode: bool) -> int:
    """``trunkline pins list|diff|approve URL [SERVER TOOL]`` through the API."""
    from .pins import show_diff, show_rows

    key = _key(key_file)
    if action != "list" and (server is None or tool is None):
        raise ConfigurationError(f"trunkline pins {action} URL needs a SERVER and a TOOL")
    if action == "approve":
        assert server is not None and tool is not None
        target = api_url(url, f"quarantine/{quote(server, safe='')}/{quote(tool, safe='')}"
                              "/approve")
        status, answer = await ask("POST", target, key)
        if status != 200:
            raise refused(target, status, answer)
        copies = answer.get("copies") or {}
        note = f" (and by {copies['told']} more gateway processes)" if copies.get("told") \
            else ""
        print(f"approved: server {server!r}, tool {tool!r}; the gateway lists it to its "
              f"clients now{note}")
        if copies.get("failed"):
            print(f"trunkline: gateway processes {copies['failed']} did not take the "
                  "approval (they read it at the server's next listing)", file=sys.stderr)
        return EXIT_OK
    target = api_url(url, "quarantine")
    status, document = await ask("GET", target, key)
    if status != 200:
        raise refused(target, status, document)
    waiting = document.get("quarantined") or []
    if action == "list":
        show_rows([{"server": q["server"], "tool": q["tool"], "state": "waiting",
                    "reason": q["reason"], "changes": q.get("changes") or []}
                   for q in waiting], json_mode)
        return EXIT_OK
    found = next((q for q in waiting if q["server"] == server and q["tool"] == tool), None)
    if found is None or found.get("current") is None:
        raise OperatorApiError(f"server {server!r}: no definition of tool {tool!r} waits "
                               "for approval")
    show_diff(f"server {server!r} at {url}", found["server"], found["tool"],
              found.get("approved"), found["current"], json_mode)
    return EXIT_OK


async def credentials(url: str, action: str, user: str | None, server: str | None,
                      key_file: str | None, json_mode: bool) -> int:
    """``trunkline credentials list|revoke URL``: the gateway's token store through the API
    (a revocation is forgotten by the running gateway too)."""
    from .credentials import show_rows

    key = _key(key_file)
    if action == "revoke":
        if user is None:
            raise ConfigurationError("trunkline credentials revoke needs --user")
        target = api_url(url, "credentials/revoke")
        status, answer = await ask("POST", target, key, body={"user": user, "server": server})
        if status != 200:
            raise refused(target, status, answer)
        who = answer.get("user")
        for revoked in answer.get("revoked") or []:
            print(f"{who} on {revoked['server']}: {revoked['outcome']}")
        deleted = answer.get("deleted") or {}
        print(f"deleted {deleted.get('tokens', 0)} token record(s) and "
              f"{deleted.get('secrets', 0)} secret record(s) of {who}")
        copies = answer.get("copies") or {}
        note = f" (and {copies['told']} more gateway processes)" if copies.get("told") \
            else ""
        print(f"the gateway{note} forgot what it held for {who}: its next call is offered "
              "sign-in")
        if copies.get("failed"):
            print(f"trunkline: gateway processes {copies['failed']} were not told: they "
                  "keep what they hold until restarted", file=sys.stderr)
            return EXIT_FAILED
        return EXIT_OK
    query = urlencode({name: value for name, value in (("user", user), ("server", server))
                       if value is not None})
    target = api_url(url, "credentials" + (f"?{query}" if query else ""))
    status, document = await ask("GET", target, key)
    if status != 200:
        raise refused(target, status, document)
    show_rows(document.get("credentials") or [], json_mode,
              sealed=bool(document.get("sealed")))
    return EXIT_OK


def _key(key_file: str | None) -> str:
    key = read_admin_key(key_file)
    assert key is not None
    return key


__all__ = ["ADMIN_KEY_ENV", "OperatorApiError", "api_url", "ask", "credentials", "is_url",
           "pins",
           "read_admin_key", "reload"]
