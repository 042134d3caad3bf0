"""private_key_jwt (RFC 7523): the client assertion's claims and signature, checked with
joserfc against the public key; the keys a configuration may give; the key never shown;
the client credentials grant with it against a local authorization server."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from joserfc import jwk, jwt
from joserfc.errors import BadSignatureError
from oauth_fakes import Clock, FakeAuthServer

from conftest import run
from trunkline.auth import (
    CLIENT_CREDENTIALS,
    ClientSettings,
    OAuthClient,
    PreRegisteredClient,
    Secret,
    ServerAuth,
)
from trunkline.auth.assertion import (
    ASSERTION_TYPE,
    LIFETIME_S,
    check_signing_key,
    client_assertion,
)
from trunkline.auth.registration import (
    BASIC,
    CONFIGURED,
    NONE,
    PRIVATE_KEY_JWT,
    ClientIdentity,
    client_authentication,
    token_auth_method,
)
from trunkline.errors import AuthorizationFailed, ConfigurationError

ISSUER = "https://as.example.com/tenant"
NOW = 1_800_000_000.0


def pem(private: Any) -> str:
    return private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode()


def public_pem(private: Any) -> str:
    return private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def key_body(text: str) -> str:
    """A line from the middle of a PEM: what a leak of the key would contain."""
    return text.splitlines()[2]


EC_P256 = ec.generate_private_key(ec.SECP256R1())
KEYS = {
    "ES256": EC_P256,
    "ES384": ec.generate_private_key(ec.SECP384R1()),
    "RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "Ed25519": ed25519.Ed25519PrivateKey.generate(),
}
KEYS["PS256"] = KEYS["RS256"]
KEY_TYPES = {"ES256": "EC", "ES384": "EC", "RS256": "RSA", "PS256": "RSA", "Ed25519": "OKP"}


def verify(assertion: str, private: Any, algorithm: str) -> jwt.Token:
    public = jwk.import_key(public_pem(private), KEY_TYPES[algorithm])  # type: ignore[arg-type]  # KEY_TYPES holds key types as str
    return jwt.decode(assertion, public, algorithms=[algorithm])


@pytest.mark.parametrize("algorithm", sorted(KEYS))
def test_the_assertion_is_signed_with_the_key_and_claims_what_rfc7523_asks(
        algorithm: str) -> None:
    private = KEYS[algorithm]
    assertion = client_assertion(Secret(pem(private)), algorithm, client_id="machine-1",
                                 audience=ISSUER, now=NOW + 0.7)
    token = verify(assertion, private, algorithm)
    assert token.header == {"alg": algorithm, "typ": "JWT"}
    claims = token.claims
    assert claims["iss"] == claims["sub"] == "machine-1"
    assert claims["aud"] == ISSUER  # the issuer itself, one string (rfc7523bis)
    assert claims["iat"] == int(NOW) and claims["exp"] == int(NOW) + LIFETIME_S
    assert len(claims["jti"]) >= 22  # 128 random bits, base64url
    again = verify(client_assertion(Secret(pem(private)), algorithm, client_id="machine-1",
                                    audience=ISSUER, now=NOW), private, algorithm)
    assert again.claims["jti"] != claims["jti"]


def test_another_key_does_not_verify_it() -> None:
    assertion = client_assertion(Secret(pem(EC_P256)), "ES256", client_id="c", audience=ISSUER,
                                 now=NOW)
    with pytest.raises(BadSignatureError):
        verify(assertion, ec.generate_private_key(ec.SECP256R1()), "ES256")


@pytest.mark.parametrize("key, algorithm, says", [
    (pem(EC_P256), "RS256", "not a PEM RSA key"),
    (pem(EC_P256), "ES384", "on P-384, not P-256"),
    (pem(KEYS["RS256"]), "ES256", "not a PEM EC key"),
    (public_pem(EC_P256), "ES256", "is a public key"),
    (pem(EC_P256), "HS256", "asymmetric"),
    (pem(EC_P256), "none", "asymmetric"),
    (pem(EC_P256).replace("A", "B", 5), "ES256", "not a PEM EC key"),
])
def test_keys_that_cannot_sign_are_refused_when_configured(key: str, algorithm: str,
                                                           says: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        check_signing_key(Secret(key), algorithm)
    assert says in str(caught.value)
    assert key_body(key) not in str(caught.value)
    with pytest.raises(ConfigurationError):
        PreRegisteredClient(client_id="c", private_key=Secret(key), signing_algorithm=algorithm)


def test_a_key_comes_with_its_algorithm() -> None:
    with pytest.raises(ConfigurationError):
        PreRegisteredClient(client_id="c", private_key=Secret(pem(EC_P256)))
    with pytest.raises(ConfigurationError):
        PreRegisteredClient(client_id="c", signing_algorithm="ES256")


def test_the_key_never_prints() -> None:
    text = pem(EC_P256)
    configured = PreRegisteredClient(client_id="c", private_key=Secret(text),
                                     signing_algorithm="ES256")
    identity = ClientIdentity(client_id="c", client_secret=None, auth_method=PRIVATE_KEY_JWT,
                              issuer=ISSUER, source=CONFIGURED, private_key=Secret(text),
                              signing_algorithm="ES256")
    auth = ServerAuth(grant=CLIENT_CREDENTIALS, client=configured)
    for thing in (configured, identity, auth):
        assert key_body(text) not in repr(thing) and key_body(text) not in str(thing)
        assert "<secret>" in repr(thing)
    # The store never keeps it: it stays in the configuration (the OAuth client puts it
    # back from there when it reads a record).
    stored = identity.to_json()
    assert key_body(text) not in str(stored)
    assert ClientIdentity.from_json(stored) == replace(identity, private_key=None,
                                                       signing_algorithm=None)


@pytest.mark.parametrize("declared, secret, key, supported, expected", [
    (None, False, True, None, PRIVATE_KEY_JWT),  # nothing else to prove with
    (None, False, True, ("client_secret_basic",), PRIVATE_KEY_JWT),
    (None, True, True, ("client_secret_basic", "private_key_jwt"), PRIVATE_KEY_JWT),
    (None, True, True, ("client_secret_basic",), BASIC),  # the server does not take keys
    (None, True, True, None, BASIC),  # RFC 8414's default when nothing is listed
    (None, True, False, ("private_key_jwt",), BASIC),
    (None, False, False, ("private_key_jwt",), NONE),
    (PRIVATE_KEY_JWT, True, True, None, PRIVATE_KEY_JWT),
])
def test_which_method_a_client_with_a_key_uses(declared: str | None, secret: bool, key: bool,
                                               supported: tuple[str, ...] | None,
                                               expected: str) -> None:
    assert token_auth_method(declared, secret, supported, ISSUER, has_key=key) == expected


def test_declared_private_key_jwt_without_a_key_is_refused() -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        token_auth_method(PRIVATE_KEY_JWT, True, None, ISSUER, has_key=False)
    assert caught.value.reason == "no_private_key"


def test_client_authentication_sends_the_assertion_and_no_secret() -> None:
    identity = ClientIdentity(client_id="c", client_secret=Secret("unused-secret"),
                              auth_method=PRIVATE_KEY_JWT, issuer=ISSUER, source=CONFIGURED,
                              private_key=Secret(pem(EC_P256)), signing_algorithm="ES256")
    headers, fields = client_authentication(identity, ISSUER, now=NOW)
    assert headers == {}
    assert set(fields) == {"client_id", "client_assertion_type", "client_assertion"}
    assert fields["client_assertion_type"] == ASSERTION_TYPE
    claims = verify(fields["client_assertion"], EC_P256, "ES256").claims
    assert claims["aud"] == ISSUER and claims["iat"] == int(NOW)
    with pytest.raises(AuthorizationFailed):  # bound to its issuer: nothing signed for another
        client_authentication(identity, "https://other.example.com", now=NOW)


def test_the_client_credentials_grant_with_private_key_jwt(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    text = pem(EC_P256)

    async def main() -> None:
        clock = Clock(NOW)
        methods = {"token_endpoint_auth_methods_supported": ["private_key_jwt"]}
        async with FakeAuthServer(metadata_overrides=methods) as fake:
            server = fake.server_url()
            auth = ServerAuth(grant=CLIENT_CREDENTIALS, client=PreRegisteredClient(
                client_id="machine", private_key=Secret(text), signing_algorithm="ES256"))
            async with OAuthClient(settings=ClientSettings(), clock=clock,
                                   servers={server: auth}) as oauth:
                first = await oauth.on_challenge(server, 401, fake.challenge(scope="read"))
                [request] = fake.token_requests
                assert request.authorization is None
                assert request.form["grant_type"] == "client_credentials"
                assert request.form["client_id"] == "machine"
                assert request.form["client_assertion_type"] == ASSERTION_TYPE
                assert "client_secret" not in request.form
                claims = verify(request.form["client_assertion"], EC_P256, "ES256").claims
                assert claims["iss"] == claims["sub"] == "machine"
                assert claims["aud"] == fake.issuer
                clock.now += 3600  # renewal signs a new assertion
                assert await oauth.authorization_for(server) not in (None, first)
                second = fake.token_requests[1].form["client_assertion"]
                assert verify(second, EC_P256, "ES256").claims["iat"] == int(NOW) + 3600

                fake.token_answer = (401, b'{"error": "invalid_client"}')
                clock.now += 7200
                with pytest.raises(AuthorizationFailed) as caught:
                    await oauth.on_challenge(server, 401, fake.challenge())
                refused = str(caught.value)
                assert "invalid_client" in refused
                assert key_body(text) not in refused and second not in refused
                assert key_body(text) not in repr(oauth.__dict__)
        assert key_body(text) not in caplog.text
        assert not any(r.form["client_assertion"] in caplog.text for r in fake.token_requests
                       if "client_assertion" in r.form)

    run(main())
