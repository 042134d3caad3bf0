"""``Host``'s option groups, and its keywords of before them: each still works for one
release, with a ``DeprecationWarning`` naming where it goes now."""

from __future__ import annotations

import warnings

import pytest

from conftest import run, scripted
from trunkline.catalog import ToolCollision
from trunkline.catalog.filters import ToolBounds
from trunkline.parent.host import Host
from trunkline.parent.host_options import (
    OLD_KEYWORDS,
    CallOptions,
    CatalogOptions,
    ClientOptions,
    TelemetryOptions,
    TrustOptions,
)
from trunkline.parent.pin_store import PinStore
from trunkline.protocol import NegotiationConfig
from trunkline.protocol.mrtr import MrtrLimits
from trunkline.protocol.retry import RetryPolicy
from trunkline.settings import HostSettings

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0))


def _on_log(server: str, params: dict) -> None:
    pass


async def _answer(params: dict) -> dict:
    return {}


#: One value for every keyword ``Host`` took before the groups.
OLD = {
    "client_info": {"name": "old-host", "version": "9"},
    "capabilities": {"sampling": {}},
    "input_handlers": {"sampling/createMessage": _answer},
    "on_log": _on_log,
    "collision": "reject",
    "model_safe_names": False,  # True warns on its own: without effect now
    "list_timeout": 7.0,
    "pins": PinStore(),
    "approve_first_sight": True,
    "tool_bounds": ToolBounds(description_chars=100),
    "call_timeout": 5.0,
    "retry": RetryPolicy(max_attempts=2),
    "mrtr_limits": MrtrLimits(max_rounds=3),
    "tracer_provider": None,
    "meter_provider": None,
}


def test_every_old_keyword_is_known_and_still_works_with_a_deprecation_warning():
    assert set(OLD) == set(OLD_KEYWORDS)
    for keyword, value in OLD.items():
        with pytest.warns(DeprecationWarning, match=f"{keyword}= -> "):
            Host(settings=SETTINGS, **{keyword: value})


def test_the_old_keywords_make_the_host_the_groups_make():
    with pytest.warns(DeprecationWarning) as caught:
        old = Host(settings=SETTINGS, **OLD)
    assert len(caught) == 1  # one warning names them all
    message = str(caught[0].message)
    assert "call_timeout= -> calls=CallOptions(call_timeout_s=...)" in message
    assert "list_timeout= -> catalog=CatalogOptions(list_timeout_s=...)" in message
    assert "collision= -> catalog=CatalogOptions(collision=...)" in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the groups themselves are not deprecated
        new = Host(settings=SETTINGS,
                   client=ClientOptions(info=OLD["client_info"],
                                        capabilities=OLD["capabilities"],
                                        input_handlers=OLD["input_handlers"],
                                        on_log=_on_log),
                   catalog=CatalogOptions(collision="reject", model_safe_names=False,
                                          list_timeout_s=7.0),
                   trust=TrustOptions(pins=OLD["pins"], approve_first_sight=True,
                                      tool_bounds=OLD["tool_bounds"]),
                   calls=CallOptions(call_timeout_s=5.0, retry=OLD["retry"],
                                     mrtr_limits=OLD["mrtr_limits"]),
                   telemetry=TelemetryOptions())
    for host in (old, new):
        assert host.call_timeout() == 5.0
        assert host.retry_policy is OLD["retry"]
        assert host.settings.identity.name == "old-host"
        assert host.settings.identity.capabilities == {"sampling": {}}
        assert "sampling/createMessage" in host.settings.answered_requests
    assert old.settings == new.settings


def test_an_old_keyword_is_put_over_the_group_given_beside_it():
    with pytest.warns(DeprecationWarning):
        host = Host(settings=SETTINGS, calls=CallOptions(call_timeout_s=9.0, retry=OLD["retry"]),
                    call_timeout=3.0)
    assert host.call_timeout() == 3.0
    assert host.retry_policy is OLD["retry"]


def test_a_keyword_host_never_took_is_a_type_error():
    with pytest.raises(TypeError, match="collisions"):
        Host(settings=SETTINGS, collisions="reject")


def test_the_old_collision_keyword_still_rejects_a_collision(no_leaks):
    async def main():
        with pytest.warns(DeprecationWarning):
            host = Host(collision="reject", settings=SETTINGS)
        async with host:
            await host.add_server("alpha", scripted("--tools", "echo"))
            with pytest.raises(ToolCollision):
                await host.add_server("beta", scripted("--tools", "echo,search"))
            assert [s.name for s in host.servers()] == ["alpha"]
    run(main())
