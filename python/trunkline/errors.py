"""The one error tree of trunkline.

Three families a host can tell apart with ``except``:

- ``ConnectionFailure``: the server could not be reached (spawn failed, transport lost,
  server unavailable, an HTTP status without an answer, authentication refused). Safe
  reads may be retried; side effects are unknown.
- ``ProtocolFailure``: the server (or its absence) violated the protocol: malformed
  message, schema violation, era refused, timeout.
- ``ServerError``: the server answered with a JSON-RPC error (business error). A tool
  result with ``isError: true`` is *returned*, never raised.

``ConfigurationError`` sits beside them: the host's own configuration is wrong.

Every error names the server and, where one is involved, the method; transport failures
carry the tail of the server's stderr, because that is where a crashing server says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TrunklineError(Exception):
    """Base of every error trunkline raises."""

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        method: str | None = None,
        stderr_tail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.server = server
        self.method = method
        self.stderr_tail = stderr_tail

    def __str__(self) -> str:
        where = []
        if self.server is not None:
            where.append(f"server {self.server!r}")
        if self.method is not None:
            where.append(f"method {self.method!r}")
        text = f"{self.message} ({', '.join(where)})" if where else self.message
        if self.stderr_tail:
            text += f"\n--- stderr tail ---\n{self.stderr_tail}"
        return text


class ConfigurationError(TrunklineError):
    """The host's configuration is invalid (bad server entry, tool-name collision under
    the ``reject`` policy, ...)."""


# --- connection family ---------------------------------------------------------------


class ConnectionFailure(TrunklineError):
    """The server could not be reached."""


class SpawnFailed(ConnectionFailure):
    """The server process could not be started (missing executable, bad cwd, ...)."""


class TransportLost(ConnectionFailure):
    """The transport died with the request in flight (process exit, EOF, broken pipe)."""

    def __init__(self, message: str, *, exit_code: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.exit_code = exit_code


class ServerUnavailable(ConnectionFailure):
    """The server is not ready (negotiating, restarting, refused, stopped)."""

    def __init__(self, message: str, *, state: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.state = state


class StreamBroken(TransportLost):
    """The HTTP exchange carrying this one request failed before its response arrived
    (connection refused or reset, the response stream ended early). Other requests to the
    server are unaffected; the retry policy decides whether it is sent again (with a new
    id)."""


class HttpStatusError(ConnectionFailure):
    """The server (or a proxy in front of it) answered an HTTP request with a status that
    carries no JSON-RPC answer (a 5xx, an unexpected 4xx). ``body`` is a short excerpt."""

    def __init__(self, message: str, *, status: int, body: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status
        self.body = body


class AuthenticationFailed(ConnectionFailure):
    """HTTP 401 or 403: the server wants credentials this host did not present (or
    rejected them). Never evidence about the server's protocol era. ``challenge`` is the
    ``WWW-Authenticate`` header, if the server sent one."""

    def __init__(self, message: str, *, status: int, challenge: str | None = None,
                 **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status
        self.challenge = challenge


# --- protocol family -----------------------------------------------------------------


class ProtocolFailure(TrunklineError):
    """The peer's traffic violated the protocol, or a protocol deadline passed."""


class MalformedMessage(ProtocolFailure):
    """A line from the server was not a valid JSON-RPC message, or a result had the wrong
    shape for its method."""


class SchemaViolation(ProtocolFailure):
    """A result did not match the schema the server itself declared (``outputSchema``)."""


class RequestTimeout(ProtocolFailure):
    """No answer arrived within the request's deadline (counted from the write)."""

    def __init__(self, message: str, *, timeout_s: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.timeout_s = timeout_s


class EraRefused(ProtocolFailure):
    """Era negotiation failed closed: the peer gave no positive evidence of an era we may
    speak with it. ``evidence`` lists what was observed, in order."""

    def __init__(self, message: str, *, evidence: Sequence[str] = (), **kw: Any) -> None:
        super().__init__(message, **kw)
        self.evidence = tuple(evidence)

    def __str__(self) -> str:
        text = super().__str__()
        if self.evidence:
            text += "\nevidence:\n" + "\n".join(f"  - {e}" for e in self.evidence)
        return text


# --- business family -----------------------------------------------------------------


class ServerError(TrunklineError):
    """The server answered the request with a JSON-RPC error object."""

    def __init__(self, message: str, *, code: int, data: Any = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.code = code
        self.data = data

    def __str__(self) -> str:
        return f"[{self.code}] {super().__str__()}"
