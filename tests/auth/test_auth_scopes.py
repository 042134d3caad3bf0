"""Scope selection, offline_access, step-up union and its bounds."""

from __future__ import annotations

import pytest

from trunkline.auth.scopes import (
    StepUpBudget,
    asks_for_more,
    initial_scope,
    scope_param,
    step_up_scope,
    with_offline_access,
)


@pytest.mark.parametrize("challenged, supported, expected", [
    (("files:read",), ("a", "b"), ("files:read",)),
    (None, ("a", "b"), ("a", "b")),
    ((), ("a", "b"), ("a", "b")),
    (None, None, None),
    (None, (), None),
    (("x", "x", "y"), None, ("x", "y")),
])
def test_initial_scope(challenged: tuple[str, ...] | None, supported: tuple[str, ...] | None,
                       expected: tuple[str, ...] | None) -> None:
    assert initial_scope(challenged, supported) == expected


def test_offline_access_only_where_the_authorization_server_lists_it() -> None:
    assert with_offline_access(("a",), ("a", "offline_access")) == ("a", "offline_access")
    assert with_offline_access(("a",), ("a", "b")) == ("a",)
    assert with_offline_access(("a",), None) == ("a",)
    assert with_offline_access(("offline_access", "a"), ("offline_access",)) == (
        "offline_access", "a")


def test_offline_access_never_makes_a_scope_appear() -> None:
    assert with_offline_access(None, ("offline_access",)) is None


def test_step_up_is_the_union_earlier_scopes_first() -> None:
    assert step_up_scope(("mcp:basic", "offline_access"), ("mcp:write", "mcp:basic")) == (
        "mcp:basic", "offline_access", "mcp:write")
    assert step_up_scope((), ("a",)) == ("a",)


def test_asks_for_more() -> None:
    assert asks_for_more(("a",), ("a", "b"))
    assert not asks_for_more(("a", "b"), ("b",))
    assert not asks_for_more(("a",), ())


def test_scope_param() -> None:
    assert scope_param(("a", "b")) == "a b"
    assert scope_param(()) is None and scope_param(None) is None


def test_step_up_budget_is_per_server_and_slides() -> None:
    budget = StepUpBudget(limit=2, window_s=100)
    assert budget.spend("s", 0) and budget.spend("s", 10)
    assert not budget.spend("s", 20)
    assert budget.spend("other", 20)
    assert not budget.spend("s", 99.9)
    assert budget.spend("s", 100.0)  # the first one left the window
    assert not budget.spend("s", 105)


def test_a_step_up_budget_of_zero_allows_none() -> None:
    assert not StepUpBudget(limit=0).spend("s", 0)
    with pytest.raises(ValueError):
        StepUpBudget(limit=-1)
