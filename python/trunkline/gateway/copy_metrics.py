"""One Prometheus page for every copy of ``serve --http --processes N --metrics``.

The copies share one port, and the kernel hands each new connection to one of them: a
scrape reaches one copy, which alone knows only its own calls. So each copy also serves
its own page on a Unix socket in a directory the command made for them (mode 0700), and
the page at ``/metrics`` is every copy's, gathered by whichever copy the scrape reached.

Rules:

- Every sample gets the label ``trunkline_copy`` (the copy's index): the copies' series
  stay apart rather than summed here. A copy started again begins its counters at zero,
  and Prometheus reads that as a counter reset of that copy's series only; a sum made
  here would go backwards and read as garbage.
- A copy that does not answer within ``_PEER_TIMEOUT_S`` (ended, restarting) is left out
  of that page: its series are missing for that scrape, never invented.
- ``merge`` is pure: pages in, one page out (prometheus_client's parser and writer), each
  metric family once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger("trunkline.gateway")

#: Set by ``serve --processes N`` for its copies: the directory of their pages' sockets,
#: and each copy's index.
COPIES_DIR_ENV = "TRUNKLINE_COPIES_DIR"
COPY_INDEX_ENV = "TRUNKLINE_COPY"
LABEL = "trunkline_copy"
_PEER_TIMEOUT_S = 2.0
_SUFFIX = ".sock"

Page = Callable[[], tuple[bytes, str]]


def socket_path(directory: str | Path, index: int) -> Path:
    return Path(directory) / f"copy-{index}{_SUFFIX}"


def merge(pages: Iterable[tuple[str, bytes]]) -> bytes:
    """One Prometheus text page from ``(copy, page)`` pairs: each sample labelled with its
    copy, each family once (its help and type from the first page that has it)."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families

    families: dict[str, Any] = {}
    for copy, page in pages:
        for family in text_string_to_metric_families(page.decode("utf-8")):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit)
            for sample in family.samples:
                merged.add_sample(sample.name, {**sample.labels, LABEL: copy}, sample.value,
                                  sample.timestamp, sample.exemplar)

    class _Families:
        def collect(self) -> Iterator[Any]:
            return iter(families.values())

    return generate_latest(_Families())


class CopyPages:
    """One copy's part: its own page on its socket, and everyone's page for ``/metrics``."""

    def __init__(self, own: Page, directory: str, index: int) -> None:
        self._own = own
        self._directory = Path(directory)
        self._index = index
        self._server: asyncio.Server | None = None

    @classmethod
    def from_environment(cls, own: Page) -> CopyPages | None:
        """This process's part when it is a copy of ``serve --processes N``; else None."""
        directory, index = os.environ.get(COPIES_DIR_ENV), os.environ.get(COPY_INDEX_ENV)
        if not directory or index is None or not index.isdigit():
            return None
        return cls(own, directory, int(index))

    async def start(self) -> None:
        path = socket_path(self._directory, self._index)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # the socket of this copy's predecessor
        self._server = await asyncio.start_unix_server(self._serve_own, path=str(path))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            with contextlib.suppress(FileNotFoundError):
                socket_path(self._directory, self._index).unlink()

    async def page(self) -> tuple[bytes, str]:
        """Every copy's metrics, as ``/metrics`` serves them."""
        own, content_type = self._own()
        others = sorted(p for p in self._directory.glob(f"copy-*{_SUFFIX}")
                        if p != socket_path(self._directory, self._index))
        fetched = await asyncio.gather(*(self._fetch(p) for p in others))
        pages = [(str(self._index), own)]
        pages += [(p.name[len("copy-"):-len(_SUFFIX)], page)
                  for p, page in zip(others, fetched, strict=True) if page is not None]
        pages.sort(key=lambda pair: int(pair[0]))
        return merge(pages), content_type

    async def _serve_own(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(self._own()[0])
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the asking copy gave up
        finally:
            writer.close()

    @staticmethod
    async def _fetch(path: Path) -> bytes | None:
        async def read() -> bytes:
            reader, writer = await asyncio.open_unix_connection(str(path))
            try:
                return await reader.read()
            finally:
                writer.close()

        try:
            return await asyncio.wait_for(read(), _PEER_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            log.debug("metrics of %s left out: %s", path.name, exc)
            return None


def served(own: Page, pages: CopyPages | None) -> Callable[[], Awaitable[tuple[bytes, str]]]:
    """The ``/metrics`` page function: this process's own page, or every copy's."""
    if pages is not None:
        return pages.page

    async def page() -> tuple[bytes, str]:
        return own()
    return page
