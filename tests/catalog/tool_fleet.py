"""A large fleet's catalog made of real tool definitions, and queries labelled with the
tool a person would obviously want: shared by the recall test
(``tests/catalog/test_search_recall.py``) and the benchmark (``benches/bench_search.py``).

``real_tools.json`` holds the ``tools/list`` definitions of eight real servers as they
sent them (recorded by ``benches/record_tools.py``; packages and versions inside). A
fleet of ``copies`` deployments of each server (``github-2``, ``github-3``, ...) is
merged by the real ``build_catalog`` under the ``prefix`` policy, so the copies' tools
get varied names (``github-2/create_issue``); every third copy also renames its tools to
another common spelling (``createIssue``, ``create-issue``, ``create.issue``), as
different servers name the same thing.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from trunkline.catalog import Catalog, ListingDriver, ToolListing, build_catalog

FIXTURE = Path(__file__).with_name("real_tools.json")

#: (query, the tools that answer it, as "server/local name" of the recorded servers).
LABELLED: tuple[tuple[str, frozenset[str]], ...] = tuple(
    (query, frozenset(answers.split())) for query, answers in (
        ("what time is it in Tokyo right now", "time/get_current_time"),
        ("convert 3pm New York time to London time", "time/convert_time"),
        ("download a web page and give me its text as markdown", "fetch/fetch"),
        ("open a pull request from my branch", "github/create_pull_request"),
        ("merge a pull request", "github/merge_pull_request"),
        ("post a comment on an issue", "github/add_issue_comment"),
        ("create a new github issue", "github/create_issue"),
        ("fork a repository into my organization", "github/fork_repository"),
        ("search code across github", "github/search_code"),
        ("find users on github", "github/search_users"),
        ("which files changed in this pull request", "github/get_pull_request_files"),
        ("list open issues of a repository", "github/list_issues"),
        ("close or relabel an existing issue", "github/update_issue"),
        ("push several files in one commit", "github/push_files"),
        ("review comments on a PR", "github/get_pull_request_comments"),
        ("stage files for the next commit", "git/git_add"),
        ("show changes that are not staged yet", "git/git_diff_unstaged"),
        ("switch to another branch", "git/git_checkout git/git_branch"),
        ("commit my changes with a message", "git/git_commit"),
        ("show the commit log", "git/git_log github/list_commits"),
        ("working tree status", "git/git_status"),
        ("unstage everything", "git/git_reset"),
        ("make a new directory", "filesystem/create_directory"),
        ("rename a file", "filesystem/move_file"),
        ("overwrite a file with new content", "filesystem/write_file"),
        ("find files matching a glob pattern", "filesystem/search_files"),
        ("file size and modification time", "filesystem/get_file_info"),
        ("read several files at once", "filesystem/read_multiple_files"),
        ("recursive tree of a directory", "filesystem/directory_tree"),
        ("read an image file as base64", "filesystem/read_media_file"),
        ("which directories am I allowed to access", "filesystem/list_allowed_directories"),
        ("replace lines in a text file", "filesystem/edit_file"),
        ("remember new entities in the knowledge graph", "memory/create_entities"),
        ("delete relations between entities", "memory/delete_relations"),
        ("add observations about an entity", "memory/add_observations"),
        ("search the knowledge graph", "memory/search_nodes"),
        ("add two numbers", "everything/get-sum"),
        ("echo back a message", "everything/echo"),
        ("compress a file with gzip", "everything/gzip-file-as-resource"),
        ("print environment variables", "everything/get-env"),
        ("long running operation with progress updates",
         "everything/trigger-long-running-operation"),
        ("think step by step through a hard problem", "thinking/sequentialthinking"),
        # the names themselves, as a model may have seen them elsewhere
        ("get_current_time", "time/get_current_time"),
        ("readMediaFile", "filesystem/read_media_file"),
        ("list-commits", "github/list_commits"),
        ("gitdiffstaged", "git/git_diff_staged"),
    ))


@functools.cache
def recorded() -> list[dict[str, Any]]:
    return json.loads(FIXTURE.read_text())["servers"]


def _respelled(name: str, style: int) -> str:
    parts = [p for p in re.split(r"[_\-.]", name) if p]
    if style == 0:
        return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])
    return ("-" if style == 1 else ".").join(parts)


def _listing(server: str, tools: list[dict[str, Any]]) -> ToolListing:
    driver = ListingDriver(server, "modern")
    driver.add_page({"resultType": "complete", "tools": tools, "ttlMs": 0,
                     "cacheScope": "public"})
    return driver.finish()


def fleet(copies: int, leave_out: str | None = None) -> Catalog:
    """The recorded servers, ``copies`` deployments of each, as one merged catalog; without
    the deployment named ``leave_out`` (a server gone: the catalog changed)."""
    listings = []
    for copy in range(1, copies + 1):
        for server in recorded():
            tools = server["tools"]
            if copy % 3 == 0:
                tools = [{**t, "name": _respelled(t["name"], copy // 3 % 3)} for t in tools]
            name = server["server"] if copy == 1 else f"{server['server']}-{copy}"
            if name != leave_out:
                listings.append(_listing(name, tools))
    return build_catalog(listings, policy="prefix")


def origin(server: str, local_name: str) -> str:
    """The recorded ``server/tool`` a fleet entry is a copy of."""
    base = server.rsplit("-", 1)[0] if re.search(r"-\d+$", server) else server
    for tool in next(s for s in recorded() if s["server"] == base)["tools"]:
        if local_name in (tool["name"], *(_respelled(tool["name"], s) for s in range(3))):
            return f"{base}/{tool['name']}"
    raise KeyError(local_name)
