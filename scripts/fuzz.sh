#!/usr/bin/env bash
# Builds the libFuzzer targets in Fuzz/ (with AddressSanitizer) and runs each for a
# bounded time. Usage: scripts/fuzz.sh [seconds-per-target] [target…]
#
# - Seeds: Fuzz/corpus/<target>/ (read-only here). What a run discovers goes to
#   $FUZZ_DIR/corpus/<target>/, kept between runs, so later runs start further in.
# - Prints `BENCH fuzz_execs_<target> <n> execs` (libFuzzer's final stats) and execs/s.
# - FUZZ_JOBS targets run side by side (the number of cores by default).
# - A crash, an ASan report, a timeout or a broken invariant fails the script; the input
#   is in $FUZZ_DIR/artifacts/ and the command to replay it is printed. Each finding
#   gets a fix and a regression test with those bytes in Tests/<Module>Tests/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

seconds="${1:-60}"
shift || true
FUZZ_DIR="${FUZZ_DIR:-$PWD/.build-fuzz}"
mkdir -p "$FUZZ_DIR"

# SwiftPM names a path dependency after its directory, and the fuzz package is itself
# called "fuzz" by its directory: a checkout directory named "fuzz" would clash, so build
# from a copy then.
src="$PWD"
if [ "$(basename "$PWD" | tr 'A-Z' 'a-z')" = fuzz ]; then
    src="$FUZZ_DIR/src/linnet"
    mkdir -p "$src"
    tar --exclude=./.build --exclude='./.build-*' --exclude=./build --exclude=./.git -cf - . | tar -C "$src" -xf -
fi

# One `-sanitize=fuzzer,address`, not SwiftPM's `--sanitize=fuzzer --sanitize=address`:
# SwiftPM passes those as two flags in no fixed order and the Swift driver keeps only
# the last, so a build came out with coverage but no ASan, or ASan but no coverage
# (libFuzzer then says "no interesting inputs … is the code instrumented?").
# `--sanitize=fuzzer` stays for SwiftPM's sake: with it, SwiftPM links the executables
# without its own `main`, so libFuzzer's is used; the -Xswiftc flag comes last and wins.
sanitize=(--sanitize=fuzzer -Xswiftc -sanitize=fuzzer,address)
echo "== building fuzz targets (-sanitize=fuzzer,address)"
start=$(date +%s)
# (ld.gold warns "Cannot export local symbol" for every ASan helper: noise, filtered.)
if ! swift build --package-path "$src/Fuzz" --scratch-path "$FUZZ_DIR/build" \
        "${sanitize[@]}" >"$FUZZ_DIR/build.log" 2>&1; then
    grep -v "Cannot export local symbol" "$FUZZ_DIR/build.log" | tail -40
    exit 1
fi
grep -v "Cannot export local symbol" "$FUZZ_DIR/build.log" | tail -1
bin="$(swift build --package-path "$src/Fuzz" --scratch-path "$FUZZ_DIR/build" "${sanitize[@]}" --show-bin-path)"
echo "BENCH fuzz_build_seconds $(( $(date +%s) - start )) s"

if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for d in Fuzz/Sources/fuzz_*; do targets+=("$(basename "$d" | sed 's/^fuzz_//')"); done
fi

# The Swift runtime's backtracer would catch the trap before libFuzzer's handler; ASan
# reports go to stderr and end the run (libFuzzer turns them into a crash artifact).
export SWIFT_BACKTRACE=enable=no
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}"

# One target's run; its lines go to a summary file and its verdict to an .rc file, so
# targets run side by side (one core each: libFuzzer's loop is single-threaded) and
# are reported in order.
run_target() {
    local t=$1 exe="$bin/fuzz_$1" work="$FUZZ_DIR/corpus/$1" log="$FUZZ_DIR/fuzz_$1.log"
    local out="$FUZZ_DIR/fuzz_$1.summary" rc execs rate cov
    set +e
    "$exe" "$work" "Fuzz/corpus/$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
        -rss_limit_mb=2048 -max_len=65536 -artifact_prefix="$FUZZ_DIR/artifacts/$t-" >"$log" 2>&1
    rc=$?
    set -e
    {
        echo "== fuzz_$t for ${seconds}s"
        if ! grep -q "^INFO: Loaded 1 modules" "$log"; then
            echo "fuzz_$t has no coverage instrumentation (see $log)"
            echo uninstrumented > "$FUZZ_DIR/fuzz_$t.rc"
            return
        fi
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
        echo "BENCH fuzz_execs_$t ${execs:-0} execs"
        echo "   ${rate:-0} execs/s, coverage ${cov:-?} edges, corpus $(ls "$work" | wc -l) units"
        if [ $rc -ne 0 ]; then
            grep -E "Fatal error|ERROR: |SUMMARY|invariant|Test unit written" "$log" | head -20 || true
            echo "   replay: $exe <artifact> (full log: $log)"
        fi
    } > "$out"
    echo "$rc" > "$FUZZ_DIR/fuzz_$t.rc"
}

for t in "${targets[@]}"; do
    [ -x "$bin/fuzz_$t" ] || { echo "no target fuzz_$t" >&2; exit 2; }
    mkdir -p "$FUZZ_DIR/corpus/$t" "$FUZZ_DIR/artifacts"
    rm -f "$FUZZ_DIR/fuzz_$t.rc" "$FUZZ_DIR/fuzz_$t.summary"
done
# FUZZ_JOBS targets at a time (the machine's cores by default): each still gets its
# whole time, the pass takes 1/FUZZ_JOBS of it.
jobs_max="${FUZZ_JOBS:-$(nproc)}"
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    run_target "$t" &
done
wait

failed=()
for t in "${targets[@]}"; do
    cat "$FUZZ_DIR/fuzz_$t.summary" 2>/dev/null || echo "== fuzz_$t: no summary"
    rc=$(cat "$FUZZ_DIR/fuzz_$t.rc" 2>/dev/null || echo missing)
    case "$rc" in
        0) ;;
        uninstrumented) echo "fuzz_$t has no coverage instrumentation" >&2; exit 1 ;;
        *) failed+=("$t") ;;
    esac
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "FUZZ FAILED: ${failed[*]} (artifacts in $FUZZ_DIR/artifacts)"
    exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no findings"
