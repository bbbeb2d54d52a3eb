#!/bin/sh
# Runs the ThreadSanitizer build's tests (make test SANITIZE=thread):
# tests/run_all.sh over $1 (build-tsan), or only the tests named after it
# (make test-tsan-ci), with every process, the tests and
# the kvlm serve children they start, logging reports to $1/tsan.PID.
# Fails when a test fails or any report was written. OpenMP's runtime is
# not used in this build (the Makefile compiles its pragmas out); tests/tsan.supp
# only keeps libgomp itself out of the reports. Waits in the server tests
# are scaled by KVLM_TEST_TIME_SCALE (10): this build runs several times slower.
set -u
build=${1:-build-tsan}
[ $# -gt 0 ] && shift
root=$(pwd)
rm -f "$build"/tsan.*
export KVLM_TEST_TIME_SCALE=${KVLM_TEST_TIME_SCALE:-10}
export TSAN_OPTIONS="log_path=$root/$build/tsan suppressions=$root/tests/tsan.supp second_deadlock_stack=1 history_size=4"
if [ $# -eq 0 ]; then
    ./tests/run_all.sh "$build"
    rc=$?
else
    export KVLM=${KVLM:-$build/kvlm}
    failed=""
    for t in "$@"; do
        echo "== $t"
        "$build/tests/$t" || failed="$failed $t"
    done
    rc=0
    if [ -n "$failed" ]; then
        echo "FAILED:$failed"
        rc=1
    fi
fi
if ls "$build"/tsan.* >/dev/null 2>&1; then
    echo "ThreadSanitizer reports:"
    cat "$build"/tsan.*
    exit 1
fi
[ $rc -eq 0 ] && echo "ThreadSanitizer: no reports"
exit $rc
