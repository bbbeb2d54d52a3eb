#!/bin/sh
# `make test-install`: installs kvlm into a temporary prefix and checks what
# an embedding program gets. The files and symlinks are in place, the .so
# has the soname of its version (libkvlm.so.MAJOR.MINOR before 1.0, e.g.
# libkvlm.so.0.15; libkvlm.so.MAJOR from 1.0) and exports only kvlm_*
# symbols, kvlm.pc answers
# pkg-config, and examples/ builds from the installed headers and
# libraries alone (shared and static) and runs on the shipped models:
# generate on models/shakespeare-gpt2 and models/shakespeare-llama (its
# directory and its GGUF file), batch on shakespeare-gpt2, where each
# request's greedy output must equal what generate prints for the same
# prompt alone. Also: DESTDIR staging and `make uninstall`.
# Run from the repository root; MAKE names the make to use.
set -eu
make=${MAKE:-make}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "install check: $*" >&2; exit 1; }

$make --no-print-directory install PREFIX="$prefix" >/dev/null
version=$(sed -n 's/^#define KVLM_VERSION "\(.*\)"/\1/p' include/kvlm.h)
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
if [ "$major" = 0 ]; then soname=libkvlm.so.$major.$minor; else soname=libkvlm.so.$major; fi

# Files, symlinks, soname, exported symbols.
for f in bin/kvlm lib/libkvlm.a "lib/libkvlm.so.$version" include/kvlm.h include/kvlm_tokenizer.h \
    include/kvlm_measure.h lib/pkgconfig/kvlm.pc; do
    [ -f "$prefix/$f" ] || fail "missing $f"
done
[ "$(readlink "$prefix/lib/libkvlm.so")" = "$soname" ] || fail "libkvlm.so does not point to $soname"
[ "$(readlink "$prefix/lib/$soname")" = "libkvlm.so.$version" ] || fail "$soname does not point to libkvlm.so.$version"
got=$(readelf -d "$prefix/lib/libkvlm.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$got" = "$soname" ] || fail "soname is '$got', not $soname"
nm -D --defined-only "$prefix/lib/libkvlm.so" | awk '{print $3}' | sort >"$tmp/exported"
if grep -v '^kvlm_' "$tmp/exported"; then fail "the symbols above are exported but not kvlm_*"; fi
cat include/kvlm.h include/kvlm_tokenizer.h include/kvlm_measure.h | grep -o 'kvlm_[a-z0-9_]*(' | tr -d '(' |
    sort -u >"$tmp/declared"
diff "$tmp/declared" "$tmp/exported" >"$tmp/sym.diff" ||
    { cat "$tmp/sym.diff"; fail "exported symbols differ from the public declarations (< declared, > exported)"; }
echo "libkvlm.so: soname $soname, $(wc -l <"$tmp/exported") exported symbols, all kvlm_* and all declared"

out=$("$prefix/bin/kvlm" --version)
case $out in "kvlm $version ("*")") ;; *) fail "kvlm --version printed '$out'" ;; esac

# pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion kvlm)" = "$version" ] || fail "pkg-config --modversion kvlm"
libs=$(pkg-config --libs kvlm | sed 's/ *$//') # pkgconf ends it with a space
[ "$libs" = "-L$prefix/lib -lkvlm" ] || fail "pkg-config --libs kvlm gave '$libs'"
case $(pkg-config --static --libs kvlm) in *-lgomp*-ljansson*) ;; *) fail "pkg-config --static --libs kvlm" ;; esac

# Examples from the installed files only (examples/Makefile uses pkg-config).
ex=$tmp/examples
$make --no-print-directory -C examples O="$ex" all static >/dev/null
export LD_LIBRARY_PATH="$prefix/lib"
ldd "$ex/generate" | grep -q "$soname => $prefix/lib/$soname" || fail "generate is not linked to the installed $soname"
if ldd "$ex/generate-static" | grep -q libkvlm; then fail "generate-static still needs libkvlm.so"; fi

gpt2=models/shakespeare-gpt2
llama=models/shakespeare-llama
# Each output must be the prompt followed by generated text.
check_text() { # file prompt
    [ "$(head -c ${#2} "$1")" = "$2" ] || fail "$1 does not start with the prompt '$2'"
    [ "$(wc -c <"$1")" -gt $((${#2} + 10)) ] || fail "$1 holds almost no generated text"
}
"$ex/generate" "$gpt2" "ROMEO:" 32 >"$tmp/gen.txt"
check_text "$tmp/gen.txt" "ROMEO:"
"$ex/generate-static" "$gpt2" "ROMEO:" 32 | cmp -s - "$tmp/gen.txt" || fail "generate-static differs from generate"
"$ex/generate" "$gpt2" "JULIET:" 32 >"$tmp/gen1.txt"
"$ex/batch" "$gpt2" 32 "ROMEO:" "JULIET:" "First Citizen:" >"$tmp/batch.txt"
"$ex/batch-static" "$gpt2" 32 "ROMEO:" "JULIET:" "First Citizen:" | cmp -s - "$tmp/batch.txt" ||
    fail "batch-static differs from batch"
block() { awk -v n="$1" '/^=== /{f = ($0 ~ "^=== request " n ":"); next} f' "$tmp/batch.txt"; }
block 0 | cmp -s - "$tmp/gen.txt" || fail "batch request 0 differs from generate ROMEO: alone"
block 1 | cmp -s - "$tmp/gen1.txt" || fail "batch request 1 differs from generate JULIET: alone"
[ "$(grep -c '^=== request [0-2]: length, 32 tokens$' "$tmp/batch.txt")" = 3 ] || fail "batch: finish lines"
grep -q '^steps 32, prompt tokens [0-9]*' "$tmp/batch.txt" || fail "batch: scheduler figures"
grep -q '^KV pool [0-9]* blocks' "$tmp/batch.txt" || fail "batch: KV figures"
"$ex/generate" "$llama" "JULIET:" 24 >"$tmp/llama.txt"
check_text "$tmp/llama.txt" "JULIET:"
"$ex/generate" "$llama/shakespeare-llama-q8_0.gguf" "JULIET:" 24 0.8 7 >"$tmp/gguf.txt"
check_text "$tmp/gguf.txt" "JULIET:"
if "$ex/generate" "$tmp/no-such-model" "x" 2>"$tmp/err.txt"; then fail "generate accepted a missing model"; fi
grep -q "no-such-model" "$tmp/err.txt" || fail "generate's error does not name the path"
echo "examples: generate and batch, shared and static, on $gpt2, $llama and its GGUF"

# DESTDIR stages under the prefix; uninstall removes every file.
stage=$tmp/stage
$make --no-print-directory install DESTDIR="$stage" PREFIX=/opt/kvlm >/dev/null
[ -f "$stage/opt/kvlm/lib/libkvlm.so.$version" ] || fail "DESTDIR install"
grep -q '^prefix=/opt/kvlm$' "$stage/opt/kvlm/lib/pkgconfig/kvlm.pc" || fail "kvlm.pc under DESTDIR names the stage"
$make --no-print-directory uninstall DESTDIR="$stage" PREFIX=/opt/kvlm >/dev/null
left=$(find "$stage" -type f -o -type l)
[ -z "$left" ] || fail "uninstall left: $left"
echo "install check passed"
