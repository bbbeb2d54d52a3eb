#!/bin/sh
# `make bench`: the engine benchmark on exact GPT-2 124M shapes (random
# weights) in each weight dtype. Ratios (roofline, cache on/off) are measured
# side by side within each run; absolute times drift on a shared machine.
set -eu
kvlm=${1:-build/kvlm}
for dt in f32 f16 bf16; do
    echo "=== GPT-2 124M shapes, $dt weights"
    "$kvlm" bench --synthetic gpt2-124m --dtype "$dt"
    echo
done
