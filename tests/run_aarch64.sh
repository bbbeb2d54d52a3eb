#!/bin/sh
# The aarch64 build's tests under QEMU user-mode emulation (`make
# test-aarch64`, docs/arm64.md), from the repository root:
#   tests/run_aarch64.sh BUILD NATIVE_KVLM "TESTS" "FALLBACK_TESTS" "NO_I8MM_TESTS"
# BUILD (build-aarch64) holds the aarch64 kvlm and test binaries; TESTS run
# with QEMU's -cpu max (SVE, dot product, bf16, i8mm: every level kvlm has),
# FALLBACK_TESTS again with -cpu cortex-a53 (Armv8.0: no dot product, so
# neon-dotprod must be refused and auto must pick neon), NO_I8MM_TESTS with
# -cpu neoverse-n1 (dot product, no i8mm, no bf16: neon-i8mm must be
# refused and auto must pick neon-dotprod), and neon-i8mm and neon-bf16
# must be refused by kvlm run there. Then, at each
# -cpu, `kvlm run -m models/shakespeare-gpt2 -p ROMEO: --temp 0` at every
# ARM level the CPU has must print the text the native x86-64 build
# (NATIVE_KVLM) prints at its best float-activation level.
#
# The programs run through qemu-aarch64 directly (no binfmt_misc needed):
# KVLM, which the tests start, names a wrapper script that does the same,
# and QEMU_CPU, which qemu reads, reaches every process they start.
set -u
build=${1:-build-aarch64}
native=${2:-build/kvlm}
tests=${3:-}
fallback=${4:-}
no_i8mm=${5:-}
qemu=${QEMU:-qemu-aarch64-static}
command -v "$qemu" >/dev/null 2>&1 || qemu=qemu-aarch64
if ! command -v "$qemu" >/dev/null 2>&1; then
    echo "run_aarch64: no qemu-aarch64 (scripts/setup.sh --arm64 installs it)" >&2
    exit 1
fi

# Emulation runs the programs several times slower: the waits of the
# server tests are scaled as under ThreadSanitizer (tests/run_tsan.sh).
export KVLM_TEST_TIME_SCALE=${KVLM_TEST_TIME_SCALE:-10}

root=$(pwd)
wrapper="$build/kvlm-qemu"
printf '#!/bin/sh\nexec %s %s/%s/kvlm "$@"\n' "$qemu" "$root" "$build" > "$wrapper"
chmod +x "$wrapper"
export KVLM="$wrapper"

failed=""

run_tests() { # cpu, list
    for t in $2; do
        echo "== $t (qemu -cpu $1)"
        if ! QEMU_CPU=$1 "$qemu" "$build/tests/$t"; then failed="$failed $t@$1"; fi
    done
}

# The float-activation level of the native build (avx512, else avx2, else
# scalar): its text is the one every ARM level must print.
native_isa=scalar
for isa in avx512 avx2; do
    if "$native" run -m models/shakespeare-gpt2 --ids 1 -n 1 --temp 0 --isa "$isa" >/dev/null 2>&1; then
        native_isa=$isa
        break
    fi
done
want=$("$native" run -m models/shakespeare-gpt2 -p ROMEO: --temp 0 --isa "$native_isa") || failed="$failed native-run"

same_text() { # cpu, levels
    for isa in $2; do
        got=$(QEMU_CPU=$1 "$wrapper" run -m models/shakespeare-gpt2 -p ROMEO: --temp 0 --isa "$isa")
        if [ "$got" = "$want" ]; then
            echo "== kvlm run ROMEO: --temp 0 --isa $isa (qemu -cpu $1): the text of x86-64 $native_isa ($(printf '%s' "$got" | wc -c) bytes)"
        else
            echo "== kvlm run ROMEO: --temp 0 --isa $isa (qemu -cpu $1) differs from x86-64 $native_isa:"
            printf '%s\n---\n%s\n' "$got" "$want"
            failed="$failed run-$isa@$1"
        fi
    done
}

run_tests max "$tests"
same_text max "scalar neon neon-dotprod neon-i8mm neon-bf16"
run_tests cortex-a53 "$fallback"
same_text cortex-a53 "scalar neon"
# neon-dotprod is refused where the CPU lacks the dot product
if QEMU_CPU=cortex-a53 "$wrapper" run -m models/shakespeare-gpt2 --ids 1 -n 1 --isa neon-dotprod >/dev/null 2>&1; then
    echo "== --isa neon-dotprod ran on cortex-a53 (no dot product)"
    failed="$failed refuse-dotprod@cortex-a53"
fi
# neon-i8mm and neon-bf16 are refused where the CPU has the dot product
# but neither i8mm nor bf16
run_tests neoverse-n1 "$no_i8mm"
for isa in neon-i8mm neon-bf16; do
    if QEMU_CPU=neoverse-n1 "$wrapper" run -m models/shakespeare-gpt2 --ids 1 -n 1 --isa $isa >/dev/null 2>&1; then
        echo "== --isa $isa ran on neoverse-n1 (no i8mm, no bf16)"
        failed="$failed refuse-$isa@neoverse-n1"
    fi
done

if [ -n "$failed" ]; then
    echo "FAILED:$failed"
    exit 1
fi
echo "aarch64: all tests passed"
