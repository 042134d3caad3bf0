"""The ``{"mcpServers": {...}}`` configuration file used by Claude Desktop and Cursor
(VS Code's names its servers under ``"servers"``), plus trunkline's own per-server keys:
``allowLegacy``, ``idempotentTools``, ``callTimeoutMs`` (its calls' deadline),
``discoverTimeoutMs``, ``maxDiscoverTimeoutMs`` (how far the probes' deadlines may grow
after silent starts), ``maxTasks`` (the server's tasks followed at once),
``enabledTools`` / ``disabledTools`` (glob patterns of the server's tool names the model
may see and call), ``roots`` (what the server is told its roots are: ``file://``
URIs, or ``{"uri", "name"}`` objects) and ``credentials`` (an HTTP server's:
``"shared"``, the host's own, the default; ``"per_user"`` or ``"exchange"``, each
identity's own; ``"passthrough"`` is refused, as the specification forbids it). A stdio
server may run one process per user:
``"instances": "per_user"``, with ``"secretEnv"`` (the names of the environment variables
each user's process gets from the host's per-user secrets, never their values),
``"maxInstances"`` (such processes of the server at once) and ``"instanceIdleS"`` (the
seconds an idle one is kept); the top-level ``"maxUserInstances"`` bounds them over every
server (``HostSettings.max_user_instances``). A server entry is either stdio (``"command"``,
``"args"``, ``"env"``, ``"cwd"``) or Streamable HTTP (``"url"``, ``"headers"``,
optionally ``"verifyTls": false``). For an HTTP server ``allowLegacy`` allowlists that
exact URL.

OAuth (``load_oauth_config``) has keys of its own: a top-level ``"oauth"`` object for the
host (``clientName``, ``redirectUri``, ``clientMetadataUrl``, ``store``: the token store's
directory, relative to the file, or a ``redis://``/``rediss://`` URL for gateway replicas
sharing one; for servers that act as each user, ``signInUrl``, the URL browsers reach the
gateway's sign-in pages by; ``exchangeClient``, the gateway's ``clientId`` and
``clientSecretEnv`` at its callers' issuers; ``signInClient``, its client at its own
issuers, with which a sign-in's browser proves its user) and an ``"oauth"`` object in an
HTTP server's entry for credentials an operator registered (``clientId``,
``clientSecretEnv``: the name of the environment variable that holds the secret, never the
secret itself, and ``grant``: ``"authorization_code"`` or ``"client_credentials"``),
beside its
``"audience"`` (the audience an ``exchange`` server's exchanged tokens are asked for).
They stay in the parent: a ``ServerConfig`` (which crosses to the worker) carries none of
it.

Pins (``load_pin_config``): a top-level ``"pins"`` object, ``approveFirstSight`` (true:
new tools wait for approval too) and ``bounds`` (``descriptionChars``, ``schemaBytes``,
``schemaDepth``, ``toolsPerServer``). Pins are kept where the tokens are (``oauth.store``).

Authorization (``read_policy``): a top-level ``"policy"``, the policy object itself or the
path of a file holding it (relative to the file), compiled when read (``trunkline.policy``):
a policy that does not compile refuses the configuration, naming the rule and the error.

``read_host_config`` reads all of it at once, from a file or from the mapping a host
already holds (the decoded file: ``{"mcpServers": {...}, "oauth": ..., "pins": ...}``),
with the top-level ``"collision"``: ``"prefix"`` (the default), ``"prefix-all"`` (every
tool named ``<server>_<tool>``) or ``"reject"``.

A key's setting has the key's name in the code, in snake case, a key in milliseconds
(``...Ms``) becoming one in seconds (``..._s``): ``discoverTimeoutMs`` is
``ServerConfig.discover_timeout_s``.

Everything is checked up front: a host that starts with half its configuration silently
ignored is worse than one that refuses to start and says which key is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson

from .catalog.merge import CollisionPolicy
from .errors import ConfigurationError
from .params import HttpParams, StdioParams, validated_http_params
from .settings import INSTANCE_MODES, Root, ServerConfig, credentials_problem

if TYPE_CHECKING:
    from .policy import Policy

_COMMON_KEYS = {"allowLegacy", "idempotentTools", "callTimeoutMs", "discoverTimeoutMs",
                "maxDiscoverTimeoutMs", "maxTasks", "credentials",
                "type", "disabled", "enabledTools", "disabledTools", "roots"}
#: A stdio server's own, the per-user instances' among them (``_instances``).
_PER_USER_ENTRY = ("instances", "secretEnv", "maxInstances", "instanceIdleS")
_STDIO_KEYS = _COMMON_KEYS | {"command", "args", "env", "cwd", *_PER_USER_ENTRY}
_HTTP_KEYS = _COMMON_KEYS | {"url", "headers", "verifyTls", "oauth", "audience"}
#: ``type`` values naming Streamable HTTP in the configuration files hosts write.
_HTTP_TYPES = {"http", "streamable-http", "streamableHttp"}


def _fail(path: str, name: str | None, message: str) -> ConfigurationError:
    where = f"{path}: server {name!r}" if name is not None else path
    return ConfigurationError(f"{where}: {message}")


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def parse_entry(name: str, raw: Any, *, source: str, base_dir: Path | None,
                discover_timeout_s: float | None = None,
                max_discover_timeout_s: float | None = None) -> ServerConfig | None:
    """One server entry; ``None`` for an entry marked ``"disabled": true``.
    ``discover_timeout_s`` / ``max_discover_timeout_s`` (seconds) apply where the entry
    sets no ``discoverTimeoutMs`` / ``maxDiscoverTimeoutMs``."""
    if not isinstance(raw, dict):
        raise _fail(source, name, "entry must be an object")
    if raw.get("disabled") is True:
        return None
    kind = raw.get("type", "http" if "url" in raw else "stdio")
    if kind == "sse":
        raise _fail(source, name, "the deprecated HTTP+SSE transport (\"type\": \"sse\") is "
                    "not supported; use the server's Streamable HTTP endpoint")
    if kind not in _HTTP_TYPES and kind != "stdio":
        raise _fail(source, name, f"transport type {kind!r} is not supported")
    if kind in _HTTP_TYPES and raw.get("instances", "shared") != "shared":
        raise _fail(source, name, "per-user instances (\"instances\") are for stdio servers "
                    "only: a Streamable HTTP server is one endpoint for every caller")
    unknown = set(raw) - (_HTTP_KEYS if kind in _HTTP_TYPES else _STDIO_KEYS)
    if unknown:
        raise _fail(source, name, f"unknown keys {sorted(unknown)} for a "
                    f"{'Streamable HTTP' if kind in _HTTP_TYPES else 'stdio'} server")
    params = _http_params(raw, source, name) if kind in _HTTP_TYPES else \
        _stdio_params(raw, source, name, base_dir)
    allow_legacy = raw.get("allowLegacy", False)
    if not isinstance(allow_legacy, bool):
        raise _fail(source, name, "\"allowLegacy\" must be true or false")
    idempotent = raw.get("idempotentTools", [])
    if not _str_list(idempotent):
        raise _fail(source, name, "\"idempotentTools\" must be a list of tool names")
    enabled = raw.get("enabledTools")
    if enabled is not None and not _str_list(enabled):
        raise _fail(source, name, "\"enabledTools\" must be a list of glob patterns")
    disabled = raw.get("disabledTools", [])
    if not _str_list(disabled):
        raise _fail(source, name, "\"disabledTools\" must be a list of glob patterns")
    call_timeout_s = _seconds(raw, "callTimeoutMs", source, name, None)
    discover_timeout_s = _seconds(raw, "discoverTimeoutMs", source, name, discover_timeout_s)
    max_discover_timeout_s = _seconds(raw, "maxDiscoverTimeoutMs", source, name,
                                      max_discover_timeout_s)
    max_tasks = raw.get("maxTasks", 1024)
    if type(max_tasks) is not int or max_tasks < 0:
        raise _fail(source, name, "\"maxTasks\" must be a non-negative integer")
    instances = _instances(raw, source, name)
    credentials = raw.get("credentials", "shared")
    problem = credentials_problem(credentials, kind in _HTTP_TYPES)
    if problem is not None:
        raise _fail(source, name, problem)
    try:
        return ServerConfig(name, params, allow_legacy=allow_legacy, max_tasks=max_tasks,
                            **instances,
                            idempotent_tools=frozenset(idempotent),
                            call_timeout_s=call_timeout_s,
                            discover_timeout_s=discover_timeout_s,
                            max_discover_timeout_s=max_discover_timeout_s,
                            enabled_tools=None if enabled is None else tuple(enabled),
                            disabled_tools=tuple(disabled), roots=_roots(raw.get("roots")),
                            credentials=credentials)
    except ConfigurationError as exc:
        raise _fail(source, name, exc.message) from None


def _instances(raw: dict[str, Any], source: str, name: str) -> dict[str, Any]:
    """``"instances"``, ``"secretEnv"``, ``"maxInstances"``, ``"instanceIdleS"``, as
    ``ServerConfig``'s fields (which check how they go together)."""
    fields: dict[str, Any] = {}
    if "instances" in raw:
        if raw["instances"] not in INSTANCE_MODES:
            raise _fail(source, name, f"\"instances\" must be one of {list(INSTANCE_MODES)}")
        fields["instances"] = raw["instances"]
    if "secretEnv" in raw:
        if not _str_list(raw["secretEnv"]):
            raise _fail(source, name, "\"secretEnv\" must be a list of environment variable "
                        "names")
        fields["secret_env"] = tuple(raw["secretEnv"])
    if "maxInstances" in raw:
        value = raw["maxInstances"]
        if type(value) is not int or value < 1:
            raise _fail(source, name, "\"maxInstances\" must be a positive integer")
        fields["max_instances"] = value
    if "instanceIdleS" in raw:
        value = raw["instanceIdleS"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise _fail(source, name, "\"instanceIdleS\" must be a positive number of "
                        "seconds")
        fields["instance_idle_s"] = float(value)
    return fields


def _roots(raw: Any) -> tuple[Root, ...] | None:
    """``"roots"``: file:// URIs, or ``{"uri", "name"}`` objects."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ConfigurationError("\"roots\" must be a list of file:// URIs or "
                                 "{\"uri\", \"name\"} objects")
    roots = []
    for entry in raw:
        if isinstance(entry, str):
            roots.append(Root(entry))
        elif isinstance(entry, dict) and set(entry) <= {"uri", "name"} and isinstance(
                entry.get("name", ""), str):
            uri: Any = entry.get("uri")  # Root says what is wrong with one that is no URI
            roots.append(Root(uri, entry.get("name")))
        else:
            raise ConfigurationError(f"\"roots\": {entry!r} is neither a file:// URI nor a "
                                     "{\"uri\", \"name\"} object")
    return tuple(roots)


def _seconds(raw: dict[str, Any], key: str, source: str, name: str,
             default: float | None) -> float | None:
    """A key of whole milliseconds, in seconds; ``default`` where the entry has none."""
    ms = raw.get(key)
    if ms is None:
        return default
    if isinstance(ms, bool) or not isinstance(ms, int) or ms <= 0:
        raise _fail(source, name, f"\"{key}\" must be a positive integer")
    return ms / 1000


def _http_params(raw: dict[str, Any], source: str, name: str) -> HttpParams:
    url = raw.get("url")
    if not isinstance(url, str) or not url:
        raise _fail(source, name, "\"url\" must be a non-empty string")
    headers = raw.get("headers", {})
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        raise _fail(source, name, "\"headers\" must map strings to strings")
    verify = raw.get("verifyTls", True)
    if not isinstance(verify, bool):
        raise _fail(source, name, "\"verifyTls\" must be true or false")
    try:
        return validated_http_params(HttpParams(url, dict(headers), verify))
    except ConfigurationError as exc:
        raise _fail(source, name, exc.message) from None


def _stdio_params(raw: dict[str, Any], source: str, name: str,
                  base_dir: Path | None) -> StdioParams:
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
    return StdioParams(command, tuple(args), dict(env), cwd)


def parse_config(data: Any, *, source: str = "<config>", base_dir: Path | None = None,
                 discover_timeout_s: float | None = None,
                 max_discover_timeout_s: float | None = None) -> list[ServerConfig]:
    """Servers in file order (the order in which they start)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("mcpServers"), Mapping):
        raise _fail(source, None, "expected an object with an \"mcpServers\" object")
    servers: Mapping[str, Any] = data["mcpServers"]
    entries = []
    for name, raw in servers.items():
        if not name or "/" in name:
            # "/" separates server and tool in prefixed names: it must stay unambiguous.
            raise _fail(source, name, "server names must be non-empty and contain no '/'")
        entry = parse_entry(name, raw, source=source, base_dir=base_dir,
                            discover_timeout_s=discover_timeout_s,
                            max_discover_timeout_s=max_discover_timeout_s)
        if entry is not None:
            entries.append(entry)
    return entries


def _read(path: str | os.PathLike[str]) -> Any:
    p = Path(path)
    try:
        return orjson.loads(p.read_bytes())
    except OSError as exc:
        raise ConfigurationError(f"{p}: cannot read: {exc.strerror}") from exc
    except orjson.JSONDecodeError as exc:
        raise ConfigurationError(f"{p}: not valid JSON: {exc}") from exc


def load_config(path: str | os.PathLike[str], *, discover_timeout_s: float | None = None,
                max_discover_timeout_s: float | None = None) -> list[ServerConfig]:
    p = Path(path)
    return parse_config(_read(p), source=str(p), base_dir=p.parent,
                        discover_timeout_s=discover_timeout_s,
                        max_discover_timeout_s=max_discover_timeout_s)


# --- OAuth ------------------------------------------------------------------------------

_OAUTH_KEYS = {"clientName", "redirectUri", "clientMetadataUrl", "store", "signInUrl"}
#: The host's ``"oauth"`` keys whose values are objects.
_OAUTH_OBJECTS = {"exchangeClient", "signInClient"}
_GATEWAY_CLIENT_KEYS = {"clientId", "clientSecretEnv"}
_SERVER_OAUTH_KEYS = {"clientId", "clientSecretEnv", "grant", "assertionFile",
                      "assertionEnv", "identityProvider", "dpop"}
_IDP_KEYS = {"issuer", "clientId", "clientSecretEnv", "tokenEndpoint", "idTokenFile",
             "idTokenEnv"}
_GRANTS = ("authorization_code", "client_credentials", "jwt_bearer", "enterprise_managed")
#: Where tokens are kept unless the file says otherwise.
DEFAULT_OAUTH_STORE = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") \
    / "trunkline" / "oauth"


def default_store() -> Path:
    """Where tokens (and pins) are kept unless the file says otherwise, read from the
    environment now (``DEFAULT_OAUTH_STORE`` is what it was at import)."""
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") \
        / "trunkline" / "oauth"


@dataclass(frozen=True)
class ServerOAuth:
    """Credentials an operator registered for one server (by its URL)."""

    client_id: str
    #: Read from the environment when the file was loaded; never printed.
    client_secret: str | None = field(default=None, repr=False)
    grant: str = "authorization_code"
    #: ``jwt_bearer``: where the workload's identity token is read, each time it is
    #: needed (a file, else an environment variable).
    assertion_file: Path | None = None
    assertion_env: str | None = None
    #: ``enterprise_managed``: the enterprise identity provider.
    identity_provider: IdentityProviderConfig | None = None
    #: DPoP-bound tokens always (True), never (False), or when the server offers them.
    dpop: bool | None = None


@dataclass(frozen=True)
class IdentityProviderConfig:
    """The enterprise identity provider of ``"grant": "enterprise_managed"``."""

    issuer: str
    client_id: str
    #: Read from the environment when the file was loaded; never printed.
    client_secret: str | None = field(default=None, repr=False)
    token_endpoint: str | None = None
    #: Where the user's ID token is read, each time one is exchanged.
    id_token_file: Path | None = None
    id_token_env: str | None = None


@dataclass(frozen=True)
class OAuthConfig:
    """The host's OAuth settings from the configuration file."""

    client_name: str = "trunkline"
    redirect_uri: str = "http://127.0.0.1:8765/callback"
    client_metadata_url: str | None = None
    #: A directory (``FileStore``), or a Redis URL (``RedisStore``; it may hold a password,
    #: so it is never printed).
    store: Path | str = field(default=DEFAULT_OAUTH_STORE, repr=False)
    #: By server URL.
    servers: Mapping[str, ServerOAuth] = field(default_factory=dict)
    #: The URL users' browsers reach the gateway by, below which their sign-ins to
    #: ``per_user`` servers are (``"signInUrl"``); None: ``serve --http``'s own address.
    sign_in_url: str | None = None
    #: The gateway's client at its callers' issuers, for ``exchange`` servers
    #: (``"exchangeClient"``: ``clientId``, ``clientSecretEnv``).
    exchange_client_id: str | None = None
    exchange_client_secret: str | None = field(default=None, repr=False)
    #: The gateway's client at its own issuers (``"signInClient"``: ``clientId``,
    #: ``clientSecretEnv``), with which the browser that opens a sign-in link proves its
    #: user first; None: a sign-in link is a one-time capability.
    sign_in_client_id: str | None = None
    sign_in_client_secret: str | None = field(default=None, repr=False)
    #: The ``audience`` asked for in an ``exchange`` server's token exchange, by server URL
    #: (the server entry's ``"audience"``).
    audiences: Mapping[str, str] = field(default_factory=dict)


def load_oauth_config(path: str | os.PathLike[str],
                      env: Mapping[str, str] | None = None) -> OAuthConfig:
    """The file's OAuth settings (defaults where it has none). ``env``: where
    ``clientSecretEnv`` names are looked up (``os.environ``)."""
    p = Path(path)
    data = orjson.loads(p.read_bytes())  # load_config read it already: errors said there
    return _oauth_config(data, str(p), p.parent, env)


def _oauth_config(data: Any, source: str, base_dir: Path | None,
                  env: Mapping[str, str] | None) -> OAuthConfig:
    env = os.environ if env is None else env
    raw = data.get("oauth", {}) if isinstance(data, Mapping) else {}
    if not isinstance(raw, Mapping) or set(raw) - _OAUTH_KEYS - _OAUTH_OBJECTS:
        raise _fail(source, None, "\"oauth\" must be an object with only the keys "
                    f"{sorted(_OAUTH_KEYS | _OAUTH_OBJECTS)}")
    for key in _OAUTH_KEYS:
        if key in raw and not isinstance(raw[key], str):
            raise _fail(source, None, f"\"oauth\": \"{key}\" must be a string")
    store: Path | str = default_store()
    if "store" in raw:
        store = raw["store"] if raw["store"].startswith(("redis://", "rediss://")) \
            else Path(raw["store"])
    if isinstance(store, Path) and not store.is_absolute() and base_dir is not None:
        store = base_dir / store
    servers = {}
    audiences = {}
    for name, entry in (data.get("mcpServers") or {}).items():
        if isinstance(entry, Mapping) and "oauth" in entry:
            servers[entry["url"]] = _server_oauth(entry["oauth"], source, name, env,
                                                  base_dir)
        if isinstance(entry, Mapping) and "audience" in entry:
            if not isinstance(entry["audience"], str) or not entry["audience"]:
                raise _fail(source, name, "\"audience\" must be a non-empty string")
            audiences[entry["url"]] = entry["audience"]
    sign_in_url = raw.get("signInUrl")
    if sign_in_url is not None and not sign_in_url.startswith(("https://", "http://")):
        raise _fail(source, None, "\"oauth\": \"signInUrl\" must be an http(s) URL")
    exchange_id, exchange_secret = _gateway_client(raw, "exchangeClient", source, env)
    person_id, person_secret = _gateway_client(raw, "signInClient", source, env)
    defaults = OAuthConfig()
    return OAuthConfig(
        client_name=raw.get("clientName", defaults.client_name),
        redirect_uri=raw.get("redirectUri", defaults.redirect_uri),
        client_metadata_url=raw.get("clientMetadataUrl"),
        store=store,
        servers=servers, sign_in_url=sign_in_url, exchange_client_id=exchange_id,
        exchange_client_secret=exchange_secret, sign_in_client_id=person_id,
        sign_in_client_secret=person_secret, audiences=audiences)


def _gateway_client(raw: Mapping[str, Any], key: str, source: str,
                    env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """One of the gateway's own clients (``"exchangeClient"``, ``"signInClient"``): its
    id, and the secret its ``clientSecretEnv`` names."""
    client = raw.get(key)
    if client is None:
        return None, None
    if not isinstance(client, Mapping) or set(client) - _GATEWAY_CLIENT_KEYS or \
            not isinstance(client.get("clientId"), str) or not client["clientId"]:
        raise _fail(source, None, f"\"oauth\": \"{key}\" must be an object with a "
                    "\"clientId\" and, optionally, \"clientSecretEnv\"")
    return client["clientId"], _secret_env(client, f"\"oauth\": \"{key}\"", source, None, env)


def _server_oauth(raw: Any, source: str, name: str, env: Mapping[str, str],
                  base_dir: Path | None = None) -> ServerOAuth:
    if not isinstance(raw, dict) or set(raw) - _SERVER_OAUTH_KEYS:
        raise _fail(source, name, "\"oauth\" must be an object with only the keys "
                    f"{sorted(_SERVER_OAUTH_KEYS)}")
    client_id = raw.get("clientId")
    if not isinstance(client_id, str) or not client_id:
        raise _fail(source, name, "\"oauth\": \"clientId\" must be a non-empty string")
    grant = raw.get("grant", "authorization_code")
    if grant not in _GRANTS:
        raise _fail(source, name, f"\"oauth\": \"grant\" must be one of {list(_GRANTS)}")
    secret = _secret_env(raw, "\"oauth\"", source, name, env)
    if grant == "client_credentials" and secret is None:
        raise _fail(source, name, "\"oauth\": the client credentials grant needs "
                    "\"clientSecretEnv\"")
    dpop = raw.get("dpop")
    if dpop is not None and not isinstance(dpop, bool):
        raise _fail(source, name, "\"oauth\": \"dpop\" must be true or false")
    assertion_file, assertion_env = _jwt_source(raw, "assertionFile", "assertionEnv",
                                                "\"oauth\"", source, name, base_dir)
    if (assertion_file or assertion_env) and grant != "jwt_bearer":
        raise _fail(source, name, "\"oauth\": \"assertionFile\" and \"assertionEnv\" go "
                    "with \"grant\": \"jwt_bearer\"")
    if grant == "jwt_bearer" and not (assertion_file or assertion_env):
        raise _fail(source, name, "\"oauth\": the jwt_bearer grant needs \"assertionFile\" "
                    "or \"assertionEnv\" (the workload's identity token)")
    idp = None
    if "identityProvider" in raw:
        if grant != "enterprise_managed":
            raise _fail(source, name, "\"oauth\": \"identityProvider\" goes with "
                        "\"grant\": \"enterprise_managed\"")
        idp = _identity_provider(raw["identityProvider"], source, name, env, base_dir)
    elif grant == "enterprise_managed":
        raise _fail(source, name, "\"oauth\": the enterprise_managed grant needs "
                    "\"identityProvider\"")
    return ServerOAuth(client_id, secret, grant, assertion_file=assertion_file,
                       assertion_env=assertion_env, identity_provider=idp, dpop=dpop)


def _identity_provider(raw: Any, source: str, name: str, env: Mapping[str, str],
                       base_dir: Path | None) -> IdentityProviderConfig:
    where = "\"oauth\": \"identityProvider\""
    if not isinstance(raw, dict) or set(raw) - _IDP_KEYS:
        raise _fail(source, name, f"{where} must be an object with only the keys "
                    f"{sorted(_IDP_KEYS)}")
    for key in ("issuer", "clientId"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise _fail(source, name, f"{where}: \"{key}\" must be a non-empty string")
    endpoint = raw.get("tokenEndpoint")
    if endpoint is not None and (not isinstance(endpoint, str) or not endpoint):
        raise _fail(source, name, f"{where}: \"tokenEndpoint\" must be a URL")
    id_file, id_env = _jwt_source(raw, "idTokenFile", "idTokenEnv", where, source, name,
                                  base_dir)
    if not (id_file or id_env):
        raise _fail(source, name, f"{where} needs \"idTokenFile\" or \"idTokenEnv\" (the "
                    "user's ID token from that provider)")
    return IdentityProviderConfig(
        issuer=raw["issuer"], client_id=raw["clientId"],
        client_secret=_secret_env(raw, where, source, name, env), token_endpoint=endpoint,
        id_token_file=id_file, id_token_env=id_env)


def _secret_env(raw: Mapping[str, Any], where: str, source: str, name: str | None,
                env: Mapping[str, str]) -> str | None:
    """The value of the variable ``"clientSecretEnv"`` names, read now."""
    variable = raw.get("clientSecretEnv")
    if variable is None:
        return None
    if not isinstance(variable, str) or not variable:
        raise _fail(source, name, f"{where}: \"clientSecretEnv\" must name an "
                    "environment variable")
    secret = env.get(variable)
    if not secret:
        raise _fail(source, name, f"{where}: the environment variable {variable!r} "
                    "(\"clientSecretEnv\") is not set")
    return secret


def _jwt_source(raw: Mapping[str, Any], file_key: str, env_key: str, where: str, source: str,
                name: str, base_dir: Path | None) -> tuple[Path | None, str | None]:
    """Where a JWT is read each time it is needed: a file (relative to the configuration
    file), or an environment variable; at most one of them."""
    path, variable = raw.get(file_key), raw.get(env_key)
    if path is not None and variable is not None:
        raise _fail(source, name, f"{where}: \"{file_key}\" or \"{env_key}\", not both")
    for key, value in ((file_key, path), (env_key, variable)):
        if value is not None and (not isinstance(value, str) or not value):
            raise _fail(source, name, f"{where}: \"{key}\" must be a non-empty string")
    file = None
    if path is not None:
        file = Path(path)
        if not file.is_absolute() and base_dir is not None:
            file = base_dir / file
    return file, variable


# --- pins -------------------------------------------------------------------------------

_PIN_KEYS = {"approveFirstSight", "bounds"}
_BOUND_KEYS = {"descriptionChars": "description_chars", "schemaBytes": "schema_bytes",
               "schemaDepth": "schema_depth", "toolsPerServer": "tools_per_server"}


@dataclass(frozen=True)
class PinConfig:
    approve_first_sight: bool = False
    #: ``ToolBounds`` field -> value, for the bounds the file sets.
    bounds: Mapping[str, int] = field(default_factory=dict)


def load_pin_config(path: str | os.PathLike[str]) -> PinConfig:
    """The file's ``"pins"`` object (defaults where it has none)."""
    p = Path(path)
    data = orjson.loads(p.read_bytes())  # load_config read it already: errors said there
    return _pin_config(data, str(p))


def _pin_config(data: Any, source: str) -> PinConfig:
    raw = data.get("pins", {}) if isinstance(data, Mapping) else {}
    if not isinstance(raw, Mapping) or set(raw) - _PIN_KEYS:
        raise _fail(source, None, f"\"pins\" must be an object with only the keys "
                    f"{sorted(_PIN_KEYS)}")
    first = raw.get("approveFirstSight", False)
    if not isinstance(first, bool):
        raise _fail(source, None, "\"pins\": \"approveFirstSight\" must be true or false")
    bounds = raw.get("bounds", {})
    if not isinstance(bounds, Mapping) or set(bounds) - set(_BOUND_KEYS):
        raise _fail(source, None, f"\"pins\": \"bounds\" must be an object with only the "
                    f"keys {sorted(_BOUND_KEYS)}")
    for key, value in bounds.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _fail(source, None, f"\"pins\": bound \"{key}\" must be a positive integer")
    return PinConfig(first, {_BOUND_KEYS[k]: v for k, v in bounds.items()})


# --- the whole configuration ------------------------------------------------------------

#: The values of the top-level ``"collision"`` (``catalog.merge.CollisionPolicy``).
_COLLISIONS = ("prefix", "prefix-all", "reject")

#: What ``read_host_config`` reads: a file's path, or the decoded file itself.
ConfigSource = str | os.PathLike[str] | Mapping[str, Any]


@dataclass(frozen=True)
class HostConfig:
    """Everything ``Host.from_config`` takes from one configuration: its servers (in
    file order), the host's OAuth settings and its pin settings."""

    servers: list[ServerConfig]
    oauth: OAuthConfig
    pins: PinConfig
    #: The top-level ``"collision"`` (``"prefix"``, ``"prefix-all"``, ``"reject"``), if
    #: set: how the catalog keeps tool names apart (``catalog.merge``).
    collision: CollisionPolicy | None
    #: The file's path, or ``"<mapping>"``: where error messages say the fault is.
    source: str
    #: The file's path, or None for a mapping (for ``trunkline login FILE NAME``).
    path: Path | None
    #: Who may see and call what (``"policy"``); None: everyone, everything.
    policy: Policy | None = None
    #: The top-level ``"maxUserInstances"``, if set (``HostSettings.max_user_instances``).
    max_user_instances: int | None = None


def read_host_config(source: ConfigSource, *, discover_timeout_s: float | None = None,
                     max_discover_timeout_s: float | None = None,
                     env: Mapping[str, str] | None = None) -> HostConfig:
    """A configuration file's path, or the ``{"mcpServers": {...}}`` mapping a host
    already holds (as ``json.load`` gives it), read once and checked whole. Relative
    paths in it (a server's ``"cwd"``, the ``"oauth"`` ``"store"``) are relative to the
    file's directory, or for a mapping to the working directory."""
    if isinstance(source, Mapping):
        data: Any = source
        name, path, base_dir = "<mapping>", None, None
    else:
        path = Path(source)
        data, name, base_dir = _read(path), str(path), path.parent
    servers = parse_config(data, source=name, base_dir=base_dir,
                           discover_timeout_s=discover_timeout_s,
                           max_discover_timeout_s=max_discover_timeout_s)
    collision = data.get("collision")
    if collision is not None and collision not in _COLLISIONS:
        raise _fail(name, None, f"\"collision\" must be one of {list(_COLLISIONS)}")
    max_user_instances = data.get("maxUserInstances")
    if max_user_instances is not None and (type(max_user_instances) is not int
                                           or max_user_instances < 1):
        raise _fail(name, None, "\"maxUserInstances\" must be a positive integer")
    return HostConfig(servers, _oauth_config(data, name, base_dir, env), _pin_config(data, name),
                      cast("CollisionPolicy | None", collision), name, path,
                      _policy(data, name, base_dir), max_user_instances)


def read_policy(source: ConfigSource) -> Policy | None:
    """The configuration's ``"policy"`` alone, compiled (None: it has none): what a
    running gateway reads again to change its policy."""
    if isinstance(source, Mapping):
        return _policy(source, "<mapping>", None)
    path = Path(source)
    return _policy(_read(path), str(path), path.parent)


def _policy(data: Any, source: str, base_dir: Path | None) -> Policy | None:
    raw = data.get("policy") if isinstance(data, Mapping) else None
    if raw is None:
        return None
    from .policy import Policy, PolicyError

    try:
        if isinstance(raw, str):
            path = Path(raw)
            if base_dir is not None and not path.is_absolute():
                path = base_dir / path
            return Policy.load(path)
        return Policy.compile(raw, origin=f"{source}: \"policy\"")
    except PolicyError as exc:
        raise ConfigurationError(str(exc)) from None
