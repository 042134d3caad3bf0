"""An operator's state change applied by every copy of ``serve --processes N``.

Each copy is a whole gateway with its own host, so its own worker per server and its own
catalog: restarting a server, trying it again or approving a quarantined tool in the one
copy an operator's request reached would leave the others as they were; so would
revoking a user's credentials, which each copy holds in memory. So the copy that reached
does it, then tells each sibling (``siblings``) the same request (its body too: a
revocation names its user there), over the sibling's private socket (in the copies' 0700
directory), signed with the copies' shared key (``admin_access`` rule 5); a sibling does
it and tells no one (one hop).

Rules:

1. The siblings told are those whose socket is there now; each is given
   ``COPY_TIMEOUT_S`` (a restart waits for the server's era verdict).
2. The answer says how many were told and which did not do it (unreachable: being
   started again, when it starts with the fleet as configured; or answered an error),
   so a partial change is never reported as a whole one.
3. A reload is not told this way: it is the parent's to pass on (every copy reloads on
   its SIGHUP).
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from .admin_access import COPY_HEADER, copy_signature
from .siblings import Siblings

log = logging.getLogger("trunkline.gateway")

COPY_TIMEOUT_S = 60.0
_SOCKET = re.compile(r"^face-(\d+)\.sock$")


def sibling_indexes(siblings: Siblings) -> list[int]:
    """The other copies whose socket is there now (rule 1)."""
    try:
        names = os.listdir(siblings.directory)
    except OSError:
        return []
    found = (_SOCKET.match(name) for name in names)
    return sorted(int(m.group(1)) for m in found if m and int(m.group(1)) != siblings.index)


async def tell_siblings(siblings: Siblings | None, key: bytes | None, method: str,
                        path: str, host: str, body: bytes | None = None) -> dict[str, Any]:
    """Ask every sibling to do ``method path`` too (``host``: the ``Host`` the operator's
    request named, which every copy answers to; ``body``: its JSON body, if it had one);
    ``{"told": n, "failed": [index, ...]}`` (rule 2)."""
    if siblings is None or key is None:
        return {"told": 0, "failed": []}
    import asyncio

    indexes = sibling_indexes(siblings)
    results = await asyncio.gather(*(_tell(siblings, key, method, path, host, body, index)
                                     for index in indexes))
    failed = [index for index, ok in zip(indexes, results, strict=True) if not ok]
    return {"told": len(indexes), "failed": failed}


async def _tell(siblings: Siblings, key: bytes, method: str, path: str, host: str,
                body: bytes | None, index: int) -> bool:
    import aiohttp

    headers = {COPY_HEADER: copy_signature(key, method, path, time.time(), body),
               "Accept": "application/json", "Host": host}
    if body is not None:
        headers["Content-Type"] = "application/json"
    connector = aiohttp.UnixConnector(path=siblings.socket_path(index), force_close=True)
    try:
        async with aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=COPY_TIMEOUT_S)) as client, \
                client.request(method, f"http://copy{path}", headers=headers,
                               data=body) as response:
            await response.read()
            ok = response.status < 300
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        log.warning("gateway process %d was not told of the operator's %s %s: %s", index,
                    method, path, type(exc).__name__)
        return False
    if not ok:
        log.warning("gateway process %d answered the operator's %s %s with HTTP %d", index,
                    method, path, response.status)
    return ok


__all__ = ["COPY_TIMEOUT_S", "sibling_indexes", "tell_siblings"]
