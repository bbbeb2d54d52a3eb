#!/bin/sh
# Every kvlm vs llama.cpp row of docs/performance.md in one run: writes the
# side-by-side GGUF files (random weights, real shapes and vocabularies,
# quantised by llama.cpp's own llama-quantize, --pure so every matrix has
# the named type) and runs bench/vs_llamacpp.py over them, alternating the
# two programs round by round.
#
#   bench/vs_llamacpp_suite.sh LLAMA_CPP [WORKDIR]
#
# LLAMA_CPP is a llama.cpp checkout with gguf-py/ and its binaries in
# build/bin (override with LLAMA_BENCH=... LLAMA_QUANTIZE=...); WORKDIR
# (default /tmp/kvlm-vs) holds the files (about 12 GB). ROUNDS (default 3)
# and REPEATS (default 2) set the alternation. The vocabularies come from
# build/tests/vocab (make bench-vs-llamacpp writes them). Output: markdown tables.
set -eu
llama=$1
dir=${2:-/tmp/kvlm-vs}
bench=${LLAMA_BENCH:-$llama/build/bin/llama-bench}
quantize=${LLAMA_QUANTIZE:-$llama/build/bin/llama-quantize}
rounds=${ROUNDS:-3}
repeats=${REPEATS:-2}
vocab=${VOCAB_DIR:-build/tests/vocab}
mkdir -p "$dir"

make_file() { # shape type out
    [ -f "$3" ] || PYTHONPATH="$llama/gguf-py" /usr/bin/python3 bench/make_bench_gguf.py "$1" "$vocab/$4" "$3" --type "$2"
}
quant() { # src type out [--pure]
    [ -f "$3" ] || "$quantize" $4 "$1" "$3" "$2" > "$3.log" 2>&1
}

make_file gpt2-124m f32 "$dir/g2-f32.gguf" ggml-vocab-gpt-2.gguf
make_file gpt2-124m f16 "$dir/g2-f16.gguf" ggml-vocab-gpt-2.gguf
quant "$dir/g2-f16.gguf" Q8_0 "$dir/g2-q8_0.gguf" --pure
quant "$dir/g2-f16.gguf" Q4_0 "$dir/g2-q4_0.gguf" --pure
quant "$dir/g2-f32.gguf" BF16 "$dir/g2-bf16.gguf" ""
make_file llama-1b f16 "$dir/l1b-f16.gguf" ggml-vocab-llama-bpe.gguf
quant "$dir/l1b-f16.gguf" Q8_0 "$dir/l1b-q8_0.gguf" --pure
quant "$dir/l1b-f16.gguf" Q4_0 "$dir/l1b-q4_0.gguf" --pure
quant "$dir/l1b-f16.gguf" BF16 "$dir/l1b-bf16.gguf" --allow-requantize
for t in Q4_K_M Q5_K_M Q6_K; do quant "$dir/l1b-f16.gguf" "$t" "$dir/l1b-$t.gguf" ""; done
make_file llama-gqa f16 "$dir/gqa-f16.gguf" ggml-vocab-llama-bpe.gguf

vs() { bench/vs_llamacpp.py --llama-bench "$bench" --rounds "$rounds" --repeats "$repeats" "$@"; }
echo "## GPT-2 124M shapes"
vs --pp 120 --tg 48 "$dir"/g2-f32.gguf "$dir"/g2-f16.gguf "$dir"/g2-bf16.gguf "$dir"/g2-q8_0.gguf \
    "$dir"/g2-q4_0.gguf
vs --pp 512 --tg 128 "$dir"/g2-f32.gguf "$dir"/g2-f16.gguf
echo "## Llama 3.2 1B shapes"
vs --pp 120 --tg 48 "$dir"/l1b-f16.gguf "$dir"/l1b-bf16.gguf "$dir"/l1b-q8_0.gguf "$dir"/l1b-q4_0.gguf "$dir"/l1b-Q4_K_M.gguf \
    "$dir"/l1b-Q5_K_M.gguf "$dir"/l1b-Q6_K.gguf
echo "## Grouped-query attention at long context (8 layers, 1024 wide, 16/4 heads)"
vs --repeats 1 --pp 2048 --tg 32 "$dir"/gqa-f16.gguf
echo "## A busy process pinned to CPU 0"
vs --contend --pp 120 --tg 48 "$dir"/g2-f16.gguf "$dir"/g2-q8_0.gguf "$dir"/l1b-Q4_K_M.gguf
