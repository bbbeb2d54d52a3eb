#!/usr/bin/python3
"""Random-weight GGUF files with real model shapes and a real vocabulary, for
side-by-side speed figures against llama.cpp (bench/vs_llamacpp.py). Written
with llama.cpp's gguf-py, so they are files llama.cpp's tools accept as
their own; quantise them with llama-quantize.

    PYTHONPATH=$LLAMA_CPP/gguf-py bench/make_bench_gguf.py SHAPE VOCAB.gguf OUT.gguf [--type f32|f16]
    $LLAMA_CPP/build/bin/llama-quantize OUT.gguf OUT-q4_k_m.gguf Q4_K_M

SHAPE:
    gpt2-124m  GPT-2 small: 12 layers, hidden 768, 12 heads, FFN 3072,
               context 1024, tied output; VOCAB.gguf with GPT-2's tokenizer
               (build/tests/vocab/ggml-vocab-gpt-2.gguf).
    llama-1b   Llama 3.2 1B: 16 layers, hidden 2048, FFN 8192, 32 query
               heads and 8 KV heads of 64, tied output; VOCAB.gguf with
               Llama 3's tokenizer (build/tests/vocab/ggml-vocab-llama-bpe.gguf).
    llama-gqa  a small Llama with grouped-query attention for long-context
               figures: 8 layers, hidden 1024, FFN 4096, 16 query heads and
               4 KV heads of 64, context 8192; Llama 3's tokenizer.
    qwen3-30b-a3b  Qwen3-30B-A3B (architecture qwen3moe): hidden 2048, 32
               query and 4 KV heads of 128 with q/k norms, 128 experts of
               FFN 768 per layer, 8 per token, untied output; 48 layers, or
               the first --layers of them (the experts stacked in 3-D
               tensors, the router F32, as llama.cpp's converter writes
               them); Qwen2's tokenizer (build/tests/vocab/ggml-vocab-qwen2.gguf).
    gpt-oss-20b  gpt-oss-20b (architecture gpt-oss): hidden 2880, 64 query
               and 8 KV heads of 64 with biases and sinks, 32 experts of FFN
               2880 per layer (biases), 4 per token, window 128 on alternate
               layers, YaRN factor 32 over 4096, untied output; 24 layers,
               or the first --layers; VOCAB is ignored: 201088 placeholder
               tokens (the benchmarks drive the file with token ids).
               Quantise with llama-quantize ... MXFP4_MOE (experts MXFP4,
               the other matrices Q8_0), as the published file is laid out.
make test decompresses the vocabularies from tests/fixtures/llama_vocab.
Matrices are uniform in +-0.02 (speed does not depend on them), stored in
--type (default f16); norms and biases are f32. Tensors are generated
while they are written, one at a time, in slices of 16M values, so a
10 GB file needs little more memory than its largest tensor.
"""
import argparse

import gguf
import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter


class Lazy:
    """A matrix drawn only when the writer reaches it."""

    def __init__(self, shape, dtype, draw):
        self.shape, self.dtype, self.draw = tuple(shape), np.dtype(dtype), draw
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize

    def reshape(self, *shape):
        return Lazy(shape, self.dtype, lambda: self.draw().reshape(shape))


class StreamWriter:
    """GGUFWriter's interface for add_tensor, writing tensors in order and
    drawing each Lazy one just before it is written."""

    def __init__(self, w):
        self.w, self.items = w, []

    def __getattr__(self, name):
        return getattr(self.w, name)

    def add_tensor(self, name, t):
        self.w.add_tensor_info(name, t.shape, t.dtype, t.nbytes)
        self.items.append(t)

    def write(self):
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_ti_data_to_file()
        for t in self.items:
            self.w.write_tensor_data(np.ascontiguousarray(t.draw() if isinstance(t, Lazy) else t))
        self.w.close()


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


def write_gpt2(w, vocab, m, vec):
    L, H, FF, NH, CTX = 12, 768, 3072, 12, 1024
    w.add_context_length(CTX)
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_layer_norm_eps(1e-5)
    n_vocab = copy_vocab(vocab, w)
    w.add_vocab_size(n_vocab)
    w.add_tensor("token_embd.weight", m(n_vocab, H))
    w.add_tensor("position_embd.weight", m(CTX, H))
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    w.add_tensor("output_norm.bias", vec(H))
    for i in range(L):
        p = f"blk.{i}."
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(p + norm + ".weight", np.ones(H, np.float32))
            w.add_tensor(p + norm + ".bias", vec(H))
        for name, rows, cols in (("attn_qkv", 3 * H, H), ("attn_output", H, H),
                                 ("ffn_up", FF, H), ("ffn_down", H, FF)):
            w.add_tensor(p + name + ".weight", m(rows, cols))
            w.add_tensor(p + name + ".bias", vec(rows))


def write_llama(w, vocab, m, vec, shape):
    L, H, FF, NH, NKV, CTX = (16, 2048, 8192, 32, 8, 8192) if shape == "llama-1b" else (8, 1024, 4096, 16, 4, 8192)
    HD = H // NH
    w.add_context_length(CTX)
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(FF)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_rope_dimension_count(HD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(500000.0)
    n_vocab = copy_vocab(vocab, w)
    w.add_vocab_size(n_vocab)
    w.add_tensor("token_embd.weight", m(n_vocab, H))
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(H, np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(H, np.float32))
        for name, rows, cols in (("attn_q", H, H), ("attn_k", NKV * HD, H), ("attn_v", NKV * HD, H),
                                 ("attn_output", H, H), ("ffn_gate", FF, H), ("ffn_up", FF, H),
                                 ("ffn_down", H, FF)):
            w.add_tensor(p + name + ".weight", m(rows, cols))


def write_qwen3moe(w, vocab, m, vec, layers):
    H, NH, NKV, HD, E, K, FE, CTX = 2048, 32, 4, 128, 128, 8, 768, 4096
    w.add_context_length(CTX)
    w.add_embedding_length(H)
    w.add_block_count(layers)
    w.add_feed_forward_length(6144)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1000000.0)
    w.add_expert_count(E)
    w.add_expert_used_count(K)
    w.add_expert_feed_forward_length(FE)
    n_vocab = copy_vocab(vocab, w)
    w.add_tensor("token_embd.weight", m(n_vocab, H))
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    w.add_tensor("output.weight", m(n_vocab, H))
    for i in range(layers):
        p = f"blk.{i}."
        for norm, n in (("attn_norm", H), ("ffn_norm", H), ("attn_q_norm", HD), ("attn_k_norm", HD)):
            w.add_tensor(p + norm + ".weight", np.ones(n, np.float32))
        for name, rows, cols in (("attn_q", NH * HD, H), ("attn_k", NKV * HD, H), ("attn_v", NKV * HD, H),
                                 ("attn_output", H, NH * HD)):
            w.add_tensor(p + name + ".weight", m(rows, cols))
        w.add_tensor(p + "ffn_gate_inp.weight", (vec(E * H) * 50).reshape(E, H))
        for name, rows, cols in (("ffn_gate_exps", FE, H), ("ffn_up_exps", FE, H), ("ffn_down_exps", H, FE)):
            w.add_tensor(p + name + ".weight", m(E * rows, cols).reshape(E, rows, cols))


def write_gptoss(w, m, vec, layers):
    H, NH, NKV, HD, E, K, FE, CTX, VOCAB = 2880, 64, 8, 64, 32, 4, 2880, 131072, 201088
    w.add_context_length(CTX)
    w.add_embedding_length(H)
    w.add_block_count(layers)
    w.add_feed_forward_length(FE)
    w.add_head_count(NH)
    w.add_head_count_kv(NKV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(150000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_sliding_window(128)
    w.add_expert_count(E)
    w.add_expert_used_count(K)
    w.add_expert_feed_forward_length(FE)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    toks = ["<%02x>" % i if i < 3 else "t%d" % i for i in range(VOCAB)]
    toks[-1] = toks[3] + toks[4]
    w.add_token_list(toks)
    w.add_token_types([3 if i < 3 else 1 for i in range(VOCAB)])
    w.add_token_merges([toks[3] + " " + toks[4]])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_add_bos_token(False)
    w.add_tensor("token_embd.weight", m(VOCAB, H))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(H, np.float32))
        for name, rows, cols in (("attn_q", NH * HD, H), ("attn_k", NKV * HD, H), ("attn_v", NKV * HD, H),
                                 ("attn_output", H, NH * HD)):
            w.add_tensor(p + name + ".weight", m(rows, cols))
            w.add_tensor(p + name + ".bias", vec(rows))
        w.add_tensor(p + "attn_sinks.weight", vec(NH))
        w.add_tensor(p + "post_attention_norm.weight", np.ones(H, np.float32))
        w.add_tensor(p + "ffn_gate_inp.weight", (vec(E * H) * 50).reshape(E, H))
        w.add_tensor(p + "ffn_gate_inp.bias", vec(E))
        for name, rows, cols in (("ffn_gate_exps", FE, H), ("ffn_up_exps", FE, H), ("ffn_down_exps", H, FE)):
            w.add_tensor(p + name + ".weight", m(E * rows, cols).reshape(E, rows, cols))
            w.add_tensor(p + name + ".bias", vec(E * rows).reshape(E, rows))
    w.add_tensor("output_norm.weight", np.ones(H, np.float32))
    w.add_tensor("output.weight", m(VOCAB, H))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shape", choices=["gpt2-124m", "llama-1b", "llama-gqa", "qwen3-30b-a3b", "gpt-oss-20b"])
    ap.add_argument("--layers", type=int, default=0,
                    help="qwen3-30b-a3b / gpt-oss-20b: the first N of their 48 / 24 layers")
    ap.add_argument("vocab")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f32", "f16"], default="f16")
    a = ap.parse_args()
    rng = np.random.default_rng(1)
    dt = np.float32 if a.type == "f32" else np.float16

    def m(r, c):
        def draw():  # 16M values at a time: the same stream as one draw, without float32 temporaries of the whole
            out = np.empty((r, c), dt)
            step = max(1, (1 << 24) // c)
            for i in range(0, r, step):
                n = min(step, r - i)
                out[i:i + n] = rng.random((n, c), dtype=np.float32) * 0.04 - 0.02
            return out
        return Lazy((r, c), dt, draw)

    def vec(n):
        return (rng.random(n, dtype=np.float32) * 0.04 - 0.02)

    arch = {"gpt2-124m": "gpt2", "qwen3-30b-a3b": "qwen3moe", "gpt-oss-20b": "gpt-oss"}.get(a.shape, "llama")
    w = StreamWriter(GGUFWriter(a.out, arch))
    w.add_name(a.shape + "-shapes-random")
    w.add_file_type(0 if a.type == "f32" else 1)
    if arch == "gpt2":
        write_gpt2(w, a.vocab, m, vec)
    elif arch == "qwen3moe":
        write_qwen3moe(w, a.vocab, m, vec, a.layers or 48)
    elif arch == "gpt-oss":
        write_gptoss(w, m, vec, a.layers or 24)
    else:
        write_llama(w, a.vocab, m, vec, a.shape)
    w.write()


if __name__ == "__main__":
    main()
