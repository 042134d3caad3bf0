"""The sign-ins waiting for people (auth.user_sign_in): one-time links, browser binding,
state, expiry and bounds, and the authorizer that files them."""

import asyncio

import pytest

from conftest import run
from trunkline.auth.user_sign_in import GatewayAuthorizer, SignInRefused, SignIns
from trunkline.errors import AuthorizationFailed

AUTH = "https://as.example/authorize?client_id=c&state={state}&code_challenge=x"
ALICE = ("oauth", "https://idp.example", "alice")
BOB = ("oauth", "https://idp.example", "bob")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def table(**kw):
    return SignIns(base_url="https://gw.example/", **kw)


def test_a_sign_in_link_opens_once_and_its_callback_needs_the_cookie_and_the_state():
    run(_a_sign_in_link_opens_once_and_its_callback_needs_the_cookie_and_the_state())


async def _a_sign_in_link_opens_once_and_its_callback_needs_the_cookie_and_the_state():
    sign_ins = table()
    sign_in = sign_ins.file("tracker", ALICE, AUTH.format(state="s1"))
    assert sign_ins.url_of(sign_in) == f"https://gw.example/signin/{sign_in.id}"
    assert sign_ins.callback_url == "https://gw.example/oauth/callback"
    assert len(sign_in.id) >= 32 and "s1" not in sign_in.id
    opened, binding = sign_ins.open(sign_in.id)
    assert opened is sign_in and opened.authorization_url == AUTH.format(state="s1")
    with pytest.raises(SignInRefused, match="already opened"):
        sign_ins.open(sign_in.id)  # a replayed link leads nowhere
    landed = "https://gw.example/oauth/callback?code=c1&state=s1"
    with pytest.raises(SignInRefused, match="another browser"):
        sign_ins.land(landed, None)
    with pytest.raises(SignInRefused, match="another browser"):
        sign_ins.land(landed, binding + "x")
    with pytest.raises(SignInRefused, match="unknown"):
        sign_ins.land("https://gw.example/oauth/callback?code=c1&state=forged", binding)
    assert not sign_in.landed.done()  # nothing refused reached the flow
    assert sign_ins.land(landed, binding) is sign_in
    assert sign_in.landed.result() == landed
    with pytest.raises(SignInRefused, match="unknown"):
        sign_ins.land(landed, binding)  # the state is spent


def test_sign_ins_are_kept_per_server_and_identity_and_bounded():
    run(_sign_ins_are_kept_per_server_and_identity_and_bounded())


async def _sign_ins_are_kept_per_server_and_identity_and_bounded():
    sign_ins = table(max_pending=2)
    a = sign_ins.file("tracker", ALICE, AUTH.format(state="a"))
    b = sign_ins.file("tracker", BOB, AUTH.format(state="b"))
    assert sign_ins.pending("tracker", ALICE) is a and sign_ins.pending("tracker", BOB) is b
    assert sign_ins.pending("wiki", ALICE) is None
    with pytest.raises(AuthorizationFailed, match="already waiting") as refused:
        sign_ins.file("wiki", ALICE, AUTH.format(state="c"))
    assert refused.value.reason == "too_many_sign_ins"
    # A new flow for the same server and identity replaces its sign-in.
    a2 = sign_ins.file("tracker", ALICE, AUTH.format(state="a2"))
    assert a.ended.is_set() and a.failure and sign_ins.get(a.id) is None
    with pytest.raises(AuthorizationFailed):
        a.landed.result()
    assert sign_ins.pending("tracker", ALICE) is a2 and len(sign_ins) == 2


def test_a_sign_in_expires():
    run(_a_sign_in_expires())


async def _a_sign_in_expires():
    clock = Clock()
    sign_ins = table(ttl_s=60, clock=clock)
    sign_in = sign_ins.file("tracker", ALICE, AUTH.format(state="s"))
    clock.now += 61
    with pytest.raises(SignInRefused, match="expired"):
        sign_ins.open(sign_in.id)
    assert sign_in.ended.is_set() and sign_in.failure == "nobody signed in in time"
    assert len(sign_ins) == 0


def test_a_request_without_state_is_not_filed():
    run(_a_request_without_state_is_not_filed())


async def _a_request_without_state_is_not_filed():
    with pytest.raises(AuthorizationFailed, match="no state"):
        table().file("tracker", ALICE, "https://as.example/authorize?client_id=c")


def test_the_authorizer_files_waits_for_the_browser_and_gives_up_at_expiry():
    run(_the_authorizer_files_waits_for_the_browser_and_gives_up_at_expiry())


async def _the_authorizer_files_waits_for_the_browser_and_gives_up_at_expiry():
    sign_ins = table(ttl_s=0.2)
    filed = []
    authorizer = GatewayAuthorizer(sign_ins, "tracker", ALICE, filed.append)
    waiting = asyncio.ensure_future(authorizer(AUTH.format(state="s")))
    while not filed:
        await asyncio.sleep(0)
    _, binding = sign_ins.open(filed[0].id)
    sign_ins.land("https://gw.example/oauth/callback?code=c&state=s", binding)
    assert await waiting == "https://gw.example/oauth/callback?code=c&state=s"
    # Nobody comes back: the flow fails when the sign-in expires, and it is forgotten.
    with pytest.raises(AuthorizationFailed, match="nobody signed in") as late:
        await GatewayAuthorizer(sign_ins, "wiki", ALICE, lambda _: None)(
            AUTH.format(state="t"))
    assert late.value.reason == "sign_in_timeout"
    assert sign_ins.pending("wiki", ALICE) is None


def test_closing_ends_every_waiting_flow():
    run(_closing_ends_every_waiting_flow())


async def _closing_ends_every_waiting_flow():
    sign_ins = table()
    waiting = asyncio.ensure_future(
        GatewayAuthorizer(sign_ins, "tracker", ALICE, lambda _: None)(AUTH.format(state="s")))
    await asyncio.sleep(0)
    sign_ins.close()
    with pytest.raises(AuthorizationFailed, match="stopping"):
        await waiting
