#!/bin/sh
# Regenerates tests/fixtures/tokenizer/{llama3,qwen2,llama2}/tokenizer.json,
# gguf_*.json and *_cases.json: trains the small vocabularies, asks Hugging
# Face's tokenizers library (npm 'tokenizers', installed outside the repo)
# for the ids of every valid-UTF-8 case, checks them against the Python
# reference and writes the fixtures. Needs node and npm; not part of
# `make test`.
#   tools/make_llama_tokenizer_fixtures.sh [NPM_PREFIX]   (default /tmp/kvlm-tokref)
set -eu
prefix=${1:-/tmp/kvlm-tokref}
out=tests/fixtures/tokenizer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -d "$prefix/node_modules/tokenizers" ] ||
    npm install --prefix "$prefix" --ignore-scripts --no-save tokenizers@0.23.2 >/dev/null
/usr/bin/python3 tools/make_llama_tokenizers.py build "$out" "$work/cases.json"
for f in llama3 qwen2 llama2; do
    NODE_PATH="$prefix/node_modules" node tools/tokenizer_hf_ids.js "$out/$f/tokenizer.json" \
        "$work/cases.json" "$f" "$work/$f.json"
done
/usr/bin/python3 tools/make_llama_tokenizers.py fixture "$out" "$work/cases.json" "$work"
