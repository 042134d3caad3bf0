"""The authorization policy's pure layer (``trunkline.policy``): the document's rules
as data, the decisions for identities and items, and properties over random catalogs,
identities and rule sets (hypothesis). No process, no I/O."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trunkline.policy import LOCAL, Access, Identity, IdentityRefused, Item, Policy, PolicyError
from trunkline.policy.decisions import Allowed, Denied
from trunkline.policy.identity import MAX_VALUES, ClaimNames, from_claims

EXAMPLE = {"rules": [
    {"id": "support-tickets", "allow": ["list", "call"], "servers": ["tickets"],
     "when": "'support' in identity.groups"},
    {"id": "read-only", "allow": ["list", "call"], "tools": ["*"],
     "annotations": {"readOnlyHint": True}},
    {"id": "delete-needs-admin", "deny": ["call"], "tools": ["*/delete_*"],
     "when": "!('admin' in identity.scopes)"},
    {"id": "fs-list", "allow": ["list"], "servers": ["fs"]},
    {"id": "fs-tmp-only", "allow": ["call"], "tools": ["fs/write_file"],
     "arguments": "arguments.path.startsWith('/tmp/')"},
    {"id": "ci-lists", "allow": ["list"], "tools": ["*"],
     "when": "identity.kind == 'api_key' && identity.subject == 'ci-bot'"},
]}

ALICE = Identity.user("alice", groups=["support"])
ROOT = Identity.user("root", groups=["support"], scopes=["admin"])
BOB = Identity.user("bob")
CI = Identity.api_key("ci-bot")

CREATE = Item("tool", "tickets", "create_ticket")
DELETE = Item("tool", "tickets", "delete_ticket")
QUERY = Item("tool", "db", "query", {"readOnlyHint": True})
DROP = Item("tool", "db", "drop_table", {"destructiveHint": True})
WRITE = Item("tool", "fs", "write_file")


def decided(access, identity, item, arguments=None):
    decision = access.may_call(identity, item, arguments)
    return (access.may_list(identity, item), type(decision).__name__,
            decision.rule, getattr(decision, "hidden", False))


def test_each_identity_gets_what_the_rules_grant():
    access = Access(Policy.compile(EXAMPLE))
    assert decided(access, ALICE, CREATE) == (True, "Allowed", "support-tickets", False)
    assert decided(access, ALICE, DELETE) == (True, "Denied", "delete-needs-admin", False)
    assert decided(access, ROOT, DELETE) == (True, "Allowed", "support-tickets", False)
    assert decided(access, BOB, CREATE) == (False, "Denied", None, True)
    assert decided(access, BOB, QUERY) == (True, "Allowed", "read-only", False)
    assert decided(access, BOB, DROP) == (False, "Denied", None, True)
    # Listed by one rule, callable by another only for some arguments.
    assert decided(access, BOB, WRITE, {"path": "/tmp/x"}) == (True, "Allowed",
                                                                "fs-tmp-only", False)
    assert decided(access, BOB, WRITE, {"path": "/etc/passwd"}) == (True, "Denied", None,
                                                                     False)
    assert decided(access, BOB, WRITE, {}) == (True, "Denied", None, False)
    # An API key that may list everything and call nothing it is not granted.
    assert decided(access, CI, DROP) == (True, "Denied", None, False)
    assert decided(access, CI, QUERY) == (True, "Allowed", "read-only", False)
    assert decided(access, LOCAL, CREATE)[0] is False


def test_no_policy_or_no_rules_lets_everything_through():
    for access in (Access(None), Access(Policy.compile({"rules": []}))):
        assert not access.active
        assert access.may_call(BOB, DROP) == Allowed(None) and access.may_list(BOB, DROP)
        items = [CREATE, DROP]
        assert access.visible(BOB, "tool", items, lambda i: i) is items


def test_a_deny_wins_whatever_the_order():
    rules = [{"id": "all", "allow": ["list", "call"]},
             {"id": "no-drop", "deny": ["call"], "tools": ["drop_*"]}]
    for ordered in (rules, rules[::-1]):
        access = Access(Policy.compile({"rules": ordered}))
        assert access.may_call(BOB, DROP) == Denied("no-drop")
        assert access.may_list(BOB, DROP)


def test_a_condition_that_fails_never_grants(caplog):
    # identity.attributes has no "team": a failing condition; an allow does not match,
    # a deny does.
    allow = Access(Policy.compile({"rules": [
        {"id": "team", "allow": ["list", "call"], "when": "identity.attributes.team == 'x'"}]}))
    with caplog.at_level(logging.WARNING, "trunkline.policy"):
        assert not allow.may_list(BOB, QUERY)
    assert "'team'" in caplog.text and "not matching (an allow)" in caplog.text
    deny = Access(Policy.compile({"rules": [
        {"id": "all", "allow": ["list", "call"]},
        {"id": "team", "deny": ["call"], "when": "identity.attributes.team != 'x'"}]}))
    assert deny.may_call(BOB, QUERY) == Denied("team")
    # A non-boolean is a failure too.
    odd = Access(Policy.compile({"rules": [{"id": "n", "allow": ["list"], "when": "1 + 1"}]}))
    assert not odd.may_list(BOB, QUERY)


def test_prompts_and_resources_by_their_own_globs():
    access = Access(Policy.compile({"rules": [
        {"id": "docs", "allow": ["list", "call"], "resources": ["file:///docs/*"]},
        {"id": "greet", "allow": ["list"], "prompts": ["*/greet*"]}]}))
    assert access.may_list(BOB, Item("resource", "fs", "file:///docs/a/b.md"))
    assert not access.may_list(BOB, Item("resource", "fs", "file:///etc/passwd"))
    assert access.may_list(BOB, Item("prompt", "p", "greeting"))
    assert access.may_call(BOB, Item("prompt", "p", "greeting")) == Denied(None)
    # A rule about resources says nothing of tools.
    assert not access.may_list(BOB, Item("tool", "fs", "file:///docs/x"))


def test_decisions_are_cached_per_identity_and_forgotten():
    access = Access(Policy.compile(EXAMPLE), max_views=2)
    access.may_call(ALICE, CREATE)
    view = access.view(ALICE)
    assert ("tool", "tickets", "create_ticket") in view.verdicts
    access.view(BOB)
    access.view(ROOT)  # the least recently used (ALICE) goes
    assert access.identities == 2 and access.view(ALICE) is not view
    access.forget()
    assert access.identities == 0


def test_visible_is_one_tuple_per_distinct_set():
    access = Access(Policy.compile(EXAMPLE))
    items = [CREATE, DELETE, QUERY, DROP, WRITE]
    seen_by_alice = access.visible(ALICE, "tool", items, lambda i: i)
    seen_by_root = access.visible(ROOT, "tool", items, lambda i: i)
    assert list(seen_by_alice) == [CREATE, DELETE, QUERY, WRITE]
    assert seen_by_alice is seen_by_root  # the same set: shared
    assert list(access.visible(BOB, "tool", items, lambda i: i)) == [QUERY, WRITE]


def test_a_replaced_policy_decides_from_then_on():
    access = Access(Policy.compile(EXAMPLE))
    assert not access.may_list(BOB, CREATE)
    access.replace(Policy.compile({"rules": [{"id": "open", "allow": ["list", "call"]}]}))
    assert access.may_call(BOB, CREATE) == Allowed("open")


# --- the document ------------------------------------------------------------------------

@pytest.mark.parametrize("document, said", [
    ([], "a policy is an object"),
    ({"rules": {}}, '"rules" is a list'),
    ({"rule": []}, "unknown policy field 'rule'"),
    ({"rules": [{"allow": ["list"]}]}, 'rule 1 has no "id"'),
    ({"rules": [{"id": "a", "allow": ["list"]}, {"id": "a", "deny": ["call"]}]},
     "rule 'a': a second rule with this id"),
    ({"rules": [{"id": "a"}]}, "exactly one of \"allow\" and \"deny\""),
    ({"rules": [{"id": "a", "allow": ["list"], "deny": ["call"]}]}, "exactly one"),
    ({"rules": [{"id": "a", "allow": ["read"]}]}, "each one of ['list', 'call']"),
    ({"rules": [{"id": "a", "allow": ["list"], "tool": ["x"]}]}, "unknown field 'tool'"),
    ({"rules": [{"id": "a", "allow": ["list"], "when": "1 +"}]},
     "rule 'a': \"when\" does not compile"),
    ({"rules": [{"id": "a", "allow": ["list"], "when": "arguments.x == 1"}]},
     "reads 'arguments'"),
    ({"rules": [{"id": "a", "allow": ["list", "call"], "tools": ["x"],
                 "arguments": "arguments.x == 1"}]}, "decides calls only"),
    ({"rules": [{"id": "a", "allow": ["list"], "tools": ["s/x", "y"]}]}, "mixes server/name"),
    ({"rules": [{"id": "a", "allow": ["list"], "annotations": {"readOnlyHint": 1}}]},
     "\"annotations\" is an object of booleans"),
    ({"rules": [], "claims": {"group": "g"}}, "\"claims\" names the claims"),
])
def test_a_policy_that_does_not_compile_names_the_rule_and_why(document, said):
    with pytest.raises(PolicyError) as raised:
        Policy.compile(document)
    assert said in str(raised.value)


def test_what_could_never_match_is_a_warning():
    policy = Policy.compile({"rules": [
        {"id": "ghost", "allow": ["list"], "servers": ["nowhere"]},
        {"id": "never", "allow": ["list"], "when": "1 == 2"},
        {"id": "hints", "allow": ["list"], "prompts": ["*"],
         "annotations": {"readOnlyHint": True}},
        {"id": "fine", "allow": ["list"], "servers": ["db"]}]})
    said = policy.warnings(["db", "fs"])
    assert len(said) == 3
    assert any("'ghost' names no configured server" in w for w in said)
    assert any("'never': '1 == 2' is always false" in w for w in said)
    assert any("'hints' requires tool annotations" in w for w in said)


def test_a_policy_file_that_cannot_be_read(tmp_path):
    with pytest.raises(PolicyError, match="cannot read the policy"):
        Policy.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PolicyError, match="not JSON"):
        Policy.load(bad)
    good = tmp_path / "good.json"
    good.write_bytes(b'{"rules": [{"id": "a", "allow": "list"}]}')
    assert Policy.load(good).digest == Policy.load(good).digest != ""


# --- identities from claims -------------------------------------------------------------

def test_claims_make_the_identity_and_a_wrong_one_refuses_the_token():
    base = {"iss": "I", "sub": "s", "scope": "a b", "groups": ["g"], "azp": "app",
            "email": "s@example.com", "realm_access": {"roles": ["r"]}}
    got = from_claims(base, ClaimNames(roles="realm_access.roles"))
    assert (got.kind, got.issuer, got.subject) == ("oauth", "I", "s")
    assert got.scopes == {"a", "b"} and got.groups == {"g"} and got.roles == {"r"}
    assert got.client_id == "app" and got.email == "s@example.com"
    for changed, said in [({"groups": 42}, "groups claim is not a list of strings"),
                          ({"groups": ["a", 1]}, "groups claim is not a list"),
                          ({"groups": [str(i) for i in range(MAX_VALUES + 1)]},
                           f"{MAX_VALUES + 1} values; at most {MAX_VALUES}"),
                          ({"groups": ["x" * 300]}, "longer than 256"),
                          ({"email": ["a"]}, "email claim is not a string"),
                          ({"azp": 7}, "client_id (or azp) claim is not a string"),
                          ({"scp": {"a": 1}, "scope": None}, "claim is not a list")]:
        claims = {k: v for k, v in {**base, **changed}.items() if v is not None}
        with pytest.raises(IdentityRefused, match=said.replace("(", r"\(").replace(")", r"\)")):
            from_claims(claims)
    # A claim's value never appears in the message.
    with pytest.raises(IdentityRefused) as raised:
        from_claims({**base, "groups": {"secret-value": 1}})
    assert "secret-value" not in str(raised.value)


def test_identities_are_values():
    assert Identity.user("a", groups=["x", "y"]) == Identity.user("a", groups=["y", "x"])
    assert hash(Identity.user("a", groups=["x"])) == hash(Identity.user("a", groups=["x"]))
    assert Identity.user("a") != Identity.user("a", scopes=["admin"])
    assert repr(Identity.api_key("ci", attributes={"team": "t"})) == "Identity(api_key:ci)"
    with pytest.raises(ValueError):
        Identity.user("")


# --- properties ---------------------------------------------------------------------------

SERVERS = ["a", "b", "c"]
NAMES = ["read", "write", "delete_x", "list", "get"]
GROUPS = ["g1", "g2", "g3"]

tools = st.builds(lambda s, n, ro: Item("tool", s, n, {"readOnlyHint": ro}),
                  st.sampled_from(SERVERS), st.sampled_from(NAMES), st.booleans())
identities = st.builds(lambda s, g, sc: Identity.user(s, groups=g, scopes=sc),
                       st.sampled_from(["u1", "u2"]),
                       st.lists(st.sampled_from(GROUPS), max_size=3),
                       st.lists(st.sampled_from(["admin", "read"]), max_size=2))


@st.composite
def rules(draw, index):
    rule = {"id": f"r{index}",
            draw(st.sampled_from(["allow", "deny"])): draw(
                st.lists(st.sampled_from(["list", "call"]), min_size=1, max_size=2,
                         unique=True))}
    if draw(st.booleans()):
        rule["servers"] = draw(st.lists(st.sampled_from(SERVERS), min_size=1, max_size=2))
    if draw(st.booleans()):
        rule["tools"] = draw(st.lists(st.sampled_from(["read", "delete_*", "*e*", "*"]),
                                      min_size=1, max_size=2))
    if draw(st.booleans()):
        rule["annotations"] = {"readOnlyHint": draw(st.booleans())}
    if draw(st.booleans()):
        rule["when"] = draw(st.sampled_from([
            "'g1' in identity.groups", "'admin' in identity.scopes",
            "identity.subject == 'u2'", "item.server == 'a'", "item.name.startsWith('d')"]))
    return rule


policies = st.integers(1, 8).flatmap(
    lambda n: st.tuples(*(rules(i) for i in range(n)))).map(
    lambda drawn: {"rules": list(drawn)})


@settings(max_examples=300, deadline=None)
@given(policies, st.lists(tools, min_size=1, max_size=12, unique_by=lambda t: (t.server,
                                                                                t.name)),
       identities, st.randoms(use_true_random=False))
def test_nothing_callable_is_unlisted_and_order_decides_nothing(document, items, who, rng):
    access = Access(Policy.compile(document))
    listed = {(i.server, i.name) for i in access.visible(who, "tool", items, lambda x: x)}
    callable_ = {(i.server, i.name) for i in items
                 if isinstance(access.may_call(who, i), Allowed)}
    assert callable_ <= listed
    # Shuffled items and shuffled rules: the same decisions.
    shuffled = list(items)
    rng.shuffle(shuffled)
    reordered = dict(document, rules=rng.sample(document["rules"], len(document["rules"])))
    again = Access(Policy.compile(reordered))
    assert {(i.server, i.name) for i in again.visible(who, "tool", shuffled,
                                                      lambda x: x)} == listed
    for item in items:
        first, second = access.may_call(who, item), again.may_call(who, item)
        assert type(first) is type(second)
        if isinstance(first, Denied) and first.rule is not None:
            # The deny named is a matching one either way (which one, when two match,
            # may differ): both deny, for a rule.
            assert second.rule is not None


@settings(max_examples=200, deadline=None)
@given(policies, tools, identities)
def test_a_cached_decision_is_the_fresh_one(document, item, who):
    policy = Policy.compile(document)
    warm = Access(policy)
    warm.may_call(who, item)
    assert warm.may_call(who, item) == Access(policy).may_call(who, item)
    assert warm.may_list(who, item) == Access(policy).may_list(who, item)


def test_macros_bind_their_own_variables_and_a_misspelt_field_is_warned():
    policy = Policy.compile({"rules": [
        {"id": "eng", "allow": ["list"], "when": "identity.groups.exists(g, g.startsWith('eng-'))"},
        {"id": "typo", "allow": ["list"], "when": "'x' in identity.group"},
        {"id": "item-typo", "deny": ["call"], "when": "item.nmae == 'x'"},
        {"id": "attribute", "allow": ["list"], "when": "identity.attributes.team == 'x'"}]})
    access = Access(policy)
    assert access.may_list(Identity.user("e", groups=["eng-core"]), QUERY)
    assert not access.may_list(Identity.user("o", groups=["ops"]), QUERY)
    said = policy.warnings([])
    assert len(said) == 2  # an attribute a key may or may not have is no typo
    assert "(identity.group)" in said[0] and "counts as not matching" in said[0]
    assert "(item.nmae)" in said[1] and "counts as matching" in said[1]
    # A name that is neither bound nor known is still refused.
    with pytest.raises(PolicyError, match="reads 'user'"):
        Policy.compile({"rules": [{"id": "u", "allow": ["list"], "when": "user.x == 1"}]})


def test_without_a_policy_no_token_is_refused_for_a_claim_nothing_reads():
    claims = {"iss": "I", "sub": "s", "scope": "a b", "groups": list(map(str, range(900))),
              "email": ["not", "a", "string"], "azp": "app"}
    got = from_claims(claims, None)
    assert (got.subject, got.scopes, got.groups, got.client_id) == ("s", {"a", "b"},
                                                                    frozenset(), "app")
    with pytest.raises(IdentityRefused):
        from_claims(claims, ClaimNames())
