"""The OAuth client of a host: the I/O around the pure modules of ``trunkline.auth``.

One ``OAuthClient`` per host (it lives in the parent process). A request to a protected
server asks ``authorization_for(server_url)`` for its ``Authorization`` header value; when
the server answers 401 or 403, ``on_challenge(...)`` obtains a token that answers the
challenge and returns the new header value, and the request is sent once more. The caller
bounds its own retries (one new attempt per challenge is enough; a second challenge for a
fresh token is the server's refusal).

Rules:

1. Single flight per server: while a flow (authorization, refresh, step-up) runs for a
   server, every other caller for that server waits for its outcome instead of starting
   another; 50 concurrent 401s make one token request.
2. A challenge is answered from what is at hand when it can be: a 401 or 403 for a
   request that carried an older token (or none), while a newer token is held that
   answers it, is answered with that token. ``rejected`` tells which header the refused
   request carried; left out, the current token is taken to be the refused one.
3. A 401 first rediscovers the server's metadata (the authorization server may have
   changed): protected resource metadata, then the authorization server's (see
   ``discovery``). If the token held was issued by that same server and has a refresh
   token, it is refreshed (once per challenge: a refreshed token that is refused again
   leads to a new authorization); otherwise, or if the refresh token is refused, the
   authorization code flow runs: client identity (``registration``), PKCE S256, ``state``,
   RFC 8707 ``resource``, the authorizer, the redirect's checks including RFC 9207 ``iss``
   (``authorization``), the code exchange (``tokens``).
4. A 403 with ``insufficient_scope`` steps up: a new authorization for the union of the
   held token's scopes and the required ones, within the limits of ``scopes``. Any other
   403 is a refusal that no token can fix.
5. ``authorization_for`` refreshes a token shortly before it expires (``refresh_margin_s``)
   and after a restart, from the store's absolute expiry: a host that was authorized once
   comes back with a refreshed token, not a new authorization. A refresh token the server
   refuses is dropped (the next 401 authorizes afresh); an authorization server that cannot
   be reached leaves the token as it is, to be used while it lasts.
6. Secrets go to their issuer only. Tokens are held per server and presented to that
   server only; a refresh token goes to the token endpoint of the issuer that issued it, a
   client secret to the issuer it is bound to. Nothing secret travels over plain http
   except to loopback, and no request here follows a redirect (a 307 would replay a
   secret to wherever it points).
7. Servers that authorize without a user get their tokens from a grant that runs again
   to renew them before they expire (``HEADLESS_GRANTS``): ``CLIENT_CREDENTIALS``, with
   the configured client's secret or signed assertion (``private_key_jwt``, RFC 7523;
   machine to machine); ``JWT_BEARER``, the RFC 7523 JWT-bearer grant with the
   workload's identity token as ``assertion`` (workload identity federation, SEP-1933;
   ``ServerAuth.assertion``, read afresh each time); ``ENTERPRISE_MANAGED``, the
   enterprise-managed authorization of SEP-990 (``id_jag``): the user's ID token
   exchanged at the enterprise identity provider for an ID-JAG, then the JWT-bearer
   grant with it. A refused grant is the server's answer: it is not retried, and no other
   grant is tried in its place.
8. Processes that share a store (gateway replicas on ``redis_store.RedisStore``) renew a
   server's token one at a time: a flight runs under the store's renewal lease
   (``store.renewal_lease``; a no-op for a store only this process uses) and, once it has
   the lease, reads the server's record again. A token another process stored since the
   flight was decided answers it if it is not due for renewal, and no request is made;
   if it is due, it is that token that is refreshed, not the older one the flight was
   decided on (whose refresh token, often single-use, the other process spent). A
   step-up answered so with a token that lacks the scope meets the next 403 as rule 4
   says. Any other change to the record (a new client identity, a dropped token) is
   taken before the flow runs.
9. The 2025-03-26 fallbacks (authorization server metadata at the server's origin, else
   the default endpoints there; ``legacy``) only for a call that says the server is
   allowlisted for the legacy era (``legacy_fallbacks=True``; the parent passes the
   server's ``allow_legacy``), and only when the server has no protected resource
   metadata. For any other server, no protected resource metadata is a refusal.
10. DPoP (RFC 9449, SEP-1932; ``dpop``): a server whose tokens are to be DPoP-bound gets
    every token request made with a proof of a key generated for it (a refresh proves
    the token's own key), the authorization server's ``DPoP-Nonce`` kept per issuer and a
    ``use_dpop_nonce`` refusal retried once with the new one. Which servers:
    ``ServerAuth(dpop=True)`` always, ``False`` never, ``None`` (the default) those whose
    challenge offers the DPoP scheme (``WWW-Authenticate: DPoP ...``) when their
    authorization server accepts proofs in an algorithm this client signs with. A bound token
    keeps its key (``Token.dpop_key``); ``dpop_key_for`` hands it to the worker that
    presents the token, which signs each request's proof (``dpop`` rule 4).

Not implemented: ``dpop_jkt`` in the authorization request (RFC 9449 §10, binding the
code to the key; the code exchange's proof binds the token); signing in to the enterprise
identity provider for the ID token that ``ENTERPRISE_MANAGED`` exchanges (its source is
the caller's: ``ServerAuth.identity_provider``), and minting workload tokens
(``JWT_BEARER`` presents the one its source gives).
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, replace
from typing import Any, Self
from urllib.parse import urljoin

import aiohttp

from ..errors import AuthorizationFailed
from . import legacy
from .authorization import authorization_code, authorization_request
from .challenge import BearerChallenge, bearer_challenge, dpop_challenge
from .discovery import (
    AuthServerMetadata,
    ProtectedResource,
    authorization_server_urls,
    parse_authorization_server,
    parse_protected_resource,
    protected_resource_urls,
)
from .dpop import NONCE_HEADER, PROOF_HEADER, DpopKey, choose_algorithm, generate_key
from .dpop import token_endpoint_wants_nonce as _wants_nonce
from .id_jag import IdentityProvider, parse_id_jag, token_exchange_form
from .registration import (
    BASIC,
    CONFIGURED,
    NONE,
    PRIVATE_KEY_JWT,
    ClientIdentity,
    ClientSettings,
    PreRegisteredClient,
    Registration,
    choose_identity,
    client_authentication,
    parse_registration,
)
from .resource import canonical_uri, secure_transport
from .scopes import (
    StepUpBudget,
    asks_for_more,
    initial_scope,
    scope_param,
    step_up_scope,
    with_offline_access,
)
from .secret import Secret
from .store import Binding, MemoryStore, TokenStore, renewal_lease
from .tokens import (
    Token,
    client_credentials_form,
    code_exchange_form,
    jwt_bearer_form,
    parse_token_response,
    refresh_form,
)
from .workload import JwtSource, read_source

log = logging.getLogger("trunkline.auth")

AUTHORIZATION_CODE = "authorization_code"
CLIENT_CREDENTIALS = "client_credentials"
#: Workload identity federation (SEP-1933): the RFC 7523 JWT-bearer grant.
JWT_BEARER = "jwt_bearer"
#: Enterprise-managed authorization (SEP-990): ID-JAG, then the JWT-bearer grant.
ENTERPRISE_MANAGED = "enterprise_managed"
GRANTS = (AUTHORIZATION_CODE, CLIENT_CREDENTIALS, JWT_BEARER, ENTERPRISE_MANAGED)
#: Rule 7: grants that need no user, run again to renew a token.
HEADLESS_GRANTS = frozenset({CLIENT_CREDENTIALS, JWT_BEARER, ENTERPRISE_MANAGED})

#: The user-agent step: takes the authorization URL, returns the URL the user agent was
#: redirected to (carrying ``code``, ``state`` and, from RFC 9207 servers, ``iss``).
Authorizer = Callable[[str], Awaitable[str]]


class Sent(enum.Enum):
    """What a refused request carried, when the caller cannot say."""

    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ServerAuth:
    """How one server is authorized (servers not configured get the defaults)."""

    #: Pre-registered credentials; required for ``CLIENT_CREDENTIALS`` and
    #: ``ENTERPRISE_MANAGED`` (the client the server's authorization server knows).
    client: PreRegisteredClient | None = None
    grant: str = AUTHORIZATION_CODE
    #: ``JWT_BEARER``: the workload's identity token (rule 7), required.
    assertion: JwtSource | None = None
    #: ``ENTERPRISE_MANAGED``: the enterprise identity provider, required.
    identity_provider: IdentityProvider | None = None
    #: Rule 10: DPoP-bound tokens always (True), never (False), or when the server's
    #: challenge offers the DPoP scheme (None).
    dpop: bool | None = None

    def __post_init__(self) -> None:
        if self.grant not in GRANTS:
            raise ValueError(f"unknown grant {self.grant!r} (one of {', '.join(GRANTS)})")
        if (self.assertion is not None) != (self.grant == JWT_BEARER):
            raise ValueError("an assertion is configured with the jwt_bearer grant, and "
                             "only with it")
        if (self.identity_provider is not None) != (self.grant == ENTERPRISE_MANAGED):
            raise ValueError("an identity provider is configured with the "
                             "enterprise_managed grant, and only with it")
        if self.grant == ENTERPRISE_MANAGED and self.client is None:
            raise ValueError("the enterprise_managed grant needs the client the server's "
                             "authorization server knows the host by")


class HeadlessAuthorizer:
    """The user-agent step without a user: GETs the authorization URL without following
    redirects and returns where the redirect points. For authorization servers that
    approve at once (test servers, the conformance suite's mocks).

    A desktop host instead opens the URL in the user's browser and listens on the loopback
    redirect URI (``http://127.0.0.1:<port>/callback``, RFC 8252 §7.3) for the request the
    browser makes when the authorization server sends it back; the CLI does the same."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s

    async def __call__(self, authorization_url: str) -> str:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(authorization_url, allow_redirects=False) as response:
                location = response.headers.get("Location")
                if response.status not in (301, 302, 303, 307, 308) or not location:
                    raise AuthorizationFailed(
                        f"the authorization endpoint answered HTTP {response.status} without "
                        "a redirect: it wants a user, so a headless authorizer cannot pass it; "
                        "use an interactive one", reason="authorization_interactive")
                return urljoin(authorization_url, location)


class OAuthClient:
    """Tokens for the protected servers a host talks to; see the module docstring.

    Use as ``async with OAuthClient(...) as oauth:`` or call ``aclose()``: flows still
    running are cancelled, and the HTTP session it made is closed."""

    def __init__(
        self,
        *,
        store: TokenStore | None = None,
        authorizer: Authorizer | None = None,
        settings: ClientSettings | None = None,
        servers: Mapping[str, ServerAuth] | None = None,
        refresh_margin_s: float = 60.0,
        step_ups: StepUpBudget | None = None,
        timeout_s: float = 30.0,
        max_body_bytes: int = 1 << 20,
        clock: Callable[[], float] = time.time,
        session: aiohttp.ClientSession | None = None,
        owns_store: bool = False,
    ) -> None:
        self.store: TokenStore = store if store is not None else MemoryStore()
        self.authorizer: Authorizer = authorizer if authorizer is not None else HeadlessAuthorizer()
        self.settings = settings if settings is not None else ClientSettings()
        self.refresh_margin_s = refresh_margin_s
        self.step_ups = step_ups if step_ups is not None else StepUpBudget()
        self.timeout_s = timeout_s
        self.max_body_bytes = max_body_bytes
        self.clock = clock
        self._servers = {canonical_uri(url): auth for url, auth in (servers or {}).items()}
        self._keys: dict[str, str] = {}
        self._session = session
        self._owns_session = session is None
        #: Close the store with the client (one it made for itself, e.g. a ``RedisStore``).
        self._owns_store = owns_store
        self._bindings: dict[str, Binding | None] = {}
        self._metadata: dict[str, AuthServerMetadata] = {}
        self._flights: dict[str, asyncio.Task[str | None]] = {}
        # Servers whose current token is a refresh made in answer to a 401: a 401 for it
        # means refreshing does not help, so the next one authorizes afresh.
        self._refreshed_on_challenge: set[str] = set()
        #: Rule 10: servers whose challenge offered DPoP, and each issuer's last nonce.
        self._dpop_offered: set[str] = set()
        self._as_nonces: dict[str, str] = {}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        flights = list(self._flights.values())
        for task in flights:
            task.cancel()
        await asyncio.gather(*flights, return_exceptions=True)
        if self._owns_session and self._session is not None:
            await self._session.close()
        self._session = None
        closing = getattr(self.store, "aclose", None)
        if self._owns_store and closing is not None:
            await closing()

    # -- the API ------------------------------------------------------------------------

    async def authorization_for(self, server_url: str, *,
                                legacy_fallbacks: bool = False) -> str | None:
        """The ``Authorization`` header value to send to ``server_url``, or ``None`` when
        this host holds no usable token for it (send the request without one; its 401 goes
        to ``on_challenge``). Refreshes a token that is due (rule 5). ``legacy_fallbacks``:
        the server is allowlisted for the legacy era (rule 9)."""
        key = self._key(server_url)
        try:
            binding = await self._binding(key)
            flight = self._flights.get(key)
            if flight is not None:
                return await asyncio.shield(flight)
            token = binding.token if binding else None
            if token is None:
                return None
            now = self.clock()
            if not token.refresh_due(now, self.refresh_margin_s):
                return token.authorization()
            if token.refresh_token is None and self._auth(key).grant not in HEADLESS_GRANTS:
                return None if token.expired(now) else token.authorization()
            return await self._fly(key, self._renew(key, token, legacy_fallbacks),
                                   legacy_fallbacks)
        except AuthorizationFailed as exc:
            _name(exc, server_url)
            raise

    async def renew_at(self, server_url: str) -> float | None:
        """When the header ``authorization_for`` gives now is due for renewal (seconds
        since the epoch, this client's clock); ``None``: not before the server refuses it."""
        key = self._key(server_url)
        binding = await self._binding(key)
        token = binding.token if binding else None
        if token is None:
            return None
        if token.refresh_token is None and self._auth(key).grant not in HEADLESS_GRANTS:
            return token.expires_at  # nothing renews it: ask again once it has expired
        return token.refresh_at(self.refresh_margin_s)

    async def dpop_key_for(self, server_url: str, authorization: str) -> Secret | None:
        """Rule 10: the proof key of the DPoP-bound token that ``authorization`` (a value
        ``authorization_for`` or ``on_challenge`` gave) presents, for whoever sends it
        to ``server_url``; ``None`` for a Bearer token or one no longer held."""
        binding = await self._binding(self._key(server_url))
        token = binding.token if binding else None
        if token is None or token.dpop_key is None \
                or not _same(authorization, token.authorization()):
            return None
        return token.dpop_key

    async def on_challenge(self, server_url: str, status: int, www_authenticate: str | None,
                           *, rejected: str | Sent | None = Sent.UNKNOWN,
                           legacy_fallbacks: bool = False) -> str:
        """Answer a 401 or 403 from ``server_url`` (``www_authenticate``: its header, several
        fields joined with ``", "``) with the ``Authorization`` header value to send the
        request with again. ``rejected``: the header value the refused request carried
        (``None`` for none). ``legacy_fallbacks``: the server is allowlisted for the legacy
        era, so the 2025-03-26 fallbacks may be used (rule 9). Raises
        ``AuthorizationFailed`` naming the server and why no token could be had."""
        if status not in (401, 403):
            raise ValueError(f"not an authorization challenge: HTTP {status}")
        key = self._key(server_url)
        challenge = bearer_challenge(www_authenticate)
        if dpop_challenge(www_authenticate) is not None:
            self._dpop_offered.add(key)
        try:
            if not secure_transport(server_url):
                raise AuthorizationFailed(
                    "the server is not https (plain http only to loopback): no token is sent "
                    "to it", reason="insecure_server")
            for _ in range(3):
                binding = await self._binding(key)
                flight = self._flights.get(key)
                if flight is not None:
                    if await asyncio.shield(flight) is not None:
                        # What the caller sent predates the token this flight got.
                        rejected = None
                    continue
                answer = self._answer(key, server_url, status, challenge, binding, rejected,
                                      legacy_fallbacks)
                if isinstance(answer, str):
                    return answer
                header = await self._fly(key, answer, legacy_fallbacks)
                if header is None:
                    continue  # a refresh was refused: decide again
                return header
            raise AuthorizationFailed("no token could be had for the server after three "
                                      "attempts", reason="flow_exhausted")
        except AuthorizationFailed as exc:
            _name(exc, server_url, status)
            raise

    # -- deciding -----------------------------------------------------------------------

    def _answer(self, key: str, server_url: str, status: int,
                challenge: BearerChallenge | None, binding: Binding | None,
                rejected: str | Sent | None,
                legacy_fallbacks: bool) -> str | Coroutine[Any, Any, str | None]:
        """A held header that answers the challenge, or the flow that will get one.
        Synchronous, so no other flight can start between deciding and flying."""
        token = binding.token if binding else None
        now = self.clock()
        newer = (token is not None and rejected is not Sent.UNKNOWN
                 and not _same(rejected, token.authorization()))
        if status == 401:
            if newer and token is not None and not token.expired(now):
                return token.authorization()
            return self._obtain(key, server_url, challenge, scope=None, held=token,
                                legacy_fallbacks=legacy_fallbacks)
        if challenge is None or not challenge.insufficient_scope:
            raise AuthorizationFailed(
                "the server refused the request with 403 without asking for more scope "
                "(no Bearer insufficient_scope challenge); no new token can change that",
                reason="forbidden")
        required = challenge.scope or ()
        granted = (token.scope or ()) if token is not None else ()
        if newer and token is not None and not asks_for_more(granted, required):
            return token.authorization()
        if token is not None and not asks_for_more(granted, required):
            raise AuthorizationFailed(
                f"the server refused the token for insufficient scope, though it was asked for "
                f"every scope the server names ({' '.join(required) or 'none'}); authorizing "
                "again cannot help", reason="step_up_exhausted")
        if not self.step_ups.spend(key, now):
            raise AuthorizationFailed(
                f"the server keeps asking for more scope ({' '.join(required)}); "
                f"{self.step_ups.limit} step-ups in {self.step_ups.window_s:g} s were spent",
                reason="step_up_exhausted")
        return self._obtain(key, server_url, challenge, scope=step_up_scope(granted, required),
                            held=token, legacy_fallbacks=legacy_fallbacks)

    # -- flows --------------------------------------------------------------------------

    async def _obtain(self, key: str, server_url: str, challenge: BearerChallenge | None, *,
                      scope: tuple[str, ...] | None, held: Token | None,
                      legacy_fallbacks: bool) -> str | None:
        """Rules 3, 4, 7 and 9: discover, then refresh, or authorize (``scope`` given: a
        step-up for that scope)."""
        prm = await self._discover_resource(server_url, challenge, legacy_fallbacks)
        binding = self._bindings.get(key)
        auth = self._auth(key)
        issuer = self._choose_issuer(prm, binding, auth)
        meta = await (self._legacy_authorization_server(server_url, fresh=True) if prm.legacy
                      else self._authorization_server(issuer, fresh=True))
        if binding is not None and binding.issuer != issuer:
            log.info("server %s: authorization server changed from %s to %s; its client "
                     "identity and token there are not used with the new one",
                     key, binding.issuer, issuer)
        if auth.grant in HEADLESS_GRANTS:
            asked = scope if scope is not None else initial_scope(
                challenge.scope if challenge else None, prm.scopes_supported)
            return await self._headless(key, meta, prm.resource, asked)
        if (scope is None and held is not None and held.refresh_token is not None
                and held.issuer == issuer and key not in self._refreshed_on_challenge):
            refreshed = await self._refresh(key, meta, held)
            if refreshed is not None:
                self._refreshed_on_challenge.add(key)
                return refreshed
        if scope is None:
            scope = initial_scope(challenge.scope if challenge else None, prm.scopes_supported)
        return await self._authorize(key, meta, prm.resource,
                                     with_offline_access(scope, meta.scopes_supported))

    async def _authorize(self, key: str, meta: AuthServerMetadata, resource: str,
                         scope: tuple[str, ...] | None) -> str:
        """The authorization code flow with PKCE."""
        identity = await self._identity(key, meta)
        request = authorization_request(meta, identity, redirect_uri=self.settings.redirect_uri,
                                        resource=resource, scope=scope)
        log.info("server %s: authorizing with %s (scope %s)", key, meta.issuer,
                 scope_param(scope) or "not sent")
        try:
            landed = await self.authorizer(request.url)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise AuthorizationFailed(f"the authorization step at {meta.issuer} failed: "
                                      f"{type(exc).__name__}", reason="unreachable",
                                      issuer=meta.issuer) from None
        code = authorization_code(request, landed)
        headers, fields = client_authentication(identity, meta.issuer, now=self.clock())
        token = await self._token_request(key, meta, headers,
                                          {**code_exchange_form(request, code), **fields},
                                          resource=resource, asked=scope)
        await self._keep(Binding(server=key, issuer=meta.issuer, client=identity, token=token))
        self._refreshed_on_challenge.discard(key)
        log.info("server %s: authorized by %s (scope %s)", key, meta.issuer,
                 scope_param(token.scope) or "unstated")
        return token.authorization()

    async def _refresh(self, key: str, meta: AuthServerMetadata, held: Token) -> str | None:
        """The refresh token grant at the token's own issuer; ``None`` (and the token
        dropped) when the server refuses the refresh token."""
        binding = self._bindings.get(key)
        if binding is None or binding.client is None or binding.issuer != held.issuer:
            return None
        headers, fields = client_authentication(binding.client, held.issuer,
                                                now=self.clock())
        try:
            token = await self._token_request(key, meta, headers,
                                              {**refresh_form(held), **fields},
                                              resource=held.resource, asked=held.scope,
                                              previous=held)
        except AuthorizationFailed as exc:
            if exc.reason != "token_refused":
                raise
            log.info("server %s: the refresh token was refused (%s); authorizing afresh",
                     key, exc.message)
            await self._keep(replace(binding, token=None))
            return None
        await self._keep(replace(binding, token=token))
        log.info("server %s: token refreshed at %s", key, held.issuer)
        return token.authorization()

    async def _client_credentials(self, key: str, meta: AuthServerMetadata, resource: str,
                                  scope: tuple[str, ...] | None) -> str:
        configured = self._auth(key).client
        if configured is None or (configured.client_secret is None
                                  and configured.private_key is None):
            raise AuthorizationFailed(
                "the client credentials grant needs a configured client_id with a "
                "client_secret or a private key (private_key_jwt) for this server",
                reason="no_client_identity", issuer=meta.issuer)
        held = self._bindings.get(key)
        identity = choose_identity(meta, settings=self.settings, configured=configured,
                                   held=held.client if held else None)
        assert isinstance(identity, ClientIdentity)  # configured credentials never register
        headers, fields = client_authentication(identity, meta.issuer, now=self.clock())
        token = await self._token_request(key, meta, headers,
                                          {**client_credentials_form(resource, scope), **fields},
                                          resource=resource, asked=scope)
        await self._keep(Binding(server=key, issuer=meta.issuer, client=identity, token=token))
        log.info("server %s: client credentials token from %s", key, meta.issuer)
        return token.authorization()

    async def _renew(self, key: str, token: Token, legacy_fallbacks: bool) -> str | None:
        """Rule 5: a due token refreshed (or, for a client credentials server, replaced)
        at its own issuer. Unreachable: the token while it lasts."""
        try:
            if legacy_fallbacks and token.issuer == legacy.authorization_base(key):
                # Possibly the default endpoints, which no discovery finds after a restart.
                meta = await self._legacy_authorization_server(key, fresh=False)
            else:
                meta = await self._authorization_server(token.issuer, fresh=False)
            if token.refresh_token is not None:
                header = await self._refresh(key, meta, token)
                self._refreshed_on_challenge.discard(key)
                return header
            return await self._headless(key, meta, token.resource, token.scope)
        except AuthorizationFailed as exc:
            if exc.reason not in ("unreachable", "token_endpoint_failed", "metadata_unavailable"):
                raise
            log.warning("server %s: could not renew its token (%s)", key, exc.message)
            return None if token.expired(self.clock()) else token.authorization()

    async def _identity(self, key: str, meta: AuthServerMetadata) -> ClientIdentity:
        binding = self._bindings.get(key)
        choice = choose_identity(meta, settings=self.settings, configured=self._auth(key).client,
                                 held=binding.client if binding else None)
        if isinstance(choice, Registration):
            status, body = await self._post(choice.endpoint, json=choice.metadata,
                                            issuer=meta.issuer)
            choice = parse_registration(status, body, choice, meta)
            log.info("server %s: registered client %s with %s", key, choice.client_id,
                     meta.issuer)
        if binding is None or binding.issuer != meta.issuer or binding.client != choice:
            # A new issuer starts a new record: the old identity and token stay behind.
            await self._keep(Binding(server=key, issuer=meta.issuer, client=choice))
        return choice

    async def _token_request(self, key: str, meta: AuthServerMetadata,
                             headers: dict[str, str], form: dict[str, str], *, resource: str,
                             asked: tuple[str, ...] | None,
                             previous: Token | None = None) -> Token:
        """One token request for server ``key``, with a DPoP proof when its tokens are to
        be bound (rule 10)."""
        proof_key = self._proof_key(key, meta, previous)
        if proof_key is None:
            status, body = await self._post(meta.token_endpoint, data=form, headers=headers,
                                            issuer=meta.issuer)
        else:
            status, body = await self._post_with_proof(meta, DpopKey(proof_key), form,
                                                       headers)
        return parse_token_response(status, body, now=self.clock(), endpoint=meta.token_endpoint,
                                    issuer=meta.issuer, resource=resource, asked_scope=asked,
                                    previous=previous, dpop_key=proof_key)

    def _proof_key(self, key: str, meta: AuthServerMetadata,
                   previous: Token | None) -> Secret | None:
        """Rule 10: the key a token request for server ``key`` proves, if any: a refreshed
        token's own, else a new one."""
        if previous is not None and previous.dpop_key is not None:
            return previous.dpop_key
        wanted = self._auth(key).dpop
        if wanted is False or (wanted is None and key not in self._dpop_offered):
            return None
        algorithm = choose_algorithm(meta.dpop_signing_alg_values_supported)
        if algorithm is None:
            if wanted is None:
                return None  # offered by the server, but not signable for its issuer
            raise AuthorizationFailed(
                f"DPoP is configured for the server, and its authorization server accepts "
                f"proofs only in {', '.join(meta.dpop_signing_alg_values_supported or ())}",
                reason="dpop_unsupported", issuer=meta.issuer)
        return generate_key(algorithm)

    async def _post_with_proof(self, meta: AuthServerMetadata, proof_key: DpopKey,
                               form: dict[str, str],
                               headers: dict[str, str]) -> tuple[int, bytes]:
        """The token request with a fresh proof, sent once more with the authorization
        server's nonce when it answers ``use_dpop_nonce`` with a new one (rule 10)."""
        for _ in range(2):
            sent = self._as_nonces.get(meta.issuer)
            proof = proof_key.proof("POST", meta.token_endpoint, now=self.clock(), nonce=sent)
            answer: dict[str, str] = {}
            status, body = await self._post(meta.token_endpoint, data=form,
                                            headers={**headers, PROOF_HEADER: proof},
                                            issuer=meta.issuer, answer_headers=answer)
            nonce = answer.get(NONCE_HEADER)
            if nonce:
                self._as_nonces[meta.issuer] = nonce
            if not (_wants_nonce(status, body) and nonce and nonce != sent):
                break
        return status, body

    # -- grants without a user (rule 7) -------------------------------------------------

    async def _headless(self, key: str, meta: AuthServerMetadata, resource: str,
                        scope: tuple[str, ...] | None) -> str:
        grant = self._auth(key).grant
        if grant == JWT_BEARER:
            return await self._jwt_bearer(key, meta, resource, scope)
        if grant == ENTERPRISE_MANAGED:
            return await self._enterprise_managed(key, meta, resource, scope)
        return await self._client_credentials(key, meta, resource, scope)

    async def _jwt_bearer(self, key: str, meta: AuthServerMetadata, resource: str,
                          scope: tuple[str, ...] | None, *,
                          assertion: Secret | None = None) -> str:
        """The RFC 7523 JWT-bearer grant: the workload's identity token, or (``assertion``)
        an ID-JAG, for an access token. The configured client, if any, authenticates."""
        auth = self._auth(key)
        if assertion is None:
            assert auth.assertion is not None  # ServerAuth checks it
            assertion = await read_source(auth.assertion)
        headers: dict[str, str] = {}
        fields: dict[str, str] = {}
        identity: ClientIdentity | None = None
        if auth.client is not None:
            held = self._bindings.get(key)
            choice = choose_identity(meta, settings=self.settings, configured=auth.client,
                                     held=held.client if held else None)
            assert isinstance(choice, ClientIdentity)  # configured: never registers
            identity = choice
            headers, fields = client_authentication(identity, meta.issuer, now=self.clock())
        token = await self._token_request(key, meta, headers,
                                          {**jwt_bearer_form(assertion, resource, scope),
                                           **fields}, resource=resource, asked=scope)
        await self._keep(Binding(server=key, issuer=meta.issuer, client=identity, token=token))
        log.info("server %s: JWT-bearer grant token from %s", key, meta.issuer)
        return token.authorization()

    async def _enterprise_managed(self, key: str, meta: AuthServerMetadata, resource: str,
                                  scope: tuple[str, ...] | None) -> str:
        """SEP-990 (``id_jag``): the user's ID token for an ID-JAG at the enterprise
        identity provider, then the JWT-bearer grant with it at ``meta``."""
        idp = self._auth(key).identity_provider
        assert idp is not None  # ServerAuth checks it
        endpoint = idp.token_endpoint or \
            (await self._authorization_server(idp.issuer, fresh=False)).token_endpoint
        if not secure_transport(endpoint):
            raise AuthorizationFailed(
                f"the identity provider's token endpoint {endpoint} is not https (plain http "
                "only to loopback): the ID token is not sent there",
                reason="insecure_endpoint", issuer=idp.issuer)
        configured = idp.client
        method = configured.auth_method or (
            PRIVATE_KEY_JWT if configured.private_key is not None
            else BASIC if configured.client_secret is not None else NONE)
        identity = ClientIdentity(
            client_id=configured.client_id, client_secret=configured.client_secret,
            auth_method=method, issuer=idp.issuer, source=CONFIGURED,
            private_key=configured.private_key,
            signing_algorithm=configured.signing_algorithm)
        headers, fields = client_authentication(identity, idp.issuer, now=self.clock())
        id_token = await read_source(idp.id_token)
        form = {**token_exchange_form(id_token, audience=meta.issuer, resource=resource,
                                      scope=scope), **fields}
        status, body = await self._post(endpoint, data=form, headers=headers,
                                        issuer=idp.issuer)
        grant = parse_id_jag(status, body, endpoint=endpoint, issuer=idp.issuer)
        log.info("server %s: ID-JAG from %s for %s", key, idp.issuer, meta.issuer)
        return await self._jwt_bearer(key, meta, resource, scope, assertion=grant)

    # -- discovery ----------------------------------------------------------------------

    async def _discover_resource(self, server_url: str, challenge: BearerChallenge | None,
                                 legacy_fallbacks: bool) -> ProtectedResource:
        tried: list[str] = []
        hint = challenge.resource_metadata if challenge else None
        for url in protected_resource_urls(server_url, hint):
            body = await self._fetch_metadata(url, tried)
            if body is None:
                continue
            try:
                return parse_protected_resource(body, url=url, server_url=server_url)
            except AuthorizationFailed as exc:
                if exc.reason != "malformed_metadata":
                    raise
                tried.append(exc.message)
        if legacy_fallbacks:
            log.info("server %s: no protected resource metadata; allowlisted for the legacy "
                     "era, so authorized the 2025-03-26 way", server_url)
            return legacy.stand_in_resource(server_url)
        raise AuthorizationFailed(
            "no usable protected resource metadata for the server; tried " + "; ".join(tried)
            + " (the 2025-03-26 fallbacks to the server's origin are used only for a server "
            "the host allowlists for the legacy era: allow_legacy)",
            reason="metadata_unavailable")

    async def _authorization_server(self, issuer: str, *, fresh: bool) -> AuthServerMetadata:
        if not fresh and issuer in self._metadata:
            return self._metadata[issuer]
        tried: list[str] = []
        for url in authorization_server_urls(issuer):
            body = await self._fetch_metadata(url, tried)
            if body is None:
                continue
            try:
                meta = parse_authorization_server(body, url=url, issuer=issuer)
            except AuthorizationFailed as exc:
                if exc.reason != "malformed_metadata":
                    raise
                tried.append(exc.message)
                continue
            self._metadata[issuer] = meta
            return meta
        raise AuthorizationFailed(f"no usable metadata for authorization server {issuer}; "
                                  "tried " + "; ".join(tried), reason="metadata_unavailable",
                                  issuer=issuer)

    async def _legacy_authorization_server(self, server_url: str, *,
                                           fresh: bool) -> AuthServerMetadata:
        """Rule 9 (``legacy`` rules 2 and 3): the metadata at the server's origin, else its
        default endpoints."""
        issuer = legacy.authorization_base(server_url)
        if not fresh and issuer in self._metadata:
            return self._metadata[issuer]
        url = legacy.metadata_url(server_url)
        body = await self._fetch_metadata(url, [])
        meta = None
        if body is not None:
            try:
                meta = parse_authorization_server(body, url=url, issuer=issuer)
            except AuthorizationFailed as exc:
                if exc.reason != "malformed_metadata":
                    raise
        if meta is None:
            log.info("server %s: no authorization server metadata at %s; using the default "
                     "endpoints there", server_url, issuer)
            meta = legacy.default_metadata(server_url)
        self._metadata[issuer] = meta
        return meta

    async def _fetch_metadata(self, url: str, tried: list[str]) -> bytes | None:
        """A metadata document's body, or ``None`` with the reason added to ``tried``."""
        if not secure_transport(url):
            tried.append(f"{url} (not https)")
            return None
        try:
            status, body = await self._request("GET", url)
        except AuthorizationFailed as exc:
            tried.append(f"{url} ({exc.message})")
            return None
        if status != 200:
            tried.append(f"{url} (HTTP {status})")
            return None
        return body

    def _choose_issuer(self, prm: ProtectedResource, binding: Binding | None,
                       auth: ServerAuth) -> str:
        """RFC 9728 §7.6 leaves the choice to the client: the issuer the configured client
        is registered with, else the one this server is bound to, else the first."""
        for preferred in (auth.client.issuer if auth.client else None,
                          binding.issuer if binding else None):
            if preferred in prm.authorization_servers:
                return preferred
        return prm.authorization_servers[0]

    # -- plumbing -----------------------------------------------------------------------

    def _key(self, server_url: str) -> str:
        """The server's canonical URI, remembered per spelling: ``authorization_for`` is on
        every request's path, and a host has few servers."""
        key = self._keys.get(server_url)
        if key is None:
            try:
                key = self._keys[server_url] = canonical_uri(server_url)
            except ValueError as exc:
                raise AuthorizationFailed(str(exc), reason="invalid_url",
                                          server=server_url) from None
        return key

    def _auth(self, key: str) -> ServerAuth:
        return self._servers.get(key) or ServerAuth()

    async def _binding(self, key: str) -> Binding | None:
        if key not in self._bindings:
            loaded = await self._load(key)
            self._bindings.setdefault(key, loaded)
        return self._bindings[key]

    async def _load(self, key: str) -> Binding | None:
        """The stored record, with the configured client's private key put back: a key
        stays in the configuration it came from, never copied into the store."""
        binding = await self.store.load(key)
        configured = self._auth(key).client
        client = binding.client if binding is not None else None
        if (binding is None or client is None or configured is None
                or configured.private_key is None or client.source != CONFIGURED
                or client.client_id != configured.client_id):
            return binding
        return replace(binding, client=replace(
            client, private_key=configured.private_key,
            signing_algorithm=configured.signing_algorithm))

    async def _keep(self, binding: Binding) -> None:
        self._bindings[binding.server] = binding
        await self.store.save(binding)

    async def _fly(self, key: str, flow: Coroutine[Any, Any, str | None],
                   legacy_fallbacks: bool) -> str | None:
        """Rule 1: run ``flow`` as the server's one flight; callers that come while it runs
        wait for it (``on_challenge``, ``authorization_for``). Rule 8: the flight runs
        under the store's renewal lease."""
        held = self._bindings.get(key)
        task = asyncio.get_running_loop().create_task(
            self._leased(key, held, flow, legacy_fallbacks))
        self._flights[key] = task

        def landed(done: asyncio.Task[str | None]) -> None:
            if self._flights.get(key) is done:
                del self._flights[key]
            if not done.cancelled():
                done.exception()  # retrieved here, raised to every waiter

        task.add_done_callback(landed)
        return await asyncio.shield(task)

    async def _leased(self, key: str, held: Binding | None,
                      flow: Coroutine[Any, Any, str | None],
                      legacy_fallbacks: bool) -> str | None:
        """Rule 8: ``flow`` under the store's renewal lease, unless the record read again
        under it holds a token that another process got since ``held``: that one is the
        flight's answer if it is not due, else the one renewed (the older token's refresh
        token was spent by that process)."""
        try:
            async with renewal_lease(self.store, key):
                stored = await self._load(key)
                if stored is not None and stored != held:
                    self._bindings[key] = stored
                    token = stored.token
                    if token is not None and token != (held.token if held else None):
                        if not token.refresh_due(self.clock(), self.refresh_margin_s):
                            log.info("server %s: another process renewed its token; "
                                     "using it", key)
                            return token.authorization()
                        if token.refresh_token is not None:
                            flow.close()
                            flow = self._renew(key, token, legacy_fallbacks)
                return await flow
        finally:
            flow.close()  # never started if the record answered (a no-op once awaited)

    async def _post(self, url: str, *, issuer: str, data: dict[str, str] | None = None,
                    json: dict[str, Any] | None = None,
                    headers: dict[str, str] | None = None,
                    answer_headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        try:
            return await self._request("POST", url, data=data, json=json, headers=headers,
                                       answer_headers=answer_headers)
        except AuthorizationFailed as exc:
            exc.issuer = issuer
            raise

    async def _request(self, method: str, url: str, *,
                       answer_headers: dict[str, str] | None = None,
                       **kw: Any) -> tuple[int, bytes]:
        """One exchange, never following a redirect, the body read up to
        ``max_body_bytes``. Failures to get an answer are ``AuthorizationFailed``
        ("unreachable") naming the URL and the kind of failure, nothing else.
        ``answer_headers``: filled with the answer's DPoP nonce, when it has one."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        try:
            async with self._session.request(method, url, allow_redirects=False,
                                             **kw) as response:
                nonce = response.headers.get(NONCE_HEADER)
                if answer_headers is not None and nonce:
                    answer_headers[NONCE_HEADER] = nonce
                chunks, size = [], 0
                async for chunk in response.content.iter_chunked(1 << 16):
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        raise AuthorizationFailed(
                            f"{url} answered with more than {self.max_body_bytes} bytes",
                            reason="unreachable")
                    chunks.append(chunk)
                return response.status, b"".join(chunks)
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise AuthorizationFailed(f"{method} {url} failed: {type(exc).__name__}",
                                      reason="unreachable") from None


def _same(a: str | Sent | None, b: str) -> bool:
    return isinstance(a, str) and hmac.compare_digest(a.encode(), b.encode())


def _name(exc: AuthorizationFailed, server_url: str, status: int | None = None) -> None:
    """The pure modules cannot name the server; the driver does, once."""
    if exc.server is None:
        exc.server = server_url
    if status is not None:
        exc.status = status
