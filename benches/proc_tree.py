"""What processes cost, read from ``/proc``: a process tree, its CPU time and memory.

The benchmarks run their clients, gateways and servers as process trees that share the
machine's cores, so each reports what every process in its tree used (Linux only).

CPU time is the scheduler's own count, ``/proc/PID/task/TID/schedstat`` (nanoseconds on
the CPU, user and system together) summed over the process's threads, where the kernel has
it: ``/proc/PID/stat`` counts in clock ticks (10 ms here), too coarse for a round of a
second split over nine processes, and ``/proc/PID/schedstat`` is its first thread's alone
(a multi-threaded server, such as a tokio runtime's, would seem nearly idle). A thread that
ended between two readings is lost, as a process is.
"""

from __future__ import annotations

import os

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def descendants(pid: int) -> list[int]:
    """``pid`` and every live process below it (by parent pid, so a worker in a session of
    its own is still found)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(children.get(p, ()))
    return found


def _cpu_of(pid: int) -> float:
    try:
        total, read = 0, 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                    total += int(f.read().split()[0])
                read += 1
            except FileNotFoundError:  # that thread just ended (or no schedstat here)
                pass
        if read:
            return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def cpu_seconds(pids: list[int]) -> float:
    """CPU these processes used so far (a process gone by now counts nothing)."""
    return sum(_cpu_of(pid) for pid in pids)


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    return {pid: _cpu_of(pid) for pid in pids}


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two readings by the processes alive at the second: a process that
    started in between counts whole, one that ended in between is lost (fastmcp starts its
    stdio upstream on demand; between two wrk runs it ended it and started another)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def executable(pid: int) -> str | None:
    """The file ``pid`` runs (None: gone, or not ours to read)."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except OSError:
        return 0
