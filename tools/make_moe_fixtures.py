#!/usr/bin/python3
"""Reference fixtures for kvlm's mixtures of experts (Hugging Face layout).

Usage:
    make_moe_fixtures.py OUTDIR

Writes tiny random-weight Qwen3-MoE, Qwen2-MoE and Mixtral models
(OUTDIR/<variant>/config.json + model.safetensors, F32) and, for each,
OUTDIR/<variant>.expected.json in the format of the Llama fixtures (prompt,
decode tokens, prefill logits at every prompt position, last-position
logits after each decode token), computed in float64 by
tools/llama_reference.py with tools/moe_reference.py's FFN.

All: 2 layers, hidden 32, 4 query heads of 8 over 2 KV heads, vocabulary
128, 64 positions, 8 experts of FFN 16:

    qwen3_moe   top 3, norm_topk_prob true, per-head q/k norms, tied head
    qwen2_moe   top 2, norm_topk_prob false, q/k/v biases, a shared expert
                of 24 with its sigmoid gate, untied head
    mixtral     top 2 (always renormalised), untied head

    gpt_oss     see GO below: sinks, window 128 on layer 0, YaRN, biases,
                top-k-then-softmax, clamped SwiGLU; its expected file holds
                the logits of every position of prompt + decode
                (tools/moe_reference.py's gptoss_forward)

The routers' scale spreads the tokens over the experts (every expert is
chosen somewhere in every layer) with a margin between the k-th and the
(k+1)-th probability of every routed row (at least MIN_MARGIN, far above
f32 rounding), so kvlm's f32 arithmetic cannot change a choice: the first
seed of SEED + offset, SEED + offset + 100, ... that gives both is used,
and the smallest margin is printed. Deterministic.
"""
import json, os, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_reference as ref  # noqa: E402
import moe_reference as moe  # noqa: E402

SEED = 20261207
H, L, NH, NKV, HD, V, E, FE, SH = 32, 2, 4, 2, 8, 128, 8, 16, 24
PROMPT = [1, 100, 17, 42, 103, 0, 90, 88]
DECODE = [64, 127, 123, 2, 31, 77, 5, 12]
MIN_MARGIN = 2e-4
SEED_TRIES = 50

# variant: (model_type, top k, norm_topk_prob, seed offset)
VARIANTS = {"qwen3_moe": ("qwen3_moe", 3, True, 1), "qwen2_moe": ("qwen2_moe", 2, False, 2),
            "mixtral": ("mixtral", 2, None, 3)}


def make_config(mt, k, norm):
    c = {"architectures": [ref.ARCHITECTURES[mt]], "model_type": mt, "hidden_size": H,
         "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
         "max_position_embeddings": 64, "vocab_size": V, "rms_norm_eps": 1e-6, "hidden_act": "silu",
         "rope_theta": 1000000.0, "tie_word_embeddings": mt == "qwen3_moe", "bos_token_id": 1,
         "eos_token_id": 2, "torch_dtype": "float32", "num_experts_per_tok": k}
    if mt == "mixtral":
        c.update({"num_local_experts": E, "intermediate_size": FE, "sliding_window": None,
                  "router_aux_loss_coef": 0.02})
    else:
        c.update({"num_experts": E, "moe_intermediate_size": FE, "intermediate_size": 64,
                  "norm_topk_prob": norm, "decoder_sparse_step": 1, "mlp_only_layers": [],
                  "use_sliding_window": False, "sliding_window": None, "max_window_layers": L})
        if mt == "qwen2_moe":
            c["shared_expert_intermediate_size"] = SH
        else:
            c["attention_bias"] = False
    return c


def make_weights(mt, off):
    g = torch.Generator().manual_seed(SEED + off)
    rnd = lambda s, *shape: s * torch.randn(*shape, generator=g, dtype=torch.float32)
    tied = mt == "qwen3_moe"
    w = {ref.EMBED: rnd(0.35 if tied else 0.5, V, H), ref.NORM: 1 + rnd(0.1, H)}
    if not tied:
        w[ref.HEAD] = rnd(0.35, V, H)
    for i in range(L):
        p = ref.LAYER_FMT % i
        w[p + "input_layernorm.weight"] = 1 + rnd(0.1, H)
        w[p + "post_attention_layernorm.weight"] = 1 + rnd(0.1, H)
        for n, rows in (("q", NH), ("k", NKV), ("v", NKV)):
            w[p + "self_attn.%s_proj.weight" % n] = rnd(0.25, rows * HD, H)
            if mt == "qwen2_moe":
                w[p + "self_attn.%s_proj.bias" % n] = rnd(0.2, rows * HD)
        w[p + "self_attn.o_proj.weight"] = rnd(0.2, H, NH * HD)
        if mt == "qwen3_moe":
            w[p + "self_attn.q_norm.weight"] = 1 + rnd(0.3, HD)
            w[p + "self_attn.k_norm.weight"] = 1 + rnd(0.3, HD)
        if mt == "mixtral":
            b, names = p + "block_sparse_moe.", ("w1", "w3", "w2")
        else:
            b, names = p + "mlp.", ("gate_proj", "up_proj", "down_proj")
        w[b + "gate.weight"] = rnd(0.6, E, H)
        for x in range(E):
            e = b + "experts.%d." % x
            w[e + names[0] + ".weight"] = rnd(0.3, FE, H)
            w[e + names[1] + ".weight"] = rnd(0.3, FE, H)
            w[e + names[2] + ".weight"] = rnd(0.4, H, FE)
        if mt == "qwen2_moe":
            s = p + "mlp.shared_expert."
            w[s + "gate_proj.weight"], w[s + "up_proj.weight"] = rnd(0.3, SH, H), rnd(0.3, SH, H)
            w[s + "down_proj.weight"] = rnd(0.3, H, SH)
            w[p + "mlp.shared_expert_gate.weight"] = rnd(0.3, 1, H)
    return w


def routing_stats(w, cfg):
    """(smallest margin between the k-th and (k+1)-th probability, experts
    chosen per layer) over every position of prompt + decode."""
    seen, margin = [set() for _ in range(L)], [1.0]
    orig = moe.routing

    def spy(h, W, p, config):
        wt, e, probs = orig(h, W, p, config)
        k = config["num_experts_per_tok"]
        top = torch.topk(probs, k + 1, dim=-1).values
        margin[0] = min(margin[0], (top[..., k - 1] - top[..., k]).min().item())
        seen[int(p.split(".")[2])].update(e.flatten().tolist())
        return wt, e, probs
    moe.routing = spy
    try:
        ref.forward(w, cfg, PROMPT + DECODE)
    finally:
        moe.routing = orig
    return margin[0], [len(s) for s in seen]


# gpt-oss: 2 layers (layer 0 sliding over 128 positions, layer 1 global),
# hidden 32, 4 query heads of 8 over 2 KV heads, vocabulary 64, 256
# positions, 8 experts of FFN 32 (MXFP4 rows need multiples of 32), top 3,
# YaRN factor 4 over an original context of 64 (truncate false, as
# gpt-oss's own config), sinks, biases everywhere; the gate/up biases hold
# a few values of +-9 so the clamp at swiglu_limit 7 acts. A prompt of 136
# ids (past the window) and 8 decode ids.
GO = dict(E=8, K=3, FE=32, V=64, CTX=256, WIN=128, N_PROMPT=136, N_DECODE=8)


def gptoss_config(truncate=False):
    return {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": H,
            "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD,
            "max_position_embeddings": GO["CTX"], "vocab_size": GO["V"], "rms_norm_eps": 1e-5,
            "hidden_act": "silu", "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1,
            "eos_token_id": 2, "torch_dtype": "float32", "num_local_experts": GO["E"],
            "num_experts_per_tok": GO["K"], "experts_per_token": GO["K"], "intermediate_size": GO["FE"],
            "sliding_window": GO["WIN"], "layer_types": ["sliding_attention", "full_attention"],
            "attention_bias": True, "swiglu_limit": 7.0,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                             "original_max_position_embeddings": 64, "truncate": truncate}}


def gptoss_weights(off):
    g = torch.Generator().manual_seed(SEED + off)
    rnd = lambda s, *shape: s * torch.randn(*shape, generator=g, dtype=torch.float32)
    E, FE, V = GO["E"], GO["FE"], GO["V"]
    w = {ref.EMBED: rnd(0.5, V, H), ref.NORM: 1 + rnd(0.1, H), ref.HEAD: rnd(0.35, V, H)}
    for i in range(L):
        p = ref.LAYER_FMT % i
        w[p + "input_layernorm.weight"] = 1 + rnd(0.1, H)
        w[p + "post_attention_layernorm.weight"] = 1 + rnd(0.1, H)
        for n, rows in (("q", NH), ("k", NKV), ("v", NKV)):
            w[p + "self_attn.%s_proj.weight" % n] = rnd(0.25, rows * HD, H)
            w[p + "self_attn.%s_proj.bias" % n] = rnd(0.2, rows * HD)
        w[p + "self_attn.o_proj.weight"] = rnd(0.2, H, NH * HD)
        w[p + "self_attn.o_proj.bias"] = rnd(0.1, H)
        w[p + "self_attn.sinks"] = rnd(1.0, NH)
        w[p + "mlp.router.weight"] = rnd(0.6, E, H)
        w[p + "mlp.router.bias"] = rnd(0.3, E)
        w[p + "mlp.experts.gate_up_proj"] = rnd(0.3, E, H, 2 * FE)
        b = rnd(0.2, E, 2 * FE)
        b[:, 0:6] = torch.tensor([9.0, -9.0, 9.5, 9.0, -9.5, 8.5])  # gate 0 above the limit, up 0 below, ...
        w[p + "mlp.experts.gate_up_proj_bias"] = b
        w[p + "mlp.experts.down_proj"] = rnd(0.15, E, FE, H)
        w[p + "mlp.experts.down_proj_bias"] = rnd(0.1, E, H)
    return w


def gptoss_ids():
    x, out = 4242, []
    for _ in range(GO["N_PROMPT"] + GO["N_DECODE"]):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append((x >> 8) % GO["V"])
    return out


def gptoss_margin(w, cfg, ids):
    """Smallest gap between the k-th and (k+1)-th router logit, experts used per layer."""
    seen, margin = [set() for _ in range(L)], [1e9]
    orig = moe.gptoss_routing

    def spy(h, W, p, config):
        wt, e, logits = orig(h, W, p, config)
        top = torch.topk(logits, GO["K"] + 1, dim=-1).values
        margin[0] = min(margin[0], (top[..., GO["K"] - 1] - top[..., GO["K"]]).min().item())
        seen[int(p.split(".")[2])].update(e.flatten().tolist())
        return wt, e, logits
    moe.gptoss_routing = spy
    try:
        moe.gptoss_forward(w, cfg, ids)
    finally:
        moe.gptoss_routing = orig
    return margin[0], [len(s) for s in seen]


def write_gptoss_expected(path, cfg, ids, lg):
    out = {"variant": "gpt_oss", "n_prompt": GO["N_PROMPT"], "ids": ids, "vocab": cfg["vocab_size"],
           "logits": [[float("%.9g" % x) for x in r] for r in lg.tolist()]}
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


def make_gptoss(out):
    cfg, ids = gptoss_config(), gptoss_ids()
    for t in range(SEED_TRIES):
        w = gptoss_weights(4 + 100 * t)
        margin, used = gptoss_margin({n: x.double() for n, x in w.items()}, cfg, ids)
        if margin > 1e-3 and all(u == GO["E"] for u in used):
            break
    else:
        raise SystemExit("gpt_oss: no seed routes with a margin")
    d = os.path.join(out, "gpt_oss")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2) + "\n")
    ref.write_safetensors(os.path.join(d, "model.safetensors"), sorted(w.items()))
    lg = moe.gptoss_forward(w, cfg, ids)
    write_gptoss_expected(os.path.join(out, "gpt_oss.expected.json"), cfg, ids, lg)
    print("gpt_oss    seed +%-4d top-%d  logit std %.3f  routing margin %.2e  experts used per layer %s" %
          (4 + 100 * t, GO["K"], lg.std().item(), margin, used))
    return w


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    torch.set_num_threads(1)
    os.makedirs(out, exist_ok=True)
    make_gptoss(out)
    for variant, (mt, k, norm, off) in VARIANTS.items():
        cfg = make_config(mt, k, norm)
        for t in range(SEED_TRIES):
            w = make_weights(mt, off + 100 * t)
            margin, used = routing_stats({n: x.double() for n, x in w.items()}, cfg)
            if margin > MIN_MARGIN and all(u == E for u in used):
                break
        else:
            raise SystemExit("%s: no seed routes with a margin of %g" % (variant, MIN_MARGIN))
        d = os.path.join(out, variant)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(json.dumps(cfg, indent=2) + "\n")
        ref.write_safetensors(os.path.join(d, "model.safetensors"), sorted(w.items()))
        back, bcfg = ref.load_hf(d)
        assert bcfg == cfg and all(torch.equal(back[n], w[n].double()) for n in w), variant
        pre, dec = ref.reference(back, cfg, PROMPT, DECODE)
        ref.write_expected(os.path.join(out, variant + ".expected.json"), variant, "f32", pre, dec,
                           prompt_ids=PROMPT, decode_ids=DECODE)
        p32, d32 = ref.reference(w, cfg, PROMPT, DECODE, dtype=torch.float32)
        e32 = max((p32.double() - pre).abs().max().item(), (d32.double() - dec).abs().max().item())
        allv = torch.cat([pre, dec])
        print("%-10s seed +%-4d top-%d  logit std %.3f  routing margin %.2e  experts used per layer %s  f32 err %.2e" %
              (variant, off + 100 * t, k, allv.std().item(), margin, used, e32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
