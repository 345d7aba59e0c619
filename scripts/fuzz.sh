#!/usr/bin/env bash
# Runs each of weir's fuzz targets (fuzz/fuzz_targets/*.rs) for
# FUZZ_SECONDS seconds (default 60), stops at the first crash and prints one
# summary line per target.
#
#   bash scripts/fuzz.sh                          # every target, 60 s each
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh         # longer
#   FUZZ_TARGETS="decode_json decode_csv" bash scripts/fuzz.sh
#
# Installs cargo-fuzz (`cargo install cargo-fuzz --locked`) when missing.
# Works on stable Rust: no sanitizer (`--sanitizer none`, the others need
# nightly) and a debug build (`--dev`: debug assertions and overflow checks
# on; a release build of DataFusion takes ~30 minutes), built at low priority
# in its own target directory (CARGO_TARGET_DIR, default
# /var/tmp/weir-fuzz-target; the first build takes ~12 minutes on 2 cores).
# Every flag used is stable (cargo-fuzz's coverage instrumentation is plain
# `-C` options), so neither nightly nor RUSTC_BOOTSTRAP is needed.
# libFuzzer's own C++ runtime is built by libfuzzer-sys with the system C++
# compiler (optimized: see fuzz/Cargo.toml).
#
# Seeds are read from fuzz/corpus/<target>/ (kept in git, never written);
# inputs the fuzzer finds go to fuzz/target/corpus/<target>/ and a crashing
# input to fuzz/artifacts/<target>/ (both ignored by git). Reproduce a crash
# with:
#   cargo fuzz run --dev --sanitizer none <target> fuzz/artifacts/<target>/<file>
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-60}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/var/tmp/weir-fuzz-target}

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz ..."
    cargo install cargo-fuzz --locked
fi
if ! command -v c++ >/dev/null 2>&1; then
    echo "libFuzzer needs a C++ compiler: install one (e.g. apt-get install g++) and rerun" >&2
    exit 1
fi

flags=(--dev --sanitizer none)
targets=${FUZZ_TARGETS:-$(cargo fuzz list)}

echo "building the fuzz targets (debug, no sanitizer) ..."
nice -n 19 cargo fuzz build "${flags[@]}"

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
summary=()
status=0
for t in $targets; do
    work=fuzz/target/corpus/$t
    seeds=fuzz/corpus/$t
    mkdir -p "$work" "$seeds" "fuzz/artifacts/$t"
    echo "== $t: ${seconds}s"
    set +e
    nice -n 19 cargo fuzz run "${flags[@]}" "$t" "$work" "$seeds" -- \
        -max_total_time="$seconds" -timeout=30 -print_final_stats=1 \
        -artifact_prefix="fuzz/artifacts/$t/" >"$logs/$t" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$logs/$t" | grep -o '[0-9]*$' | tail -1 || true)
    corpus=$(find "$work" -type f | wc -l)
    if [ "$rc" -eq 0 ]; then
        summary+=("$t: ok, ${execs:-?} runs in ${seconds}s, no crash (corpus $corpus inputs)")
    else
        artifact=$(grep -o "fuzz/artifacts/$t/[^ ]*" "$logs/$t" | tail -1 || true)
        why=$(grep -m1 -A1 "panicked at" "$logs/$t" | tr '\n' ' ' || true)
        [ -n "$why" ] || why=$(grep -m1 -E "ERROR: libFuzzer|SUMMARY" "$logs/$t" || true)
        [ -n "$execs" ] || execs=$(grep -o '^#[0-9]*' "$logs/$t" | tail -1 | tr -d '#' || true)
        if [ -n "$artifact" ]; then
            summary+=("$t: CRASH after ${execs:-?} runs: $artifact ($why)")
        else
            summary+=("$t: FAILED without a crash input (exit $rc; see the log above)")
        fi
        tail -40 "$logs/$t"
        status=1
    fi
    echo "${summary[-1]}"
    [ "$status" -eq 0 ] || break
done

echo
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
exit "$status"
