"""Era negotiation as a pure state machine: events in, decisions out, no I/O.

The driver (``trunkline.worker.era``) sends what the machine asks for, enforces
the deadlines the machine names, correlates replies by id, and feeds back what happened.
The machine decides the era from *positive evidence only* (``docs/explanation/architecture.md``,
"Era negotiation"):

1. Probe with ``server/discover``. A valid ``DiscoverResult`` proves a modern peer; the
   highest shared version is chosen, or negotiation fails naming both lists.
2. A recognized modern error (-32020, -32021, -32022 with their exact data shapes) proves
   a modern peer, whichever probe it answers: -32022 retries discover with a shared modern
   version (the driver gives every send a new id), -32020/-32021 fail with the reason.
   ``initialize`` is never sent after modern evidence, allowlisted or not, nor on a
   connection to a server that proved modern on an earlier one (``proven_modern``).
3. Everything else is ambiguous. Without ``allow_legacy`` the peer fails closed with the
   evidence; when it did answer (a JSON-RPC error, a malformed result, stray output), the
   refusal names that answer and ``Remedy.ALLOW_LEGACY``: allowlisting is what would let
   it prove the legacy era (an HTTP status without a JSON-RPC answer, a network error or
   a broken stream is no such answer: a wrong URL or a server in trouble says the same).
   With it, exactly one ``initialize`` goes out under its own deadline, and only a
   well-formed result with a configured legacy version makes the peer legacy.
4. Silence is not evidence either way: a probe whose deadline passed with nothing else
   observed fails with ``NextAttempt.LATER`` (try again on a fresh connection, after a
   backoff, with longer deadlines: ``NegotiationConfig.after_silence``). An answer that is
   not evidence, garbage, or a closed transport fail with ``NextAttempt.NEVER``.
5. One connection, one session. A ``DiscoverResult`` that arrives while ``initialize`` is
   outstanding waits for the initialize's fate: refused, and the modern verdict stands;
   accepted (or unanswered), and the server may now hold a legacy session on this very
   connection, so it is abandoned (``Renegotiate``) and the next connection starts as
   proven modern. After a legacy verdict the discover stays pending for the same reason:
   a late ``DiscoverResult`` also means two sessions.

A verdict, once reached, is final for the connection; a new connection gets a new machine.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .validate import (
    discover_result_problem,
    initialize_result_problem,
    is_recognized_modern_error,
)
from .versions import (
    HEADER_MISMATCH,
    LEGACY_VERSIONS,
    META_SERVER_INFO,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    MODERN_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
    highest_shared,
)


class Era(enum.Enum):
    MODERN = "modern"
    LEGACY = "legacy"


class Probe(enum.Enum):
    """Which negotiation request an event answers."""

    DISCOVER = "server/discover"
    INITIALIZE = "initialize"


@dataclass(frozen=True)
class NegotiationConfig:
    modern_versions: tuple[str, ...] = MODERN_VERSIONS
    legacy_versions: tuple[str, ...] = LEGACY_VERSIONS
    allow_legacy: bool = False
    #: Deadline for each ``server/discover`` attempt, counted from the write: a Python
    #: server can take over 5 s to start on a loaded machine.
    discover_timeout_s: float = 10.0
    #: Deadline for the one legacy ``initialize`` an allowlisted peer may receive.
    legacy_probe_timeout_s: float = 10.0
    #: How far patience goes: a connection after ones that heard nothing at all waits
    #: longer (``after_silence``), each probe's deadline doubled per such connection in a
    #: row, up to this. A deadline configured above it is kept as it is.
    max_discover_timeout_s: float = 120.0
    #: Bound on -32022 round trips (each with a new id), so a confused server cannot
    #: keep us negotiating forever.
    max_discover_attempts: int = 3
    #: An earlier connection to this server proved it modern: never send ``initialize``.
    proven_modern: bool = False

    def after_silence(self, connections: int) -> NegotiationConfig:
        """The negotiation of a connection that follows ``connections`` in a row on which
        the server stayed silent: each probe's deadline (``server/discover``, and the
        allowlisted peer's one ``initialize``, which silence ends too) doubled once per
        such connection, up to ``max_discover_timeout_s``. A server slow on every start
        (a container image, a JVM, a cold ``npx``) is answered within a few doublings."""
        if connections <= 0:
            return self
        # Past a thousand doublings every deadline is at the cap (and 2.0 ** n overflows).
        factor = 2.0 ** min(connections, 1000)
        cap = self.max_discover_timeout_s

        def longer(configured_s: float) -> float:
            return max(configured_s, min(configured_s * factor, cap))

        return replace(self, discover_timeout_s=longer(self.discover_timeout_s),
                       legacy_probe_timeout_s=longer(self.legacy_probe_timeout_s))


# --- events (what the driver observed) ----------------------------------------------


@dataclass(frozen=True)
class Replied:
    """A success response whose id matched the named probe."""

    probe: Probe
    result: Any


@dataclass(frozen=True)
class ErrorReplied:
    """An error response whose id matched the named probe."""

    probe: Probe
    code: int
    message: str
    data: Any = None


@dataclass(frozen=True)
class TimedOut:
    probe: Probe
    after_s: float


@dataclass(frozen=True)
class Closed:
    """The transport ended: EOF on stdout, process exit, broken pipe."""

    detail: str


@dataclass(frozen=True)
class Unexpected:
    """A line that answers nothing we asked: not JSON-RPC, a response with an id we never
    sent, a server-sent request, an oversized line."""

    detail: str


@dataclass(frozen=True)
class ExchangeFailed:
    """The request for this probe will never be answered on this transport: its HTTP
    exchange ended without a JSON-RPC answer (a status without a JSON-RPC body, a network
    error, a stream that broke). Says nothing positive about the era."""

    probe: Probe
    detail: str


@dataclass(frozen=True)
class Rejected:
    """The transport refused the probe for a reason outside the protocol (HTTP 401/403:
    authentication). Never evidence of an era: no fallback follows it."""

    probe: Probe
    detail: str


Event = Replied | ErrorReplied | TimedOut | Closed | Unexpected | ExchangeFailed | Rejected


# --- decisions (what the driver must do) --------------------------------------------


@dataclass(frozen=True)
class SendDiscover:
    """Send ``server/discover`` stamped with ``version``, with a new id, and report a
    ``TimedOut`` if no answer is read within ``timeout_s`` of the write."""

    version: str
    timeout_s: float


@dataclass(frozen=True)
class SendInitialize:
    """Send the one legacy ``initialize`` (plain shape) proposing ``version``."""

    version: str
    timeout_s: float


@dataclass(frozen=True)
class SendInitialized:
    """Send ``notifications/initialized``: the legacy handshake is complete."""


@dataclass(frozen=True)
class Abandon:
    """Stop waiting for this probe's reply; a late reply is to be dropped."""

    probe: Probe


@dataclass(frozen=True)
class Renegotiate:
    """This connection holds two sessions (the server answered ``server/discover`` and
    accepted, or may have accepted, ``initialize``): carry nothing more over it; open a
    new one, on which the server counts as proven modern."""

    reason: str


@dataclass(frozen=True)
class Verdict:
    era: Era
    version: str
    capabilities: dict[str, Any]
    server_info: dict[str, Any] | None
    instructions: str | None
    evidence: tuple[str, ...]
    raw_result: Any = field(default=None, repr=False, compare=False)


class NextAttempt(enum.Enum):
    """What a refusal leaves open."""

    #: The server answered in a way that is no evidence (or broke the protocol): final.
    NEVER = "never"
    #: Nothing was heard in time: no evidence yet; a fresh connection may succeed later.
    LATER = "later"


class Remedy(enum.Enum):
    """What the operator can do to lift a refusal."""

    #: The server answered, but nothing it said proved the modern era, and it is not
    #: allowlisted: allowlisting it (``allow_legacy``) would let it have its one
    #: ``initialize``. A legacy-only server is refused this way.
    ALLOW_LEGACY = "allow_legacy"


@dataclass(frozen=True)
class Refusal:
    reason: str
    evidence: tuple[str, ...]
    next_attempt: NextAttempt = NextAttempt.NEVER
    #: The server proved modern before the negotiation failed.
    proven_modern: bool = False
    #: What would lift it, when the operator can (None: nothing the configuration can).
    remedy: Remedy | None = None
    #: With ``remedy``: the answer that proved no era, in short (``"answered
    #: server/discover with error -32601 'Method not found'"``).
    answered: str | None = None


@dataclass(frozen=True)
class Decide:
    verdict: Verdict


@dataclass(frozen=True)
class Fail:
    refusal: Refusal


Decision = (SendDiscover | SendInitialize | SendInitialized | Abandon | Decide | Fail
            | Renegotiate)


class State(enum.Enum):
    IDLE = "idle"
    DISCOVERING = "discovering"
    INITIALIZING = "initializing"
    #: Modern evidence arrived while ``initialize`` was outstanding: the decision it
    #: implies waits until the initialize is known not to have opened a session.
    CONFIRMING = "confirming"
    DECIDED = "decided"
    FAILED = "failed"
    #: Two sessions on one connection: ``Renegotiate`` was decided.
    ABANDONED = "abandoned"


class EraNegotiation:
    """One negotiation for one transport lifetime."""

    def __init__(self, config: NegotiationConfig | None = None) -> None:
        self.config = config or NegotiationConfig()
        self.state = State.IDLE
        self.evidence: list[str] = []
        self.verdict: Verdict | None = None
        self.refusal: Refusal | None = None
        self._attempts = 0
        # Set by modern evidence (here, or on an earlier connection): from then on nothing
        # may lead to ``initialize``, whatever the allowlist says.
        self._proven_modern = self.config.proven_modern
        # CONFIRMING: what the modern evidence decides, worked out once the outstanding
        # initialize is known not to have opened a session.
        self._held: Callable[[], list[Decision]] | None = None
        # Whether the latest server/discover got an answer of any kind (a deadline passing
        # is not one: the server may still answer).
        self._discover_answered = False
        # A legacy verdict was reached with a discover still unanswered.
        self._discover_pending_after_legacy = False
        # The latest answer that proved no era, in short: what a refusal for want of the
        # allowlist names.
        self._answered: str | None = None

    # -- public ------------------------------------------------------------------------

    def start(self) -> list[Decision]:
        if self.state is not State.IDLE:
            raise RuntimeError("negotiation already started")
        if not self.config.modern_versions:
            raise ValueError("at least one modern version must be configured")
        self.state = State.DISCOVERING
        if self._proven_modern:
            self._note("an earlier connection proved the server modern: initialize is "
                       "never sent on this one")
        return [self._discover(self.config.modern_versions[0])]

    def handle(self, event: Event) -> list[Decision]:
        if self.state is State.DECIDED:
            return self._after_verdict(event)
        if self.state in (State.FAILED, State.ABANDONED):
            # Final for this connection; later lines are the driver's business (a late
            # reply is dropped, a close after a verdict is a crash).
            return []
        if self.state is State.IDLE:
            raise RuntimeError("handle() before start()")
        if getattr(event, "probe", None) is Probe.DISCOVER and not isinstance(event, TimedOut):
            self._discover_answered = True
        if self.state is State.CONFIRMING:
            return self._confirming(event)
        if isinstance(event, Replied):
            return self._on_reply(event)
        if isinstance(event, ErrorReplied):
            return self._on_error(event)
        if isinstance(event, TimedOut):
            return self._on_timeout(event)
        if isinstance(event, Closed):
            self._note(f"transport closed: {event.detail}")
            return self._fail_closed_or_fall_back(ended=True)
        if isinstance(event, Unexpected):
            self._note(f"unexpected output: {event.detail}")
            self._answered = f"wrote output that answers nothing asked ({event.detail})"
            return self._fail_closed_or_fall_back(ended=False)
        if isinstance(event, ExchangeFailed):
            self._note(f"{event.probe.value} got no answer: {event.detail}")
            return self._unanswered(event.probe, "got no answer")
        if isinstance(event, Rejected):
            self._note(f"{event.probe.value} was rejected: {event.detail}")
            return self._fail(
                f"authentication failed ({event.detail}); an authentication challenge is "
                "not evidence of an era, so nothing else was tried"
            )
        raise TypeError(f"not a negotiation event: {event!r}")

    @property
    def done(self) -> bool:
        return self.state in (State.DECIDED, State.FAILED, State.ABANDONED)

    @property
    def proven_modern(self) -> bool:
        return self._proven_modern

    @property
    def awaits_discover(self) -> bool:
        """After a legacy verdict: whether a late answer to ``server/discover`` still
        matters (the driver keeps that request pending)."""
        return self._discover_pending_after_legacy

    # -- transitions -------------------------------------------------------------------

    def _on_reply(self, event: Replied) -> list[Decision]:
        if event.probe is Probe.DISCOVER:
            problem = discover_result_problem(event.result)
            if problem is not None:
                self._note(f"server/discover answered with a malformed DiscoverResult: {problem}")
                self._answered = "answered server/discover with a malformed DiscoverResult"
                return self._fail_closed_or_fall_back(ended=False)
            if self.state is State.INITIALIZING:
                self._proven_modern = True
                self._note("a valid DiscoverResult arrived while initialize was outstanding: "
                           "the verdict waits for the initialize answer (one session per "
                           "connection)")
                return self._confirm(lambda: self._modern_from_discover(event.result))
            return self._modern_from_discover(event.result)
        # Probe.INITIALIZE
        if self.state is not State.INITIALIZING:
            self._note("an initialize reply arrived although initialize was never sent")
            return self._fail("protocol violation during negotiation")
        problem = initialize_result_problem(event.result, self.config.legacy_versions)
        if problem is not None:
            self._note(f"initialize answered with an unacceptable InitializeResult: {problem}")
            return self._fail("the legacy initialize result was not acceptable")
        result = event.result
        version = result["protocolVersion"]
        info = result["serverInfo"]
        self._note(
            f"initialize accepted: protocolVersion {version}, serverInfo "
            f"{info['name']} {info['version']}"
        )
        verdict = Verdict(
            era=Era.LEGACY,
            version=version,
            capabilities=result["capabilities"],
            server_info=info,
            instructions=_optional_str(result.get("instructions")),
            evidence=tuple(self.evidence),
            raw_result=result,
        )
        # server/discover went out first and was never answered: should it still be, the
        # server holds two sessions on this connection (see _after_verdict).
        self._discover_pending_after_legacy = not self._discover_answered
        return self._decide(verdict, [SendInitialized()])

    def _on_error(self, event: ErrorReplied) -> list[Decision]:
        label = f"{event.probe.value} answered error {event.code} {event.message!r}"
        if not self._modern_evidence(event):
            if event.probe is Probe.INITIALIZE:
                self._note(label)
                return self._fail("the legacy initialize probe was answered with an error")
            self._note(f"{label}: not a recognized modern error, so not evidence of an era")
            self._answered = (f"answered {event.probe.value} with error {event.code} "
                              f"{_excerpt(event.message)!r}")
            return self._fail_closed_or_fall_back(ended=False)

        # From here on the peer has proven it is modern: never downgrade.
        self._proven_modern = True
        self._note(f"{label}: a modern error, so the peer is modern")
        if event.probe is Probe.INITIALIZE:
            # It refused the legacy session: the connection holds one session, modern.
            self.state = State.DISCOVERING
            return self._modern_error(event)
        if self.state is State.INITIALIZING:
            # The discover's answer came after we fell back: wait for the initialize.
            return self._confirm(lambda: self._modern_error(event))
        return self._modern_error(event)

    def _modern_evidence(self, event: ErrorReplied) -> bool:
        """A recognized modern error. Answering ``initialize``, -32022 counts only when
        every revision it lists as supported is one that is not legacy: a server that
        names legacy revisions there is negotiating the legacy handshake, not proving
        the modern era."""
        if not is_recognized_modern_error(event.code, event.data):
            return False
        if event.probe is Probe.INITIALIZE and event.code == UNSUPPORTED_PROTOCOL_VERSION:
            return not set(event.data["supported"]) & set(LEGACY_VERSIONS)
        return True

    def _modern_error(self, event: ErrorReplied) -> list[Decision]:
        """What a recognized modern error decides (the peer is modern)."""
        if event.code == UNSUPPORTED_PROTOCOL_VERSION:
            supported = list(event.data["supported"])
            shared = highest_shared(self.config.modern_versions, supported)
            if shared is None:
                return self._fail(
                    f"no shared modern protocol version: server supports {supported}, "
                    f"client supports {list(self.config.modern_versions)}"
                )
            # A server may reject the version it lists (a transient condition, or a test of
            # the retry itself): asking again with that version is legitimate, and the
            # attempt bound below ends a server that keeps doing it.
            if self._attempts >= self.config.max_discover_attempts:
                return self._fail(
                    f"gave up after {self._attempts} server/discover attempts"
                )
            self.state = State.DISCOVERING
            return [self._discover(shared)]
        if event.code == MISSING_REQUIRED_CLIENT_CAPABILITY:
            required = event.data["requiredCapabilities"]
            return self._fail(
                f"modern server requires client capabilities this host does not declare: {required}"
            )
        assert event.code == HEADER_MISMATCH
        return self._fail(f"modern server reported a header mismatch: {event.message}")

    def _on_timeout(self, event: TimedOut) -> list[Decision]:
        self._note(f"{event.probe.value} got no answer within {event.after_s:g} s")
        return self._unanswered(event.probe, "timed out", silent=True)

    def _unanswered(self, probe: Probe, how: str, *, silent: bool = False) -> list[Decision]:
        """A probe that will never be answered (deadline passed, exchange failed).
        ``silent``: nothing at all was heard, which is no evidence against the server."""
        later = NextAttempt.LATER if silent else NextAttempt.NEVER
        if probe is Probe.INITIALIZE:
            return self._fail(f"the legacy initialize probe {how}", later)
        if self.state is State.INITIALIZING:
            return []  # the discover probe is moot once initialize is out
        return self._fail_closed_or_fall_back(ended=False, silent=silent)

    # -- one session per connection ------------------------------------------------------

    def _confirm(self, decide: Callable[[], list[Decision]]) -> list[Decision]:
        """Modern evidence while ``initialize`` is outstanding: what it decides is worked
        out only once the initialize is known not to have opened a session."""
        self.state = State.CONFIRMING
        self._held = decide
        return []

    def _confirming(self, event: Event) -> list[Decision]:
        if isinstance(event, ErrorReplied) and event.probe is Probe.INITIALIZE:
            self._note(f"initialize answered error {event.code} {event.message!r}: the "
                       "server refused the legacy session, so the modern evidence stands")
            decide, self._held = self._held, None
            assert decide is not None
            self.state = State.DISCOVERING
            return decide()
        if isinstance(event, Replied) and event.probe is Probe.INITIALIZE:
            return self._abandon("the server answered server/discover and accepted "
                                 "initialize: this connection holds two sessions")
        if isinstance(event, (TimedOut, ExchangeFailed, Rejected)) \
                and event.probe is Probe.INITIALIZE:
            self._note(f"initialize got no answer ({event!r})")
            return self._abandon("the server answered server/discover while initialize "
                                 "went unanswered: it may hold a legacy session on this "
                                 "connection")
        if isinstance(event, Closed):
            self._note(f"transport closed: {event.detail}")
            return self._fail("the transport closed while waiting for the initialize answer")
        if isinstance(event, Unexpected):
            self._note(f"unexpected output: {event.detail}")
        return []

    def _after_verdict(self, event: Event) -> list[Decision]:
        """Only a legacy verdict with its discover still unanswered listens on."""
        if not self._discover_pending_after_legacy or getattr(event, "probe", None) \
                is not Probe.DISCOVER:
            return []
        if isinstance(event, Replied) and discover_result_problem(event.result) is None:
            self._discover_pending_after_legacy = False
            self._proven_modern = True
            self._note("a valid DiscoverResult arrived after the legacy verdict")
            return self._abandon("the server accepted initialize and then answered "
                                 "server/discover: this connection holds two sessions")
        if isinstance(event, (Replied, ErrorReplied, ExchangeFailed, Rejected)):
            self._discover_pending_after_legacy = False  # answered: one session
        return []

    def _abandon(self, reason: str) -> list[Decision]:
        self._proven_modern = True
        self._note(f"{reason}; starting afresh on a new connection, without initialize")
        self.state = State.ABANDONED
        self._held = None
        return [Renegotiate(reason)]

    # -- helpers -----------------------------------------------------------------------

    def _modern_from_discover(self, result: dict[str, Any]) -> list[Decision]:
        supported = result["supportedVersions"]
        shared = highest_shared(self.config.modern_versions, supported)
        if shared is None:
            self._note(f"DiscoverResult lists supportedVersions {supported}")
            return self._fail(
                f"no shared modern protocol version: server supports {supported}, "
                f"client supports {list(self.config.modern_versions)}"
            )
        self._note(f"DiscoverResult: supportedVersions {supported}; selected {shared}")
        meta = result.get("_meta")
        info = meta.get(META_SERVER_INFO) if isinstance(meta, dict) else None
        verdict = Verdict(
            era=Era.MODERN,
            version=shared,
            capabilities=result["capabilities"],
            server_info=info if isinstance(info, dict) else None,
            instructions=_optional_str(result.get("instructions")),
            evidence=tuple(self.evidence),
            raw_result=result,
        )
        return self._decide(verdict, [])

    def _fail_closed_or_fall_back(self, *, ended: bool, silent: bool = False
                                  ) -> list[Decision]:
        """Ambiguous evidence: fail closed, or spend the allowlisted peer's one
        ``initialize``. A closed transport cannot carry an ``initialize``. Silence fails
        with ``LATER``: it proves nothing against the server."""
        later = NextAttempt.LATER if silent else NextAttempt.NEVER
        if self.state is State.INITIALIZING:
            if ended:
                return self._fail("the transport closed during the legacy initialize probe")
            return []  # still waiting for the initialize reply under its own deadline
        if ended:
            return self._fail("the transport closed before the peer proved an era")
        if self._proven_modern:
            return self._fail(
                "the peer proved it is modern, then gave no usable answer; a modern peer "
                "is never downgraded to initialize", later)
        if not self.config.allow_legacy:
            if silent:
                return self._fail(
                    "no answer yet, so no evidence of an era; the peer is not allowlisted "
                    "for legacy (allow_legacy=False), so initialize was never sent; it is "
                    "probed again later on a fresh connection", later)
            return self._fail(
                "no positive evidence of a modern peer, and the peer is not allowlisted "
                "for legacy (allow_legacy=False), so initialize was never sent",
                remedy=Remedy.ALLOW_LEGACY if self._answered is not None else None)
        version = self.config.legacy_versions[0]
        self._note(f"peer is allowlisted for legacy: sending one initialize ({version})")
        self.state = State.INITIALIZING
        return [SendInitialize(version, self.config.legacy_probe_timeout_s)]

    def _discover(self, version: str) -> SendDiscover:
        self._attempts += 1
        self._discover_answered = False
        return SendDiscover(version, self.config.discover_timeout_s)

    def _decide(self, verdict: Verdict, then: list[Decision]) -> list[Decision]:
        self.state = State.DECIDED
        self.verdict = verdict
        return [*then, Decide(verdict)]

    def _fail(self, reason: str, next_attempt: NextAttempt = NextAttempt.NEVER, *,
              remedy: Remedy | None = None) -> list[Decision]:
        self.state = State.FAILED
        self.refusal = Refusal(reason, tuple(self.evidence), next_attempt,
                               self._proven_modern, remedy,
                               self._answered if remedy is not None else None)
        return [Fail(self.refusal)]

    def _note(self, line: str) -> None:
        self.evidence.append(line)


#: How much of a server's own words a refusal's short form keeps (it is logged).
_EXCERPT = 120


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
