"""trunkline's version, read once from the installed distribution's metadata."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def _installed() -> str:
    try:
        return version("trunkline")
    except PackageNotFoundError:  # running from a source tree without an install
        return "0.0.0+unknown"


VERSION = _installed()
