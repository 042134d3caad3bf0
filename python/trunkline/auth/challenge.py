"""``WWW-Authenticate`` parsed: what a 401 or 403 asks of us. Pure.

Grammar (RFC 9110 §11.6.1, ex RFC 7235)::

    WWW-Authenticate = #challenge
    challenge        = auth-scheme [ 1*SP ( token68 / #auth-param ) ]
    auth-param       = token BWS "=" BWS ( token / quoted-string )

Rules:

- A header may carry several challenges (``Basic realm="x", Bearer scope="a"``); several
  header fields are one list, joined with ``", "`` by the caller. A comma separates both
  challenges and parameters: a token followed by ``=`` is a parameter of the challenge
  before it, any other token starts a new challenge.
- Schemes and parameter names are case-insensitive (stored lower-case); values keep their
  case. In a quoted string, ``\\x`` stands for ``x``. A parameter given twice keeps its
  first value.
- The Bearer challenge (RFC 6750 §3) is the first one whose scheme is ``bearer``. Its
  parameters of interest: ``resource_metadata`` (RFC 9728 §5.1), ``scope`` (a space-
  separated list, RFC 6750 §3), ``error`` (``invalid_token``, ``insufficient_scope``, ...)
  and ``error_description``.
- The DPoP challenge (RFC 9449 §7.1) has the same parameters. A server that offers
  only DPoP (``DPoP resource_metadata=...``) is read from it: ``bearer_challenge``
  answers the Bearer challenge if there is one, else the DPoP one (``scheme`` says
  which); ``dpop_challenge`` answers the DPoP one only.
- Malformed input raises ``MalformedChallenge`` from ``parse_challenges``;
  ``bearer_challenge`` answers ``None`` for it (the client then discovers metadata at the
  well-known locations, as for a 401 without the header).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# RFC 9110 tchar, and the token68 alphabet (RFC 9110 §11.2).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_SPACE = " \t"

INSUFFICIENT_SCOPE = "insufficient_scope"
INVALID_TOKEN = "invalid_token"


class MalformedChallenge(ValueError):
    """The header does not follow the challenge grammar."""


@dataclass(frozen=True)
class Challenge:
    """One challenge: its scheme (lower-case) and either parameters or a token68."""

    scheme: str
    params: dict[str, str] = field(default_factory=dict)
    token68: str | None = None


@dataclass(frozen=True)
class BearerChallenge:
    """What a Bearer challenge tells an OAuth client."""

    resource_metadata: str | None = None
    #: The scopes the server asks for, in its order; ``None`` when it named none.
    scope: tuple[str, ...] | None = None
    error: str | None = None
    error_description: str | None = None
    #: ``"bearer"`` or ``"dpop"``: the scheme the server challenged with.
    scheme: str = "bearer"

    @property
    def insufficient_scope(self) -> bool:
        return self.error == INSUFFICIENT_SCOPE


def parse_challenges(header: str) -> list[Challenge]:
    """Every challenge in ``header``, in order."""
    parser = _Parser(header)
    return parser.challenges()


def bearer_challenge(header: str | None) -> BearerChallenge | None:
    """The first Bearer challenge of ``header``, else its first DPoP challenge, or
    ``None`` (no header, neither challenge, or a header that does not parse)."""
    challenges = _challenges(header)
    return _read(challenges, "bearer") or _read(challenges, "dpop")


def dpop_challenge(header: str | None) -> BearerChallenge | None:
    """The first DPoP challenge of ``header`` (RFC 9449 §7.1), or ``None``."""
    return _read(_challenges(header), "dpop")


def _challenges(header: str | None) -> list[Challenge]:
    if not header:
        return []
    try:
        return parse_challenges(header)
    except MalformedChallenge:
        return []


def _read(challenges: list[Challenge], scheme: str) -> BearerChallenge | None:
    for challenge in challenges:
        if challenge.scheme == scheme:
            params = challenge.params
            scope = params.get("scope")
            return BearerChallenge(
                resource_metadata=params.get("resource_metadata") or None,
                scope=tuple(scope.split()) if scope is not None else None,
                error=params.get("error") or None,
                error_description=params.get("error_description") or None,
                scheme=scheme,
            )
    return None


class _Parser:
    """A cursor over one header value."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def challenges(self) -> list[Challenge]:
        # (scheme, token68, params) per challenge; parameters are added as they come.
        found: list[tuple[str, str | None, dict[str, str]]] = []
        while True:
            self._skip(_SPACE + ",")
            if self.pos >= len(self.text):
                return [Challenge(scheme=s, params=p, token68=t) for s, t, p in found]
            name = self._token()
            after_name = self.pos
            self._skip(_SPACE)
            if self._peek() == "=":
                # ``name=...``: a parameter of the challenge before it.
                if not found:
                    raise MalformedChallenge(f"parameter {name!r} before any scheme")
                self.pos += 1
                self._skip(_SPACE)
                value = self._quoted() if self._peek() == '"' else self._token()
                found[-1][2].setdefault(name.lower(), value)
                continue
            self.pos = after_name
            found.append((name.lower(), self._token68(), {}))

    def _token68(self) -> str | None:
        """After a scheme: a token68 if one stands alone before the next comma
        (``Basic dXNlcg==``); otherwise nothing is consumed and parameters follow."""
        self._skip(_SPACE)
        match = _TOKEN68.match(self.text, self.pos)
        if match:
            rest = self.text[match.end():].lstrip(_SPACE)
            if not rest or rest[0] == ",":
                self.pos = match.end()
                return match.group()
        return None

    def _token(self) -> str:
        match = _TOKEN.match(self.text, self.pos)
        if not match:
            where = self.text[self.pos:self.pos + 1] or "end of header"
            raise MalformedChallenge(f"expected a token at offset {self.pos}, found {where!r}")
        self.pos = match.end()
        return match.group()

    def _quoted(self) -> str:
        self.pos += 1  # the opening quote
        out: list[str] = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(out)
            if char == "\\" and self.pos + 1 < len(self.text):
                self.pos += 1
                char = self.text[self.pos]
            out.append(char)
            self.pos += 1
        raise MalformedChallenge("unterminated quoted string")

    def _peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _skip(self, chars: str) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in chars:
            self.pos += 1
