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


@pytest.mark.parametrize(("pair", "says"), [
    ("nope=1", "NAME one of"), ("listen_uris", "NAME=VALUE"), ("listen_uris=x", "integer"),
    ("listen_uris=0", "positive"), ("client_server_share=2", "at most 1"),
    ("head_timeout_s=soon", "number"),
])
def test_a_bad_limit_is_refused_naming_it(pair, says):
    with pytest.raises(ConfigurationError, match=says):
        Limits.parse([pair])
