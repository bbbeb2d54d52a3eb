#!/usr/bin/python3
"""A Llama 3.2 1B-shaped GGUF with random weights and Llama 3's real
vocabulary, for side-by-side speed figures against llama.cpp
(bench/vs_llamacpp.py). Written with llama.cpp's gguf-py, so it is a file
llama.cpp's tools accept as their own; quantise it with llama-quantize.

    PYTHONPATH=$LLAMA_CPP/gguf-py bench/make_llama1b_gguf.py VOCAB.gguf OUT-f16.gguf
    $LLAMA_CPP/build/bin/llama-quantize OUT-f16.gguf OUT-q4_k_m.gguf Q4_K_M

VOCAB.gguf is a vocabulary-only GGUF with Llama 3's tokenizer, e.g. the
build's tests/vocab/ggml-vocab-llama-bpe.gguf (make test decompresses it from
tests/fixtures/llama_vocab). Shapes: 16 layers, hidden 2048, FFN 8192, 32
query heads and 8 KV heads of 64, vocabulary 128256, tied output (as Llama
3.2 1B). Weights are uniform in +-0.02 (speed does not depend on them).
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

L, H, FF, NH, NKV, CTX = 16, 2048, 8192, 32, 8, 8192
HD = H // NH


def copy_vocab(src, w):
    r = GGUFReader(src)
    n_vocab = 0
    for f in r.fields.values():
        if not f.name.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == GGUFValueType.ARRAY:
            sub = f.types[-1]
            if sub == GGUFValueType.STRING:
                vals = [bytes(f.parts[i]).decode("utf-8", "surrogateescape") for i in f.data]
            else:
                vals = [f.parts[i].tolist()[0] for i in f.data]
            if f.name == "tokenizer.ggml.tokens":
                n_vocab = len(vals)
            w.add_array(f.name, vals)
        elif t == GGUFValueType.STRING:
            w.add_string(f.name, bytes(f.parts[f.data[0]]).decode())
        else:
            w.add_key_value(f.name, f.parts[f.data[0]].tolist()[0], t)
    return n_vocab


def main():
    vocab, out = sys.argv[1], sys.argv[2]
    rng = np.random.default_rng(1)
    w = GGUFWriter(out, "llama")
    w.add_name("llama-1b-shapes-random")
    w.add_context_length(CTX)
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_rope_dimension_count(HD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    w.add_file_type(1)
    n_vocab = copy_vocab(vocab, w)
    w.add_vocab_size(n_vocab)

    def m(r, c):
        return (rng.random((r, c), dtype=np.float32) * 0.04 - 0.02).astype(np.float16)

    w.add_tensor("token_embd.weight", m(n_vocab, H))
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(H, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(H, np.float32))
        w.add_tensor(p + "attn_q.weight", m(H, H))
        w.add_tensor(p + "attn_k.weight", m(NKV * HD, H))
        w.add_tensor(p + "attn_v.weight", m(NKV * HD, H))
        w.add_tensor(p + "attn_output.weight", m(H, H))
        w.add_tensor(p + "ffn_gate.weight", m(FF, H))
        w.add_tensor(p + "ffn_up.weight", m(FF, H))
        w.add_tensor(p + "ffn_down.weight", m(H, FF))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
