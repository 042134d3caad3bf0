"""An ``OAuthClient`` as the configuration file describes it (``config.OAuthConfig``):
its client settings, its file store, and the credentials an operator registered per
server. The user-agent step is the caller's (``sign_in``)."""

from __future__ import annotations

from ..config import IdentityProviderConfig, OAuthConfig, ServerOAuth
from .flow import Authorizer, OAuthClient, ServerAuth
from .id_jag import IdentityProvider
from .registration import ClientSettings, PreRegisteredClient
from .secret import Secret
from .store import FileStore, TokenStore
from .workload import JwtSource, env_source, file_source


def oauth_client_from(config: OAuthConfig, authorizer: Authorizer) -> OAuthClient:
    servers = {url: server_auth(entry) for url, entry in config.servers.items()}
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
