#!/bin/sh
# The mixture-of-experts files of docs/performance.md's MoE section:
# random weights with Qwen3-30B-A3B's and gpt-oss-20b's shapes cut in depth
# (bench/make_bench_gguf.py), quantised by llama.cpp's llama-quantize.
# Each OUT.gguf gets OUT.gguf.log: the commands that made it and
# llama-quantize's output. The F16 intermediates are deleted once quantised.
#   bench/make_moe_bench.sh [OUTDIR [LLAMA_CPP [LAYERS]]] [qwen3|gptoss]...
# Defaults: /tmp/kvlm-vs, /tmp/peer/llama.cpp, 6 layers, both models.
# Qwen3 needs build/tests/vocab/ggml-vocab-qwen2.gguf (make test makes it).
set -eu
out=${1:-/tmp/kvlm-vs}; llama=${2:-/tmp/peer/llama.cpp}; layers=${3:-6}
[ $# -gt 3 ] && shift 3 || set --
[ $# -gt 0 ] || set -- qwen3 gptoss
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
make_one() {  # SHAPE VOCAB BASE TYPE...
    shape=$1 vocab=$2 base=$3; shift 3
    f16="$out/$base-f16.gguf"
    gen="PYTHONPATH=$llama/gguf-py /usr/bin/python3 bench/make_bench_gguf.py $shape $vocab $f16 --layers $layers"
    echo "$gen" >"$f16.log"
    PYTHONPATH="$llama/gguf-py" nice /usr/bin/python3 "$here/bench/make_bench_gguf.py" "$shape" "$vocab" "$f16" \
        --layers "$layers" >>"$f16.log" 2>&1
    for t in "$@"; do
        q="$out/$base-$t.gguf"
        { cat "$f16.log"; echo "$llama/build/bin/llama-quantize $f16 $q $t 2"; } >"$q.log"
        nice "$llama/build/bin/llama-quantize" "$f16" "$q" "$t" 2 >>"$q.log" 2>&1
        echo "$q $(stat -c %s "$q")"
    done
    rm -f "$f16" "$f16.log"
}
for m in "$@"; do
    case $m in
    qwen3) make_one qwen3-30b-a3b "$here/build/tests/vocab/ggml-vocab-qwen2.gguf" "qwen3moe-${layers}l" Q8_0 Q4_K_M ;;
    gptoss) make_one gpt-oss-20b none "gptoss-${layers}l" MXFP4_MOE ;;
    *) echo "unknown model $m" >&2; exit 2 ;;
    esac
done
