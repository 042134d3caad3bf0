"""DPoP (RFC 9449; the MCP DPoP extension, SEP-1932): sender-constrained tokens. A token
bound to a key pair the client holds is presented with a fresh proof of possession of
that key on every request, so a stolen token is useless without the key. Pure: the time
is passed in, and fresh ``jti`` values and keys are the only things drawn from outside;
the signing is joserfc's.

Rules:

1. A proof (§4.2) is a JWT with the header ``typ: dpop+jwt``, the signing ``alg`` and the
   PUBLIC key as ``jwk`` (never its private members), and the claims ``jti`` (128 random
   bits: a server refuses a proof it has seen), ``htm`` (the request's method), ``htu``
   (the request's URL without query or fragment), ``iat`` (now); ``ath`` (base64url
   SHA-256 of the access token) when it goes with a token to a resource server (§7.1),
   and ``nonce`` when the server gave one (§8, §9). One proof per request, never reused.
2. Keys: one key pair per token lineage, generated when a token is requested with DPoP
   (``generate_key``); a refresh proves the same key, since the authorization server
   binds the refresh token to it (§5, §5.8). The algorithm is the first of ``ALGORITHMS``
   the authorization server lists in ``dpop_signing_alg_values_supported``, ES256 when it
   lists none; only asymmetric algorithms (a shared key proves nothing). A key travels as
   its private JWK's JSON text inside a ``Secret``, with its ``alg``: errors name the
   algorithm and what is wrong, never the key.
3. Nonces (§8, §9): each server's latest ``DPoP-Nonce`` header is put in every later
   proof to it. A ``use_dpop_nonce`` refusal (the token endpoint's 400 with that OAuth
   error, a resource server's 401 with that ``error`` in its DPoP challenge) is answered
   by sending the request once more with the nonce it carried, if that nonce differs from
   the one the refused proof had; refused again with the same nonce is the server's
   refusal (``NonceBook.retry``).
4. Where proofs are made: the parent (``OAuthClient``) signs the proofs of its token
   requests; a worker signs the proof of every request it sends its server
   (``DpopSigner``), with the key the parent hands it beside the token in the
   ``CredentialAnswer``, over the parent<->worker channel only. Signing in the worker
   keeps the hot path as it is, without a round trip to the parent per request, and a
   proof must be made per request and per nonce anyway; the key is worth no more than the
   token it is bound to, which the worker holds already. The worker keeps it as a
   ``Secret`` and nothing logs it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from joserfc import jwk, jwt
from joserfc.errors import JoseError

from ..errors import ConfigurationError
from .secret import Secret

#: The ``DPoP`` request header and the ``DPoP-Nonce`` response header.
PROOF_HEADER = "DPoP"
NONCE_HEADER = "DPoP-Nonce"
#: The OAuth error (token endpoint) and DPoP challenge error (resource server) that ask
#: for a proof carrying the server's nonce.
USE_DPOP_NONCE = "use_dpop_nonce"
PROOF_TYPE = "dpop+jwt"

#: The algorithms this client signs proofs with, in order of preference -> the key it
#: generates for each.
ALGORITHMS: dict[str, tuple[str, str | None]] = {
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "ES512": ("EC", "P-521"),
    "PS256": ("RSA", None),
    "RS256": ("RSA", None),
}


def choose_algorithm(advertised: tuple[str, ...] | None) -> str | None:
    """Rule 2: the algorithm to prove with at an authorization server that lists
    ``advertised`` (``None``: it lists none, so ES256); ``None`` when it lists only
    algorithms this client does not sign with."""
    if not advertised:
        return "ES256"
    return next((alg for alg in ALGORITHMS if alg in advertised), None)


def generate_key(algorithm: str) -> Secret:
    """A new private key for ``algorithm``, as its JWK's JSON text (with ``alg``)."""
    kind = ALGORITHMS.get(algorithm)
    if kind is None:
        raise ConfigurationError(f"DPoP algorithm {algorithm!r} is not one of "
                                 f"{', '.join(ALGORITHMS)}")
    key_type, curve = kind
    key: Any
    if key_type == "EC":
        assert curve is not None
        key = jwk.ECKey.generate_key(curve, private=True)
    else:
        key = jwk.RSAKey.generate_key(2048, private=True)
    doc = dict(key.as_dict(private=True))
    doc["alg"] = algorithm
    return Secret(json.dumps(doc, separators=(",", ":")))


def access_token_hash(access_token: str) -> str:
    """``ath`` (§4.2): base64url (no padding) of the SHA-256 of the token's ASCII."""
    digest = hashlib.sha256(access_token.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def proof_target(url: str) -> str:
    """``htu`` (§4.2): the request's URL without its query and fragment."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def token_of(authorization: str) -> str | None:
    """The access token in a ``DPoP <token>`` header value, else ``None``."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() or None if scheme.lower() == "dpop" else None


class DpopKey:
    """A proof key loaded from its ``Secret`` (rule 2)."""

    def __init__(self, private_jwk: Secret) -> None:
        try:
            doc = json.loads(private_jwk.reveal())
        except ValueError:
            raise ConfigurationError("the DPoP key is not a JSON Web Key") from None
        algorithm = doc.get("alg") if isinstance(doc, dict) else None
        if algorithm not in ALGORITHMS:
            raise ConfigurationError(f"the DPoP key's algorithm {algorithm!r} is not one of "
                                     f"{', '.join(ALGORITHMS)}")
        try:
            key = jwk.import_key(doc)
        except (JoseError, ValueError, TypeError):
            raise ConfigurationError(f"the DPoP key is not a usable {algorithm} key") from None
        if not key.is_private:
            raise ConfigurationError("the DPoP key is a public key; proofs are signed with "
                                     "the private one")
        self.algorithm: str = algorithm
        self._key = key
        #: The public half, as the proof's ``jwk`` header carries it.
        self.public_jwk: dict[str, Any] = dict(key.as_dict(private=False))
        self.secret = private_jwk

    @property
    def thumbprint(self) -> str:
        """The key's RFC 7638 SHA-256 thumbprint (a bound token's ``cnf.jkt``)."""
        return str(self._key.thumbprint())

    def proof(self, method: str, url: str, *, now: float, access_token: str | None = None,
              nonce: str | None = None) -> str:
        """A fresh proof (rule 1) for one ``method`` request to ``url``."""
        claims: dict[str, Any] = {"jti": secrets.token_urlsafe(16), "htm": method.upper(),
                                  "htu": proof_target(url), "iat": int(now)}
        if access_token is not None:
            claims["ath"] = access_token_hash(access_token)
        if nonce is not None:
            claims["nonce"] = nonce
        header = {"typ": PROOF_TYPE, "alg": self.algorithm, "jwk": self.public_jwk}
        try:
            return jwt.encode(header, claims, self._key, algorithms=[self.algorithm])
        except JoseError as exc:
            raise ConfigurationError(f"the DPoP key cannot sign {self.algorithm} "
                                     f"({type(exc).__name__})") from None

    def __repr__(self) -> str:
        return f"DpopKey({self.algorithm}, jkt={self.thumbprint})"


@dataclass
class NonceBook:
    """Rule 3 for one server: the nonce to put in the next proof, and whether a
    ``use_dpop_nonce`` refusal is worth one more attempt."""

    nonce: str | None = None

    def observe(self, header: str | None) -> None:
        """A response's ``DPoP-Nonce`` header (any response: the server may rotate it)."""
        if header:
            self.nonce = header.strip() or self.nonce

    def retry(self, refused: bool, sent: str | None, header: str | None) -> bool:
        """Whether a request whose proof carried ``sent`` and was answered with
        ``header`` (its ``DPoP-Nonce``) goes once more: ``refused`` says the answer was a
        ``use_dpop_nonce`` refusal. Notes the new nonce either way."""
        self.observe(header)
        return refused and self.nonce is not None and self.nonce != sent


def token_endpoint_wants_nonce(status: int, body: bytes) -> bool:
    """Rule 3: the token endpoint's ``use_dpop_nonce`` refusal (§8)."""
    if status != 400:
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("error") == USE_DPOP_NONCE


class DpopSigner:
    """A worker's proofs for its one server (rule 4): the key the parent gave with the
    token, and the server's nonce. ``proof`` makes the ``DPoP`` header of one request
    that carries ``authorization``; ``retry`` says whether its refusal goes once more."""

    def __init__(self, private_jwk: Secret) -> None:
        self.key = DpopKey(private_jwk)
        self.nonces = NonceBook()

    def proof(self, method: str, url: str, authorization: str | None, *,
              now: float) -> tuple[str, str | None]:
        """The proof for one request and the nonce it carries."""
        nonce = self.nonces.nonce
        token = token_of(authorization) if authorization is not None else None
        return self.key.proof(method, url, now=now, access_token=token, nonce=nonce), nonce

    def retry(self, status: int, www_authenticate: str | None, nonce_header: str | None,
              sent: str | None) -> bool:
        """A response to a request whose proof carried the nonce ``sent``: notes its
        ``DPoP-Nonce``; ``True`` when it is a ``use_dpop_nonce`` refusal (401 with that
        error in a DPoP challenge) to send again with the new nonce."""
        from .challenge import dpop_challenge

        challenge = dpop_challenge(www_authenticate) if status == 401 else None
        refused = challenge is not None and challenge.error == USE_DPOP_NONCE
        return self.nonces.retry(refused, sent, nonce_header)

    def __repr__(self) -> str:
        return f"DpopSigner({self.key!r})"
