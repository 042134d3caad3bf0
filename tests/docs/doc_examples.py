"""The code examples of the documentation (every ``docs/**/*.md`` and the README), and
how each kind is checked. The convention every page follows (``docs/contributing.md``,
"Code examples are run"):

- A fenced block whose language is ``python`` (or ``py``) is a program: it is run as a
  script of its own in a fresh interpreter, its working directory a temporary folder
  holding ``mcp.json``, the demo fleet (the servers ``trunkline demo`` starts, as an
  ``mcpServers`` file), and must exit 0 within ``EXAMPLE_TIMEOUT_S``, leaving no
  process behind. Top-level ``await`` is refused: an example is a program
  (``asyncio.run(main())``).
- A block preceded by ``<!-- not run: REASON -->`` (blank lines may come between) is not
  run; a marker without a reason, or one that precedes no block, is an error of its page.
- A ``json`` block whose top level has ``mcpServers`` is read by trunkline's own
  configuration reader (``read_host_config``) and must be accepted; one whose top level
  has ``rules`` is an authorization policy, compiled as a gateway compiles it
  (``Policy.compile``), and one whose top level has ``keys`` is a gateway's API key file,
  read as ``--api-key-file`` reads it (``read_api_keys``): each must be accepted. Any
  other ``json`` block must be valid JSON.
- A ``console`` or ``bash`` (or ``sh``, ``shell``) block: every command in it that runs
  ``trunkline`` (a line starting with ``trunkline``, ``$ trunkline`` or
  ``.venv/bin/trunkline``, and each such command after ``&&``, ``||``, ``;`` or ``|``)
  must parse with the CLI's own parser: the command and every flag exist. It is not run.
- Any other language is shown as it is.

Pure parsing here (``page_blocks``) and one checker per kind; the tests are
``test_examples.py``.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
#: How long one Python example may take, start to exit.
EXAMPLE_TIMEOUT_S = 120.0
#: How long the processes an example started may take to end after it exited (a host's
#: workers and servers notice their parent is gone and stop).
LEFTOVER_TIMEOUT_S = 15.0

PYTHON = {"python", "py"}
JSON = {"json"}
SHELL = {"console", "bash", "sh", "shell"}

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*not run\b(?P<rest>.*?)-->\s*$")
#: The program of a command that runs trunkline.
_PROGRAM = re.compile(r"^(?:\.venv/bin/)?trunkline$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str  #: the page's path from ``docs/`` (``how-to/oauth.md``), or ``README.md``
    number: int  #: its place among the page's fenced blocks, from 1
    line: int  #: the line its opening fence is on, from 1
    language: str  #: the first word of the info string, lower case ("" if none)
    code: str
    #: Why it is not run (its ``<!-- not run: REASON -->``; "" for a marker without a
    #: reason, which is an error of its page), or None: it is checked.
    not_run: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.number}"


@dataclass
class Page:
    name: str
    blocks: list[Block] = field(default_factory=list)
    #: What is wrong with the page's markers and fences, each with its line.
    errors: list[str] = field(default_factory=list)


def page_blocks(name: str, text: str) -> Page:
    """The fenced blocks of one page of Markdown, each with its not-run marker if it has
    one, and the page's marker errors."""
    page = Page(name)
    lines = text.splitlines()
    marker: tuple[int, str] | None = None  # (line, reason) of a marker awaiting its block
    i = 0
    while i < len(lines):
        line = lines[i]
        opening = _FENCE.match(line)
        if opening is None or ("`" in opening["info"] and opening["fence"][0] == "`"):
            found = _MARKER.match(line)
            if found is not None:
                if marker is not None:
                    page.errors.append(f"line {marker[0]}: a not-run marker precedes no block")
                reason = found["rest"].strip().removeprefix(":").strip()
                if not found["rest"].strip().startswith(":") or not reason:
                    page.errors.append(f"line {i + 1}: a not-run marker without a reason "
                                       "(write <!-- not run: REASON -->)")
                marker = (i + 1, reason)
            elif line.strip() and marker is not None:
                page.errors.append(f"line {marker[0]}: a not-run marker precedes no block")
                marker = None
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        closing = re.compile(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), None)
        if end is None:
            page.errors.append(f"line {i + 1}: a code fence that is never closed")
            end = len(lines)
        body = [_dedent(text, indent) for text in lines[i + 1:end]]
        info = opening["info"].strip()
        language = info.split()[0].lower().lstrip(".{") if info else ""
        page.blocks.append(Block(name, len(page.blocks) + 1, i + 1, language,
                                 "\n".join(body) + "\n",
                                 None if marker is None else marker[1]))
        marker = None
        i = end + 1
    if marker is not None:
        page.errors.append(f"line {marker[0]}: a not-run marker precedes no block")
    return page


def _dedent(line: str, indent: int) -> str:
    """A line of a fenced block indented ``indent`` (a block in a list item), as written
    inside it."""
    strip = len(line) - len(line.lstrip(" "))
    return line[min(strip, indent):]


def documentation_pages() -> list[tuple[str, Path]]:
    """Every page with examples: the README, then ``docs/**/*.md`` in path order."""
    pages = [("README.md", REPO_ROOT / "README.md")]
    pages += [(str(p.relative_to(DOCS)), p) for p in sorted(DOCS.rglob("*.md"))]
    return pages


def all_pages() -> list[Page]:
    return [page_blocks(name, path.read_text()) for name, path in documentation_pages()]


# --- python --------------------------------------------------------------------------


def demo_fleet() -> dict[str, object]:
    """The ``mcpServers`` file of the demo fleet: the bundled servers ``trunkline demo``
    starts (``trunkline.demo.demo_servers``: web, docs, and archive, the legacy one,
    allowlisted), on this interpreter."""
    from trunkline.demo import demo_servers

    servers: dict[str, object] = {}
    for server in demo_servers():
        entry: dict[str, object] = {"command": server.argv[0], "args": list(server.argv[1:])}
        if server.allow_legacy:
            entry["allowLegacy"] = True
        servers[server.name] = entry
    return {"mcpServers": servers}


def top_level_await(code: str) -> bool:
    """Whether ``code`` awaits outside any function (what a REPL allows, a script not)."""
    try:
        compile(code, "<example>", "exec")
    except SyntaxError:
        try:
            compile(code, "<example>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError:
            return False
        return True
    return False


def run_python(block: Block, folder: Path) -> str | None:
    """Run a Python example as a program in ``folder`` (which gets the demo fleet's
    ``mcp.json``); None if it exited 0 in time and left no process behind, else what
    went wrong."""
    if top_level_await(block.code):
        return ("top-level await: an example is a program; put its awaits in "
                "`async def main()` and end with `asyncio.run(main())`")
    (folder / "mcp.json").write_text(json.dumps(demo_fleet(), indent=2))
    script = folder / "example.py"
    script.write_text(block.code)
    tag = uuid.uuid4().hex
    # Its own configuration home: what an example keeps there (pins, tokens) is its own,
    # not written into the home of whoever runs the tests.
    env = {**os.environ, "TRUNKLINE_DOCS_EXAMPLE": tag,
           "XDG_CONFIG_HOME": str(folder / "config")}
    # Its output goes to a file, not a pipe: a process it leaves behind may hold the
    # output open, and the example's end is its own exit, not the output's.
    with open(folder / "output.txt", "wb") as output:
        process = subprocess.Popen([sys.executable, str(script)], cwd=folder, env=env,
                                   stdin=subprocess.DEVNULL, stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    try:
        process.wait(timeout=EXAMPLE_TIMEOUT_S)
        problem = None if process.returncode == 0 else f"exited {process.returncode}"
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        problem = f"still running after {EXAMPLE_TIMEOUT_S:g} s"
    left = _leftovers(tag)
    if left and problem is None:
        problem = "left processes running: " + ", ".join(left)
    if problem is None:
        return None
    tail = (folder / "output.txt").read_bytes().decode(errors="replace")[-4000:]
    return f"{block.id} (line {block.line}) {problem}; its output:\n{tail}"


def _leftovers(tag: str) -> list[str]:
    """The processes started with ``tag`` in their environment that are still alive once
    ``LEFTOVER_TIMEOUT_S`` has passed (killed then), as ``pid command``."""
    deadline = time.monotonic() + LEFTOVER_TIMEOUT_S
    while True:
        alive = dict(_tagged(tag))
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return [f"{pid} {command}" for pid, command in sorted(alive.items())]


def _tagged(tag: str) -> Iterator[tuple[int, str]]:
    needle = f"TRUNKLINE_DOCS_EXAMPLE={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        yield int(entry), command


# --- json ----------------------------------------------------------------------------


class _AnyVariable(Mapping[str, str]):
    """An environment in which every variable is set: a page's ``clientSecretEnv`` names a
    variable of the reader's machine, not of this one."""

    def __getitem__(self, key: str) -> str:
        return f"value-of-{key}"

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


def check_json(block: Block) -> str | None:
    """None if the block is valid JSON and, when it is an ``mcpServers`` file, a policy or
    an API key file, trunkline's reader of that kind accepts it; else why not."""
    from trunkline.config import read_host_config
    from trunkline.errors import ConfigurationError
    from trunkline.gateway.api_keys import read_api_keys
    from trunkline.policy import Policy, PolicyError

    try:
        value = json.loads(block.code)
    except json.JSONDecodeError as exc:
        return f"{block.id} (line {block.line}): not valid JSON: {exc}"
    where = f"{block.id} (line {block.line})"
    if isinstance(value, dict) and "mcpServers" in value:
        try:
            read_host_config(value, env=_AnyVariable())
        except ConfigurationError as exc:
            return f"{where}: the configuration reader refuses it: {exc}"
    elif isinstance(value, dict) and "rules" in value:
        try:
            Policy.compile(value, origin="the example")
        except PolicyError as exc:
            return f"{where}: the policy does not compile: {exc}"
    elif isinstance(value, dict) and "keys" in value:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "keys.json"
            path.write_text(block.code)
            try:
                read_api_keys(str(path), env={})
            except ConfigurationError as exc:
                return f"{where}: the API key file is refused: {str(exc).replace(str(path), 'it')}"
    return None


# --- console -------------------------------------------------------------------------


def trunkline_commands(code: str) -> list[list[str]]:
    """The arguments of every ``trunkline`` command in a console block (after the program
    name), in order."""
    commands = []
    joined = re.sub(r"\\\n", " ", code)  # continuation lines
    for line in joined.splitlines():
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            words = list(lexer)
        except ValueError:  # an unbalanced quote: not a command this can read
            continue
        if words and words[0] == "$":
            words = words[1:]
        for command in _split_commands(words):
            while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
                command = command[1:]  # VAR=value before the program
            if command and _PROGRAM.match(command[0]):
                commands.append(command[1:])
    return commands


def _split_commands(words: list[str]) -> Iterator[list[str]]:
    command: list[str] = []
    for word in words:
        if word and set(word) <= set(";&|"):
            yield command
            command = []
        else:
            command.append(word)
    yield command


def check_console(block: Block) -> str | None:
    """None if every ``trunkline`` command in the block parses with the CLI's parser,
    else the first that does not and argparse's complaint."""
    from trunkline.cli.commands import build_parser

    for args in trunkline_commands(block.code):
        complaint = io.StringIO()
        try:
            with contextlib.redirect_stderr(complaint), contextlib.redirect_stdout(io.StringIO()):
                build_parser().parse_args(args)
        except SystemExit as exc:
            if exc.code not in (0, None):  # --help and --version end the parse at 0
                return (f"{block.id} (line {block.line}): `trunkline {shlex.join(args)}` does "
                        f"not parse: {complaint.getvalue().strip()}")
    return None
