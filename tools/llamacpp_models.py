#!/usr/bin/python3
"""Tiny random-weight GGUF models written with llama.cpp's own Python writer
(gguf-py's GGUFWriter), laid out key for key and tensor for tensor the way
llama.cpp's convert_hf_to_gguf.py writes a Hugging Face checkpoint of the
same architecture with --outtype f16. Used by tools/make_llamacpp_fixtures.py;
importable, no command line.

What convert_hf_to_gguf.py does and this file repeats (llama.cpp de3ff81,
conversion/base.py, llama.py, qwen.py, gpt2.py):
- metadata: general.type "model", general.name, then the architecture's
  hyper-parameters (TextModel.set_gguf_parameters: block_count,
  context_length, embedding_length, feed_forward_length, head_count,
  head_count_kv, rope.freq_base, layer_norm_rms_epsilon / layer_norm_epsilon,
  key_length and value_length when config.json has head_dim, file_type;
  llama adds vocab_size and rope.dimension_count; GPT-2 writes its own set,
  feed_forward_length = 4 x n_embd), general.quantization_version, then
  the vocabulary (_set_vocab_gpt2 + SpecialVocab: tokenizer.ggml.model
  "gpt2", tokenizer.ggml.pre, tokens, token_type, merges, special ids and
  add_bos_token as tokenizer_config.json / tokenizer.json say).
- tensors: GGUF names (token_embd, blk.N.attn_q, ...); 1-D tensors and
  *_norm.weight in F32, position_embd in F32, every other matrix in F16;
  llama's q and k rows permuted (LlamaModel.permute) so that llama.cpp's
  "normal" rope rotates adjacent pairs; GPT-2's Conv1D matrices transposed
  to [out, in]; tied heads written as token_embd only.

The vocabulary is byte-level BPE: the 256 GPT-2 byte symbols, merges
learned from the start of data/tinyshakespeare.txt with the architecture's
pre-tokenizer (GPT-2's pattern for gpt2, Llama 3's for llama, Qwen2's for
qwen2/qwen3), then the special tokens the family uses. Weights are drawn
from fixed seeds and scaled so that next-token distributions are peaked
(logit standard deviation about 2.5), not near-uniform.
"""
import collections
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import tokenizer_reference as gref  # noqa: E402  GPT-2 pattern, byte table
import tokenizer_llama_reference as lref  # noqa: E402  Llama 3 / Qwen2 patterns, BPE
import make_llama_tokenizers as mlt  # noqa: E402  the BPE trainer

CORPUS_CHARS = 100000
N_MERGES = 250
CONTEXT = 128

# Per architecture: the pre-tokenizer name llama.cpp's converter writes, the
# special tokens (content, role), shapes, seeds.
ARCHS = {
    "gpt2": dict(pre="gpt-2", specials=["<|endoftext|>"], bos="<|endoftext|>", eos="<|endoftext|>",
                 add_bos=None, layers=1, hidden=256, heads=4, ffn=1024, out_gain=4.0, seed=103),
    "llama": dict(pre="llama-bpe", specials=["<|begin_of_text|>", "<|end_of_text|>"], bos="<|begin_of_text|>",
                  eos="<|end_of_text|>", add_bos=True, layers=2, hidden=256, heads=4, kv_heads=2, ffn=256,
                  theta=500000.0, eps=1e-5, tied=False, out_gain=2.0, seed=204),
    "qwen2": dict(pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos="<|endoftext|>",
                  eos="<|endoftext|>", pad="<|endoftext|>", add_bos=False, layers=1, hidden=256, heads=4,
                  kv_heads=2, ffn=256, theta=1000000.0, eps=1e-6, tied=True, out_gain=4.0, seed=305),
    "qwen3": dict(pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos="<|endoftext|>",
                  eos="<|endoftext|>", pad="<|endoftext|>", add_bos=False, layers=1, hidden=256, heads=4,
                  kv_heads=1, head_dim=128, ffn=256, theta=1000000.0, eps=1e-6, tied=True, out_gain=4.0,
                  seed=404),
    # Mixtures of experts (llama.cpp's qwen3moe, qwen2moe, and "llama" with
    # experts for Mixtral): 4 experts of 256 per layer, top 2; the router
    # F32 as the converter keeps it; experts stacked in 3-D tensors.
    "qwen3moe": dict(pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos="<|endoftext|>",
                     eos="<|endoftext|>", pad="<|endoftext|>", add_bos=False, layers=1, hidden=256, heads=4,
                     kv_heads=2, head_dim=64, ffn=512, theta=1000000.0, eps=1e-6, tied=True, out_gain=4.0,
                     experts=4, experts_used=2, expert_ffn=256, router_gain=3.0, seed=505),
    "qwen2moe": dict(pre="qwen2", specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos="<|endoftext|>",
                     eos="<|endoftext|>", pad="<|endoftext|>", add_bos=False, layers=1, hidden=256, heads=4,
                     kv_heads=2, ffn=512, theta=1000000.0, eps=1e-6, tied=False, out_gain=4.0, experts=4,
                     experts_used=2, expert_ffn=256, shared_ffn=256, router_gain=3.0, seed=606),
    "mixtral": dict(gguf_arch="llama", pre="llama-bpe", specials=["<|begin_of_text|>", "<|end_of_text|>"],
                    bos="<|begin_of_text|>", eos="<|end_of_text|>", add_bos=True, layers=1, hidden=256, heads=4,
                    kv_heads=2, ffn=256, theta=1000000.0, eps=1e-5, tied=False, out_gain=4.0, experts=4,
                    experts_used=2, router_gain=3.0, seed=707),
}


# ---------------------------------------------------------------- vocabulary

def pretokenize(arch, text):
    if arch == "gpt2":
        return gref.pretokenize(text)
    return lref.pretokenize_llama(text, 3 if ARCHS[arch]["pre"] == "llama-bpe" else 1)


class Vocab:
    """tokens (GGUF strings), token types, merges ("a b"), ids of specials."""

    def __init__(self, arch):
        spec = ARCHS[arch]
        self.arch = arch
        with open(os.path.join(ROOT, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
            text = f.read()[:CORPUS_CHARS]
        self.b2u = gref.bytes_to_unicode()
        words = collections.Counter()
        for w in pretokenize(arch, text):
            words[tuple(self.b2u[b] for b in w.encode("utf-8"))] += 1
        merges = mlt.train(words, N_MERGES)
        self.tokens = [self.b2u[b] for b in sorted(self.b2u, key=lambda b: self.b2u[b])]
        self.tokens += [a + b for a, b in merges]
        self.merges = ["%s %s" % (a, b) for a, b in merges]
        self.types = [1] * len(self.tokens)
        for s in spec["specials"]:
            self.tokens.append(s)
            self.types.append(3)
        self.id = {t: i for i, t in enumerate(self.tokens)}
        assert len(self.id) == len(self.tokens), "duplicate token"
        self.ranks = {tuple(m.split(" ")): (r, self.id[m.replace(" ", "")]) for r, m in enumerate(self.merges)}
        self.ignore_merges = spec["pre"] == "llama-bpe"  # llama.cpp sets it for llama-bpe, as Llama 3's tokenizer.json does

    def encode(self, text, add_bos):
        """ids of text (no special tokens matched), BOS first when add_bos."""
        ids = [self.id[ARCHS[self.arch]["bos"]]] if add_bos else []
        for w in pretokenize(self.arch, text):
            sym = "".join(self.b2u[b] for b in w.encode("utf-8"))
            if self.ignore_merges and sym in self.id:
                ids.append(self.id[sym])
                continue
            ids += lref.bpe_one([self.id[c] for c in sym], {(self.id[a], self.id[b]): r
                                                            for (a, b), r in self.ranks.items()})
        return ids


# ---------------------------------------------------------------- weights

def llama_permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: rotate-half pairs (i, i+d/2)
    of each head become adjacent rows (2i, 2i+1)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _weights(arch, n_vocab):
    """{GGUF tensor name: float32 array [out, in] / [n]} in the order the
    converter emits them (token_embd first, blocks, output_norm, output)."""
    s = ARCHS[arch]
    rng = np.random.default_rng(s["seed"])
    H, L, F = s["hidden"], s["layers"], s["ffn"]
    og = s.get("out_gain", 0.7)  # attn_output / ffn_down: how far the blocks move the residual
    ig = s.get("in_gain", 1.0)  # q / k / ffn inputs: how sharp attention and the MLP are
    esd = s.get("embed_sd", 0.15)  # token_embd / output: the logits' scale
    mat = lambda o, i, g=1.0: (rng.standard_normal((o, i)) * g / np.sqrt(i)).astype(np.float32)
    vec = lambda n, mu=0.0, sd=0.1: (mu + sd * rng.standard_normal(n)).astype(np.float32)
    w = {}
    if arch == "gpt2":
        w["token_embd.weight"] = (esd * rng.standard_normal((n_vocab, H))).astype(np.float32)
        w["position_embd.weight"] = (0.1 * rng.standard_normal((CONTEXT, H))).astype(np.float32)
        for i in range(L):
            p = "blk.%d." % i
            w[p + "attn_norm.weight"], w[p + "attn_norm.bias"] = vec(H, 1.0), vec(H)
            w[p + "attn_qkv.weight"], w[p + "attn_qkv.bias"] = mat(3 * H, H, ig), vec(3 * H)
            w[p + "attn_output.weight"], w[p + "attn_output.bias"] = mat(H, H, og), vec(H)
            w[p + "ffn_norm.weight"], w[p + "ffn_norm.bias"] = vec(H, 1.0), vec(H)
            w[p + "ffn_up.weight"], w[p + "ffn_up.bias"] = mat(F, H, ig), vec(F)
            w[p + "ffn_down.weight"], w[p + "ffn_down.bias"] = mat(H, F, og), vec(H)
        w["output_norm.weight"], w["output_norm.bias"] = vec(H, 1.0), vec(H)
        return w
    nh, nkv = s["heads"], s["kv_heads"]
    hd = s.get("head_dim", H // nh)
    w["token_embd.weight"] = (esd * rng.standard_normal((n_vocab, H))).astype(np.float32)
    for i in range(L):
        p = "blk.%d." % i
        w[p + "attn_norm.weight"] = vec(H, 1.0)
        q, k, v = mat(nh * hd, H, ig), mat(nkv * hd, H, ig), mat(nkv * hd, H)
        if s.get("gguf_arch", arch) == "llama":  # the converter permutes Hugging Face's q/k rows
            q, k = llama_permute(q, nh), llama_permute(k, nkv)
        w[p + "attn_q.weight"], w[p + "attn_k.weight"], w[p + "attn_v.weight"] = q, k, v
        if arch in ("qwen2", "qwen2moe"):
            w[p + "attn_q.bias"], w[p + "attn_k.bias"], w[p + "attn_v.bias"] = (
                vec(nh * hd, 0, 0.1), vec(nkv * hd, 0, 0.1), vec(nkv * hd, 0, 0.1))
        if arch in ("qwen3", "qwen3moe"):
            w[p + "attn_q_norm.weight"], w[p + "attn_k_norm.weight"] = vec(hd, 1.0), vec(hd, 1.0)
        w[p + "attn_output.weight"] = mat(H, nh * hd, og)
        w[p + "ffn_norm.weight"] = vec(H, 1.0)
        if "experts" in s:
            _experts(w, p, s, rng, mat, vec, ig, og)
            continue
        w[p + "ffn_gate.weight"], w[p + "ffn_up.weight"] = mat(F, H, ig), mat(F, H, ig)
        w[p + "ffn_down.weight"] = mat(H, F, og)
    w["output_norm.weight"] = vec(H, 1.0)
    if not s["tied"]:
        w["output.weight"] = (esd * rng.standard_normal((n_vocab, H))).astype(np.float32)
    return w


def _experts(w, p, s, rng, mat, vec, ig, og):
    """A layer's mixture of experts in the converter's layout: router
    ffn_gate_inp [n, H]; experts stacked as ffn_{gate,up}_exps [n, F, H]
    and ffn_down_exps [n, H, F]; Qwen2-MoE's shared expert ffn_*_shexp and
    its gate ffn_gate_inp_shexp [H]."""
    H, n, F = s["hidden"], s["experts"], s.get("expert_ffn", s["ffn"])
    w[p + "ffn_gate_inp.weight"] = mat(n, H, s["router_gain"])
    w[p + "ffn_gate_exps.weight"] = np.stack([mat(F, H, ig) for _ in range(n)])
    w[p + "ffn_down_exps.weight"] = np.stack([mat(H, F, og) for _ in range(n)])
    w[p + "ffn_up_exps.weight"] = np.stack([mat(F, H, ig) for _ in range(n)])
    if "shared_ffn" in s:
        S = s["shared_ffn"]
        w[p + "ffn_gate_inp_shexp.weight"] = vec(H, 0.0, 1.0 / np.sqrt(H))
        w[p + "ffn_gate_shexp.weight"], w[p + "ffn_up_shexp.weight"] = mat(S, H, ig), mat(S, H, ig)
        w[p + "ffn_down_shexp.weight"] = mat(H, S, og)


def _stored_type(name, arr):
    """The converter's choice for --outtype f16 (the router stays F32)."""
    if arr.ndim <= 1 or name.endswith("_norm.weight") or name == "position_embd.weight" or \
            name.endswith("ffn_gate_inp.weight"):
        return np.float32
    return np.float16


def write_f16(arch, path, gguf):
    """Writes the F16 model of arch to path; returns its Vocab."""
    s = ARCHS[arch]
    voc = Vocab(arch)
    n_vocab = len(voc.tokens)
    w = _weights(arch, n_vocab)
    gw = gguf.GGUFWriter(path, s.get("gguf_arch", arch))
    gw.add_type(gguf.GGUFType.MODEL)
    gw.add_name("kvlm tiny %s" % arch)
    H = s["hidden"]
    gw.add_block_count(s["layers"])
    gw.add_context_length(CONTEXT)
    gw.add_embedding_length(H)
    gw.add_feed_forward_length(s["ffn"])
    gw.add_head_count(s["heads"])
    if arch == "gpt2":
        gw.add_layer_norm_eps(1e-5)
    else:
        gw.add_head_count_kv(s["kv_heads"])
        gw.add_rope_freq_base(s["theta"])
        gw.add_layer_norm_rms_eps(s["eps"])
        if "head_dim" in s:  # config.json's head_dim (Qwen3)
            gw.add_key_length(s["head_dim"])
            gw.add_value_length(s["head_dim"])
    if "experts" in s:
        gw.add_expert_count(s["experts"])
        gw.add_expert_used_count(s["experts_used"])
        if "expert_ffn" in s:
            gw.add_expert_feed_forward_length(s["expert_ffn"])
        if "shared_ffn" in s:
            gw.add_expert_shared_feed_forward_length(s["shared_ffn"])
    gw.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if s.get("gguf_arch", arch) == "llama":
        gw.add_vocab_size(n_vocab)
        gw.add_rope_dimension_count(H // s["heads"])
    gw.add_quantization_version(gguf.GGML_QUANT_VERSION)
    gw.add_tokenizer_model("gpt2")
    gw.add_tokenizer_pre(s["pre"])
    gw.add_token_list(voc.tokens)
    gw.add_token_types(voc.types)
    gw.add_token_merges(voc.merges)
    gw.add_bos_token_id(voc.id[s["bos"]])
    gw.add_eos_token_id(voc.id[s["eos"]])
    if "pad" in s:
        gw.add_pad_token_id(voc.id[s["pad"]])
    if s["add_bos"] is not None:
        gw.add_add_bos_token(s["add_bos"])
    for name, arr in w.items():
        gw.add_tensor(name, arr.astype(_stored_type(name, arr)))
    gw.write_header_to_file()
    gw.write_kv_data_to_file()
    gw.write_tensors_to_file()
    gw.close()
    return voc
