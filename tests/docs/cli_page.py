"""``docs/reference/cli.md``, written from the command line's own parser
(``trunkline.cli.commands.build_parser``): every command, every argument and flag with
its help and default. The page is committed (GitHub shows it as a file, and the README
links to it); ``test_reference.py`` fails when it differs from what the parser says now.

After changing the command line, write the page anew::

    .venv/bin/python tests/docs/cli_page.py

Only the parser's data is read (commands, arguments, help, defaults, choices), never
argparse's own help layout, which changes between Python versions.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "cli.md"

_HEAD = """\
# Command line

<!-- Written by tests/docs/cli_page.py from the parser (trunkline.cli.commands):
     change the parser, then run `.venv/bin/python tests/docs/cli_page.py`. -->

`trunkline` is installed with the package (`python -m trunkline` is the same). Every
command below reads its servers from a configuration file (the
[configuration reference](configuration.md) has its keys), but `demo`, which needs
none, `status` and `reload`, which ask a running gateway, `pins` given a gateway's URL
instead of a file, `policy`, which reads a policy file as well, and `credentials
new-key`. When a command fails it prints one line on stderr and exits with a status that
says how ([exit codes](errors.md#exit-codes)). Under a configuration's `"policy"`,
`tools` and `call` see and call as the identity `local`. The `credentials` commands read
`TRUNKLINE_STORE_KEY` and `TRUNKLINE_STORE_KEYS_OLD`
([Tokens sealed at rest](../how-to/store-key.md)); `reload`, `pins URL` and `status` read
the admin key from `TRUNKLINE_ADMIN_KEY` ([The operator API](../how-to/operator-api.md)).

This page is generated from the command line's parser, so it says exactly what
`trunkline COMMAND --help` says.
"""


def _text(help_text: str) -> str:
    """Help text as Markdown that shows it as written, in a table cell too: what Markdown
    would read as markup is escaped (an underscore only at a word's edge: ``client_calls``
    is no emphasis)."""
    text = " ".join(help_text.split())
    return re.sub(r"[\\`*<>|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", lambda m: "\\" + m[0],
                  text)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _default(action: argparse.Action) -> str:
    if isinstance(action, argparse._StoreTrueAction):
        return "off"
    if action.default is None or action.default is argparse.SUPPRESS:
        return ""
    if isinstance(action.default, float):
        return f"`{action.default:g}`"
    return f"`{action.default}`"


def _name(action: argparse.Action) -> str:
    """How the argument is written: ``--http HOST:PORT``, ``config``, ``{list,diff}``."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    takes_value = action.nargs != 0
    metavar = action.metavar or (action.dest.upper() if takes_value else None)
    if action.choices is not None and action.metavar is None:
        metavar = "{" + ",".join(map(str, action.choices)) + "}"
    written = ", ".join(action.option_strings)
    return f"`{written} {metavar}`" if takes_value and metavar else f"`{written}`"


def _notes(action: argparse.Action, required_groups: dict[int, str]) -> list[str]:
    """What the help does not say and the argument's name does not show."""
    notes = []
    if action.choices is not None and not action.option_strings:
        notes.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    if isinstance(action, argparse._AppendAction) and "repeatable" not in (action.help or ""):
        notes.append("repeatable")
    if not action.option_strings and action.nargs == "?":
        notes.append("optional")
    if action.option_strings and action.required:
        notes.append("required")
    if id(action) in required_groups:
        notes.append(required_groups[id(action)])
    return notes


def _synopsis(name: str, parser: argparse.ArgumentParser) -> str:
    words = [f"trunkline {name}"]
    if any(a.option_strings and a.help is not argparse.SUPPRESS
           and not isinstance(a, argparse._HelpAction) for a in parser._actions):
        words.append("[OPTIONS]")
    for action in parser._actions:
        if not action.option_strings:
            shown = action.metavar or action.dest
            words.append(f"[{shown}]" if action.nargs == "?" else shown)
    return " ".join(words)


def _command(name: str, summary: str, parser: argparse.ArgumentParser) -> list[str]:
    required_groups = {}
    for group in parser._mutually_exclusive_groups:
        flags = ", ".join(f"`{a.option_strings[0]}`" for a in group._group_actions)
        rule = f"exactly one of {flags}" if group.required else f"at most one of {flags}"
        for action in group._group_actions:
            required_groups[id(action)] = rule
    lines = [f"## `trunkline {name}`", "", _sentence(_text(summary)), "",
             "```text", _synopsis(name, parser), "```", "",
             "| Argument | What it is | Default |", "| --- | --- | --- |"]
    for action in parser._actions:
        if action.help is argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        what = _text(action.help or "")
        notes = _notes(action, required_groups)
        if notes:
            what = (what + " " if what else "") + "(" + "; ".join(notes) + ")"
        lines.append(f"| {_name(action)} | {what} | {_default(action)} |")
    if lines[-1].startswith("| ---"):  # no arguments: no table
        del lines[-3:]
    lines.append("")
    for nested in parser._actions:  # a command of commands: each its own section
        if isinstance(nested, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help or "" for choice in nested._choices_actions}
            for sub_name, sub in nested.choices.items():
                lines += _command(f"{name} {sub_name}", summaries[sub_name], sub)
    return lines


#: What ``serve`` does on each signal it acts on (the parser cannot say it).
_SIGNALS = (
    ("SIGTERM, SIGINT (Ctrl-C)", "stops taking requests, gives those in flight "
     "`--drain-timeout` seconds (after `--drain-notice` seconds of 503 at `/readyz`), "
     "stops every server, exits"),
    ("SIGHUP", "reloads the configuration: servers added, removed (drained) or replaced by "
     "difference, unchanged ones untouched, the `\"policy\"` with them; a configuration "
     "that cannot be read, has a wrong entry or a policy that does not compile is refused "
     "whole, logged, and the one in force stays ([Reload the configuration without a "
     "restart](../how-to/reload.md))"),
)

#: The token store's variables (read by ``auth.sealing``, not by the parser).
_STORE_VARIABLES = (
    ("TRUNKLINE_STORE_KEY", "32 bytes as base64url (`trunkline credentials new-key`): every "
     "record written is sealed with it (AES-256-GCM). Unset: shared records are kept in "
     "clear (0600 files), and per-user records are refused (`StoreKeyMissing`)"),
    ("TRUNKLINE_STORE_KEYS_OLD", "keys that only open records, comma-separated: the keys "
     "being rotated out, until `trunkline credentials rekey` has sealed every record under "
     "`TRUNKLINE_STORE_KEY`"),
)

_TAIL = """\
## Signals

`trunkline serve` acts on these; with `--processes N` the parent passes SIGHUP on to
every copy, and stops every copy with SIGTERM on SIGTERM or SIGINT.

| Signal | What `serve` does |
| --- | --- |
""" + "".join(f"| {signal} | {what} |\n" for signal, what in _SIGNALS) + """
## The API key file

`--api-key-file PATH` is either one key per line (named `key-1`, `key-2`, ... by line;
the keys of `TRUNKLINE_API_KEYS` are `env-1`, `env-2`, ...) or a JSON object naming each
key, with what an authorization policy may read of it:

```json
{"keys": [{"name": "dashboard", "key": "db-8c4d2a61f0e97b35", "groups": ["viewers"],
           "attributes": {"team": "sre"}}]}
```

`name` and `key` (at least 16 characters) are required; `scopes`, `groups`, `roles`
(lists of strings) and `attributes` (strings) are optional. A request showing the key as
`Authorization: Bearer <key>` has the identity `api_key` named `name`
([Who may see and call what](../how-to/authorization.md#named-api-keys)).

## The token store's key

Read by every command that opens the configuration's token store (`serve`, `tools`,
`call`, `login`, `credentials`) and by `Host.from_config`
([Tokens sealed at rest](../how-to/store-key.md)):

| Variable | What it is |
| --- | --- |
""" + "".join(f"| `{variable}` | {what} |\n" for variable, what in _STORE_VARIABLES) + """
A malformed key is refused (exit 2) with a message naming the variable, never its value.
"""


def render(parser: argparse.ArgumentParser) -> str:
    """The whole page for ``parser``."""
    out = [_HEAD, "## `trunkline`", "", _sentence(_text(parser.description or "")), "",
           "| Argument | What it is |", "| --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) or action.help is argparse.SUPPRESS:
            continue
        out.append(f"| {_name(action)} | {_text(action.help or '')} |")
    out.append("")
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    summaries = {choice.dest: choice.help or "" for choice in commands._choices_actions}
    out += ["Commands:", ""]
    out += [f"- [`{name}`](#trunkline-{name}): {_text(summaries[name])}"
            for name in commands.choices]
    out.append("")
    for name, sub in commands.choices.items():
        out += _command(name, summaries[name], sub)
    out.append(_TAIL)
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> int:
    from trunkline.cli.commands import build_parser

    PAGE.write_text(render(build_parser()))
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
