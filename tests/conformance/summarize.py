"""Summarize a tests/conformance/run.sh results directory.

    python3 tests/conformance/summarize.py <results-dir>

Reads ``index.tsv`` (revision, scenario, harness exit code, milliseconds, scenario dir:
one row per scenario run), each scenario's ``checks.json``, the harness log
(``<scenario dir>.log``) and the client's ``stderr.txt``. Prints one line per scenario,
and last exactly

    conformance: N passed, M failed

The verdict of a scenario is the harness's exit code: 0 passes. The harness fails a
scenario on any FAILURE or WARNING check, a client timeout, or a non-zero client exit
(unless the scenario expects the client to refuse). Two harness passes count as failures
here, because nothing was tested: a scenario the harness skipped as not applicable, and
one without a single SUCCESS check (`initialize` passes a client that never connects).
Exit status 1 if any scenario failed or none ran. Standard library only.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

COUNTED = ("SUCCESS", "FAILURE", "WARNING")


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def load_checks(scenario_dir: Path) -> list[dict] | None:
    """The scenario's checks, or None when the harness wrote none (it crashed, was
    killed, or skipped the scenario)."""
    found = sorted(scenario_dir.rglob("checks.json"))
    if not found:
        return None
    try:
        checks = json.loads(found[-1].read_text())
    except (OSError, ValueError):
        return None
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else None


def last_line(text: str) -> str:
    """The last line that says something: traceback frames of exception groups are
    drawn with ``|`` and ``+---`` borders, which are stripped or skipped."""
    for line in reversed(text.splitlines()):
        line = line.strip().lstrip("|+ ").strip()
        if any(ch.isalnum() for ch in line):
            return line
    return ""


def notes_for(rc: int, log: str, scenario_dir: Path, checks: list[dict] | None) -> list[str]:
    notes = []
    if rc == 124 or rc == 137:
        notes.append(f"harness killed by the per-scenario time limit (exit {rc})")
    elif rc != 0 and checks is None:
        notes.append(f"harness exit {rc}, no checks.json: {last_line(log)[:160]}")
    if "SKIPPED: scenario" in log:
        notes.append("harness skipped it as not applicable")
    if "CLIENT TIMED OUT" in log:
        notes.append("client timed out (30 s)")
    m = re.search(r"^Client exited with code (-?\d+)", log, re.MULTILINE)
    if m:
        allowed = "CLIENT EXITED WITH ERROR" not in log and "CLIENT TIMED OUT" not in log
        notes.append(f"client exit {m.group(1)}" + (" (allowed: scenario expects refusal)"
                                                     if allowed else ""))
    stderr = b""
    for path in sorted(scenario_dir.rglob("stderr.txt")):
        stderr = path.read_bytes()
    reason = last_line(stderr.decode(errors="replace"))
    if reason and (rc != 0 or m):
        notes.append(f"client said: {reason[:200]}")
    return notes


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = Path(argv[1])
    rows = [line.split("\t") for line in read_text(out / "index.tsv").splitlines() if line]

    passed = failed = 0
    width = max([len(f"{r[0]} {r[1]}") for r in rows] + [20])
    for rev, scenario, rc_text, ms, scenario_dir in rows:
        rc = int(rc_text)
        path = Path(scenario_dir)
        log = read_text(Path(scenario_dir + ".log"))
        checks = load_checks(path)
        counts = {k: sum(1 for c in checks or () if c.get("status") == k) for k in COUNTED}
        # A harness pass with no successful check at all means nothing was tested
        # (seen: `initialize` passes a client that never connects): not a pass here.
        vacuous = rc == 0 and counts["SUCCESS"] == 0
        ok = rc == 0 and "SKIPPED: scenario" not in log and not vacuous
        passed += ok
        failed += not ok
        bad = sorted({str(c.get("id")) for c in checks or ()
                      if c.get("status") in ("FAILURE", "WARNING")})
        line = (f"{'PASS' if ok else 'FAIL'} {f'{rev} {scenario}':<{width}}  "
                f"success={counts['SUCCESS']} failure={counts['FAILURE']} "
                f"warning={counts['WARNING']}  {int(ms) / 1000:.1f}s")
        if not ok:
            line += f"  rc={rc}"
        if bad:
            line += f"  failing: {','.join(bad)}"
        notes = notes_for(rc, log, path, checks)
        if vacuous and "SKIPPED: scenario" not in log:
            notes.insert(0, "harness passed it, but no check succeeded: nothing was tested")
        if notes:
            line += "  [" + "; ".join(notes) + "]"
        print(line)
    if not rows:
        print("conformance: no scenario ran")
    print(f"conformance: {passed} passed, {failed} failed")
    return 0 if rows and failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
