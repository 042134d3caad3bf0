"""The other copies of one ``serve --processes N`` command, as one copy sees them: where
each listens for what the others pass it, and the passing of a request to the copy that
holds its state.

The kernel spreads connections over the copies (``SO_REUSEPORT``), so a legacy session's
requests, or a modern client's answers to an input round, may reach a copy that did not
open that session or ask that round. No load balancer can add affinity on a shared port,
so the copies route among themselves.

Rules:

1. Every copy also serves its face on a Unix socket of its own in the copies' private
   directory (``face-<index>.sock``; the directory is the command's, mode 0700), for its
   siblings only. A request that came that way is never passed on again (``internal``):
   one hop at most.
2. A copy is named by its instance, ``<replica>_<index>`` (``processes.copy_instance``):
   a state named by a sibling's instance is passed to that sibling's socket.
3. A request is passed whole: method, path, headers and body as they came (the sibling
   checks them all again, as if the client had reached it); its response comes back as
   the sibling gives it (status, headers, then the body, or the event stream as it goes),
   and the client's going away ends the passing, so the sibling sees its client go.
4. A sibling that cannot be reached (it is being started again: its state is gone with
   the process that held it) is a session not found: 404, saying why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .exchange import Exchange

#: Request headers that describe one hop, not the request (RFC 9110 7.6.1), or that the
#: passing sets again itself.
_HOP_REQUEST = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                          "proxy-connection", "proxy-authorization", "content-length",
                          "expect", "trailer"})
_HOP_RESPONSE = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length",
                           "trailer", "upgrade"})


@dataclass(frozen=True)
class Siblings:
    """Copy ``index`` of a ``serve --processes`` command whose copies are ``replica``'s,
    with their sockets in ``directory``."""

    directory: str
    replica: str
    index: int

    def socket_path(self, index: int) -> str:
        return os.path.join(self.directory, f"face-{index}.sock")

    def index_of(self, instance: str) -> int | None:
        """The index of the sibling named ``instance`` (None: not a sibling's name)."""
        head, _, tail = instance.rpartition("_")
        if head != self.replica or not tail.isdigit() or int(tail) == self.index:
            return None
        return int(tail)

    async def forward(self, http: Exchange, body: bytes | None, index: int
                      ) -> tuple[int, bytes, dict[str, str]] | None:
        """Pass ``http`` (its ``body`` read already) to sibling ``index`` (rule 3): the
        whole response to answer with (status, body, headers), or None when it came as an
        event stream, written to the client as it came. Raises ``SiblingUnreachable``
        (rule 4)."""
        import aiohttp

        http.cancel_when_gone()
        headers = {k: v for k, v in http.headers.items() if k not in _HOP_REQUEST}
        connector = aiohttp.UnixConnector(path=self.socket_path(index), force_close=True)
        try:
            async with aiohttp.ClientSession(
                    connector=connector, auto_decompress=False,
                    skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding")) as client:
                async with client.request(http.method, f"http://copy{http.path}",
                                          headers=headers, data=body,
                                          allow_redirects=False) as response:
                    kept = {k: v for k, v in response.headers.items()
                            if k.lower() not in _HOP_RESPONSE}
                    if response.status == 200 and response.content_type == \
                            "text/event-stream":
                        await http.open_stream(kept)
                        async for chunk in response.content.iter_any():
                            await http.write(chunk)
                        return None
                    return response.status, await response.read(), kept
        except (aiohttp.ClientConnectionError, OSError) as exc:
            if http.started:
                return None  # the stream was cut: the client sees it end
            raise SiblingUnreachable(
                f"gateway process {index} of this replica, which holds it, cannot be "
                f"reached ({type(exc).__name__}): it was started again, and what it held "
                "is gone") from None


class SiblingUnreachable(Exception):
    """The sibling that holds a request's state cannot be reached (rule 4)."""


def from_environment(replica: str) -> Siblings | None:
    """This process's siblings, when it is a copy of ``serve --processes N``."""
    from .copy_metrics import COPIES_DIR_ENV, COPY_INDEX_ENV

    directory = os.environ.get(COPIES_DIR_ENV)
    index = os.environ.get(COPY_INDEX_ENV)
    if not directory or index is None or not index.isdigit():
        return None
    return Siblings(directory, replica, int(index))


__all__ = ["SiblingUnreachable", "Siblings", "from_environment"]
