"""Client assertions: ``private_key_jwt`` client authentication (RFC 7523 §2.2, OpenID
Connect Core §9), a JWT signed with the client's private key in place of a client secret.
Pure (a fresh ``jti`` is the only thing drawn from outside); the signing is joserfc's.

Rules:

1. The assertion's claims: ``iss`` and ``sub`` are the ``client_id``; ``aud`` is the
   authorization server's issuer identifier, one string. RFC 7523 also allows the token
   endpoint URL, but draft-ietf-oauth-rfc7523bis requires the issuer alone (an assertion
   made for one server cannot then be replayed at another that shares an endpoint
   spelling), and the MCP client credentials extension's servers accept exactly that.
   ``jti`` is 128 random bits (a server refuses replays by it), ``iat`` is now, ``exp`` is
   ``LIFETIME_S`` later: the assertion lives as long as the one request that carries it.
2. Only asymmetric algorithms (``ALGORITHMS``): a shared key would be a client secret
   under another name. The key's type must fit the algorithm (RSA for ``RS*``/``PS*``, EC
   on the algorithm's curve for ``ES*``, an Ed25519 key for ``Ed25519``) and be a private
   key; ``check_signing_key`` says so when the client is configured, not at the first 401.
3. The key is PEM text inside a ``Secret``; it is parsed where it signs and the parsed key
   is dropped there. Errors name the algorithm and what is wrong, never the key. The
   signed assertion is a credential for its lifetime and goes only into the token request.
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

from joserfc import jwk, jwt
from joserfc.errors import JoseError

from ..errors import ConfigurationError
from .secret import Secret

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
LIFETIME_S = 60

#: Algorithm -> the JWK key type it signs with (and, for ECDSA, the curve).
ALGORITHMS: dict[str, tuple[Literal["RSA", "EC", "OKP"], str | None]] = {
    **{f"RS{n}": ("RSA", None) for n in (256, 384, 512)},
    **{f"PS{n}": ("RSA", None) for n in (256, 384, 512)},
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "ES512": ("EC", "P-521"),
    "Ed25519": ("OKP", "Ed25519"),  # RFC 9864's name; the older "EdDSA" is deprecated
}


def check_signing_key(private_key: Secret, algorithm: str) -> None:
    """Rule 2: ``ConfigurationError`` unless ``private_key`` can sign with ``algorithm``."""
    _load(private_key, algorithm)


def client_assertion(private_key: Secret, algorithm: str, *, client_id: str, audience: str,
                     now: float) -> str:
    """A signed client assertion (rule 1) for ``client_id`` at the issuer ``audience``."""
    key = _load(private_key, algorithm)
    issued = int(now)
    claims = {"iss": client_id, "sub": client_id, "aud": audience,
              "jti": secrets.token_urlsafe(16), "iat": issued, "exp": issued + LIFETIME_S}
    try:
        return jwt.encode({"alg": algorithm, "typ": "JWT"}, claims, key,
                          algorithms=[algorithm])
    except JoseError as exc:
        raise ConfigurationError(f"the client's private key cannot sign {algorithm} "
                                 f"({type(exc).__name__})") from None


def _load(private_key: Secret, algorithm: str) -> Any:
    expected = ALGORITHMS.get(algorithm)
    if expected is None:
        raise ConfigurationError(f"signing algorithm {algorithm!r} is not one of "
                                 f"{', '.join(ALGORITHMS)} (private_key_jwt signs with an "
                                 "asymmetric key)")
    key_type, curve = expected
    try:
        key = jwk.import_key(private_key.reveal(), key_type)
    except (JoseError, ValueError, TypeError):
        # The parser's message may quote the input: only the kind of failure is told.
        raise ConfigurationError(f"the client's private key is not a PEM {key_type} key "
                                 f"(as {algorithm} needs)") from None
    if not key.is_private:
        raise ConfigurationError(f"the client's key for {algorithm} is a public key; "
                                 "private_key_jwt signs with the private one")
    # Only EC and OKP keys have a curve (an RSA algorithm names none).
    if curve is not None and isinstance(key, (jwk.ECKey, jwk.OKPKey)) \
            and key.curve_name != curve:
        raise ConfigurationError(f"{algorithm} signs with a {key_type} key on {curve}, not "
                                 f"{key.curve_name}")
    return key
