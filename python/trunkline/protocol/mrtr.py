"""Multi round-trip requests (MRTR) as a pure state machine: events in, decisions out.

When a ``tools/call``, ``resources/read`` or ``prompts/get`` result has ``resultType:
"input_required"`` (MCP 2026-07-28, basic/patterns/mrtr), the server wants client input
before it can finish:

1. ``MrtrLoop.on_result`` checks the ``InputRequiredResult`` (shape, bounds, and that every
   ``inputRequests`` entry is of a kind the host *declared* in its capabilities) and
   answers ``NeedInput`` with the entries, in the server's order. The driver hands each
   one to the host's callback for its kind (elicitation, sampling, roots).
2. ``MrtrLoop.responses_ready`` takes the callbacks' results, one per key, and answers
   ``Resend``: the params of the retry. They are the original params, byte for byte, plus
   ``inputResponses`` and the server's ``requestState`` spliced in as the exact bytes the
   server sent (``raw_member``): never decoded and re-encoded, since re-encoding
   rewrites escapes such as ``\\u00e9`` or ``\\/``. The driver sends them as a new request
   with a *new* JSON-RPC id and the *same* ``clientCapabilities`` (docs/explanation/architecture.md,
   "Capabilities are stable").
3. The retry's result goes to ``on_result`` again: another round, or ``Done``.

Where the spec is silent the machine is strict (docs/explanation/architecture.md, "Bounded input
rounds"): it bounds the rounds, the total
time (a clock is injected: every call takes ``now``), the count and size of
``inputRequests`` and the size of ``requestState``; it fails the call locally
(``InputNotSupported``) when the server asks for something the host did not declare (a
capability, the ``url`` elicitation mode, tool-bearing sampling) instead of retrying; and
``input_required`` on any other method is a protocol error. ``requestState`` never appears
in an error message or a repr: it is opaque and may be security-relevant.

A request-state-only result (no ``inputRequests``, e.g. load shedding) needs no input:
``on_result`` answers ``Resend`` at once.

The machine does no I/O and never calls the host: a driver owns the callbacks, the ids,
the writes and the timers (``NeedInput.deadline`` bounds the callbacks).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from .._codec import CodecError, raw_member
from ..errors import InputNotSupported, MalformedMessage, ProtocolFailure
from .validate import json_type
from .versions import META_CLIENT_CAPABILITIES

#: The only methods whose result may be an ``InputRequiredResult`` (basic/patterns/mrtr).
MRTR_METHODS: frozenset[str] = frozenset({"tools/call", "resources/read", "prompts/get"})

ELICIT = "elicitation/create"
SAMPLE = "sampling/createMessage"
ROOTS = "roots/list"

#: Each input request method -> the top-level client capability that gates it.
CAPABILITY_OF: Mapping[str, str] = {ELICIT: "elicitation", SAMPLE: "sampling", ROOTS: "roots"}

#: The host's answer to one input request, of one kind: ``params`` in, result out. The
#: same handlers answer a modern server's ``inputRequests`` and a legacy server's own
#: requests of those kinds.
InputHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

_ELICIT_ACTIONS = frozenset({"accept", "decline", "cancel"})
_ROLES = frozenset({"user", "assistant"})


@dataclass(frozen=True)
class MrtrLimits:
    #: ``input_required`` results accepted for one call; one more fails it.
    max_rounds: int = 10
    #: Seconds from the original request to the last retry. Generous: a round may wait for
    #: a person (a form, a browser flow behind a URL elicitation).
    max_total_s: float = 600.0
    #: Entries in one ``inputRequests`` map.
    max_input_requests: int = 16
    #: Raw JSON size of one ``inputRequests`` value, in bytes.
    max_input_requests_bytes: int = 1 << 20
    #: Raw JSON size of ``requestState`` (quotes and escapes included), in bytes.
    max_request_state_bytes: int = 256 << 10

    def __post_init__(self) -> None:
        for name in (
            "max_rounds",
            "max_input_requests",
            "max_input_requests_bytes",
            "max_request_state_bytes",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int")
        if not (isinstance(self.max_total_s, (int, float)) and self.max_total_s > 0):
            raise ValueError("max_total_s must be positive")


@dataclass(frozen=True)
class InputRequestItem:
    """One entry of ``inputRequests``, checked and gated."""

    key: str
    #: ``elicitation/create``, ``sampling/createMessage`` or ``roots/list``.
    method: str
    #: The entry's ``params`` as sent (``{}`` for a ``roots/list`` without params).
    params: dict[str, Any]
    #: ``"form"`` or ``"url"`` for elicitation (absent mode means form); None otherwise.
    mode: str | None = None

    @property
    def capability(self) -> str:
        """The client capability that gates this kind (``elicitation``, ...)."""
        return CAPABILITY_OF[self.method]


# --- decisions -----------------------------------------------------------------------


@dataclass(frozen=True)
class NeedInput:
    """Run the host's callback for every request (all of them: the retry must answer each
    key), then call ``responses_ready``. Give up at ``deadline`` (the caller's clock)."""

    requests: tuple[InputRequestItem, ...]
    round: int
    deadline: float


@dataclass(frozen=True)
class Resend:
    """Send ``params`` (serialized JSON) as a new request of the same method with a NEW
    JSON-RPC id, stamped with ``client_capabilities`` exactly as on the original request.
    ``params`` holds the server's ``requestState`` and is left out of the repr; do not log
    it verbatim."""

    params: bytes = field(repr=False)
    round: int
    client_capabilities: Mapping[str, Any] = field(repr=False)


@dataclass(frozen=True)
class Done:
    """The final result (``resultType`` ``"complete"``, or absent from a legacy server).
    Its method-specific shape is the caller's to check."""

    result: dict[str, Any]


@dataclass(frozen=True)
class Fail:
    """The call fails with ``error``; nothing more is sent for it."""

    error: ProtocolFailure


Decision = NeedInput | Resend | Done | Fail


class State(enum.Enum):
    AWAITING_RESULT = "awaiting_result"
    AWAITING_INPUT = "awaiting_input"
    DONE = "done"
    FAILED = "failed"


class MrtrLoop:
    """The MRTR rounds of one call, from its original request to its final result.

    ``original_params`` are the call's params without ``inputResponses`` or
    ``requestState``; they are serialized once here and every retry repeats those bytes.
    ``declared_capabilities`` are the ``clientCapabilities`` stamped on the original
    request (``{}`` for none): they decide which input kinds are accepted, and the driver
    stamps the same on every retry. ``now`` starts the total-time bound.
    """

    def __init__(
        self,
        method: str,
        original_params: Mapping[str, Any],
        declared_capabilities: Mapping[str, Any],
        limits: MrtrLimits | None = None,
        now: float = 0.0,
        *,
        server: str | None = None,
        final_types: frozenset[str] = frozenset(),
    ) -> None:
        """``final_types``: result types besides ``complete`` that end the rounds, those of
        an extension negotiated for this request (``task``: the server ran the request
        as a task once it had its input). The caller takes them on."""
        if not isinstance(original_params, Mapping):
            raise TypeError("original_params must be a mapping")
        for reserved in ("inputResponses", "requestState"):
            if reserved in original_params:
                raise ValueError(f"original_params must not carry {reserved!r}: the loop adds it")
        if not isinstance(declared_capabilities, Mapping):
            raise TypeError("declared_capabilities must be a mapping")
        for name in CAPABILITY_OF.values():
            declared = declared_capabilities.get(name, {})
            if not isinstance(declared, Mapping):
                raise ValueError(f"capability {name!r} must be an object")
        meta = original_params.get("_meta")
        if isinstance(meta, Mapping) and META_CLIENT_CAPABILITIES in meta \
                and meta[META_CLIENT_CAPABILITIES] != declared_capabilities:
            raise ValueError(
                "original_params._meta carries clientCapabilities other than "
                "declared_capabilities; the retries must declare what the original did"
            )
        self.method = method
        self.server = server
        self.final_types = final_types
        self.limits = limits or MrtrLimits()
        self.capabilities = declared_capabilities
        self.started = now
        self.state = State.AWAITING_RESULT
        self.rounds = 0  # input_required results seen
        self.error: ProtocolFailure | None = None
        # The original params, serialized once: every retry repeats these exact bytes.
        self._base = orjson.dumps(dict(original_params))
        self._pending: tuple[InputRequestItem, ...] = ()
        self._state_raw: bytes | None = None  # this round's requestState, as sent

    # -- public ------------------------------------------------------------------------

    @property
    def deadline(self) -> float:
        """When the total-time bound runs out, on the caller's clock."""
        return self.started + self.limits.max_total_s

    @property
    def done(self) -> bool:
        return self.state in (State.DONE, State.FAILED)

    def on_result(self, result: Any, raw_result: bytes, now: float) -> Decision:
        """The result of the original request or of a retry: ``result`` decoded, and
        ``raw_result`` the exact bytes of the JSON-RPC ``result`` value it was decoded from
        (``Event.result``), where ``requestState`` is read byte for byte.

        A final result is ``Done`` whatever the time: the work is done, and a side effect
        is better reported than hidden."""
        if self.state is not State.AWAITING_RESULT:
            raise RuntimeError(f"on_result() in state {self.state.value}")
        if not isinstance(result, dict):
            return self._fail(MalformedMessage, f"{self.method} result is not a JSON object")
        result_type = result.get("resultType", "complete")
        if result_type == "complete" or result_type in self.final_types:
            # Absent is "complete" for earlier-era servers; whether a modern server may
            # omit it is the era-aware caller's check.
            self.state = State.DONE
            return Done(result)
        if result_type != "input_required":
            return self._fail(MalformedMessage, f"{self.method} resultType is {result_type!r}")
        if self.method not in MRTR_METHODS:
            return self._fail(
                ProtocolFailure,
                f"resultType 'input_required' on {self.method}: only tools/call, "
                "resources/read and prompts/get may ask for client input",
            )
        self.rounds += 1
        if self.rounds > self.limits.max_rounds:
            return self._fail(
                ProtocolFailure,
                f"the server still asks for input after {self.limits.max_rounds} rounds "
                "(max_rounds)",
            )
        if now > self.deadline:
            return self._fail(ProtocolFailure, self._late(now))
        problem = self._take_input_required(result, raw_result)
        if problem is not None:
            return problem
        if not self._pending:
            # requestState only (or an empty map): nothing to ask anyone, retry at once.
            return self._resend(None if "inputRequests" not in result else {})
        self.state = State.AWAITING_INPUT
        return NeedInput(self._pending, self.rounds, self.deadline)

    def responses_ready(self, responses: Mapping[str, Any], now: float) -> Resend | Fail:
        """The host's callbacks answered: ``responses`` maps every requested key (and only
        those) to an ``ElicitResult``, ``CreateMessageResult`` or ``ListRootsResult``,
        without ``resultType``. A response of the wrong shape is the host's bug and raises
        ``ValueError``."""
        if self.state is not State.AWAITING_INPUT:
            raise RuntimeError(f"responses_ready() in state {self.state.value}")
        if now > self.deadline:
            return self._fail(ProtocolFailure, self._late(now))
        if not isinstance(responses, Mapping):
            raise TypeError("responses must be a mapping of inputRequests keys to results")
        wanted = [item.key for item in self._pending]
        missing = [k for k in wanted if k not in responses]
        extra = [k for k in responses if k not in set(wanted)]
        if missing or extra:
            raise ValueError(
                f"responses must answer exactly the requested keys: missing {missing}, "
                f"unexpected {extra}"
            )
        for item in self._pending:
            check_response(item, responses[item.key])
        ordered = {item.key: responses[item.key] for item in self._pending}
        return self._resend(ordered)

    # -- transitions -------------------------------------------------------------------

    def _take_input_required(self, result: dict[str, Any], raw: bytes) -> Fail | None:
        """Check one ``InputRequiredResult``; on success set this round's pending items and
        raw ``requestState``."""
        has_requests = "inputRequests" in result
        has_state = "requestState" in result
        if not (has_requests or has_state):
            return self._fail(
                MalformedMessage,
                "input_required result has neither inputRequests nor requestState",
            )
        state_raw: bytes | None = None
        if has_state:
            if not isinstance(result["requestState"], str):
                return self._fail(
                    MalformedMessage,
                    f"requestState is a JSON {json_type(result['requestState'])}, not a string",
                )
            try:
                state_raw = raw_member(raw, "requestState")
            except CodecError as exc:
                return self._fail(MalformedMessage, f"input_required result: {exc}")
            if state_raw is None or not state_raw.startswith(b'"'):
                # The decoded result and its raw bytes disagree: a driver bug, not the
                # server's.
                raise ValueError("raw_result is not the result that was decoded")
            if len(state_raw) > self.limits.max_request_state_bytes:
                return self._fail(
                    ProtocolFailure,
                    f"requestState is {len(state_raw)} bytes, over the "
                    f"{self.limits.max_request_state_bytes}-byte limit",
                )
        items: list[InputRequestItem] = []
        if has_requests:
            requests = result["inputRequests"]
            if not isinstance(requests, dict):
                return self._fail(
                    MalformedMessage,
                    f"inputRequests is a JSON {json_type(requests)}, not an object",
                )
            if len(requests) > self.limits.max_input_requests:
                return self._fail(
                    ProtocolFailure,
                    f"inputRequests has {len(requests)} entries, over the limit of "
                    f"{self.limits.max_input_requests}",
                )
            try:
                requests_raw = raw_member(raw, "inputRequests")
            except CodecError as exc:
                return self._fail(MalformedMessage, f"input_required result: {exc}")
            if requests_raw is None:
                raise ValueError("raw_result is not the result that was decoded")
            if len(requests_raw) > self.limits.max_input_requests_bytes:
                return self._fail(
                    ProtocolFailure,
                    f"inputRequests is {len(requests_raw)} bytes, over the "
                    f"{self.limits.max_input_requests_bytes}-byte limit",
                )
            for key, entry in requests.items():
                item = parse_input_request(key, entry)
                if isinstance(item, str):
                    return self._fail(MalformedMessage, f"inputRequests[{key!r}]: {item}")
                items.append(item)
            # Gate every entry before the host sees any: a round that cannot be answered
            # in full must not prompt the user for part of it.
            for item in items:
                refusal = undeclared(item, self.capabilities)
                if refusal is not None:
                    what, why = refusal
                    self.state = State.FAILED
                    self.error = InputNotSupported(
                        f"the server asked for {what} (inputRequests[{item.key!r}]), but {why}; "
                        "the call fails here instead of retrying",
                        key=item.key,
                        kind=what,
                        server=self.server,
                        method=self.method,
                    )
                    return Fail(self.error)
        self._pending = tuple(items)
        self._state_raw = state_raw
        return None

    def _resend(self, responses: dict[str, Any] | None) -> Resend:
        extra: list[bytes] = []
        if responses is not None:
            try:
                extra.append(b'"inputResponses":' + orjson.dumps(responses))
            except TypeError as exc:
                raise ValueError(f"responses are not JSON-serializable: {exc}") from None
        if self._state_raw is not None:
            extra.append(b'"requestState":' + self._state_raw)
        body = b",".join(extra)
        base = self._base
        if body:
            sep = b"" if base == b"{}" else b","
            params = base[:-1] + sep + body + b"}"
        else:
            params = base
        # This round's inputs belong to this retry only (basic/patterns/mrtr).
        self._pending = ()
        self._state_raw = None
        self.state = State.AWAITING_RESULT
        return Resend(params, self.rounds, self.capabilities)

    def _fail(self, cls: type[ProtocolFailure], message: str) -> Fail:
        self.state = State.FAILED
        self.error = cls(message, server=self.server, method=self.method)
        return Fail(self.error)

    def _late(self, now: float) -> str:
        return (
            f"input_required rounds exceeded the {self.limits.max_total_s:g} s total-time "
            f"limit ({now - self.started:.1f} s after the original request, round {self.rounds})"
        )


# --- checks --------------------------------------------------------------------------


def parse_input_request(key: str, entry: Any) -> InputRequestItem | str:
    """One ``inputRequests`` entry (``{"method", "params"}``) as an item, or what is wrong
    with it."""
    if not isinstance(entry, dict):
        return f"is a JSON {json_type(entry)}, not an object"
    method = entry.get("method")
    if not isinstance(method, str):
        return "has no string 'method'"
    if method not in CAPABILITY_OF:
        return (
            f"unknown method {method!r} (an input request is elicitation/create, "
            "sampling/createMessage or roots/list)"
        )
    params = entry.get("params")
    if method == ROOTS:
        if params is None and "params" not in entry:
            params = {}
        if not isinstance(params, dict):
            return f"roots/list params is a JSON {json_type(params)}, not an object"
        return InputRequestItem(key, method, params)
    if not isinstance(params, dict):
        return f"{method} has no params object"
    if method == ELICIT:
        mode = params.get("mode", "form")
        if not isinstance(mode, str):
            return f"elicitation mode is a JSON {json_type(mode)}, not a string"
        if not isinstance(params.get("message"), str):
            return "elicitation has no string 'message'"
        if mode == "form":
            schema = params.get("requestedSchema")
            if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
                return "form elicitation has no requestedSchema object with properties"
            if schema.get("type") != "object":
                return "form elicitation requestedSchema type is not 'object'"
        elif mode == "url" and not isinstance(params.get("url"), str):
            return "url elicitation has no string 'url'"
        # Any other mode string is checked against the capabilities, which declare none.
        return InputRequestItem(key, method, params, mode)
    # sampling/createMessage
    messages = params.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return "sampling has no 'messages' array of objects"
    max_tokens = params.get("maxTokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        return "sampling has no integer 'maxTokens'"
    if "tools" in params and not isinstance(params["tools"], list):
        return "sampling 'tools' is not an array"
    if "toolChoice" in params and not isinstance(params["toolChoice"], dict):
        return "sampling 'toolChoice' is not an object"
    return InputRequestItem(key, method, params)


def undeclared(item: InputRequestItem, caps: Mapping[str, Any]) -> tuple[str, str] | None:
    """(what was asked, why it is refused) when ``caps`` does not cover ``item``."""
    cap = item.capability
    if item.method == ELICIT:
        what = f"{ELICIT} ({item.mode} mode)"
        if cap not in caps:
            return what, "the host did not declare the 'elicitation' capability"
        declared = caps[cap]
        # ``{}`` alone means form only (client/elicitation).
        form = "form" in declared or "url" not in declared
        if item.mode == "form" and not form:
            return what, "the host declared elicitation without the form mode"
        if item.mode == "url" and "url" not in declared:
            return what, "the host did not declare elicitation.url"
        if item.mode not in ("form", "url"):
            return what, "no capability covers that elicitation mode"
        return None
    if item.method == SAMPLE:
        with_tools = "tools" in item.params or "toolChoice" in item.params
        what = f"{SAMPLE} with tools" if with_tools else SAMPLE
        if cap not in caps:
            return what, "the host did not declare the 'sampling' capability"
        if with_tools and "tools" not in caps[cap]:
            return what, "the host did not declare sampling.tools"
        return None
    if cap not in caps:
        return ROOTS, "the host did not declare the 'roots' capability"
    return None


def check_response(item: InputRequestItem, response: Any) -> None:
    """Raise ``ValueError`` when the host's answer to ``item`` has the wrong shape."""
    where = f"response to inputRequests[{item.key!r}] ({item.method})"
    if not isinstance(response, Mapping):
        raise ValueError(f"{where} is not an object")
    if "resultType" in response:
        raise ValueError(f"{where} must not carry resultType (it is not a Result)")
    if item.method == ELICIT:
        action = response.get("action")
        if not isinstance(action, str) or action not in _ELICIT_ACTIONS:
            raise ValueError(f"{where}: action must be accept, decline or cancel")
        if "content" in response:
            if action != "accept" or item.mode != "form":
                raise ValueError(f"{where}: content is only for an accepted form")
            content = response["content"]
            if not isinstance(content, Mapping) or not all(
                _is_elicit_value(v) for v in content.values()
            ):
                raise ValueError(
                    f"{where}: content must map names to strings, numbers, booleans or "
                    "string arrays"
                )
    elif item.method == SAMPLE:
        role = response.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            raise ValueError(f"{where}: role must be user or assistant")
        if not isinstance(response.get("model"), str):
            raise ValueError(f"{where}: model must be a string")
        content = response.get("content")
        if not isinstance(content, (Mapping, list)):
            raise ValueError(f"{where}: content must be a content block or an array of them")
    else:
        roots = response.get("roots")
        if not isinstance(roots, list):
            raise ValueError(f"{where}: roots must be an array")
        for root in roots:
            uri = root.get("uri") if isinstance(root, Mapping) else None
            if not isinstance(uri, str) or not uri.startswith("file://"):
                raise ValueError(f"{where}: every root needs a file:// uri")


def _is_elicit_value(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (str, int)):  # bool is an int
        return True
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
