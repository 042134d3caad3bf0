"""The gateway's task table (``gateway/tasks.py``), rule by rule, on a clock of its own:
ids, the owner's binding, the bounds and what makes room, the TTL; and what a client is
told of a task in each status."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from trunkline.errors import ServerError, TaskCancelled, TaskLost
from trunkline.gateway import protocol as p
from trunkline.gateway.tasks import (
    PAGE_SIZE,
    EndedCall,
    Place,
    TaskTable,
    asked_ttl_ms,
    created_result,
    detailed_task,
    instance_of,
    legacy_created,
    legacy_result,
    legacy_task,
    takes_tasks,
)
from trunkline.parent.results import CallToolResult
from trunkline.parent.tasks import TaskStatus

TASKS = "io.modelcontextprotocol/tasks"


class Task:
    """What the table reads of a ``ToolTask``: its status, whether it ended, how."""

    def __init__(self, status: str = "working", **fields: Any) -> None:
        self.status = TaskStatus("upstream-1", status, **fields)
        self._outcome: Any = None
        self.task_id = "upstream-1"

    def done(self) -> bool:
        return self._outcome is not None

    def outcome(self) -> Any:
        return self._outcome

    def end(self, outcome: Any) -> None:
        self._outcome = outcome


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def table(clock: Clock | None = None, **bounds: Any) -> TaskTable:
    settings = {"client_tasks": 2, "tasks": 4, "ttl_s": 60.0, **bounds}
    return TaskTable("r1_0", clock=clock or Clock(), wall=lambda: 1_700_000_000.0,
                     **settings)


def held(tasks: TaskTable, task: Task, client: Any = "c", owner: Any = None):
    place = tasks.reserve(client)
    assert isinstance(place, Place), place
    return tasks.hold(place, task, owner)  # type: ignore[arg-type]


def result(text: str, raw_json: bytes = b"") -> CallToolResult:
    raw = {"content": [{"type": "text", "text": text}]}
    return CallToolResult(raw["content"], raw=raw, raw_json=raw_json)


def test_an_id_is_the_gateway_s_own_and_names_its_process():
    tasks = table()
    ids = {held(tasks, Task(), client=n).id for n in range(2)}
    assert len(ids) == 2
    for task_id in ids:
        assert task_id.startswith("tl-task.r1_0.") and "upstream" not in task_id
        assert len(task_id.rsplit(".", 1)[1]) >= 32  # 24 random bytes
        assert instance_of(task_id) == "r1_0"
    assert instance_of("tl-task.") is None and instance_of("upstream-1") is None


def test_a_task_is_found_only_by_its_owner_and_alike_for_everyone_else():
    tasks = table()
    mine = held(tasks, Task(), owner="alice")
    assert tasks.find(mine.id, "alice") is mine
    assert tasks.find(mine.id, "bob") is None
    assert tasks.find(mine.id, None) is None
    assert tasks.find("tl-task.r1_0.made-up", "alice") is None
    assert tasks.find(12, "alice") is None
    unbound = held(tasks, Task(), client="d")
    assert tasks.find(unbound.id, None) is unbound


def test_a_client_at_its_bound_is_refused_until_one_of_its_tasks_ends():
    tasks = table()
    first, _second = held(tasks, Task()), held(tasks, Task())
    refused = tasks.reserve("c")
    assert isinstance(refused, dict) and refused["data"]["budget"] == "client_tasks"
    assert refused["data"]["scope"] == "client" and "client_tasks" in refused["message"]
    assert isinstance(tasks.reserve("other"), Place), "another client is not concerned"
    first.task.end(result("done"))
    # The oldest ended task makes room, and is gone.
    third = held(tasks, Task())
    assert tasks.find(first.id, None) is None and tasks.find(third.id, None) is third


def test_a_place_counts_until_released():
    tasks = table()
    places = [tasks.reserve("c"), tasks.reserve("c")]
    assert isinstance(tasks.reserve("c"), dict)
    tasks.release(places[0])  # type: ignore[arg-type]
    assert isinstance(tasks.reserve("c"), Place)


def test_the_gateway_s_bound_takes_the_oldest_ended_task_of_anyone():
    tasks = table(client_tasks=10, tasks=3)
    oldest = held(tasks, Task(), client="a")
    held(tasks, Task(), client="b")
    held(tasks, Task(), client="c")
    refused = tasks.reserve("d")
    assert isinstance(refused, dict) and refused["data"]["scope"] == "gateway"
    oldest.task.end(TaskCancelled("cancelled"))
    assert isinstance(tasks.reserve("d"), Place)
    assert tasks.find(oldest.id, None) is None and len(tasks) == 2


def test_an_ended_task_is_kept_for_its_ttl_a_running_one_until_it_ends():
    clock = Clock()
    tasks = table(clock, client_tasks=10, tasks=10)
    short = held(tasks, Task(ttl_ms=5_000.0))  # the server's shorter TTL
    long = held(tasks, Task(ttl_ms=10_000_000.0))  # longer than the gateway keeps
    unlimited = held(tasks, Task())
    assert (short.ttl_ms, long.ttl_ms, unlimited.ttl_ms) == (5_000, 60_000, 60_000)
    short.task.end(result("a"))
    clock.now += 4.9
    assert tasks.find(short.id, None) is short
    clock.now += 0.2
    assert tasks.find(short.id, None) is None
    clock.now += 60
    # Past its time, still running: kept until it has ended (looked at again later).
    assert tasks.find(long.id, None) is long
    long.task.end(result("b"))
    unlimited.task.end(result("c"))
    clock.now += 61
    assert tasks.find(long.id, None) is None and tasks.find(unlimited.id, None) is None
    assert len(tasks) == 0


def test_an_owner_that_goes_takes_its_tasks_and_hands_back_the_running_ones():
    tasks = table(client_tasks=10, tasks=10)
    running, done = held(tasks, Task(), owner="s1"), held(tasks, Task(), owner="s1")
    other = held(tasks, Task(), owner="s2")
    done.task.end(result("x"))
    assert tasks.drop_owner("s1") == [running.task]
    assert tasks.find(running.id, "s1") is None and tasks.find(other.id, "s2") is other
    assert isinstance(tasks.reserve("c"), Place) and isinstance(tasks.reserve("c"), Place)


def test_only_a_request_naming_the_extension_takes_tasks():
    caps = "io.modelcontextprotocol/clientCapabilities"
    assert takes_tasks({caps: {"extensions": {TASKS: {}}}})
    assert not takes_tasks({caps: {}})
    assert not takes_tasks({caps: {"extensions": []}})
    assert not takes_tasks({caps: {"tasks": {}}})
    assert not takes_tasks({})


def test_what_a_client_is_told_in_each_status():
    tasks = table(client_tasks=10, tasks=10)
    task = Task("working", message="Gathering", poll_interval_ms=1000.0, ttl_ms=5000.0,
                created_at="2026-01-02T03:04:05Z", last_updated_at="2026-01-02T03:04:06Z")
    one = held(tasks, task)
    created = created_result(one)
    assert created == {"resultType": "task", "taskId": one.id, "status": "working",
                       "statusMessage": "Gathering", "createdAt": "2026-01-02T03:04:05Z",
                       "lastUpdatedAt": "2026-01-02T03:04:06Z", "ttlMs": 5000,
                       "pollIntervalMs": 1000}
    modern = p.ClientEra.MODERN
    assert detailed_task(one, modern) == {**created, "resultType": "complete"}

    # Input it can give: input_required with the requests; none left for it: working.
    asks = {"k1": {"method": "elicitation/create", "params": {}}}
    task.status = TaskStatus("upstream-1", "input_required", input_requests=asks)
    told = detailed_task(one, modern)
    assert isinstance(told, dict) and told["status"] == "input_required"
    assert told["inputRequests"] == asks
    task.status = TaskStatus("upstream-1", "input_required")
    told = detailed_task(one, modern)
    assert isinstance(told, dict) and told["status"] == "working"
    assert "inputRequests" not in told

    # Completed: the result as the call would have been answered, its bytes passed on.
    raw_json = b'{"content":[{"type":"text","text":"r\\u00e9port"}]}'
    task.end(result("réport", raw_json))
    told = detailed_task(one, modern)
    assert isinstance(told, bytes) and b'"text":"r\\u00e9port"' in told
    body = orjson.loads(told)
    assert body["status"] == "completed" and body["resultType"] == "complete"
    assert body["result"] == {"content": [{"type": "text", "text": "réport"}],
                              "resultType": "complete"}
    # Not kept as bytes: made anew, the hop's own _meta left behind.
    two = held(tasks, Task())
    two.task.end(CallToolResult([], raw={
        "content": [], "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "u"}}}))
    told = detailed_task(two, modern)
    assert isinstance(told, dict) and told["result"] == {"content": [],
                                                         "resultType": "complete"}


@pytest.mark.parametrize(("outcome", "status", "error"), [
    (ServerError("rate limited", code=-32603, data={"retry": 1}), "failed",
     {"code": -32603, "message": "rate limited", "data": {"retry": 1}}),
    (TaskLost("gone", server="ev"), "failed", None),
    (TaskCancelled("by its caller"), "cancelled", None),
])
def test_an_ended_task_without_a_result(outcome, status, error):
    tasks = table()
    one = held(tasks, Task())
    tasks.cancelled(one)
    one.task.end(outcome)
    told = detailed_task(one, p.ClientEra.MODERN)
    assert isinstance(told, dict) and told["status"] == status and "result" not in told
    if status == "cancelled":
        assert "error" not in told
        # Cancelled here: its last update is when.
        assert told["lastUpdatedAt"] == "2023-11-14T22:13:20.000Z"
    elif error is not None:
        assert told["error"] == error
    else:
        assert told["error"]["code"] == -32603 and told["error"]["data"]["kind"] == "TaskLost"


# --- rule 7: a legacy client's tasks ----------------------------------------------------


def test_a_legacy_client_lists_its_own_tasks_a_page_at_a_time():
    tasks = table(client_tasks=PAGE_SIZE * 2, tasks=PAGE_SIZE * 3)
    mine = [held(tasks, Task(), client="s1", owner="s1").id for _ in range(PAGE_SIZE + 1)]
    held(tasks, Task(), client="s2", owner="s2")
    first = tasks.page("s1", None)
    assert first is not None
    page, cursor = first
    assert [h.id for h in page] == mine[:PAGE_SIZE] and cursor is not None
    assert cursor not in "".join(mine), "a cursor names a place, not a task"
    second = tasks.page("s1", cursor)
    assert second is not None and [h.id for h in second[0]] == mine[PAGE_SIZE:]
    assert second[1] is None
    assert tasks.page("s3", None) == ([], None)
    for bad in ("x", "tl-tasks.", "tl-tasks.-1", 7):
        assert tasks.page("s1", bad) is None


def test_a_call_answered_at_once_is_held_as_a_task_that_has_ended():
    tasks = table()
    place = tasks.reserve("s1")
    assert isinstance(place, Place)
    kept = tasks.hold(place, EndedCall("ev", result("at once")), "s1", 5000)
    told = legacy_created(kept)["task"]
    assert told == {"taskId": kept.id, "status": "completed",
                    "createdAt": "2023-11-14T22:13:20.000Z",
                    "lastUpdatedAt": "2023-11-14T22:13:20.000Z", "ttl": 5000}
    assert legacy_result(kept) == {"result": {
        "content": [{"type": "text", "text": "at once"}],
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": kept.id}}}}
    assert tasks.drop_owner("s1") == [], "nothing of it runs to be cancelled"


def test_a_legacy_client_is_told_its_task_in_its_own_fields():
    tasks = table()
    task = Task(message="half", poll_interval_ms=500.0, ttl_ms=30000.0)
    kept = held(tasks, task, owner="s1")
    assert legacy_task(kept) == {"taskId": kept.id, "status": "working",
                                 "statusMessage": "half",
                                 "createdAt": "2023-11-14T22:13:20.000Z",
                                 "lastUpdatedAt": "2023-11-14T22:13:20.000Z",
                                 "ttl": 30000, "pollInterval": 500}
    task.end(ServerError("boom", code=-32603))
    assert legacy_task(kept)["status"] == "failed"
    assert legacy_result(kept)["error"]["code"] == -32603


@pytest.mark.parametrize(("task", "ttl"), [({}, None), ({"ttl": 1500}, 1500),
                                           ({"ttl": 0}, None), ({"ttl": True}, None),
                                           ({"ttl": "1"}, None), (None, None)])
def test_the_ttl_a_legacy_client_asks_for(task, ttl):
    assert asked_ttl_ms({} if task is None else {"task": task}) == ttl
