#!/bin/sh
# The include half of `make check-boundary` (docs/architecture.md, "The
# library and the programs"): src/cli and src/server may include their own
# headers, src/app's and the public ones (include/*.h); src/app may include
# only its own and the public ones. Any other header under src/ belongs to
# the library's floors (runtime/, formats/, model/, error.h, tensor.h ...)
# and is reached only through include/. The link half is the Makefile's:
# kvlm linked against libkvlm.so, which exports only the public API.
# Prints each offending line and exits 1; silent and 0 when all is well.
set -eu
cd "$(dirname "$0")/.."
status=0
check() { # check ALLOWED_PREFIXES FILES...: ALLOWED_PREFIXES is an ERE alternation
    allowed=$1
    shift
    for f in "$@"; do
        # every #include "x" or #include <x> whose x names a file under src/
        grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<][^">]+[">]' "$f" | while IFS= read -r line; do
            inc=$(printf '%s\n' "$line" | sed -E 's/^[0-9]+:[[:space:]]*#[[:space:]]*include[[:space:]]*["<]([^">]+)[">].*/\1/')
            case $inc in kvlm.h | kvlm_tokenizer.h | kvlm_measure.h) continue ;; esac
            if printf '%s\n' "$inc" | grep -qE "^($allowed)/"; then continue; fi
            if [ -e "src/$inc" ]; then
                echo "$f:$line: library-internal header (use include/*.h)"
                echo x >> "$tmp"
            fi
        done
    done
}
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
check 'cli|server|app' $(find src/cli src/server -name '*.[ch]' | sort)
check 'app' $(find src/app -name '*.[ch]' | sort)
if [ -s "$tmp" ]; then
    status=1
fi
exit $status
