"""A small authorization server for the flow tests, on 127.0.0.1, started by the test.

It also serves a protected resource's metadata (RFC 9728, path-aware) for any path, so
``fake.server_url("mcp")`` names a protected server whose authorization server is this
one (``prm_issuers`` changes that, for migrations). Every request is recorded whole
(``raw``), so a test can look for a secret in everything a server was ever sent.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import unquote_plus, urlencode

from aiohttp import web


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(
        b"=").decode()


@dataclass
class TokenRequest:
    form: dict[str, str]
    authorization: str | None
    #: Its ``DPoP`` proof header, if any.
    dpop: str | None = None

    @property
    def grant(self) -> str:
        return self.form.get("grant_type", "")

    def basic_client(self) -> tuple[str, str] | None:
        if not self.authorization or not self.authorization.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(self.authorization[6:]).decode().partition(":")
        return unquote_plus(user), unquote_plus(password)


@dataclass
class FakeAuthServer:
    expires_in: int | None = 3600
    issue_refresh_tokens: bool = True
    #: Answer refresh requests with 400 invalid_grant.
    refuse_refresh: bool = False
    #: Seconds the token endpoint takes, so concurrent callers overlap.
    token_delay_s: float = 0.0
    #: What /register answers: the method, and whether a secret comes with it.
    registered_method: str = "client_secret_basic"
    metadata_overrides: dict[str, Any] = field(default_factory=dict)
    prm_issuers: list[str] | None = None
    prm_scopes: list[str] | None = None
    #: Replace the token endpoint's answer (status, body), e.g. to send garbage.
    token_answer: tuple[int, bytes] | None = None
    #: More routes on the same origin (method, path, handler): a protected MCP endpoint
    #: whose protected resource metadata this server serves.
    routes: list[tuple[str, str, Any]] = field(default_factory=list)
    #: False: 404 for protected resource metadata (a 2025-03-26 server), and for the
    #: authorization server metadata too (only the default endpoints are left).
    serve_prm: bool = True
    serve_metadata: bool = True
    #: DPoP (RFC 9449): a proof is answered with a DPoP-bound token; with ``dpop_nonce``,
    #: a proof without that nonce is refused with ``use_dpop_nonce`` and the nonce.
    dpop_nonce: str | None = None
    #: The JWT-bearer grant's answer: refused with this OAuth error, else a token.
    refuse_jwt_bearer: str | None = None

    registrations: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[dict[str, str]] = field(default_factory=list)
    token_requests: list[TokenRequest] = field(default_factory=list)
    prm_requests: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)
    issued: list[str] = field(default_factory=list)  # every token, code and secret given
    #: DPoP-bound access token -> the proof key's JWK it is bound to.
    bound: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.base = ""
        self._count = itertools.count(1)
        self._codes: dict[str, dict[str, str]] = {}
        self._refresh: dict[str, str] = {}  # refresh token -> scope

    @property
    def issuer(self) -> str:
        return self.base

    def server_url(self, path: str = "mcp") -> str:
        return f"{self.base}/{path}"

    def challenge(self, path: str = "mcp", **params: str) -> str:
        parts = [f'resource_metadata="{self.base}/.well-known/oauth-protected-resource/{path}"']
        parts += [f'{k}="{v}"' for k, v in params.items()]
        return "Bearer " + ", ".join(parts)

    async def __aenter__(self) -> Self:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/.well-known/oauth-protected-resource/{path:.*}", self._prm)
        app.router.add_get("/.well-known/oauth-authorization-server", self._metadata)
        app.router.add_post("/register", self._register)
        app.router.add_get("/authorize", self._authorize)
        app.router.add_post("/token", self._token)
        for method, path, handler in self.routes:
            app.router.add_route(method, path, handler)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.text()
        self.raw.append(f"{request.method} {request.path_qs}\n{dict(request.headers)}\n{body}")
        return await handler(request)

    def _next(self, kind: str) -> str:
        value = f"{kind}-{self.base.rsplit(':', 1)[-1]}-{next(self._count)}"
        self.issued.append(value)
        return value

    async def _prm(self, request: web.Request) -> web.Response:
        path = request.match_info["path"]
        self.prm_requests.append(path)
        if not self.serve_prm:
            raise web.HTTPNotFound()
        doc: dict[str, Any] = {"resource": f"{self.base}/{path}",
                               "authorization_servers": self.prm_issuers or [self.issuer]}
        if self.prm_scopes is not None:
            doc["scopes_supported"] = self.prm_scopes
        return web.json_response(doc)

    async def _metadata(self, request: web.Request) -> web.Response:
        if not self.serve_metadata:
            raise web.HTTPNotFound()
        doc = {"issuer": self.issuer, "authorization_endpoint": f"{self.base}/authorize",
               "token_endpoint": f"{self.base}/token",
               "registration_endpoint": f"{self.base}/register",
               "code_challenge_methods_supported": ["S256"],
               "token_endpoint_auth_methods_supported": ["client_secret_basic", "none"],
               "scopes_supported": ["read", "write", "offline_access"],
               "authorization_response_iss_parameter_supported": True}
        doc.update(self.metadata_overrides)
        return web.json_response({k: v for k, v in doc.items() if v is not None})

    async def _register(self, request: web.Request) -> web.Response:
        self.registrations.append(await request.json())
        answer = {"client_id": self._next("client"),
                  "token_endpoint_auth_method": self.registered_method}
        if self.registered_method != "none":
            answer["client_secret"] = self._next("secret")
        return web.json_response(answer, status=201)

    async def _authorize(self, request: web.Request) -> web.Response:
        query = dict(request.query)
        self.authorizations.append(query)
        code = self._next("code")
        self._codes[code] = query
        back = {"code": code, "state": query.get("state", ""), "iss": self.issuer}
        raise web.HTTPFound(f"{query['redirect_uri']}?{urlencode(back)}")

    async def _token(self, request: web.Request) -> web.Response:
        form = dict(await request.post())
        proof = request.headers.get("DPoP")
        self.token_requests.append(TokenRequest(form={k: str(v) for k, v in form.items()},
                                                authorization=request.headers.get(
                                                    "Authorization"), dpop=proof))
        if proof is not None and self.dpop_nonce is not None \
                and _claims(proof).get("nonce") != self.dpop_nonce:
            return web.json_response({"error": "use_dpop_nonce"}, status=400,
                                     headers={"DPoP-Nonce": self.dpop_nonce})
        if self.token_delay_s:
            await asyncio.sleep(self.token_delay_s)
        if self.token_answer is not None:
            status, body = self.token_answer
            return web.Response(status=status, body=body, content_type="application/json")
        grant = form.get("grant_type")
        if grant == "authorization_code":
            asked = self._codes.pop(str(form.get("code")), None)
            if asked is None or s256(str(form.get("code_verifier"))) != asked["code_challenge"]:
                return web.json_response({"error": "invalid_grant"}, status=400)
            scope = asked.get("scope", "")
        elif grant == "refresh_token":
            scope_or_none = self._refresh.get(str(form.get("refresh_token")))
            if self.refuse_refresh or scope_or_none is None:
                return web.json_response({"error": "invalid_grant",
                                          "error_description": "refresh token refused"},
                                         status=400)
            scope = scope_or_none
        elif grant == "client_credentials":
            scope = str(form.get("scope", ""))
        elif grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            if self.refuse_jwt_bearer is not None:
                return web.json_response({"error": self.refuse_jwt_bearer}, status=400)
            scope = str(form.get("scope", ""))
        elif grant == "urn:ietf:params:oauth:grant-type:token-exchange":
            return web.json_response({
                "access_token": self._next("idjag"), "token_type": "N_A",
                "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag"})
        else:
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        answer: dict[str, Any] = {"access_token": self._next("at"),
                                  "token_type": "DPoP" if proof else "Bearer"}
        if proof:
            self.bound[answer["access_token"]] = _header(proof)["jwk"]
        if self.expires_in is not None:
            answer["expires_in"] = self.expires_in
        if scope:
            answer["scope"] = scope
        if self.issue_refresh_tokens and grant in ("authorization_code", "refresh_token"):
            refresh = self._next("rt")
            self._refresh[refresh] = scope
            answer["refresh_token"] = refresh
        return web.json_response(answer)


def _header(jwt: str) -> dict[str, Any]:
    head = jwt.split(".")[0]
    return dict(json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4))))


def _claims(jwt: str) -> dict[str, Any]:
    """A JWT's claims, unverified (the tests check the signature themselves)."""
    body = jwt.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))))


class Clock:
    """A settable wall clock for ``OAuthClient(clock=...)``."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
