"""Where a host keeps its pins: one ``PinRecord`` per server identity, as JSON, in a
``records`` backend: in memory (the default of a ``Host()``), 0600 files, or Redis shared
by gateway replicas. ``Host.from_config`` and ``trunkline serve`` keep them where the
configuration file keeps tokens (``pins_for``).

A record that cannot be read back (corrupt, another identity's, another format, a pin
whose definition does not hash to it) is ignored with a warning that names where it is
only, and the server starts from no pins: with trust on first use its tools are pinned
afresh, with approval of first sights they wait for approval. Records are read again at
every listing, so an approval given by another process (``trunkline pins approve``, a
replica) counts at the server's next listing.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson

from ..catalog.pins import PinRecord
from ..records import FileRecords, MemoryRecords, Records, RedisRecords

log = logging.getLogger("trunkline.host")

#: The Redis key prefix of the token store (``auth.redis_store``), so one ACL covers both.
REDIS_PREFIX = "trunkline:auth:"


class PinStore:
    def __init__(self, records: Records | None = None) -> None:
        self.records: Records = records if records is not None else MemoryRecords()

    async def load(self, identity: str) -> PinRecord:
        data = await self.records.read(identity)
        if data is None:
            return PinRecord(identity)
        try:
            record = PinRecord.from_json(orjson.loads(data))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("ignoring the unreadable pin record at %s", self.records.where(identity))
            return PinRecord(identity)
        if record.identity != identity:
            log.warning("ignoring the pin record at %s: it is another server's",
                        self.records.where(identity))
            return PinRecord(identity)
        return record

    async def save(self, record: PinRecord) -> None:
        await self.records.write(record.identity,
                                 orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2))

    async def aclose(self) -> None:
        close = getattr(self.records, "aclose", None)
        if close is not None:
            await close()


def pins_for(store: Path | str) -> PinStore:
    """The pin store beside a token store: a directory's ``pins`` subdirectory, or the same
    Redis (``<prefix>pins:<name>`` keys)."""
    if isinstance(store, str):
        return PinStore(RedisRecords(store, prefix=REDIS_PREFIX, kind="pins",
                                     what="the pin store"))
    return PinStore(FileRecords(Path(store) / "pins"))
