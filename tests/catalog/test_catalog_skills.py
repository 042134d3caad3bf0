"""catalog/skills.py: the skills of several servers under names no two share."""

from __future__ import annotations

import hashlib

from trunkline.catalog.names import is_model_safe
from trunkline.catalog.skills import skill_names
from trunkline.protocol.skills import SkillEntry, entry


def skill(server: str, path: str) -> SkillEntry:
    uri = f"skill://{path}/SKILL.md"
    return entry(server, {"uri": uri, "frontmatter": {
        "name": path.rsplit("/", 1)[-1], "description": "d"}, "resources": [
        {"uri": uri, "digest": "sha256:" + hashlib.sha256(b"").hexdigest(), "size": 0}]})


def names(listings: list[tuple[str, list[SkillEntry]]], **kw: bool) -> list[tuple[str, str]]:
    return [(e.server, e.name) for e in skill_names(listings, **kw)]


def test_an_uncontested_path_keeps_its_name_and_a_contested_one_is_prefixed_everywhere() -> None:
    got = names([("a", [skill("a", "refunds"), skill("a", "git-workflow")]),
                 ("b", [skill("b", "refunds")])])
    assert got == [("a", "git-workflow"), ("a", "a_refunds"), ("b", "b_refunds")]
    # the names depend on the set, never on the configured order
    assert sorted(names([("b", [skill("b", "refunds")]),
                         ("a", [skill("a", "git-workflow"), skill("a", "refunds")])])) == \
        sorted(got)


def test_every_name_is_model_safe_and_unique() -> None:
    listed = [skill("a", "acme/billing/refunds"), skill("a", "acme/support/refunds"),
              skill("a", "acme_billing_refunds")]
    got = skill_names([("a", listed), ("b", [skill("b", "acme/billing/refunds")])])
    assert all(is_model_safe(e.name) for e in got)
    assert len({e.name for e in got}) == len(got) == 4


def test_a_prefixed_key_that_is_another_skills_path_names_every_skill_by_server() -> None:
    # server "acme"'s contested "refunds" would be keyed "acme/refunds", which is server
    # c's own path: nobody is left out, every skill is named with its server.
    got = names([("acme", [skill("acme", "refunds")]), ("b", [skill("b", "refunds")]),
                 ("c", [skill("c", "acme/refunds")])])
    assert len({n for _, n in got}) == 3
    assert all(name.startswith(f"{server}_") for server, name in got)


def test_prefix_all_names_every_skill_with_its_server() -> None:
    assert names([("a", [skill("a", "git-workflow")])], prefix_all=True) == [
        ("a", "a_git-workflow")]
