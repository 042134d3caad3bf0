"""DPoP proofs, keys and nonces (``trunkline.auth.dpop``): what a proof carries, and when a
nonce refusal is worth one more attempt."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from joserfc import jwk, jwt
from joserfc.jws import JWSRegistry

from trunkline.auth.dpop import (
    DpopKey,
    DpopSigner,
    NonceBook,
    access_token_hash,
    choose_algorithm,
    generate_key,
    token_endpoint_wants_nonce,
)
from trunkline.auth.secret import Secret
from trunkline.errors import ConfigurationError

NOW = 1_800_000_000.0


def verified(proof: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The proof's header and claims, its signature checked with the key it carries."""
    encoded = proof.split(".")[0]
    header = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
    key = jwk.import_key(header["jwk"])
    # An RSA key's proof header is larger than joserfc's default bound on what it reads;
    # the "jwk" and "typ" header parameters are the proof's own (RFC 9449 §4.2).
    registry = JWSRegistry(algorithms=[header["alg"]], strict_check_header=False)
    registry.max_header_length = 4096
    token = jwt.decode(proof, key, algorithms=[header["alg"]], registry=registry)
    return dict(token.header), dict(token.claims)


@pytest.mark.parametrize("algorithm", ["ES256", "ES384", "PS256"])
def test_a_proof_carries_the_public_key_and_the_request_it_is_for(algorithm: str) -> None:
    key = DpopKey(generate_key(algorithm))
    proof = key.proof("post", "https://as.example/token?x=1#frag", now=NOW)
    header, claims = verified(proof)
    assert header["typ"] == "dpop+jwt" and header["alg"] == algorithm
    assert "d" not in header["jwk"] and "p" not in header["jwk"]  # never the private key
    assert claims["htm"] == "POST" and claims["htu"] == "https://as.example/token"
    assert claims["iat"] == int(NOW) and len(claims["jti"]) >= 22
    assert "ath" not in claims and "nonce" not in claims
    assert jwk.import_key(header["jwk"]).thumbprint() == key.thumbprint


def test_each_proof_is_fresh_and_binds_the_token_and_the_nonce() -> None:
    key = DpopKey(generate_key("ES256"))
    first = key.proof("POST", "https://rs.example/mcp", now=NOW, access_token="tok",
                      nonce="n-1")
    second = key.proof("POST", "https://rs.example/mcp", now=NOW, access_token="tok",
                       nonce="n-1")
    (_, a), (_, b) = verified(first), verified(second)
    assert a["jti"] != b["jti"]
    assert a["ath"] == access_token_hash("tok") and a["nonce"] == "n-1"


def test_ath_is_the_rfc_9449_example() -> None:
    # RFC 9449 §7.1: the access token and the ath its proof carries.
    token = "Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"
    assert access_token_hash(token) == "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"


def test_the_algorithm_is_one_the_authorization_server_accepts() -> None:
    assert choose_algorithm(None) == "ES256"
    assert choose_algorithm(("RS256", "ES384")) == "ES384"
    assert choose_algorithm(("RS256",)) == "RS256"
    assert choose_algorithm(("HS256", "none")) is None


def test_a_bad_key_is_a_clear_error_that_never_shows_it() -> None:
    with pytest.raises(ConfigurationError, match="not a JSON Web Key"):
        DpopKey(Secret("not json, secret-material"))
    public = dict(json.loads(generate_key("ES256").reveal()))
    public.pop("d")
    with pytest.raises(ConfigurationError, match="public key") as caught:
        DpopKey(Secret(json.dumps(public)))
    assert public["x"] not in str(caught.value)
    with pytest.raises(ConfigurationError, match="'HS256'"):
        DpopKey(Secret(json.dumps({**public, "alg": "HS256"})))
    with pytest.raises(ConfigurationError):
        generate_key("none")
    key = DpopKey(generate_key("ES256"))
    assert json.loads(key.secret.reveal())["d"] not in repr(key)


def test_a_nonce_refusal_goes_once_more_only_with_a_new_nonce() -> None:
    book = NonceBook()
    assert book.retry(True, None, "n-1") and book.nonce == "n-1"
    assert not book.retry(True, "n-1", "n-1")  # the same nonce refused: the server's no
    assert book.retry(True, "n-1", "n-2") and book.nonce == "n-2"
    assert not book.retry(False, "n-2", "n-3") and book.nonce == "n-3"  # kept for next time
    assert not book.retry(True, "n-3", None)


def test_the_token_endpoint_asks_for_a_nonce_with_a_400_use_dpop_nonce() -> None:
    assert token_endpoint_wants_nonce(400, b'{"error":"use_dpop_nonce"}')
    assert not token_endpoint_wants_nonce(400, b'{"error":"invalid_grant"}')
    assert not token_endpoint_wants_nonce(401, b'{"error":"use_dpop_nonce"}')
    assert not token_endpoint_wants_nonce(400, b"<html>")


def test_the_signer_retries_a_resource_servers_nonce_challenge_once() -> None:
    signer = DpopSigner(generate_key("ES256"))
    proof, sent = signer.proof("POST", "https://rs.example/mcp", "DPoP tok", now=NOW)
    _, claims = verified(proof)
    assert sent is None and claims["ath"] == access_token_hash("tok")
    challenge = 'DPoP error="use_dpop_nonce", resource_metadata="https://rs.example/prm"'
    assert signer.retry(401, challenge, "n-1", sent)
    proof, sent = signer.proof("POST", "https://rs.example/mcp", "DPoP tok", now=NOW)
    assert sent == "n-1" and verified(proof)[1]["nonce"] == "n-1"
    assert not signer.retry(401, challenge, "n-1", sent)  # refused with the nonce it gave
    assert not signer.retry(401, 'DPoP error="invalid_token"', "n-2", sent)
    assert signer.nonces.nonce == "n-2"  # a nonce on any answer is the one to use next
    assert not signer.retry(200, None, None, "n-2")
