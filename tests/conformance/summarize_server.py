"""Summarize a tests/conformance/run_server.sh results directory: the CI gate.

    python3 tests/conformance/summarize_server.py <results-dir> [--known-gaps FILE]
        [--legacy-known-gaps FILE] [--untestable FILE]

Reads ``index.tsv`` (revision, scenario, target, harness exit code, milliseconds, whether
the target process was still alive afterwards, scenario dir: one row per scenario run per
target), each run's ``checks.json`` and harness log (``<scenario dir>.log``),
``scenarios.tsv`` (revision, scenario: every server scenario the harness lists at each
revision run; the extension scenarios under the pseudo-revision ``extension``),
``notrun.tsv`` (the extension scenarios, when they were left out), the known gaps of each
target compared with ``direct`` (``REVISION SCENARIO reason`` lines, ``#`` comments):
``gateway`` (``trunkline serve`` before our fixture; default: gateway_known_gaps.txt
beside this file) and ``legacy`` (``trunkline serve`` before the real, legacy
server-everything; default: legacy_upstream_known_gaps.txt), and the scenarios the harness
cannot score (same format; default: harness_untestable.txt). Prints, per revision, a table
scenario x {direct, gateway, legacy}; then every failing cell's failing checks with the
harness's error message; then the known gaps; then the scenarios not run or not scored;
and last exactly one line, ``conformance server: direct N/M, gateway K/M, legacy L/M;
regressions through the gateway: R (known gaps: G, unexpected: U); before
server-everything: R' (known gaps: G', unexpected: U')`` (then ``; not scored by the
harness: S`` when S > 0).

M counts (revision, scenario) pairs. A cell passes only if the harness exited 0, at least
one check succeeded and no check is FAILURE or WARNING (the harness itself exits 0 on
WARNING-only server runs); a gateway or legacy cell also needs every check that succeeded
directly to have been scored there (one SKIPPED, or missing, there was not tested: the
harness skips what the server does not declare). A regression is a pair that passes
direct and fails through a target; G of them are listed known gaps, U are not. A pair
listed as untestable is not in M: it must score nothing on every target (no check
SUCCESS, FAILURE or WARNING, harness exit 0); S counts them.

Exit status 1 (the gate) if any pair failed direct (then the comparison has no baseline
there: the fixture, the SDK or the harness changed, or the fixture died), if U > 0 for
either target, if a listed gap passes (it is closed: its line must go, so the list never
hides a fixed gap), if a listed gap or untestable scenario names no scenario the harness
has at a revision that ran, if an untestable scenario had a check scored (or its harness
run failed) on any target, or if nothing ran; 2 if a list file is unreadable or
malformed; else 0. Standard library only.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

TARGETS = ("direct", "gateway", "legacy")
#: The targets compared with ``direct``: how the summary names each, its known-gaps
#: option and default file.
THROUGH = {
    "gateway": ("through the gateway", "--known-gaps",
                Path(__file__).with_name("gateway_known_gaps.txt")),
    "legacy": ("before server-everything", "--legacy-known-gaps",
               Path(__file__).with_name("legacy_upstream_known_gaps.txt")),
}
#: The scenarios the pinned harness runs but cannot score: its option and default file.
UNTESTABLE = ("--untestable", Path(__file__).with_name("harness_untestable.txt"))
COUNTED = ("SUCCESS", "FAILURE", "WARNING")
MESSAGE_CHARS = 300


@dataclass
class Cell:
    """One scenario run against one target."""

    rc: int
    seconds: float
    alive: bool
    checks: list[dict] | None
    log: str
    counts: dict[str, int] = field(init=False)
    #: Checks that succeeded directly but were not scored here (``compare``).
    lost: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.counts = {k: sum(1 for c in self.checks or () if c.get("status") == k)
                       for k in COUNTED}

    def compare(self, direct: Cell, excused: Iterable[str] = ()) -> list[str]:
        """Note every check that succeeded against ``direct`` and was skipped (or not
        run) here, unless ``excused`` (listed, with the reason): this target was not
        tested there, so it cannot pass. Returns the excused checks that are wrongly so:
        scored here after all, or not a check that succeeded directly."""
        scored = {c.get("id") for c in self.checks or () if c.get("status") in COUNTED}
        succeeded = [c.get("id") for c in direct.checks or () if c.get("status") == "SUCCESS"]
        excused = set(excused)
        self.lost = [check for check in succeeded
                     if check not in scored and check not in excused]
        return sorted(check for check in excused if check in scored or check not in succeeded)

    @property
    def unscored(self) -> bool:
        """The harness ran to its end and scored no check (each SKIPPED or INFO)."""
        return self.rc == 0 and self.checks is not None and not any(self.counts.values())

    @property
    def passed(self) -> bool:
        return (self.rc == 0 and self.counts["SUCCESS"] > 0 and not self.lost
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
        if self.lost:
            notes.append("not scored here, passed directly: " + ", ".join(self.lost))
        elif self.rc == 0 and not self.passed and self.checks is not None:
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
        # Why the checks that passed directly were not scored here: the harness's reasons.
        skipped = Counter(" ".join(str(c.get("errorMessage") or "").split())[:MESSAGE_CHARS]
                          for c in self.checks or ()
                          if c.get("status") == "SKIPPED" and c.get("id") in self.lost)
        for reason, n in skipped.items():
            out.append(f"SKIPPED here ({n} check(s) that passed directly): {reason}")
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
    """(revision, scenario) -> reason, from ``REVISION SCENARIO  reason`` lines; the
    scenario may be ``SCENARIO/CHECK``: that check, which succeeds directly, is not scored
    there (the rest of the scenario must pass)."""
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


def parse_args(args: list[str]) -> tuple[Path, dict[str, Path], Path] | None:
    """The results directory, each target's known-gaps file and the untestable file;
    None if malformed."""
    if not args:
        return None
    out, rest = Path(args[0]), args[1:]
    gaps = {target: default for target, (_, _, default) in THROUGH.items()}
    options = {option: target for target, (_, option, _) in THROUGH.items()}
    untestable = UNTESTABLE[1]
    while rest:
        if len(rest) < 2 or (rest[0] not in options and rest[0] != UNTESTABLE[0]):
            return None
        if rest[0] == UNTESTABLE[0]:
            untestable = Path(rest[1])
        else:
            gaps[options[rest[0]]] = Path(rest[1])
        rest = rest[2:]
    return out, gaps, untestable


@dataclass
class Through:
    """One target compared with ``direct``: its known gaps and how they fared."""

    target: str
    path: Path
    #: (revision, scenario) -> reason, and (revision, "scenario/check") -> reason.
    listed: dict[tuple[str, str], str]
    regressions: list[tuple[str, str]] = field(default_factory=list)
    #: Listed, yet passing there (or the check listed as not scored is scored).
    closed: list[tuple[str, str]] = field(default_factory=list)

    @property
    def known(self) -> dict[tuple[str, str], str]:
        """The scenarios that may fail there."""
        return {key: why for key, why in self.listed.items() if "/" not in key[1]}

    def unscored(self, rev: str, scenario: str) -> list[str]:
        """The checks of ``scenario`` listed as not scored there."""
        return [key[1].split("/", 1)[1] for key in self.listed
                if key[0] == rev and key[1].startswith(scenario + "/")]

    @property
    def unexpected(self) -> list[tuple[str, str]]:
        return [g for g in self.regressions if g not in self.known]

    @property
    def gating(self) -> list[tuple[str, str]]:
        return [g for g in self.regressions if g in self.known]


def main(argv: list[str]) -> int:
    parsed = parse_args(argv[1:])
    if parsed is None:
        print("\n".join(__doc__.strip().splitlines()[2:4]), file=sys.stderr)
        return 2
    out, gap_paths, untestable_path = parsed
    try:
        through = {target: Through(target, path, load_known_gaps(path))
                   for target, path in gap_paths.items()}
        untestable = load_known_gaps(untestable_path)
    except GapsFileError as exc:
        print(f"conformance server: ERROR: known gaps: {exc}", file=sys.stderr)
        return 2
    table = load(out)
    scenarios = load_scenarios(out)
    not_run = [line for line in read_text(out / "notrun.tsv").splitlines() if line]

    pairs, passed = 0, {t: 0 for t in TARGETS}
    #: untestable pairs that ran, and those of them that were scored after all
    unscored: list[tuple[str, str]] = []
    scored: list[tuple[str, str, list[str]]] = []
    ran = {t for rows in table.values() for cells in rows.values() for t in cells}
    for rev, rows in table.items():
        for scenario, cells in rows.items():
            if (rev, scenario) in untestable:
                continue
            for t, ours in through.items():
                if "direct" in cells and t in cells:
                    wrongly = cells[t].compare(cells["direct"], ours.unscored(rev, scenario))
                    ours.closed += [(rev, f"{scenario}/{check}") for check in wrongly]
    failing: list[tuple[str, str, str, Cell]] = []
    width = max([len(s) for rows in table.values() for s in rows] + [30])
    for rev, rows in table.items():
        print(f"== {rev}: {len(rows)} server scenario(s)")
        print(f"   {'scenario':<{width}}" + "".join(f"  {t:<12}" for t in TARGETS))
        for scenario, cells in rows.items():
            if (rev, scenario) in untestable:
                unscored.append((rev, scenario))
                wrong = [t for t, cell in cells.items() if not cell.unscored]
                if wrong:
                    scored.append((rev, scenario, wrong))
                labels = [("NOT SCORED" if cells[t].unscored else "SCORED")
                          if t in cells else "NOT RUN" for t in TARGETS]
                print(f"   {scenario:<{width}}" + "".join(f"  {label:<12}" for label in labels)
                      + ("  UNTESTABLE, YET SCORED" if wrong else "  untestable (harness)"))
                continue
            pairs += 1
            labels, marks = [], []
            for t in TARGETS:
                cell = cells.get(t)
                labels.append(cell.label() if cell else "NOT RUN")
                if cell and cell.passed:
                    passed[t] += 1
                elif cell:
                    failing.append((rev, scenario, t, cell))
            direct = cells.get("direct")
            for t, ours in through.items():
                if t not in ran:
                    continue  # not part of this run
                cell, listed = cells.get(t), (rev, scenario) in ours.known
                if direct and direct.passed and not (cell and cell.passed):
                    ours.regressions.append((rev, scenario))
                    marks.append(f"{t}: {'known gap' if listed else 'REGRESSION'}")
                elif listed and cell and cell.passed:
                    ours.closed.append((rev, scenario))
                    marks.append(f"{t}: KNOWN GAP NOW PASSES")
            print(f"   {scenario:<{width}}" + "".join(f"  {label:<12}" for label in labels)
                  + (f"  {'; '.join(marks)}" if marks else ""))
    if failing:
        print("== failing cells: the checks that failed or warned (harness messages)")
    for rev, scenario, target, cell in failing:
        ours = through.get(target)
        known = "  [known gap]" if ours and (rev, scenario) in ours.known else ""
        print(f"-- {rev} {scenario} [{target}] {cell.label()} ({cell.seconds:.1f}s){known}")
        for line in cell.notes() + cell.bad_checks():
            print(f"     {line}")

    # Every listed gap is accounted for: failing as known, closed, not a scenario, not run.
    stale: list[str] = []
    for ours in through.values():
        name = ours.path.name
        not_run_gaps: list[str] = []
        print(f"== known gaps {THROUGH[ours.target][0]} (not gating): {len(ours.gating)}"
              f" (listed in {name}: {len(ours.listed)})")
        for rev, scenario in ours.gating:
            print(f"   {rev} {scenario}: {ours.known[(rev, scenario)]}")
        for (rev, listed), why in ours.listed.items():
            if "/" in listed and (rev, listed) not in ours.closed and \
                    table.get(rev, {}).get(listed.split("/")[0], {}).get(ours.target):
                print(f"   {rev} {listed} (not scored there): {why}")
        for rev, listed in ours.closed:
            print(f"   NOW PASSES (or is scored, or never succeeds directly), remove it "
                  f"from {name}: {rev} {listed}")
        for rev, listed in ours.listed:
            scenario = listed.split("/", 1)[0]
            if table.get(rev, {}).get(scenario, {}).get(ours.target) is not None:
                direct = table[rev][scenario].get("direct")
                if direct is not None and not direct.passed:
                    print(f"   fails directly too (no baseline): {rev} {scenario}")
            elif rev in table and scenario not in scenarios.get(rev, set()):
                stale.append(f"{name}: {rev} {listed}")
                print(f"   STALE, remove it from {name}: {rev} {listed}: not a server "
                      f"scenario the harness runs at {rev}")
            else:
                not_run_gaps.append(f"{rev} {listed}")
        if not_run_gaps:
            print(f"   not run this time: {', '.join(not_run_gaps)}")
    stale_untestable = [f"{untestable_path.name}: {rev} {scenario}"
                        for rev, scenario in untestable
                        if rev in table and scenario not in scenarios.get(rev, set())]
    if untestable:
        print(f"== not scored by the harness (listed in {untestable_path.name}): "
              f"{len(unscored)}")
    for rev, scenario in unscored:
        print(f"   {rev} {scenario}: {untestable[(rev, scenario)]}")
    for rev, scenario, wrong in scored:
        print(f"   SCORED (or the harness failed) on {', '.join(wrong)}, so the harness tests "
              f"it now: remove it from {untestable_path.name} and see its checks: "
              f"{rev} {scenario}")
        for t in wrong:
            for line in table[rev][scenario][t].notes() + table[rev][scenario][t].bad_checks():
                print(f"     [{t}] {line}")
    for line in stale_untestable:
        print(f"   STALE, remove it from {line}: not a server scenario the harness runs")
    if not_run:
        print(f"== not run: {len(not_run)} extension scenario(s) (tasks-*, sep-2640-skills-*;"
              f" not in any requirement set): {', '.join(not_run)}")
    if not table:
        print("conformance server: no scenario ran")
    direct_failed = pairs - passed["direct"]
    if direct_failed:
        print(f"conformance server: {direct_failed} scenario(s) fail directly, so the "
              "other targets have no baseline there (see the failing cells)")
    closed = (sum(len(ours.closed) for ours in through.values()) + len(stale)
              + len(scored) + len(stale_untestable))
    for ours in through.values():
        if ours.unexpected:
            print(f"conformance server: unexpected regression(s) {THROUGH[ours.target][0]}: "
                  + ", ".join(f"{rev} {scenario}" for rev, scenario in ours.unexpected))
    if closed:
        print(f"conformance server: {closed} listed known gap(s) or untestable scenario(s) "
              "to remove (see above)")
    print("conformance server: "
          + ", ".join(f"{t} {passed[t]}/{pairs}" for t in TARGETS) + "; regressions "
          + "; ".join(f"{THROUGH[o.target][0]}: {len(o.regressions)} (known gaps: "
                      f"{len(o.gating)}, unexpected: {len(o.unexpected)})"
                      for o in through.values())
          + (f"; not scored by the harness: {len(unscored)}" if unscored else ""))
    ok = (table and not direct_failed and not closed
          and not any(ours.unexpected for ours in through.values()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
