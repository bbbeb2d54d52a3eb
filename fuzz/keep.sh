#!/bin/sh
# Keeps what a campaign learnt: fuzz/keep.sh BUILD_DIR TARGET
# Adds to fuzz/found/TARGET (committed) the inputs of BUILD_DIR/corpus/TARGET
# that reach coverage the committed seeds and the inputs kept earlier do
# not (libFuzzer's -merge=1, which also drops inputs whose coverage a
# smaller one has), so a campaign on another machine, or the CI smoke run,
# starts where this one stopped. Only inputs up to 64 KiB are kept (the
# campaign's -max_len). Prints the count and size kept.
set -eu
build=$1 target=$2
bin=$build/fuzz_$target
work=$build/corpus/$target
found=fuzz/found/$target
mkdir -p "$found"
[ -d "$work" ] || { echo "fuzz keep: $target: no $work (run a campaign first)"; exit 0; }
before=$(find "$found" -type f | wc -l)
# -merge=1 OUT IN...: OUT's own inputs count as already covered; the seeds
# go in through a scratch copy so inputs they already cover are not kept.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp fuzz/corpus/"$target"/* "$scratch"/ 2>/dev/null || true
cp "$found"/* "$scratch"/ 2>/dev/null || true
n0=$(find "$scratch" -type f | wc -l)
"$bin" -merge=1 -max_len=65536 -rss_limit_mb=2048 -timeout=60 "$scratch" "$work" >"$build/keep-$target.log" 2>&1
# what the merge added to the scratch copy beyond the seeds and the kept inputs
for f in "$scratch"/*; do
    b=$(basename "$f")
    [ -e "fuzz/corpus/$target/$b" ] || [ -e "$found/$b" ] || cp "$f" "$found/"
done
after=$(find "$found" -type f | wc -l)
echo "fuzz keep: $target: $((after - before)) input(s) added to $found ($after in all, $(du -sk "$found" | cut -f1) KiB); merge started from $n0"
