"""The restart planner alone: what happens when a worker is gone, decided without a
process, a loop or a clock of its own."""

from __future__ import annotations

import random

from trunkline.parent.restarts import CoolDown, ReprobeIn, RestartIn, RestartPlanner, StayDown
from trunkline.protocol import NegotiationConfig
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
    assert (
        decisions[3].delay_s == 30.0 and "crash loop: 3 restarts within 10 s" in decisions[3].reason
    )
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


# --- patience: each connection after silence waits longer -------------------------------

NEGOTIATION = NegotiationConfig(discover_timeout_s=0.5, legacy_probe_timeout_s=1.5,
                                max_discover_timeout_s=5.0)


def patient_planner() -> RestartPlanner:
    return RestartPlanner(POLICY, random.Random(5), NEGOTIATION)


def next_deadlines(p: RestartPlanner) -> tuple[float, float]:
    """The deadlines the next connection's probes get (discover, initialize)."""
    negotiation = NEGOTIATION.after_silence(p.patience)
    return negotiation.discover_timeout_s, negotiation.legacy_probe_timeout_s


def test_each_silent_refusal_in_a_row_doubles_the_next_probes_deadlines_up_to_the_cap():
    p = patient_planner()
    deadlines, said = [next_deadlines(p)], []
    for _ in range(6):
        said.append(p.refused("era refused: no answer yet", retry_later=True).reason)
        deadlines.append(next_deadlines(p))
    assert [d for d, _ in deadlines] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert [i for _, i in deadlines] == [1.5, 3.0, 5.0, 5.0, 5.0, 5.0, 5.0]
    # The status says how long the next connection waits.
    assert [r.rsplit(", ", 1)[1] for r in said] == [
        "waiting up to 1 s", "waiting up to 2 s", "waiting up to 4 s", "waiting up to 5 s",
        "waiting up to 5 s", "waiting up to 5 s"]


def test_patience_ends_when_the_server_proves_an_era_or_the_operator_retries():
    for end in (RestartPlanner.ready, RestartPlanner.reset):
        p = patient_planner()
        for _ in range(3):
            p.refused("silence", retry_later=True)
        assert next_deadlines(p) == (4.0, 5.0)
        end(p)
        assert next_deadlines(p) == (0.5, 1.5)
        assert p.refused("silence", retry_later=True).reason.endswith("waiting up to 1 s")


def test_patience_is_kept_across_a_lost_connection_and_grows_only_with_silence():
    """A connection abandoned for two sessions (the patient one that finally heard the
    server) restarts as a lost one: the next, proven modern, is as patient."""
    p = patient_planner()
    p.refused("silence", retry_later=True)
    p.lost(now=0.0, cause="this connection holds two sessions")
    assert p.refused("era refused: -32601", retry_later=False) == StayDown(
        "era refused: -32601")
    assert next_deadlines(p) == (1.0, 3.0)


def test_a_deadline_configured_above_the_cap_is_kept_and_patience_never_overflows():
    slow = NegotiationConfig(discover_timeout_s=200.0, max_discover_timeout_s=120.0)
    assert slow.after_silence(3).discover_timeout_s == 200.0
    assert NEGOTIATION.after_silence(100_000).discover_timeout_s == 5.0
