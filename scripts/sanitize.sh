#!/usr/bin/env bash
# The test suite under a sanitizer. Usage:
#   scripts/sanitize.sh address   # AddressSanitizer, the whole suite (.build-asan)
#   scripts/sanitize.sh thread    # ThreadSanitizer, the threaded tests (.build-tsan)
# Extra arguments go to `swift test` (e.g. --filter RingTests).
#
# Each uses its own scratch directory, so .build (the normal build) is left alone.
# Any sanitizer report fails the run: ASan aborts the process at the first error,
# TSan exits with status 66 after reporting (both make `swift test` fail).
#
# UndefinedBehaviorSanitizer: Swift 6.3 on Linux refuses `-sanitize=undefined`
# ("unsupported option for target x86_64-unknown-linux-gnu"). What UBSan checks in C
# (overflow, bad shifts, out-of-bounds indexing, null unwraps) Swift's debug build traps
# on by itself, in every test run; Linnet's own C is a few header shims. So there is no
# separate UBSan run; the ASan run is the debug build, with those checks on.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

kind="${1:?usage: scripts/sanitize.sh address|thread [swift test arguments]}"
shift

# The toolchain's symbolizer (Debian's may be a different LLVM); the Swift runtime's
# backtracer would otherwise catch the crash before the sanitizer reports it.
export ASAN_SYMBOLIZER_PATH="${ASAN_SYMBOLIZER_PATH:-/opt/swift/usr/bin/llvm-symbolizer}"
export TSAN_SYMBOLIZER_PATH="${TSAN_SYMBOLIZER_PATH:-/opt/swift/usr/bin/llvm-symbolizer}"
export SWIFT_BACKTRACE=enable=no
# Tests that time real-time threads read it (their threads run several times slower).
# Not LINNET_…: linnet takes every LINNET_ variable as a setting and refuses unknown ones.
export SANITIZER_UNDER_TEST="$kind"
# Tests that spawn `linnet` or the aiortc peer: the interop peer is only used when
# AIORTC_PYTHON (or build/interop-venv) is there; here it is left to whoever
# calls (CI sets it, like `make test`).

case "$kind" in
address)
    dir="${SANITIZE_DIR:-.build-asan}"
    # Leak checking: on in every `linnet` the tests spawn (SANITIZER_CHILD_ASAN_OPTIONS,
    # which CLITests' `Linnet` puts in the environment its children inherit), off in the
    # test process itself (it keeps fixtures alive by design). A leak in linnet makes it
    # exit 23 with LeakSanitizer's report on its stderr, which fails the test that ran
    # it. The report is kept short (5 leaks, 8 frames each) so it never fills a pipe a
    # test reads only after exit.
    export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1}"
    export SANITIZER_CHILD_ASAN_OPTIONS="${SANITIZER_CHILD_ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1:malloc_context_size=8}"
    export LSAN_OPTIONS="${LSAN_OPTIONS:-max_leaks=5}"
    flags=(--sanitize=address)
    filter=()
    ;;
thread)
    dir="${SANITIZE_DIR:-.build-tsan}"
    export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0:exitcode=66:second_deadlock_stack=1}"
    flags=(--sanitize=thread)
    # The code with threads: the SPSC rings, hook-chain switching between the control
    # and capture threads, the event loop's cross-thread wake-ups, and the audio device
    # threads (with the null/file backends: no sound card needed).
    filter=(--filter 'RingTests|HookChainTests|AllocationTests|PlatformTests|DevicesTests|AudioThreadTests')
    ;;
*)
    echo "usage: scripts/sanitize.sh address|thread [swift test arguments]" >&2
    exit 2
    ;;
esac

if [ $# -gt 0 ]; then filter=("$@"); fi

start=$(date +%s)
swift build --build-tests --scratch-path "$dir" "${flags[@]}" -Xswiftc -warnings-as-errors 2>&1 \
    | grep -v "Cannot export local symbol" | tail -3
built=$(date +%s)
echo "BENCH sanitize_${kind}_build_seconds $((built - start)) s"
if [ ${#filter[@]} -eq 0 ] && [ -n "${REALTIME_TESTS:-}" ]; then
    # As `make test` runs them: the real-time suites (the Makefile's REALTIME_TESTS)
    # last, one test at a time, so a loaded machine does not starve a call's processes.
    swift test --skip-build --scratch-path "$dir" "${flags[@]}" --skip "$REALTIME_TESTS"
    swift test --skip-build --scratch-path "$dir" "${flags[@]}" --no-parallel --filter "$REALTIME_TESTS"
else
    swift test --skip-build --scratch-path "$dir" "${flags[@]}" "${filter[@]}"
fi
echo "BENCH sanitize_${kind}_test_seconds $(( $(date +%s) - built )) s"
