"""The configuration as an operator may see it: every secret redacted. Pure.

A configuration holds secrets in many places: environment values, HTTP headers, a Redis
URL's password, a token in a URL's query or in a command line's arguments. So nothing is
shown that is not known to be safe:

1. Only the keys this module knows are walked (``config``'s own keys, at each level);
   the value of any other key is ``REDACTED``, whatever it is.
2. Known keys whose values can carry a secret keep their shape, not their value: each
   environment variable and header is named, its value ``REDACTED``; a URL keeps its
   scheme, host, port and path, its user and password and each query value ``REDACTED``.
3. A server's ``args`` are kept one by one, except one that looks like a secret: a
   ``NAME=value``, ``--flag=value`` or the value after a ``--flag`` whose name speaks of a
   secret (token, key, secret, password, credential, auth, cookie, session, ...), a URL
   (as rule 2), or a value shaped like a credential (a known token prefix, a JWT, or a
   long unbroken run of letters and digits).
4. Names of environment variables that hold secrets (``clientSecretEnv``, ``secretEnv``)
   are kept: they are names, not values. The ``policy`` is summarised (a file's path, or
   its number of rules), not shown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"

_SECRET_WORDS = re.compile(
    r"(token|secret|passw|pwd|passphrase|credential|auth|api[-_]?key|access[-_]?key|"
    r"private[-_]?key|client[-_]?key|\bkey\b|[-_]key$|^key|cookie|session|bearer|signature|"
    r"sig\b|dsn)", re.IGNORECASE)
#: Prefixes of well-known credentials (GitHub, OpenAI/Anthropic, Slack, AWS, GitLab,
#: Stripe, Google, npm, Hugging Face), and a JWT's.
_TOKEN_PREFIXES = re.compile(
    r"^(gh[pousr]_|github_pat_|sk-|sk_|rk_|pk_live|xox[abposr]-|AKIA|ASIA|glpat-|AIza|"
    r"npm_|hf_|eyJ)")
#: A long run with no separators a path or a word would have, mixing letters and digits.
_OPAQUE = re.compile(r"^[A-Za-z0-9+/=_\-.~]{24,}$")

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

Walker = Callable[[Any], Any]


def redacted(document: Any) -> dict[str, Any]:
    """The whole configuration file's document, redacted (rules 1-4)."""
    if not isinstance(document, Mapping):
        return {}
    return _walk_object(document, _TOP)


def redact_url(value: Any) -> Any:
    """A URL with its user, password and query values redacted (rule 2)."""
    if not isinstance(value, str):
        return REDACTED
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return REDACTED
    if not parts.scheme or not parts.hostname:
        return REDACTED if _looks_secret(value) else value
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = (f"{REDACTED}@" if parts.username or parts.password else "") + host + \
        (f":{port}" if port is not None else "")
    query = urlencode([(name, REDACTED) for name, _ in
                       parse_qsl(parts.query, keep_blank_values=True)], safe="<>")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact_args(args: Any) -> Any:
    """A command line's arguments, each kept unless it looks like a secret (rule 3)."""
    if not isinstance(args, list):
        return REDACTED
    shown: list[Any] = []
    after_secret_flag = False
    for arg in args:
        if not isinstance(arg, str):
            shown.append(REDACTED)
            after_secret_flag = False
            continue
        if after_secret_flag and not arg.startswith("-"):
            shown.append(REDACTED)
            after_secret_flag = False
            continue
        after_secret_flag = False
        name, equals, value = arg.partition("=")
        if _URL.match(arg):
            shown.append(redact_url(arg))
        elif equals and value and _SECRET_WORDS.search(name):
            shown.append(f"{name}={REDACTED}")
        elif equals and _URL.match(value):
            shown.append(f"{name}={redact_url(value)}")
        elif arg.startswith("-") and not equals and _SECRET_WORDS.search(arg):
            shown.append(arg)
            after_secret_flag = True
        elif "://" in arg or _looks_secret(arg) or (equals and _looks_secret(value)):
            shown.append(REDACTED)
        else:
            shown.append(arg)
    return shown


def _looks_secret(value: str) -> bool:
    if _TOKEN_PREFIXES.match(value):
        return True
    if "/" in value and value.count("/") > 1:
        return False  # a path
    return bool(_OPAQUE.match(value)) and any(c.isdigit() for c in value) and \
        any(c.isalpha() for c in value)


# --- the walk ------------------------------------------------------------------------


def _keep(value: Any) -> Any:
    """A value of a key known to hold no secret (rule 1), kept as plain JSON."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_keep(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _keep(v) for k, v in value.items()}
    return REDACTED


def _names_only(value: Any) -> Any:
    """An object of secrets: its names, each value redacted (rule 2)."""
    if not isinstance(value, Mapping):
        return REDACTED
    return {str(name): REDACTED for name in value}


def _strings(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return REDACTED


def _walk_object(value: Any, known: Mapping[str, Walker]) -> Any:
    if not isinstance(value, Mapping):
        return REDACTED
    return {str(key): known[key](item) if key in known else REDACTED
            for key, item in value.items()}


def _of(known: Mapping[str, Walker]) -> Walker:
    return lambda value: _walk_object(value, known)


def _servers(value: Any) -> Any:
    if not isinstance(value, Mapping):
        return REDACTED
    return {str(name): _walk_object(entry, _SERVER) for name, entry in value.items()}


def _command(value: Any) -> Any:
    if not isinstance(value, str):
        return REDACTED
    return REDACTED if _looks_secret(value) or "=" in value else value


def _policy(value: Any) -> Any:
    if isinstance(value, str):
        return value  # a file's path
    if isinstance(value, Mapping):
        rules = value.get("rules")
        return {"rules": len(rules) if isinstance(rules, list) else None,
                "shown": "summarised: see the file, or trunkline policy check"}
    return REDACTED


_IDENTITY_PROVIDER: dict[str, Walker] = {
    "issuer": redact_url, "clientId": _keep, "clientSecretEnv": _keep,
    "tokenEndpoint": redact_url, "idTokenFile": _keep, "idTokenEnv": _keep}
_SERVER_OAUTH: dict[str, Walker] = {
    "clientId": _keep, "clientSecretEnv": _keep, "grant": _keep, "assertionFile": _keep,
    "assertionEnv": _keep, "identityProvider": _of(_IDENTITY_PROVIDER), "dpop": _keep}
_SERVER: dict[str, Walker] = {
    **{key: _keep for key in (
        "allowLegacy", "idempotentTools", "callTimeoutMs", "discoverTimeoutMs",
        "maxDiscoverTimeoutMs", "maxTasks", "credentials", "type", "disabled",
        "enabledTools", "disabledTools", "roots", "cwd", "instances", "secretEnv",
        "maxInstances", "instanceIdleS", "verifyTls", "audience")},
    "command": _command, "args": redact_args, "env": _names_only, "url": redact_url,
    "headers": _names_only, "oauth": _of(_SERVER_OAUTH)}
_GATEWAY_CLIENT: dict[str, Walker] = {"clientId": _keep, "clientSecretEnv": _keep}
_OAUTH: dict[str, Walker] = {
    "clientName": _keep, "redirectUri": redact_url, "clientMetadataUrl": redact_url,
    "store": lambda v: redact_url(v) if isinstance(v, str) and "://" in v else _keep(v),
    "signInUrl": redact_url, "exchangeClient": _of(_GATEWAY_CLIENT),
    "signInClient": _of(_GATEWAY_CLIENT)}
_TOP: dict[str, Walker] = {
    "mcpServers": _servers, "servers": _servers, "oauth": _of(_OAUTH), "pins": _keep,
    "collision": _keep, "maxUserInstances": _keep, "policy": _policy}


__all__ = ["REDACTED", "redact_args", "redact_url", "redacted"]
