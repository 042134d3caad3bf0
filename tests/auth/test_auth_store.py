"""The stores: one record per server, the file store's format, modes and refusals."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from conftest import run
from trunkline.auth.registration import BASIC, REGISTERED, ClientIdentity
from trunkline.auth.secret import Secret
from trunkline.auth.store import Binding, FileStore, MemoryStore
from trunkline.auth.tokens import Token

SERVER = "https://mcp.example.com/mcp"
ISSUER = "https://auth.example.com"


def binding(server: str = SERVER, access: str = "at-1") -> Binding:
    client = ClientIdentity(client_id="c", client_secret=Secret("cs-1"), auth_method=BASIC,
                            issuer=ISSUER, source=REGISTERED)
    token = Token(access_token=Secret(access), issued_at=100.0, expires_at=3700.0,
                  refresh_token=Secret("rt-1"), scope=("a",), issuer=ISSUER, resource=server)
    return Binding(server=server, issuer=ISSUER, client=client, token=token)


def test_memory_store() -> None:
    async def main() -> None:
        store = MemoryStore()
        assert await store.load(SERVER) is None
        await store.save(binding())
        assert await store.load(SERVER) == binding()
        await store.delete(SERVER)
        assert await store.load(SERVER) is None

    run(main())


def test_file_store_round_trip_mode_and_replace(tmp_path: Path) -> None:
    async def main() -> None:
        directory = tmp_path / "a" / "b"
        store = FileStore(directory)
        assert await store.load(SERVER) is None
        await store.save(binding())
        await store.save(binding(access="at-2"))
        loaded = await store.load(SERVER)
        assert loaded == binding(access="at-2")
        assert loaded is not None and loaded.token is not None
        assert loaded.token.expires_at == 3700.0  # absolute, as stored
        [path] = directory.iterdir()
        assert path == store.path_for(SERVER)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert json.loads(path.read_text())["server"] == SERVER
        await store.delete(SERVER)
        await store.delete(SERVER)  # deleting twice is fine
        assert list(directory.iterdir()) == []

    run(main())


def test_file_store_ignores_another_servers_record_and_unknown_formats(tmp_path: Path) -> None:
    async def main() -> None:
        store = FileStore(tmp_path)
        other = "https://other.example.com/mcp"
        await store.save(binding(other))
        store.path_for(SERVER).write_bytes(store.path_for(other).read_bytes())
        assert await store.load(SERVER) is None
        doc = binding().to_json()
        doc["format"] = 99
        store.path_for(SERVER).write_text(json.dumps(doc))
        assert await store.load(SERVER) is None
        store.path_for(SERVER).write_text(json.dumps({"format": 1}))
        assert await store.load(SERVER) is None

    run(main())


def test_a_binding_prints_no_secret() -> None:
    shown = repr(binding()) + str(binding())
    for secret in ("at-1", "rt-1", "cs-1"):
        assert secret not in shown
    assert "<secret>" in shown
