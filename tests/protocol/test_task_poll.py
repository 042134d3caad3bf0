"""Following one task to its end (``protocol/tasks.py``), with no I/O: every shape of a look
``task_view`` takes or refuses in both eras, and ``TaskPoll`` driven through random runs by
a simulated server and clock that send each look exactly when the machine says.

The shapes the tests call valid are checked against the official schemas where one defines
them (the 2025-11-25 ``Task`` results; the 2026-07-28 payloads a modern task inlines); the
modern task itself is the ``io.modelcontextprotocol/tasks`` extension's, which the core
schema does not hold, written here from the extension's specification."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
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
    Ended,
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


def test_a_modern_task_is_followed_from_creation_to_its_result():
    created = task_view(modern_created(), created=True)
    poll = TaskPoll(created, 0.0)
    first = poll.first(0.0)
    assert first == Changed(created, 5.0) and poll.view is created
    same = modern_look(statusMessage="The operation is now in progress.")
    assert poll.seen(same, 5.0) == Look(10.0)
    moved = modern_look(statusMessage="half-way")
    assert poll.seen(moved, 10.0) == Changed(moved, 15.0)
    asking = modern_look(INPUT_REQUIRED, statusMessage="half-way")
    assert poll.seen(asking, 15.0) == Changed(asking, 20.0, ASKS)
    more = modern_look(INPUT_REQUIRED, statusMessage="half-way",
                       inputRequests={**ASKS, "q3": ask("q3")})
    step = poll.seen(more, 20.0)
    assert step == Changed(more, 25.0, {"q3": ask("q3")})  # only the new one asked
    assert poll.seen(more, 25.0) == Look(30.0)  # the same asks, outstanding: nothing new
    done = modern_look(COMPLETED)
    assert poll.seen(done, 30.0) == Ended(done) and done.result == TOOL_RESULT
    assert poll.ended and poll.view is done


def test_a_legacy_task_ends_on_its_status_and_leaves_its_result_to_tasks_result():
    created = task_view({"task": legacy_task()}, legacy=True, created=True)
    poll = TaskPoll(created, 0.0)
    assert poll.first(0.0) == Changed(created, 0.5)
    asking = task_view(legacy_task(INPUT_REQUIRED), legacy=True, task_id=TASK_ID)
    assert poll.seen(asking, 0.5) == Changed(asking, 1.0)  # no asks: tasks/result has them
    done = task_view(legacy_task(COMPLETED), legacy=True, task_id=TASK_ID)
    assert poll.seen(done, 1.0) == Ended(done) and done.result is None


@pytest.mark.parametrize("status", sorted(TERMINAL))
def test_a_task_created_terminal_is_looked_at_at_once_for_its_payload(status):
    created = task_view(modern_created(status), created=True)
    poll = TaskPoll(created, 0.0, deadline=100.0)
    assert poll.first(0.0) == Look(0.05) and not poll.ended  # the floor
    look = modern_look(status)
    assert poll.seen(look, 0.06) == Ended(look) and poll.ended


@pytest.mark.parametrize(("poll_ms", "wait"), [
    (0, 0.05),  # asking for 0 cannot make the client spin: the floor
    (10, 0.05),
    (50, 0.05),
    (1234, 1.234),
    (3_600_000, 30.0),  # an hour: still looked at within the cap
    (10**400, 30.0),
    (DROP, 1.0),  # none named: the default
])
def test_the_next_look_is_the_servers_interval_within_floor_and_cap(poll_ms, wait):
    poll = TaskPoll(task_view(modern_created(), created=True), 0.0)
    poll.first(0.0)
    step = poll.seen(modern_look(pollIntervalMs=poll_ms), 10.0)
    assert isinstance(step, Changed) and step.at == pytest.approx(10.0 + wait, abs=1e-12)


def test_the_deadline_cuts_a_wait_short_and_then_the_task_is_overdue():
    poll = TaskPoll(task_view(modern_created(), created=True), 0.0, deadline=7.0)
    assert poll.first(0.0) == Changed(poll.view, 5.0)
    step = poll.seen(modern_look(statusMessage="The operation is now in progress."), 5.0)
    assert step == Look(7.0)  # not 10.0
    assert poll.due(6.999) is None
    assert poll.due(7.0) == Overdue() and poll.ended


def test_a_look_answered_after_the_deadline_is_overdue_unless_it_ended():
    poll = TaskPoll(task_view(modern_created(), created=True), 0.0, deadline=7.0)
    poll.first(0.0)
    assert poll.seen(modern_look(), 7.5) == Overdue()
    poll = TaskPoll(task_view(modern_created(), created=True), 0.0, deadline=7.0)
    poll.first(0.0)
    done = modern_look(COMPLETED)
    assert poll.seen(done, 7.5) == Ended(done)  # the result is in hand: it is given


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


def test_input_requests_are_asked_once_in_order_at_most_the_limit_per_look():
    limits = TaskLimits(max_input_requests=2)
    poll = TaskPoll(task_view(modern_created(), created=True), 0.0, limits=limits)
    poll.first(0.0)
    keys = ["k5", "k1", "k4", "k2", "k3"]
    outstanding = {key: ask(key) for key in keys}
    seen = modern_look(INPUT_REQUIRED, inputRequests=outstanding)
    told = []
    for now in (5.0, 10.0, 15.0):
        step = poll.seen(seen, now)
        assert isinstance(step, Changed) and len(step.asks) <= 2
        told.append(list(step.asks))
    assert told == [["k5", "k1"], ["k4", "k2"], ["k3"]]
    assert poll.seen(seen, 20.0) == Look(25.0)
    # An answered key the server still lists, beside a new one: only the new one.
    step = poll.seen(modern_look(INPUT_REQUIRED, inputRequests={"k1": ask("k1"),
                                                                "k6": ask("k6")}), 25.0)
    assert isinstance(step, Changed) and step.asks == {"k6": ask("k6")}


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

EPS = 1e-9  # the clock's rounding at the times used here (at most 1e5 s)


@dataclass(frozen=True)
class Reply:
    """The server's answer to one ``tasks/get``: a look, or a failure with its code (None:
    no answer at all), after ``latency`` seconds."""

    look: dict[str, Any] | None
    code: int | None = None
    latency: float = 0.0


@dataclass(frozen=True)
class Run:
    legacy: bool
    limits: TaskLimits
    start: float
    deadline: float | None
    created: dict[str, Any]
    replies: list[Reply]
    #: After the replies: "ends" (a terminal look), "unknown" (-32602), "fails" (no answer
    #: ever again) or "stalls" (the same unfinished look forever; only with a deadline).
    tail: str
    last: Reply


CODES = st.one_of(st.none(), st.sampled_from([UNKNOWN_TASK, -32603, -32600, -32601, -32000,
                                              -32700, 0, 1, 32602]),
                  st.integers(-2**31, 2**31 - 1))


@st.composite
def limits_at_random(draw) -> TaskLimits:
    floor = draw(st.floats(0.01, 2.0))
    cap = floor * draw(st.floats(1.0, 50.0))
    return TaskLimits(min_poll_s=floor, max_poll_s=cap,
                      default_poll_s=draw(st.floats(floor / 4, cap * 4)),
                      max_failed_looks=draw(st.integers(0, 6)),
                      max_input_requests=draw(st.integers(1, 4)))


@st.composite
def runs(draw) -> Run:
    legacy = draw(st.booleans())
    limits = draw(limits_at_random())
    floor = limits.min_poll_s
    latency = st.one_of(st.just(0.0), st.floats(0.0, 3 * floor))
    reply = st.one_of(
        st.builds(Reply, looks(legacy=legacy), st.none(), latency),
        st.builds(Reply, st.none(), CODES, latency))
    tail = draw(st.sampled_from(["ends", "unknown", "fails", "stalls"]))
    start = draw(st.floats(0.0, 1e5))
    deadline = None  # in floors after the creation, some before it
    if tail == "stalls" or draw(st.booleans()):
        deadline = start + draw(st.floats(-1.0, 1.0) | st.floats(0.0, 200.0)) * floor
    last = {"ends": st.builds(Reply, looks(legacy=legacy, statuses=sorted(TERMINAL)),
                              st.none(), latency),
            "unknown": st.builds(Reply, st.none(), st.just(UNKNOWN_TASK), latency),
            "fails": st.builds(Reply, st.none(), st.none(), latency),
            "stalls": st.builds(Reply, looks(legacy=legacy,
                                             statuses=[WORKING, INPUT_REQUIRED]),
                                st.none(), latency)}[tail]
    return Run(legacy=legacy, limits=limits, start=start, deadline=deadline,
               created=draw(looks(legacy=legacy, created=True)),
               replies=draw(st.lists(reply, max_size=25)), tail=tail, last=draw(last))


def server(run: Run) -> Iterator[Reply]:
    yield from run.replies
    yield run.last
    while run.tail in ("fails", "stalls"):
        yield run.last


def interval(limits: TaskLimits, view: TaskView) -> float:
    """Rule 3, written out from the module's docstring."""
    asked = (limits.default_poll_s if view.poll_interval_ms is None
             else view.poll_interval_ms / 1000.0)
    return max(limits.min_poll_s, min(asked, limits.max_poll_s))


@dataclass
class Said:
    """One step the machine said, and what it was said on."""

    now: float
    on: str  # "created", "look", "failure", "timer"
    step: Any
    reply: Reply | None = None


def follow(run: Run) -> tuple[TaskPoll, list[Said], list[float]]:
    """Drive the machine as its driver would: each look sent exactly at the time it says,
    after asking ``due`` at that time; answered ``latency`` later. Returns the machine,
    everything it said, and the times the looks were sent (the creation's first)."""
    created = task_view(run.created, legacy=run.legacy, created=True)
    poll = TaskPoll(created, run.start, deadline=run.deadline, limits=run.limits)
    said = [Said(run.start, "created", poll.first(run.start))]
    sent = [run.start]
    replies = server(run)
    span = 0.0 if run.deadline is None else max(0.0, run.deadline - run.start)
    bound = len(run.replies) + run.limits.max_failed_looks + span / run.limits.min_poll_s + 4
    while not poll.ended:
        assert len(said) <= bound, "the machine never ended"
        step = said[-1].step
        assert isinstance(step, (Look, Changed)), step
        timer = poll.due(step.at)
        if timer is not None:
            said.append(Said(step.at, "timer", timer))
            break
        sent.append(step.at)
        reply = next(replies, None)
        assert reply is not None, "the machine outlived the server's last word"
        now = step.at + reply.latency
        if reply.look is not None:
            view = task_view(reply.look, legacy=run.legacy, task_id=TASK_ID)
            said.append(Said(now, "look", poll.seen(view, now), reply))
        else:
            said.append(Said(now, "failure", poll.failed(reply.code, now, "detail"), reply))
    return poll, said, sent


@settings(max_examples=400, deadline=None)
@given(runs())
def test_a_task_is_followed_by_the_rules(run):
    limits, deadline = run.limits, run.deadline
    poll, said, sent = follow(run)

    # It ends, with one end, the last thing it says; nothing after it (rule 2).
    assert poll.ended
    *going, last = said
    assert isinstance(last.step, (Ended, Forgotten, Overdue))
    assert all(isinstance(s.step, (Look, Changed)) for s in going)
    for late in (lambda: poll.seen(poll.view, last.now), lambda: poll.failed(None, last.now),
                 lambda: poll.due(last.now), lambda: poll.first(last.now)):
        with pytest.raises(RuntimeError):
            late()

    # The floor between two looks; the cap on every wait; the deadline cuts one short
    # only to say Overdue at it (rule 3).
    for earlier, later in itertools.pairwise(sent):
        assert later - earlier >= limits.min_poll_s - EPS
    assert deadline is None or all(at < deadline for at in sent[1:])
    for s, following in zip(going, said[1:], strict=True):
        wait = s.step.at - s.now
        assert 0 <= wait <= limits.max_poll_s + EPS
        if wait < limits.min_poll_s - EPS:
            assert deadline is not None and s.step.at == deadline
            assert following.on == "timer" and following.step == Overdue()

    # Each step is the one the rules give, in order.
    view = task_view(run.created, legacy=run.legacy, created=True)
    asked: list[str] = []
    failures = 0
    for s in said:
        step, now = s.step, s.now
        before = view
        if s.on == "look":
            assert s.reply is not None and s.reply.look is not None
            view = task_view(s.reply.look, legacy=run.legacy)
            failures = 0
        elif s.on == "failure":
            failures += 1
        ttl = view.ttl_ms
        past_deadline = deadline is not None and now >= deadline
        past_ttl = ttl is not None and now >= run.start + ttl / 1000.0
        past_grace = ttl is not None and now >= run.start + ttl / 1000.0 + limits.max_poll_s
        if s.on == "created" and view.status in TERMINAL and not past_deadline:
            # Rule 2: no payload in a creation; looked at after the floor.
            at = now + limits.min_poll_s
            assert step == Look(at if deadline is None else min(at, deadline))
            continue
        if s.on == "look" and view.status in TERMINAL:
            assert step == Ended(view)  # rule 2: a terminal look ends it, even late
            continue
        if s.on == "failure" and s.reply is not None and s.reply.code == UNKNOWN_TASK:
            assert isinstance(step, Forgotten) and "no longer knows" in step.reason
            continue
        if s.on == "failure" and failures > limits.max_failed_looks:
            assert isinstance(step, Forgotten) and "failed in a row" in step.reason
            continue
        if past_deadline:
            assert step == Overdue()
            continue
        if isinstance(step, Forgotten):
            assert past_ttl and "ttlMs" in step.reason  # rule 5: never before the TTL
            continue
        assert not past_grace, "the task outlived its TTL and a poll interval"
        assert isinstance(step, (Look, Changed)), step
        wait = (interval(limits, view) if s.on != "failure"
                else min(limits.min_poll_s * 2**failures, limits.max_poll_s))
        assert step.at == (now + wait if deadline is None else min(now + wait, deadline))
        if s.on == "failure":
            assert step == Look(step.at)
            continue
        # Rule 6: keys not asked before, in the server's order, at most the limit.
        outstanding = view.input_requests or {}
        fresh = [key for key in outstanding if key not in asked][:limits.max_input_requests]
        asks = step.asks if isinstance(step, Changed) else {}
        assert list(asks) == fresh
        assert all(asks[key] == outstanding[key] for key in fresh)
        asked += fresh
        moved = (s.on == "created" or view.status != before.status
                 or view.status_message != before.status_message)
        assert isinstance(step, Changed) is (moved or bool(fresh))
        if isinstance(step, Changed):
            assert step.view == view
    assert len(asked) == len(set(asked))  # each key asked once
