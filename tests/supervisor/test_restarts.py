"""The restart planner alone: what happens when a worker is gone, decided without a
process, a loop or a clock of its own."""

from __future__ import annotations

import random

from trunkline.parent.restarts import CoolDown, ReprobeIn, RestartIn, RestartPlanner, StayDown
from trunkline.settings import RestartPolicy

POLICY = RestartPolicy(base_s=0.1, factor=2.0, cap_s=1.0, max_restarts=3, window_s=10.0,
                       cool_down_s=30.0, reprobe_cap_s=4.0)


def planner() -> RestartPlanner:
    return RestartPlanner(POLICY, random.Random(5))


def test_losses_restart_with_growing_backoff_until_the_intensity_limit():
    p = planner()
    decisions = [p.lost(now=100.0 + i, cause="server exited (exit code 4)") for i in range(4)]
    assert [type(d) for d in decisions] == [RestartIn, RestartIn, RestartIn, CoolDown]
    for attempt, d in enumerate(decisions[:3]):
        assert 0 <= d.delay_s <= POLICY.ceiling(attempt) and d.reason.startswith("server exited")
    assert decisions[3].delay_s == 30.0 and "crash loop: 3 restarts within 10 s" in decisions[3].reason
    # After the cool-down, a fresh budget.
    assert isinstance(p.lost(now=200.0, cause="again"), RestartIn)


def test_losses_outside_the_window_do_not_count():
    p = planner()
    assert all(isinstance(p.lost(now=t, cause="x"), RestartIn) for t in (0.0, 20.0, 40.0, 60.0))


def test_silence_is_probed_again_with_its_own_growing_backoff_never_as_a_crash():
    p = planner()
    delays = []
    for _ in range(10):
        d = p.refused("era refused: no answer", retry_later=True)
        assert isinstance(d, ReprobeIn) and "probing again in" in d.reason
        delays.append(d.delay_s)
    assert all(0 <= d <= POLICY.reprobe_cap_s for d in delays)
    assert max(delays) > POLICY.cap_s, "re-probes back off past the restart cap"
    # Re-probes never used the crash budget.
    assert [type(p.lost(now=0.0, cause="x")) for _ in range(3)] == [RestartIn] * 3


def test_a_verdict_resets_the_silent_streak():
    p = planner()
    for _ in range(8):
        p.refused("silence", retry_later=True)
    p.ready()
    assert p.refused("silence", retry_later=True).delay_s <= POLICY.ceiling(0)


def test_a_refusal_on_evidence_stays_down():
    assert planner().refused("era refused: -32601", retry_later=False) == StayDown(
        "era refused: -32601")


def test_an_explicit_retry_starts_a_fresh_budget():
    p = planner()
    for i in range(3):
        p.lost(now=float(i), cause="x")
    p.reset()
    assert isinstance(p.lost(now=3.0, cause="x"), RestartIn)
