"""The live processes of a test, found in /proc by a marker in their environment (what a
test puts in a server's environment to tell its processes from everyone else's)."""

from __future__ import annotations

import os


def marked_processes(variable: str, marker: str) -> dict[int, str]:
    """Live processes (zombies left out) whose environment variable ``variable`` holds
    ``marker``: pid -> the variable's value."""
    found = {}
    name = variable.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if zombie:
            continue
        for item in environ:
            key, _, value = item.partition(b"=")
            if key == name and marker.encode() in value:
                found[int(entry)] = value.decode()
    return found
