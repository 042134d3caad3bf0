"""The gateway's access-token checks (``gateway.bearer``) and the issuer keys behind them
(``gateway.issuer_keys``), in process: the claims rules as data, the signature rules
with keys made here, and the JWKS cache against an issuer of our own on 127.0.0.1 (whose
keys rotate when a test says so, and which can go down): key rotation, the refetch rate
limit under a flood of unknown key ids, an issuer that is down, too big, or too slow."""

from __future__ import annotations

import asyncio
import base64
import time

import orjson
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from conftest import run
from oidc import OwnIssuer
from trunkline.gateway import bearer, issuer_keys
from trunkline.gateway.bearer import Identity, Refused, TokenPolicy

AUD = "http://127.0.0.1:8000/mcp"
NOW = 1_800_000_000


def claims(**changed):
    base = {"iss": "ISSUER", "aud": AUD, "sub": "alice", "exp": NOW + 300, "nbf": NOW - 5,
            "iat": NOW - 5, "scope": "mcp:tools files:read", "client_id": "app"}
    base.update(changed)
    return {k: v for k, v in base.items() if v is not None}


# --- the claims, as data ------------------------------------------------------------------

POLICY = TokenPolicy(("ISSUER",), AUD, ("mcp:tools",))


def test_good_claims_give_the_identity():
    got = bearer.check_claims(claims(), POLICY, NOW)
    assert got == Identity("oauth", "alice", "ISSUER", frozenset({"mcp:tools", "files:read"}),
                           client_id="app")
    assert got.key == ("oauth", "ISSUER", "alice")
    assert isinstance(bearer.check_claims(claims(aud=["other", AUD]), POLICY, NOW), Identity)
    assert isinstance(bearer.check_claims(claims(scope=None, scp=["mcp:tools"]), POLICY, NOW),
                      Identity)


@pytest.mark.parametrize("changed, reason", [
    ({"iss": "OTHER"}, "another issuer"),
    ({"iss": None}, "another issuer"),
    ({"aud": "http://127.0.0.1:8000/other"}, "another audience"),
    ({"aud": [AUD + "/"]}, "another audience"),
    ({"aud": None}, "another audience"),
    ({"exp": None}, "no expiry"),
    ({"exp": "soon"}, "no expiry"),
    ({"exp": True}, "no expiry"),
    ({"exp": NOW - bearer.LEEWAY_S - 1}, "expired"),
    ({"nbf": NOW + bearer.LEEWAY_S + 1}, "not valid yet"),
    ({"sub": ""}, "no subject"),
    ({"sub": 7}, "no subject"),
])
def test_bad_claims_are_invalid_tokens(changed, reason):
    got = bearer.check_claims(claims(**changed), POLICY, NOW)
    assert isinstance(got, Refused) and got.status == 401 and got.error == "invalid_token"
    assert reason in got.reason


def test_leeway_and_missing_scopes():
    assert isinstance(bearer.check_claims(claims(exp=NOW - 30), POLICY, NOW), Identity)
    assert isinstance(bearer.check_claims(claims(nbf=NOW + 30), POLICY, NOW), Identity)
    need_two = TokenPolicy(("ISSUER",), AUD, ("mcp:tools", "admin", "audit"))
    got = bearer.check_claims(claims(), need_two, NOW)
    assert got == Refused(403, "insufficient_scope", "the token lacks the scopes admin audit")


def test_challenges_and_metadata():
    prm = bearer.metadata_url("https://gw.example/team/mcp")
    assert prm == "https://gw.example/.well-known/oauth-protected-resource/team/mcp"
    assert bearer.metadata_paths("https://gw.example/team/mcp") == (
        "/.well-known/oauth-protected-resource/team/mcp", "/.well-known/oauth-protected-resource")
    assert bearer.challenge(prm, ()) == f'Bearer resource_metadata="{prm}"'
    assert bearer.challenge(prm, ("a", "b"), Refused(403, "insufficient_scope", 'lacks "b"')) \
        == (f'Bearer resource_metadata="{prm}", scope="a b", error="insufficient_scope", '
            'error_description="lacks \\"b\\""')
    doc = bearer.protected_resource_metadata("https://gw.example/mcp", ["https://as"], ["a"])
    assert doc["resource"] == "https://gw.example/mcp" and doc["scopes_supported"] == ["a"]
    assert doc["authorization_servers"] == ["https://as"]
    assert bearer.bearer_token("bearer abc ") == "abc" and bearer.bearer_token("Basic x") is None


# --- signatures ---------------------------------------------------------------------------


class FixedKeys:
    def __init__(self, *keys):
        self.keys_ = keys
        self.asked = []

    async def keys(self, kid):
        self.asked.append(kid)
        return [k for k in self.keys_ if kid is None or k.kid == kid]


def public(key):
    from joserfc.jwk import JWKRegistry

    return JWKRegistry.import_key(key.as_dict(private=False))


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


RSA = RSAKey.generate_key(2048, parameters={"kid": "r1"})
EC = ECKey.generate_key("P-256", parameters={"kid": "e1"})


def validator(*keys, scopes=("mcp:tools",)):
    source = FixedKeys(*(public(k) for k in keys))
    return bearer.Validator(TokenPolicy(("ISSUER",), AUD, scopes), {"ISSUER": source},
                            clock=lambda: NOW), source


def sign(key, alg="RS256", kid="r1", **changed):
    header = {"alg": alg, **({"kid": kid} if kid else {})}
    return jwt.encode(header, claims(**changed), key, algorithms=[alg])


def test_signatures():
    check, _ = validator(RSA, EC)
    assert isinstance(run(check.check("Bearer " + sign(RSA))), Identity)
    assert isinstance(run(check.check("Bearer " + sign(EC, "ES256", "e1"))), Identity)
    assert isinstance(run(check.check("Bearer " + sign(RSA, "PS256"))), Identity)
    # No kid: every key of the algorithm's type is tried.
    assert isinstance(run(check.check("Bearer " + sign(RSA, kid=None))), Identity)
    # Signed by a stranger's key under our kid.
    stranger = RSAKey.generate_key(2048, parameters={"kid": "r1"})
    assert run(check.check("Bearer " + sign(stranger))).reason == \
        "the token's signature does not verify"
    # An EC key claimed for an RSA algorithm is not tried.
    assert run(check.check("Bearer " + sign(EC, "ES256", "r1"))).status == 401


def test_no_none_no_hmac_with_a_public_key():
    check, source = validator(RSA)
    _, payload, _ = sign(RSA).split(".")
    none = b64(orjson.dumps({"alg": "none", "kid": "r1"}))
    assert "algorithm" in run(check.check(f"Bearer {none}.{payload}.")).reason
    # The classic confusion: HS256 "signed" with the RSA public key's bytes as the secret.
    import hashlib
    import hmac

    signing_input = f"{b64(orjson.dumps({'alg': 'HS256', 'kid': 'r1'}))}.{payload}"
    mac = hmac.new(RSA.as_pem(private=False), signing_input.encode(), hashlib.sha256)
    forged = f"{signing_input}.{b64(mac.digest())}"
    got = run(check.check(f"Bearer {forged}"))
    assert got.status == 401 and "algorithm" in got.reason
    assert source.asked == [], "refused before any key was looked up"


def test_garbage_never_raises():
    check, source = validator(RSA)
    for junk in ["", "x", "a.b.c", "....", "e30.e30.", b64(b"[1]") + ".e30.x",
                 b64(orjson.dumps({"alg": "RS256", "kid": 5})) + ".e30.x",
                 b64(orjson.dumps({"alg": "RS256", "crit": ["exp"]})) + ".e30.x",
                 "\u00e9\u00e9.\u00e9.\u00e9", "A" * (bearer.MAX_TOKEN_CHARS + 1)]:
        got = run(check.check(f"Bearer {junk}"))
        assert isinstance(got, Refused) and got.status == 401, junk[:40]
    # A token naming an issuer not configured: refused without touching any keys.
    other = sign(RSA, iss="https://elsewhere.example")
    assert "another issuer" in run(check.check(f"Bearer {other}")).reason
    for odd in (["ISSUER"], {"ISSUER": 1}, 7, None):
        assert "another issuer" in run(check.check(f"Bearer {sign(RSA, iss=odd)}")).reason
    assert source.asked == []


# --- the issuer's keys, over HTTP ----------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


async def with_issuer(body):
    issuer = await OwnIssuer([RSA]).start()
    clock = Clock()
    keys = issuer_keys.IssuerKeys(issuer.issuer, clock=clock)
    try:
        return await body(issuer, keys, clock)
    finally:
        await keys.aclose()
        await issuer.stop()


def test_a_rotated_key_is_fetched_once_the_rate_limit_allows():
    async def body(issuer, keys, clock):
        assert [k.kid for k in await keys.keys("r1")] == ["r1"]
        assert await keys.keys("r1") and issuer.jwks_fetches == 1, "cached"
        rotated = RSAKey.generate_key(2048, parameters={"kid": "r2"})
        issuer.keys = [RSA, rotated]
        clock.now += 1  # just after a fetch: an unknown kid waits for the interval
        assert await keys.keys("r2") == [] and issuer.jwks_fetches == 1
        clock.now += issuer_keys.MIN_REFETCH_S
        assert [k.kid for k in await keys.keys("r2")] == ["r2"] and issuer.jwks_fetches == 2
        # The old key, dropped by the issuer, is gone after the next fetch.
        issuer.keys = [rotated]
        clock.now += issuer_keys.REFRESH_S
        assert await keys.keys("r1") == [] and issuer.jwks_fetches == 3
    run(with_issuer(body))


def test_a_flood_of_unknown_key_ids_makes_one_fetch_per_interval():
    async def body(issuer, keys, clock):
        await keys.keys("r1")
        clock.now += issuer_keys.MIN_REFETCH_S
        found = await asyncio.gather(*(keys.keys(f"made-up-{i}") for i in range(200)))
        assert found == [[]] * 200
        assert issuer.jwks_fetches == 2, "the flood shared one fetch"
        for i in range(200):
            clock.now += 0.1
            assert await keys.keys(f"more-{i}") == []
        assert issuer.jwks_fetches == 2, "20 s of unknown key ids, within the interval"
        clock.now += issuer_keys.MIN_REFETCH_S
        assert await keys.keys("one-more") == [] and issuer.jwks_fetches == 3
    run(with_issuer(body))


def test_an_issuer_that_goes_down_keeps_known_keys_and_is_unavailable_for_new_ones():
    async def body(issuer, keys, clock):
        await keys.keys("r1")
        issuer.mode = "down"
        clock.now += issuer_keys.REFRESH_S  # due for a refresh, which fails
        assert [k.kid for k in await keys.keys("r1")] == ["r1"], "the old keys still serve"
        clock.now += issuer_keys.MIN_REFETCH_S
        with pytest.raises(bearer.KeysUnavailable):
            await keys.keys("r9")  # maybe a new key: the issuer cannot say
        issuer.mode = "ok"
        clock.now += issuer_keys.MIN_REFETCH_S
        assert await keys.keys("r9") == [], "back up: r9 is simply unknown"
    run(with_issuer(body))


@pytest.mark.parametrize("mode", ["down", "huge", "slow"])
def test_keys_never_had_are_unavailable(mode, monkeypatch):
    monkeypatch.setattr(issuer_keys, "FETCH_TIMEOUT_S", 0.5)

    async def body(issuer, keys, clock):
        issuer.mode = mode
        started = time.monotonic()
        with pytest.raises(bearer.KeysUnavailable):
            await keys.keys("r1")
        assert time.monotonic() - started < 3
        with pytest.raises(bearer.KeysUnavailable):
            await keys.keys(None)  # within the interval: no second try
        assert issuer.jwks_fetches == 1
    run(with_issuer(body))


def test_metadata_for_another_issuer_or_private_keys_are_not_used():
    with pytest.raises(bearer.KeysUnavailable):
        issuer_keys.jwks_uri_of({"issuer": "https://a.example", "jwks_uri": "https://a/j"},
                                "https://b.example", "url")
    with pytest.raises(bearer.KeysUnavailable):
        issuer_keys.jwks_uri_of({"issuer": "https://b.example", "jwks_uri": "http://a/j"},
                                "https://b.example", "url")
    parsed = issuer_keys.parse_jwks({"keys": [
        RSA.as_dict(private=True), {**EC.as_dict(private=False), "use": "enc"},
        {"kty": "oct", "k": "c2VjcmV0"}, {"kty": "RSA", "n": "!!"}, "junk",
        EC.as_dict(private=False)]})
    assert [k.kid for k in parsed] == ["e1"]


def test_a_legacy_session_id_carries_a_digest_of_its_owner():
    from trunkline.gateway.http_rules import SessionSigner, session_owner

    signer = SessionSigner(b"k" * 32)
    owner = session_owner("https://as.example", "alice@example.com")
    assert owner != session_owner("https://other.example", "alice@example.com")
    minted = signer.mint("2025-11-25", {}, owner=owner)
    assert "alice" not in minted and signer.verify(minted).owner == owner
    assert signer.verify(signer.mint("2025-11-25", {})).owner is None
    forged = minted.replace(minted.split(".")[1], signer.mint("2025-11-25", {}).split(".")[1])
    assert signer.verify(forged) is None


def test_two_legacy_sessions_opened_in_the_same_millisecond_are_two_sessions():
    # A session id is whose asks may be answered and whose streams are whose: two clients
    # initializing at the same instant with the same capabilities must not share one.
    from trunkline.gateway.http_rules import SessionSigner

    signer = SessionSigner(b"k" * 32)
    caps = {"elicitation": {"form": {}}}
    minted = {signer.mint("2025-11-25", caps, now=1_700_000_000.0) for _ in range(1000)}
    assert len(minted) == 1000
    assert all(signer.verify(m).capabilities == caps for m in minted)
