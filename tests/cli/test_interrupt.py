"""Ctrl-C for a command on an event loop (``trunkline.cli.interrupt``), in this process: where
a SIGINT lands before, as and while the loop runs, and what a second one does. (The
command run as a user runs it, on a terminal: ``tests/gateway/test_serve_status.py``.)"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import pytest

from trunkline.cli.interrupt import Interrupt


@pytest.fixture
def sigint() -> Iterator[None]:
    """The test's SIGINT handling, as it was before, whatever the test left."""
    before = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, before)


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_a_sigint_cancels_the_command_where_it_waits_and_a_second_would_end_it(sigint):
    interrupt = Interrupt()
    interrupt.install()
    seen = []

    async def command() -> int:
        try:
            asyncio.get_running_loop().call_soon(ctrl_c)  # once it waits
            await asyncio.sleep(3600)
            return 0
        finally:
            seen.append(signal.getsignal(signal.SIGINT))

    with pytest.raises(KeyboardInterrupt):
        interrupt.run(command)
    assert interrupt.received
    assert seen == [signal.SIG_DFL]  # a second SIGINT: the process ends at once


def test_before_the_loop_a_sigint_raises_and_the_command_never_starts(sigint):
    interrupt = Interrupt()
    interrupt.install()
    with pytest.raises(KeyboardInterrupt):
        ctrl_c()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    made = []

    async def command() -> int:
        made.append(True)
        return 0

    # The state of one that came as the loop started: the command is not begun.
    with pytest.raises(KeyboardInterrupt):
        interrupt.run(command)
    assert made == []


def test_a_command_that_ends_without_a_sigint_keeps_its_result(sigint):
    interrupt = Interrupt()
    interrupt.install()

    async def command() -> int:
        await asyncio.sleep(0)
        return 7

    assert interrupt.run(command) == 7 and not interrupt.received
    assert signal.getsignal(signal.SIGINT) not in (signal.SIG_DFL, signal.default_int_handler)


def test_a_sigint_ignored_from_the_start_stays_ignored(sigint):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as for a job started in the background
    Interrupt().install()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
