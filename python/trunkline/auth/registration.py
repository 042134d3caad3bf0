"""Who this host is to an authorization server, and how it proves it at the token
endpoint. Pure: the driver makes the one registration request this module asks for.

Client identity, in the order of the MCP specification ("Client Registration"):

1. Credentials pre-registered for the server in the host's configuration.
2. A Client ID Metadata Document: the configured https URL is the ``client_id``, when the
   authorization server advertises ``client_id_metadata_document_supported``.
3. Dynamic client registration (RFC 7591) at the server's ``registration_endpoint``, with
   ``application_type`` (``native`` by default: a host on the user's machine with a
   loopback redirect), ``grant_types`` ``authorization_code`` and ``refresh_token``, and
   the token endpoint authentication the server supports (``none`` first: a host on a
   user's machine keeps no secret well).
4. Otherwise a clear error saying what the operator can configure.

Binding: every identity is bound to the issuer that issued it (or, for configured
credentials, the one they are configured for). A registration is reused only with its own
issuer; when a server's authorization server changes, the next authorization registers
afresh, and an old ``client_id`` or secret is never presented to the new issuer.
Configured credentials are specific to one authorization server: with ``issuer``
configured they are refused for any other; without it a ``client_id`` is bound to the
first issuer it is used with, and a later change of issuer is an error for the operator to
resolve (never a silent re-use; a different client configured for the new server is fine).

Token endpoint authentication (RFC 6749 §2.3, RFC 7591 §2): the method the registration
(or configuration) states; without one, ``private_key_jwt`` (RFC 7523, ``assertion``) for
a configured client with a private key when the server lists it or the client has no
secret, else ``client_secret_basic`` or ``client_secret_post`` for a client with a secret,
whichever the server lists first in that order (a server that lists none supports
``client_secret_basic``, RFC 8414 §2), and ``none`` for a client without either or a
server that only takes ``none``. Only configured clients have a private key: a dynamic
registration never asks for ``private_key_jwt`` (this host publishes no JWKS), and one
that requires it is refused.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus, urlsplit

from ..errors import AuthorizationFailed, ConfigurationError
from .answers import json_object, oauth_error
from .assertion import ASSERTION_TYPE, check_signing_key, client_assertion
from .discovery import AuthServerMetadata
from .secret import Secret

BASIC = "client_secret_basic"
POST = "client_secret_post"
PRIVATE_KEY_JWT = "private_key_jwt"
NONE = "none"
KNOWN_METHODS = (BASIC, POST, PRIVATE_KEY_JWT, NONE)

CONFIGURED = "configured"
METADATA_DOCUMENT = "metadata_document"
REGISTERED = "registered"

GRANT_TYPES = ("authorization_code", "refresh_token")


@dataclass(frozen=True)
class ClientSettings:
    """How this host presents itself to every authorization server (one per host)."""

    client_name: str = "trunkline"
    #: Where the user agent is sent back to. A desktop host listens on a loopback port
    #: and passes its own URI; authorization servers accept any port on a loopback
    #: redirect (RFC 8252 §7.3).
    redirect_uri: str = "http://127.0.0.1/callback"
    application_type: str = "native"
    #: An https URL with a path where this host's Client ID Metadata Document is served.
    metadata_document_url: str | None = None

    def __post_init__(self) -> None:
        if self.application_type not in ("native", "web"):
            raise ConfigurationError(f"application_type must be 'native' or 'web', not "
                                     f"{self.application_type!r}")
        url = self.metadata_document_url
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme != "https" or parts.path in ("", "/") or parts.fragment:
                raise ConfigurationError(f"a client metadata document URL must be https with "
                                         f"a path and no fragment, not {url!r}")


@dataclass(frozen=True)
class PreRegisteredClient:
    """Credentials an operator registered with a server's authorization server."""

    client_id: str
    client_secret: Secret | None = None
    #: The issuer they were registered with; ``None`` binds them on first use.
    issuer: str | None = None
    #: ``client_secret_basic``, ``client_secret_post``, ``private_key_jwt`` or ``none``;
    #: ``None`` decides from the server's metadata.
    auth_method: str | None = None
    #: For ``private_key_jwt``: the PEM private key whose public half the authorization
    #: server holds, and the JWS algorithm it signs with (see ``assertion.ALGORITHMS``).
    private_key: Secret | None = None
    signing_algorithm: str | None = None

    def __post_init__(self) -> None:
        if (self.private_key is None) != (self.signing_algorithm is None):
            raise ConfigurationError(f"client {self.client_id!r}: a private key and its "
                                     "signing algorithm are configured together")
        if self.private_key is not None and self.signing_algorithm is not None:
            check_signing_key(self.private_key, self.signing_algorithm)


@dataclass(frozen=True)
class ClientIdentity:
    """A client identity at one issuer."""

    client_id: str
    client_secret: Secret | None
    auth_method: str
    issuer: str
    source: str  # CONFIGURED, METADATA_DOCUMENT or REGISTERED
    #: ``private_key_jwt`` only (configured clients).
    private_key: Secret | None = None
    signing_algorithm: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc = {"client_id": self.client_id,
               "client_secret": self.client_secret.reveal() if self.client_secret else None,
               "auth_method": self.auth_method, "issuer": self.issuer, "source": self.source}
        # A private key is never stored: it is configured, and the OAuth client puts it
        # back from the configuration when it reads the record (``OAuthClient._load``).
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ClientIdentity:
        secret = doc.get("client_secret")
        return cls(client_id=str(doc["client_id"]),
                   client_secret=Secret(secret) if secret else None,
                   auth_method=str(doc["auth_method"]), issuer=str(doc["issuer"]),
                   source=str(doc["source"]))


@dataclass(frozen=True)
class Registration:
    """A dynamic client registration request to make (RFC 7591 §3.1)."""

    endpoint: str
    metadata: dict[str, Any]
    issuer: str


def choose_identity(meta: AuthServerMetadata, *, settings: ClientSettings,
                    configured: PreRegisteredClient | None,
                    held: ClientIdentity | None) -> ClientIdentity | Registration:
    """The identity to use with ``meta.issuer``, or the registration to make for one.
    ``held`` is the identity this host last used for the server, whatever its issuer."""
    issuer = meta.issuer
    if configured is not None:
        bound_to = configured.issuer
        if (bound_to is None and held is not None and held.source == CONFIGURED
                and held.client_id == configured.client_id):
            bound_to = held.issuer
        if bound_to is not None and bound_to != issuer:
            raise AuthorizationFailed(
                f"the configured client {configured.client_id!r} is registered with "
                f"authorization server {bound_to}, but the server now names {issuer}; "
                f"pre-registered credentials are not sent to another authorization server: "
                f"register a client with {issuer} and configure it (with its issuer)",
                reason="issuer_changed", issuer=issuer)
        method = token_auth_method(configured.auth_method, configured.client_secret is not None,
                                   meta.token_endpoint_auth_methods_supported, issuer,
                                   has_key=configured.private_key is not None)
        return ClientIdentity(client_id=configured.client_id,
                              client_secret=configured.client_secret, auth_method=method,
                              issuer=issuer, source=CONFIGURED,
                              private_key=configured.private_key,
                              signing_algorithm=configured.signing_algorithm)
    if held is not None and held.source == REGISTERED and held.issuer == issuer:
        return held
    if settings.metadata_document_url and meta.client_id_metadata_document_supported:
        return ClientIdentity(client_id=settings.metadata_document_url, client_secret=None,
                              auth_method=NONE, issuer=issuer, source=METADATA_DOCUMENT)
    if meta.registration_endpoint:
        return Registration(endpoint=meta.registration_endpoint, issuer=issuer,
                            metadata=registration_metadata(settings, meta))
    offers = ("client ID metadata documents, but this host has no metadata document URL "
              "configured" if meta.client_id_metadata_document_supported
              else "neither client ID metadata documents nor dynamic client registration")
    raise AuthorizationFailed(
        f"no way to identify this client to authorization server {issuer}: it supports "
        f"{offers}; register a client there and configure its client_id (and client_secret) "
        f"for this server" + (", or configure a client metadata document URL"
                               if meta.client_id_metadata_document_supported else ""),
        reason="no_client_identity", issuer=issuer)


def registration_metadata(settings: ClientSettings, meta: AuthServerMetadata) -> dict[str, Any]:
    """The client metadata sent to a registration endpoint."""
    return {
        "client_name": settings.client_name,
        "redirect_uris": [settings.redirect_uri],
        "grant_types": list(GRANT_TYPES),
        "response_types": ["code"],
        "token_endpoint_auth_method": _registration_method(
            meta.token_endpoint_auth_methods_supported),
        "application_type": settings.application_type,
    }


def parse_registration(status: int, body: bytes, registration: Registration,
                       meta: AuthServerMetadata) -> ClientIdentity:
    """The identity a registration endpoint's answer grants (RFC 7591 §3.2)."""
    issuer = registration.issuer
    if status not in (200, 201):
        _, detail = oauth_error(body)
        raise AuthorizationFailed(
            f"dynamic client registration at {registration.endpoint} was refused (HTTP "
            f"{status}{': ' + detail if detail else ''}); register a client with {issuer} and "
            "configure its client_id instead", reason="registration_refused", issuer=issuer)
    doc = json_object(body) or {}
    client_id = doc.get("client_id")
    if not isinstance(client_id, str) or not client_id:
        raise AuthorizationFailed(
            f"the registration endpoint {registration.endpoint} answered without a client_id "
            "(not a JSON object with one)", reason="malformed_response", issuer=issuer)
    secret = doc.get("client_secret")
    if not isinstance(secret, str) or not secret:
        secret = None
    declared = doc.get("token_endpoint_auth_method")
    if declared is None:
        # RFC 7591 §3.2.1: the server returns the metadata it registered; without the
        # field, what was asked for stands.
        declared = registration.metadata.get("token_endpoint_auth_method")
    method = token_auth_method(declared if isinstance(declared, str) else None,
                               secret is not None,
                               meta.token_endpoint_auth_methods_supported, issuer)
    return ClientIdentity(client_id=client_id,
                          client_secret=Secret(secret) if secret is not None and method != NONE
                          else None,
                          auth_method=method, issuer=issuer, source=REGISTERED)


def token_auth_method(declared: str | None, has_secret: bool,
                      supported: tuple[str, ...] | None, issuer: str, *,
                      has_key: bool = False) -> str:
    """How a client authenticates at the token endpoint (see the module docstring)."""
    if declared is not None:
        if declared not in KNOWN_METHODS:
            raise AuthorizationFailed(
                f"token endpoint authentication {declared!r} (required for the client at "
                f"{issuer}) is not supported; trunkline does {', '.join(KNOWN_METHODS)}",
                reason="unsupported_auth_method", issuer=issuer)
        if declared == PRIVATE_KEY_JWT and not has_key:
            raise AuthorizationFailed(
                f"the client at {issuer} is to authenticate with {declared} but has no "
                "private key; configure one and its signing algorithm",
                reason="no_private_key", issuer=issuer)
        if declared in (BASIC, POST) and not has_secret:
            raise AuthorizationFailed(
                f"the client at {issuer} is to authenticate with {declared} but has no "
                "client secret; configure one", reason="no_client_secret", issuer=issuer)
        return declared
    if has_key and (not has_secret or PRIVATE_KEY_JWT in (supported or ())):
        return PRIVATE_KEY_JWT
    if not has_secret:
        return NONE
    offered = supported if supported is not None else (BASIC,)
    for method in (BASIC, POST):
        if method in offered:
            return method
    return NONE if NONE in offered else BASIC


def client_authentication(identity: ClientIdentity, issuer: str, *, now: float
                          ) -> tuple[dict[str, str], dict[str, str]]:
    """The headers and form fields that authenticate ``identity`` at ``issuer``'s token
    endpoint (``now``: the time a client assertion is issued at). Refuses an identity bound
    to another issuer: its secret goes nowhere else."""
    if identity.issuer != issuer:
        raise AuthorizationFailed(
            f"client {identity.client_id!r} belongs to {identity.issuer}, not {issuer}; its "
            "credentials are not sent there", reason="issuer_changed", issuer=issuer)
    secret = identity.client_secret
    if identity.auth_method == BASIC and secret is not None:
        # RFC 6749 §2.3.1: each part form-encoded before the base64.
        pair = f"{quote_plus(identity.client_id)}:{quote_plus(secret.reveal())}"
        return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}, {}
    if identity.auth_method == POST and secret is not None:
        return {}, {"client_id": identity.client_id, "client_secret": secret.reveal()}
    if (identity.auth_method == PRIVATE_KEY_JWT and identity.private_key is not None
            and identity.signing_algorithm is not None):
        assertion = client_assertion(identity.private_key, identity.signing_algorithm,
                                     client_id=identity.client_id, audience=issuer, now=now)
        return {}, {"client_id": identity.client_id, "client_assertion_type": ASSERTION_TYPE,
                    "client_assertion": assertion}
    return {}, {"client_id": identity.client_id}


def _registration_method(supported: tuple[str, ...] | None) -> str:
    offered = supported if supported is not None else (BASIC,)
    for method in (NONE, BASIC, POST):
        if method in offered:
            return method
    return NONE
