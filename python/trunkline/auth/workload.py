"""Where the JWTs a client presents as grants come from: a workload's identity token
(workload identity federation, SEP-1933: the RFC 7523 JWT-bearer grant) and the user's
ID token that enterprise-managed authorization exchanges (``id_jag``).

Rules:

1. A source is a ``Secret`` (fixed text), or a function that gives one when called: such
   tokens are short-lived and renewed by something else (a Kubernetes projected service
   account token file, a cloud metadata server, a sign-in), so a source is read each time
   a grant needs it, never cached here.
2. ``file_source``: the file's text, stripped; ``env_source``: the variable's value. An
   empty or missing one is a ``ConfigurationError`` naming the file or variable, never
   the value.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from ..errors import ConfigurationError
from .secret import Secret

#: A JWT, or where to read one each time it is needed (rule 1).
JwtSource = Secret | Callable[[], Awaitable[Secret]]


async def read_source(source: JwtSource) -> Secret:
    """The JWT ``source`` gives now."""
    if isinstance(source, Secret):
        return source
    return await source()


def file_source(path: str | os.PathLike[str]) -> Callable[[], Awaitable[Secret]]:
    """Rule 2: the token in the file at ``path``, read each time."""
    where = Path(path)

    def read() -> Secret:
        try:
            text = where.read_text().strip()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the token file {where}: "
                                     f"{exc.strerror}") from None
        if not text:
            raise ConfigurationError(f"the token file {where} is empty")
        return Secret(text)

    async def source() -> Secret:
        return await asyncio.to_thread(read)

    return source


def env_source(name: str, env: Mapping[str, str] | None = None
               ) -> Callable[[], Awaitable[Secret]]:
    """Rule 2: the token in the environment variable ``name``, read each time."""
    async def source() -> Secret:
        value = (os.environ if env is None else env).get(name, "").strip()
        if not value:
            raise ConfigurationError(f"the environment variable {name!r} holds no token")
        return Secret(value)

    return source
