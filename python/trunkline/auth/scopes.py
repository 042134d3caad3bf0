"""Which scopes to ask for. Pure.

Rules (MCP authorization, "Scope Selection Strategy" and "Step-Up Authorization Flow"):

1. First authorization: the ``scope`` of the 401's Bearer challenge; else every scope of
   the protected resource metadata's ``scopes_supported``; else no ``scope`` parameter at
   all (the authorization server's default). An empty list counts as none given.
2. ``offline_access`` (a refresh token, so a restarted host need not ask the user again)
   is added to a requested scope only when the authorization server's own
   ``scopes_supported`` lists it. It never makes a ``scope`` parameter appear where rule 1
   sends none, which would narrow the grant to that one scope.
3. Step-up on 403 ``insufficient_scope``: the union of what the current token was asked
   for and what the challenge requires, earlier scopes first, so escalating one operation
   keeps the permissions of the others.
4. A step-up that would ask for nothing new cannot help (the authorization server was
   already asked for every scope named): it is refused rather than repeated. And however
   the challenges vary, a server gets at most ``StepUpBudget.limit`` step-ups in
   ``window_s`` seconds, so a server that never accepts ends in an error, not a loop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

OFFLINE_ACCESS = "offline_access"


def initial_scope(challenged: tuple[str, ...] | None,
                  scopes_supported: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """Rule 1: the scopes of a first authorization, or ``None`` to send no ``scope``."""
    if challenged:
        return _unique(challenged)
    if scopes_supported:
        return _unique(scopes_supported)
    return None


def with_offline_access(scope: tuple[str, ...] | None,
                        server_scopes_supported: tuple[str, ...] | None
                        ) -> tuple[str, ...] | None:
    """Rule 2."""
    if scope is None or OFFLINE_ACCESS in scope:
        return scope
    if OFFLINE_ACCESS in (server_scopes_supported or ()):
        return (*scope, OFFLINE_ACCESS)
    return scope


def step_up_scope(previous: Iterable[str], required: Iterable[str]) -> tuple[str, ...]:
    """Rule 3: the union, earlier scopes first."""
    return _unique((*previous, *required))


def asks_for_more(previous: Iterable[str], required: Iterable[str]) -> bool:
    """Rule 4, first half: whether ``required`` names a scope not asked for before."""
    return not set(required) <= set(previous)


def scope_param(scope: tuple[str, ...] | None) -> str | None:
    """The ``scope`` request parameter (RFC 6749 §3.3), or ``None`` to leave it out."""
    return " ".join(scope) if scope else None


class StepUpBudget:
    """Rule 4, second half: step-ups per server in a sliding window."""

    def __init__(self, limit: int = 2, window_s: float = 600.0) -> None:
        if limit < 0 or window_s <= 0:
            raise ValueError("a step-up budget needs limit >= 0 and window_s > 0")
        self.limit = limit
        self.window_s = window_s
        self._spent: dict[str, deque[float]] = {}

    def spend(self, server: str, now: float) -> bool:
        """Take one step-up for ``server`` at time ``now``; ``False`` when none is left."""
        times = self._spent.setdefault(server, deque())
        while times and times[0] <= now - self.window_s:
            times.popleft()
        if len(times) >= self.limit:
            return False
        times.append(now)
        return True


def _unique(scopes: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for s in scopes if s))
