"""Secrets print as a placeholder and come out only through reveal()."""

from __future__ import annotations

import logging

import pytest

from trunkline.auth.secret import PLACEHOLDER, Secret


def test_a_secret_never_prints(caplog: pytest.LogCaptureFixture) -> None:
    secret = Secret("hunter2")
    assert repr(secret) == str(secret) == f"{secret}" == f"{secret:>20}" == PLACEHOLDER
    assert "hunter2" not in repr([secret, {"k": secret}])
    caplog.set_level(logging.DEBUG)
    logging.getLogger("trunkline.auth").info("token %s %r", secret, secret)
    assert "hunter2" not in caplog.text
    assert "hunter2" not in str(ValueError(secret))
    assert secret.reveal() == "hunter2"


def test_secrets_compare_by_value_and_are_not_hashable() -> None:
    assert Secret("a") == Secret("a") and Secret("a") != Secret("b")
    assert Secret("a") != "a"
    with pytest.raises(TypeError):
        hash(Secret("a"))


@pytest.mark.parametrize("value", ["", None, 7])
def test_a_secret_is_a_non_empty_string(value: object) -> None:
    with pytest.raises(ValueError):
        Secret(value)  # type: ignore[arg-type]  # not a str on purpose
