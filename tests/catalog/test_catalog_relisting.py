"""The re-listing pacing alone (``catalog.relisting``): when one server's tools are listed
again, decided without a process, a loop or a clock of its own."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trunkline.catalog.relisting import RelistPacing
from trunkline.protocol.backoff import Backoff

GAPS = Backoff(base_s=0.5, factor=2.0, cap_s=30.0)
RETRIES = Backoff(base_s=0.05, factor=2.0, cap_s=30.0)


def pacing() -> RelistPacing:
    return RelistPacing(GAPS, RETRIES, random.Random(7))


def listed(p: RelistPacing, now: float, took: float = 0.1, ok: bool = True) -> float:
    """One listing that starts at ``now``; the time it ended."""
    assert p.wait(now) == 0.0
    p.started()
    p.finished(now + took, ok=ok)
    return now + took


def test_nothing_is_listed_until_something_is_wanted():
    p = pacing()
    assert p.wait(0.0) is None
    p.announced(0.0)
    assert p.wait(0.0) == 0.0


def test_a_burst_of_announcements_is_one_listing_and_one_more_after_it():
    p = pacing()
    for t in (0.0, 0.01, 0.02):
        p.announced(t)
    assert p.wait(0.02) == 0.0
    p.started()
    for t in (0.03, 0.04, 0.05):  # while it runs: one more after it, at once
        p.announced(t)
        assert p.wait(t) is None
    p.finished(0.1, ok=True)
    assert p.wait(0.1) == 0.0
    p.started()
    p.finished(0.2, ok=True)
    assert p.wait(0.2) is None  # all covered


def test_a_server_that_changes_on_every_listing_is_listed_ever_less_often_up_to_the_cap():
    p = pacing()
    now, gaps = 0.0, []
    p.announced(now)
    for _ in range(12):
        p.started()
        p.announced(now + 0.05)  # it announces a change while every listing runs
        now += 0.1
        p.finished(now, ok=True)
        gap = p.wait(now)
        gaps.append(gap)
        now += gap
    assert gaps[:8] == pytest.approx([0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0])
    assert gaps[8:] == pytest.approx([30.0] * 4)


def test_announcements_before_a_quiet_spell_grow_the_wait_and_a_quiet_spell_starts_over():
    p = pacing()
    p.announced(0.0)
    end = listed(p, 0.0)
    p.announced(end + 0.2)  # within 0.5 s of its end: pressing, the first: at once
    assert p.wait(end + 0.2) == 0.0 and p.streak == 1
    end = listed(p, end + 0.2)
    p.announced(end + 0.9)  # within 1 s of its end: pressing again, 0.5 s from the end
    assert p.streak == 2 and p.wait(end + 0.9) == 0.0
    end = listed(p, end + 0.9)
    p.announced(end + 0.3)  # within 2 s: 1 s from the end
    assert p.streak == 3 and p.wait(end + 0.3) == pytest.approx(0.7)
    end = listed(p, end + 1.0)
    p.announced(end + 4.0)  # quiet for 4 s (the streak's window): at once, over
    assert p.wait(end + 4.0) == 0.0 and p.streak == 0


def test_a_server_announcing_a_change_every_200_ms_is_listed_less_and_less():
    p = pacing()
    starts, now = [], 0.0
    while now < 20.0:
        p.announced(now)
        wait = p.wait(now)
        if wait == 0.0:
            starts.append(now)
            p.started()
            p.finished(now + 0.01, ok=True)
        now = round(now + 0.2, 6)
    # 100 announcements, a handful of listings, ever further apart.
    assert len(starts) <= 8
    apart = [b - a for a, b in itertools.pairwise(starts)]
    assert apart == sorted(apart)


def test_a_failed_listing_is_tried_again_after_the_restarts_backoff():
    p = pacing()
    p.announced(0.0)
    now, waits = 0.0, []
    for failures in range(12):
        now = listed(p, now, ok=False)
        wait = p.wait(now)
        assert wait is not None and 0.0 <= wait <= RETRIES.ceiling(failures)
        waits.append(wait)
        now += wait
    assert p.failures == 12
    assert max(waits) <= 30.0
    listed(p, now, ok=True)
    assert p.failures == 0 and p.wait(now + 1.0) is None


def test_a_new_connection_is_listed_at_once_through_a_gap_or_a_backoff():
    p = pacing()
    p.announced(0.0)
    end = listed(p, 0.0, ok=False)
    p.announced(end, at_once=True)
    assert p.wait(end) == 0.0
    p.started()
    p.announced(end + 0.01)
    p.announced(end + 0.02, at_once=True)  # a newer connection while it runs
    p.finished(end + 0.1, ok=True)
    assert p.wait(end + 0.1) == 0.0


def test_an_explicit_listing_beside_a_paced_one_does_not_end_it():
    p = pacing()
    p.announced(0.0)
    p.started()
    p.started()  # Host.refresh_tools while the re-lister lists
    p.finished(0.1, ok=True)
    p.announced(0.15)
    assert p.running and p.wait(0.15) is None
    p.finished(0.2, ok=True)
    assert p.wait(0.2) is not None


@given(st.lists(st.tuples(st.floats(0.0, 5.0), st.sampled_from(["announce", "list-ok",
                                                                 "list-fail", "connect"])),
                max_size=60))
def test_a_wanted_listing_is_never_further_off_than_the_caps(events):
    p = pacing()
    now = 0.0
    for step, event in events:
        now += step
        if event == "announce":
            p.announced(now)
        elif event == "connect":
            p.announced(now, at_once=True)
        else:
            wait = p.wait(now)
            if wait is None or wait > 0:
                continue
            p.started()
            p.finished(now, ok=event == "list-ok")
            after = p.wait(now)
            if event == "list-ok":
                assert after is None  # nothing was announced while it ran
            else:
                assert after is not None and 0.0 <= after <= RETRIES.cap_s
        wait = p.wait(now)
        assert wait is None or 0.0 <= wait <= max(GAPS.cap_s, RETRIES.cap_s)
