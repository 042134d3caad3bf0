"""What a person sees while a fleet comes up: each server's state as it changes.

Rules:

- Fed by the host's own state callbacks (``Host.watch_servers``, or a ``Supervisor``'s
  ``on_state``), never by polling: a change is shown when it happens.
- Shown on stderr (stdout is the command's result, or ``serve --stdio``'s protocol):
  on a terminal a live board, one row per server, redrawn on each change (rich ``Live``
  without its refresh thread); otherwise one plain line per change, for logs and pipes;
  with ``--json`` nothing at all; with ``--log-format json`` as log records
  (``trunkline.fleet``: info, a warning when a server is down), so that every line on
  stderr is JSON.
- A status that says nothing new for its server (same state, same reason) is no line.
- It covers start-up: the command stops it once its servers are ready or unavailable
  (``serve`` logs later changes through logging instead).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import IO, Any

from ..channel import ServerState
from ..parent.handle import ServerStatus

_COLOURS = {ServerState.READY: "green", ServerState.UNAVAILABLE: "red",
            ServerState.RESTARTING: "yellow", ServerState.DRAINING: "yellow",
            ServerState.STOPPED: "dim"}


def describe(status: ServerStatus) -> str:
    """The state and what goes with it: the era and revision when ready, the reason when
    unavailable, restarting or draining."""
    if status.state is ServerState.READY:
        era = " ".join(part for part in (status.era, status.version) if part)
        took = ("" if status.time_to_verdict_s is None
                else f", {status.time_to_verdict_s:.2f} s")
        return f"ready ({era}{took})" if era or took else "ready"
    if status.reason and status.state in (ServerState.UNAVAILABLE, ServerState.RESTARTING,
                                          ServerState.DRAINING):
        return f"{status.state.value}: {status.reason}"
    return status.state.value


def progress_line(status: ServerStatus) -> str:
    """One change as a plain line."""
    return f"server {status.name}: {describe(status)}"


_fleet_log = logging.getLogger("trunkline.fleet")


def log_change(status: ServerStatus) -> None:
    """One change as a log record: a warning when the server is down."""
    down = status.state in (ServerState.RESTARTING, ServerState.UNAVAILABLE)
    _fleet_log.log(logging.WARNING if down else logging.INFO, "%s", progress_line(status),
                   extra={"server": status.name})


class FleetBoard:
    """The latest state of each server, in the order they were first heard of; ``note``
    says whether a status is news."""

    def __init__(self) -> None:
        self.rows: dict[str, ServerStatus] = {}

    def note(self, status: ServerStatus) -> bool:
        before = self.rows.get(status.name)
        self.rows[status.name] = status
        return before is None or (before.state, before.reason) != (status.state,
                                                                    status.reason)


class FleetProgress:
    """Shows a ``FleetBoard`` on a stream: ``update`` is the host's callback; ``close``
    ends the display (a live board keeps its last drawing unless ``transient``)."""

    def __init__(self, mode: str, stream: IO[str] | None = None, *,
                 transient: bool = False, console: Any = None) -> None:
        """``mode``: ``"live"``, ``"lines"``, ``"log"`` or ``"off"`` (``mode_for`` picks);
        ``console``: a rich ``Console`` to draw a live board on (default: one on
        ``stream``)."""
        self.mode = mode
        self._stream = stream or sys.stderr
        self._board = FleetBoard()
        self._live: Any = None
        if mode == "live":
            from rich.console import Console
            from rich.live import Live

            console = console or Console(file=self._stream, highlight=False)
            self._live = Live(console=console, auto_refresh=False, transient=transient)
            self._live.start()

    @staticmethod
    def mode_for(json_mode: bool, log_format: str | None = None,
                 stream: IO[str] | None = None) -> str:
        if log_format == "json":
            return "log"
        if json_mode:
            return "off"
        stream = stream or sys.stderr
        return "live" if stream.isatty() else "lines"

    def update(self, status: ServerStatus) -> None:
        if self.mode == "off" or not self._board.note(status):
            return
        if self._live is not None:
            self._live.update(self._table(), refresh=True)
        elif self.mode == "log":
            log_change(status)
        else:
            self._stream.write(progress_line(status) + "\n")
            self._stream.flush()

    def _table(self) -> Any:
        from rich.markup import escape
        from rich.table import Table

        table = Table(title="servers", title_justify="left", box=None)
        table.add_column("server")
        table.add_column("state")
        for status in self._board.rows.values():
            colour = _COLOURS.get(status.state, "yellow")
            table.add_row(escape(status.name),
                          f"[{colour}]{escape(describe(status))}[/{colour}]")
        return table

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        self.mode = "off"

    def __enter__(self) -> Callable[[ServerStatus], None]:
        return self.update

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["FleetBoard", "FleetProgress", "describe", "log_change", "progress_line"]
