"""WWW-Authenticate parsing: the grammar's corners and the Bearer parameters."""

from __future__ import annotations

import pytest

from trunkline.auth.challenge import (
    BearerChallenge,
    MalformedChallenge,
    bearer_challenge,
    parse_challenges,
)


def test_bearer_with_resource_metadata_and_scope() -> None:
    got = bearer_challenge('Bearer resource_metadata="https://mcp.example.com/.well-known/'
                           'oauth-protected-resource", scope="files:read files:write"')
    assert got == BearerChallenge(
        resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource",
        scope=("files:read", "files:write"))
    assert not got.insufficient_scope


def test_scheme_and_parameter_names_are_case_insensitive_values_are_not() -> None:
    got = bearer_challenge('bEaReR SCOPE="Files:Read", Error=insufficient_scope')
    assert got is not None
    assert got.scope == ("Files:Read",)
    assert got.error == "insufficient_scope" and got.insufficient_scope


def test_quoted_strings_hold_commas_equals_and_escaped_quotes() -> None:
    [challenge] = parse_challenges(
        r'Bearer error_description="a, b=c \"quoted\" \\ end", realm=plain')
    assert challenge.params == {"error_description": 'a, b=c "quoted" \\ end', "realm": "plain"}


def test_several_challenges_and_the_first_bearer_wins() -> None:
    header = ('Basic realm="legacy", DPoP algs="ES256 PS256", '
              'Bearer scope="a", resource_metadata="https://x/prm", Bearer scope="b"')
    schemes = [c.scheme for c in parse_challenges(header)]
    assert schemes == ["basic", "dpop", "bearer", "bearer"]
    got = bearer_challenge(header)
    assert got is not None and got.scope == ("a",) and got.resource_metadata == "https://x/prm"


def test_token68_challenge_then_a_bearer_one() -> None:
    challenges = parse_challenges("Negotiate dXNlcjpwYXNz==, Bearer scope=read")
    assert challenges[0].token68 == "dXNlcjpwYXNz==" and challenges[0].params == {}
    assert challenges[1].scheme == "bearer" and challenges[1].params == {"scope": "read"}


def test_spaces_around_equals_and_empty_list_elements() -> None:
    got = bearer_challenge('Bearer ,, scope = "x y" ,resource_metadata= "https://h/m" ,')
    assert got == BearerChallenge(resource_metadata="https://h/m", scope=("x", "y"))


def test_a_parameter_given_twice_keeps_its_first_value() -> None:
    got = bearer_challenge('Bearer scope="first", scope="second"')
    assert got is not None and got.scope == ("first",)


def test_empty_scope_is_an_empty_list_and_absent_scope_is_none() -> None:
    assert bearer_challenge('Bearer scope=""') == BearerChallenge(scope=())
    assert bearer_challenge('Bearer error="invalid_token"') == BearerChallenge(
        error="invalid_token")


@pytest.mark.parametrize("header", [None, "", "Basic realm=x", "Negotiate abc=="])
def test_no_bearer_challenge(header: str | None) -> None:
    assert bearer_challenge(header) is None


@pytest.mark.parametrize("header", [
    'Bearer scope="unterminated',
    'scope="x" Bearer',
    "Bearer realm=x, =y",
    "Bearer @",
])
def test_malformed_headers_raise_and_read_as_no_challenge(header: str) -> None:
    with pytest.raises(MalformedChallenge):
        parse_challenges(header)
    assert bearer_challenge(header) is None


def test_a_lone_token_after_the_scheme_is_a_token68_not_a_parameter() -> None:
    # ``Bearer scope=`` is grammatical: a token68 (which may end in "="), no parameters.
    [challenge] = parse_challenges("Bearer scope=")
    assert challenge.token68 == "scope=" and challenge.params == {}
    assert bearer_challenge("Bearer scope=") == BearerChallenge()
