"""Deprecation warnings that point at the host program's line, not at trunkline's.

An old spelling keeps working for one release and says so with a
``TrunklineDeprecationWarning`` attributed to the first frame outside this package, however
deep in trunkline the old spelling was noticed (a tool name is looked up a few calls below
``Host.call_tool``). It is a ``DeprecationWarning`` of trunkline's own, so that a program
(or a test suite) can turn trunkline's deprecations into errors and leave its other
libraries' alone: ``-W error::trunkline.TrunklineDeprecationWarning``.

A setting renamed (``renamed_keywords``, ``renamed_fields``) keeps its old name as a
keyword, and for a frozen dataclass as an attribute to read, each warning with the name
to use now.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

_PACKAGE = str(Path(__file__).resolve().parent)

T = TypeVar("T")


class TrunklineDeprecationWarning(DeprecationWarning):
    """An old spelling of trunkline's API, still working for one release: the message says
    what to use now."""


def warn_deprecated(message: str) -> None:
    """``TrunklineDeprecationWarning(message)``, attributed to the caller of trunkline."""
    level = 2  # warn_deprecated's caller
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    warnings.warn(message, TrunklineDeprecationWarning, stacklevel=level)


def renamed_keywords(keywords: dict[str, Any], renames: Mapping[str, str],
                     where: str) -> dict[str, Any]:
    """``keywords`` with each old name of ``renames`` (old name -> new name) given as its
    new one, and one warning naming them all; ``keywords`` itself when none is old. An old
    name is put over its new one given beside it (``dataclasses.replace`` gives every
    field)."""
    old = [name for name in keywords if name in renames]
    if not old:
        return keywords
    given = dict(keywords)
    for name in old:
        given[renames[name]] = given.pop(name)
    warn_deprecated(f"{where}: " + ", ".join(f"{name}= is deprecated, use {renames[name]}="
                                              for name in old))
    return given


def renamed_fields(renames: Mapping[str, str]) -> Callable[[type[T]], type[T]]:
    """A class decorator for a dataclass whose fields ``renames`` (old name -> new name)
    renamed: its constructor takes each old name as a keyword, and reading an old name
    reads the new field, each with a warning."""

    def decorate(cls: type[T]) -> type[T]:
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self: T, *args: Any, **keywords: Any) -> None:
            init(self, *args, **renamed_keywords(keywords, renames, cls.__name__))

        setattr(cls, "__init__", __init__)  # noqa: B010 - mypy refuses assigning a method
        for old, new in renames.items():
            setattr(cls, old, _old_attribute(cls.__name__, old, new))
        return cls

    return decorate


def _old_attribute(owner: str, old: str, new: str) -> property:
    def read(self: Any) -> Any:
        warn_deprecated(f"{owner}.{old} is deprecated, use {owner}.{new}")
        return getattr(self, new)

    return property(read, doc=f"Deprecated: ``{new}``.")
