"""Following one task to its end (``protocol/tasks.py``), with no I/O: every shape of a look
``task_view`` takes or refuses in both eras, and ``TaskPoll`` driven through random runs by
a simulated server and clock that send each look exactly when the machine says.

The shapes the tests call valid are checked against the official schemas where one defines
them (the 2025-11-25 ``Task`` results; the 2026-07-28 payloads a modern task inlines); the
modern task itself is the ``io.modelcontextprotocol/tasks`` extension's, which the core
schema does not hold, written here from the extension's specification."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_schema import LEGACY, MODERN, conforms
from trunkline.errors import MalformedMessage
from trunkline.protocol.tasks import (
    CANCELLED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    TERMINAL,
    UNKNOWN_TASK,
    WORKING,
    Changed,
    Forgotten,
    Look,
    Overdue,
    TaskLimits,
    TaskPoll,
    TaskView,
    task_view,
)

TASK_ID = "786512e2-9e0d-44bd-8f29-789f320fe840"
CREATED_AT = "2025-11-25T10:30:00Z"
UPDATED_AT = "2025-11-25T10:40:00Z"
STATUSES = [WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED]


def ask(key: str) -> dict[str, Any]:
    """An elicitation the server wants answered, one per ``inputRequests`` key."""
    return {"method": "elicitation/create", "params": {
        "message": f"Which account owns repository {key}?",
        "requestedSchema": {"type": "object", "properties": {"owner": {"type": "string"}},
                            "required": ["owner"]}}}


ASKS = {"repo_owner": ask("trunkline"), "largest_moon": {
    "method": "sampling/createMessage", "params": {
        "messages": [{"role": "user", "content": {
            "type": "text", "text": "Which moon of Saturn is the largest?"}}],
        "maxTokens": 50}}}
TOOL_RESULT = {"resultType": "complete",
               "content": [{"type": "text", "text": "Sunny, 22 degrees"}], "isError": False}
RPC_ERROR = {"code": -32603, "message": "the weather service did not answer"}
PAYLOADS: dict[str, dict[str, Any]] = {
    INPUT_REQUIRED: {"inputRequests": ASKS}, COMPLETED: {"result": TOOL_RESULT},
    FAILED: {"error": RPC_ERROR}}
DROP = object()  # a field's value meaning: leave the field out


def shaped(base: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    out = {**base, **fields}
    return {key: value for key, value in out.items() if value is not DROP}


def modern_created(status: str = WORKING, **fields: Any) -> dict[str, Any]:
    """A 2026-07-28 ``CreateTaskResult``: ``Result & Task`` with ``resultType: "task"``."""
    return shaped({"resultType": "task", "taskId": TASK_ID, "status": status,
                   "statusMessage": "The operation is now in progress.",
                   "createdAt": CREATED_AT, "lastUpdatedAt": UPDATED_AT,
                   "ttlMs": 60000, "pollIntervalMs": 5000}, fields)


def modern_get(status: Any = WORKING, **fields: Any) -> dict[str, Any]:
    """A 2026-07-28 ``tasks/get`` result: the ``DetailedTask`` for ``status``, flat."""
    return shaped({"resultType": "complete", "taskId": TASK_ID, "status": status,
                   "createdAt": CREATED_AT, "lastUpdatedAt": UPDATED_AT,
                   "ttlMs": 60000, "pollIntervalMs": 5000, **PAYLOADS.get(status, {})},
                  fields)


def legacy_task(status: str = WORKING, **fields: Any) -> dict[str, Any]:
    """A 2025-11-25 ``Task`` (a ``tasks/get`` result is one, flat)."""
    return shaped({"taskId": TASK_ID, "status": status, "createdAt": CREATED_AT,
                   "lastUpdatedAt": UPDATED_AT, "ttl": 60000, "pollInterval": 500}, fields)


def test_the_payloads_here_are_the_modern_schemas():
    conforms(ASKS, MODERN, "InputRequests")
    conforms(TOOL_RESULT, MODERN, "CallToolResult")
    conforms(RPC_ERROR, MODERN, "Error")


# --- task_view: the modern era ------------------------------------------------------


def test_a_modern_creation_is_read_flat():
    # The extension's own example CreateTaskResult.
    assert task_view(modern_created(), created=True) == TaskView(
        task_id=TASK_ID, status=WORKING, status_message="The operation is now in progress.",
        poll_interval_ms=5000.0, ttl_ms=60000.0, created_at=CREATED_AT,
        last_updated_at=UPDATED_AT)


@pytest.mark.parametrize("status", STATUSES)
def test_a_modern_tasks_get_inlines_the_payload_of_its_status(status):
    view = task_view(modern_get(status, statusMessage="now " + status), task_id=TASK_ID)
    assert (view.task_id, view.status, view.status_message) == (TASK_ID, status,
                                                                 "now " + status)
    assert (view.poll_interval_ms, view.ttl_ms) == (5000.0, 60000.0)
    assert (view.created_at, view.last_updated_at) == (CREATED_AT, UPDATED_AT)
    assert view.input_requests == (ASKS if status == INPUT_REQUIRED else None)
    assert view.result == (TOOL_RESULT if status == COMPLETED else None)
    assert view.error == (RPC_ERROR if status == FAILED else None)
    assert view.ended is (status in TERMINAL)


@pytest.mark.parametrize("status", STATUSES)
def test_a_modern_creation_is_a_bare_task_whatever_its_status(status):
    """``CreateTaskResult`` is ``Result & Task``: no ``inputRequests``, ``result`` or
    ``error`` (the first ``tasks/get`` brings them), though its status need not be
    ``working``."""
    view = task_view(modern_created(status), created=True)
    assert view.status == status
    assert (view.input_requests, view.result, view.error) == (None, None, None)


@pytest.mark.parametrize(("sent", "read"), [
    (0, 0.0), (1, 1.0), (2.5, 2.5), (DROP, None), (None, None),
    (2**64 - 1, float(2**64 - 1)), (1.5e300, 1.5e300),
    # Past a float's range (JSON has no bound): longer than anything, capped by the poll.
    (10**400, math.inf),
])
def test_poll_interval_and_ttl_are_read_as_the_server_sent_them(sent, read):
    modern = task_view(modern_get(pollIntervalMs=sent, ttlMs=sent))
    legacy = task_view(legacy_task(pollInterval=sent, ttl=sent), legacy=True)
    assert (modern.poll_interval_ms, modern.ttl_ms) == (read, read)
    assert (legacy.poll_interval_ms, legacy.ttl_ms) == (read, read)


def test_each_era_reads_its_own_names_only():
    modern = task_view(modern_get(pollIntervalMs=DROP, ttlMs=DROP, pollInterval=7, ttl=9))
    legacy = task_view(legacy_task(pollInterval=DROP, ttl=DROP, pollIntervalMs=7, ttlMs=9),
                       legacy=True)
    assert (modern.poll_interval_ms, modern.ttl_ms) == (None, None)
    assert (legacy.poll_interval_ms, legacy.ttl_ms) == (None, None)


def test_optional_fields_may_be_absent_and_unknown_ones_are_ignored():
    raw = modern_get(statusMessage=DROP, pollIntervalMs=DROP, createdAt=DROP,
                     lastUpdatedAt=DROP, _meta={"io.example/x": 1}, extra=[1, 2])
    assert task_view(raw) == TaskView(task_id=TASK_ID, status=WORKING, ttl_ms=60000.0)


# --- task_view: the legacy era ------------------------------------------------------


def test_a_legacy_creation_is_read_from_its_task_object():
    raw = {"task": legacy_task(statusMessage="queued", ttl=None),
           "_meta": {"io.modelcontextprotocol/related-task": {"taskId": TASK_ID}}}
    conforms(raw, LEGACY, "CreateTaskResult")
    assert task_view(raw, legacy=True, created=True) == TaskView(
        task_id=TASK_ID, status=WORKING, status_message="queued", poll_interval_ms=500.0,
        ttl_ms=None, created_at=CREATED_AT, last_updated_at=UPDATED_AT)


@pytest.mark.parametrize("status", STATUSES)
def test_a_legacy_tasks_get_is_flat_and_carries_no_payload(status):
    """A legacy task's input requests and result come with ``tasks/result``, not here."""
    raw = legacy_task(status)
    conforms(raw, LEGACY, "GetTaskResult")
    view = task_view(raw, legacy=True, task_id=TASK_ID)
    assert (view.task_id, view.status, view.poll_interval_ms, view.ttl_ms) == (
        TASK_ID, status, 500.0, 60000.0)
    assert (view.input_requests, view.result, view.error) == (None, None, None)
    # Payload fields a legacy server adds anyway are not believed either.
    assert task_view({**raw, **PAYLOADS.get(status, {})}, legacy=True) == view


@pytest.mark.parametrize("raw", [legacy_task(), {"task": "t-1"}, {"task": None}, [], None])
def test_a_legacy_creation_without_its_task_object_is_refused(raw):
    with pytest.raises(MalformedMessage, match=r"^task creation: no task object$"):
        task_view(raw, legacy=True, created=True)


# --- task_view: what is refused -----------------------------------------------------


@pytest.mark.parametrize(("raw", "kw", "problem"), [
    ([], {}, "tasks/get result is a JSON array, not an object"),
    ("working", {}, "tasks/get result is a JSON string, not an object"),
    (None, {"created": True}, "task creation is a JSON null, not an object"),
    (modern_get(taskId=DROP), {}, "taskId is missing or not a string"),
    (modern_get(taskId=7), {}, "taskId is missing or not a string"),
    (modern_get(taskId=""), {}, "taskId is missing or not a string"),
    (legacy_task(taskId=None), {"legacy": True}, "taskId is missing or not a string"),
    ({"task": legacy_task(taskId=[])}, {"legacy": True, "created": True},
     "task creation: taskId is missing or not a string"),
    (modern_get(status=DROP), {}, "status None is none of"),
    (modern_get(status="done"), {}, "status 'done' is none of"),
    (modern_get(status="Working"), {}, "status 'Working' is none of"),
    (shaped(modern_get(), {"status": [WORKING]}), {}, "status ['working'] is none of"),
    (shaped(modern_get(), {"status": {}}), {}, "status {} is none of"),
    (legacy_task(status="submitted"), {"legacy": True}, "status 'submitted' is none of"),
    (modern_get(statusMessage=3), {}, "statusMessage is a JSON number, not a string"),
    (modern_get(createdAt=20251125), {}, "createdAt is a JSON number, not a string"),
    (legacy_task(lastUpdatedAt={}), {"legacy": True},
     "lastUpdatedAt is a JSON object, not a string"),
    (modern_get(pollIntervalMs=-1), {}, "pollIntervalMs is number -1, not a non-negative"),
    (modern_get(pollIntervalMs="5000"), {}, "pollIntervalMs is string '5000', not a"),
    (modern_get(pollIntervalMs=True), {}, "pollIntervalMs is boolean True, not a"),
    (modern_created(ttlMs=-0.5), {"created": True}, "task creation: ttlMs is number -0.5"),
    (modern_get(ttlMs=[60000]), {}, "ttlMs is array [60000], not a non-negative"),
    (modern_get(pollIntervalMs=math.nan), {}, "pollIntervalMs is number nan, not a"),
    (modern_get(ttlMs=math.inf), {}, "ttlMs is number inf, not a non-negative"),
    (legacy_task(pollInterval=-5), {"legacy": True}, "pollInterval is number -5, not a"),
    (legacy_task(ttl="forever"), {"legacy": True}, "ttl is string 'forever', not a"),
    (modern_get(INPUT_REQUIRED, inputRequests=DROP), {},
     "input_required without an inputRequests object"),
    (modern_get(INPUT_REQUIRED, inputRequests=[ask("a")]), {},
     "input_required without an inputRequests object"),
    (modern_get(COMPLETED, result=DROP), {}, "completed without a result object"),
    (modern_get(COMPLETED, result="Sunny"), {}, "completed without a result object"),
    (modern_get(FAILED, error=DROP), {}, "failed without an error object"),
    (modern_get(FAILED, error="boom"), {}, "failed without an error object"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_a_malformed_look_is_refused_naming_its_problem(raw, kw, problem):
    with pytest.raises(MalformedMessage) as info:
        task_view(raw, **kw)
    assert problem in str(info.value)
    what = "task creation" if kw.get("created") else "tasks/get result"
    assert str(info.value).startswith(what)


@pytest.mark.parametrize("legacy", [False, True])
def test_a_look_naming_another_task_is_refused(legacy):
    raw = (legacy_task if legacy else modern_get)(taskId="task-2")
    with pytest.raises(MalformedMessage, match="names another task than the one asked for"):
        task_view(raw, legacy=legacy, task_id=TASK_ID)
    # Asked for nothing in particular (a creation names its own), any id is the task's.
    assert task_view(raw, legacy=legacy).task_id == "task-2"


# --- task_view, at random: valid looks read as sent, a spoiled field named -------------

MESSAGES = st.none() | st.sampled_from(["", "starting", "half-way", "waiting for you"])
POLL_MS = st.one_of(st.none(), st.just(0), st.integers(1, 3000),
                    st.sampled_from([60_000, 3_600_000, 2**64 - 1, 1.5e300, 10**400]))
TTL_MS = st.one_of(st.none(), st.integers(0, 3000), st.integers(0, 200_000),
                   st.sampled_from([2**64 - 1, 10**400]))
ASK_KEYS = st.sampled_from(["q1", "q2", "q3", "q4", "q5", "q6"])
INPUT_REQUESTS = st.dictionaries(ASK_KEYS, ASK_KEYS.map(ask), max_size=5)


@st.composite
def looks(draw, *, legacy: bool, created: bool = False,
          statuses: list[str] | None = None) -> dict[str, Any]:
    """A valid look at the task: a creation or a ``tasks/get`` result, of either era."""
    status = draw(st.sampled_from(statuses or STATUSES))
    interval, ttl = ("pollInterval", "ttl") if legacy else ("pollIntervalMs", "ttlMs")
    raw: dict[str, Any] = {"taskId": TASK_ID, "status": status, "createdAt": CREATED_AT,
                           "lastUpdatedAt": UPDATED_AT, ttl: draw(TTL_MS)}
    message = draw(MESSAGES)
    if message is not None:
        raw["statusMessage"] = message
    poll = draw(POLL_MS)
    if poll is not None:
        raw[interval] = poll
    if legacy:
        return {"task": raw} if created else raw
    raw["resultType"] = "task" if created else "complete"
    if not created and status == INPUT_REQUIRED:
        raw["inputRequests"] = draw(INPUT_REQUESTS)
    elif not created and status == COMPLETED:
        raw["result"] = {"content": [{"type": "text", "text": draw(st.text(max_size=8))}]}
    elif not created and status == FAILED:
        raw["error"] = {"code": draw(st.integers(-32768, 32767)), "message": "it broke"}
    return raw


def as_number(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


@given(st.booleans(), st.booleans(), st.data())
def test_every_valid_look_is_read_as_sent(legacy, created, data):
    raw = data.draw(looks(legacy=legacy, created=created))
    view = task_view(raw, legacy=legacy, created=created,
                     task_id=None if created else TASK_ID)
    task = raw["task"] if legacy and created else raw
    interval, ttl = ("pollInterval", "ttl") if legacy else ("pollIntervalMs", "ttlMs")
    assert (view.task_id, view.status, view.status_message) == (
        TASK_ID, task["status"], task.get("statusMessage"))
    assert view.poll_interval_ms == as_number(task.get(interval))
    assert view.ttl_ms == as_number(task[ttl])
    assert (view.created_at, view.last_updated_at) == (CREATED_AT, UPDATED_AT)
    assert view.input_requests == task.get("inputRequests")
    assert view.result == task.get("result")
    assert view.error == task.get("error")


NOT_TEXT = st.sampled_from([0, 1.5, True, [], {}, ["a"]])
NOT_NUMBER = st.sampled_from([-1, -0.001, "5", True, False, [], {}, math.nan, math.inf,
                              -math.inf])
NOT_OBJECT = st.sampled_from([DROP, None, [], "x", 0, True])
SPOILS: dict[str, st.SearchStrategy[Any]] = {
    "taskId": st.sampled_from([DROP, None, "", 7, [], {}]),
    "status": st.sampled_from([DROP, None, "", "done", "WORKING", "input-required", 3, [],
                               {}]),
    "statusMessage": NOT_TEXT, "createdAt": NOT_TEXT, "lastUpdatedAt": NOT_TEXT,
    "pollIntervalMs": NOT_NUMBER, "ttlMs": NOT_NUMBER,
    "pollInterval": NOT_NUMBER, "ttl": NOT_NUMBER,
}
PAYLOAD_FIELD = {INPUT_REQUIRED: "inputRequests", COMPLETED: "result", FAILED: "error"}


@given(st.booleans(), st.booleans(), st.data())
def test_a_look_with_one_field_spoiled_is_refused_naming_the_field(legacy, created, data):
    raw = data.draw(looks(legacy=legacy, created=created))
    task = raw["task"] if legacy and created else raw
    fields = ["taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt",
              *(["pollInterval", "ttl"] if legacy else ["pollIntervalMs", "ttlMs"])]
    payload = None if legacy or created else PAYLOAD_FIELD.get(task["status"])
    field = data.draw(st.sampled_from([*fields, *([payload] if payload else [])]))
    bad = data.draw(NOT_OBJECT if field == payload else SPOILS[field])
    spoiled = shaped(task, {field: bad})
    sent = {"task": spoiled} if legacy and created else spoiled
    with pytest.raises(MalformedMessage) as info:
        task_view(sent, legacy=legacy, created=created)
    assert field in str(info.value)


# --- TaskLimits ----------------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    {"min_poll_s": 0}, {"min_poll_s": -0.05}, {"min_poll_s": math.nan},
    {"min_poll_s": 2.0, "max_poll_s": 1.0}, {"max_poll_s": 0.0}, {"max_poll_s": math.nan},
    {"max_poll_s": math.inf},
    {"default_poll_s": 0}, {"default_poll_s": -1.0}, {"default_poll_s": math.nan},
    {"max_failed_looks": -1}, {"max_input_requests": 0}, {"max_input_requests": -3},
])
def test_limits_refuse_what_would_unbound_the_polling(kw):
    with pytest.raises(ValueError, match="TaskLimits"):
        TaskLimits(**kw)


@pytest.mark.parametrize("kw", [
    {}, {"min_poll_s": 1.0, "max_poll_s": 1.0, "default_poll_s": 1.0},
    {"max_failed_looks": 0}, {"max_input_requests": 1}, {"min_poll_s": 1e-3},
    # A default outside [floor, cap] is taken to the nearer bound (rule 3), not refused:
    # a caller may lower the cap alone.
    {"max_poll_s": 0.5}, {"min_poll_s": 2.0},
])
def test_limits_take_any_bounded_polling(kw):
    limits = TaskLimits(**kw)
    for name, value in kw.items():
        assert getattr(limits, name) == value


@pytest.mark.parametrize(("kw", "wait"), [
    ({"min_poll_s": 0.05, "max_poll_s": 30.0, "default_poll_s": 1.0}, 1.0),
    ({"max_poll_s": 0.5}, 0.5),
    ({"min_poll_s": 2.0}, 2.0),
    ({"default_poll_s": math.inf}, 30.0),
])
def test_without_a_server_interval_the_default_is_used_within_floor_and_cap(kw, wait):
    poll = TaskPoll(task_view(modern_created(pollIntervalMs=DROP), created=True), 100.0,
                    limits=TaskLimits(**kw))
    step = poll.first(100.0)
    assert isinstance(step, Changed) and step.at == 100.0 + wait


# --- TaskPoll, event by event -------------------------------------------------------


def modern_look(status: str = WORKING, **fields: Any) -> TaskView:
    return task_view(modern_get(status, **fields), task_id=TASK_ID)


def test_failed_looks_back_off_doubling_from_the_floor_to_the_cap():
    limits = TaskLimits(min_poll_s=0.1, max_poll_s=1.0, max_failed_looks=6)
    poll = TaskPoll(task_view(modern_created(), created=True), 0.0, limits=limits)
    poll.first(0.0)
    waits = []
    now = 5.0
    for _ in range(6):
        step = poll.failed(None, now, "timed out")
        assert isinstance(step, Look)
        waits.append(step.at - now)
        now = step.at
    assert waits == pytest.approx([0.2, 0.4, 0.8, 1.0, 1.0, 1.0])
    # One answer resets the count and the back-off.
    same = modern_look(statusMessage="The operation is now in progress.")
    assert poll.seen(same, now) == Look(now + 1.0)  # the server's 5 s, capped
    assert poll.failed(-32603, now + 1, "internal error") == Look(now + 1 + 0.2)


def test_too_many_failed_looks_in_a_row_forget_the_task():
    poll = TaskPoll(task_view(modern_created(), created=True), 0.0,
                    limits=TaskLimits(max_failed_looks=2))
    poll.first(0.0)
    assert isinstance(poll.failed(None, 5.0), Look)
    assert isinstance(poll.failed(-32603, 5.1), Look)
    step = poll.failed(None, 5.5, "the connection was lost")
    assert isinstance(step, Forgotten) and poll.ended
    assert step.reason == "3 looks at the task failed in a row, the last: the connection was lost"
    none_allowed = TaskPoll(task_view(modern_created(), created=True), 0.0,
                            limits=TaskLimits(max_failed_looks=0))
    none_allowed.first(0.0)
    assert isinstance(none_allowed.failed(None, 5.0), Forgotten)


def test_a_server_that_does_not_know_the_task_forgets_it_at_once():
    poll = TaskPoll(task_view(modern_created(), created=True), 0.0)
    poll.first(0.0)
    step = poll.failed(UNKNOWN_TASK, 5.0, "no task 786512e2")
    assert step == Forgotten("the server no longer knows the task (no task 786512e2)")
    assert poll.ended


def test_the_back_off_stays_within_the_cap_however_many_looks_fail():
    # 2**1100 times the floor is past a float's range: the back-off must not overflow.
    limits = TaskLimits(min_poll_s=0.05, max_poll_s=30.0, max_failed_looks=2000)
    poll = TaskPoll(task_view(modern_created(ttlMs=None), created=True), 0.0,
                    limits=limits)
    poll.first(0.0)
    now = 5.0
    for _ in range(1100):
        step = poll.failed(None, now)
        assert isinstance(step, Look) and now + 0.1 <= step.at <= now + 30.0
        now = step.at


def test_the_ttl_counts_from_creation_with_one_interval_of_grace():
    # ttlMs 60000 and pollIntervalMs 5000: forgotten from 65 s after creation was seen.
    poll = TaskPoll(task_view(modern_created(), created=True), 100.0)
    poll.first(100.0)
    assert poll.due(164.9) is None
    step = poll.due(165.0)
    assert step == Forgotten("the task outlived its ttlMs without ending") and poll.ended


def test_a_ttl_the_server_changes_still_counts_from_creation():
    """``ttlMs`` MAY change over a task's life; it stays a duration from creation."""
    poll = TaskPoll(task_view(modern_created(), created=True), 100.0)
    poll.first(100.0)
    # Lowered at 150 s to 10 s: long past (110 s + 5 s of grace).
    assert isinstance(poll.seen(modern_look(ttlMs=10_000), 150.0), Forgotten)
    poll = TaskPoll(task_view(modern_created(), created=True), 100.0)
    poll.first(100.0)
    # Raised at 150 s to 90 s: forgotten from 195 s, not from 150 + 90 + 5.
    assert isinstance(poll.seen(modern_look(ttlMs=90_000), 150.0), Changed)
    assert poll.due(194.9) is None
    assert isinstance(poll.due(195.0), Forgotten)


def test_a_ttl_of_null_is_unlimited():
    poll = TaskPoll(task_view(modern_created(ttlMs=None), created=True), 0.0)
    poll.first(0.0)
    assert poll.due(10.0**9) is None
    assert isinstance(poll.seen(modern_look(ttlMs=None), 10.0**9), Changed)


def test_nothing_is_said_after_the_end():
    poll = TaskPoll(task_view(modern_created(), created=True), 0.0, deadline=5.0)
    assert poll.first(0.0) == Changed(poll.view, 5.0)
    assert poll.due(5.0) == Overdue()
    for late in (lambda: poll.seen(modern_look(COMPLETED), 6.0),
                 lambda: poll.failed(None, 6.0), lambda: poll.due(6.0),
                 lambda: poll.first(6.0)):
        with pytest.raises(RuntimeError, match="already said"):
            late()


# --- TaskPoll, at random: a simulated server and clock ------------------------------

def interval(limits: TaskLimits, view: TaskView) -> float:
    """Rule 3, written out from the module's docstring."""
    asked = (limits.default_poll_s if view.poll_interval_ms is None
             else view.poll_interval_ms / 1000.0)
    return max(limits.min_poll_s, min(asked, limits.max_poll_s))

