"""What waits for a stream's reader (``gateway/outbox.py``): the ``Outbox`` rules event by
event, and the ``StreamWriter`` that ends a stream whose reader stays behind."""

from __future__ import annotations

import asyncio

from conftest import run
from trunkline.gateway import protocol as p
from trunkline.gateway.outbox import Outbox, StreamWriter, dropped_notice


def progress(value: int, token: str = "t") -> dict:
    return p.notification("notifications/progress", {"progressToken": token, "progress": value})


def log(text: str) -> dict:
    return p.notification("notifications/message", {"level": "info", "data": text})


def drained(outbox: Outbox) -> list[dict]:
    taken = []
    while (message := outbox.take()) is not None:
        taken.append(message)
    return taken


def test_a_reader_that_keeps_up_gets_every_message_as_it_came():
    outbox = Outbox(backlog=4)
    sent = [progress(1), log("a"), progress(2), p.response(1, {})]
    for message in sent:
        outbox.put(message)
    assert drained(outbox) == sent
    assert (outbox.coalesced, outbox.dropped) == (0, 0)


def test_behind_progress_keeps_the_latest_value_of_each_token_in_its_place():
    outbox = Outbox(backlog=100)
    outbox.put(progress(1))
    outbox.put(progress(1, "other"))
    for value in range(2, 1001):
        outbox.put(progress(value), behind=True)
    outbox.put(p.response(7, {"done": True}), behind=True)
    assert len(outbox) == 3  # one per token, and the answer
    assert drained(outbox) == [progress(1000), progress(1, "other"),
                               p.response(7, {"done": True})]
    assert outbox.coalesced == 999


def test_a_full_backlog_is_behind_even_when_no_write_waits():
    outbox = Outbox(backlog=2)
    outbox.put(progress(1))
    outbox.put(progress(1, "other"))
    outbox.put(progress(2))
    assert drained(outbox) == [progress(2), progress(1, "other")]


def test_log_messages_past_the_backlog_are_dropped_and_counted_in_one_notice():
    outbox = Outbox(backlog=3)
    for i in range(10):
        outbox.put(log(f"line {i}"))
    outbox.put(p.response(1, {}))  # never dropped, whatever the backlog
    outbox.put(log("after"))
    assert len(outbox) == 5
    assert drained(outbox) == [log("line 0"), log("line 1"), log("line 2"),
                               dropped_notice(8), p.response(1, {})]
    assert outbox.dropped == 8
    assert dropped_notice(8)["params"]["data"].startswith("8 log messages dropped")
    # Once read, logs go again; a later overflow gets a notice of its own.
    outbox.put(log("again"))
    assert drained(outbox) == [log("again")]


def test_repeated_list_changes_and_resource_updates_wait_once_each():
    outbox = Outbox(backlog=10)
    tools = p.list_changed("tools")
    tools_on_stream = p.list_changed("tools", 5)
    updated = p.notification("notifications/resources/updated", {"uri": "a://x"})
    other = p.notification("notifications/resources/updated", {"uri": "a://y"})
    for message in (tools, updated, tools, tools_on_stream, updated, other, tools):
        outbox.put(message, behind=True)
    assert drained(outbox) == [tools, updated, tools_on_stream, other]


def test_a_writer_ends_a_stream_whose_reader_takes_nothing():
    async def main():
        stuck = asyncio.get_running_loop().create_future()  # a socket nobody reads
        written: list[dict] = []
        ended: list[str] = []

        async def write(message: dict) -> None:
            written.append(message)
            await stuck

        writer = StreamWriter(write, ended.append, backlog=4, behind_s=0.2)
        task = asyncio.ensure_future(writer.run())
        writer.put(progress(1))
        await asyncio.sleep(0)
        for value in range(2, 500):
            writer.put(progress(value))
        for i in range(20):
            writer.put(log(f"line {i}"))
        assert len(writer.outbox) == 5  # progress 499, three log lines and the notice
        while not ended:
            await asyncio.sleep(0.05)
        assert "took nothing for 0.2 s (limit stream_behind_s)" in ended[0]
        writer.put(progress(999))  # ended: nothing more is held
        assert len(writer.outbox) == 5
        stuck.set_result(None)  # the face drops the connection: the write returns
        await asyncio.wait_for(task, 5)
        assert written == [progress(1)]
    run(main())


def test_a_slow_reader_is_not_ended_and_gets_the_latest_progress():
    async def main():
        written: list[dict] = []
        ended: list[str] = []

        async def write(message: dict) -> None:
            written.append(message)
            await asyncio.sleep(0.05)  # slow, but it reads

        writer = StreamWriter(write, ended.append, backlog=4, behind_s=0.2)
        task = asyncio.ensure_future(writer.run())
        for value in range(1, 41):
            writer.put(progress(value))
            await asyncio.sleep(0.01)
        writer.put(p.response(1, {}))
        writer.close()
        await asyncio.wait_for(task, 10)
        assert not ended
        assert written[-2:] == [progress(40), p.response(1, {})]
        assert len(written) < 40  # the values it was too slow for were coalesced
        values = [m["params"]["progress"] for m in written[:-1]]
        assert values == sorted(values)
    run(main())
