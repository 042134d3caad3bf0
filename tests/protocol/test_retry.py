"""The retry policy, with no I/O: backoff bounds, what may be repeated, limits, deadlines,
idempotency keys, and the small async driver on a virtual clock (never wall time)."""

from __future__ import annotations

import asyncio
import math
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.catalog.model import ToolEntry
from trunkline.errors import (
    AuthenticationFailed,
    ConfigurationError,
    EraRefused,
    HttpStatusError,
    MalformedMessage,
    OversizedMessage,
    RequestTimeout,
    SchemaViolation,
    ServerError,
    ServerUnavailable,
    SpawnFailed,
    StreamBroken,
    TransportLost,
)
from trunkline.parent.retry import run_with_retries
from trunkline.protocol import retry as r
from trunkline.protocol.retry import GiveUp, GiveUpReason, Outcome, Retry

# Spelled out from the issue, not copied from the module.
READS = ["tools/list", "prompts/list", "resources/list", "resources/templates/list",
         "resources/read", "prompts/get", "server/discover", "completion/complete"]
MAYBE_DELIVERED = [TransportLost("pipe closed"), RequestTimeout("no reply", timeout_s=1.0)]
NOT_SENT = [ServerUnavailable("restarting", state="restarting"),
            ServerUnavailable("negotiating", state="negotiating")]
FINAL_ERRORS = [
    ServerError("parse error", code=-32700),
    ServerError("invalid request", code=-32600),
    ServerError("method not found", code=-32601),
    ServerError("invalid params", code=-32602),
    ServerError("missing capability", code=-32021),
    ServerError("legacy", code=-32000),
    ServerError("app", code=42),
    MalformedMessage("garbage"),
    SchemaViolation("bad structuredContent"),
    EraRefused("not modern", evidence=["probe timed out"]),
    SpawnFailed("no such file"),
    ConfigurationError("bad config"),
    ServerUnavailable("stopped", state="stopped"),
    ServerUnavailable("intensity limit", state="unavailable"),
    AuthenticationFailed("HTTP 401", status=401),
    AuthenticationFailed("HTTP 403", status=403),
    HttpStatusError("not found", status=404),
    HttpStatusError("server bug", status=500),
    ValueError("a bug in the caller"),
]


def rng() -> random.Random:
    return random.Random(1234)


def decide(plan: r.RetryPlan, exc: BaseException, *, made: int = 1,
           sent: bool | None = None, remaining_s: float | None = None) -> Retry | GiveUp:
    return plan.decide(made, r.classify(exc, sent=sent), rng=rng(), remaining_s=remaining_s)


class FakeClock:
    """Virtual time: ``sleep`` advances it and records each delay; nothing waits."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.slept.append(seconds)
        self.t += seconds


class Script:
    """A ``send`` that raises (or returns) from a list, recording every attempt."""

    def __init__(self, steps, clock: FakeClock | None = None, took_s: float = 0.0) -> None:
        self.steps = list(steps)
        self.attempts: list[r.Attempt] = []
        self.started_at: list[float] = []
        self.clock = clock
        self.took_s = took_s

    async def __call__(self, attempt: r.Attempt):
        self.attempts.append(attempt)
        if self.clock is not None:
            self.started_at.append(self.clock.now())
            self.clock.t += self.took_s
        step = self.steps[min(len(self.attempts) - 1, len(self.steps) - 1)]
        if isinstance(step, BaseException):
            raise step
        return step


def drive(send, plan, clock: FakeClock, seed: int = 7, **kw):
    return asyncio.run(run_with_retries(send, plan, sleep=clock.sleep, now=clock.now,
                                        rng=random.Random(seed), **kw))


# --- backoff -------------------------------------------------------------------------

policies = st.builds(
    r.RetryPolicy,
    base_s=st.floats(0, 10, allow_nan=False),
    factor=st.floats(1, 10, allow_nan=False),
    cap_s=st.floats(0, 600, allow_nan=False),
    max_attempts=st.integers(1, 20),
)


@given(policies, st.integers(0, 5000), st.integers(0, 2**32 - 1))
def test_delay_within_bounds_for_every_attempt(policy, attempt, seed):
    try:
        uncapped = policy.base_s * policy.factor ** attempt
    except OverflowError:
        uncapped = 0.0 if policy.base_s == 0 else math.inf
    bound = min(policy.cap_s, uncapped)
    assert policy.ceiling(attempt) == bound
    assert 0.0 <= policy.delay(attempt, random.Random(seed)) <= bound


def test_full_jitter_draws_from_zero_to_the_exact_ceiling():
    calls = []

    class Spy(random.Random):
        def uniform(self, a, b):
            calls.append((a, b))
            return super().uniform(a, b)

    policy = r.RetryPolicy(base_s=0.5, factor=3.0, cap_s=10.0)
    for k in range(5):
        policy.delay(k, Spy(0))
    assert calls == [(0.0, 0.5), (0.0, 1.5), (0.0, 4.5), (0.0, 10.0), (0.0, 10.0)]


def test_full_jitter_range_is_actually_used():
    policy = r.RetryPolicy(base_s=1.0, factor=2.0, cap_s=100.0)
    g = random.Random(99)
    samples = [policy.delay(3, g) for _ in range(4000)]  # ceiling 8.0
    assert min(samples) < 0.1 and max(samples) > 7.9
    assert 3.6 < sum(samples) / len(samples) < 4.4  # uniform: mean is half the ceiling
    assert sum(s < 4.0 for s in samples) > 1600  # not "ceiling/2 plus jitter"


@pytest.mark.parametrize("attempt", [4, 10, 64, 2000, 10**6])
def test_cap_respected_even_when_the_exponent_overflows(attempt):
    policy = r.RetryPolicy(base_s=0.1, factor=2.0, cap_s=1.5)
    assert policy.ceiling(attempt) == 1.5
    g = random.Random(attempt)
    assert all(0.0 <= policy.delay(attempt, g) <= 1.5 for _ in range(200))


def test_backoff_grows_until_the_cap():
    policy = r.RetryPolicy(base_s=0.1, factor=2.0, cap_s=1.0)
    ceilings = [policy.ceiling(k) for k in range(6)]
    assert ceilings == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])


@pytest.mark.parametrize("kw", [
    {"max_attempts": 0}, {"max_attempts": -1}, {"max_attempts": 2.5},
    {"max_attempts": True},
    {"base_s": -0.1}, {"cap_s": -1.0}, {"factor": 0.5}, {"base_s": float("nan")},
])
def test_policy_rejects_unbounded_or_nonsense_settings(kw):
    with pytest.raises(ConfigurationError):
        r.RetryPolicy(**kw)


# --- classification ------------------------------------------------------------------

@pytest.mark.parametrize(("exc", "default", "not_sent", "sent"), [
    (ServerUnavailable("restarting", state="restarting"),
     Outcome.NOT_SENT, Outcome.NOT_SENT, Outcome.MAYBE_DELIVERED_TRANSPORT_LOST),
    (ServerUnavailable("worker says unavailable"),
     Outcome.NOT_SENT, Outcome.NOT_SENT, Outcome.MAYBE_DELIVERED_TRANSPORT_LOST),
    (TransportLost("eof", exit_code=1),
     Outcome.MAYBE_DELIVERED_TRANSPORT_LOST, Outcome.NOT_SENT,
     Outcome.MAYBE_DELIVERED_TRANSPORT_LOST),
    (RequestTimeout("no reply"),
     Outcome.MAYBE_DELIVERED_TIMEOUT, Outcome.NOT_SENT, Outcome.MAYBE_DELIVERED_TIMEOUT),
    (ServerError("internal", code=-32603),
     Outcome.SERVER_FAULT, Outcome.SERVER_FAULT, Outcome.SERVER_FAULT),
    (StreamBroken("the response stream broke before its end"),
     Outcome.MAYBE_DELIVERED_TRANSPORT_LOST, Outcome.NOT_SENT,
     Outcome.MAYBE_DELIVERED_TRANSPORT_LOST),
    (HttpStatusError("overloaded", status=503),
     Outcome.MAYBE_DELIVERED_TRANSPORT_LOST, Outcome.NOT_SENT,
     Outcome.MAYBE_DELIVERED_TRANSPORT_LOST),
])
def test_classification_table(exc, default, not_sent, sent):
    assert r.classify(exc) is default
    assert r.classify(exc, sent=False) is not_sent
    assert r.classify(exc, sent=True) is sent


@pytest.mark.parametrize("exc", FINAL_ERRORS, ids=lambda e: f"{type(e).__name__}")
@pytest.mark.parametrize("sent", [None, False, True])
def test_final_errors_stay_final_whatever_sent_says(exc, sent):
    assert r.classify(exc, sent=sent) is Outcome.FINAL


# --- what may be repeated ------------------------------------------------------------

@pytest.mark.parametrize("method", READS)
@pytest.mark.parametrize("exc", MAYBE_DELIVERED + NOT_SENT, ids=lambda e: type(e).__name__)
def test_reads_are_retried_after_transport_loss_and_timeouts(method, exc):
    plan = r.plan_call(r.RetryPolicy(max_attempts=3), method)
    assert plan.idempotent is False  # retried as a read, not because it was declared
    d = decide(plan, exc)
    assert isinstance(d, Retry) and d.attempt == 1


@pytest.mark.parametrize("method", READS)
def test_reads_are_retried_after_internal_error(method):
    plan = r.plan_call(r.RetryPolicy(), method)
    assert isinstance(decide(plan, ServerError("boom", code=-32603)), Retry)


def test_retry_reads_off_leaves_only_never_sent_retries():
    plan = r.plan_call(r.RetryPolicy(retry_reads=False), "tools/list")
    for exc in MAYBE_DELIVERED:
        assert decide(plan, exc) == GiveUp(GiveUpReason.UNSAFE, r.classify(exc))
    assert isinstance(decide(plan, NOT_SENT[0]), Retry)


@pytest.mark.parametrize("method", ["tools/call", "subscriptions/listen", "vendor/doThing",
                                    "tools/list/extra", "Tools/List"])
@pytest.mark.parametrize("exc", [*MAYBE_DELIVERED, ServerError("internal", code=-32603)],
                         ids=lambda e: type(e).__name__)
def test_writes_are_not_retried_once_they_may_have_reached_the_server(method, exc):
    plan = r.plan_call(r.RetryPolicy(max_attempts=10), method, tool="delete_file")
    assert decide(plan, exc) == GiveUp(GiveUpReason.UNSAFE, r.classify(exc))


@pytest.mark.parametrize("exc", [*MAYBE_DELIVERED, ServerError("internal", code=-32603)],
                         ids=lambda e: type(e).__name__)
def test_tools_call_is_retried_when_the_caller_or_the_config_says_idempotent(exc):
    policy = r.RetryPolicy()
    per_call = r.plan_call(policy, "tools/call", tool="get_weather", idempotent=True)
    per_tool = r.plan_call(policy, "tools/call", tool="get_weather",
                           idempotent_tools={"get_weather"})
    other_tool = r.plan_call(policy, "tools/call", tool="send_mail",
                             idempotent_tools={"get_weather"})
    vetoed = r.plan_call(policy, "tools/call", tool="get_weather", idempotent=False,
                         idempotent_tools={"get_weather"})
    assert isinstance(decide(per_call, exc), Retry)
    assert isinstance(decide(per_tool, exc), Retry)
    assert isinstance(decide(other_tool, exc), GiveUp)
    assert isinstance(decide(vetoed, exc), GiveUp)  # the caller's word wins over config


@pytest.mark.parametrize("exc",
                         [*NOT_SENT, RequestTimeout("slot wait"), TransportLost("x")],
                         ids=lambda e: type(e).__name__)
def test_tools_call_that_never_left_the_parent_is_retried(exc):
    plan = r.plan_call(r.RetryPolicy(), "tools/call", tool="send_mail")
    assert isinstance(decide(plan, exc, sent=False), Retry)


def test_tools_call_waits_for_a_restart_and_goes_out_exactly_once():
    clock = FakeClock()
    # Never sent (server restarting), then sent and lost: the call went out once; stop.
    send = Script([ServerUnavailable("restarting", state="restarting"),
                   TransportLost("died mid-call"), {"ok": True}])
    plan = r.plan_call(r.RetryPolicy(max_attempts=5), "tools/call", tool="send_mail")
    with pytest.raises(TransportLost) as info:
        drive(send, plan, clock)
    assert len(send.attempts) == 2 and info.value.attempts == 2
    # Never sent, then answered: one retry, one result.
    send = Script([ServerUnavailable("restarting", state="restarting"), {"ok": True}])
    assert drive(send, plan, FakeClock()) == {"ok": True}
    assert [a.index for a in send.attempts] == [0, 1]


def test_a_first_attempt_made_by_the_caller_continues_as_if_the_driver_had_made_it():
    # The call path sends the first attempt itself and hands over its failure: the plan
    # counts it, so the next attempt is index 1 and the attempts add up the same.
    clock = FakeClock()
    plan = r.plan_call(r.RetryPolicy(max_attempts=3), "tools/call", tool="send_mail")
    send = Script([{"ok": True}])
    assert drive(send, plan, clock, first_failure=ServerUnavailable(
        "restarting", state="restarting")) == {"ok": True}
    assert [a.index for a in send.attempts] == [1] and len(clock.slept) == 1
    # Handed a failure that is final for this call: no attempt at all, the same error.
    lost = TransportLost("died mid-call")
    send = Script([{"ok": True}])
    with pytest.raises(TransportLost) as info:
        drive(send, plan, FakeClock(), first_failure=lost)
    assert info.value is lost and lost.attempts == 1 and send.attempts == []
    assert "gave up after 1 attempt(s) of tools/call" in "".join(lost.__notes__)


def test_an_error_marked_not_sent_is_retried_for_any_method():
    pre_send = RequestTimeout("server was not ready within 5 s (restarting)", sent=False)
    plan = r.plan_call(r.RetryPolicy(), "tools/call", tool="send_mail")
    send = Script([pre_send, {"ok": 1}])
    assert drive(send, plan, FakeClock()) == {"ok": 1}
    send = Script([RequestTimeout("server was not ready within 5 s (restarting)"), {"ok": 1}])
    with pytest.raises(RequestTimeout):
        drive(send, plan, FakeClock())  # without the host's word: maybe delivered
    assert len(send.attempts) == 1


@pytest.mark.parametrize("method,idempotent,retried", [
    ("tools/list", None, True),
    ("resources/read", None, True),
    ("tools/call", None, False),
    ("tools/call", True, True),
])
def test_an_answer_too_large_to_read_is_retried_only_when_safe(method, idempotent, retried):
    """Issue 11, defect 5: the server answered (so it ran), but the answer was over the
    size limit: a safe request is sent again, anything else is not."""
    oversized = OversizedMessage("the answer was 20 MiB", size=20 << 20, limit=16 << 20)
    assert r.classify(oversized) is Outcome.SERVER_FAULT
    plan = r.plan_call(r.RetryPolicy(), method, tool="t", idempotent=idempotent)
    send = Script([oversized, {"ok": 1}])
    if retried:
        assert drive(send, plan, FakeClock()) == {"ok": 1}
    else:
        with pytest.raises(OversizedMessage):
            drive(send, plan, FakeClock())
    assert len(send.attempts) == (2 if retried else 1)


annotations = st.fixed_dictionaries({}, optional={
    "idempotentHint": st.booleans(),
    "readOnlyHint": st.booleans(),
    "destructiveHint": st.booleans(),
    "openWorldHint": st.booleans(),
    "title": st.text(max_size=5),
})


def tool_entry(local_name: str, ann) -> ToolEntry:
    return ToolEntry(name=f"srv__{local_name}", server="srv", local_name=local_name,
                     title=None, description=None, input_schema={"type": "object"},
                     annotations=ann)


@given(annotations, st.booleans())
def test_tool_annotations_do_not_count(ann, configured):
    """``idempotentHint``/``readOnlyHint`` are untrusted: only the local name in the server
    config (or the caller's flag) decides; the annotations change nothing."""
    tools = {"get_weather"} if configured else set()
    entry = tool_entry("get_weather", ann)
    plan = r.plan_call(r.RetryPolicy(), "tools/call", tool=entry, idempotent_tools=tools)
    assert plan.idempotent is configured
    outcome = decide(plan, TransportLost("lost"))
    assert isinstance(outcome, Retry if configured else GiveUp)
    assert plan == r.plan_call(r.RetryPolicy(), "tools/call", tool="get_weather",
                               idempotent_tools=tools)


def test_the_catalog_alias_is_not_the_configured_name():
    entry = tool_entry("get_weather", {"idempotentHint": True})
    plan = r.plan_call(r.RetryPolicy(), "tools/call", tool=entry,
                       idempotent_tools={"srv__get_weather"})
    assert plan.idempotent is False  # config names are the server's own tool names


@pytest.mark.parametrize("exc", FINAL_ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("method", ["tools/list", "resources/read", "tools/call"])
def test_business_and_protocol_errors_are_never_retried(exc, method):
    plan = r.plan_call(r.RetryPolicy(max_attempts=10), method, idempotent=True)
    assert decide(plan, exc, sent=False) == GiveUp(GiveUpReason.FINAL, Outcome.FINAL)
    send = Script([exc, "unreachable"])
    with pytest.raises(type(exc)):
        drive(send, plan, FakeClock())
    assert len(send.attempts) == 1


# --- limits --------------------------------------------------------------------------

@given(policies, st.sampled_from(list(Outcome)), st.integers(0, 50), st.booleans())
def test_attempt_limit_is_enforced(policy, outcome, extra, idempotent):
    plan = r.RetryPlan(policy, "tools/list", idempotent=idempotent)
    d = plan.decide(policy.max_attempts + extra, outcome, rng=rng())
    assert isinstance(d, GiveUp)
    if outcome is not Outcome.FINAL:
        assert d.reason is GiveUpReason.ATTEMPTS
    for made in range(1, policy.max_attempts):
        d = plan.decide(made, Outcome.NOT_SENT, rng=rng())
        assert d == Retry(after_s=d.after_s, attempt=made)


@given(st.integers(1, 12), st.sampled_from(MAYBE_DELIVERED + NOT_SENT),
       st.integers(0, 2**16))
@settings(max_examples=60, deadline=None)
def test_always_failing_send_stops_after_max_attempts(max_attempts, exc, seed):
    clock = FakeClock()
    send = Script([exc])
    plan = r.plan_call(r.RetryPolicy(max_attempts=max_attempts), "resources/read")
    with pytest.raises(type(exc)) as info:
        drive(send, plan, clock, seed=seed)
    assert len(send.attempts) == max_attempts
    assert [a.index for a in send.attempts] == list(range(max_attempts))
    assert info.value.attempts == max_attempts
    note = f"gave up after {max_attempts} attempt(s)"
    assert any(note in n for n in info.value.__notes__)
    assert len(clock.slept) == max_attempts - 1


@given(policies, st.integers(1, 20), st.floats(-5, 30, allow_nan=False),
       st.integers(0, 2**32 - 1))
def test_no_retry_is_scheduled_past_the_deadline(policy, made, remaining, seed):
    plan = r.RetryPlan(policy, "tools/list")
    d = plan.decide(made, Outcome.MAYBE_DELIVERED_TIMEOUT, rng=random.Random(seed),
                    remaining_s=remaining)
    if isinstance(d, Retry):
        assert d.after_s < remaining
    elif made < policy.max_attempts:
        assert d.reason is GiveUpReason.DEADLINE
    if remaining <= 0:
        assert isinstance(d, GiveUp)


@given(st.floats(0.5, 20), st.floats(0, 3), st.integers(0, 2**16))
@settings(max_examples=60, deadline=None)
def test_driver_never_starts_an_attempt_after_the_deadline(budget, took_s, seed):
    clock = FakeClock()
    deadline = clock.now() + budget
    send = Script([RequestTimeout("slow")], clock=clock, took_s=took_s)
    policy = r.RetryPolicy(base_s=0.5, factor=2.0, cap_s=4.0, max_attempts=50)
    plan = r.plan_call(policy, "prompts/get", deadline=deadline)
    with pytest.raises(RequestTimeout):
        drive(send, plan, clock, seed=seed)
    assert all(t < deadline for t in send.started_at)
    for attempt, started in zip(send.attempts, send.started_at, strict=False):
        assert attempt.remaining_s == pytest.approx(deadline - started)
    if took_s > 0:
        assert len(send.attempts) < 50  # the deadline, not the attempt limit, ended it


def test_cancellation_is_not_retried_nor_touched():
    plan = r.plan_call(r.RetryPolicy(max_attempts=5), "tools/list")
    send = Script([asyncio.CancelledError()])
    with pytest.raises(asyncio.CancelledError) as info:
        drive(send, plan, FakeClock())
    assert len(send.attempts) == 1
    assert not hasattr(info.value, "attempts")
    assert not getattr(info.value, "__notes__", None)


def test_read_methods_are_exactly_the_spec_reads():
    assert frozenset(READS) == r.READ_METHODS


# --- the driver on a virtual clock ---------------------------------------------------

@given(st.integers(1, 10), st.integers(0, 2**32 - 1), st.integers(0, 9))
@settings(max_examples=60, deadline=None)
def test_virtual_sleep_equals_the_sum_of_planned_delays(max_attempts, seed, successes_at):
    policy = r.RetryPolicy(base_s=0.2, factor=3.0, cap_s=2.0, max_attempts=max_attempts)
    failures = min(successes_at, max_attempts - 1)
    expected_rng = random.Random(seed)
    expected = [policy.delay(k, expected_rng) for k in range(failures)]

    clock = FakeClock(start=0.0)
    send = Script([TransportLost("lost")] * failures + ["done"])
    assert drive(send, r.plan_call(policy, "tools/list"), clock, seed=seed) == "done"
    assert clock.slept == expected
    assert clock.now() == pytest.approx(sum(expected))
    assert len(send.attempts) == failures + 1


def test_persistent_failure_sleeps_between_sends_only():
    policy = r.RetryPolicy(base_s=1.0, factor=2.0, cap_s=3.0, max_attempts=4)
    clock = FakeClock(start=0.0)
    send = Script([RequestTimeout("x")], clock=clock)
    with pytest.raises(RequestTimeout):
        drive(send, r.plan_call(policy, "tools/list"), clock, seed=3)
    g = random.Random(3)
    planned = [policy.delay(k, g) for k in range(3)]
    assert clock.slept == planned
    assert send.started_at == pytest.approx([0.0, planned[0], planned[0] + planned[1],
                                             sum(planned)])


# --- idempotency keys ----------------------------------------------------------------

_LABEL = r"[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_NAME = r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)?"
_META_KEY = re.compile(rf"(?:(?P<prefix>{_LABEL}(?:\.{_LABEL})*)/)?(?P<name>{_NAME})")


def meta_key_ok(key: str) -> bool:
    """The _meta key syntax (MCP 2026-07-28, basic/index), written out independently of
    the module: valid and not reserved."""
    m = _META_KEY.fullmatch(key)
    if m is None:
        return False
    labels = (m.group("prefix") or "").split(".")
    return not (len(labels) > 1 and labels[1] in ("modelcontextprotocol", "mcp"))


@pytest.mark.parametrize(("key", "ok"), [
    ("io.modelcontextprotocol/protocolVersion", False),
    ("dev.mcp/x", False),
    ("com.mcp.tools/x", False),
    ("com.example.mcp/x", True),
    ("1dev.trunkline/x", False),
    ("dev-.trunkline/x", False),
    ("dev.trunkline/-x", False),
    ("dev.trunkline/", True),
    ("plain_name", True),
])
def test_the_meta_key_rule_itself(key, ok):
    assert meta_key_ok(key) is ok


def test_idempotency_key_constant_is_a_valid_unreserved_meta_key():
    assert meta_key_ok(r.IDEMPOTENCY_META_KEY)
    assert r.IDEMPOTENCY_META_KEY.split("/")[0].split(".")[1] == "trunkline"


def test_generated_keys_are_fresh_uuid4_hex():
    keys = {r.new_idempotency_key() for _ in range(100)}
    assert len(keys) == 100
    assert all(re.fullmatch(r"[0-9a-f]{12}4[0-9a-f]{19}", k) for k in keys)
    a = r.plan_call(r.RetryPolicy(), "tools/call", idempotency_key=True)
    b = r.plan_call(r.RetryPolicy(), "tools/call", idempotency_key=True)
    assert a.idempotency_key and b.idempotency_key
    assert a.idempotency_key != b.idempotency_key
    assert r.plan_call(r.RetryPolicy(), "tools/call").idempotency_key is None
    given_key = r.plan_call(r.RetryPolicy(), "tools/call", idempotency_key="k1")
    assert given_key.idempotency_key == "k1"


def test_idempotency_key_is_identical_on_every_attempt():
    clock = FakeClock()
    send = Script([ServerUnavailable("restarting", state="restarting")] * 3 + ["ok"])
    plan = r.plan_call(r.RetryPolicy(max_attempts=4), "tools/call", tool="send_mail",
                       idempotency_key=True)
    assert drive(send, plan, clock) == "ok"
    params = {"name": "send_mail", "arguments": {"to": "a"}, "_meta": {"progressToken": 7}}
    stamped = [a.stamp(params) for a in send.attempts]
    assert len(stamped) == 4
    assert {s["_meta"][r.IDEMPOTENCY_META_KEY] for s in stamped} == {plan.idempotency_key}
    assert all(s["_meta"]["progressToken"] == 7 and s["arguments"] == {"to": "a"}
               for s in stamped)
    assert params == {"name": "send_mail", "arguments": {"to": "a"},
                      "_meta": {"progressToken": 7}}  # the caller's params untouched


def test_no_key_means_no_meta_entry():
    assert r.with_idempotency_key({"name": "t"}, None) == {"name": "t"}
    assert r.with_idempotency_key(None, "k") == {"_meta": {r.IDEMPOTENCY_META_KEY: "k"}}


def test_without_idempotency_key_undoes_with_idempotency_key():
    plain = {"name": "t", "arguments": {}}
    assert r.without_idempotency_key(r.with_idempotency_key(plain, "k"), "k") == plain
    asked = {"name": "t", "_meta": {"progressToken": "p"}}
    assert r.without_idempotency_key(r.with_idempotency_key(asked, "k"), "k") == asked
    # Only the key it was given: a different one (the caller's own _meta) stays.
    theirs = {"_meta": {r.IDEMPOTENCY_META_KEY: "theirs"}}
    assert r.without_idempotency_key(dict(theirs), "k") == theirs
    assert r.without_idempotency_key(dict(theirs), None) == theirs
