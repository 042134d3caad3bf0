"""The pin store on each backend (memory, 0600 files, a real redis-server started here),
what it does with a record it cannot trust, and the configuration file's store shared by
two hosts as gateway replicas share it."""

from __future__ import annotations

import json
import logging

import pytest
import redis

from conftest import run, scripted
from redisserver import RedisServer, free_port, redis_server  # noqa: F401 - a fixture
from trunkline import Host
from trunkline.catalog import ListingDriver
from trunkline.catalog.pins import PinRecord, judge
from trunkline.errors import StoreUnavailable, ToolQuarantined
from trunkline.parent.pin_store import PinStore, pins_for
from trunkline.records import FileRecords, MemoryRecords, RedisRecords

TOOL = {"name": "echo", "description": "Echo", "inputSchema": {"type": "object"}}


def a_record(identity: str = "id-1") -> PinRecord:
    driver = ListingDriver("s", "legacy")
    driver.add_page({"tools": [TOOL]})
    return judge(PinRecord(identity, "s", "python server.py"), driver.finish().tools).record


async def round_trip(store: PinStore) -> None:
    assert await store.load("id-1") == PinRecord("id-1")
    record = a_record()
    await store.save(record)
    assert await store.load("id-1") == record
    assert await store.load("id-2") == PinRecord("id-2")


def test_records_round_trip_in_memory_and_in_files(tmp_path):
    run(round_trip(PinStore(MemoryRecords())))
    run(round_trip(pins_for(tmp_path / "oauth")))
    (path,) = (tmp_path / "oauth" / "pins").iterdir()
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "oauth" / "pins").stat().st_mode & 0o777 == 0o700


def test_a_record_that_cannot_be_trusted_is_ignored_naming_where_it_is(tmp_path, caplog):
    files = FileRecords(tmp_path)
    store = PinStore(files)

    async def main():
        await store.save(a_record())
        path = files.path_for("id-1")
        doc = json.loads(path.read_bytes())
        doc["approved"]["echo"]["definition"]["description"] = "tampered"
        path.write_text(json.dumps(doc))
        assert await store.load("id-1") == PinRecord("id-1")
        path.write_bytes(b"{ torn")
        assert await store.load("id-1") == PinRecord("id-1")
        # Another identity's record copied over this one's.
        await store.save(a_record("id-2"))
        path.write_bytes(files.path_for("id-2").read_bytes())
        assert await store.load("id-1") == PinRecord("id-1")

    with caplog.at_level(logging.WARNING, logger="trunkline.host"):
        run(main())
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3 and all(str(files.path_for("id-1")) in m for m in messages)
    assert "another server's" in messages[2]


def test_records_round_trip_in_redis_under_the_token_stores_prefix(
        redis_server: RedisServer):
    async def main():
        store = pins_for(redis_server.url)
        try:
            await round_trip(store)
        finally:
            await store.aclose()
        admin = redis_server.admin()
        try:
            keys = await admin.keys("*")
        finally:
            await admin.aclose()
        assert len(keys) == 1 and keys[0].startswith(b"trunkline:auth:pins:")
    run(main())


def test_an_unreachable_redis_is_a_clear_error_without_its_password():
    async def main():
        nowhere = f"redis://user:pw-sekrit@127.0.0.1:{free_port()}/0"
        store = PinStore(RedisRecords(nowhere, prefix="p:", kind="pins", timeout_s=1,
                                      what="the pin store"))
        try:
            with pytest.raises(StoreUnavailable) as failed:
                await store.load("id-1")
        finally:
            await store.aclose()
        assert "the pin store (redis://127.0.0.1:" in str(failed.value)
        assert "pw-sekrit" not in str(failed.value)
        assert failed.value.__cause__ is None and failed.value.__context__ is None
    run(main())


def test_replicas_sharing_a_redis_store_share_approvals(redis_server: RedisServer,
                                                         tmp_path, no_leaks):
    """Two hosts from one configuration file (as two ``trunkline serve`` replicas): new
    tools wait for approval; approved on one, the other admits it at its next listing."""
    peer = scripted()
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({
        "oauth": {"store": redis_server.url},
        "pins": {"approveFirstSight": True},
        "mcpServers": {"s": {"command": peer.command, "args": list(peer.args)}}}))

    async def main():
        async with Host.from_config(path) as one, Host.from_config(path) as two:
            assert one.tools() == [] and two.tools() == []
            with pytest.raises(ToolQuarantined) as held:
                await two.call_tool("echo", {})
            assert held.value.reason == "new"
            await one.approve_tool("s", "echo")
            assert [t.name for t in one.tools()] == ["echo"]
            await two.refresh_tools("s")
            assert [t.name for t in two.tools()] == ["echo"]
        with redis.Redis.from_url(redis_server.url) as direct:
            assert len(direct.keys("trunkline:auth:pins:*")) == 1
    run(main())
    assert not (tmp_path / "oauth").exists()  # nothing in a file store beside the file
