#!/bin/sh
# Runs every test binary built under $1 (build or build-san) from the
# repository root and reports the failures. KVLM names the CLI under test.
set -u
build=${1:-build}
export KVLM=${KVLM:-$build/kvlm}
failed=""
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    echo "== $(basename "$t")"
    if ! "$t"; then failed="$failed $(basename "$t")"; fi
done
if [ -n "$failed" ]; then
    echo "FAILED:$failed"
    exit 1
fi
echo "all tests passed"
