"""Skills (SEP-2640) through the Host: ``list_skills``, ``get_skill``, ``load_skill``,
``read_skill_file``, against fastmcp 4.2.3 serving a skill folder
(tests/peers/fastmcp_skills.py), wrapped in tests/peers/tap.py to see on the wire what is
read and when. A file changed on disk after the skill was listed is what the host must
refuse (its entry went stale); the server's ``--drifted`` skill is a stored manifest whose
frontmatter is not its file's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import taplog

import realpeers
from conftest import PEERS, run
from trunkline import SkillVerificationFailed
from trunkline.errors import ServerError
from trunkline.params import stdio
from trunkline.parent.host import Host

pytestmark = pytest.mark.real_servers

SKILL_MD = """---
name: git-workflow
description: Follow the team's Git conventions
license: Apache-2.0
---

# Git workflow

Read references/BRANCHES.md first.
"""
BRANCHES = "Branch from main; rebase before merging.\n"


def skill_folder(root: Path, name: str = "git-workflow", body: str = SKILL_MD) -> Path:
    folder = root / name
    (folder / "references").mkdir(parents=True)
    (folder / "SKILL.md").write_text(body.replace("git-workflow", name))
    (folder / "references" / "BRANCHES.md").write_text(BRANCHES)
    return folder


def fastmcp(tap: Path | None, *options: str) -> Any:
    server = realpeers.require(realpeers.FASTMCP_SKILLS)
    if tap is None:
        return stdio(server.argv[0], *server.argv[1:], *options, env=dict(server.env))
    return stdio(sys.executable, str(PEERS / "tap.py"), "--log", str(tap), "--",
                 *server.argv, *options, env=dict(server.env))


def sent(tap: Path, method: str) -> list[dict[str, Any]]:
    return [m["params"] for m in map(orjson.loads, taplog.lines(tap, taplog.IN))
            if m.get("method") == method]


def test_listing_fetches_entries_only_and_loading_reads_and_verifies(tmp_path, tap, no_leaks):
    skill_folder(tmp_path / "skills")

    async def main() -> None:
        async with Host() as host:
            status = await host.add_server("docs", fastmcp(tap, "--skills",
                                                           str(tmp_path / "skills")))
            assert "io.modelcontextprotocol/skills" in status.extensions
            [skill] = await host.list_skills("docs")
            assert (skill.server, skill.name, skill.uri) == (
                "docs", "git-workflow", "skill://git-workflow/SKILL.md")
            assert skill.frontmatter == {"name": "git-workflow", "license": "Apache-2.0",
                                         "description": "Follow the team's Git conventions"}
            assert [r.uri for r in skill.resources or ()] == [
                "skill://git-workflow/SKILL.md", "skill://git-workflow/references/BRANCHES.md"]
            assert await host.list_skills() == [skill]
            # Connecting and listing (twice) read no file of the skill.
            assert sent(tap, "resources/read") == []
            assert len(sent(tap, "skills/list")) == 2

            loaded = await host.load_skill(skill)
            assert loaded.text == SKILL_MD and loaded.uri == skill.uri
            assert [p["uri"] for p in sent(tap, "resources/read")] == [skill.uri]
            branches = await host.read_skill_file(skill, "references/BRANCHES.md")
            assert branches.text == BRANCHES
            # By URI alone (skills/get), the same entry.
            assert await host.get_skill("docs", skill.uri) == skill

    run(main())


@pytest.mark.parametrize(("edit", "kind"), [
    # the same length, other bytes: only the digest tells
    (lambda text: text.replace("first.", "never!"), "digest"),
    (lambda text: text + "One more line.\n", "size"),
])
def test_a_skill_md_changed_after_listing_is_refused(tmp_path, tap, no_leaks, edit, kind):
    folder = skill_folder(tmp_path / "skills")

    async def main() -> None:
        async with Host() as host:
            await host.add_server("docs", fastmcp(tap, "--skills", str(tmp_path / "skills")))
            [skill] = await host.list_skills("docs")
            changed = edit(SKILL_MD)
            assert (len(changed) == len(SKILL_MD)) is (kind == "digest")
            (folder / "SKILL.md").write_text(changed)
            with pytest.raises(SkillVerificationFailed) as refused:
                await host.load_skill(skill)
            assert (refused.value.kind, refused.value.uri, refused.value.server) == (
                kind, skill.uri, "docs")
            # The server did send it: the host read it and refused it.
            assert [p["uri"] for p in sent(tap, "resources/read")] == [skill.uri]
            # The current entry (skills/get) describes the new file, which then loads.
            fresh = await host.get_skill("docs", skill.uri)
            assert fresh.resources != skill.resources
            assert (await host.load_skill(fresh)).text == changed

    run(main())


def test_a_supporting_file_changed_after_listing_is_refused(tmp_path, no_leaks):
    folder = skill_folder(tmp_path / "skills")

    async def main() -> None:
        async with Host() as host:
            await host.add_server("docs", fastmcp(None, "--skills", str(tmp_path / "skills")))
            [skill] = await host.list_skills("docs")
            (folder / "references" / "BRANCHES.md").write_text(BRANCHES.upper())
            with pytest.raises(SkillVerificationFailed) as refused:
                await host.read_skill_file(skill, "references/BRANCHES.md")
            assert refused.value.kind == "digest"

    run(main())


def test_a_frontmatter_that_is_not_the_entrys_is_refused(no_leaks):
    async def main() -> None:
        async with Host() as host:
            await host.add_server("docs", fastmcp(None, "--drifted"))
            [skill] = await host.list_skills("docs")
            assert skill.frontmatter["description"] == "What the listing says"
            with pytest.raises(SkillVerificationFailed, match="'description'") as refused:
                await host.load_skill(skill)
            assert refused.value.kind == "frontmatter"

    run(main())


def test_an_unlisted_file_is_not_read_and_an_unknown_skill_is_the_servers_error(
        tmp_path, tap, no_leaks):
    folder = skill_folder(tmp_path / "skills")

    async def main() -> None:
        async with Host() as host:
            await host.add_server("docs", fastmcp(tap, "--skills", str(tmp_path / "skills")))
            [skill] = await host.list_skills("docs")
            # Added after the listing: a change to the skill, not one of its files yet.
            (folder / "references" / "NEW.md").write_text("new\n")
            with pytest.raises(SkillVerificationFailed) as unlisted:
                await host.read_skill_file(skill, "references/NEW.md")
            assert unlisted.value.kind == "unlisted"
            assert sent(tap, "resources/read") == []
            with pytest.raises(ServerError) as unknown:
                await host.get_skill("docs", "skill://no-such-skill/SKILL.md")
            assert unknown.value.code == -32602

    run(main())


def test_two_servers_serving_the_same_skill_path_are_two_skills(tmp_path, no_leaks):
    skill_folder(tmp_path / "a")
    skill_folder(tmp_path / "b", body=SKILL_MD.replace("first.", "today"))
    skill_folder(tmp_path / "b", name="release-notes")

    async def main() -> None:
        async with Host() as host:
            await host.add_server("alpha", fastmcp(None, "--skills", str(tmp_path / "a")))
            await host.add_server("beta", fastmcp(None, "--skills", str(tmp_path / "b")))
            skills = await host.list_skills()
            assert [(s.server, s.name, s.uri) for s in skills] == [
                ("alpha", "alpha_git-workflow", "skill://git-workflow/SKILL.md"),
                ("beta", "beta_git-workflow", "skill://git-workflow/SKILL.md"),
                ("beta", "release-notes", "skill://release-notes/SKILL.md")]
            # Each is read from its own server, and verified against its own entry.
            texts = [(await host.load_skill(s)).text for s in skills[:2]]
            assert texts == [SKILL_MD, SKILL_MD.replace("first.", "today")]

    run(main())


def test_a_server_is_asked_only_what_it_declared(tmp_path, no_leaks):
    skill_folder(tmp_path / "skills")

    async def main() -> None:
        async with Host() as host:
            await host.add_server("plain", fastmcp(None))
            await host.add_server("docs", fastmcp(None, "--skills", str(tmp_path / "skills")))
            with pytest.raises(ValueError, match="did not declare the skills extension"):
                await host.list_skills("plain")
            assert [s.server for s in await host.list_skills()] == ["docs"]
            # fastmcp 4.2.3 serves no resources/directory/read, and says so.
            with pytest.raises(ValueError, match="directoryRead"):
                await host.read_skill_directory("docs", "skill://git-workflow")

    run(main())
