"""The command line, run as a user runs it: a subprocess, its output and exit code."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time

import orjson
import pytest

from conftest import PEERS


def trunkline(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trunkline", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "alpha": {"command": sys.executable, "args": [str(PEERS / "scripted.py")]},
        "beta": {"command": sys.executable, "args": [str(PEERS / "scripted.py"),
                                                      "--name", "beta-peer"]},
    }}))
    return path


def test_demo_json_shows_verdicts_catalog_routing_and_a_restart(no_leaks):
    done = trunkline("demo", "--json")
    assert done.returncode == 0, done.stderr
    doc = orjson.loads(done.stdout)
    servers = {s["name"]: s for s in doc["servers"]}
    assert (servers["web"]["era"], servers["docs"]["era"]) == ("modern", "modern")
    assert servers["archive"]["era"] == "legacy"
    assert servers["archive"]["version"] == "2025-11-25"
    assert any("-32601" in line for line in servers["archive"]["evidence"])
    assert servers["unlisted"]["state"] == "unavailable"
    assert "allow_legacy=False" in servers["unlisted"]["reason"]
    tools = {t["name"]: (t["server"], t["local_name"]) for t in doc["tools"]}
    assert tools["web_search"] == ("web", "search")
    assert tools["docs_search"] == ("docs", "search")
    assert tools["archive_search"] == ("archive", "search")
    assert all(server != "unlisted" for server, _ in tools.values())
    routed = {c["name"]: c["server"] for c in doc["calls"]}
    assert routed == {"web_search": "web", "docs_search": "docs", "summarize": "docs",
                      "lookup": "archive", "archive_search": "archive"}
    assert not any(c["is_error"] for c in doc["calls"])
    restart = doc["restart"]
    assert restart["state"] == "ready" and restart["restarts"] == 1
    assert restart["new_pid"] != restart["killed_pid"]
    assert restart["call"]["server"] == "docs" and restart["call"]["text"]


def test_demo_renders_for_a_terminal(no_leaks):
    done = trunkline("demo")
    assert done.returncode == 0, done.stderr
    for expected in ("Era verdicts", "merged catalog", "docs_search", "unavailable",
                     "restart"):
        assert expected in done.stdout


def test_probe_tools_and_call(config, no_leaks):
    probed = trunkline("probe", str(config), "--json")
    assert probed.returncode == 0, probed.stderr
    assert [(s["name"], s["era"]) for s in orjson.loads(probed.stdout)] == [
        ("alpha", "modern"), ("beta", "modern")]
    listed = trunkline("tools", str(config), "--json")
    names = [t["name"] for t in orjson.loads(listed.stdout)]
    assert "alpha_echo" in names and "beta_echo" in names
    called = trunkline("call", str(config), "beta_echo", '{"hello": "world"}', "--json")
    assert called.returncode == 0, called.stderr
    result = orjson.loads(called.stdout)
    assert result["server"] == "beta" and orjson.loads(result["text"]) == {"hello": "world"}


def test_probe_ends_when_the_reader_of_its_progress_goes_away(config, no_leaks):
    """``trunkline probe mcp.json 2>&1 >/dev/null | head -1``: its progress lines go to
    a pipe whose reader leaves after the first; the servers' verdicts still come and the
    command ends (it used to wait forever, a server's start stopped half-way)."""
    proc = subprocess.Popen([sys.executable, "-m", "trunkline", "probe", str(config)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    proc.stderr.readline()
    proc.stderr.close()  # the reader goes: the next progress line meets a broken pipe
    try:
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_probe_exit_code_names_unavailable_servers(tmp_path, no_leaks):
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "old": {"command": sys.executable, "args": [str(PEERS / "scripted.py"), "--era",
                                                     "legacy"]}}}))
    done = trunkline("probe", str(path))
    assert done.returncode == 3
    assert done.stderr.strip().splitlines()[-1] == "trunkline: 1 of 1 servers unavailable: old"


def test_probe_shows_time_to_verdict_and_the_stderr_tail_of_a_refused_server(tmp_path,
                                                                             no_leaks):
    """Issue 11, defect 8: how long each verdict took, and what a refused server said on
    stderr, in the table and in --json; --discover-timeout sets the probe deadline."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "new": {"command": sys.executable, "args": [str(PEERS / "scripted.py")]},
        "old": {"command": sys.executable, "args": [str(PEERS / "scripted.py"), "--era",
                                                     "legacy", "-v"]},
        "mute": {"command": sys.executable, "args": [str(PEERS / "scripted.py"),
                                                      "--discover", "silence"]}}}))
    done = trunkline("probe", str(path), "--json", "--discover-timeout", "0.5")
    assert done.returncode == 3
    statuses = {s["name"]: s for s in orjson.loads(done.stdout)}
    assert all(s["time_to_verdict_s"] > 0 for s in statuses.values())
    assert statuses["mute"]["time_to_verdict_s"] >= 0.5
    assert "no answer within 0.5 s" in "\n".join(statuses["mute"]["evidence"])
    assert "scripted[" in statuses["old"]["stderr_tail"]
    assert statuses["new"]["in_flight"] == 0 and statuses["new"]["late_replies"] == 0
    table = trunkline("probe", str(path), "--discover-timeout", "0.5")
    assert table.returncode == 3
    assert "verdict in" in table.stdout and "stderr:" in table.stdout
    assert "scripted[" in table.stdout


def test_probe_and_call_say_how_to_allowlist_a_server_refused_for_want_of_it(tmp_path,
                                                                             no_leaks):
    """Issue 35, item 7: a legacy-only server configured without allowLegacy. probe shows
    the hint (the table and --json); call logs it once and its one error line names the
    servers that may provide the tool, and why they are unavailable. A modern server
    refused for another reason (no revision in common) gets no hint."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "old": {"command": sys.executable, "args": [str(PEERS / "scripted.py"), "--era",
                                                     "legacy"]},
        "new": {"command": sys.executable, "args": [str(PEERS / "scripted.py"),
                                                     "--discover", "error-32022:2099-01-01"]},
    }}))
    probed = trunkline("probe", str(path), "--json")
    assert probed.returncode == 3
    statuses = {s["name"]: s for s in orjson.loads(probed.stdout)}
    hint = statuses["old"]["hint"]
    assert hint.startswith("it answered server/discover with error -32601 'Method not found'")
    assert '"allowLegacy": true to its entry' in hint
    assert statuses["new"]["hint"] is None
    table = trunkline("probe", str(path))
    assert table.returncode == 3
    assert "hint: it answered" in table.stdout and '"allowLegacy": true' in table.stdout
    called = trunkline("call", str(path), "echo", "{}")
    assert called.returncode == 1
    lines = called.stderr.strip().splitlines()
    assert [line for line in lines if "allowLegacy" in line and line.startswith("server")] \
        == [f"server 'old': unavailable: {hint}"]
    assert lines[-1].startswith(
        f"trunkline: no tool named 'echo' in the catalog; server 'old' is unavailable "
        f"({hint}) and may provide it; server 'new' is unavailable (era refused: no shared "
        "modern protocol version")


def test_discover_timeout_must_be_positive(config, no_leaks):
    done = trunkline("probe", str(config), "--discover-timeout", "0")
    assert done.returncode == 2 and "positive number of seconds" in done.stderr


def test_serve_caps_how_long_a_silent_server_is_waited_for(tmp_path, no_leaks):
    """``serve --max-discover-timeout``: a server that reads nothing for 1 s on every
    start is probed again and again, each probe waiting twice as long as the last but
    never past the cap, and each re-probe's deadline is in the log."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"slow": {
        "command": sys.executable,
        "args": [str(PEERS / "scripted.py"), "--startup-delay", "1.0"]}}}))
    announced: list[str] = []
    with subprocess.Popen(
            [sys.executable, "-m", "trunkline", "serve", str(path), "--stdio",
             "--discover-timeout", "0.4", "--max-discover-timeout", "0.8"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True) as serve:
        assert serve.stdin is not None and serve.stderr is not None
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(line) for line in serve.stderr])
        reader.start()
        deadline = time.monotonic() + 60
        try:
            while len(announced) < 3:  # the re-probes go on until stdin closes
                line = lines.get(timeout=max(deadline - time.monotonic(), 0))
                if "waiting up to" in line:
                    announced.append(line.rsplit("waiting up to ", 1)[1].strip())
        finally:
            serve.stdin.close()
            assert serve.wait(60) == 0
            reader.join()
    assert announced == ["0.8 s"] * 3


@pytest.mark.parametrize("args,code,message", [
    (("call", "{config}", "nope", "{}"), 1, "no tool named 'nope'"),
    (("call", "{config}", "echo", "[1]"), 2, "must be a JSON object"),
    (("call", "{config}", "echo", "{bad"), 2, "not valid JSON"),
    (("tools", "/nonexistent/mcp.json"), 2, "cannot read"),
])
def test_errors_are_one_line_with_a_nonzero_exit(config, args, code, message, no_leaks):
    done = trunkline(*(a.replace("{config}", str(config)) for a in args))
    assert done.returncode == code, (done.returncode, done.stderr)
    assert message in done.stderr
    # One line of error, after the servers' progress lines (stderr is piped: plain lines).
    errors = [line for line in done.stderr.strip().splitlines()
              if not line.startswith("server ")]
    assert errors == [done.stderr.strip().splitlines()[-1]]


@pytest.mark.real_servers
def test_probe_lists_the_extensions_each_server_declared(tmp_path, no_leaks):
    import realpeers

    fastmcp = realpeers.require(realpeers.FASTMCP_SKILLS)
    skill = tmp_path / "skills" / "git-workflow"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: git-workflow\ndescription: d\n---\n")
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "skills": {"command": fastmcp.argv[0],
                   "args": [*fastmcp.argv[1:], "--skills", str(tmp_path / "skills")]},
        "plain": {"command": sys.executable, "args": [str(PEERS / "scripted.py")]}}}))
    probed = trunkline("probe", str(path), "--json")
    assert probed.returncode == 0, probed.stderr
    assert {s["name"]: s["extensions"] for s in orjson.loads(probed.stdout)} == {
        "skills": ["io.modelcontextprotocol/ui", "io.modelcontextprotocol/skills"],
        "plain": []}
    shown = subprocess.run([sys.executable, "-m", "trunkline", "probe", str(path)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "300"})  # a row on one line
    assert "extensions: io.modelcontextprotocol/ui, io.modelcontextprotocol/skills" in \
        shown.stdout, shown.stdout
