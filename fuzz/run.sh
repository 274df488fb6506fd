#!/usr/bin/env bash
# fuzz/run.sh [SECONDS]: fuzz xlurmd's submission checks (spec::parse ->
# request::validate -> unit::properties) for SECONDS (default 60), starting from
# the committed corpus. Exits non-zero on a crash or a broken invariant; the
# failing input is left in fuzz/artifacts/spec/ (replay: fuzz/run.sh --replay FILE).
#
# cargo-fuzz needs nightly features; on a stable toolchain RUSTC_BOOTSTRAP=1
# unlocks them (set here). Installs cargo-fuzz from crates.io when missing.
# New corpus entries found by the run go to a scratch copy, not the repository,
# unless XLURM_FUZZ_KEEP=1.
# Timings on a 2-core machine: see docs/security.md ("Fuzzing").
set -euo pipefail
cd "$(dirname "$0")"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz/run.sh: installing cargo-fuzz (cargo install cargo-fuzz --locked)" >&2
    cargo install cargo-fuzz --locked
fi

if [ "${1:-}" = --replay ]; then
    shift
    exec cargo fuzz run spec "$@"
fi

secs=${1:-60}
case $secs in ''|*[!0-9]*) echo "usage: fuzz/run.sh [SECONDS] | --replay FILE" >&2; exit 2 ;; esac

t0=$SECONDS
cargo fuzz build spec
echo "fuzz/run.sh: built in $((SECONDS - t0))s" >&2

corpus=corpus/spec
if [ "${XLURM_FUZZ_KEEP:-0}" != 1 ]; then
    scratch=$(mktemp -d)
    trap 'rm -rf "$scratch"' EXIT
    cp -r corpus/spec/. "$scratch/"
    corpus=$scratch
fi

t1=$SECONDS
rc=0
# -rss_limit_mb: a spec can hold up to a few MiB; anything near 2 GiB is a bug.
cargo fuzz run spec "$corpus" -- -max_total_time="$secs" -rss_limit_mb=2048 \
    -timeout=10 -print_final_stats=1 || rc=$?
echo "fuzz/run.sh: fuzzed ${secs}s (wall $((SECONDS - t1))s), exit $rc" >&2
if [ "$rc" != 0 ]; then
    echo "fuzz/run.sh: FAILED: see the crash above and fuzz/artifacts/spec/" >&2
fi
exit "$rc"
