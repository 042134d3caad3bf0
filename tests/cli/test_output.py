"""A command's output written from its loop (``trunkline.cli.output``): a reader that does not
read holds it back, not the loop; the last words go out without waiting, on a terminal
in place of what it held unread; a file is written where it stands."""

from __future__ import annotations

import asyncio
import os
import termios

from conftest import run
from trunkline.cli.output import Output

LAST_WORDS = "\x1b[?25h"  # the cursor shown again


def fill(fd: int) -> int:
    """Write to ``fd`` until its reader has no room (through a non-blocking description
    of the test's own); how much went in."""
    own = os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    written = 0
    try:
        while True:
            written += os.write(own, b"x" * 512)
    except BlockingIOError:
        return written
    finally:
        os.close(own)


def output_on(fd: int) -> Output:
    with open(fd, "w", closefd=False) as stream:
        return Output(stream)


def read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    data = b""
    try:
        while chunk := os.read(fd, 65536):
            data += chunk
    except BlockingIOError:
        pass
    return data


def test_a_full_pipe_holds_the_output_back_not_the_loop(no_leaks):
    async def main():
        reader, writer = os.pipe()
        try:
            fill(writer)
            out = output_on(writer)
            out.write("a line\n")
            drain = asyncio.ensure_future(out.drain())
            for _ in range(20):
                await asyncio.sleep(0)  # the loop runs on
            assert not drain.done()
            read_all(reader)  # the reader reads: there is room
            await asyncio.wait_for(drain, 60)
            assert read_all(reader) == b"a line\n"
            fill(writer)
            out.write("more\n")
            out.close()  # without waiting: into a full pipe, dropped
            assert b"more" not in read_all(reader)
        finally:
            os.close(reader)
            os.close(writer)
    run(main())


def test_a_terminal_with_no_room_drops_what_it_held_unread_for_the_last_words(no_leaks):
    main, child = os.openpty()
    try:
        filled = fill(child)
        out = output_on(child)
        assert out.isatty()
        # Longer than the room the terminal's line discipline may still make after the
        # fill (it takes up to 4 KiB more into its own buffer, when it gets to it).
        out.write("z" * 8192 + LAST_WORDS)
        out.close()
        shown = read_all(main)
        assert shown.endswith(LAST_WORDS.encode())
        assert shown.count(b"x") < filled
    finally:
        os.close(main)
        os.close(child)


def test_a_terminal_stopped_with_ctrl_s_does_not_keep_the_last_words_waiting(no_leaks):
    main, child = os.openpty()
    try:
        termios.tcflow(child, termios.TCOOFF)  # stopped, as by Ctrl-S
        out = output_on(child)
        out.write(LAST_WORDS)
        out.close()  # returns: dropped, not waiting for Ctrl-Q
        termios.tcflow(child, termios.TCOON)
        assert read_all(main) == b""
    finally:
        os.close(main)
        os.close(child)


def test_a_file_is_written_where_it_stands(tmp_path, no_leaks):
    path = tmp_path / "out"
    with open(path, "w") as stream:
        stream.write("before\n")
        out = Output(stream)  # what was written before comes first
        out.write("after\n")
        run(out.drain())
        out.close()
    assert path.read_text() == "before\nafter\n"
