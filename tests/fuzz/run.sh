#!/usr/bin/env bash
# Builds the serve listener's fuzz targets (tests/fuzz/) with libFuzzer's coverage
# instrumentation and runs each for a bounded time: `tests/fuzz/run.sh [SECONDS]` (60 by
# default: two thirds to `request`, a third to `sasl`). A crash, a panic, a timeout or an
# out-of-memory fails the run; the input that caused it is kept under target/fuzz/artifacts/
# and shown in hex. The corpus grows in target/fuzz/corpus/ from run to run; the summary of
# memory amplification is written to target/fuzz/amplification-<target>.txt.
#
# Stable rustc: the flags cargo-fuzz passes are passed here by hand (sancov with inline 8-bit
# counters, the PC table, comparison tracing, `--cfg fuzzing`, debug assertions).
set -euo pipefail
cd "$(dirname "$0")/../.."

# `--build-only` builds and stops (tests/run.sh builds at low priority while the tests run).
build_only=0
if [[ ${1:-} == --build-only ]]; then
    build_only=1
    shift
fi
total=${1:-60}
if ! [[ $total =~ ^[0-9]+$ ]] || ((total < 2)); then
    echo "usage: tests/fuzz/run.sh [--build-only] [SECONDS]  (at least 2)" >&2
    exit 2
fi
out=$PWD/target/fuzz
triple=$(rustc -vV | sed -n 's/^host: //p')

# --target keeps these flags off build scripts and proc macros (serde's derive).
export RUSTFLAGS="-Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Cllvm-args=-sanitizer-coverage-stack-depth \
 -Cllvm-args=-simplifycfg-branch-fold-threshold=0 \
 --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# The build (about 700 MB written) goes to tmpfs when /dev/shm has room for it: tests/run.sh
# builds while the tests run, and on tmpfs the build costs their fsyncs no disk bandwidth.
# The corpus, artifacts and logs stay under target/fuzz.
mkdir -p "$out"
build_dir=$out
shm_free_kb=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }' || true)
if [[ ${shm_free_kb:-0} =~ ^[0-9]+$ ]] && ((shm_free_kb > 4000000)); then
    build_dir=/dev/shm/replica-follower-fuzz-$(id -u)-$(printf '%s' "$PWD" | cksum | cut -d' ' -f1)
fi
echo "== building the fuzz targets ($build_dir)"
started=$(date +%s)
cargo build --quiet --release --locked --manifest-path tests/fuzz/Cargo.toml \
    --target "$triple" --target-dir "$build_dir" --bins
echo "built in $(($(date +%s) - started)) s"
if ((build_only)); then
    exit 0
fi
bin=$build_dir/$triple/release

hex() {
    od -A x -t x1z -v "$1" | head -n 64
}

failed=0
run_target() {
    local name=$1 secs=$2
    local corpus=$out/corpus/$name artifacts=$out/artifacts/$name log=$out/$name.log
    mkdir -p "$corpus" "$artifacts" "$out/work"
    echo "== fuzzing $name for $secs s"
    local status=0
    # Written at a clean exit only: none is shown after a crash.
    rm -f "$out/amplification-$name.txt"
    RF_FUZZ_WORK=$out/work RF_FUZZ_OUT=$out "$bin/$name" "$corpus" \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -use_value_profile=1 -print_final_stats=1 -artifact_prefix="$artifacts/" \
        2>"$log" || status=$?
    # Coverage at start (the corpus and seeds loaded) and at the end.
    local inited last
    inited=$(grep -m1 -o 'INITED cov: [0-9]* ft: [0-9]*' "$log" || true)
    last=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -n 1 || true)
    echo "$name: ${inited:-no INITED line} -> ${last:-none}; $(grep -m1 -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" || echo 'no final count')"
    if ((status != 0)); then
        failed=1
        echo "FAILED: $name exited with $status; the end of $log:"
        grep -v -e '^#[0-9]' -e '^INFO:' -e '^WARNING:' "$log" | tail -n 60
        for f in "$artifacts"/*; do
            [[ -f $f && $f -nt $log.start ]] || continue
            echo "-- the input, kept at $f ($(stat -c %s "$f") bytes):"
            hex "$f"
        done
    elif [[ -z $inited || $inited == "INITED cov: 0 "* ]]; then
        failed=1
        echo "FAILED: $name saw no coverage (is it instrumented?); see $log"
    fi
    if [[ -f $out/amplification-$name.txt ]]; then
        cat "$out/amplification-$name.txt"
    fi
}

request_secs=$((total * 2 / 3))
for t in request sasl; do
    touch "$out/$t.log.start"
done
run_target request "$request_secs"
run_target sasl "$((total - request_secs))"
rm -rf "$out/work"
if ((failed)); then
    echo "== fuzzing found a failure (inputs under $out/artifacts/)"
    exit 1
fi
echo "== fuzzing: no failure"
