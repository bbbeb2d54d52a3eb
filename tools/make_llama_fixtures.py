#!/usr/bin/python3
"""Reference fixtures for kvlm's Llama-family loaders and forward pass.

Usage:
    make_llama_fixtures.py OUTDIR

Writes tiny random-weight Llama, Mistral, Qwen2, Qwen3 and Phi-3 models in
the Hugging Face layout (OUTDIR/<variant>/config.json + model.safetensors) and, for
each, OUTDIR/<variant>.expected.json in the format of the GPT-2 fixtures:
prompt, decode tokens, prefill logits at every prompt position, and the
last-position logits after each decode token (full recomputation), computed
in float64 by tools/llama_reference.py from the weights exactly as stored
(after rounding to f16/bf16).

Variants (all: 2 layers, hidden 64, MLP 96, 4 query heads of 16, vocabulary
256, 64 positions, rms_norm_eps 1e-5):

    mha          llama,   4 KV heads, F32, untied head     (multi-head twin of gqa)
    gqa          llama,   2 KV heads, F32, untied head
    mqa          mistral, 1 KV head,  F32, untied head
    qwen2        qwen2,   2 KV heads, F32, q/k/v biases, head tied to the embedding
    llama3_rope  the gqa weights (byte-identical file) with rope_scaling llama3:
                 factor 4, low_freq_factor 0.5, high_freq_factor 2,
                 original_max_position_embeddings 16 (all three frequency bands)
    gqa_bf16     the gqa weights rounded to BF16
    gqa_f16      the gqa weights rounded to F16
    qwen3        qwen3,   2 KV heads, F32, head_dim 24 (4 x 24 = 96 != hidden 64),
                 q_norm/k_norm per head, no biases, head tied to the embedding
    phi3         phi3,    2 KV heads, F32, fused qkv_proj [q; k; v] and
                 gate_up_proj [gate; up], untied head, sliding_window 7
                 (shorter than the 16 positions checked: the window bites in
                 prefill and in every decode step)
    mistral_swa  the mqa weights (byte-identical file) with sliding_window 5

Deterministic (fixed seeds): re-running gives byte-identical files. Every
file is read back and every expected logit recomputed before it finishes.
"""
import json, os, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_reference as ref  # noqa: E402

SEED = 20250308
DIMS = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            head_dim=16, max_position_embeddings=64, vocab_size=256, rms_norm_eps=1e-5)
PROMPT = [1, 200, 17, 42, 103, 0, 150, 88]
DECODE = [64, 255, 123, 2, 31, 77, 5, 142]
# std of the random matrices, chosen so the logits spread over a few units
# (std about 2), attention is far from uniform and every sublayer matters
STD = dict(embed=0.5, head=0.25, q=0.2, k=0.2, v=0.2, o=0.15, gate=0.2, up=0.2, down=0.15,
           norm=0.1, bias=0.2, qk_norm=0.3)
TORCH_DTYPE = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
HF_DTYPE_NAME = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}

# model: (model_type, KV heads, rope_theta, q/k/v biases, tied head, seed offset)
MODELS = {"mha": ("llama", 4, 10000.0, False, False, 1),
          "gqa": ("llama", 2, 10000.0, False, False, 2),
          "mqa": ("mistral", 1, 10000.0, False, False, 3),
          "qwen2": ("qwen2", 2, 1000000.0, True, True, 4),
          "qwen3": ("qwen3", 2, 1000000.0, False, True, 5),
          "phi3": ("phi3", 2, 10000.0, False, False, 6)}
HEAD_DIM = {"qwen3": 24}   # otherwise DIMS["head_dim"]
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 0.5, "high_freq_factor": 2.0,
                  "original_max_position_embeddings": 16}
# variant: (model, weight dtype, rope_scaling[, sliding_window])
VARIANTS = [("mha", "mha", "f32", None), ("gqa", "gqa", "f32", None), ("mqa", "mqa", "f32", None),
            ("qwen2", "qwen2", "f32", None), ("llama3_rope", "gqa", "f32", LLAMA3_SCALING),
            ("gqa_bf16", "gqa", "bf16", None), ("gqa_f16", "gqa", "f16", None),
            ("qwen3", "qwen3", "f32", None), ("phi3", "phi3", "f32", None, 7),
            ("mistral_swa", "mqa", "f32", None, 5)]


def make_config(model, dtype, rope_scaling, window=None):
    mt, nkv, theta, bias, tied, _ = MODELS[model]
    c = {"architectures": [ref.ARCHITECTURES[mt]], "model_type": mt}
    c.update(DIMS)
    c["head_dim"] = HEAD_DIM.get(model, DIMS["head_dim"])
    c.update({"num_key_value_heads": nkv, "hidden_act": "silu", "rope_theta": theta,
              "rope_scaling": rope_scaling, "tie_word_embeddings": tied,
              "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
              "attention_dropout": 0.0, "use_cache": True, "torch_dtype": HF_DTYPE_NAME[dtype]})
    if mt == "llama":
        c.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1})
    elif mt == "mistral":
        c["sliding_window"] = window
    elif mt == "phi3":
        c.update({"sliding_window": window, "original_max_position_embeddings": DIMS["max_position_embeddings"],
                  "attention_bias": False, "resid_pdrop": 0.0, "embd_pdrop": 0.0, "pad_token_id": 0})
    elif mt == "qwen3":
        c.update({"use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
                  "attention_bias": False})
    else:
        c.update({"use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 2})
    return c


def make_weights(model):
    """Float32 master weights keyed by HF names (Linear layout [out, in])."""
    mt, nkv, _, bias, tied, off = MODELS[model]
    g = torch.Generator().manual_seed(SEED + off)
    H, I, L, V, nh = (DIMS[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                         "vocab_size", "num_attention_heads"))
    hd = HEAD_DIM.get(model, DIMS["head_dim"])
    rnd = lambda s, *shape: s * torch.randn(*shape, generator=g, dtype=torch.float32)
    # a tied matrix serves as the head, so it gets the head's scale
    w = {ref.EMBED: rnd(STD["head"] if tied else STD["embed"], V, H)}
    for i in range(L):
        p = ref.LAYER_FMT % i
        w[p + "input_layernorm.weight"] = 1 + rnd(STD["norm"], H)
        for n, rows in (("q", nh), ("k", nkv), ("v", nkv)):
            w[p + "self_attn.%s_proj.weight" % n] = rnd(STD[n], rows * hd, H)
            if bias:
                w[p + "self_attn.%s_proj.bias" % n] = rnd(STD["bias"], rows * hd)
        w[p + "self_attn.o_proj.weight"] = rnd(STD["o"], H, nh * hd)
        w[p + "post_attention_layernorm.weight"] = 1 + rnd(STD["norm"], H)
        w[p + "mlp.gate_proj.weight"] = rnd(STD["gate"], I, H)
        w[p + "mlp.up_proj.weight"] = rnd(STD["up"], I, H)
        w[p + "mlp.down_proj.weight"] = rnd(STD["down"], H, I)
        if mt == "qwen3":
            w[p + "self_attn.q_norm.weight"] = 1 + rnd(STD["qk_norm"], hd)
            w[p + "self_attn.k_norm.weight"] = 1 + rnd(STD["qk_norm"], hd)
    w[ref.NORM] = 1 + rnd(STD["norm"], H)
    if not tied:
        w[ref.HEAD] = rnd(STD["head"], V, H)
    return ref.fuse_phi3(w) if mt == "phi3" else w


def write_variant(outdir, variant, model, dtype, scaling, master, window=None):
    d = os.path.join(outdir, variant)
    os.makedirs(d, exist_ok=True)
    cfg = make_config(model, dtype, scaling, window)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2) + "\n")
    w = {k: v.to(TORCH_DTYPE[dtype]) for k, v in master.items()}
    ref.write_safetensors(os.path.join(d, "model.safetensors"), sorted(w.items()))
    return cfg, w


def kv_bytes_per_token(cfg, elt=4):
    d = ref.dims(cfg)
    return 2 * d["n_layer"] * d["n_kv"] * d["head_dim"] * elt


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    outdir = sys.argv[1]
    assert sys.byteorder == "little", "the writers emit host-order bytes"
    torch.set_num_threads(1)
    os.makedirs(outdir, exist_ok=True)
    masters = {m: make_weights(m) for m in MODELS}
    written = {}
    for variant, model, dtype, scaling, *window in VARIANTS:
        cfg, w = write_variant(outdir, variant, model, dtype, scaling, masters[model], *window)
        pre, dec = ref.reference(w, cfg, PROMPT, DECODE)
        ref.write_expected(os.path.join(outdir, variant + ".expected.json"), variant, dtype, pre, dec,
                           prompt_ids=PROMPT, decode_ids=DECODE)
        written[variant] = (cfg, w, pre, dec)

    # Self-check: read everything back with the reference's loader and recompute.
    for variant, (cfg, w, _, _) in written.items():
        back, bcfg = ref.load_hf(os.path.join(outdir, variant))
        assert bcfg == cfg and set(back) == set(w), variant
        for k in w:
            assert torch.equal(back[k], w[k].double()), (variant, k)
        err = ref.expected_error(os.path.join(outdir, variant), os.path.join(outdir, variant + ".expected.json"))
        assert err < 1e-7, (variant, err)      # only the 9-digit text rounding
    same = lambda a, b: open(a, "rb").read() == open(b, "rb").read()
    assert same(os.path.join(outdir, "gqa/model.safetensors"), os.path.join(outdir, "llama3_rope/model.safetensors"))
    assert same(os.path.join(outdir, "mqa/model.safetensors"), os.path.join(outdir, "mistral_swa/model.safetensors"))

    # Summary: spread of the logits and what float32 arithmetic / an f16 KV cache cost.
    print("dims:", DIMS)
    print("%-12s %-8s %3s %9s %9s %7s %9s %10s %11s %8s" % ("variant", "type", "kv", "dtype", "logit std",
                                                            "max|l|", "f32 err", "f16-KV err", "bf16-act err",
                                                            "top2 gap"))
    bf16_act = lambda t: t.to(torch.bfloat16).to(t.dtype)
    for variant, (cfg, w, pre, dec) in written.items():
        allv = torch.cat([pre, dec])
        p32, d32 = ref.reference(w, cfg, PROMPT, DECODE, dtype=torch.float32)
        p16, d16 = ref.reference(w, cfg, PROMPT, DECODE, dtype=torch.float32, kv_f16=True)
        e32 = max((p32.double() - pre).abs().max().item(), (d32.double() - dec).abs().max().item())
        e16 = max((p16.double() - pre).abs().max().item(), (d16.double() - dec).abs().max().item())
        pb, db = ref.reference(w, cfg, PROMPT, DECODE, dtype=torch.float32, act=bf16_act)
        eb = max((pb.double() - pre).abs().max().item(), (db.double() - dec).abs().max().item())
        top2 = torch.topk(allv, 2, dim=-1).values
        print("%-12s %-8s %3d %9s %9.3f %7.3f %9.2e %10.2e %11.2e %8.4f" % (
            variant, cfg["model_type"], cfg["num_key_value_heads"], cfg["torch_dtype"], allv.std().item(),
            allv.abs().max().item(), e32, e16, eb, (top2[:, 0] - top2[:, 1]).min().item()))
    g, l3 = written["gqa"], written["llama3_rope"]
    print("llama3_rope vs gqa (same weights, unscaled rope): max |logit difference| %.3f"
          % torch.cat([(l3[2] - g[2]).abs(), (l3[3] - g[3]).abs()]).max().item())
    mq, sw = written["mqa"], written["mistral_swa"]
    print("mistral_swa vs mqa (same weights, no window): max |logit difference| %.3f over positions >= 5, "
          "%.1e before" % (max((sw[2][5:] - mq[2][5:]).abs().max().item(), (sw[3] - mq[3]).abs().max().item()),
                           (sw[2][:5] - mq[2][:5]).abs().max().item()))
    print("rope inv_freq gqa:        ", ["%.6g" % x for x in ref.rope_inv_freq(g[0]).tolist()])
    print("rope inv_freq llama3_rope:", ["%.6g" % x for x in ref.rope_inv_freq(l3[0]).tolist()])
    for v in ("mha", "gqa", "mqa"):
        print("KV bytes per token (f32 cache) %-4s %d" % (v, kv_bytes_per_token(written[v][0])))
    total = 0
    for root, _, files in sorted(os.walk(outdir)):
        for f in sorted(files):
            p = os.path.join(root, f)
            total += os.path.getsize(p)
            print("  %-40s %9d bytes" % (os.path.relpath(p, outdir), os.path.getsize(p)))
    print("  total %d bytes; all files read back and verified" % total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
