"""The reference pages say what the code does, and fail here when the code changes
without them: the command line's page is the parser's (``cli_page.py`` writes it), the
configuration page documents exactly the keys the configuration reader accepts, the
Python API page has an entry for every name ``trunkline`` exports, and the errors page
every exception class it exports and every exit status of the command line."""

from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import re
from pathlib import Path

import pytest
from cli_page import PAGE as CLI_PAGE
from cli_page import render
from doc_examples import DOCS, page_blocks

import trunkline
import trunkline.cli.commands
import trunkline.config
from trunkline.cli.commands import build_parser

REFERENCE = DOCS / "reference"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def shown(action: argparse.Action) -> bool:
    return action.help is not argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)


# --- the command line -------------------------------------------------------------------


def test_the_cli_page_is_what_the_parser_says() -> None:
    page, now = CLI_PAGE.read_text(), render(build_parser())
    diff = "".join(difflib.unified_diff(page.splitlines(True), now.splitlines(True),
                                        "docs/reference/cli.md", "the parser now"))
    assert page == now, ("the command line changed: write its page anew with "
                         f"`.venv/bin/python tests/docs/cli_page.py`\n{diff}")


def test_every_argument_of_every_command_has_help() -> None:
    missing = [f"{name} {a.option_strings or a.dest}"
               for name, sub in subcommands(build_parser()).items()
               for a in sub._actions if shown(a) and not (a.help or "").strip()]
    assert not missing, f"arguments without help (the reference shows none): {missing}"


def test_the_page_names_every_command_and_argument_with_its_help_and_default() -> None:
    parser = build_parser()
    page = render(parser)
    for name, sub in subcommands(parser).items():
        section = page.split(f"## `trunkline {name}`\n", 1)[1].split("\n## ", 1)[0]
        for action in filter(shown, sub._actions):
            first = (action.option_strings or [action.metavar or action.dest])[0]
            row = next((line for line in section.splitlines()
                        if line.startswith(f"| `{first}")), None)
            assert row is not None, f"{name}: no row for {action.option_strings or action.dest}"
            words = re.sub(r"\\(.)", r"\1", row)  # the help as written, escapes undone
            assert " ".join((action.help or "").split()) in words, (name, action.dest)
            if action.default not in (None, False):
                default = f"{action.default:g}" if isinstance(action.default, float) \
                    else str(action.default)
                assert row.endswith(f"| `{default}` |"), (name, action.dest, row)
        hidden = [a for a in sub._actions if a.help is argparse.SUPPRESS]
        for action in hidden:  # an argument kept from --help is kept from the page too
            assert action.option_strings[0] not in section


def test_a_flag_added_to_the_parser_changes_the_page() -> None:
    parser = build_parser()
    subcommands(parser)["serve"].add_argument("--brand-new", metavar="N", type=int, default=7,
                                              help="a flag the page does not know yet")
    page = render(parser)
    assert page != CLI_PAGE.read_text()
    assert "| `--brand-new N` | a flag the page does not know yet | `7` |" in page


# --- the configuration file ---------------------------------------------------------------

#: Each section of the configuration page (its second-level heading) and the keys it
#: documents, as the reader's key sets give them.
CONFIG = trunkline.config


def _top_level_keys() -> set[str]:
    """The keys the reader takes from the top of the file: ``data.get("k")`` and
    ``data["k"]`` in ``config.py`` (``data`` is the decoded file everywhere there)."""
    keys = set()
    for node in ast.walk(ast.parse(inspect.getsource(CONFIG))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "get" and isinstance(node.func.value, ast.Name) \
                and node.func.value.id == "data" and isinstance(node.args[0], ast.Constant):
            keys.add(node.args[0].value)
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) \
                and node.value.id == "data" and isinstance(node.slice, ast.Constant):
            keys.add(node.slice.value)
    return keys


def _root_keys() -> set[str]:
    """The keys of a root object: the set ``_roots`` checks an object's keys against."""
    (function,) = [n for n in ast.walk(ast.parse(inspect.getsource(CONFIG)))
                   if isinstance(n, ast.FunctionDef) and n.name == "_roots"]
    (keys,) = [{e.value for e in n.elts} for n in ast.walk(function)
               if isinstance(n, ast.Set) and all(isinstance(e, ast.Constant) for e in n.elts)]
    return keys


SECTIONS: dict[str, set[str]] = {
    "Top level": _top_level_keys(),
    "Every server": CONFIG._COMMON_KEYS,
    "A root object": _root_keys(),
    "stdio servers": CONFIG._STDIO_KEYS - CONFIG._COMMON_KEYS,
    "Streamable HTTP servers": CONFIG._HTTP_KEYS - CONFIG._COMMON_KEYS,
    "A server's `oauth`": CONFIG._SERVER_OAUTH_KEYS,
    "An identity provider": CONFIG._IDP_KEYS,
    "The host's `oauth`": CONFIG._OAUTH_KEYS | CONFIG._OAUTH_OBJECTS,
    "A gateway client": CONFIG._GATEWAY_CLIENT_KEYS,
    "The `pins` object": CONFIG._PIN_KEYS,
    "The bounds of `pins`": set(CONFIG._BOUND_KEYS),
}
#: The reader's key sets SECTIONS covers (a new one must get a section).
KEY_SETS = {"_COMMON_KEYS", "_STDIO_KEYS", "_HTTP_KEYS", "_SERVER_OAUTH_KEYS", "_OAUTH_KEYS",
            "_IDP_KEYS", "_PIN_KEYS", "_BOUND_KEYS", "_GATEWAY_CLIENT_KEYS"}


def documented_keys(text: str) -> dict[str, dict[str, str]]:
    """Section heading -> key -> what the page says under the key's heading."""
    sections: dict[str, dict[str, str]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        keys = {}
        for entry in re.split(r"^### ", body, flags=re.M)[1:]:
            heading, _, text_of_key = entry.partition("\n")
            found = re.fullmatch(r"`([A-Za-z]+)`", heading.strip())
            assert found, f"{title}: a key's heading is its name in backticks, not {heading!r}"
            keys[found[1]] = text_of_key
        sections[title.strip()] = keys
    return sections


def test_the_reader_reads_no_key_set_the_page_has_no_section_for() -> None:
    sets = {name for name in vars(CONFIG) if name.endswith("_KEYS")}
    assert sets == KEY_SETS
    # The two read from the code's text found what they look for.
    assert {"mcpServers", "collision"} <= SECTIONS["Top level"]
    assert "uri" in SECTIONS["A root object"]


@pytest.mark.parametrize("section", SECTIONS)
def test_the_configuration_page_documents_exactly_the_keys_the_reader_accepts(section) -> None:
    page = documented_keys((REFERENCE / "configuration.md").read_text())
    assert section in page, f"no section '## {section}' on the configuration page"
    documented, accepted = set(page[section]), SECTIONS[section]
    assert not accepted - documented, \
        f"{section}: accepted by config.py, not documented: {sorted(accepted - documented)}"
    assert not documented - accepted, \
        f"{section}: documented, not accepted by config.py: {sorted(documented - accepted)}"


def test_every_documented_key_has_a_type_a_default_and_an_example() -> None:
    page = documented_keys((REFERENCE / "configuration.md").read_text())
    assert set(page) >= set(SECTIONS)
    for section, keys in page.items():
        for key, text in keys.items():
            where = f"{section}: `{key}`"
            assert text.lstrip().startswith("Type: "), f"{where}: no 'Type: ...' line first"
            assert re.search(r"Default:\s|Required\.", text), f"{where}: no default"
            examples = [b for b in page_blocks("configuration.md", text).blocks
                        if b.language == "json"]
            assert any(f'"{key}"' in b.code for b in examples), f"{where}: no JSON example"


# --- the Python API ------------------------------------------------------------------------


def test_the_python_api_page_has_an_entry_for_every_exported_name_and_no_other() -> None:
    page = (REFERENCE / "python-api.md").read_text()
    entries = re.findall(r"^::: trunkline\.(\w+)\s*$", page, flags=re.M)
    exported = set(trunkline.__all__) - {"__version__"}
    assert not exported - set(entries), f"exported, no entry: {sorted(exported - set(entries))}"
    assert not set(entries) - exported, f"an entry, not exported: {set(entries) - exported}"
    assert len(entries) == len(set(entries)), "a name with two entries"
    assert "`trunkline.__version__`" in page


# --- errors and exit codes -----------------------------------------------------------------


def test_the_errors_page_has_a_section_for_every_exported_exception_class() -> None:
    page = (REFERENCE / "errors.md").read_text()
    headings = set(re.findall(r"^### `(\w+)`$", page, flags=re.M))
    exported = {name for name in trunkline.__all__
                if isinstance(getattr(trunkline, name), type)
                and issubclass(getattr(trunkline, name), BaseException)}
    assert "TrunklineError" in exported and len(exported) > 20
    assert not exported - headings, f"no section: {sorted(exported - headings)}"
    assert headings <= set(trunkline.__all__), f"not exported: {headings - set(trunkline.__all__)}"


def _exit_codes() -> set[int]:
    """Every exit status of the command line: its ``EXIT_*`` constants, the statuses its
    functions return as numbers, and argparse's 2 for bad usage."""
    codes = {value for name, value in vars(trunkline.cli.commands).items()
             if name.startswith("EXIT_")}
    tree = ast.parse(Path(trunkline.cli.commands.__file__).read_text())
    codes |= {node.value.value for node in ast.walk(tree)
              if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant)
              and type(node.value.value) is int}
    return codes | {2}


def test_the_errors_page_lists_every_exit_status_of_the_command_line() -> None:
    page = (REFERENCE / "errors.md").read_text()
    table = page.split("## Exit codes\n", 1)[1]
    listed = {int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    assert {0, 1, 2, 130} <= _exit_codes()  # the constants and the returns were found
    assert listed == _exit_codes()
