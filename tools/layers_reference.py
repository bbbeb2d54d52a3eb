#!/usr/bin/python3
"""Float64 PyTorch reference of the families whose layers attend differently
(Hugging Face's Gemma2ForCausalLM, Gemma3ForCausalLM, SmolLM3ForCausalLM,
GraniteForCausalLM, Qwen2ForCausalLM with use_sliding_window, Phi3ForCausalLM
with partial_rotary_factor and LongRoPE), written from the published
architectures, and the tiny random-weight fixtures kvlm's tests read.

The computation, for token ids t[0..T) at positions 0..T-1:

    x = embed_tokens[t] * embed_scale
    per layer l:
        h = norm(x, input_layernorm)
        a = o_proj(attention_l(h))
        x = x + rs * post(a, post_attention_layernorm)            (Gemma: post = norm)
        h = norm(x, pre_feedforward_layernorm (Gemma) | post_attention_layernorm)
        m = down_proj(act(gate_proj(h)) * up_proj(h))
        x = x + rs * post(m, post_feedforward_layernorm)
    logits = cap(norm(x, norm) @ head^T * logit_scale)

- norm(x, w) = x / sqrt(mean(x^2) + eps) * w; Gemma's is * (1 + w).
- attention_l: q, k, v projections; Gemma 3's q_norm / k_norm per head (its
  (1 + w) norm) before the rotary embedding; rotary on the first rd
  dimensions of each head (rd = head_dim * partial_rotary_factor, rotate-half
  pairs (i, i + rd/2)), none on a layer without it (SmolLM3's no_rope_layers
  0 entries); scores = scale * q . k (Gemma: query_pre_attn_scalar^-1/2,
  Granite: attention_multiplier, else head_dim^-1/2); Gemma 2's
  attn_logit_softcapping: s = c * tanh(s / c); causal mask, and on sliding
  layers only keys j > i - W; softmax; grouped-query heads.
- Sliding layers: Gemma 2 the even layers, Gemma 3 those with (l + 1) %
  sliding_window_pattern != 0, Qwen2 / SmolLM3 with use_sliding_window the
  layers l >= max_window_layers; layer_types overrides.
- Rotary frequencies: base rope_theta (Gemma 3's sliding layers:
  rope_local_base_freq, unscaled); rope_scaling linear: positions / factor;
  longrope: inv_freq[i] / ext[i] with ext the long factors when
  max_position_embeddings > original_max_position_embeddings, else the short
  ones (chosen once from the context length, as llama.cpp does; Hugging Face
  switches at run time when a sequence passes the original length, which the
  fixtures here never do), cos and sin times sqrt(1 + ln(s) / ln(orig)), s =
  max_position_embeddings / orig.
- act: tanh GELU (Gemma), SiLU otherwise. rs: Granite's residual_multiplier.
  embed_scale: sqrt(hidden_size) (Gemma), embedding_multiplier (Granite).
  logit_scale: 1 / logits_scaling (Granite). cap: Gemma 2's
  final_logit_softcapping.

Command line:
    layers_reference.py make OUTDIR        write the fixtures (tests/fixtures/layers), and
                                           gemma3_long.expected.json (see LONG)
    layers_reference.py check DIR EXPECTED  recompute a fixture, print max |error|
"""
import json, math, os, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_reference as lref  # noqa: E402  safetensors reader/writer and .expected.json format

EMBED, NORM, HEAD, LAYER = "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", "model.layers.%d."
GEMMA = ("gemma2", "gemma3_text")


def layer_plan(c):
    """Per layer: (window or None, rotary on)."""
    mt, L = c["model_type"], c["num_hidden_layers"]
    sliding = [False] * L
    if c.get("layer_types"):
        sliding = [t == "sliding_attention" for t in c["layer_types"]]
    elif mt == "gemma2":
        sliding = [l % 2 == 0 for l in range(L)]
    elif mt == "gemma3_text":
        p = c.get("sliding_window_pattern", 6)
        sliding = [(l + 1) % p != 0 for l in range(L)]
    elif mt in ("qwen2", "smollm3") and c.get("use_sliding_window"):
        sliding = [l >= c.get("max_window_layers", 28) for l in range(L)]
    use_window = mt in GEMMA or c.get("use_sliding_window")
    w = c.get("sliding_window") if use_window else None
    rope = [True] * L
    if mt == "smollm3":
        rope = [bool(v) for v in c["no_rope_layers"]]
    return [(w if s and w else None, r) for s, r in zip(sliding, rope)]


def inv_freq(base, rd, ext=None):
    f = base ** (-torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    return f / ext if ext is not None else f


def rope_tables(c, T, hd):
    """(cos, sin) [T, rd/2] for global and for sliding layers, and rd."""
    rd = int(hd * c.get("partial_rotary_factor", 1.0))
    pos = torch.arange(T, dtype=torch.float64)
    sc = c.get("rope_scaling") or {}
    kind = sc.get("rope_type", sc.get("type"))
    base = float(c.get("rope_theta", 10000.0))
    mscale, f = 1.0, inv_freq(base, rd)
    gpos = pos
    if kind == "linear":
        gpos = pos / float(sc["factor"])
    elif kind in ("longrope", "su"):
        orig = c["original_max_position_embeddings"]
        s = c["max_position_embeddings"] / orig
        long = c["max_position_embeddings"] > orig
        ext = torch.tensor(sc["long_factor" if long else "short_factor"], dtype=torch.float64)
        f = inv_freq(base, rd, ext)
        mscale = sc.get("attention_factor") or (1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(orig)))
    elif kind is not None:
        raise ValueError("rope_scaling %r is not modelled" % kind)
    ga = gpos[:, None] * f[None, :]
    glob = (mscale * torch.cos(ga), mscale * torch.sin(ga))
    loc = glob
    if c["model_type"] == "gemma3_text":
        la = pos[:, None] * inv_freq(float(c.get("rope_local_base_freq", 10000.0)), rd)[None, :]
        loc = (torch.cos(la), torch.sin(la))
    return glob, loc, rd


def rope(x, cs, rd):
    cos, sin = cs
    r, rest = x[..., :rd], x[..., rd:]
    h = rd // 2
    a, b = r[..., :h], r[..., h:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos, rest], dim=-1)


def forward(W, c, ids):
    """Logits [T, vocab] (float64) at every position of ids."""
    mt = c["model_type"]
    gemma = mt in GEMMA
    W = {k: v.to(torch.float64) for k, v in W.items()}
    T = len(ids)
    H, nh = c["hidden_size"], c["num_attention_heads"]
    nkv = c.get("num_key_value_heads") or nh
    hd = c.get("head_dim") or H // nh
    eps = c.get("rms_norm_eps", 1e-6)
    F = torch.nn.functional

    def norm(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * ((1 + w) if gemma else w)

    def lin(x, name):
        return F.linear(x, W[name + ".weight"], W.get(name + ".bias"))

    if W.get(EMBED) is None:
        raise ValueError("no embedding")
    x = W[EMBED][torch.tensor(ids)]
    if gemma:
        x = x * math.sqrt(H)
    if mt == "granite":
        x = x * c.get("embedding_multiplier", 1.0)
    rs = c.get("residual_multiplier", 1.0) if mt == "granite" else 1.0
    if gemma:
        scale = c.get("query_pre_attn_scalar", hd) ** -0.5
    elif mt == "granite":
        scale = c.get("attention_multiplier", hd ** -0.5)
    else:
        scale = hd ** -0.5
    cap = c.get("attn_logit_softcapping") if gemma else None
    glob, loc, rd = rope_tables(c, T, hd)
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    for l, (win, use_rope) in enumerate(layer_plan(c)):
        p = LAYER % l
        h = norm(x, W[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").reshape(T, nh, hd).transpose(0, 1)
        k = lin(h, p + "self_attn.k_proj").reshape(T, nkv, hd).transpose(0, 1)
        v = lin(h, p + "self_attn.v_proj").reshape(T, nkv, hd).transpose(0, 1)
        if p + "self_attn.q_norm.weight" in W:
            q, k = norm(q, W[p + "self_attn.q_norm.weight"]), norm(k, W[p + "self_attn.k_norm.weight"])
        if use_rope:
            cs = loc if win else glob
            q, k = rope(q, cs, rd), rope(k, cs, rd)
        k, v = k.repeat_interleave(nh // nkv, 0), v.repeat_interleave(nh // nkv, 0)
        s = (q @ k.transpose(-1, -2)) * scale
        if cap:
            s = cap * torch.tanh(s / cap)
        mask = j <= i
        if win:
            mask = mask & (j > i - win)
        y = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v
        a = lin(y.transpose(0, 1).reshape(T, nh * hd), p + "self_attn.o_proj")
        if gemma:
            a = norm(a, W[p + "post_attention_layernorm.weight"])
            h = norm(x + a, W[p + "pre_feedforward_layernorm.weight"])
        else:
            h = norm(x + rs * a, W[p + "post_attention_layernorm.weight"])
        x = x + rs * a
        g = lin(h, p + "mlp.gate_proj")
        g = F.gelu(g, approximate="tanh") if gemma else F.silu(g)
        m = lin(g * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
        if gemma:
            m = norm(m, W[p + "post_feedforward_layernorm.weight"])
        x = x + rs * m
    head = W.get(HEAD, W[EMBED]) if not c.get("tie_word_embeddings", gemma) else W[EMBED]
    logits = norm(x, W[NORM]) @ head.T
    if mt == "granite":
        logits = logits / c.get("logits_scaling", 1.0)
    fcap = c.get("final_logit_softcapping") if gemma else None
    if fcap:
        logits = fcap * torch.tanh(logits / fcap)
    return logits


def reference(W, c, prompt, decode):
    pre = forward(W, c, list(prompt))
    dec = torch.stack([forward(W, c, list(prompt) + list(decode[:j + 1]))[-1] for j in range(len(decode))])
    return pre, dec


# ---------------------------------------------------------------- fixtures

SEED = 20261207
PROMPT = [1, 200, 17, 42, 103, 0, 150, 88]
DECODE = [64, 255, 123, 2, 31, 77, 5, 142]
BASE = dict(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
            max_position_embeddings=64, vocab_size=256, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2,
            torch_dtype="float32")

VARIANTS = {
    # Gemma 2: window 5 on layers 0 and 2, soft-capping low enough to bend
    # scores and logits, query scale from query_pre_attn_scalar 24 (not 16)
    "gemma2": dict(architectures=["Gemma2ForCausalLM"], model_type="gemma2", num_hidden_layers=4,
                   hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24, sliding_window=5,
                   attn_logit_softcapping=3.0, final_logit_softcapping=4.0, rope_theta=10000.0,
                   tie_word_embeddings=True),
    # Gemma 3: five sliding layers (window 5, base 10k) to one global (base
    # 1M, linear scaling 8), q/k norms
    "gemma3": dict(architectures=["Gemma3ForCausalLM"], model_type="gemma3_text", num_hidden_layers=6,
                   hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16, sliding_window=5,
                   sliding_window_pattern=6, rope_theta=1000000.0, rope_local_base_freq=10000.0,
                   rope_scaling={"rope_type": "linear", "factor": 8.0}, attn_logit_softcapping=None,
                   final_logit_softcapping=None, tie_word_embeddings=True),
    # SmolLM3: no rotary on every fourth layer, as its no_rope_layers says
    # (and as llama.cpp hard-codes for its GGUF files)
    "smollm3": dict(architectures=["SmolLM3ForCausalLM"], model_type="smollm3", num_hidden_layers=4,
                    hidden_act="silu", rope_theta=10000.0, no_rope_layers=[1, 1, 1, 0], use_sliding_window=False,
                    tie_word_embeddings=True, attention_bias=False),
    # Granite: every multiplier away from 1
    "granite": dict(architectures=["GraniteForCausalLM"], model_type="granite", num_hidden_layers=2,
                    hidden_act="silu", rope_theta=10000.0, embedding_multiplier=3.0, attention_multiplier=0.1,
                    residual_multiplier=0.5, logits_scaling=2.5, tie_word_embeddings=False, attention_bias=False),
    # Qwen2 with use_sliding_window: window 5 on layers 1.. only
    "qwen2_swa": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", num_hidden_layers=3,
                      hidden_act="silu", rope_theta=10000.0, use_sliding_window=True, sliding_window=5,
                      max_window_layers=1, tie_word_embeddings=True),
    # Phi-3 with three quarters of each head rotated and LongRoPE (context
    # 64 > original 32: the long factors, attention factor sqrt(1 + ln 2 / ln 32))
    "phi3_longrope": dict(architectures=["Phi3ForCausalLM"], model_type="phi3", num_hidden_layers=2,
                          hidden_act="silu", rope_theta=10000.0, partial_rotary_factor=0.75,
                          original_max_position_embeddings=32, sliding_window=None, tie_word_embeddings=True,
                          rope_scaling={"type": "longrope",
                                        "long_factor": [1.0, 1.5, 2.25, 3.0, 5.0, 8.0],
                                        "short_factor": [1.0, 1.1, 1.2, 1.3, 1.4, 1.5]}),
}
STD = dict(embed=0.5, head=0.25, q=0.3, k=0.3, v=0.3, o=0.2, gate=0.25, up=0.25, down=0.2, norm=0.1)


def make_weights(name, c, off):
    g = torch.Generator().manual_seed(SEED + off)
    H, I, L, V, nh, nkv, hd = (c[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                              "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim"))
    gemma = c["model_type"] in GEMMA
    rnd = lambda s, *shape: s * torch.randn(*shape, generator=g, dtype=torch.float32)
    nrm = (lambda n: rnd(STD["norm"], n)) if gemma else (lambda n: 1 + rnd(STD["norm"], n))
    tied = c.get("tie_word_embeddings")
    w = {EMBED: rnd(0.1 if gemma else STD["head"] if tied else STD["embed"], V, H)}
    for l in range(L):
        p = LAYER % l
        w[p + "input_layernorm.weight"] = nrm(H)
        w[p + "self_attn.q_proj.weight"] = rnd(STD["q"], nh * hd, H)
        w[p + "self_attn.k_proj.weight"] = rnd(STD["k"], nkv * hd, H)
        w[p + "self_attn.v_proj.weight"] = rnd(STD["v"], nkv * hd, H)
        if c["model_type"] == "qwen2":
            for n, r in (("q", nh), ("k", nkv), ("v", nkv)):
                w[p + "self_attn.%s_proj.bias" % n] = rnd(0.2, r * hd)
        w[p + "self_attn.o_proj.weight"] = rnd(STD["o"], H, nh * hd)
        w[p + "post_attention_layernorm.weight"] = nrm(H)
        if gemma:
            w[p + "pre_feedforward_layernorm.weight"] = nrm(H)
            w[p + "post_feedforward_layernorm.weight"] = nrm(H)
        if c["model_type"] == "gemma3_text":
            w[p + "self_attn.q_norm.weight"] = nrm(hd)
            w[p + "self_attn.k_norm.weight"] = nrm(hd)
        w[p + "mlp.gate_proj.weight"] = rnd(STD["gate"], I, H)
        w[p + "mlp.up_proj.weight"] = rnd(STD["up"], I, H)
        w[p + "mlp.down_proj.weight"] = rnd(STD["down"], H, I)
    w[NORM] = nrm(H)
    if not tied:
        w[HEAD] = rnd(STD["head"], V, H)
    if c["model_type"] == "phi3":  # stored fused, as Phi-3 files are
        qkv, gu = {}, {}
        for l in range(L):
            p = LAYER % l
            w[p + "self_attn.qkv_proj.weight"] = torch.cat([w.pop(p + "self_attn.%s_proj.weight" % n)
                                                            for n in "qkv"])
            w[p + "mlp.gate_up_proj.weight"] = torch.cat([w.pop(p + "mlp.gate_proj.weight"),
                                                          w.pop(p + "mlp.up_proj.weight")])
    return w


def split_phi3(w, c):
    if c["model_type"] != "phi3":
        return w
    cc = dict(c)
    return lref.split_fused(w, dict(cc, model_type="phi3", partial_rotary_factor=1.0))


def make(outdir):
    os.makedirs(outdir, exist_ok=True)
    for off, (name, extra) in enumerate(sorted(VARIANTS.items())):
        c = dict(BASE)
        c.update(extra)
        w = make_weights(name, c, off)
        d = os.path.join(outdir, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(json.dumps(c, indent=2) + "\n")
        lref.write_safetensors(os.path.join(d, "model.safetensors"), sorted(w.items()))
        back = {k: t for k, (_, t) in lref.read_safetensors(os.path.join(d, "model.safetensors")).items()}
        pre, dec = reference(split_phi3(back, c), c, PROMPT, DECODE)
        lref.write_expected(os.path.join(outdir, name + ".expected.json"), name, "f32", pre, dec, PROMPT, DECODE)
        print("%-14s logits std %.3f  max |logit| %.3f" % (name, float(pre.std()), float(pre.abs().max())))


def check(d, expected):
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    w = {k: t for k, (_, t) in lref.read_safetensors(os.path.join(d, "model.safetensors")).items()}
    with open(expected) as f:
        ex = json.load(f)
    pre, dec = reference(split_phi3(w, c), c, ex["prompt"], ex["decode"])
    err = max(float((pre - torch.tensor(ex["prefill_logits"], dtype=torch.float64)).abs().max()),
              float((dec - torch.tensor(ex["decode_logits"], dtype=torch.float64)).abs().max()))
    print("max |error| %.3g" % err)
    return err


# The long-context case: the gemma3 fixture's weights with a window of
# 512 in a context of 8192, a prompt of 4096 ids (an LCG, so the test can
# show them) then 4 more; logits at the last 4 prompt positions and at each
# of the 4 later ones (one causal forward gives both).
LONG = dict(variant="gemma3", sliding_window=512, max_position_embeddings=8192, n_prompt=4096, n_decode=4)


def lcg_ids(n, vocab, seed=12345):
    out, x = [], seed
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append((x >> 8) % vocab)
    return out


def make_long(outdir):
    d = os.path.join(outdir, LONG["variant"])
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c.update(sliding_window=LONG["sliding_window"], max_position_embeddings=LONG["max_position_embeddings"])
    w = {k: t for k, (_, t) in lref.read_safetensors(os.path.join(d, "model.safetensors")).items()}
    n, m = LONG["n_prompt"], LONG["n_decode"]
    ids = lcg_ids(n + m, c["vocab_size"])
    with torch.no_grad():
        lg = forward(w, c, ids)
    pos = list(range(n - 4, n + m))
    out = {"variant": "gemma3_long", "base": LONG["variant"], "sliding_window": LONG["sliding_window"],
           "max_position_embeddings": LONG["max_position_embeddings"], "n_prompt": n, "ids": ids,
           "positions": pos, "logits": [[float("%.9g" % x) for x in lg[p].tolist()] for p in pos]}
    with open(os.path.join(outdir, "gemma3_long.expected.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("gemma3_long    %d positions, logits std %.3f" % (len(ids), float(lg[pos].std())))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
        make_long(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(0 if check(sys.argv[2], sys.argv[3]) < 1e-9 else 1)
    else:
        sys.exit(__doc__)
