"""Who a request speaks for: an ``Identity``, and how one is read from a token's claims.

Rules:

1. Every request has an identity. An OAuth access token's is ``kind="oauth"``, keyed by
   its ``iss`` and ``sub``; an API key's is ``kind="api_key"`` with the key's configured
   name as its subject (the key's value is never part of an identity); a request that
   showed nothing (the stdio face, an unauthenticated loopback bind) is ``LOCAL``. A
   library user names its own users with ``Identity.user``.
2. What a policy may read of an identity is its fields: ``scopes`` (``scope``, space
   separated, or ``scp``), ``groups`` and ``roles`` (the claims ``ClaimNames`` names; a
   dotted name reads a nested object, e.g. Keycloak's ``realm_access.roles``),
   ``client_id`` (``client_id``, else ``azp``), ``email``, and an API key's
   ``attributes``. Nothing else of a token is kept.
3. Under a policy, a claim of the wrong type (groups that are a number, an email that is
   a list), more than ``MAX_VALUES`` values in one claim, or a value longer than
   ``MAX_VALUE_CHARS`` refuses the token with ``IdentityRefused`` naming the claim and
   what is wrong: a decision is never made on part of a claim, and never on a claim read
   loosely. A string where a list is expected is one value. Without a policy nothing
   decides by them: only the issuer, subject and scopes are read, and no token is refused
   for the rest.
4. Identities are values: equal fields, equal identity, and the same decisions (the
   decision cache is keyed by the identity itself, so two tokens of one user with other
   scopes are decided apart).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Most values read from one claim (groups, roles, scopes).
MAX_VALUES = 256
#: Longest value read from a claim.
MAX_VALUE_CHARS = 256

OAUTH, API_KEY, LOCAL_KIND, USER = "oauth", "api_key", "local", "user"


class IdentityRefused(ValueError):
    """A token's claims cannot be read as an identity (rule 3): the message names the claim
    and what is wrong with it, never its value."""


@dataclass(frozen=True, slots=True)
class ClaimNames:
    """Which claims carry groups and roles (rule 2): the policy's ``claims`` object."""

    groups: str = "groups"
    roles: str = "roles"


@dataclass(frozen=True, slots=True, eq=True)
class Identity:
    """Who a request speaks for (rule 1). ``key`` is what anything kept per user is kept
    under; ``facts`` what a policy's conditions read."""

    kind: str
    subject: str
    issuer: str | None = None
    scopes: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    roles: frozenset[str] = frozenset()
    client_id: str | None = None
    email: str | None = None
    #: An API key's configured attributes, as sorted pairs (an identity is hashable).
    attributes: tuple[tuple[str, str], ...] = ()
    _hash: int = field(default=0, init=False, compare=False, repr=False)
    _key: tuple[str, str | None, str] = field(default=("", None, ""), init=False,
                                              compare=False, repr=False)

    def __post_init__(self) -> None:
        # Every decision looks its identity up: hash it once; and what is kept per user
        # is looked up by its key on every call to a server that acts as each user.
        object.__setattr__(self, "_hash", hash((
            self.kind, self.subject, self.issuer, self.scopes, self.groups, self.roles,
            self.client_id, self.email, self.attributes)))
        object.__setattr__(self, "_key", (self.kind, self.issuer, self.subject))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def user(cls, subject: str, *, issuer: str | None = None, scopes: Iterable[str] = (),
             groups: Iterable[str] = (), roles: Iterable[str] = (),
             client_id: str | None = None, email: str | None = None,
             attributes: Mapping[str, str] | None = None) -> Identity:
        """An application's own user, for ``Host.tools(identity=...)`` and
        ``Host.call_tool(..., identity=...)``."""
        if not isinstance(subject, str) or not subject:
            raise ValueError("an identity needs a subject (a non-empty string)")
        return cls(USER, subject, issuer, frozenset(scopes), frozenset(groups),
                   frozenset(roles), client_id, email, _pairs(attributes or {}))

    @classmethod
    def api_key(cls, name: str, *, scopes: Iterable[str] = (), groups: Iterable[str] = (),
                roles: Iterable[str] = (), attributes: Mapping[str, str] | None = None
                ) -> Identity:
        """A named API key's identity: its name and configured attributes."""
        return cls(API_KEY, name, None, frozenset(scopes), frozenset(groups),
                   frozenset(roles), None, None, _pairs(attributes or {}))

    @property
    def key(self) -> tuple[str, str | None, str]:
        return self._key

    def facts(self) -> dict[str, Any]:
        """The identity as a policy's conditions read it (``identity`` in CEL): every
        field present, empty when unknown, so a condition never fails on a missing one."""
        return {"kind": self.kind, "subject": self.subject, "issuer": self.issuer or "",
                "scopes": sorted(self.scopes), "groups": sorted(self.groups),
                "roles": sorted(self.roles), "client_id": self.client_id or "",
                "email": self.email or "", "attributes": dict(self.attributes)}

    def described(self) -> dict[str, str]:
        """Who it is, for an audit record or a log line: kind, issuer, subject (no
        attribute values, no credential)."""
        said = {"kind": self.kind, "subject": self.subject}
        if self.issuer is not None:
            said["issuer"] = self.issuer
        return said

    def __repr__(self) -> str:
        return f"Identity({self.kind}:{self.subject})"


#: The stdio face's one client, and any request on an unauthenticated loopback bind.
LOCAL = Identity(LOCAL_KIND, "local")


def from_claims(claims: Mapping[str, Any], names: ClaimNames | None = ClaimNames()
                ) -> Identity:
    """The identity of a verified access token's claims (rules 2-3); ``iss`` and ``sub``
    were checked already. Raises ``IdentityRefused``. ``names`` None: no policy reads
    the claims, so only who it is (``iss``, ``sub``) and its scopes are read, loosely:
    a token is never refused for a claim nothing decides by."""
    issuer, subject = claims["iss"], claims["sub"]
    if names is None:
        scopes = claims.get("scope", claims.get("scp"))
        values = scopes.split() if isinstance(scopes, str) else \
            scopes if isinstance(scopes, list) else []
        client = claims.get("client_id", claims.get("azp"))
        return Identity(OAUTH, subject, issuer,
                        frozenset(v for v in values if isinstance(v, str)),
                        client_id=client if isinstance(client, str) else None)
    scopes = _strings(claims, "scope", split=True) if "scope" in claims else \
        _strings(claims, "scp", split=True)
    client = claims.get("client_id", claims.get("azp"))
    if client is not None and not isinstance(client, str):
        raise IdentityRefused("the token's client_id (or azp) claim is not a string")
    email = claims.get("email")
    if email is not None and (not isinstance(email, str) or len(email) > MAX_VALUE_CHARS):
        raise IdentityRefused(f"the token's email claim is not a string of at most "
                              f"{MAX_VALUE_CHARS} characters")
    return Identity(OAUTH, subject, issuer, scopes, _strings(claims, names.groups),
                    _strings(claims, names.roles), client, email)


def _strings(claims: Mapping[str, Any], name: str, split: bool = False) -> frozenset[str]:
    """The values of claim ``name`` (dotted: nested), checked (rule 3)."""
    value: Any = claims
    for part in name.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return frozenset()
    if isinstance(value, str):
        values: list[Any] = value.split() if split else [value]
    elif isinstance(value, list):
        values = value
    else:
        raise IdentityRefused(f"the token's {name} claim is not a list of strings")
    if len(values) > MAX_VALUES:
        raise IdentityRefused(f"the token's {name} claim has {len(values)} values; at most "
                              f"{MAX_VALUES} are read")
    for item in values:
        if not isinstance(item, str):
            raise IdentityRefused(f"the token's {name} claim is not a list of strings")
        if len(item) > MAX_VALUE_CHARS:
            raise IdentityRefused(f"a value of the token's {name} claim is longer than "
                                  f"{MAX_VALUE_CHARS} characters")
    return frozenset(values)


def _pairs(attributes: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    for key, value in attributes.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError("an identity's attributes are strings named by strings")
    return tuple(sorted(attributes.items()))
