"""The retry driver: sends, and on failure follows a ``protocol.retry.RetryPlan``.

The rules are pure and live in ``protocol.retry``; this is the part that sleeps. Every
attempt is a new request (the caller's ``send`` builds it, so it gets a new id). On give-up
the last error is re-raised with ``attempts`` (the sends made) and a note saying why it
stopped. ``asyncio.CancelledError`` is never caught: cancelling the caller cancels the
retries.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..protocol.retry import Attempt, GiveUp, RetryPlan, classify
from ..telemetry.calls import note_retry

T = TypeVar("T")

#: Backoff jitter needs spread, not secrecy or reproducibility: one generator serves all
#: (a new ``Random()`` per call costs ~16 µs on the call path).
_JITTER = random.Random()


async def run_with_retries(
    send: Callable[[Attempt], Awaitable[T]],
    plan: RetryPlan,
    *,
    first_failure: Exception | None = None,
    sleep: Callable[[float], Awaitable[None]] | None = None,
    now: Callable[[], float] | None = None,
    rng: random.Random | None = None,
) -> T:
    """``sleep``/``now`` default to ``asyncio.sleep`` and the running loop's ``time``.
    Whether a failed attempt reached the wire is the error's own ``sent``.

    ``first_failure``: the caller made the first attempt itself (the hot path, which
    needs none of this when it succeeds) and it failed with this; the plan goes on from
    there."""
    if sleep is None:
        sleep = asyncio.sleep
    if now is None:
        now = asyncio.get_running_loop().time
    if rng is None:
        rng = _JITTER
    index = 0
    failure = first_failure
    while True:
        if failure is None:
            remaining = None if plan.deadline is None else plan.deadline - now()
            try:
                return await send(Attempt(index, plan.idempotency_key, remaining))
            except Exception as exc:  # noqa: BLE001 - the plan decides; CancelledError passes
                failure = exc
        made = index + 1
        outcome = classify(failure, sent=getattr(failure, "sent", None))
        remaining = None if plan.deadline is None else plan.deadline - now()
        decision = plan.decide(made, outcome, rng=rng, remaining_s=remaining)
        if isinstance(decision, GiveUp):
            failure.attempts = made  # type: ignore[attr-defined]  # any exception may carry it
            failure.add_note(f"trunkline retry: gave up after {made} attempt(s) of "
                             f"{plan.method}: {decision}")
            raise failure
        note_retry(made, failure, decision.after_s)  # the call's span and retry count
        failure = None
        await sleep(decision.after_s)
        index = decision.attempt
