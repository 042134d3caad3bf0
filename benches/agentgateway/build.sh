#!/usr/bin/env bash
# Builds agentgateway (https://github.com/agentgateway/agentgateway), the Rust MCP gateway
# of the benchmark's agentgateway column, from source: the release binary `agentgateway`
# of its crate agentgateway-app, without the web UI (its `make build UI=0`), at the commit
# the README's numbers were measured with. Needs cargo and rustup (the toolchain the
# source pins is installed if missing, minimal profile) and crates.io; nothing from
# GitHub or GitLab but the source itself.
#
#   benches/agentgateway/build.sh [--source DIR] [--commit REV] [--work DIR] [--jobs N]
#
#   --source DIR  an agentgateway git repository (a clone, or a bare git directory) to take
#                 the commit from, instead of cloning SOURCE_URL
#   --commit REV  default: the commit below
#   --work DIR    where the source is unpacked (WORK/src, made anew each time) and built
#                 (WORK/target, kept) (default: ${XDG_CACHE_HOME:-~/.cache}/trunkline-bench/
#                 agentgateway); the binary is WORK/target/release/agentgateway
#   --jobs N      cargo's jobs (default 2); the build runs under `nice -n 19`
#
# The source's [patch.crates-io] names four forks on GitHub/GitLab (schemars, http-serde,
# wiremock, async-openai); they are dropped for the crates.io releases:
#   - schemars' `arcstr1` and wiremock's `tls` features exist in the forks only; they are
#     left out with the one test helper that uses the latter (`tls_mock`), and the test
#     helper `simple_mock` reports HTTP/1.1 (the fork's wiremock tells the version);
#   - http-serde's `header_name` and `option::scheme` exist in the fork only: two small
#     serde modules in agentgateway's serdes.rs take their place;
#   - the async-openai fork (0.41 with additions) is replaced by 0.43, whose API differs in
#     a few places the LLM conversions (crates/llm) use: async-openai-0.43.patch beside this
#     script adapts them (renamed variants and types, new fields left empty). The MCP path
#     does not go through them.
# The workspace member xtask (code generation) is left out. Last line printed: the export
# that points the benchmark at the binary.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)

SOURCE_URL=https://github.com/agentgateway/agentgateway.git
COMMIT=75b4e6ce6e0e1ac7959d5548ebe8dbeaede4f180
SOURCE=
WORK=${XDG_CACHE_HOME:-$HOME/.cache}/trunkline-bench/agentgateway
JOBS=2
while (($#)); do
    case $1 in
        --source) SOURCE=$2; shift 2 ;;
        --commit) COMMIT=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        *) echo "usage: $0 [--source DIR] [--commit REV] [--work DIR] [--jobs N]" >&2; exit 2 ;;
    esac
done

mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
SRC=$WORK/src
if [ -z "$SOURCE" ]; then
    SOURCE=$WORK/repo.git
    if [ ! -d "$SOURCE" ]; then
        git init -q --bare "$SOURCE"
    fi
    git --git-dir="$SOURCE" fetch -q --depth 1 "$SOURCE_URL" "$COMMIT"
    COMMIT=FETCH_HEAD
fi
GITDIR=$(git -C "$SOURCE" rev-parse --absolute-git-dir)
REV=$(git --git-dir="$GITDIR" rev-parse "$COMMIT^{commit}")
echo "agentgateway commit: $REV" >&2

# 1. The source at that commit. schema/config.md (generated documentation) is left out:
#    a snapshot may not hold it, and the build does not read it.
rm -rf "$SRC"
mkdir -p "$SRC"
git --git-dir="$GITDIR" archive "$REV" -- . ':!schema/config.md' | tar -x -C "$SRC"
cd "$SRC"

# 2. crates.io instead of the forks (see above); each edit must find its text.
python3 - <<'EOF'
import pathlib
import re


def edit(path, old, new, count=1):
    p = pathlib.Path(path)
    text = p.read_text()
    if text.count(old) != count:
        raise SystemExit(f"{path}: expected {count} of {old!r}: the source has changed")
    p.write_text(text.replace(old, new))


cargo = pathlib.Path("Cargo.toml")
text, n = re.subn(r"\[patch\.crates-io\]\n(?:[^\[\n][^\n]*\n)*\n?", "", cargo.read_text(),
                  count=1)
if n != 1:
    raise SystemExit("Cargo.toml: no [patch.crates-io] table: the source has changed")
cargo.write_text(text)
edit("Cargo.toml",
     'schemars = { version = "=1.2.1", git = "https://github.com/howardjohn/schemars", '
     'rev = "f3e45a59786debf49e67d6bd6d8dcffc004d39ff", features',
     'schemars = { version = "=1.2.1", features')
edit("Cargo.toml", '    "bytes1",\n    "arcstr1",\n', '    "bytes1",\n')
edit("Cargo.toml", 'wiremock = { version = "0.6", features = ["tls"] }',
     'wiremock = { version = "0.6" }')
edit("Cargo.toml", 'async-openai = { version = "0.41",', 'async-openai = { version = "0.43",')
edit("Cargo.toml", '    "crates/xtask",\n', '')
edit("crates/agentgateway/src/test_helpers/proxymock.rs",
     '#[cfg(feature = "crypto-aws-lc")]\nuse wiremock::tls_certs',
     '#[cfg(any())] // wiremock fork only\nuse wiremock::tls_certs')
edit("crates/agentgateway/src/test_helpers/proxymock.rs",
     '#[cfg(feature = "crypto-aws-lc")]\npub async fn tls_mock()',
     '#[cfg(any())] // wiremock fork only\npub async fn tls_mock()')
# wiremock's Request has no `version` outside the fork; simple_mock (a test helper) reports 1.1.
edit("crates/agentgateway/src/test_helpers/proxymock.rs",
     "\t\t\t\tbody: Bytes::copy_from_slice(&req.body),\n\t\t\t\tversion: req.version,\n\t\t\t};\n\t\t\tResponseTemplate::new(200).set_body_json(r)\n\t\t})\n\t\t.mount(&mock)\n\t\t.await;\n\tmock\n}",
     "\t\t\t\tbody: Bytes::copy_from_slice(&req.body),\n\t\t\t\tversion: ::http::Version::HTTP_11,\n\t\t\t};\n\t\t\tResponseTemplate::new(200).set_body_json(r)\n\t\t})\n\t\t.mount(&mock)\n\t\t.await;\n\tmock\n}", 1)

# http-serde's `header_name` and `option::scheme` are fork-only: two small modules in serdes.rs.
edit("crates/agentgateway/src/cel/types.rs", '"http_serde::option::scheme"', '"crate::serdes::http_option_scheme"', 1)
edit("crates/agentgateway/src/http/auth/mod.rs", '"http_serde::header_name"', '"crate::serdes::http_header_name"', 1)
p = pathlib.Path("crates/agentgateway/src/serdes.rs")
p.write_text(p.read_text() + """
/// `http::HeaderName` as its string (the http-serde fork's `header_name`).
pub mod http_header_name {
\tuse serde::{Deserialize, Deserializer, Serializer, de};

\tpub fn serialize<S: Serializer>(name: &::http::HeaderName, ser: S) -> Result<S::Ok, S::Error> {
\t\tser.serialize_str(name.as_str())
\t}

\tpub fn deserialize<'de, D: Deserializer<'de>>(de: D) -> Result<::http::HeaderName, D::Error> {
\t\tlet s = String::deserialize(de)?;
\t\t::http::HeaderName::from_bytes(s.as_bytes()).map_err(de::Error::custom)
\t}
}

/// `Option<http::uri::Scheme>` as an optional string (the http-serde fork's `option::scheme`).
pub mod http_option_scheme {
\tuse serde::{Deserialize, Deserializer, Serializer, de};

\tpub fn serialize<S: Serializer>(
\t\tscheme: &Option<::http::uri::Scheme>,
\t\tser: S,
\t) -> Result<S::Ok, S::Error> {
\t\tmatch scheme {
\t\t\tSome(s) => ser.serialize_some(s.as_str()),
\t\t\tNone => ser.serialize_none(),
\t\t}
\t}

\tpub fn deserialize<'de, D: Deserializer<'de>>(
\t\tde: D,
\t) -> Result<Option<::http::uri::Scheme>, D::Error> {
\t\tOption::<String>::deserialize(de)?
\t\t\t.map(|s| s.parse().map_err(de::Error::custom))
\t\t\t.transpose()
\t}
}
""")
if "howardjohn" in pathlib.Path("Cargo.toml").read_text():
    raise SystemExit("Cargo.toml still names a fork")
EOF
patch -p1 --quiet --no-backup-if-mismatch < "$HERE/async-openai-0.43.patch"

# 3. The pinned toolchain (its channel only: not the extra components the file lists).
CHANNEL=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
if command -v rustup >/dev/null; then
    rustup toolchain list | grep -q "^$CHANNEL" ||
        rustup toolchain install "$CHANNEL" --profile minimal
    export RUSTUP_TOOLCHAIN=$CHANNEL
fi
rustc --version >&2

export CARGO_TARGET_DIR=$WORK/target
nice -n 19 cargo build --release -j "$JOBS" -p agentgateway-app --bin agentgateway
BIN=$CARGO_TARGET_DIR/release/agentgateway
"$BIN" --version >&2 || true
echo "export TRUNKLINE_BENCH_AGENTGATEWAY=$BIN"
