"""The gateway as an OAuth protected resource: access tokens checked, and what a client is
told when it has none or a bad one. Pure but for ``Validator``, which awaits a key
source (``issuer_keys``) and does no I/O of its own.

Rules (MCP 2026-07-28 basic/authorization; RFC 6750, RFC 9068, RFC 9728):

1. A token comes only in ``Authorization: Bearer <token>`` (the scheme in any case); one
   longer than ``MAX_TOKEN_CHARS`` is refused unread.
2. A token is a JWS-signed JWT whose ``alg`` is asymmetric (``ALGORITHMS``): never
   ``none``, never an HMAC whose "secret" would be a public key. The key is the issuer's,
   chosen by ``kid`` (a token without one: the issuer's keys of its ``alg``'s type, each
   tried); the issuer is the one the unverified ``iss`` names among those configured, so
   a token from elsewhere never makes the gateway fetch anything.
3. Claims, after the signature holds: ``iss`` equal to a configured issuer (exactly),
   ``aud`` (a string or a list) containing the gateway's audience, ``exp`` required and
   ``nbf`` honoured, both with ``LEEWAY_S``; ``sub`` a non-empty string. Scopes come from
   ``scope`` (space-separated, RFC 9068) or ``scp`` (a list or a string). The
   request's ``Identity`` is read from them (``policy.identity``: groups, roles, client,
   email); a claim it reads that has the wrong type or too many values refuses the token.
4. A missing or unusable token is 401 with ``WWW-Authenticate: Bearer
   resource_metadata="<PRM URL>"`` (plus ``scope`` when scopes are required, and
   ``error="invalid_token"`` with a short reason when one was presented); a token lacking
   a required scope is 403 ``error="insufficient_scope"`` naming every scope needed. The
   issuer's keys being unobtainable (its metadata or JWKS down, and no key cached for the
   token) is 503 with ``Retry-After``: the token may be good, and a 401 would send the
   client to re-authorize against an issuer that is down.
5. Nothing here ever puts a token, or any part of one, in a message or a log line.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard
from urllib.parse import urlsplit, urlunsplit

import orjson

from ..policy.identity import ClaimNames, Identity, IdentityRefused, from_claims

#: Signature algorithms accepted: asymmetric only (rule 2).
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
              "ES256", "ES384", "ES512", "EdDSA")
#: The key type each algorithm's key has (a JWKS entry of another type is not tried).
KEY_TYPE = {**{a: "RSA" for a in ALGORITHMS if a[:2] in ("RS", "PS")},
            **{a: "EC" for a in ("ES256", "ES384", "ES512")}, "EdDSA": "OKP"}
#: Longest token read (rule 1): real access tokens are a few KiB at most.
MAX_TOKEN_CHARS = 16 * 1024
#: Clock skew allowed on ``exp`` and ``nbf``.
LEEWAY_S = 60
PRM_SUFFIX = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a request is not let through, as the status and challenge it gets."""

    status: int  # 401, 403 or 503
    #: RFC 6750 error code: None (no token at all), ``invalid_token``,
    #: ``insufficient_scope``; ``temporarily_unavailable`` for a 503.
    error: str | None
    #: A short reason for the client and the log; never any part of the token.
    reason: str


@dataclass(frozen=True, slots=True)
class TokenPolicy:
    """What a token must say to be let through."""

    issuers: tuple[str, ...]
    audience: str
    scopes: tuple[str, ...] = ()
    leeway_s: int = LEEWAY_S


@dataclass(frozen=True, slots=True)
class ResourceSettings:
    """The gateway as a protected resource, as configured (``trunkline serve
    --oauth-issuer``...)."""

    issuers: tuple[str, ...]
    #: The gateway's resource URL as its clients reach it; None: its own ``/mcp`` URL.
    resource: str | None = None
    #: What a token's ``aud`` must contain; None: the resource URL.
    audience: str | None = None
    scopes: tuple[str, ...] = ()


class KeysUnavailable(Exception):
    """The issuer's keys could not be had (metadata or JWKS unreachable or malformed)."""


class KeySource(Protocol):
    """An issuer's signing keys (``issuer_keys.IssuerKeys``)."""

    async def keys(self, kid: str | None) -> Sequence[Any]:
        """The public keys (joserfc keys) a token with ``kid`` may be signed with: those
        with that ``kid``, fetching the JWKS again for an unknown one when allowed; every
        key when ``kid`` is None. ``KeysUnavailable`` when none can be had."""
        ...


# --- the header and the token's parts ----------------------------------------------------


def bearer_token(authorization: str | None) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None for no header or another
    scheme; "" for a Bearer header with nothing usable in it."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip()


def _b64json(part: str) -> Any:
    return orjson.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def unverified_parts(token: str) -> tuple[dict[str, Any], dict[str, Any]] | Refused:
    """The header and claims of a compact JWS, unverified: only to choose the issuer and
    key to verify with (rule 2)."""
    if not token:
        return _invalid("the token is empty")
    if len(token) > MAX_TOKEN_CHARS:
        return _invalid(f"the token is longer than {MAX_TOKEN_CHARS} characters")
    parts = token.split(".")
    if len(parts) != 3:
        return _invalid("the token is not a signed JWT")
    try:
        header, claims = _b64json(parts[0]), _b64json(parts[1])
    except (ValueError, orjson.JSONDecodeError):
        return _invalid("the token is not a signed JWT")
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return _invalid("the token is not a signed JWT")
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        return _invalid("the token's signature algorithm is not accepted")
    if "crit" in header:  # no critical extension is understood here (RFC 7515 4.1.11)
        return _invalid("the token has critical header parameters")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        return _invalid("the token's key id is not a string")
    return header, claims


def check_claims(claims: Mapping[str, Any], policy: TokenPolicy, now: float,
                 names: ClaimNames | None = None) -> Identity | Refused:
    """Rule 3: the verified claims against the policy, at ``now``; the identity they
    make (``policy.identity``: its groups and roles from the claims ``names`` names)."""
    issuer = claims.get("iss")
    if not isinstance(issuer, str) or issuer not in policy.issuers:
        return _invalid("the token is from another issuer")
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience
    if not isinstance(audiences, list) or policy.audience not in audiences:
        return _invalid("the token is for another audience")
    expires = claims.get("exp")
    if not _is_number(expires):
        return _invalid("the token has no expiry")
    if now > expires + policy.leeway_s:
        return _invalid("the token has expired")
    not_before = claims.get("nbf")
    if not_before is not None and (not _is_number(not_before)
                                   or now + policy.leeway_s < not_before):
        return _invalid("the token is not valid yet")
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        return _invalid("the token names no subject")
    scopes = token_scopes(claims)
    missing = [s for s in policy.scopes if s not in scopes]
    if missing:
        return Refused(403, "insufficient_scope",
                       f"the token lacks the scope{'s' if len(missing) > 1 else ''} "
                       + " ".join(missing))
    try:
        return from_claims(claims, names)
    except IdentityRefused as exc:
        return _invalid(str(exc))


def token_scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """Scopes granted: ``scope`` (space-separated) or ``scp`` (a list, or a string)."""
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            return frozenset(value.split())
        if isinstance(value, list):
            return frozenset(s for s in value if isinstance(s, str))
    return frozenset()


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _invalid(reason: str) -> Refused:
    return Refused(401, "invalid_token", reason)


# --- what clients are told -------------------------------------------------------------


def metadata_url(resource: str) -> str:
    """Where the protected resource metadata of ``resource`` is served: the path-aware
    well-known URL (RFC 9728 3.1), the one a client tries first."""
    parts = urlsplit(resource)
    return urlunsplit((parts.scheme, parts.netloc, PRM_SUFFIX + parts.path.rstrip("/"),
                       "", ""))


def metadata_paths(resource: str) -> tuple[str, ...]:
    """The paths the metadata is served at: path-aware, then the root form."""
    path = urlsplit(resource).path.rstrip("/")
    return tuple(dict.fromkeys((PRM_SUFFIX + path, PRM_SUFFIX)))


def protected_resource_metadata(resource: str, issuers: Iterable[str],
                                scopes: Iterable[str]) -> dict[str, Any]:
    """The RFC 9728 document."""
    doc: dict[str, Any] = {"resource": resource, "authorization_servers": list(issuers),
                           "bearer_methods_supported": ["header"]}
    if scopes := list(scopes):
        doc["scopes_supported"] = scopes
    return doc


def challenge(resource_metadata: str, scopes: Sequence[str],
              refused: Refused | None = None) -> str:
    """The ``WWW-Authenticate`` value for a refusal (rule 4): None for no token at all."""
    params = [("resource_metadata", resource_metadata)]
    if scopes:
        params.append(("scope", " ".join(scopes)))
    if refused is not None and refused.error in ("invalid_token", "insufficient_scope"):
        params += [("error", refused.error), ("error_description", refused.reason)]
    return "Bearer " + ", ".join(f'{name}="{_quoted(value)}"' for name, value in params)


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


# --- the validator ----------------------------------------------------------------------


class Validator:
    """Checks one ``Authorization`` header against a policy, with the issuers' keys from
    ``key_sources`` (one per configured issuer)."""

    def __init__(self, policy: TokenPolicy, key_sources: Mapping[str, KeySource],
                 verify: Callable[[str, Any, str], dict[str, Any] | None] | None = None,
                 clock: Callable[[], float] = time.time,
                 claim_names: Callable[[], ClaimNames | None] = ClaimNames) -> None:
        """``claim_names``: which claims carry groups and roles now (the authorization
        policy's, which a reload may change)."""
        self.policy = policy
        self._claim_names = claim_names
        self._sources = dict(key_sources)
        self._verify = verify or verify_signature
        self._clock = clock

    def requiring(self, scopes: Sequence[str]) -> Validator:
        """A validator of the same issuers, keys and audience whose tokens must carry
        ``scopes`` instead (the operator's: ``admin_access``)."""
        return Validator(TokenPolicy(self.policy.issuers, self.policy.audience, tuple(scopes),
                                     self.policy.leeway_s),
                         self._sources, self._verify, self._clock, self._claim_names)

    async def check(self, authorization: str | None) -> Identity | Refused:
        token = bearer_token(authorization)
        if token is None:
            return Refused(401, None, "an access token is required")
        parts = unverified_parts(token)
        if isinstance(parts, Refused):
            return parts
        header, unverified = parts
        issuer = unverified.get("iss")
        source = self._sources.get(issuer) if isinstance(issuer, str) else None
        if source is None:
            return _invalid("the token is from another issuer")
        try:
            keys = await source.keys(header.get("kid"))
        except KeysUnavailable:
            return Refused(503, "temporarily_unavailable",
                           "the token issuer's keys cannot be fetched now")
        alg = header["alg"]
        for key in keys:
            if key.key_type != KEY_TYPE[alg]:
                continue
            claims = self._verify(token, key, alg)
            if claims is not None:
                return check_claims(claims, self.policy, self._clock(),
                                    self._claim_names())
        return _invalid("the token's signature does not verify")


def verify_signature(token: str, key: Any, alg: str) -> dict[str, Any] | None:
    """The claims of ``token`` if its signature under ``key`` with ``alg`` holds, else
    None (joserfc's JWS; ``alg`` was checked against ``ALGORITHMS``)."""
    from joserfc import jwt

    try:
        claims = jwt.decode(token, key, algorithms=[alg]).claims
    except Exception:  # noqa: BLE001 - whatever the library makes of a forged token, it
        # is a token refused (rule 5: not a traceback that could quote it)
        return None
    return claims if isinstance(claims, dict) else None

