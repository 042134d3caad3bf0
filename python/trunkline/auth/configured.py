"""An ``OAuthClient`` as the configuration file describes it (``config.OAuthConfig``):
its client settings, its file store, and the credentials an operator registered per
server. The user-agent step is the caller's (``sign_in``)."""

from __future__ import annotations

from ..config import OAuthConfig
from .flow import AUTHORIZATION_CODE, CLIENT_CREDENTIALS, Authorizer, OAuthClient, ServerAuth
from .registration import ClientSettings, PreRegisteredClient
from .secret import Secret
from .store import FileStore, TokenStore


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
    store: TokenStore
    if isinstance(config.store, str):
        from .redis_store import RedisStore

        store = RedisStore(config.store)
    else:
        store = FileStore(config.store)
    return OAuthClient(settings=settings, store=store, servers=servers, authorizer=authorizer,
                       owns_store=True)
