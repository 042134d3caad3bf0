"""Deprecation warnings that point at the host program's line, not at trunkline's.

An old spelling keeps working for one release and says so with a ``DeprecationWarning``
attributed to the first frame outside this package, however deep in trunkline the old
spelling was noticed (a tool name is looked up a few calls below ``Host.call_tool``).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from types import FrameType

_PACKAGE = str(Path(__file__).resolve().parent)


def warn_deprecated(message: str) -> None:
    """``DeprecationWarning(message)``, attributed to the caller of trunkline."""
    level = 2  # warn_deprecated's caller
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)
