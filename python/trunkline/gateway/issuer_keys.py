"""An authorization server's signing keys, for the gateway's token checks (``bearer``):
found from its metadata, fetched over HTTP, cached, refetched on rotation.

Rules:

1. The JWKS is found at the ``jwks_uri`` of the issuer's metadata, tried at the RFC 8414
   and OpenID Connect discovery locations in the specified order
   (``auth.discovery.authorization_server_urls``); a document whose ``issuer`` is not the
   configured one exactly is refused, as is a ``jwks_uri`` not https (loopback aside).
2. A fetch (the metadata if not yet known, then the JWKS) has one deadline
   (``FETCH_TIMEOUT_S``: the requests waiting for it wait no longer) and each document a
   size bound (``MAX_DOCUMENT_BYTES``): a slow or huge answer is a failed fetch.
   Concurrent needs share one fetch.
3. Keys are kept and used for ``REFRESH_S``; after that the next token refreshes them (on
   failure the old keys stay in use, and the next try waits ``MIN_REFETCH_S``).
4. A ``kid`` not among the keys fetches the JWKS again (a rotation), but at most once per
   ``min_refetch_s``: a flood of tokens with made-up key ids makes one fetch per interval,
   not one per token; in between such a token is simply unknown.
5. Only public signing keys are kept: entries with ``use`` other than ``sig``, with
   private parts, or that joserfc cannot read are skipped.
6. ``KeysUnavailable`` only when no key could be had at all (never fetched successfully,
   or the issuer is down and the ``kid`` asked for is unknown).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from ..auth.discovery import authorization_server_urls
from ..auth.resource import secure_transport
from .bearer import KeysUnavailable

log = logging.getLogger("trunkline.gateway.oauth")

FETCH_TIMEOUT_S = 5.0
MAX_DOCUMENT_BYTES = 256 * 1024
REFRESH_S = 3600.0
MIN_REFETCH_S = 30.0
_PRIVATE_MEMBERS = ("d", "p", "q", "dp", "dq", "qi", "k")


class IssuerKeys:
    """One issuer's keys (``bearer.KeySource``)."""

    def __init__(self, issuer: str, *, min_refetch_s: float = MIN_REFETCH_S,
                 session_factory: Callable[[], Any] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.issuer = issuer
        self._min_refetch_s = min_refetch_s
        self._session_factory = session_factory
        self._session: Any = None
        self._clock = clock
        self._jwks_uri: str | None = None
        self._keys: tuple[Any, ...] = ()
        self._fetched_at: float | None = None  # last successful fetch
        self._tried_at: float | None = None  # last attempt, successful or not
        self._fetching: asyncio.Future[None] | None = None
        #: How many JWKS fetches were made (tests read it: rule 4).
        self.fetches = 0

    async def keys(self, kid: str | None) -> Sequence[Any]:
        now = self._clock()
        stale = self._fetched_at is None or now - self._fetched_at >= REFRESH_S
        unknown = kid is not None and not self._with_kid(kid)
        if (stale or unknown) and self._may_fetch(now):
            await self._refetch()
        if self._fetched_at is None:
            raise KeysUnavailable(self.issuer)
        if kid is None:
            return self._keys
        found = self._with_kid(kid)
        if not found and self._tried_at is not None and self._tried_at != self._fetched_at:
            raise KeysUnavailable(self.issuer)  # the last try failed: the kid may be new
        return found

    def _with_kid(self, kid: str) -> list[Any]:
        return [k for k in self._keys if k.kid == kid]

    def _may_fetch(self, now: float) -> bool:
        return self._tried_at is None or now - self._tried_at >= self._min_refetch_s \
            or (self._fetching is not None and not self._fetching.done())

    async def _refetch(self) -> None:
        """One fetch at a time; everyone who needs it waits for the same one."""
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.ensure_future(self._fetch())
        await asyncio.shield(self._fetching)

    async def _fetch(self) -> None:
        self._tried_at = self._clock()
        self.fetches += 1
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S):
                if self._jwks_uri is None:
                    self._jwks_uri = await self._discover()
                keys = parse_jwks(await self._get(self._jwks_uri))
        except TimeoutError:
            log.warning("the keys of token issuer %s cannot be had: no answer within %g s",
                        self.issuer, FETCH_TIMEOUT_S)
            return
        except KeysUnavailable as exc:
            log.warning("the keys of token issuer %s cannot be had: %s", self.issuer, exc)
            return
        self._keys, self._fetched_at = keys, self._tried_at

    async def _discover(self) -> str:
        failures = []
        for url in authorization_server_urls(self.issuer):
            try:
                doc = await self._get(url)
            except KeysUnavailable as exc:
                failures.append(str(exc))
                continue
            return jwks_uri_of(doc, self.issuer, url)
        raise KeysUnavailable("; ".join(failures))

    async def _get(self, url: str) -> dict[str, Any]:
        """A JSON object from ``url`` (rule 2); ``KeysUnavailable`` for anything else."""
        import aiohttp

        if self._session is None:
            self._session = (self._session_factory or aiohttp.ClientSession)()
        try:
            async with self._session.get(url, allow_redirects=False,
                                         headers={"Accept": "application/json"}) as r:
                if r.status != 200:
                    raise KeysUnavailable(f"{url} answered {r.status}")
                body = bytearray()
                async for chunk in r.content.iter_chunked(65536):
                    body += chunk
                    if len(body) > MAX_DOCUMENT_BYTES:
                        raise KeysUnavailable(f"{url} sent more than {MAX_DOCUMENT_BYTES} bytes")
        except aiohttp.ClientError as exc:
            raise KeysUnavailable(f"{url}: {type(exc).__name__}") from None
        try:
            doc = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise KeysUnavailable(f"{url} did not answer with JSON") from None
        if not isinstance(doc, dict):
            raise KeysUnavailable(f"{url} did not answer with a JSON object")
        return doc

    async def aclose(self) -> None:
        if self._fetching is not None and not self._fetching.done():
            self._fetching.cancel()
        if self._session is not None:
            await self._session.close()


def jwks_uri_of(metadata: dict[str, Any], issuer: str, url: str) -> str:
    """Rule 1: the ``jwks_uri`` of an issuer's metadata read from ``url``."""
    if metadata.get("issuer") != issuer:
        raise KeysUnavailable(f"the metadata at {url} is for another issuer")
    jwks_uri = metadata.get("jwks_uri")
    if not isinstance(jwks_uri, str) or not jwks_uri:
        raise KeysUnavailable(f"the metadata at {url} names no jwks_uri")
    if not secure_transport(jwks_uri):
        raise KeysUnavailable(f"the jwks_uri at {url} is not https (http only to loopback)")
    return jwks_uri


def parse_jwks(doc: dict[str, Any]) -> tuple[Any, ...]:
    """Rule 5: the public signing keys of a JWKS document."""
    from joserfc.errors import JoseError
    from joserfc.jwk import JWKRegistry

    entries = doc.get("keys")
    if not isinstance(entries, list):
        raise KeysUnavailable("the JWKS has no keys list")
    keys = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or \
                any(m in entry for m in _PRIVATE_MEMBERS) or entry.get("kty") == "oct":
            continue
        try:
            keys.append(JWKRegistry.import_key(entry))
        except (JoseError, ValueError, TypeError):
            continue
    return tuple(keys)
