"""gateway/extensions.py (the one rule for MCP extensions) and the skills and UI routes of
gateway/offerings.py, event by event, with no server."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import pytest

from trunkline.catalog import ToolEntry
from trunkline.gateway import extensions as ext
from trunkline.gateway.offerings import Listed, OfferingsTable, skills_page

SKILLS, UI = "io.modelcontextprotocol/skills", "io.modelcontextprotocol/ui"
TASKS = "io.modelcontextprotocol/tasks"


def caps(**extensions: Any) -> dict[str, Any]:
    return {"resources": {}, "extensions": {key.replace("_", "/"): value
                                            for key, value in extensions.items()}}


def skills_caps(settings: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"resources": {}, "extensions": {SKILLS: settings or {}}}


def test_only_relayed_extensions_are_advertised_and_each_in_its_eras() -> None:
    ready = [skills_caps(), {"extensions": {UI: {}, "com.example/x": {"a": 1}}}, None]
    assert ext.advertised(ready, legacy=False) == {SKILLS: {}, UI: {}, TASKS: {}}
    assert ext.advertised(ready, legacy=True) == {UI: {}}
    # Tasks are the gateway's own (it follows every server's): whatever the servers say.
    assert ext.advertised([{"tools": {}}], legacy=False) == {TASKS: {}}
    assert ext.advertised([], legacy=True) == {}
    assert TASKS not in {row.id for row in ext.METHODS.values()}


def test_directory_read_is_advertised_and_served_only_if_every_skills_server_has_it() -> None:
    both = [skills_caps({"directoryRead": True}), skills_caps({"directoryRead": True})]
    one = [skills_caps({"directoryRead": True}), skills_caps()]
    assert ext.advertised(both, legacy=False) == {SKILLS: {"directoryRead": True}, TASKS: {}}
    assert ext.advertised(one, legacy=False) == {SKILLS: {}, TASKS: {}}
    assert ext.serves("resources/directory/read", both, legacy=False)
    assert not ext.serves("resources/directory/read", one, legacy=False)
    assert ext.serves("skills/list", one, legacy=False)
    assert not ext.serves("skills/list", one, legacy=True)
    assert not ext.serves("skills/list", [{"extensions": {UI: {}}}], legacy=False)


def test_the_host_declares_the_client_side_of_mcp_apps_upstream() -> None:
    assert ext.upstream() == {UI: {"mimeTypes": ["text/html;profile=mcp-app"]}}


def test_what_is_left_out_is_said_once_per_server(caplog: pytest.LogCaptureFixture) -> None:
    assert ext.verdicts([UI, "com.example/x"]) == [
        {"id": UI, "gateway": "relayed"}, {"id": "com.example/x", "gateway": "left out"}]
    left = ext.LeftOut()
    with caplog.at_level(logging.WARNING, "trunkline.gateway"):
        for _ in range(3):  # ready again after restarts: said once
            left.note("a", [UI, "com.example/x"])
        left.note("b", [UI, SKILLS])  # nothing left out: nothing said
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "'a'" in said[0] and "com.example/x" in said[0]


def entry(path: str, *files: str, description: str = "d") -> dict[str, Any]:
    uri = f"skill://{path}/SKILL.md"
    digest = "sha256:" + hashlib.sha256(b"").hexdigest()
    return {"uri": uri, "frontmatter": {"name": path.rsplit("/", 1)[-1],
                                        "description": description},
            "resources": [{"uri": u, "digest": digest, "size": 0}
                          for u in (uri, *(f"skill://{path}/{f}" for f in files))]}


def table(skills: list[Listed], resources: Any = (), tools: Any = ()) -> OfferingsTable:
    return OfferingsTable.build([], list(resources), [], [r.server for r in resources],
                                skills=skills, skill_servers=[s.server for s in skills],
                                tools=list(tools))


def test_a_skill_uri_is_the_first_servers_and_its_files_route_with_it() -> None:
    built = table([Listed("a", (entry("git-workflow", "refs/A.md", description="a's"),)),
                   Listed("b", (entry("git-workflow", "refs/B.md", description="b's"),
                                entry("acme/release-notes", "tpl/x.md")))])
    assert [(s["uri"], s["frontmatter"]["description"]) for s in built.skills] == [
        ("skill://acme/release-notes/SKILL.md", "d"),
        ("skill://git-workflow/SKILL.md", "a's")]
    assert built.skill("skill://git-workflow/SKILL.md") == "a"
    assert built.resource("skill://git-workflow/refs/A.md") == "a"
    assert built.resource("skill://acme/release-notes/tpl/x.md") == "b"
    assert built.directory("skill://acme/release-notes/tpl") == "b"
    assert built.directory("skill://acme/release-notes") == "b"
    assert built.directory("skill://acme") is None
    assert built.skill("skill://unknown/SKILL.md") is None  # two servers: not found


def test_a_skill_whose_files_another_server_lists_is_left_out() -> None:
    built = table([Listed("b", (entry("git-workflow", "refs/B.md"),))],
                  resources=[Listed("a", ({"uri": "skill://git-workflow/refs/B.md"},))])
    assert built.skills == ()
    assert built.resource("skill://git-workflow/refs/B.md") == "a"


def test_an_unknown_skill_goes_to_the_only_skills_server() -> None:
    assert table([Listed("a", ())]).skill("skill://unlisted/SKILL.md") == "a"


def test_a_view_a_tool_names_goes_to_the_tools_server() -> None:
    def tool(server: str, meta: dict[str, Any]) -> ToolEntry:
        return ToolEntry(server=server, local_name="t", name=f"{server}_t", title=None,
                         description=None, input_schema={"type": "object"},
                         raw={"name": "t", "_meta": meta})

    tools = [tool("apps", {"ui": {"resourceUri": "ui://clock"}}),
             tool("old", {"ui/resourceUri": "ui://old"})]
    built = table([], resources=[Listed("x", ()), Listed("y", ())], tools=tools)
    assert built.resource("ui://clock") == "apps"
    assert built.resource("ui://old") == "old"
    assert built.resource("ui://nobody") is None


def test_the_merged_skills_are_paged_by_uri() -> None:
    skills = [{"uri": f"skill://s{i:03}/SKILL.md"} for i in range(7)]
    first, cursor = skills_page(skills, None, size=3) or ([], None)
    assert [s["uri"] for s in first] == [s["uri"] for s in skills[:3]]
    # a skill added before the cursor between pages is not repeated or made to skip one
    grown = sorted([*skills, {"uri": "skill://s000a/SKILL.md"}], key=lambda s: s["uri"])
    second, cursor = skills_page(grown, cursor, size=3) or ([], None)
    assert [s["uri"] for s in second] == [s["uri"] for s in skills[3:6]]
    last, cursor = skills_page(grown, cursor, size=3) or ([], "?")
    assert [s["uri"] for s in last] == [skills[6]["uri"]] and cursor is None
    assert skills_page(skills, "not ours") is None
    assert skills_page(skills, "tl-skills.%%%") is None
