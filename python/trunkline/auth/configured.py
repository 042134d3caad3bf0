"""An ``OAuthClient`` as the configuration file describes it (``config.OAuthConfig``):
its client settings, its store (sealed with ``TRUNKLINE_STORE_KEY`` when it is set), and
the credentials an operator registered per server. The user-agent step is the caller's
(``sign_in``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..config import OAuthConfig
from ..errors import StoreKeyMissing
from .flow import AUTHORIZATION_CODE, CLIENT_CREDENTIALS, Authorizer, OAuthClient, ServerAuth
from .registration import ClientSettings, PreRegisteredClient
from .sealing import KEY_ENV, StoreKeys
from .secret import Secret
from .store import FileStore

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
    servers = {
        url: ServerAuth(
            grant=CLIENT_CREDENTIALS if entry.grant == "client_credentials"
            else AUTHORIZATION_CODE,
            client=PreRegisteredClient(
                client_id=entry.client_id,
                client_secret=Secret(entry.client_secret) if entry.client_secret else None))
        for url, entry in config.servers.items()}
    settings = ClientSettings(client_name=config.client_name,
                              redirect_uri=config.redirect_uri,
                              metadata_document_url=config.client_metadata_url)
    return OAuthClient(settings=settings, store=token_store_from(config), servers=servers,
                       authorizer=authorizer, owns_store=True)
