"""The server conformance gate (``summarize_server.py``) on made-up results: a check that
passes directly and is skipped through a gateway target fails that target's scenario
unless it is listed as not scored there, and such a listing goes stale when the check is
scored after all."""

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
            {"id": PROMPTS, "status": status}]))
        rows.append(f"{REV}\t{SCENARIO}\t{target}\t0\t1000\t1\t{cell}")
    (out / "index.tsv").write_text("\n".join(rows) + "\n")
    (out / "scenarios.tsv").write_text(f"{REV}\t{SCENARIO}\n")
    (out / "notrun.tsv").write_text("")
    return out


def summarize(out: Path, tmp_path: Path, gateway_gaps: str = "") -> tuple[int, str]:
    gaps, none = tmp_path / "gateway.txt", tmp_path / "none.txt"
    gaps.write_text(gateway_gaps)
    none.write_text("")
    done = subprocess.run([sys.executable, str(SUMMARIZE), str(out), "--known-gaps",
                           str(gaps), "--legacy-known-gaps", str(none)],
                          capture_output=True, text=True, check=False)
    return done.returncode, done.stdout + done.stderr


def test_a_check_skipped_through_the_gateway_is_a_regression(tmp_path):
    code, report = summarize(results(tmp_path, "SKIPPED"), tmp_path)
    assert code == 1, report
    assert f"not scored here, passed directly: {PROMPTS}" in report
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
