"""trunkline's adapter for the fan-out harness (benches/fanout.py).

One ``Supervisor``: a worker process per echo server, calls routed through the parent's
channel to each worker. The parent serializes each request once; the worker stamps it
and forwards the undecoded reply; the result is decoded once, here, at the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import orjson

from trunkline.protocol import NegotiationConfig
from trunkline.parent.supervisor import Supervisor
from trunkline.settings import HostSettings, ServerConfig
from trunkline.params import stdio


class TrunklineClient:
    name: ClassVar[str] = "trunkline"
    event_loop: ClassVar[str] = "uvloop"
    slow: ClassVar[bool] = False

    async def start(self, server_argvs: Sequence[Sequence[str]]) -> None:
        settings = HostSettings(negotiation=NegotiationConfig(discover_timeout_s=30.0))
        self._sup = Supervisor(settings)
        statuses = await self._sup.add_many(
            # Room for the harness's whole in-flight window on every server.
            ServerConfig(f"s{i}", stdio(argv[0], *argv[1:]), max_inflight=1 << 16)
            for i, argv in enumerate(server_argvs)
        )
        for status in statuses:
            if status.era != "modern":
                raise RuntimeError(f"echo server not ready: {status}")
        self._handles = [self._sup.handle(f"s{i}") for i in range(len(server_argvs))]

    async def call(self, server_index: int, token: str, size: int | None) -> str:
        args: dict[str, Any] = {"token": token} if size is None else {"token": token, "size": size}
        reply = await self._handles[server_index].request(
            "tools/call", orjson.dumps({"name": "echo", "arguments": args}), timeout=120.0)
        result = reply.decode()
        if result.get("isError"):
            raise RuntimeError(f"isError result: {result!r}")
        return result["content"][0]["text"]  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self._sup.aclose()
