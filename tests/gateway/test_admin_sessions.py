"""Operators' browser sessions and the bound on failed logins (``gateway/admin_sessions.py``,
pure): idle and absolute expiry, the bound on sessions, logout, CSRF tokens, and failed
logins counted per source within a window. A clock of the test's own moves time."""

from __future__ import annotations

from trunkline.gateway.admin_sessions import (
    IDLE_S,
    LOGIN_FAILURES,
    LOGIN_WINDOW_S,
    MAX_AGE_S,
    MAX_SESSIONS,
    LoginAttempts,
    Sessions,
    holder,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_lives_while_used_and_ends_idle_or_old():
    clock = Clock()
    sessions = Sessions("rep-1", clock=clock)
    cookie, session = sessions.open("admin-key-1")
    assert holder(cookie) == "rep-1" and cookie.count(".") == 1
    assert sessions.find(cookie) is session
    assert sessions.find(cookie + "x") is None and sessions.find("other." + cookie[6:]) is None
    # Used just before it would idle out, again and again: it lives to its maximum age.
    while clock.now + IDLE_S - 1 < session.opened + MAX_AGE_S:
        clock.now += IDLE_S - 1
        assert sessions.find(cookie) is session
    clock.now = session.opened + MAX_AGE_S
    assert sessions.find(cookie) is None
    cookie, session = sessions.open("admin-key-1")
    clock.now += IDLE_S
    assert sessions.find(cookie) is None and len(sessions) == 0


def test_csrf_logout_and_the_bound_on_sessions():
    clock = Clock()
    sessions = Sessions("rep-1", clock=clock)
    cookie, session = sessions.open("ops")
    assert session.csrf_matches(session.csrf)
    assert not session.csrf_matches(None) and not session.csrf_matches(session.csrf[:-1])
    other_cookie, other = sessions.open("ops")
    assert other.csrf != session.csrf and other_cookie != cookie
    assert sessions.close(cookie) and not sessions.close(cookie)
    assert sessions.find(cookie) is None and sessions.find(other_cookie) is other
    cookies = [sessions.open("ops")[0] for _ in range(MAX_SESSIONS)]
    assert len(sessions) == MAX_SESSIONS
    assert sessions.find(other_cookie) is None  # used least recently: ended first
    assert all(sessions.find(c) is not None for c in cookies)


def test_failed_logins_are_bounded_per_source():
    clock = Clock()
    attempts = LoginAttempts(clock=clock)
    for _ in range(LOGIN_FAILURES - 1):
        attempts.failed("192.0.2.1")
        clock.now += 1
    assert attempts.wait_s("192.0.2.1") == 0
    attempts.failed("192.0.2.1")
    wait = attempts.wait_s("192.0.2.1")
    assert 0 < wait <= LOGIN_WINDOW_S
    assert attempts.wait_s("192.0.2.2") == 0 and attempts.wait_s(None) == 0
    clock.now += wait
    assert attempts.wait_s("192.0.2.1") == 0  # the oldest failure left the window
    attempts.failed("192.0.2.1")
    assert attempts.wait_s("192.0.2.1") > 0
    attempts.succeeded("192.0.2.1")
    assert attempts.wait_s("192.0.2.1") == 0
