"""trunkline as the client under test of the official MCP conformance suite.

The harness (``conformance client --command "<python> client.py" --scenario S``, driven by
tests/conformance/run.sh) starts a mock MCP server for scenario S and runs this file with
the server's URL as the last argument. The environment says what is being tested:

* ``MCP_CONFORMANCE_SCENARIO``: the scenario name, e.g. ``tools_call``;
* ``MCP_CONFORMANCE_PROTOCOL_VERSION``: the revision under test (``2025-11-25`` when unset;
  ``2025-03-26`` for the two legacy OAuth scenarios);
* ``MCP_CONFORMANCE_CONTEXT``: JSON with extra inputs, for some scenarios only.

The mock records what we send and scores it afterwards. This client behaves like an agent
host would: it connects through trunkline's public ``Host`` API, lists the tools, calls
them, and answers the server's elicitation requests. The scenario name only chooses WHAT
it calls (the playbook at the bottom), never HOW: the wire is entirely trunkline's. There
are no special cases for the mock's quirks; if trunkline gets something wrong, the
scenario fails, which is the point.

Exit status 0 on success; otherwise non-zero, and the last stderr line says why
(``FAIL: ...``). The servers' status (``host.servers()``) goes to stderr too, for
debugging (the harness keeps it in the scenario's ``stderr.txt``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trunkline
from trunkline import Host
from trunkline.auth import (
    AUTHORIZATION_CODE,
    CLIENT_CREDENTIALS,
    ENTERPRISE_MANAGED,
    JWT_BEARER,
    ClientSettings,
    HeadlessAuthorizer,
    IdentityProvider,
    OAuthClient,
    PreRegisteredClient,
    Secret,
    ServerAuth,
)

SERVER = "conformance"  # the one server's name in our host
MODERN = "2026-07-28"  # the stateless revision; everything before it has a handshake

#: Below the harness's 30 s per-scenario client timeout, so a hang is reported by us
#: (with a reason) rather than by the harness killing the process.
CALL_TIMEOUT_S = 20.0
#: The auth scenarios' redirect URI (nothing listens there: the headless authorizer reads
#: the redirect's Location), and a Client ID Metadata Document URL the suite's
#: authorization servers accept (they never fetch it).
REDIRECT_URI = "http://localhost:3000/callback"
METADATA_DOCUMENT_URL = "https://conformance-test.local/client-metadata.json"


class ScenarioFailed(Exception):
    """Something the scenario needs did not happen (a missing tool, an error result)."""


def log(message: str) -> None:
    print(f"conformance client: {message}", file=sys.stderr, flush=True)


# -- what the "user" answers ------------------------------------------------------------


async def answer_elicitation(params: dict[str, Any]) -> dict[str, Any]:
    """``elicitation/create``: a user who accepts the form as offered, i.e. with every
    field's ``default`` filled in (SEP-1034). Fields without a default are left out."""
    schema = params.get("requestedSchema")
    properties = schema.get("properties") if isinstance(schema, dict) else None
    content = {
        name: prop["default"]
        for name, prop in (properties or {}).items()
        if isinstance(prop, dict) and "default" in prop
    }
    log(f"elicitation {params.get('message')!r}: accept {content}")
    return {"action": "accept", "content": content}


# -- helpers over the Host API ----------------------------------------------------------


def catalog(host: Host) -> dict[str, Any]:
    """The server's tools by the server's own (local) name -> catalog entry."""
    return {entry.local_name: entry for entry in host.tools() if entry.server == SERVER}


def tool(host: Host, local_name: str) -> Any:
    entry = catalog(host).get(local_name)
    if entry is None:
        raise ScenarioFailed(f"tool {local_name!r} is not in the catalog "
                             f"(have: {sorted(catalog(host))})")
    return entry


def sample_arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for a tool, the way a model with nothing better to go on would fill them:
    every required property gets its default, else its first enum value, else a plain
    value of its type. Optional properties are left out."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = schema.get("required")
    args: dict[str, Any] = {}
    for name in required if isinstance(required, list) else []:
        prop = properties.get(name)
        prop = prop if isinstance(prop, Mapping) else {}
        if "default" in prop:
            args[name] = prop["default"]
        elif isinstance(prop.get("enum"), list) and prop["enum"]:
            args[name] = prop["enum"][0]
        else:
            kind = prop.get("type")
            kind = kind[0] if isinstance(kind, list) and kind else kind
            args[name] = {"string": "conformance", "integer": 1, "number": 1,
                          "boolean": True, "object": {}, "array": []}.get(kind, "conformance")
    return args


async def call(host: Host, entry: Any, arguments: Mapping[str, Any]) -> None:
    """One ``tools/call`` through the host; an ``isError`` result fails the scenario."""
    result = await host.call_tool(entry.name, arguments)
    log(f"called {entry.local_name}({json.dumps(arguments, ensure_ascii=False)}) -> "
        f"{'isError ' if result.is_error else ''}{result.text[:200]!r}")
    if result.is_error:
        raise ScenarioFailed(f"tool {entry.local_name!r} returned isError: {result.text[:200]}")


# -- the playbook: what each scenario needs the agent to do -----------------------------
# Connecting (``add_server``) already negotiated the era and listed every tool page, so
# scenarios about the handshake, request metadata or schema handling need nothing more.


async def list_only(host: Host, context: dict[str, Any]) -> None:
    """The catalog was built while connecting; nothing else to do."""
    log(f"catalog: {sorted(catalog(host))}")


async def call_every_tool(host: Host, context: dict[str, Any]) -> None:
    """Call each tool in the catalog once, in listed order, with sample arguments."""
    entries = list(catalog(host).values())
    if not entries:
        raise ScenarioFailed("the catalog is empty")
    for entry in entries:
        await call(host, entry, sample_arguments(entry.input_schema))


async def call_every_tool_concurrently(host: Host, context: dict[str, Any]) -> None:
    """Call every tool at once, as a host serving several model turns would: multi
    round-trip calls then interleave, and state must not leak between them."""
    entries = list(catalog(host).values())
    if not entries:
        raise ScenarioFailed("the catalog is empty")
    outcomes = await asyncio.gather(
        *(call(host, e, sample_arguments(e.input_schema)) for e in entries),
        return_exceptions=True)
    errors = [
        (e.local_name, o)
        for e, o in zip(entries, outcomes, strict=True)
        if isinstance(o, BaseException)
    ]
    for name, exc in errors:
        log(f"{name}: {type(exc).__name__}: {exc}")
    if errors:
        name, exc = errors[0]
        raise ScenarioFailed(f"{len(errors)} of {len(entries)} calls failed; first: "
                             f"{name}: {type(exc).__name__}: {exc}")


async def echo_schema(host: Host, context: dict[str, Any]) -> None:
    """JSON Schema 2020-12 preservation: hand the focal tool's inputSchema, exactly as
    the host kept it, back to the echo tool, which reports what survived our parsing."""
    focal = tool(host, "json_schema_2020_12_tool")
    await call(host, tool(host, "json_schema_echo"), {"schema": focal.input_schema})


async def headers_tour(host: Host, context: dict[str, Any]) -> None:
    """Every request kind that carries standard headers: the tools, a resource read and
    a prompt get."""
    await call_every_tool(host, context)
    # The host has no resources/prompts listing yet: use one when it exists, else the
    # URI and prompt name this scenario's mock lists (a percent-encoded URI, which is the
    # interesting case for the Mcp-Name header).
    uri, prompt = "file:///path/to/file%20name.txt", "test_prompt"
    if hasattr(host, "list_resources"):
        uri = (await host.list_resources(SERVER))[0]["uri"]
    if hasattr(host, "list_prompts"):
        prompt = (await host.list_prompts(SERVER))[0]["name"]
    read = await host.read_resource(SERVER, uri)
    log(f"resources/read {uri} -> {len(read.get('contents') or [])} content item(s)")
    got = await host.get_prompt(SERVER, prompt)
    log(f"prompts/get {prompt} -> {len(got.get('messages') or [])} message(s)")


async def calls_from_context(host: Host, context: dict[str, Any]) -> None:
    """Make exactly the calls the harness lists in the context, with its arguments."""
    calls = context.get("toolCalls")
    if not isinstance(calls, list) or not calls:
        raise ScenarioFailed("MCP_CONFORMANCE_CONTEXT has no toolCalls")
    for item in calls:
        await call(host, tool(host, item["name"]), item.get("arguments") or {})


async def list_skills_only(host: Host, context: dict[str, Any]) -> None:
    """Look at the server's skills and load none: an agent that was shown them and chose
    none. Listing fetches entries only, never a file."""
    skills = await host.list_skills(SERVER)
    log(f"skills: {[(s.name, s.uri) for s in skills]}")


async def load_every_skill(host: Host, context: dict[str, Any]) -> None:
    """Load each listed skill (its SKILL.md, verified against the entry) and, once it is
    loaded, read every other file it lists. A skill whose SKILL.md fails verification is
    refused, as a host must: it is not used, and none of its other files is read."""
    skills = await host.list_skills(SERVER)
    if not skills:
        raise ScenarioFailed("the server lists no skills")
    for skill in skills:
        try:
            loaded = await host.load_skill(skill)
        except trunkline.SkillVerificationFailed as exc:
            log(f"skill {skill.uri} refused ({exc.kind}): {exc.message}")
            continue
        log(f"skill {skill.uri} loaded: {len(loaded.data)} bytes")
        for listed in skill.resources or ():
            if listed.uri != skill.uri:
                read = await host.read_skill_file(skill, listed.uri)
                log(f"skill file {listed.uri}: {len(read.data)} bytes")


PLAYBOOK: dict[str, Callable[[Host, dict[str, Any]], Awaitable[None]]] = {
    "initialize": list_only,
    "tools_call": call_every_tool,
    "elicitation-sep1034-client-defaults": call_every_tool,
    "sse-retry": call_every_tool,
    "json-schema-2020-12-preservation": echo_schema,
    "request-metadata": list_only,
    "sep-2322-client-request-state": call_every_tool_concurrently,
    "http-standard-headers": headers_tour,
    "http-custom-headers": calls_from_context,
    # Tools with an invalid x-mcp-header must not reach the catalog; calling every tool
    # that did is what shows whether the host dropped them.
    "http-invalid-tool-headers": call_every_tool,
    "json-schema-ref-no-deref": list_only,
    # SEP-2640 skills: nothing fetched ahead of need; a file that is not what its entry
    # said (digest, size, frontmatter) is refused, and the skill's other files unread.
    "sep-2640-client-no-prefetch": list_skills_only,
    "sep-2640-client-verify-digest": load_every_skill,
    "sep-2640-client-verify-size": load_every_skill,
    "sep-2640-client-verify-frontmatter": load_every_skill,
}


# -- main --------------------------------------------------------------------------------


def oauth_client(url: str, scenario: str, context: dict[str, Any]) -> OAuthClient:
    """The host's OAuth client, as an operator would configure one: a pre-registered
    client where the context gives one (the client credentials grant for the
    machine-to-machine scenarios, with a client secret or a private key; the JWT-bearer
    grant with the workload's identity token where the context gives one, SEP-1933; the
    enterprise-managed authorization of SEP-990 where it names the user's identity provider
    and ID token), else registration as the authorization server offers it. The user-agent
    step is headless: the suite's authorization servers approve at once. DPoP is never
    configured: the host binds tokens for a server whose challenge offers it."""
    servers: dict[str, ServerAuth] = {}
    client_id = context.get("client_id")
    if isinstance(client_id, str) and isinstance(context.get("valid_jwt"), str):
        servers[url] = ServerAuth(grant=JWT_BEARER, assertion=Secret(context["valid_jwt"]),
                                  client=PreRegisteredClient(client_id=client_id))
    elif isinstance(client_id, str) and isinstance(context.get("idp_id_token"), str):
        secret = context.get("client_secret")
        servers[url] = ServerAuth(
            grant=ENTERPRISE_MANAGED,
            client=PreRegisteredClient(client_id=client_id,
                                       client_secret=Secret(secret) if secret else None),
            identity_provider=IdentityProvider(
                issuer=context["idp_issuer"],
                client=PreRegisteredClient(client_id=context["idp_client_id"]),
                id_token=Secret(context["idp_id_token"]),
                token_endpoint=context.get("idp_token_endpoint")))
    elif isinstance(client_id, str):
        secret, key = context.get("client_secret"), context.get("private_key_pem")
        grant = (CLIENT_CREDENTIALS if scenario.startswith("auth/client-credentials")
                 else AUTHORIZATION_CODE)
        servers[url] = ServerAuth(grant=grant, client=PreRegisteredClient(
            client_id=client_id, client_secret=Secret(secret) if secret else None,
            # private_key_jwt (RFC 7523): the key and the algorithm it signs with
            private_key=Secret(key) if key else None,
            signing_algorithm=context.get("signing_algorithm") if key else None))
    settings = ClientSettings(client_name="trunkline-conformance-client",
                              redirect_uri=REDIRECT_URI,
                              metadata_document_url=METADATA_DOCUMENT_URL)
    return OAuthClient(settings=settings, servers=servers, authorizer=HeadlessAuthorizer(),
                       timeout_s=CALL_TIMEOUT_S)


def show_servers(host: Host) -> None:
    for s in host.servers():
        log(f"server {s.name!r}: state={s.state.value} era={s.era} version={s.version} "
            f"reason={s.reason!r} evidence={list(s.evidence)}")


async def run(url: str, scenario: str, version: str, context: dict[str, Any]) -> None:
    # Every auth scenario is a protected server with tools to call: the OAuth client
    # answers its 401s and 403s underneath, as it would for any other server.
    playbook = call_every_tool if scenario.startswith("auth/") else PLAYBOOK.get(scenario)
    if playbook is None:
        raise ScenarioFailed(f"no playbook for scenario {scenario!r}")
    # Only the pre-2026 revisions need the initialize handshake; at 2026-07-28 the host
    # must speak the stateless wire, so the legacy fallback stays off. The same allowlist
    # lets the OAuth client use the 2025-03-26 fallbacks (authorization server metadata,
    # else default endpoints, at the server's origin) for a server without PRM.
    legacy = version != MODERN
    params = trunkline.http(url)  # the URL verbatim, as the harness gave it
    async with oauth_client(url, scenario, context) as oauth, Host(
        client=trunkline.ClientOptions(
            info={"name": "trunkline-conformance-client", "version": trunkline.__version__},
            capabilities={"elicitation": {}},
            input_handlers={"elicitation/create": answer_elicitation}),
        calls=trunkline.CallOptions(call_timeout_s=CALL_TIMEOUT_S),
        catalog=trunkline.CatalogOptions(list_timeout_s=CALL_TIMEOUT_S),
        oauth=oauth,
    ) as host:
        try:
            status = await host.add_server(SERVER, params, allow_legacy=legacy)
            if status.state.value != "ready":
                raise ScenarioFailed(f"server not ready: {status.state.value}: {status.reason}")
            for warning in host.warnings:
                log(f"catalog warning: {warning}")
            await playbook(host, context)
        finally:
            show_servers(host)


def main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    if len(sys.argv) < 2:
        print("FAIL: usage: client.py <server-url> (run by the conformance harness)",
              file=sys.stderr)
        return 2
    url = sys.argv[-1]
    log(f"scenario={scenario} version={version} url={url} trunkline={trunkline.__version__}")
    try:
        context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
        asyncio.run(run(url, scenario, version, context))
    except Exception as exc:  # noqa: BLE001 - every failure becomes the one-line reason
        if os.environ.get("TRUNKLINE_CONFORMANCE_DEBUG"):
            traceback.print_exc()
        reason = str(exc) if isinstance(exc, ScenarioFailed) else f"{type(exc).__name__}: {exc}"
        print(f"FAIL: {scenario}: {' '.join(reason.split())}", file=sys.stderr, flush=True)
        return 1
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
