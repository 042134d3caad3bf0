"""OAuthClient against a local authorization server: what the conformance suite does not
cover (single flight, refresh before expiry and after a restart, step-up bounds, issuer
migration, secrets staying with their issuer), and bad answers."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from oauth_fakes import Clock, FakeAuthServer

from conftest import run
from trunkline.auth import (
    CLIENT_CREDENTIALS,
    ClientSettings,
    FileStore,
    HeadlessAuthorizer,
    OAuthClient,
    PreRegisteredClient,
    Secret,
    ServerAuth,
)
from trunkline.auth.resource import canonical_uri
from trunkline.auth.scopes import StepUpBudget
from trunkline.errors import AuthenticationFailed, AuthorizationFailed

SETTINGS = ClientSettings(client_name="trunkline-test", redirect_uri="http://127.0.0.1/callback")


def client(clock: Clock | None = None, **kw: Any) -> OAuthClient:
    return OAuthClient(settings=SETTINGS, clock=clock or Clock(), **kw)


def test_a_401_runs_the_whole_flow_and_the_token_is_cached(no_leaks: None) -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client() as oauth:
            server = fake.server_url()
            assert await oauth.authorization_for(server) is None
            header = await oauth.on_challenge(server, 401, fake.challenge(scope="read"))
            assert header.startswith("Bearer at-")
            assert await oauth.authorization_for(server) == header

            [registration] = fake.registrations
            assert registration["application_type"] == "native"
            assert "refresh_token" in registration["grant_types"]
            [authz] = fake.authorizations
            assert authz["resource"] == server and authz["code_challenge_method"] == "S256"
            assert authz["scope"] == "read offline_access"  # the AS lists offline_access
            assert authz["redirect_uri"] == SETTINGS.redirect_uri
            [exchange] = fake.token_requests
            assert exchange.grant == "authorization_code"
            assert exchange.form["resource"] == server and exchange.form["code_verifier"]
            # Registered with client_secret_basic: the secret goes in the header only.
            assert exchange.basic_client() == (authz["client_id"], fake.issued[1])
            assert "client_secret" not in exchange.form

    run(main())


def test_50_concurrent_callers_make_one_authorization_and_one_token_request() -> None:
    async def main() -> None:
        async with FakeAuthServer(token_delay_s=0.05) as fake, client() as oauth:
            server = fake.server_url()

            async def caller() -> str:
                sent = await oauth.authorization_for(server)
                if sent is None:
                    sent = await oauth.on_challenge(server, 401, fake.challenge(),
                                                    rejected=None)
                return sent

            headers = await asyncio.gather(*(caller() for _ in range(50)))
            assert len(set(headers)) == 1
            assert len(fake.registrations) == 1
            assert len(fake.authorizations) == 1
            assert len(fake.token_requests) == 1

            # Latecomers whose 401 is for the token they sent before the flow: no new flow.
            again = await asyncio.gather(*(oauth.on_challenge(server, 401, fake.challenge(),
                                                              rejected=None)
                                           for _ in range(10)))
            assert set(again) == set(headers) and len(fake.token_requests) == 1

    run(main())


def test_50_concurrent_callers_share_one_refresh() -> None:
    async def main() -> None:
        clock = Clock()
        async with FakeAuthServer(token_delay_s=0.05) as fake, client(clock) as oauth:
            server = fake.server_url()
            first = await oauth.on_challenge(server, 401, fake.challenge())
            clock.now += 3600 - 30  # inside the 60 s margin
            headers = await asyncio.gather(*(oauth.authorization_for(server)
                                             for _ in range(50)))
            assert len(set(headers)) == 1 and headers[0] not in (None, first)
            grants = [r.grant for r in fake.token_requests]
            assert grants == ["authorization_code", "refresh_token"]

    run(main())


def test_a_token_is_refreshed_shortly_before_it_expires_not_earlier() -> None:
    async def main() -> None:
        clock = Clock()
        async with FakeAuthServer() as fake, client(clock, refresh_margin_s=60) as oauth:
            server = fake.server_url()
            first = await oauth.on_challenge(server, 401, fake.challenge())
            refresh_token = fake.issued[-1]
            clock.now += 3600 - 61
            assert await oauth.authorization_for(server) == first
            assert len(fake.token_requests) == 1
            clock.now += 1
            second = await oauth.authorization_for(server)
            assert second != first
            refresh = fake.token_requests[-1]
            assert refresh.form == {"grant_type": "refresh_token",
                                    "refresh_token": refresh_token, "resource": server}
            assert refresh.basic_client() is not None  # the registered client, authenticated
            assert len(fake.authorizations) == 1

    run(main())


def test_a_restarted_host_refreshes_from_the_file_store_instead_of_reauthorizing(
        tmp_path: Path) -> None:
    async def main() -> None:
        clock = Clock()
        store_dir = tmp_path / "tokens"
        async with FakeAuthServer() as fake:
            server = fake.server_url()
            async with client(clock, store=FileStore(store_dir)) as oauth:
                first = await oauth.on_challenge(server, 401, fake.challenge())

            [record] = list(store_dir.iterdir())
            assert stat.S_IMODE(record.stat().st_mode) == 0o600
            assert stat.S_IMODE(store_dir.stat().st_mode) == 0o700

            # A new process, same store, the token still good: used as is.
            async with client(clock, store=FileStore(store_dir)) as oauth:
                assert await oauth.authorization_for(server) == first
            assert len(fake.token_requests) == 1

            # A new process, hours later: the stored absolute expiry says it is due.
            clock.now += 5 * 3600
            async with client(clock, store=FileStore(store_dir)) as oauth:
                refreshed = await oauth.authorization_for(server)
            assert refreshed is not None and refreshed != first
            assert [r.grant for r in fake.token_requests] == ["authorization_code",
                                                              "refresh_token"]
            assert len(fake.authorizations) == 1 and len(fake.registrations) == 1

    run(main())


def test_a_refused_refresh_token_is_dropped_and_the_next_401_authorizes_afresh(
        tmp_path: Path) -> None:
    async def main() -> None:
        clock = Clock()
        store = FileStore(tmp_path)
        async with FakeAuthServer() as fake, client(clock, store=store) as oauth:
            server = fake.server_url()
            await oauth.on_challenge(server, 401, fake.challenge())
            fake.refuse_refresh = True
            clock.now += 3600
            assert await oauth.authorization_for(server) is None
            binding = await store.load(canonical_uri(server))
            assert binding is not None and binding.token is None and binding.client is not None
            header = await oauth.on_challenge(server, 401, fake.challenge(), rejected=None)
            assert header.startswith("Bearer ")
            assert len(fake.authorizations) == 2
            assert len(fake.registrations) == 1  # the registration is kept

    run(main())


def test_a_401_for_the_current_token_refreshes_once_then_authorizes() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client() as oauth:
            server = fake.server_url()
            first = await oauth.on_challenge(server, 401, fake.challenge())
            second = await oauth.on_challenge(server, 401, fake.challenge(), rejected=first)
            assert second != first
            assert [r.grant for r in fake.token_requests] == ["authorization_code",
                                                              "refresh_token"]
            # The refreshed token refused too: refreshing does not help, authorize.
            third = await oauth.on_challenge(server, 401, fake.challenge(), rejected=second)
            assert third not in (first, second)
            assert [r.grant for r in fake.token_requests][-1] == "authorization_code"
            assert len(fake.authorizations) == 2

    run(main())


def test_a_401_for_an_older_token_is_answered_with_the_current_one() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client() as oauth:
            server = fake.server_url()
            first = await oauth.on_challenge(server, 401, fake.challenge())
            second = await oauth.on_challenge(server, 401, fake.challenge(), rejected=first)
            before = len(fake.raw)
            assert await oauth.on_challenge(server, 401, fake.challenge(),
                                            rejected=first) == second
            assert len(fake.raw) == before  # not a single request

    run(main())


def test_step_up_asks_for_the_union_and_is_bounded() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client(step_ups=StepUpBudget(limit=2)) as oauth:
            server = fake.server_url()
            first = await oauth.on_challenge(server, 401, fake.challenge(scope="read"))
            stepped = await oauth.on_challenge(
                server, 403, fake.challenge(error="insufficient_scope", scope="write"),
                rejected=first)
            assert stepped != first
            assert fake.authorizations[-1]["scope"] == "read offline_access write"

            # The same challenge again: every scope it names was asked for already.
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(
                    server, 403, fake.challenge(error="insufficient_scope", scope="write"),
                    rejected=stepped)
            assert caught.value.reason == "step_up_exhausted" and caught.value.status == 403
            assert len(fake.authorizations) == 2

            # New scopes every time: the budget (2 step-ups) ends it.
            header = stepped
            header = await oauth.on_challenge(
                server, 403, fake.challenge(error="insufficient_scope", scope="admin"),
                rejected=header)
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(
                    server, 403, fake.challenge(error="insufficient_scope", scope="root"),
                    rejected=header)
            assert caught.value.reason == "step_up_exhausted"
            assert len(fake.authorizations) == 3

    run(main())


def test_a_403_without_insufficient_scope_is_a_refusal() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client() as oauth:
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(fake.server_url(), 403, 'Bearer error="invalid_token"')
            assert caught.value.reason == "forbidden" and not fake.raw
            assert isinstance(caught.value, AuthenticationFailed)

    run(main())


def test_a_changed_authorization_server_gets_a_fresh_registration_and_nothing_old() -> None:
    async def main() -> None:
        async with FakeAuthServer() as as1, FakeAuthServer() as as2, client() as oauth:
            server = as1.server_url()
            first = await oauth.on_challenge(server, 401, as1.challenge())
            as1_secrets = list(as1.issued)  # client id and secret, code, tokens
            as1_requests = len(as1.token_requests)

            as1.prm_issuers = [as2.issuer]
            second = await oauth.on_challenge(server, 401, as1.challenge(), rejected=first)
            assert second.startswith("Bearer at-") and second != first
            assert len(as2.registrations) == 1 and len(as2.authorizations) == 1
            # Nothing AS1 issued ever reached AS2, and AS1's refresh token was not used.
            for secret in as1_secrets:
                assert not any(secret in request for request in as2.raw), secret
            assert len(as1.token_requests) == as1_requests
            as1_client, as2_client = as1.issued[0], as2.issued[0]
            assert as1_client.startswith("client-") and as2_client.startswith("client-")
            assert as2.authorizations[0]["client_id"] == as2_client != as1_client
            assert await oauth.authorization_for(server) == second

    run(main())


def test_a_token_for_one_server_is_never_sent_to_another() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client() as oauth:
            server_a, server_b = fake.server_url("a/mcp"), fake.server_url("b/mcp")
            header_a = await oauth.on_challenge(server_a, 401, fake.challenge("a/mcp"))
            assert await oauth.authorization_for(server_b) is None
            header_b = await oauth.on_challenge(server_b, 401, fake.challenge("b/mcp"),
                                                rejected=None)
            assert header_b != header_a
            assert fake.token_requests[-1].form["resource"] == server_b
            assert await oauth.authorization_for(server_a) == header_a
            assert await oauth.authorization_for(server_b) == header_b

    run(main())


def test_configured_credentials_are_not_sent_to_a_new_issuer() -> None:
    async def main() -> None:
        async with FakeAuthServer() as as1, FakeAuthServer() as as2:
            server = as1.server_url()
            configured = PreRegisteredClient(client_id="pre-id",
                                             client_secret=Secret("pre-secret"))
            async with client(servers={server: ServerAuth(client=configured)}) as oauth:
                first = await oauth.on_challenge(server, 401, as1.challenge())
                assert as1.token_requests[-1].basic_client() == ("pre-id", "pre-secret")
                as1.prm_issuers = [as2.issuer]
                with pytest.raises(AuthorizationFailed) as caught:
                    await oauth.on_challenge(server, 401, as1.challenge(), rejected=first)
                assert caught.value.reason == "issuer_changed"
                assert as2.issuer in str(caught.value)
                assert not any("pre-id" in r or "pre-secret" in r for r in as2.raw)

    run(main())


def test_the_client_credentials_grant_and_its_renewal() -> None:
    async def main() -> None:
        clock = Clock()
        async with FakeAuthServer() as fake:
            server = fake.server_url()
            auth = ServerAuth(grant=CLIENT_CREDENTIALS, client=PreRegisteredClient(
                client_id="machine", client_secret=Secret("machine-secret")))
            async with client(clock, servers={server: auth}) as oauth:
                first = await oauth.on_challenge(server, 401, fake.challenge(scope="read"))
                [request] = fake.token_requests
                assert request.form == {"grant_type": "client_credentials", "resource": server,
                                        "scope": "read"}
                assert request.basic_client() == ("machine", "machine-secret")
                assert not fake.authorizations and not fake.registrations
                clock.now += 3600
                renewed = await oauth.authorization_for(server)
                assert renewed not in (None, first)
                assert [r.grant for r in fake.token_requests] == ["client_credentials"] * 2

    run(main())


def test_protected_resource_metadata_for_another_resource_gets_no_token() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client() as oauth:
            # The metadata published for /other cannot vouch for /mcp.
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(fake.server_url("mcp"), 401, fake.challenge("other"))
            assert caught.value.reason == "resource_mismatch"
            assert fake.server_url("mcp") in str(caught.value)
            assert not fake.registrations and not fake.authorizations and not fake.token_requests

    run(main())


def test_malformed_metadata_everywhere_is_a_clear_error() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client() as oauth:
            fake.metadata_overrides = {"issuer": fake.issuer + "/"}
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(fake.server_url(), 401, fake.challenge())
            assert caught.value.reason == "issuer_mismatch" and not fake.registrations
        async with client() as oauth:
            # Nothing listens there at all: every location is named with why it failed.
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge("http://127.0.0.1:9/mcp", 401, None)
            text = str(caught.value)
            assert caught.value.reason == "metadata_unavailable"
            assert "http://127.0.0.1:9/.well-known/oauth-protected-resource/mcp" in text
            assert "http://127.0.0.1:9/.well-known/oauth-protected-resource (" in text
            assert "server 'http://127.0.0.1:9/mcp'" in text

    run(main())


def test_a_token_answer_that_is_not_json_stores_nothing() -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake, client() as oauth:
            fake.token_answer = (200, b"<html>at-leaked</html>")
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(fake.server_url(), 401, fake.challenge())
            assert caught.value.reason == "malformed_response"
            assert "leaked" not in str(caught.value)
            assert await oauth.authorization_for(fake.server_url()) is None

    run(main())


@pytest.mark.parametrize("tamper, reason", [
    (lambda url: url.replace("state=", "state=x"), "state_mismatch"),
    (lambda url: url.split("?")[0] + "?" + "&".join(
        p for p in url.split("?")[1].split("&") if not p.startswith("code=")),
     "malformed_redirect"),
    (lambda url: url.replace("iss=", "iss=https%3A%2F%2Fevil.example.com%2F"), "iss_mismatch"),
])
def test_a_bad_redirect_is_refused_before_any_token_request(tamper: Any, reason: str) -> None:
    async def main() -> None:
        headless = HeadlessAuthorizer()

        async def authorizer(url: str) -> str:
            return tamper(await headless(url))

        async with FakeAuthServer() as fake, client(authorizer=authorizer) as oauth:
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(fake.server_url(), 401, fake.challenge())
            assert caught.value.reason == reason
            assert len(fake.authorizations) == 1 and not fake.token_requests

    run(main())


def test_no_secret_to_a_server_over_plain_http() -> None:
    async def main() -> None:
        async with client() as oauth:
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge("http://mcp.example.com/mcp", 401, None)
            assert caught.value.reason == "insecure_server"

    run(main())


def test_the_headless_authorizer_needs_a_redirect() -> None:
    async def main() -> None:
        from aiohttp import web

        async def login_page(request: web.Request) -> web.Response:
            return web.Response(text="log in")

        app = web.Application()
        app.router.add_get("/authorize", login_page)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        try:
            with pytest.raises(AuthorizationFailed) as caught:
                await HeadlessAuthorizer()(f"http://{host}:{port}/authorize")
            assert caught.value.reason == "authorization_interactive"
        finally:
            await runner.cleanup()

    run(main())


def test_aclose_cancels_a_flow_in_flight(no_leaks: None) -> None:
    async def main() -> None:
        entered = asyncio.Event()

        async def stuck(url: str) -> str:
            entered.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async with FakeAuthServer() as fake:
            oauth = client(authorizer=stuck)
            task = asyncio.create_task(oauth.on_challenge(fake.server_url(), 401,
                                                          fake.challenge()))
            await entered.wait()
            await oauth.aclose()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not oauth._flights

    run(main())


def test_no_secret_reaches_a_log_record_a_repr_or_an_error(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    async def main() -> None:
        clock = Clock()
        async with FakeAuthServer() as fake, client(clock, store=FileStore(tmp_path)) as oauth:
            server = fake.server_url()
            header = await oauth.on_challenge(server, 401, fake.challenge(scope="read"))
            clock.now += 3600
            await oauth.authorization_for(server)
            fake.refuse_refresh = True
            clock.now += 3600
            await oauth.authorization_for(server)
            fake.token_answer = (400, b'{"error": "invalid_grant"}')
            with pytest.raises(AuthorizationFailed) as caught:
                await oauth.on_challenge(server, 401, fake.challenge(), rejected=None)
            # Everything the server issued but client ids (which are not secret).
            secrets = [v for v in fake.issued if not v.startswith("client-")]
            secrets.append(header.removeprefix("Bearer "))
            secrets += [r.form.get("code_verifier", "") for r in fake.token_requests]
            secrets = [s for s in secrets if s]
            shown = "\n".join([caplog.text, repr(oauth._bindings), str(oauth._bindings),
                               str(caught.value), repr(caught.value)])
            for secret in secrets:
                assert secret not in shown, secret
            assert "<secret>" in repr(oauth._bindings)

    caplog.set_level(logging.DEBUG)
    run(main())
    assert "authorized by" in caplog.text  # the log did say what happened


def test_the_file_store_writes_atomically_and_ignores_a_corrupt_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with FakeAuthServer() as fake:
            server = fake.server_url()
            store = FileStore(tmp_path)
            async with client(store=store) as oauth:
                await oauth.on_challenge(server, 401, fake.challenge())
            assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
            path = store.path_for(canonical_uri(server))
            path.write_text("{ torn")
            async with client(store=store) as oauth:
                assert await oauth.authorization_for(server) is None
            assert str(path) in caplog.text and "ignoring" in caplog.text
            os.chmod(path, 0o644)
            async with client(store=store) as oauth:
                await oauth.on_challenge(server, 401, fake.challenge())
            assert stat.S_IMODE(path.stat().st_mode) == 0o600

    run(main())


def test_a_server_url_that_is_not_one_is_a_clear_error() -> None:
    async def main() -> None:
        async with client() as oauth:
            for call in (oauth.authorization_for("mcp.example.com"),
                         oauth.on_challenge("ftp://mcp.example.com", 401, None)):
                with pytest.raises(AuthorizationFailed) as caught:
                    await call
                assert caught.value.reason == "invalid_url" and caught.value.server

    run(main())
