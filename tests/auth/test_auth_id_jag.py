"""Enterprise-managed authorization's token exchange (``trunkline.auth.id_jag``): the
request's shape and which answers carry an ID-JAG."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trunkline.auth.id_jag import ID_JAG_TYPE, parse_id_jag, token_exchange_form
from trunkline.auth.secret import Secret
from trunkline.errors import AuthorizationFailed

ENDPOINT = "https://idp.example/token"


def test_the_exchange_asks_for_an_id_jag_for_the_servers_authorization_server() -> None:
    form = token_exchange_form(Secret("id-token"), audience="https://as.example",
                               resource="https://mcp.example/mcp", scope=("a", "b"))
    assert form == {"grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                    "requested_token_type": ID_JAG_TYPE, "subject_token": "id-token",
                    "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                    "audience": "https://as.example", "resource": "https://mcp.example/mcp",
                    "scope": "a b"}
    assert "scope" not in token_exchange_form(Secret("t"), audience="a", resource="r",
                                              scope=None)


def parse(status: int, doc: Any) -> Secret:
    body = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return parse_id_jag(status, body, endpoint=ENDPOINT, issuer="https://idp.example")


def test_an_id_jag_answer_is_used() -> None:
    grant = parse(200, {"access_token": "jag", "issued_token_type": ID_JAG_TYPE,
                        "token_type": "N_A"})
    assert grant.reveal() == "jag"


@pytest.mark.parametrize("status, doc, reason, says", [
    (400, {"error": "invalid_grant", "error_description": "bad id token"}, "token_refused",
     "invalid_grant"),
    (502, b"<html>leak</html>", "token_endpoint_failed", "HTTP 502"),
    (200, b"leak", "malformed_response", "other than a JSON object"),
    (200, {"access_token": "leak",
           "issued_token_type": "urn:ietf:params:oauth:token-type:access_token"},
     "malformed_response", "not an ID-JAG"),
    (200, {"issued_token_type": ID_JAG_TYPE}, "malformed_response", "without the ID-JAG"),
])
def test_anything_else_is_refused_without_quoting_the_token(status: int, doc: Any,
                                                            reason: str, says: str) -> None:
    with pytest.raises(AuthorizationFailed) as caught:
        parse(status, doc)
    assert caught.value.reason == reason and says in caught.value.message
    assert "leak" not in str(caught.value) and ENDPOINT in caught.value.message
