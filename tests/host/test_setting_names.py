"""A setting has one name from the configuration file to the code (a duration ends in
``_s``, a bound on calls in flight is ``max_in_flight``), and the names of before that
rule still work for one release, each with a ``DeprecationWarning`` pointing at the
caller's line."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import warnings

import pytest

from conftest import run, scripted
from trunkline import channel as ch
from trunkline import config
from trunkline.catalog.filters import ToolBounds
from trunkline.errors import ConfigurationError
from trunkline.gateway.limits import Limits
from trunkline.gateway.serve import GatewaySettings
from trunkline.params import stdio
from trunkline.parent import host_options
from trunkline.parent.host import Host
from trunkline.protocol import NegotiationConfig
from trunkline.protocol.mrtr import MrtrLimits
from trunkline.protocol.retry import RetryPolicy
from trunkline.settings import OLD_SERVER_NAMES, HostSettings, RestartPolicy, ServerConfig

SETTINGS = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=20.0))

#: A value for each of ``ServerConfig``'s old names, none of them the default.
OLD = {"call_timeout": 12.5, "discover_timeout": 30.0, "max_discover_timeout": 600.0,
       "max_inflight": 7}
#: The same, by the names of now.
NEW = {OLD_SERVER_NAMES[name]: value for name, value in OLD.items()}


#: Every group of settings a host program or an operator gives.
SETTING_GROUPS = (ServerConfig, HostSettings, RestartPolicy, NegotiationConfig, MrtrLimits,
                  RetryPolicy, ToolBounds, host_options.ClientOptions,
                  host_options.CatalogOptions, host_options.TrustOptions,
                  host_options.CallOptions, host_options.TelemetryOptions, GatewaySettings,
                  Limits)
#: Settings in floats that are no durations: a multiplier, a fraction, a rate (a second).
NOT_DURATIONS = {"factor", "client_server_share", "client_rate"}


@pytest.mark.parametrize("group", SETTING_GROUPS, ids=lambda group: group.__name__)
def test_every_duration_setting_ends_in_s_and_a_bound_on_calls_in_flight_is_max_in_flight(
        group):
    for field in dataclasses.fields(group):
        if re.fullmatch(r"float( \| None)?", str(field.type)) and field.name not in NOT_DURATIONS:
            assert field.name.endswith("_s"), f"{group.__name__}.{field.name}: seconds?"
        assert "inflight" not in field.name, f"{group.__name__}.{field.name}"


def test_each_key_of_the_file_in_milliseconds_is_the_field_of_its_name_in_seconds():
    in_ms = sorted(key for key in config._COMMON_KEYS if key.endswith("Ms"))
    assert in_ms == ["callTimeoutMs", "discoverTimeoutMs", "maxDiscoverTimeoutMs"]
    names = {field.name for field in dataclasses.fields(ServerConfig)}
    for key in in_ms:
        assert re.sub(r"[A-Z]", lambda m: "_" + m[0].lower(), key[:-2]) + "_s" in names
    servers = config.parse_config({"mcpServers": {"x": {
        "command": "c", "callTimeoutMs": 1500, "discoverTimeoutMs": 2500,
        "maxDiscoverTimeoutMs": 40000}}})
    assert (servers[0].call_timeout_s, servers[0].discover_timeout_s,
            servers[0].max_discover_timeout_s) == (1.5, 2.5, 40.0)


def test_the_new_names_are_the_fields_and_do_not_warn():
    assert set(NEW) == {"call_timeout_s", "discover_timeout_s", "max_discover_timeout_s",
                        "max_in_flight"}
    assert set(NEW) <= {field.name for field in dataclasses.fields(ServerConfig)}
    assert not set(OLD) & {field.name for field in dataclasses.fields(ServerConfig)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = ServerConfig("s", stdio("x"), **NEW)
        assert {name: getattr(config, name) for name in NEW} == NEW


@pytest.mark.parametrize("old", sorted(OLD))
def test_each_old_keyword_of_server_config_still_works_and_warns(old):
    new = OLD_SERVER_NAMES[old]
    with pytest.warns(DeprecationWarning, match=f"{old}= is deprecated, use {new}=") as caught:
        config = ServerConfig("s", stdio("x"), **{old: OLD[old]})
    assert caught[0].filename == __file__  # it points at the caller's line
    assert config == ServerConfig("s", stdio("x"), **{new: OLD[old]})


@pytest.mark.parametrize("old", sorted(OLD))
def test_each_old_attribute_of_server_config_still_reads_and_warns(old):
    config = ServerConfig("s", stdio("x"), **NEW)
    with pytest.warns(DeprecationWarning, match=f"ServerConfig.{old} is deprecated") as caught:
        assert getattr(config, old) == OLD[old]
    assert caught[0].filename == __file__


def test_old_keywords_are_checked_and_replace_takes_them_too():
    with pytest.warns(DeprecationWarning) as caught:
        config = ServerConfig("s", stdio("x"), **OLD)
    assert len(caught) == 1  # one warning names them all
    assert config == ServerConfig("s", stdio("x"), **NEW)
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigurationError, match="max_in_flight"):
        ServerConfig("s", stdio("x"), max_inflight=0)
    with pytest.warns(DeprecationWarning, match="max_inflight= is deprecated"):
        assert dataclasses.replace(config, max_inflight=3).max_in_flight == 3
    with pytest.raises(TypeError, match="max_in_fligth"):
        ServerConfig("s", stdio("x"), max_in_fligth=3)


def test_a_server_config_made_with_old_names_crosses_the_process_boundary_by_the_new():
    with pytest.warns(DeprecationWarning):
        config = ServerConfig("s", stdio("x"), **OLD)
    spec = ch.WorkerSpec(server=config, host=SETTINGS)
    data = spec.to_bytes()
    assert all(f'"{new}":'.encode() in data for new in NEW)
    assert not any(f'"{old}":'.encode() in data for old in OLD)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing on the way reads an old name
        back = ch.WorkerSpec.from_bytes(data)
        assert back == spec and back.server == ServerConfig("s", stdio("x"), **NEW)
        assert back.negotiation().discover_timeout_s == 30.0
        assert pickle.loads(pickle.dumps(config)) == config


def test_host_add_server_takes_the_new_names_and_the_old_ones_with_a_warning(no_leaks):
    async def main():
        async with Host(settings=SETTINGS) as host:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                await host.add_server("new", scripted("--tools", "echo"), **NEW)
            with pytest.warns(DeprecationWarning,
                              match="Host.add_server: call_timeout= is deprecated, use "
                                    "call_timeout_s=") as caught:
                await host.add_server("old", scripted("--tools", "echo"), **OLD)
            assert caught[0].filename == __file__
            assert len(caught) == 1
            configs = [host._servers.handle(name).config for name in ("new", "old")]
            assert [dataclasses.replace(c, name="s", params=stdio("x")) for c in configs] \
                == [ServerConfig("s", stdio("x"), **NEW)] * 2
            assert (host.call_timeout("old"), host.call_slots("old")) == (12.5, 7)
            with pytest.raises(TypeError, match="max_in_fligth"):
                await host.add_server("typo", scripted(), max_in_fligth=3)
    run(main())


def test_host_from_config_takes_the_new_names_and_the_old_ones_with_a_warning(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"x": {"command": "c"}}}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = Host.from_config(path, discover_timeout_s=2.5, max_discover_timeout_s=40.0)
    with pytest.warns(DeprecationWarning, match="Host.from_config: discover_timeout= is "
                      "deprecated, use discover_timeout_s=, max_discover_timeout= is "
                      "deprecated, use max_discover_timeout_s=") as caught:
        old = Host.from_config(path, discover_timeout=2.5, max_discover_timeout=40.0)
    assert caught[0].filename == __file__
    for host in (new, old):
        [config] = host._pending_config
        assert (config.discover_timeout_s, config.max_discover_timeout_s) == (2.5, 40.0)
