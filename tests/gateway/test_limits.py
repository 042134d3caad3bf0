"""The gateway's bounds (``gateway/limits.py``): defaults, and ``serve --limit NAME=VALUE``."""

from __future__ import annotations

import pytest

from trunkline.errors import ConfigurationError
from trunkline.gateway.limits import Limits


def test_limits_are_given_by_name_over_the_defaults():
    limits = Limits.parse(["listen_uris=10", "session-idle-s=2.5"])
    assert (limits.listen_uris, limits.session_idle_s) == (10, 2.5)
    assert limits.client_calls == Limits().client_calls
    assert Limits.parse(None) == Limits()


def test_a_clients_rate_is_off_unless_given_and_its_bucket_sized_with_it():
    assert (Limits().client_rate, Limits().client_burst) == (0.0, None)
    limits = Limits.parse(["client_rate=5", "client_burst=10"])
    assert (limits.client_rate, limits.client_burst) == (5.0, 10)
    assert isinstance(limits.client_burst, int)
    assert Limits.parse(["client-rate=0.5"]).client_burst is None
    assert Limits.parse(["client_rate=0"]) == Limits()


@pytest.mark.parametrize(("pairs", "says"), [
    ("nope=1", "NAME one of"), ("listen_uris", "NAME=VALUE"), ("listen_uris=x", "integer"),
    ("listen_uris=0", "positive"), ("client_server_share=2", "at most 1"),
    ("head_timeout_s=soon", "number"), ("head_timeout_s=nan", "positive"),
    ("client_rate=-1", "positive number or 0"), ("client_rate=nan", "positive number or 0"),
    ("client_rate=inf", "finite"), ("client_rate=fast", "number"),
    ("client_rate=1 client_burst=0", "positive"), ("client_rate=1 client_burst=-2", "positive"),
    ("client_rate=1 client_burst=1.5", "integer"), ("client_burst=3", "give client_rate too"),
])
def test_a_bad_limit_is_refused_naming_it(pairs, says):
    with pytest.raises(ConfigurationError, match=says):
        Limits.parse(pairs.split())
