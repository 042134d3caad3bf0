"""The store of legacy call streams kept for resumption (``gateway/event_streams.py``):
bounded by bytes, per session and in all, never by refusing a call."""

from __future__ import annotations

import asyncio

from trunkline.gateway import event_streams
from trunkline.gateway.event_streams import StreamStore
from trunkline.gateway.limits import Limits


def _answer(n: int, size: int = 100) -> dict:
    return {"jsonrpc": "2.0", "id": n, "result": {"content": [
        {"type": "text", "text": "x" * size}]}}


def test_a_store_never_refuses_a_call_its_stream():
    """Calls at a sustained rate, each answered and never read (its client gone), far
    beyond what a count of streams once allowed (65,536): every one gets its stream,
    and the store stays within its bound."""
    async def main():
        store = StreamStore()
        for n in range(70_000):
            stream = store.open(f"session-{n % 64}")
            assert stream is not None, f"call {n} refused"
            stream.add(_answer(n))
            store.finished(stream)
        assert 0 < store.size <= Limits.kept_bytes
    asyncio.run(main())


def test_the_oldest_finished_streams_go_first_and_a_running_one_never():
    async def main():
        size = event_streams.STREAM_OVERHEAD + 1500  # a little more than one finished stream below
        # A session holds its running stream and two finished ones; the store, that and
        # two more.
        store = StreamStore(session_kept_bytes=3 * size, kept_bytes=int(4.5 * size))
        running = store.open("one")
        finished = []
        for n in range(4):
            stream = store.open("one")
            stream.add(_answer(n, 1200))
            store.finished(stream)
            finished.append(stream)
        # The session's bound: its oldest finished went, never its running stream.
        assert [s.kept for s in finished] == [False, False, True, True]
        assert running.kept and store.resume(f"{running.id}-0", "one") is not None
        assert store.size_of("one") <= 3 * size and store.evicted == 2
        # The total bound: anyone's oldest finished stream goes.
        others = []
        for n in range(3):
            stream = store.open("two")
            stream.add(_answer(n, 1200))
            store.finished(stream)
            others.append(stream)
        assert store.size <= 4.5 * size
        assert [s.kept for s in finished[2:]] == [False, True]
        assert all(s.kept for s in others) and running.kept
        # A stream written out in full is not kept; one past its keeping goes at the sweep.
        store.delivered(others[0])
        assert store.resume(f"{others[0].id}-0", "two") is None
        store.sweep(others[2].kept_until)
        assert not any(s.kept for s in others) and running.kept
        assert store.size == store.size_of("one") == running.size
    asyncio.run(main())


def test_running_streams_past_a_bound_keep_nothing_finished():
    """When running streams alone pass the session's bound, a new call still gets its
    stream; a stream that finishes then goes at once (its follower still reads it)."""
    async def main():
        store = StreamStore(session_kept_bytes=4000, kept_bytes=1 << 20)
        running = [store.open("one") for _ in range(2)]
        for stream in running:
            stream.add(_answer(0, 1500))
        assert store.size_of("one") > 4000
        late = store.open("one")
        assert late.kept
        late.add(_answer(1, 10))
        store.finished(late)
        assert not late.kept and all(s.kept for s in running)
        followed = [chunk async for chunk in late.follow()]
        # Both its events (the priming one and the answer) as one chunk: one write.
        assert len(followed) == 1 and followed[0][0] == 1
        assert followed[0][1].count(b"\n\n") == 2 and b'"id":1' in followed[0][1]
        # One stream holds at most the session's bound: its oldest events go first.
        big = running[0]
        for n in range(10):
            big.add(_answer(n, 1000))
        assert big.size <= 4000 and not big.holds(-1)
    asyncio.run(main())
