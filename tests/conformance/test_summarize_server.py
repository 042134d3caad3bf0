"""The server conformance gate (``summarize_server.py``) on made-up results: a check that
passes directly and is skipped through a gateway target fails that target's scenario
unless it is listed as not scored there, and such a listing goes stale when the check is
scored after all; a scenario the harness cannot score is listed as such and fails the
run once it is scored; extension scenarios are gated like any revision's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SUMMARIZE = Path(__file__).with_name("summarize_server.py")
REV, SCENARIO = "2026-07-28", "server-stateless"
PROMPTS = "sep-2575-server-sends-prompts-list-changed-on-subscription"


def results(tmp_path: Path, gateway_status: str) -> Path:
    """One scenario run against the three targets: two checks succeed everywhere but
    ``PROMPTS`` through the gateway, which has ``gateway_status``."""
    out = tmp_path / "out"
    rows = []
    for target in ("direct", "gateway", "legacy"):
        cell = out / REV / target / f"01-{SCENARIO}"
        cell.mkdir(parents=True)
        status = gateway_status if target == "gateway" else "SUCCESS"
        (cell / "checks.json").write_text(json.dumps([
            {"id": "sep-2575-server-implements-discover", "status": "SUCCESS"},
            {"id": PROMPTS, "status": status, "errorMessage": f"{PROMPTS} {status.lower()}"}]))
        rows.append(f"{REV}\t{SCENARIO}\t{target}\t0\t1000\t1\t{cell}")
    (out / "index.tsv").write_text("\n".join(rows) + "\n")
    (out / "scenarios.tsv").write_text(f"{REV}\t{SCENARIO}\n")
    (out / "notrun.tsv").write_text("")
    return out


def cells(tmp_path: Path, rev: str, scenario: str, checks: dict[str, list[dict]]) -> Path:
    """One scenario run against each target with the given checks (exit code 0)."""
    out = tmp_path / "out"
    rows = []
    for target, target_checks in checks.items():
        cell = out / rev / target / f"01-{scenario}"
        cell.mkdir(parents=True)
        (cell / "checks.json").write_text(json.dumps(target_checks))
        rows.append(f"{rev}\t{scenario}\t{target}\t0\t1000\t1\t{cell}")
    (out / "index.tsv").write_text("\n".join(rows) + "\n")
    (out / "scenarios.tsv").write_text(f"{rev}\t{scenario}\n")
    (out / "notrun.tsv").write_text("")
    return out


def summarize(out: Path, tmp_path: Path, gateway_gaps: str = "",
              untestable: str = "") -> tuple[int, str]:
    gaps, none, unscorable = (tmp_path / "gateway.txt", tmp_path / "none.txt",
                              tmp_path / "untestable.txt")
    gaps.write_text(gateway_gaps)
    none.write_text("")
    unscorable.write_text(untestable)
    done = subprocess.run([sys.executable, str(SUMMARIZE), str(out), "--known-gaps",
                           str(gaps), "--legacy-known-gaps", str(none),
                           "--untestable", str(unscorable)],
                          capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def test_a_check_skipped_through_the_gateway_is_a_regression(tmp_path):
    code, report = summarize(results(tmp_path, "SKIPPED"), tmp_path)
    assert code == 1, report
    assert f"not scored here, passed directly: {PROMPTS}" in report
    # and why, in the harness's words
    assert f"SKIPPED here (1 check(s) that passed directly): {PROMPTS} skipped" in report
    assert f"unexpected regression(s) through the gateway: {REV} {SCENARIO}" in report


def test_a_check_listed_as_not_scored_is_excused_until_it_is_scored(tmp_path):
    listed = f"{REV} {SCENARIO}/{PROMPTS}  the gateway declares no prompts.listChanged\n"
    code, report = summarize(results(tmp_path, "SKIPPED"), tmp_path, listed)
    assert code == 0, report
    assert "gateway 1/1" in report
    code, report = summarize(results(tmp_path / "scored", "SUCCESS"), tmp_path, listed)
    assert code == 1, report
    assert f"remove it from gateway.txt: {REV} {SCENARIO}/{PROMPTS}" in report


def test_every_target_passes_when_every_check_is_scored(tmp_path):
    code, report = summarize(results(tmp_path, "SUCCESS"), tmp_path)
    assert code == 0, report
    assert report.strip().splitlines()[-1].startswith(
        "conformance server: direct 1/1, gateway 1/1, legacy 1/1;")


NOTIFICATIONS = "tasks-status-notifications"
SKIPPED_ONLY = [{"id": NOTIFICATIONS, "status": "SKIPPED"}]
UNTESTABLE = f"extension {NOTIFICATIONS}  the harness SKIPs its one check\n"


def test_a_scenario_the_harness_cannot_score_is_listed_and_counted_apart(tmp_path):
    out = cells(tmp_path, "extension", NOTIFICATIONS,
                dict.fromkeys(("direct", "gateway", "legacy"), SKIPPED_ONLY))
    code, report = summarize(out, tmp_path)
    assert code == 1, report  # unlisted, it fails directly: nothing succeeded
    code, report = summarize(out, tmp_path, untestable=UNTESTABLE)
    assert code == 0, report
    assert report.strip().splitlines()[-1].endswith("; not scored by the harness: 1")
    assert "direct 0/0" in report


def test_an_untestable_scenario_scored_on_any_target_fails_the_run(tmp_path):
    scored = [{"id": NOTIFICATIONS, "status": "SUCCESS"}]
    out = cells(tmp_path, "extension", NOTIFICATIONS,
                {"direct": SKIPPED_ONLY, "gateway": scored, "legacy": SKIPPED_ONLY})
    code, report = summarize(out, tmp_path, untestable=UNTESTABLE)
    assert code == 1, report
    assert "SCORED (or the harness failed) on gateway" in report
    stale = "extension other-scenario  gone\n"
    out = cells(tmp_path / "stale", "extension", NOTIFICATIONS,
                dict.fromkeys(("direct", "gateway", "legacy"), SKIPPED_ONLY))
    code, report = summarize(out, tmp_path, untestable=UNTESTABLE + stale)
    assert code == 1, report
    assert "STALE, remove it from untestable.txt: extension other-scenario" in report


def test_an_extension_scenario_is_gated_like_a_revisions(tmp_path):
    passes = [{"id": "tasks-sync-tool-call", "status": "SUCCESS"}]
    fails = [{"id": "tasks-sync-tool-call", "status": "FAILURE"}]
    out = cells(tmp_path, "extension", "tasks-lifecycle",
                {"direct": passes, "gateway": fails, "legacy": passes})
    code, report = summarize(out, tmp_path)
    assert code == 1, report
    assert "unexpected regression(s) through the gateway: extension tasks-lifecycle" in report
    code, report = summarize(out, tmp_path, "extension tasks-lifecycle  no relay yet\n")
    assert code == 0, report
    assert "extension tasks-lifecycle: no relay yet" in report
