"""The gateway's API keys (``gateway.api_keys``): a file of bare keys or of named keys with
attributes, ``TRUNKLINE_API_KEYS``, each key's identity, and what is refused (naming the
entry, never the key)."""

from __future__ import annotations

import json

import pytest

from trunkline.errors import ConfigurationError
from trunkline.gateway.api_keys import ApiKeys, read_api_keys
from trunkline.policy import Identity

NAMED = {"keys": [
    {"name": "ci-bot", "key": "ci-bot-secret-0123456789", "groups": ["ci"],
     "scopes": ["deploy"], "attributes": {"team": "platform"}},
    {"name": "reader", "key": "reader-secret-0123456789"}]}


def test_named_keys_give_their_identities(tmp_path):
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(NAMED))
    keys = read_api_keys(str(path), env={"TRUNKLINE_API_KEYS": "env-secret-a, env-secret-b"})
    ci = keys.identity_of("Bearer ci-bot-secret-0123456789")
    assert ci == Identity.api_key("ci-bot", groups=["ci"], scopes=["deploy"],
                                  attributes={"team": "platform"})
    assert keys.identity_of("Bearer reader-secret-0123456789").subject == "reader"
    assert keys.identity_of("Bearer env-secret-b") == Identity.api_key("env-2")
    for wrong in (None, "", "Basic x", "Bearer ", "Bearer ci-bot-secret-012345678",
                  "Bearer ci-bot-secret-01234567890", "bearer ci-bot-secret-0123456789x"):
        assert keys.identity_of(wrong) is None, wrong


def test_a_file_of_bare_keys_names_them_by_line(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text("first-key\n\n  second-key  \n")
    keys = read_api_keys(str(path), env={})
    assert keys.identity_of("Bearer second-key") == Identity.api_key("key-2")
    assert keys.identity_of("Bearer first-key").subject == "key-1"
    assert not read_api_keys(None, env={})


@pytest.mark.parametrize("document, said", [
    ({"key": []}, 'expected {"keys": [...]}'),
    ({"keys": [{"name": "a"}]}, "key 1 ('a'): \"key\" is a string of at least 16"),
    ({"keys": [{"key": "k" * 20}]}, "key 1: \"name\" is a non-empty string"),
    ({"keys": [{"name": "a", "key": "k" * 20, "groups": "ops"}]}, "\"groups\" is a list"),
    ({"keys": [{"name": "a", "key": "k" * 20, "attributes": {"n": 1}}]},
     "\"attributes\" is an object of strings"),
    ({"keys": [{"name": "a", "key": "k" * 20, "secret": "x"}]}, "an object with the fields"),
    ({"keys": [{"name": "a", "key": "k" * 20}, {"name": "a", "key": "j" * 20}]},
     "two API keys are named 'a'"),
    ({"keys": [{"name": "a", "key": "k" * 20}, {"name": "b", "key": "k" * 20}]},
     "API key 'b' is another key's value again"),
])
def test_a_bad_key_file_is_refused_naming_the_entry_never_the_key(tmp_path, document, said):
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ConfigurationError) as refused:
        read_api_keys(str(path), env={})
    assert said in str(refused.value)
    assert "k" * 20 not in str(refused.value) and "j" * 20 not in str(refused.value)


def test_an_unreadable_or_broken_file(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read the API keys"):
        read_api_keys(str(tmp_path / "missing"), env={})
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        read_api_keys(str(tmp_path / "broken.json"), env={})


def test_many_keys_are_one_lookup_each():
    keys = ApiKeys.unnamed(f"secret-number-{n:06d}".encode() for n in range(5000))
    assert keys.identity_of("Bearer secret-number-004999").subject == "key-5000"
    assert keys.identity_of("Bearer secret-number-005000") is None
