"""``FleetChange`` (``gateway/reload.py``), pure: two configurations as the configuration
reader reads them, compared entry by entry and for what only a restart can change; and
``ReloadOutcome`` as JSON."""

from __future__ import annotations

import json
from typing import Any

from trunkline.config import read_host_config
from trunkline.gateway.reload import FleetChange, ReloadOutcome


def entry(*args: str, **more: Any) -> dict[str, Any]:
    return {"command": "server", "args": list(args), **more}


def read(servers: dict[str, Any], **top: Any):
    return read_host_config({"mcpServers": servers, **top})


def test_each_entry_is_added_removed_replaced_or_unchanged_by_its_whole_definition():
    old = read({"a": entry(), "b": entry(), "c": entry("--x"), "d": entry()})
    new = read({"a": entry(), "c": entry("--y"), "d": entry(callTimeoutMs=5000),
                "e": entry()})
    change = FleetChange.between(old, new)
    assert [c.name for c in change.added] == ["e"]
    assert change.removed == ("b",)
    assert [c.name for c in change.replaced] == ["c", "d"]
    assert change.unchanged == ("a",)
    assert change.changes_servers and not change.policy_changed
    assert change.needs_restart == () and change.refusal() is None


def test_the_same_file_read_twice_changes_nothing():
    servers = {"a": entry(env={"K": "v"}), "h": {"url": "https://mcp.example/mcp",
                                                 "headers": {"X": "1"}}}
    policy = {"rules": [{"id": "all", "allow": ["list", "call"]}]}
    change = FleetChange.between(read(servers, policy=policy), read(servers, policy=policy))
    assert not change.changes_servers and not change.policy_changed
    assert change.unchanged == ("a", "h")


def test_a_policy_is_compared_by_its_content():
    first = {"rules": [{"id": "one", "allow": ["list"]}]}
    second = {"rules": [{"id": "two", "allow": ["list"]}]}
    servers = {"a": entry()}
    assert FleetChange.between(read(servers, policy=first),
                               read(servers, policy=second)).policy_changed
    assert FleetChange.between(read(servers), read(servers, policy=first)).policy_changed
    assert not FleetChange.between(read(servers, policy=first),
                                   read(servers, policy=json.loads(json.dumps(first)))
                                   ).policy_changed


def test_what_only_a_restart_can_change_refuses_the_reload_naming_it():
    servers = {"a": entry()}
    old = read(servers)
    cases = {
        "\"oauth\"": read(servers, oauth={"clientName": "other"}),
        "\"pins\"": read(servers, pins={"approveFirstSight": True}),
        "\"collision\"": read(servers, collision="reject"),
        "\"maxUserInstances\"": read(servers, maxUserInstances=3),
        "a first Streamable HTTP server": read({**servers, "h": {"url": "https://m.example/mcp"}}),
    }
    for named, new in cases.items():
        change = FleetChange.between(old, new)
        refusal = change.refusal()
        assert refusal is not None and named in refusal, (named, refusal)
        assert refusal.startswith("a restart is needed to change ")


def test_what_the_gateway_started_with_decides_what_it_has():
    """An HTTP server removed by one reload may come back by another: the OAuth client
    made at start is still there."""
    started = read({"a": entry(), "h": {"url": "https://m.example/mcp"}})
    now = read({"a": entry()})
    back = read({"a": entry(), "h": {"url": "https://m.example/mcp"}})
    assert FleetChange.between(now, back).needs_restart  # judged by the last one alone
    change = FleetChange.between(now, back, started=started)
    assert change.needs_restart == () and [c.name for c in change.added] == ["h"]


def test_an_outcome_as_json():
    change = FleetChange.between(read({"a": entry(), "b": entry()}),
                                 read({"a": entry(), "c": entry()}))
    outcome = ReloadOutcome.of(change, 100.0)
    document = outcome.to_json()
    assert document == {"ok": True, "error": None, "added": ["c"], "removed": ["b"],
                        "replaced": [], "unchanged": ["a"], "policy_changed": False,
                        "started_at": 100.0, "finished_at": outcome.finished_at,
                        "deferred": False}
    refused = ReloadOutcome.refused("not valid JSON", 100.0).to_json()
    assert refused["ok"] is False and refused["error"] == "not valid JSON"
    assert refused["added"] == refused["removed"] == refused["replaced"] == []
    json.dumps(document)
