#!/usr/bin/env python3
"""Transparent wire tap around a real stdio MCP server (stdlib only).

Usage::

    python tests/peers/tap.py [--log FILE] -- <server argv...>

The client spawns the tap instead of the server. The tap spawns the server and
forwards bytes unchanged and without delay:

* client -> tap stdin  -> server stdin   (logged, ``"dir": "in"``)
* server stdout -> tap stdout -> client  (logged, ``"dir": "out"``)
* server stderr: inherited, so it goes straight to the client (not logged).

Each complete line is logged (see taplog.py for the record format) *before* it
is forwarded, so once the client has seen a response the log already holds
it. Bytes of an unterminated line are forwarded at once and logged when the
newline arrives, or at EOF as a final fragment.

EOF on the tap's stdin closes the server's stdin. SIGTERM, SIGINT and SIGHUP
are forwarded to the server, and the tap keeps running until the server
exits: an ``--ignore-sigterm`` server keeps the tap alive too, as the SIGKILL
escalation expects. The tap exits with the server's exit code (128+N if the
server died of signal N).

The server stays in the tap's process group (no setsid), so a client that
signals the group reaches both. On Linux the server also gets
PR_SET_PDEATHSIG=SIGKILL, so it dies even if only the tap is SIGKILLed.

``--log`` defaults to ``$TRUNKLINE_TAP``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

import taplog  # sibling module: sys.path[0] is this directory when run as a script

CHUNK = 1 << 16
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_PDEATHSIG = 1
# After the server exits, wait this long for its stdout to reach EOF (a
# grandchild may hold the pipe open forever).
DRAIN_TIMEOUT_S = 2.0


def die_with_parent() -> None:
    """preexec_fn: ask Linux to SIGKILL the server when the tap dies."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass  # best effort: the process group still covers group kills


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def pump(
    src: int,
    dst: int,
    log: Callable[[bytes], None],
    on_eof: Callable[[], None],
    on_write_error: Callable[[], None],
) -> None:
    """Copy src to dst until EOF, logging each complete line first."""
    splitter = taplog.LineSplitter()
    while True:
        try:
            chunk = os.read(src, CHUNK)
        except OSError:
            chunk = b""
        if not chunk:
            for tail in splitter.flush():
                log(tail)
            on_eof()
            return
        for line in splitter.feed(chunk):
            log(line)
        try:
            write_all(dst, chunk)
        except OSError:
            # The reader is gone: behave as if it were connected directly,
            # so the writer on our side also sees a broken pipe.
            on_write_error()
            return


def close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def exit_code(returncode: int) -> int:
    return returncode if returncode >= 0 else 128 - returncode


def parse_args(argv: list[str]) -> tuple[str, list[str]]:
    if "--" not in argv:
        raise SystemExit("usage: tap.py [--log FILE] -- <server argv...>")
    split = argv.index("--")
    p = argparse.ArgumentParser(description="Transparent stdio wire tap (see module docstring).")
    p.add_argument("--log", default=os.environ.get(taplog.TAP_ENV), help="JSONL log file")
    ns = p.parse_args(argv[:split])
    command = argv[split + 1 :]
    if not ns.log or not command:
        raise SystemExit("usage: tap.py [--log FILE] -- <server argv...>")
    return ns.log, command


def main(argv: list[str] | None = None) -> None:
    log_path, command = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        child = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # inherited: byte-for-byte with no pump at all
            bufsize=0,
            preexec_fn=die_with_parent,  # no threads exist yet
        )
    except OSError as exc:
        print(f"tap.py: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        raise SystemExit(127) from None
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None
    tap = taplog.TapWriter(log_path, child.pid, "tap")

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, forward)

    def server_stopped_reading() -> None:
        stdin.close()
        close_quietly(0)  # so the client's next write fails, as if direct

    threading.Thread(
        target=pump,
        args=(
            0,
            stdin.fileno(),
            lambda line: tap.record(taplog.IN, line),
            stdin.close,
            server_stopped_reading,
        ),
        daemon=True,
    ).start()
    out_pump = threading.Thread(
        target=pump,
        args=(
            stdout.fileno(),
            1,
            lambda line: tap.record(taplog.OUT, line),
            lambda: None,
            stdout.close,
        ),
        daemon=True,
    )
    out_pump.start()

    returncode = child.wait()
    out_pump.join(DRAIN_TIMEOUT_S)
    # os._exit: the stdin pump may sit in os.read(0) forever; don't join it.
    os._exit(exit_code(returncode))


if __name__ == "__main__":
    main()
