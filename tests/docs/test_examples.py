"""Every code example of the documentation is checked as ``doc_examples`` says: Python
examples run against the demo fleet, ``mcpServers`` files read by the configuration
reader, other JSON parsed, ``trunkline`` command lines parsed by the CLI's parser. One
test per page and block (``how-to/oauth.md:3``: the page's third fenced block); a block
marked ``<!-- not run: REASON -->`` is reported skipped with its reason.

Below them, the checker itself, on small pages written here."""

from __future__ import annotations

import pytest
from doc_examples import (
    JSON,
    PYTHON,
    SHELL,
    Block,
    all_pages,
    check_console,
    check_json,
    demo_fleet,
    documentation_pages,
    page_blocks,
    run_python,
    trunkline_commands,
)

PAGES = all_pages()
CHECKED = [block for page in PAGES for block in page.blocks
           if block.language in PYTHON | JSON | SHELL]


def check(block: Block, tmp_path) -> str | None:
    if block.language in PYTHON:
        return run_python(block, tmp_path)
    if block.language in JSON:
        return check_json(block)
    return check_console(block)


@pytest.mark.parametrize("block", CHECKED, ids=[block.id for block in CHECKED])
def test_example(block: Block, tmp_path) -> None:
    if block.not_run is not None:
        pytest.skip(f"not run: {block.not_run or '(no reason given)'}")
    problem = check(block, tmp_path)
    assert problem is None, problem


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_not_run_markers_each_give_a_reason_and_precede_a_block(page) -> None:
    assert not page.errors, f"{page.name}: " + "; ".join(page.errors)


def test_the_pages_checked_are_the_readme_and_every_page_under_docs() -> None:
    names = [name for name, _ in documentation_pages()]
    assert names[0] == "README.md"
    assert "index.md" in names and "reference/configuration.md" in names
    assert all(name.endswith(".md") for name in names)


# --- the checker itself ----------------------------------------------------------------


def blocks_of(text: str) -> list[Block]:
    page = page_blocks("page.md", text)
    assert not page.errors, page.errors
    return page.blocks


def test_blocks_are_numbered_in_page_order_with_their_language_and_line() -> None:
    text = ("# A page\n\n```python\nprint(1)\n```\n\ntext\n\n~~~json\n{}\n~~~\n\n"
            "```\nplain\n```\n")
    blocks = blocks_of(text)
    assert [(b.id, b.language, b.line, b.code) for b in blocks] == [
        ("page.md:1", "python", 3, "print(1)\n"),
        ("page.md:2", "json", 9, "{}\n"),
        ("page.md:3", "", 13, "plain\n"),
    ]


def test_a_block_in_a_list_item_loses_the_items_indent_and_a_longer_fence_holds_a_shorter_one():
    text = ("1. Run it:\n\n   ```python\n   if True:\n       print(1)\n   ```\n\n"
            "````markdown\n```python\nnot a block of its own\n```\n````\n")
    python, markdown = blocks_of(text)
    assert python.code == "if True:\n    print(1)\n"
    assert (markdown.language, markdown.code) == (
        "markdown", "```python\nnot a block of its own\n```\n")


def test_a_marker_with_a_reason_marks_the_next_block_not_run_across_a_blank_line() -> None:
    text = ("<!-- not run: needs Claude Desktop -->\n\n```python\nraise SystemExit(1)\n```\n\n"
            "```python\nprint(2)\n```\n")
    marked, plain = blocks_of(text)
    assert marked.not_run == "needs Claude Desktop"
    assert plain.not_run is None


@pytest.mark.parametrize("marker", ["<!-- not run -->", "<!-- not run: -->",
                                    "<!--not run:   -->"])
def test_a_marker_without_a_reason_is_an_error_of_its_page(marker: str) -> None:
    page = page_blocks("page.md", f"{marker}\n```python\nprint(1)\n```\n")
    assert len(page.errors) == 1 and "without a reason" in page.errors[0]


def test_a_marker_that_precedes_no_block_is_an_error_of_its_page() -> None:
    page = page_blocks("page.md", "<!-- not run: later -->\nSome text.\n\n```python\nx = 1\n```\n")
    assert page.errors == ["line 1: a not-run marker precedes no block"]
    assert page.blocks[0].not_run is None
    page = page_blocks("page.md", "text\n<!-- not run: at the end -->\n")
    assert page.errors == ["line 2: a not-run marker precedes no block"]


def test_a_fence_never_closed_is_an_error_of_its_page() -> None:
    page = page_blocks("page.md", "```python\nprint(1)\n")
    assert page.errors == ["line 1: a code fence that is never closed"]


@pytest.mark.parametrize("marker", ["<!-- not run: needs a browser -->",
                                    "<!-- not run -->"])
def test_a_marked_block_is_not_run(marker: str, tmp_path) -> None:
    """The test of a marked block skips before running anything: a block that would
    leave a file behind leaves none."""
    sentinel = tmp_path / "ran"
    (block,) = page_blocks("page.md", f"{marker}\n```python\nopen({str(sentinel)!r}, 'w')\n```\n"
                           ).blocks
    with pytest.raises(pytest.skip.Exception):
        test_example(block, tmp_path)
    assert not sentinel.exists()


def test_a_python_example_runs_against_the_demo_fleet(tmp_path) -> None:
    """The demo fleet's ``mcp.json`` is in the example's working directory: an example can
    start it with ``Host.from_config`` and call its tools."""
    (block,) = blocks_of('''```python
import asyncio
import trunkline

async def main() -> None:
    async with trunkline.Host.from_config("mcp.json") as host:
        states = {s.name: (s.state.value, s.era) for s in host.servers()}
        assert states == {"web": ("ready", "modern"), "docs": ("ready", "modern"),
                          "archive": ("ready", "legacy")}, states
        result = await host.call_tool("docs_search", {"query": "discover"})
        assert result.server == "docs" and not result.is_error, result

asyncio.run(main())
```
''')
    assert run_python(block, tmp_path) is None
    assert list(demo_fleet()["mcpServers"]) == ["web", "docs", "archive"]


def test_a_python_example_that_fails_is_reported_with_its_output(tmp_path) -> None:
    (block,) = blocks_of("```python\nprint('before')\nraise SystemExit(3)\n```\n")
    problem = run_python(block, tmp_path)
    assert problem is not None
    assert "page.md:1 (line 1) exited 3" in problem and "before" in problem


def test_a_python_example_with_top_level_await_is_refused(tmp_path) -> None:
    (block,) = blocks_of("```python\nimport asyncio\nawait asyncio.sleep(0)\n```\n")
    problem = run_python(block, tmp_path)
    assert problem is not None and "top-level await" in problem
    assert not (tmp_path / "example.py").exists()  # refused before it ran


def test_a_python_example_that_leaves_a_process_behind_fails(tmp_path) -> None:
    (block,) = blocks_of("```python\nimport subprocess, sys\n"
                         "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
                         " start_new_session=True)\n```\n")
    problem = run_python(block, tmp_path)
    assert problem is not None and "left processes running" in problem
    assert "time.sleep(600)" in problem


def test_an_mcpservers_block_goes_through_the_configuration_reader() -> None:
    good, unknown_key, bad_value, secret = blocks_of('''```json
{"mcpServers": {"web": {"url": "https://mcp.example.com/mcp", "allowLegacy": true},
                "local": {"command": "python", "args": ["server.py"]}}}
```
```json
{"mcpServers": {"local": {"command": "python", "allowlegacy": true}}}
```
```json
{"mcpServers": {"local": {"command": "python"}}, "collision": "first-wins"}
```
```json
{"mcpServers": {"billing": {"url": "https://billing.example/mcp",
  "oauth": {"clientId": "abc", "clientSecretEnv": "BILLING_SECRET",
            "grant": "client_credentials"}}}}
```
''')
    assert check_json(good) is None
    assert "unknown keys ['allowlegacy']" in (check_json(unknown_key) or "")
    assert "\"collision\" must be one of" in (check_json(bad_value) or "")
    assert check_json(secret) is None  # the variable it names is the reader's to set


def test_a_policy_block_is_compiled_as_a_gateway_compiles_it() -> None:
    good, unknown_variable, both = blocks_of('''```json
{"rules": [{"id": "support", "allow": ["list", "call"], "servers": ["tickets"],
            "when": "'support' in identity.groups"}]}
```
```json
{"rules": [{"id": "typo", "allow": ["list"], "when": "user.groups == []"}]}
```
```json
{"rules": [{"id": "both", "allow": ["list"], "deny": ["call"]}]}
```
''')
    assert check_json(good) is None
    assert "rule 'typo': \"when\" reads 'user'" in (check_json(unknown_variable) or "")
    assert "rule 'both': needs exactly one of" in (check_json(both) or "")


def test_an_api_key_file_block_is_read_as_serve_reads_it() -> None:
    good, short, named_twice = blocks_of('''```json
{"keys": [{"name": "dashboard", "key": "db-8c4d2a61f0e97b35", "groups": ["viewers"]}]}
```
```json
{"keys": [{"name": "dashboard", "key": "too-short"}]}
```
```json
{"keys": [{"name": "a", "key": "k-0123456789abcdef"}, {"name": "a", "key": "k-fedcba9876543210"}]}
```
''')
    assert check_json(good) is None
    problem = check_json(short) or ""
    assert "key 1 ('dashboard'): \"key\" is a string of at least 16 characters" in problem
    assert "too-short" not in problem
    assert "two API keys are named 'a'" in (check_json(named_twice) or "")


def test_any_other_json_block_must_be_valid_json() -> None:
    valid, invalid = blocks_of('```json\n{"jsonrpc": "2.0", "id": 1}\n```\n'
                               '```json\n{"jsonrpc": "2.0", ...}\n```\n')
    assert check_json(valid) is None
    assert "not valid JSON" in (check_json(invalid) or "")


def test_trunkline_commands_are_found_after_prompts_paths_variables_and_operators() -> None:
    code = ("$ trunkline demo --json\n"
            "python3 -m venv .venv && .venv/bin/trunkline probe mcp.json  # era verdicts\n"
            "OTEL_TRACES_EXPORTER=otlp trunkline serve mcp.json \\\n    --http 127.0.0.1:8000\n"
            "echo trunkline demo\n"
            "trunkline call mcp.json web_search '{\"query\": \"a b\"}' | jq .\n")
    assert trunkline_commands(code) == [
        ["demo", "--json"],
        ["probe", "mcp.json"],
        ["serve", "mcp.json", "--http", "127.0.0.1:8000"],
        ["call", "mcp.json", "web_search", '{"query": "a b"}'],
    ]


def test_a_console_block_with_an_unknown_flag_or_command_fails() -> None:
    good, flag, command, missing = blocks_of(
        "```console\n$ trunkline serve mcp.json --stdio\n$ trunkline --version\n```\n"
        "```bash\ntrunkline serve mcp.json --stdio --no-such-flag\n```\n"
        "```console\n$ trunkline frobnicate mcp.json\n```\n"
        "```bash\ntrunkline serve mcp.json\n```\n")
    assert check_console(good) is None
    assert "unrecognized arguments: --no-such-flag" in (check_console(flag) or "")
    assert "invalid choice: 'frobnicate'" in (check_console(command) or "")
    assert "one of the arguments --stdio --http is required" in (check_console(missing) or "")
