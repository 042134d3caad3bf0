"""An ``OAuthClient`` as the configuration file describes it (``config.OAuthConfig``):
its client settings, its store (sealed with ``TRUNKLINE_STORE_KEY`` when it is set), and
the credentials an operator registered per server. The user-agent step is the caller's
(``sign_in``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import IdentityProviderConfig, OAuthConfig, ServerOAuth
from ..errors import StoreKeyMissing
from .flow import Authorizer, OAuthClient, ServerAuth
from .id_jag import IdentityProvider
from .registration import ClientSettings, PreRegisteredClient
from .sealing import KEY_ENV, StoreKeys
from .secret import Secret
from .store import FileStore
from .workload import JwtSource, env_source, file_source

if TYPE_CHECKING:
    from .redis_store import RedisStore


def token_store_from(config: OAuthConfig, keys: StoreKeys | None = None
                     ) -> FileStore | RedisStore:
    """The store the file names, sealed with ``keys`` (by default the environment's:
    ``StoreKeys.from_environment()``). A directory that holds per-user records is refused
    without a key (``StoreKeyMissing``): they are kept only sealed, and a host started
    without the key could read none of them. (In Redis, each per-user view refuses.)"""
    keys = keys if keys is not None else StoreKeys.from_environment()
    if isinstance(config.store, str):
        from .redis_store import RedisStore

        return RedisStore(config.store, keys=keys)
    store = FileStore(config.store, keys=keys)
    if keys is None and store.holds_user_records():
        raise StoreKeyMissing(
            f"the token store {config.store} holds per-user credentials, kept only sealed: "
            f"set {KEY_ENV} to the key that sealed them")
    return store


def oauth_client_from(config: OAuthConfig, authorizer: Authorizer) -> OAuthClient:
    servers = {url: server_auth(entry) for url, entry in config.servers.items()}
    settings = ClientSettings(client_name=config.client_name,
                              redirect_uri=config.redirect_uri,
                              metadata_document_url=config.client_metadata_url)
    return OAuthClient(settings=settings, store=token_store_from(config), servers=servers,
                       authorizer=authorizer, owns_store=True)


def server_auth(entry: ServerOAuth) -> ServerAuth:
    """One server's ``ServerAuth`` from its configuration file entry."""
    assertion = _source(entry.assertion_file, entry.assertion_env)
    idp = entry.identity_provider
    return ServerAuth(
        grant=entry.grant,
        client=_client(entry.client_id, entry.client_secret),
        assertion=assertion,
        identity_provider=_identity_provider(idp) if idp is not None else None,
        dpop=entry.dpop)


def _client(client_id: str, secret: str | None) -> PreRegisteredClient:
    return PreRegisteredClient(client_id=client_id,
                               client_secret=Secret(secret) if secret else None)


def _source(file: object, env: str | None) -> JwtSource | None:
    if file is not None:
        return file_source(str(file))
    return env_source(env) if env is not None else None


def _identity_provider(idp: IdentityProviderConfig) -> IdentityProvider:
    id_token = _source(idp.id_token_file, idp.id_token_env)
    assert id_token is not None  # the configuration requires one
    return IdentityProvider(issuer=idp.issuer, client=_client(idp.client_id, idp.client_secret),
                            id_token=id_token, token_endpoint=idp.token_endpoint)
