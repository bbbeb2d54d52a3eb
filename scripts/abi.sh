#!/bin/sh
# The ABI of libkvlm.so against the ABI recorded for its soname
# (make abi-check, make abi-baseline; docs/embedding.md, "Versions").
#
#   scripts/abi.sh check LIB      compares LIB with abi/<soname>.abi
#   scripts/abi.sh baseline LIB   writes abi/<soname>.abi from LIB
#
# The dump is abidw's XML of what the public headers (include/) declare:
# the exported kvlm_* functions and the types they reach, read from the
# DWARF of a -g build (make builds LIB in build-abi/). Types defined outside
# include/ (the handles' insides) stay opaque declarations, and functions
# that are not exported (the library's internal ones, libc's) are left out.
# So is what depends on the build machine or tree: source locations,
# compilation directories, the corpus path and DT_NEEDED; types are named
# by a hash of their contents rather than by the order they were met. The
# optimisation level and the CPU do not enter it: the declarations' types
# are the same, and every ISA's kernels are compiled on every machine
# (chosen at run time).
#
# check passes when nothing recorded changed: functions may be added (new
# exported symbols), but a changed or removed function, or a changed type
# they use (a struct field, a size, an enumerator's value), fails until the
# soname changes (before 1.0: the minor version) and a baseline is recorded
# for the new soname. A soname without a baseline fails, naming the command
# that records it.
set -eu
cd "$(dirname "$0")/.."
fail() { echo "abi: $*" >&2; exit 1; }
[ $# -eq 2 ] || fail "usage: scripts/abi.sh check|baseline LIB"
mode=$1 lib=$2
for t in abidw abidiff readelf; do
    command -v "$t" >/dev/null 2>&1 || fail "$t is missing (scripts/setup.sh installs abigail-tools and binutils)"
done
[ -f "$lib" ] || fail "$lib: no such file"
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] || fail "$lib has no soname"
base=abi/$soname.abi

dump() {
    abidw --headers-dir include --drop-private-types --drop-undefined-syms --exported-interfaces-only \
        --no-show-locs --no-comp-dir-path --no-corpus-path --no-elf-needed --type-id-style hash \
        --out-file "$1" "$lib"
    grep -q '<function-decl name=.kvlm_' "$1" || fail "$lib: abidw found no kvlm_* function (no debug information?)"
}

case $mode in
baseline)
    mkdir -p abi
    dump "$base"
    echo "abi: wrote $base ($(grep -c '<elf-symbol name=' "$base") exported symbols)"
    ;;
check)
    [ -f "$base" ] || fail "no recorded ABI for $soname ($base): the soname is new, so record its ABI with 'make abi-baseline' and commit $base"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    dump "$tmp/current.abi"
    # Added functions are not reported; exit status bits: 1 error,
    # 2 usage error, 4 an ABI change, 8 an incompatible one.
    set +e
    abidiff --no-added-syms "$base" "$tmp/current.abi" >"$tmp/report" 2>&1
    rc=$?
    set -e
    if [ $((rc & 3)) -ne 0 ]; then
        cat "$tmp/report" >&2
        fail "abidiff failed (exit status $rc)"
    fi
    if [ "$rc" -ne 0 ]; then
        cat "$tmp/report" >&2
        kind="changed"
        [ $((rc & 8)) -ne 0 ] && kind="changed incompatibly"
        fail "the ABI of $soname $kind against $base (above). Undo the change, or bump KVLM_VERSION_MINOR in include/kvlm.h (a new soname) and run 'make abi-baseline'"
    fi
    added=$(abidiff "$base" "$tmp/current.abi" 2>/dev/null | sed -n 's/.*, \([0-9][0-9]*\) Added function.*/\1/p' | head -n 1)
    echo "abi: $soname matches $base${added:+ ($added added functions)}"
    ;;
*) fail "usage: scripts/abi.sh check|baseline LIB" ;;
esac
