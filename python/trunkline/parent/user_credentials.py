"""Each user's own credentials at the servers that act as a person: the host's
``user_credentials`` (``source_for(server, identity)``), for servers whose configured
``credentials`` is ``per_user`` or ``exchange``.

Rules:

1. ``per_user``: each identity is authorized by an ``OAuthClient`` of its own, over its
   own part of the token store (``store_for(identity)``), with the host's client settings
   and the server's configured client (``ServerAuth``): discovery, registration, PKCE,
   ``resource``, RFC 9207 ``iss``, refresh, step-up, all as for the host's own
   credentials. Its user-agent step is a sign-in through the gateway
   (``auth.user_sign_in``): the flow that needs a person runs on in this object's task
   scope, waiting for the browser, while the request that started it fails at once with
   ``SignInRequired`` carrying the URL the person is to open. A later request finds the
   token the sign-in stored.
2. ``exchange``: the identity's own access token (the one it showed the gateway,
   ``subject_tokens``) is traded at its issuer for one meant for the server (RFC 8693:
   ``resource`` the server's URL, ``audience`` the configured one, else that URL), with
   the gateway's
   client at that issuer. An exchanged token is kept per identity and server until shortly
   before it expires; a 401 for it exchanges again, once. An identity with no token to
   trade (an API key, a library user) is refused.
3. At most ``max_users`` identities' sources are held; the least recently used one is
   closed past that (its tokens stay in the store; a later request makes it again).
4. Nothing here ever puts a token in a message: errors name the server, the identity's
   subject and what to do.
5. The host's own requests to such a server (deciding its era, before any call) go with
   the credential of a user who holds one: one held in memory, the most recent first, else
   one the store keeps (a restarted gateway). Until someone signed in, the server waits,
   and each identity is offered its sign-in.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import aiohttp

from ..auth.discovery import (
    AuthServerMetadata,
    authorization_server_urls,
    parse_authorization_server,
)
from ..auth.flow import OAuthClient, ServerAuth
from ..auth.registration import ClientSettings
from ..auth.resource import canonical_uri
from ..auth.secret import Secret
from ..auth.store import TokenStore
from ..auth.user_sign_in import GatewayAuthorizer, SignIn, SignIns
from ..errors import AuthorizationFailed, ConfigurationError
from ..loop.tasks import TaskScope
from ..params import HttpParams
from ..policy.identity import Identity

if TYPE_CHECKING:
    from ..config import OAuthConfig
    from ..settings import ServerConfig

log = logging.getLogger("trunkline.auth")

PER_USER, EXCHANGE = "per_user", "exchange"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
DEFAULT_MAX_USERS = 4096
#: The users held in memory whose credentials the host's own requests try first (rule 5).
_RECENT_USERS = 16
#: Seconds before an exchanged token's expiry at which it is exchanged again.
_EXCHANGE_MARGIN_S = 30.0


class SignInRequired(AuthorizationFailed):
    """The identity has no credential at a ``per_user`` server yet: a person must open
    ``url`` and sign in there. ``sign_in`` is the table's entry (``auth.user_sign_in``)."""

    def __init__(self, server: str, url: str, sign_in: SignIn) -> None:
        super().__init__(
            f"server {server!r} acts as each user: sign in to it by opening {url} in a "
            "browser, then call again", reason="sign_in_required")
        self.server = server
        self.url = url
        self.sign_in = sign_in


@dataclass(frozen=True)
class ExchangeClient:
    """The gateway's own client at the callers' issuers, for RFC 8693 (rule 2)."""

    client_id: str
    client_secret: Secret | None = None


class SubjectTokens:
    """The latest access token each OAuth identity showed the gateway (rule 2), bounded
    (an LRU of ``max_users``)."""

    def __init__(self, max_users: int = DEFAULT_MAX_USERS) -> None:
        self._tokens: OrderedDict[Hashable, Secret] = OrderedDict()
        self._max = max_users

    def keep(self, identity: Identity, token: str) -> None:
        key = identity.key
        self._tokens[key] = Secret(token)
        self._tokens.move_to_end(key)
        while len(self._tokens) > self._max:
            self._tokens.popitem(last=False)

    def get(self, identity: Identity) -> Secret | None:
        return self._tokens.get(identity.key)


class UserCredentialSources:
    """``Host(user_credentials=...)`` (``parent.credentials.UserCredentials``): a
    credential source per (server, identity)."""

    def __init__(self, *, servers: Mapping[str, tuple[str, str]],
                 store_for: Callable[[Identity], TokenStore],
                 sign_ins: SignIns | None = None,
                 settings: ClientSettings | None = None,
                 server_auth: Mapping[str, ServerAuth] | None = None,
                 subject_tokens: SubjectTokens | None = None,
                 exchange_client: ExchangeClient | None = None,
                 audiences: Mapping[str, str] | None = None,
                 max_users: int = DEFAULT_MAX_USERS,
                 timeout_s: float = 30.0,
                 stored_users: Callable[[], AsyncIterator[tuple[Hashable, str]]] | None = None,
                 person_client: tuple[str, Secret | None] | None = None) -> None:
        """``servers``: name -> (mode, URL) of each server that is not ``shared``;
        ``store_for``: the token store part of one identity (rule 1); ``sign_ins``: where
        sign-ins wait (needed for a ``per_user`` server); ``server_auth``: the configured
        client per server URL; ``subject_tokens`` and ``exchange_client``: what an
        ``exchange`` server trades (rule 2), ``audiences`` its ``audience`` per name;
        ``stored_users``: every (user key, server URL) the store holds a token for (rule
        5); ``person_client``: the gateway's client (id, secret) at its own issuers, with
        which a sign-in's browser proves its person (``gateway.person_check``)."""
        for name, (mode, _url) in servers.items():
            if mode == PER_USER and sign_ins is None:
                raise ConfigurationError(f"server {name!r} is per_user: the host needs a "
                                         "place for its users to sign in (a gateway base URL)")
            if mode == EXCHANGE and (subject_tokens is None or exchange_client is None):
                raise ConfigurationError(f"server {name!r} exchanges its callers' tokens: "
                                         "the gateway needs OAuth callers and a client at "
                                         "their issuer (oauth.exchangeClient)")
        self._servers = dict(servers)
        self._store_for = store_for
        self.sign_ins = sign_ins
        self._base_settings = settings or ClientSettings()
        self._server_auth = dict(server_auth or {})
        self.subject_tokens = subject_tokens
        self._exchange_client = exchange_client
        self._audiences = dict(audiences or {})
        self._max_users = max_users
        self._timeout_s = timeout_s
        self._users: OrderedDict[Hashable, _UserSources] = OrderedDict()
        self._stored_users = stored_users
        self.person_client = person_client
        self._scope = TaskScope("user credentials")
        self._session: aiohttp.ClientSession | None = None

    @property
    def settings(self) -> ClientSettings:
        """The host's client settings, with the gateway's callback as the redirect URI (a
        web client's: the sign-in pages are the gateway's)."""
        base = self._base_settings
        if self.sign_ins is None:
            return base
        return ClientSettings(client_name=base.client_name,
                              redirect_uri=self.sign_ins.callback_url, application_type="web",
                              metadata_document_url=base.metadata_document_url)

    async def session(self) -> aiohttp.ClientSession:
        """The HTTP session every user's flows share (made at first use), and the scope
        their flows run on in is open."""
        await self._scope.open()
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout_s))
        return self._session

    @classmethod
    def from_config(cls, oauth: OAuthConfig, servers: Sequence[ServerConfig],
                    store: TokenStore) -> UserCredentialSources:
        """The sources a configuration describes, for its servers that act as each user,
        their tokens in ``store`` (the host's, sealed: ``UserTokenStore``)."""
        from ..auth.configured import server_auth
        from ..auth.user_store import (
            UserRecordStore,
            UserTokenStore,
            require_sealed,
            user_entries,
        )

        modes = {c.name: (c.credentials, c.params.url) for c in servers
                 if c.credentials != "shared" and isinstance(c.params, HttpParams)}
        if not modes:
            raise ConfigurationError("no server of the configuration acts as each user")
        records = cast("UserRecordStore", store)
        require_sealed(records)  # refused now, not at a user's first call
        exchange = None
        if oauth.exchange_client_id is not None:
            exchange = ExchangeClient(oauth.exchange_client_id,
                                      Secret(oauth.exchange_client_secret)
                                      if oauth.exchange_client_secret else None)
        exchanges = any(mode == EXCHANGE for mode, _ in modes.values())
        async def stored_users() -> AsyncIterator[tuple[Hashable, str]]:
            async for entry in user_entries(records):
                if entry.binding.token is not None:
                    yield entry.user, entry.binding.server

        return cls(
            servers=modes, store_for=lambda identity: UserTokenStore(records, identity),
            stored_users=stored_users,
            sign_ins=SignIns(base_url=oauth.sign_in_url or "")
            if any(mode == PER_USER for mode, _ in modes.values()) else None,
            settings=ClientSettings(client_name=oauth.client_name,
                                    metadata_document_url=oauth.client_metadata_url),
            server_auth={url: server_auth(entry) for url, entry in oauth.servers.items()},
            subject_tokens=SubjectTokens() if exchanges else None,
            exchange_client=exchange,
            audiences={c.name: oauth.audiences[c.params.url] for c in servers
                       if isinstance(c.params, HttpParams) and c.params.url in oauth.audiences},
            person_client=None if oauth.sign_in_client_id is None else (
                oauth.sign_in_client_id, Secret(oauth.sign_in_client_secret)
                if oauth.sign_in_client_secret else None))

    def shared_source(self, server: str) -> _AnyUser | None:
        """What the host's own requests to ``server`` go with (its era's proof, rule 5),
        if it acts as each user."""
        entry = self._servers.get(server)
        return None if entry is None else _AnyUser(self, server, entry[1])

    def mode_of(self, server: str) -> str | None:
        entry = self._servers.get(server)
        return entry[0] if entry is not None else None

    async def aclose(self) -> None:
        users, self._users = list(self._users.values()), OrderedDict()
        for user in users:
            await user.aclose()
        await self._scope.aclose()
        if self.sign_ins is not None:
            self.sign_ins.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def source_for(self, server: str, identity: Identity) -> _SignedIn | _Exchanged:
        entry = self._servers.get(server)
        if entry is None:
            raise ConfigurationError(f"server {server!r} has no per-user credentials")
        mode, url = entry
        user = self._user(identity)
        return user.source(server, mode, url)

    async def forget(self, identity: Identity) -> None:
        """Drop what is held in memory for ``identity`` (after its tokens were revoked)."""
        user = self._users.pop(identity.key, None)
        if user is not None:
            await user.aclose()

    def _user(self, identity: Identity) -> _UserSources:
        key = identity.key
        user = self._users.get(key)
        if user is None:
            user = _UserSources(self, identity)
            self._users[key] = user
            while len(self._users) > self._max_users:
                _, old = self._users.popitem(last=False)
                self._scope.spawn(old.aclose(), name="close a user's credential sources")
        else:
            self._users.move_to_end(key)
        return user


class _UserSources:
    """One identity's sources, one per server (rule 3 counts these)."""

    def __init__(self, owner: UserCredentialSources, identity: Identity) -> None:
        self._owner = owner
        self.identity = identity
        self._identity = identity
        self._sources: dict[str, _SignedIn | _Exchanged] = {}

    def source(self, server: str, mode: str, url: str) -> _SignedIn | _Exchanged:
        source = self._sources.get(server)
        if source is None:
            if mode == PER_USER:
                source = _SignedIn(self._owner, server, self._identity)
            else:
                source = _Exchanged(self._owner, server, url, self._identity)
            self._sources[server] = source
        return source

    async def aclose(self) -> None:
        for source in self._sources.values():
            await source.aclose()


class _SignedIn:
    """One identity's credential at one ``per_user`` server (rule 1): an ``OAuthClient``
    of its own, whose user-agent step files a sign-in."""

    def __init__(self, owner: UserCredentialSources, server: str, identity: Identity) -> None:
        assert owner.sign_ins is not None, "per_user servers need sign_ins"
        self._owner = owner
        self._sign_ins = owner.sign_ins
        self._server = server
        self._identity = identity
        #: Requests waiting to learn whether the flow needs a person.
        self._waiting: set[asyncio.Future[SignIn]] = set()
        #: Whether the flow now flying filed a sign-in (its requests were answered then).
        self._asked_person = False
        self._oauth: OAuthClient | None = None
        #: The flow last started (``_flow``), until it has unwound.
        self._flight: asyncio.Task[str | None] | None = None

    async def _client(self) -> OAuthClient:
        if self._oauth is None:
            owner = self._owner
            session = await owner.session()
            self._oauth = OAuthClient(
                store=owner._store_for(self._identity), settings=owner.settings,
                servers=owner._server_auth, session=session,
                authorizer=GatewayAuthorizer(self._sign_ins, self._server, self._identity.key,
                                             self._filed))
        return self._oauth

    def _filed(self, sign_in: SignIn) -> None:
        self._asked_person = True
        for waiter in self._waiting:
            if not waiter.done():
                waiter.set_result(sign_in)

    async def aclose(self) -> None:
        if self._oauth is not None:
            await self._oauth.aclose()

    async def authorization_for(self, server_url: str, *,
                                legacy_fallbacks: bool = False) -> str | None:
        if self._sign_ins.pending(self._server, self._identity.key) is not None:
            # Its flow waits for the person: no credential until they come back (the
            # OAuth client would have this wait for that flight).
            return None
        oauth = await self._client()
        return await oauth.authorization_for(server_url, legacy_fallbacks=legacy_fallbacks)

    async def renew_at(self, server_url: str) -> float | None:
        return await (await self._client()).renew_at(server_url)

    async def on_challenge(self, server_url: str, status: int, www_authenticate: str | None,
                           *, rejected: str | None = None,
                           legacy_fallbacks: bool = False) -> str | None:
        held = self._sign_ins.pending(self._server, self._identity.key)
        if held is not None:
            # A sign-in already waits for this person: the same URL, not a second flow.
            raise SignInRequired(self._server, self._sign_ins.url_of(held), held)
        await self._client()
        prior = self._flight
        if prior is not None and not prior.done():
            # The flow of a sign-in that just ended (refused, replaced) may not have
            # unwound yet: a new flow would join its flight and end with its failure.
            await asyncio.wait({prior})
        filed: asyncio.Future[SignIn] = asyncio.get_running_loop().create_future()
        self._waiting.add(filed)
        flow = self._flight = self._owner._scope.spawn(
            self._flow(server_url, status, www_authenticate, rejected, legacy_fallbacks),
            name=f"authorize a user at {self._server}")
        try:
            await asyncio.wait((flow, filed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waiting.discard(filed)
        if not filed.done():
            return flow.result()
        sign_in = filed.result()
        raise SignInRequired(self._server, self._sign_ins.url_of(sign_in), sign_in)

    async def _flow(self, server_url: str, status: int, www_authenticate: str | None,
                    rejected: str | None, legacy_fallbacks: bool) -> str | None:
        """The OAuth client's answer to the challenge. When it needed a person, it goes on
        after the request that started it was answered, until the sign-in ends, which
        the table is told (the calls waiting for it go on)."""
        self._asked_person = False
        oauth = await self._client()
        try:
            header = await oauth.on_challenge(
                server_url, status, www_authenticate, rejected=rejected,
                legacy_fallbacks=legacy_fallbacks)
        except AuthorizationFailed as exc:
            self._ended(exc.message)
            if self._asked_person:
                return None  # its requests were answered: the person is told on the page
            raise
        except BaseException as exc:
            self._ended(type(exc).__name__)
            raise
        self._ended(None)
        return header

    def _ended(self, failure: str | None) -> None:
        """The flow ended: a sign-in it filed ends with it."""
        sign_in = self._sign_ins.pending(self._server, self._identity.key)
        if sign_in is None or not sign_in.landed.done():
            return  # it filed none, or it failed before the person came back
        self._sign_ins.end(sign_in, failure)
        if failure is None:
            log.info("server %r: %s signed in", self._server, self._identity.subject)
        else:
            log.info("server %r: the sign-in of %s failed: %s", self._server,
                     self._identity.subject, failure)


class _Exchanged:
    """One identity's exchanged token at one ``exchange`` server (rule 2)."""

    def __init__(self, owner: UserCredentialSources, server: str, url: str,
                 identity: Identity) -> None:
        self._owner = owner
        self._server = server
        self._url = url
        self._identity = identity
        self._header: str | None = None
        self._expires_at: float | None = None
        self._lock = asyncio.Lock()

    async def aclose(self) -> None:
        self._header = None

    async def authorization_for(self, server_url: str, *,
                                legacy_fallbacks: bool = False) -> str | None:
        async with self._lock:
            if self._header is None or self._due():
                await self._exchange()
            return self._header

    async def renew_at(self, server_url: str) -> float | None:
        if self._expires_at is None:
            return None
        return time.time() + (self._expires_at - time.monotonic()) - _EXCHANGE_MARGIN_S

    async def on_challenge(self, server_url: str, status: int, www_authenticate: str | None,
                           *, rejected: str | None = None,
                           legacy_fallbacks: bool = False) -> str | None:
        async with self._lock:
            if self._header is not None and rejected is not None and rejected != self._header:
                return self._header  # exchanged again meanwhile
            if status == 403:
                raise AuthorizationFailed(
                    f"server {self._server!r} refused {self._identity.subject}'s exchanged "
                    "token (403)", reason="forbidden", status=403)
            await self._exchange()
            return self._header

    def _due(self) -> bool:
        return self._expires_at is not None and \
            time.monotonic() >= self._expires_at - _EXCHANGE_MARGIN_S

    async def _exchange(self) -> None:
        owner = self._owner
        subject = owner.subject_tokens.get(self._identity) if owner.subject_tokens else None
        issuer = self._identity.issuer
        if subject is None or issuer is None:
            raise AuthorizationFailed(
                f"server {self._server!r} takes each caller's own token, exchanged: "
                f"{self._identity.subject} signed in with no OAuth token to exchange",
                reason="no_subject_token", status=401)
        client = owner._exchange_client
        assert client is not None
        session = await owner.session()
        endpoint = await self._token_endpoint(issuer)
        form = {"grant_type": TOKEN_EXCHANGE, "subject_token": subject.reveal(),
                "subject_token_type": ACCESS_TOKEN_TYPE,
                "requested_token_type": ACCESS_TOKEN_TYPE, "resource": self._url}
        # The audience the operator named for the server, else its URL (the resource):
        # some issuers take the one, some the other, and many require an audience.
        form["audience"] = owner._audiences.get(self._server, self._url)
        auth = None
        if client.client_secret is not None:
            auth = aiohttp.BasicAuth(client.client_id, client.client_secret.reveal())
        else:
            form["client_id"] = client.client_id
        try:
            async with session.post(endpoint, data=form, auth=auth,
                                           allow_redirects=False) as resp:
                body = await resp.content.read(1 << 20)
                status = resp.status
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise AuthorizationFailed(
                f"server {self._server!r}: the token exchange at {issuer} failed "
                f"({type(exc).__name__})", reason="unreachable", issuer=issuer) from None
        doc = _json_object(body)
        if status != 200 or not isinstance(doc.get("access_token"), str):
            error = doc.get("error") if isinstance(doc.get("error"), str) else f"HTTP {status}"
            raise AuthorizationFailed(
                f"server {self._server!r}: {issuer} refused to exchange "
                f"{self._identity.subject}'s token ({error})", reason="exchange_refused",
                issuer=issuer)
        token_type = doc.get("token_type")
        token_type = token_type if isinstance(token_type, str) else "Bearer"
        if token_type.lower() not in ("bearer", "n_a"):
            raise AuthorizationFailed(
                f"server {self._server!r}: {issuer} exchanged for a {token_type!r} token, "
                "not a bearer token", reason="exchange_refused", issuer=issuer)
        self._header = f"Bearer {doc['access_token']}"
        expires_in = doc.get("expires_in")
        self._expires_at = time.monotonic() + float(expires_in) \
            if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) \
            else None

    async def _token_endpoint(self, issuer: str) -> str:
        meta = await issuer_metadata(await self._owner.session(), issuer)
        if meta is None or not meta.token_endpoint:
            raise AuthorizationFailed(
                f"server {self._server!r}: no authorization server metadata for the caller's "
                f"issuer {issuer}", reason="no_metadata", issuer=issuer)
        return meta.token_endpoint


async def issuer_metadata(session: aiohttp.ClientSession, issuer: str
                          ) -> AuthServerMetadata | None:
    """``issuer``'s authorization server metadata, from the first of its discovery
    locations that answers with a document for it; None when none does."""
    for url in authorization_server_urls(issuer):
        try:
            async with session.get(url, allow_redirects=False) as resp:
                if resp.status != 200:
                    continue
                body = await resp.content.read(1 << 20)
            return parse_authorization_server(body, url=url, issuer=issuer)
        except (aiohttp.ClientError, OSError, TimeoutError, AuthorizationFailed):
            continue
    return None


class _AnyUser:
    """The host's own requests to a server that acts as each user (rule 5): they go with
    the credential of a user who holds one (the most recent first, then the store's)."""

    def __init__(self, owner: UserCredentialSources, server: str, url: str) -> None:
        self._owner = owner
        self._server = server
        self._url = canonical_uri(url)

    async def _identities(self) -> AsyncIterator[Identity]:
        owner = self._owner
        seen = set()
        for key in reversed(list(owner._users)[-_RECENT_USERS:]):
            seen.add(key)
            yield owner._users[key].identity
        if owner._stored_users is not None and owner.mode_of(self._server) == PER_USER:
            async for key, url in owner._stored_users():
                if url == self._url and key not in seen:
                    seen.add(key)
                    kind, issuer, subject = cast("tuple[str, str | None, str]", key)
                    yield Identity(kind, subject, issuer)

    async def authorization_for(self, server_url: str, *,
                                legacy_fallbacks: bool = False) -> str | None:
        async for identity in self._identities():
            try:
                header = await self._owner.source_for(self._server, identity) \
                    .authorization_for(server_url, legacy_fallbacks=legacy_fallbacks)
            except AuthorizationFailed:
                continue
            if header is not None:
                return header
        return None

    async def on_challenge(self, server_url: str, status: int, www_authenticate: str | None,
                           *, rejected: str | None = None,
                           legacy_fallbacks: bool = False) -> str | None:
        header = await self.authorization_for(server_url, legacy_fallbacks=legacy_fallbacks)
        if header is not None and header != rejected:
            return header
        raise AuthorizationFailed(
            f"server {self._server!r} acts as each user: it is reached once one of them "
            "signed in (its sign_in tool)", reason="sign_in_required", status=status)

    async def renew_at(self, server_url: str) -> float | None:
        return None


def _json_object(body: bytes) -> dict[str, Any]:
    import json

    try:
        doc = json.loads(body)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
