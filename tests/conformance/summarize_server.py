"""Summarize a tests/conformance/run_server.sh results directory: the CI gate.

    python3 tests/conformance/summarize_server.py <results-dir> [--known-gaps FILE]

Reads ``index.tsv`` (revision, scenario, target, harness exit code, milliseconds, whether
the target process was still alive afterwards, scenario dir: one row per scenario run per
target), each run's ``checks.json`` and harness log (``<scenario dir>.log``),
``scenarios.tsv`` (revision, scenario: every non-extension server scenario the harness
lists at each revision run), ``notrun.tsv`` (the extension scenarios left out), and the
known gateway gaps (default: gateway_known_gaps.txt beside this file; ``REVISION SCENARIO
reason`` lines, ``#`` comments). Prints, per revision, a table scenario x {direct, gateway};
then every failing cell's failing checks with the harness's error message; then the known
gaps; then the scenarios not run; and last exactly one line, ``conformance server: direct
N/M, gateway K/M; regressions through the gateway: R (known gaps: G, unexpected: U)``.

M counts (revision, scenario) pairs. A cell passes only if the harness exited 0, at least
one check succeeded and no check is FAILURE or WARNING (the harness itself exits 0 on
WARNING-only server runs). A regression is a pair that passes direct and fails
gateway; G of them are listed known gaps, U are not.

Exit status 1 (the gate) if any pair failed direct (then the comparison has no baseline
there: the fixture, the SDK or the harness changed, or the fixture died), if U > 0, if a
listed gap passes through the gateway (it is closed: its line must go, so the list never
hides a fixed gap), if a listed gap names no scenario the harness has at a revision that
ran, or if nothing ran; 2 if the known-gaps file is unreadable or malformed; else 0.
Standard library only.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

TARGETS = ("direct", "gateway")
COUNTED = ("SUCCESS", "FAILURE", "WARNING")
MESSAGE_CHARS = 300
KNOWN_GAPS = Path(__file__).with_name("gateway_known_gaps.txt")


@dataclass
class Cell:
    """One scenario run against one target."""

    rc: int
    seconds: float
    alive: bool
    checks: list[dict] | None
    log: str
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.counts = {k: sum(1 for c in self.checks or () if c.get("status") == k)
                       for k in COUNTED}

    @property
    def passed(self) -> bool:
        return (self.rc == 0 and self.counts["SUCCESS"] > 0
                and self.counts["FAILURE"] == 0 and self.counts["WARNING"] == 0)

    def label(self) -> str:
        scored = sum(self.counts.values())
        return f"{'PASS' if self.passed else 'FAIL'} {self.counts['SUCCESS']}/{scored}"

    def notes(self) -> list[str]:
        notes = []
        if self.rc in (124, 137):
            notes.append(f"harness killed by the per-scenario time limit (exit {self.rc})")
        elif self.checks is None:
            notes.append(f"harness exit {self.rc}, no checks.json: {last_line(self.log)[:200]}")
        if not self.alive:
            notes.append("the target process died during this scenario (restarted)")
        if "SKIPPED: scenario" in self.log:
            notes.append("harness skipped it as not applicable")
        if self.rc == 0 and not self.passed and self.checks is not None:
            notes.append("harness exit 0, but " + ("no check succeeded"
                         if self.counts["SUCCESS"] == 0 else "a check warned"))
        return notes

    def bad_checks(self) -> list[str]:
        out = []
        for c in self.checks or ():
            if c.get("status") in ("FAILURE", "WARNING"):
                message = " ".join(str(c.get("errorMessage") or c.get("description") or "")
                                   .split())
                if len(message) > MESSAGE_CHARS:
                    message = message[:MESSAGE_CHARS - 3] + "..."
                answer = result_text(c.get("details"))
                if answer:
                    message += f" [the call answered: {answer}]"
                out.append(f"{c.get('status')} {c.get('id')}: {message}")
        if not any(self.counts.values()):
            # Nothing scored: the harness's INFO notes say why (e.g. JSON, not SSE, came back).
            for c in self.checks or ():
                details = c.get("details")
                note = details.get("message") if isinstance(details, dict) else None
                if c.get("status") == "INFO" and isinstance(note, str):
                    out.append(f"INFO {c.get('id')}: {' '.join(note.split())[:MESSAGE_CHARS]}")
        return out


def result_text(details: object) -> str:
    """The first text block of the tools/call result a check recorded, if any: it often
    says why (e.g. a tool's own error when a server->client request never arrived)."""
    result = details.get("result") if isinstance(details, dict) else None
    content = result.get("content") if isinstance(result, dict) else None
    for block in content if isinstance(content, list) else ():
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            text = " ".join(block["text"].split())
            prefix = "isError: " if result.get("isError") else ""
            return prefix + (text[:157] + "..." if len(text) > 160 else text)
    return ""


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def last_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if any(ch.isalnum() for ch in line):
            return line.strip()
    return ""


def load_checks(scenario_dir: Path) -> list[dict] | None:
    """The run's checks, or None when the harness wrote none (crashed, killed, skipped)."""
    found = sorted(scenario_dir.rglob("checks.json"))
    if not found:
        return None
    try:
        checks = json.loads(found[-1].read_text())
    except (OSError, ValueError):
        return None
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else None


class GapsFileError(ValueError):
    """The known-gaps file cannot be read as REVISION SCENARIO reason lines."""


def load_known_gaps(path: Path) -> dict[tuple[str, str], str]:
    """(revision, scenario) -> reason, from ``REVISION SCENARIO  reason`` lines."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise GapsFileError(f"cannot read {path}: {exc}") from exc
    gaps: dict[tuple[str, str], str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(None, 2)
        if len(fields) < 3:
            raise GapsFileError(f"{path}:{number}: expected 'REVISION SCENARIO reason',"
                                f" got {line!r}")
        rev, scenario, reason = fields
        if (rev, scenario) in gaps:
            raise GapsFileError(f"{path}:{number}: {rev} {scenario} is listed twice")
        gaps[(rev, scenario)] = reason
    return gaps


def load_scenarios(out: Path) -> dict[str, set[str]]:
    """revision -> every non-extension server scenario the harness lists there."""
    known: dict[str, set[str]] = {}
    for line in read_text(out / "scenarios.tsv").splitlines():
        if line:
            rev, scenario = line.split("\t")
            known.setdefault(rev, set()).add(scenario)
    return known


def load(out: Path) -> dict[str, dict[str, dict[str, Cell]]]:
    """revision -> scenario -> target -> Cell, in run order."""
    table: dict[str, dict[str, dict[str, Cell]]] = {}
    for line in read_text(out / "index.tsv").splitlines():
        if not line:
            continue
        rev, scenario, target, rc, ms, alive, scenario_dir = line.split("\t")
        path = Path(scenario_dir)
        table.setdefault(rev, {}).setdefault(scenario, {})[target] = Cell(
            rc=int(rc), seconds=int(ms) / 1000, alive=alive == "1",
            checks=load_checks(path), log=read_text(Path(scenario_dir + ".log")))
    return table


def main(argv: list[str]) -> int:
    args = argv[1:]
    gaps_path = KNOWN_GAPS
    if len(args) == 3 and args[1] == "--known-gaps":
        gaps_path = Path(args[2])
    elif len(args) != 1:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = Path(args[0])
    try:
        known_gaps = load_known_gaps(gaps_path)
    except GapsFileError as exc:
        print(f"conformance server: ERROR: known gaps: {exc}", file=sys.stderr)
        return 2
    table = load(out)
    scenarios = load_scenarios(out)
    not_run = [line for line in read_text(out / "notrun.tsv").splitlines() if line]

    pairs, passed = 0, {t: 0 for t in TARGETS}
    regressions: list[tuple[str, str]] = []
    closed_gaps: list[tuple[str, str]] = []  # listed, yet passing through the gateway
    failing: list[tuple[str, str, str, Cell]] = []
    width = max([len(s) for rows in table.values() for s in rows] + [30])
    for rev, rows in table.items():
        print(f"== {rev}: {len(rows)} server scenario(s)")
        print(f"   {'scenario':<{width}}  {'direct':<12}  {'gateway':<12}")
        for scenario, cells in rows.items():
            pairs += 1
            labels = []
            for t in TARGETS:
                cell = cells.get(t)
                labels.append(cell.label() if cell else "NOT RUN")
                if cell and cell.passed:
                    passed[t] += 1
                elif cell:
                    failing.append((rev, scenario, t, cell))
            direct, gateway = cells.get("direct"), cells.get("gateway")
            listed = (rev, scenario) in known_gaps
            mark = ""
            if direct and direct.passed and not (gateway and gateway.passed):
                regressions.append((rev, scenario))
                mark = "  KNOWN GAP" if listed else "  REGRESSION"
            elif listed and gateway and gateway.passed:
                closed_gaps.append((rev, scenario))
                mark = "  KNOWN GAP NOW PASSES"
            print(f"   {scenario:<{width}}  {labels[0]:<12}  {labels[1]:<12}{mark}")
    if failing:
        print("== failing cells: the checks that failed or warned (harness messages)")
    for rev, scenario, target, cell in failing:
        known = "  [known gap]" if target == "gateway" and (rev, scenario) in known_gaps else ""
        print(f"-- {rev} {scenario} [{target}] {cell.label()} ({cell.seconds:.1f}s){known}")
        for line in cell.notes() + cell.bad_checks():
            print(f"     {line}")

    # Every listed gap is accounted for: failing as known, closed, not a scenario, not run.
    gating_gaps = [g for g in regressions if g in known_gaps]
    unexpected = [g for g in regressions if g not in known_gaps]
    stale: list[str] = []
    not_run_gaps: list[str] = []
    for rev, scenario in known_gaps:
        ran = table.get(rev, {}).get(scenario)
        if ran is not None:
            continue
        if rev in table and scenario not in scenarios.get(rev, set()):
            stale.append(f"{rev} {scenario}: not a server scenario the harness runs at {rev}")
        else:
            not_run_gaps.append(f"{rev} {scenario}")
    print(f"== known gaps (not gating): {len(gating_gaps)}"
          f" (listed in {gaps_path.name}: {len(known_gaps)})")
    for rev, scenario in gating_gaps:
        print(f"   {rev} {scenario}: {known_gaps[(rev, scenario)]}")
    for rev, scenario in closed_gaps:
        print(f"   NOW PASSES through the gateway, remove it from {gaps_path.name}:"
              f" {rev} {scenario}")
    for line in stale:
        print(f"   STALE, remove it from {gaps_path.name}: {line}")
    for rev, scenario in known_gaps:
        direct = table.get(rev, {}).get(scenario, {}).get("direct")
        if direct is not None and not direct.passed:
            print(f"   fails directly too (no baseline): {rev} {scenario}")
    if not_run_gaps:
        print(f"   not run this time: {', '.join(not_run_gaps)}")
    if not_run:
        print(f"== not run: {len(not_run)} extension scenario(s) (tasks-*, sep-2640-skills-*;"
              f" not in any requirement set): {', '.join(not_run)}")
    if not table:
        print("conformance server: no scenario ran")
    direct_failed = pairs - passed["direct"]
    if direct_failed:
        print(f"conformance server: {direct_failed} scenario(s) fail directly, so the "
              "gateway has no baseline there (see the failing cells)")
    if unexpected:
        print("conformance server: unexpected regression(s) through the gateway: "
              + ", ".join(f"{rev} {scenario}" for rev, scenario in unexpected))
    if closed_gaps or stale:
        print(f"conformance server: {len(closed_gaps) + len(stale)} listed known gap(s) to "
              f"remove from {gaps_path} (see above)")
    print(f"conformance server: direct {passed['direct']}/{pairs}, gateway "
          f"{passed['gateway']}/{pairs}; regressions through the gateway: {len(regressions)}"
          f" (known gaps: {len(gating_gaps)}, unexpected: {len(unexpected)})")
    ok = table and not direct_failed and not unexpected and not closed_gaps and not stale
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
