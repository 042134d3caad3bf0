"""trunkline's version: Cargo.toml's, the one place it is written (maturin gives it to the
distribution, and the codec extension carries it). Read from the extension rather than
the distribution's metadata: ``importlib.metadata`` costs every worker ~40 ms of start-up
and pulls in ``email``, ``zipfile`` and ``csv``."""

from __future__ import annotations

from ._codec import VERSION

__all__ = ["VERSION"]
