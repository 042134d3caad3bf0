"""protocol/skills.py: skill entries (SEP-2640) and the checks of what is read for them,
event by event, with no server."""

from __future__ import annotations

import base64
import hashlib

import pytest

from trunkline.protocol import skills as rules

SKILL_MD = (b"---\nname: pdf-processing\ndescription: Extract, fill, and assemble PDF "
            b"documents\nlicense: Apache-2.0\nmetadata:\n  version: '2.1'\n  released: "
            b"2026-01-05\n---\n\nSkill body.\n")
FORMS = b"Supporting content.\n"


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def raw_entry(**overrides: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "uri": "skill://pdf-processing/SKILL.md",
        "frontmatter": {"name": "pdf-processing",
                        "description": "Extract, fill, and assemble PDF documents",
                        "license": "Apache-2.0",
                        "metadata": {"version": "2.1", "released": "2026-01-05"}},
        "resources": [
            {"uri": "skill://pdf-processing/SKILL.md", "digest": digest(SKILL_MD),
             "size": len(SKILL_MD)},
            {"uri": "skill://pdf-processing/references/FORMS.md", "digest": digest(FORMS),
             "size": len(FORMS)}]}
    entry.update(overrides)
    return entry


def test_an_entry_is_read_whole() -> None:
    entry = rules.entry("docs", raw_entry())
    assert entry.server == "docs" and entry.path == "pdf-processing"
    assert entry.name == "pdf-processing"
    assert [r.uri for r in entry.resources or ()] == [
        "skill://pdf-processing/SKILL.md", "skill://pdf-processing/references/FORMS.md"]
    assert entry.file_uri("references/FORMS.md") == "skill://pdf-processing/references/FORMS.md"
    assert rules.skill_path("skill://acme/billing/refunds/SKILL.md") == "acme/billing/refunds"
    assert rules.skill_root("skill://acme/billing/refunds/SKILL.md") == "skill://acme/billing/refunds"
    assert rules.entry("docs", raw_entry(resources="dynamic")).dynamic


@pytest.mark.parametrize(("overrides", "said"), [
    ({"uri": "skill://pdf-processing/README.md"}, "SKILL.md"),
    ({"frontmatter": {"name": "pdf-processing"}}, "description"),
    ({"resources": None}, "a list or 'dynamic'"),
    ({"resources": [{"uri": "skill://pdf-processing/SKILL.md", "digest": "md5:00", "size": 1}]},
     "digest"),
    ({"resources": [{"uri": "skill://pdf-processing/SKILL.md", "digest": digest(b""),
                     "size": -1}]}, "byte size"),
    ({"resources": [{"uri": "skill://other/SKILL.md", "digest": digest(b""), "size": 0}]},
     "not within the skill"),
    ({"resources": [{"uri": "skill://pdf-processing/../other/SKILL.md",
                     "digest": digest(b""), "size": 0}]}, "not within the skill"),
    ({"resources": [{"uri": "skill://pdf-processing/a.md", "digest": digest(b""), "size": 0}]},
     "do not list its SKILL.md"),
    ({"resources": [{"uri": f"skill://pdf-processing/{i}.md", "digest": digest(b""), "size": 0}
                    for i in range(513)]}, "over the limit of 512"),
])
def test_a_malformed_entry_is_refused_saying_why(overrides: dict[str, object],
                                                 said: str) -> None:
    with pytest.raises(ValueError, match=said):
        rules.entry("docs", raw_entry(**overrides))


def test_a_file_is_checked_by_size_then_digest() -> None:
    entry = rules.entry("docs", raw_entry())
    skill_md = entry.resource(entry.uri)
    assert skill_md is not None
    rules.check_file(skill_md, SKILL_MD)
    with pytest.raises(rules.SkillMismatch) as size:
        rules.check_file(skill_md, SKILL_MD + b"more")
    assert size.value.kind == "size"
    same_length = SKILL_MD.replace(b"Skill body.", b"Evil body!!")
    with pytest.raises(rules.SkillMismatch) as tampered:
        rules.check_file(skill_md, same_length)
    assert tampered.value.kind == "digest"


def test_the_frontmatter_is_compared_field_by_field() -> None:
    entry = rules.entry("docs", raw_entry())
    # A date stays the text written; a nested mapping compares whole.
    assert rules.check_frontmatter(entry, SKILL_MD)["metadata"]["released"] == "2026-01-05"
    changed = SKILL_MD.replace(b"license: Apache-2.0\n", b"license: MIT\n")
    with pytest.raises(rules.SkillMismatch, match="'license'"):
        rules.check_frontmatter(entry, changed)
    added = SKILL_MD.replace(b"license:", b"allowed-tools: Bash\nlicense:")
    with pytest.raises(rules.SkillMismatch, match="'allowed-tools'"):
        rules.check_frontmatter(entry, added)
    dropped = rules.entry("docs", raw_entry(frontmatter={
        "name": "pdf-processing", "description": "Extract, fill, and assemble PDF documents",
        "license": "Apache-2.0"}))
    with pytest.raises(rules.SkillMismatch, match="'metadata'"):
        rules.check_frontmatter(dropped, SKILL_MD)


@pytest.mark.parametrize("text", [
    b"no frontmatter at all\n",
    b"---\nname: a\nname: b\n---\n",
    b"---\nbase: &x [1, 2]\nname: *x\n---\n",
    b"---\n- a list\n---\n",
    b"---\nname: [unclosed\n---\n",
])
def test_frontmatter_that_is_not_a_strict_mapping_is_a_mismatch(text: bytes) -> None:
    entry = rules.entry("docs", raw_entry())
    with pytest.raises(rules.SkillMismatch) as failed:
        rules.check_frontmatter(entry, text)
    assert failed.value.kind == "frontmatter"


def test_json_equality_keeps_booleans_apart_from_numbers() -> None:
    assert rules.same({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert not rules.same(True, 1)
    assert not rules.same({"a": 1}, {"a": 1, "b": None})
    assert not rules.same("1", 1)


def test_content_is_the_bytes_of_the_item_for_the_uri() -> None:
    uri = "skill://pdf-processing/SKILL.md"
    assert rules.content({"contents": [{"uri": uri, "text": "é"}]}, uri) == ("é".encode(), None)
    blob = base64.b64encode(b"\x00\x01").decode()
    assert rules.content({"contents": [
        {"uri": "other", "text": "x"},
        {"uri": uri, "blob": blob, "mimeType": "application/octet-stream"}]}, uri) == (
        b"\x00\x01", "application/octet-stream")
    for result in ({}, {"contents": [{"uri": "a", "text": "x"}, {"uri": "b", "text": "y"}]},
                   {"contents": [{"uri": uri, "blob": "not base64!"}]}):
        with pytest.raises(rules.SkillMismatch) as unreadable:
            rules.content(result, uri)
        assert unreadable.value.kind == "unreadable"


def test_declared_reads_the_extension_settings() -> None:
    assert rules.declared({"extensions": {rules.SKILLS: {"directoryRead": True}}}) == {
        "directoryRead": True}
    assert rules.declared({"extensions": {"io.modelcontextprotocol/ui": {}}}) is None
    assert rules.declared(None) is None
