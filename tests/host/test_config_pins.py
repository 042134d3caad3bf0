"""The configuration file's tool filters (``enabledTools`` / ``disabledTools``) and its
``"pins"`` settings: read into ``ServerConfig`` and ``PinConfig``, bad values refused
with the key named."""

from __future__ import annotations

import json

import pytest

from trunkline import Host
from trunkline.config import load_config, load_pin_config
from trunkline.errors import ConfigurationError


def write(tmp_path, doc):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(doc))
    return path


def test_filters_and_pin_settings_are_read(tmp_path):
    path = write(tmp_path, {
        "pins": {"approveFirstSight": True, "bounds": {"descriptionChars": 100,
                                                       "toolsPerServer": 5}},
        "mcpServers": {
            "a": {"command": "c", "enabledTools": ["read_*"], "disabledTools": ["read_x"]},
            "b": {"url": "http://127.0.0.1:1/mcp", "disabledTools": ["*"]},
            "c": {"command": "c", "enabledTools": []},
            "d": {"command": "c"}}})
    a, b, c, d = load_config(path)
    assert (a.enabled_tools, a.disabled_tools) == (("read_*",), ("read_x",))
    assert (b.enabled_tools, b.disabled_tools) == (None, ("*",))
    assert (c.enabled_tools, d.enabled_tools, d.disabled_tools) == ((), None, ())
    pins = load_pin_config(path)
    assert pins.approve_first_sight is True
    assert dict(pins.bounds) == {"description_chars": 100, "tools_per_server": 5}
    defaults = load_pin_config(write(tmp_path, {"mcpServers": {}}))
    assert (defaults.approve_first_sight, dict(defaults.bounds)) == (False, {})


@pytest.mark.parametrize("bad,message", [
    ({"mcpServers": {"x": {"command": "c", "enabledTools": "read_*"}}}, "enabledTools"),
    ({"mcpServers": {"x": {"command": "c", "disabledTools": [1]}}}, "disabledTools"),
    ({"pins": [], "mcpServers": {}}, "pins"),
    ({"pins": {"approve": True}, "mcpServers": {}}, "pins"),
    ({"pins": {"approveFirstSight": "yes"}, "mcpServers": {}}, "approveFirstSight"),
    ({"pins": {"bounds": {"descriptionChars": 0}}, "mcpServers": {}}, "descriptionChars"),
    ({"pins": {"bounds": {"schemaDepth": True}}, "mcpServers": {}}, "schemaDepth"),
    ({"pins": {"bounds": {"depth": 3}}, "mcpServers": {}}, "bounds"),
])
def test_bad_values_are_refused_with_the_key_named(tmp_path, bad, message):
    with pytest.raises(ConfigurationError, match=message):
        Host.from_config(write(tmp_path, bad))
