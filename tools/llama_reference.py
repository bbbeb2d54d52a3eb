#!/usr/bin/python3
"""Float64 PyTorch reference of the Llama-family forward pass (Hugging Face's
LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and
Phi3ForCausalLM), written from the published architectures, for kvlm's
fixtures, its GGUF tools and its tests.

The computation, for token ids t[0..T) at positions 0..T-1:

    x = embed_tokens[t]
    per layer:  h = rmsnorm(x, input_layernorm)
                x += o_proj(attention(rope(qn(q_proj(h))), rope(kn(k_proj(h))), v_proj(h)))
                h = rmsnorm(x, post_attention_layernorm)
                x += down_proj(silu(gate_proj(h)) * up_proj(h))   (a mixture of experts for
                     qwen2_moe, qwen3_moe and mixtral: tools/moe_reference.py)
    logits = rmsnorm(x, norm) @ lm_head^T      (lm_head = embed_tokens when tied)

- rmsnorm(x, w) = x / sqrt(mean(x^2) + rms_norm_eps) * w.
- qn, kn: Qwen3 only, rmsnorm of every head (head_dim values) with
  self_attn.q_norm / k_norm weights [head_dim], before the rotary embedding;
  the identity for the other models.
- Phi-3 stores q/k/v as one self_attn.qkv_proj ([q; k; v] rows) and gate/up
  as one mlp.gate_up_proj ([gate; up] rows); they are split by rows here.
- Sliding window (sliding_window = W of Mistral and Phi-3 whenever set; of
  Qwen2/Qwen3 only with use_sliding_window, and then on the layers from
  max_window_layers on, which is refused unless no layer is left): the
  query at position i sees the keys j with i - W < j <= i (Hugging Face's
  mask: W keys, its own included).
- Linear weights are PyTorch [out, in]: y = x @ W^T (+ b when the file has a
  bias: Qwen2's q/k/v biases, or Llama's attention_bias / mlp_bias).
- Attention: num_attention_heads query heads of head_dim (config head_dim, or
  hidden_size / heads), num_key_value_heads KV heads; query head j reads KV
  head j // (heads / kv_heads) (multi-head, grouped-query, multi-query).
  Causal, scores scaled by 1/sqrt(head_dim), softmax over keys.
- Rotary embeddings, frequency inv_freq[i] = rope_theta^(-2i/head_dim) for
  i < head_dim/2, angle pos * inv_freq[i], rotating the pair (i, i + d/2)
  of each head (Hugging Face's "rotate half" layout). GGUF files store q/k
  rows permuted so that the pair is (2i, 2i+1) instead; `rope_interleaved`
  computes that layout, and `hf_to_interleaved_rows` is the permutation.
- rope_scaling of type "llama3" (factor, low_freq_factor, high_freq_factor,
  original_max_position_embeddings): with wavelength 2*pi/inv_freq,
  wavelengths above original/low_freq_factor are divided by factor
  (inv_freq / factor), those below original/high_freq_factor are kept, and
  between them inv_freq = (1 - s) * inv_freq / factor + s * inv_freq with
  s = (original / wavelength - low_freq_factor) / (high_freq_factor -
  low_freq_factor). Type "linear" (positions divided by factor) is also
  accepted; other types are refused.

Everything is computed in the dtype asked for (float64 by default) from the
weights as given, so expected logits for a file in f16/bf16/quantised form
come from its dequantised values. Phi-3's longrope/su rope_scaling and a
partial_rotary_factor other than 1 are refused.

Importable API (tools/make_llama_fixtures.py, tools/write_gguf.py,
tools/train_llama.py):
    load_hf(dir)                      -> (weights {HF name: float64 tensor}, config dict)
    forward(weights, config, ids)     -> logits [T, vocab] (float64), ids [T] or [B, T]
    reference(weights, config, prompt, decode)
                                      -> (prefill logits [len(prompt), V],
                                          last-position logits after each decode token)
    rope_inv_freq(config)             -> inv_freq [head_dim/2] float64 (scaling applied)
    hf_to_interleaved_rows(w, n_heads) / interleaved_to_hf_rows(w, n_heads)
    read_safetensors / write_safetensors (from tools/make_gpt2_fixtures.py)

Command line:
    llama_reference.py check DIR EXPECTED.json     recompute a fixture, print max |error|
    llama_reference.py logits DIR ID [ID ...]      print the last position's top logits
    llama_reference.py selftest                    internal consistency checks
"""
import json, math, os, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_gpt2_fixtures as _fx  # noqa: E402  one safetensors reader/writer for every tool

read_safetensors = _fx.read_safetensors      # path -> {name: (st dtype, float64 tensor)}
write_safetensors = _fx.write_safetensors    # path, [(name, tensor f32/f16/bf16)] -> data bytes
write_expected = _fx.write_expected          # the shared .expected.json format

ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM",
                 # mixtures of experts: the FFN is tools/moe_reference.py's
                 "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                 "mixtral": "MixtralForCausalLM"}

EMBED, NORM, HEAD = "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"
LAYER_FMT = "model.layers.%d."


# ---------------------------------------------------------------- config

def dims(config):
    """The numbers the forward needs, with Hugging Face's defaults."""
    mt = config.get("model_type", "llama")
    if mt not in ARCHITECTURES:
        raise ValueError("model_type %r is not a Llama-family model (%s)" % (mt, ", ".join(ARCHITECTURES)))
    act = config.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError("hidden_act %r: only silu (SwiGLU) is modelled" % act)
    nh = config["num_attention_heads"]
    nkv = config.get("num_key_value_heads") or nh
    hd = config.get("head_dim") or config["hidden_size"] // nh
    if nh % nkv:
        raise ValueError("num_attention_heads %d is not a multiple of num_key_value_heads %d" % (nh, nkv))
    if hd % 2:
        raise ValueError("rotary embeddings need an even head_dim, not %d" % hd)
    if config.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError("partial_rotary_factor %r is not modelled" % config["partial_rotary_factor"])
    return dict(model_type=mt, hidden=config["hidden_size"], n_layer=config["num_hidden_layers"],
                n_head=nh, n_kv=nkv, head_dim=hd, vocab=config["vocab_size"],
                eps=config.get("rms_norm_eps", 1e-6), tied=bool(config.get("tie_word_embeddings", False)),
                window=sliding_window(config))


def sliding_window(config):
    """The attention window W every layer applies, or None (see the module doc)."""
    mt = config.get("model_type", "llama")
    # MistralConfig's default when the key is absent (null: no window)
    w = config.get("sliding_window", 4096 if mt == "mistral" else None)
    if not w or mt == "llama":
        return None
    if mt in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        if not config.get("use_sliding_window", False):
            return None
        if config.get("max_window_layers", 28) >= config["num_hidden_layers"]:
            return None
        raise ValueError("a sliding window on layers max_window_layers.. only is not modelled")
    return int(w)


def attention_mask(T, window):
    """[T, T] bool, True where query i may read key j."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    m = j <= i
    return m & (j > i - window) if window else m


def _scaling(config):
    sc = config.get("rope_scaling")
    if not sc:
        return None, {}
    kind = sc.get("rope_type", sc.get("type"))
    if kind not in ("llama3", "linear", "default"):
        raise ValueError("rope_scaling type %r is not modelled (llama3, linear; not longrope/su)" % kind)
    return (None if kind == "default" else kind), sc


def rope_inv_freq(config):
    """inv_freq [head_dim/2], float64, with llama3 scaling applied."""
    d = dims(config)
    hd, theta = d["head_dim"], float(config.get("rope_theta", 10000.0))
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    kind, sc = _scaling(config)
    if kind == "llama3":
        factor, lo, hi = float(sc["factor"]), float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
        orig = float(sc["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv
        smooth = (orig / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelen > orig / lo, inv / factor, torch.where(wavelen < orig / hi, inv, mid))
    return inv


def rope_cos_sin(config, n_pos, dtype=torch.float64, offset=0):
    """cos, sin [n_pos, head_dim/2] of the angles pos * inv_freq (float64, then cast)."""
    kind, sc = _scaling(config)
    pos = torch.arange(offset, offset + n_pos, dtype=torch.float64)
    if kind == "linear":
        pos = pos / float(sc["factor"])
    ang = pos[:, None] * rope_inv_freq(config)[None, :]
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def apply_rope(x, cos, sin, interleaved=False):
    """x [..., T, head_dim]; cos/sin [T, head_dim/2]. Rotates the pairs
    (i, i + d/2) (rotate-half), or (2i, 2i+1) when interleaved."""
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def hf_to_interleaved_rows(w, n_heads):
    """Reorder the rows (output features) of a q/k projection weight [n_heads*d, ...]
    or bias so that, per head, HF rows i and i + d/2 become rows 2i and 2i + 1:
    rope_interleaved on the result equals rotate-half on the original."""
    d = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, d // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def interleaved_to_hf_rows(w, n_heads):
    """Inverse of hf_to_interleaved_rows."""
    d = w.shape[0] // n_heads
    return w.reshape(n_heads, d // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


# ---------------------------------------------------------------- forward

def split_fused(W, config):
    """Phi-3's fused matrices as the separate ones: qkv_proj rows [q; k; v],
    gate_up_proj rows [gate; up]. Other entries unchanged."""
    d = dims(config)
    out = {}
    qd, kd = d["n_head"] * d["head_dim"], d["n_kv"] * d["head_dim"]
    for name, t in W.items():
        if name.endswith("self_attn.qkv_proj.weight") or name.endswith("self_attn.qkv_proj.bias"):
            if t.shape[0] != qd + 2 * kd:
                raise ValueError("%s has %d rows, not %d" % (name, t.shape[0], qd + 2 * kd))
            base, kind = name.rsplit(".", 1)
            base = base[:-len("qkv_proj")]
            out[base + "q_proj." + kind], out[base + "k_proj." + kind], out[base + "v_proj." + kind] = \
                t[:qd], t[qd:qd + kd], t[qd + kd:]
        elif name.endswith("mlp.gate_up_proj.weight"):
            if t.shape[0] % 2:
                raise ValueError("%s has an odd number of rows" % name)
            base = name[:-len("gate_up_proj.weight")]
            f = t.shape[0] // 2
            out[base + "gate_proj.weight"], out[base + "up_proj.weight"] = t[:f], t[f:]
        else:
            out[name] = t
    return out


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _linear(x, W, name, act=None):
    return torch.nn.functional.linear(act(x) if act else x, W[name + ".weight"], W.get(name + ".bias"))


def head_weight(weights, config):
    """The output matrix [vocab, hidden]: lm_head, or the embedding when tied or absent."""
    if dims(config)["tied"] or HEAD not in weights:
        return weights[EMBED]
    return weights[HEAD]


def final_hidden(weights, config, token_ids, dtype=torch.float64, rope_interleaved=False,
                 kv_f16=False, act=None, dropout=0.0, train=False):
    """Final-normed hidden states [..., T, hidden] for ids [T] or [B, T].
    kv_f16 rounds K (after rope) and V to f16 as an f16 KV cache would;
    act, if given, is applied to the input of every weight matrix product
    (e.g. rounding to bf16, to model an engine's mixed-precision kernels);
    dropout (train only) drops attention probabilities and residual branches."""
    d = dims(config)
    ids = torch.as_tensor(token_ids, dtype=torch.long)
    T = ids.shape[-1]
    W = split_fused({k: v.to(dtype) for k, v in weights.items()}, config)
    F = torch.nn.functional
    drop = (lambda t: F.dropout(t, dropout, True)) if train and dropout > 0 else (lambda t: t)
    nh, nkv, hd, eps = d["n_head"], d["n_kv"], d["head_dim"], d["eps"]
    cos, sin = rope_cos_sin(config, T, dtype)
    mask = attention_mask(T, d["window"])
    x = W[EMBED][ids]
    lead = x.shape[:-2]
    for i in range(d["n_layer"]):
        p = LAYER_FMT % i
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = _linear(h, W, p + "self_attn.q_proj", act).reshape(*lead, T, nh, hd).transpose(-2, -3)
        k = _linear(h, W, p + "self_attn.k_proj", act).reshape(*lead, T, nkv, hd).transpose(-2, -3)
        v = _linear(h, W, p + "self_attn.v_proj", act).reshape(*lead, T, nkv, hd).transpose(-2, -3)
        if p + "self_attn.q_norm.weight" in W:
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k = apply_rope(q, cos, sin, rope_interleaved), apply_rope(k, cos, sin, rope_interleaved)
        if kv_f16:
            k, v = k.half().to(dtype), v.half().to(dtype)
        k, v = k.repeat_interleave(nh // nkv, dim=-3), v.repeat_interleave(nh // nkv, dim=-3)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        att = drop(torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1))
        y = (att @ v).transpose(-2, -3).reshape(*lead, T, nh * hd)
        x = x + drop(_linear(y, W, p + "self_attn.o_proj", act))
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        x = x + drop(ffn(h, W, p, config, act))
    return rms_norm(x, W[NORM], eps)


def ffn(h, W, p, config, act=None):
    """The layer's FFN: SwiGLU, or a mixture of experts (tools/moe_reference.py)."""
    if config.get("model_type") in ("qwen2_moe", "qwen3_moe", "mixtral"):
        import moe_reference
        return moe_reference.moe_ffn(h, W, p, config, act)
    F = torch.nn.functional
    m = F.silu(_linear(h, W, p + "mlp.gate_proj", act)) * _linear(h, W, p + "mlp.up_proj", act)
    return _linear(m, W, p + "mlp.down_proj", act)


def forward(weights, config, token_ids, dtype=torch.float64, **kw):
    """Logits [..., T, vocab] at every position of token_ids (causal), in dtype."""
    h = final_hidden(weights, config, token_ids, dtype, **kw)
    if kw.get("act"):
        h = kw["act"](h)
    return h @ head_weight(weights, config).to(dtype).T


def reference(weights, config, prompt, decode, **kw):
    """Prefill logits for prompt and, for each j, the last-position logits of
    prompt + decode[:j+1], each a full recomputation."""
    pre = forward(weights, config, list(prompt), **kw)
    dec = torch.stack([forward(weights, config, list(prompt) + list(decode[:j + 1]), **kw)[-1]
                       for j in range(len(decode))])
    return pre, dec


# ---------------------------------------------------------------- loading

def load_hf(path):
    """(weights, config) from a Hugging Face directory: config.json plus
    model.safetensors or a sharded model.safetensors.index.json. Weights are
    float64, keyed by the names in the file."""
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    dims(config)
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            wmap = json.load(f)["weight_map"]
        files = sorted(set(wmap.values()))
    else:
        wmap, files = None, ["model.safetensors"]
    weights = {}
    for fn in files:
        for name, (_, t) in read_safetensors(os.path.join(path, fn)).items():
            if wmap is not None and wmap.get(name) != fn:
                raise ValueError("%s: tensor %s is not listed for this shard" % (fn, name))
            if name in weights:
                raise ValueError("tensor %s appears twice" % name)
            weights[name] = t
    if wmap is not None and set(wmap) != set(weights):
        raise ValueError("index lists %d tensors, shards hold %d" % (len(wmap), len(weights)))
    return weights, config


def expected_error(path_dir, expected_json):
    """Max |logit error| of this reference against an .expected.json."""
    w, cfg = load_hf(path_dir)
    with open(expected_json) as f:
        exp = json.load(f)
    pre, dec = reference(w, cfg, exp["prompt"], exp["decode"])
    return max((torch.tensor(exp["prefill_logits"], dtype=torch.float64) - pre).abs().max().item(),
               (torch.tensor(exp["decode_logits"], dtype=torch.float64) - dec).abs().max().item())


# ---------------------------------------------------------------- self-test

def _random_model(config, seed):
    d = dims(config)
    g = torch.Generator().manual_seed(seed)
    r = lambda s, *shape: s * torch.randn(*shape, generator=g, dtype=torch.float64)
    H, hd, I = d["hidden"], d["head_dim"], config["intermediate_size"]
    w = {EMBED: r(0.5, d["vocab"], H), NORM: 1 + r(0.1, H), HEAD: r(0.25, d["vocab"], H)}
    for i in range(d["n_layer"]):
        p = LAYER_FMT % i
        w[p + "input_layernorm.weight"] = 1 + r(0.1, H)
        w[p + "post_attention_layernorm.weight"] = 1 + r(0.1, H)
        w[p + "self_attn.q_proj.weight"] = r(0.2, d["n_head"] * hd, H)
        w[p + "self_attn.k_proj.weight"] = r(0.2, d["n_kv"] * hd, H)
        w[p + "self_attn.v_proj.weight"] = r(0.15, d["n_kv"] * hd, H)
        w[p + "self_attn.o_proj.weight"] = r(0.15, H, d["n_head"] * hd)
        for n, rows in (("q", d["n_head"]), ("k", d["n_kv"]), ("v", d["n_kv"])):
            w[p + "self_attn.%s_proj.bias" % n] = r(0.2, rows * hd)
        w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"] = r(0.15, I, H), r(0.15, I, H)
        w[p + "mlp.down_proj.weight"] = r(0.1, H, I)
        if d["model_type"] == "qwen3":
            w[p + "self_attn.q_norm.weight"], w[p + "self_attn.k_norm.weight"] = 1 + r(0.3, hd), 1 + r(0.3, hd)
    return w


def fuse_phi3(w):
    """Phi-3's layout of a split model: qkv_proj [q; k; v], gate_up_proj [gate; up]."""
    out = {}
    for name, t in w.items():
        if ".self_attn.q_proj." in name:
            kind = name.rsplit(".", 1)[1]
            base = name[:name.index("q_proj.")]
            out[base + "qkv_proj." + kind] = torch.cat([t, w[base + "k_proj." + kind], w[base + "v_proj." + kind]])
        elif ".mlp.gate_proj." in name:
            base = name[:name.index("gate_proj.")]
            out[base + "gate_up_proj.weight"] = torch.cat([t, w[base + "up_proj.weight"]])
        elif not any(s in name for s in (".self_attn.k_proj.", ".self_attn.v_proj.", ".mlp.up_proj.")):
            out[name] = t
    return out


def _complex_rope_forward(weights, config, ids):
    """An independent formulation of the same model: per-head loops, rotary
    embedding as multiplication by exp(i * angle) of the complex numbers
    (x[j] + i x[j + d/2]), K/V heads looked up per query head, fused
    matrices sliced by rows, the window as the first key of each query's loop."""
    d = dims(config)
    nh, nkv, hd, eps = d["n_head"], d["n_kv"], d["head_dim"], d["eps"]
    win = d["window"] or len(ids)
    T, half = len(ids), hd // 2
    ang = torch.arange(T, dtype=torch.float64)[:, None] * rope_inv_freq(config)[None, :]
    rot = torch.polar(torch.ones_like(ang), ang)
    W = weights
    lin = lambda x, n: x @ W[n + ".weight"].T + (W[n + ".bias"] if n + ".bias" in W else 0)
    norm = lambda x, w: x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps) * w
    x = torch.stack([W[EMBED][t] for t in ids])
    for i in range(d["n_layer"]):
        p = LAYER_FMT % i
        h = norm(x, W[p + "input_layernorm.weight"])
        if p + "self_attn.qkv_proj.weight" in W:
            qkv = lin(h, p + "self_attn.qkv_proj")
            q, k, v = qkv[:, :nh * hd], qkv[:, nh * hd:(nh + nkv) * hd], qkv[:, (nh + nkv) * hd:]
        else:
            q, k, v = lin(h, p + "self_attn.q_proj"), lin(h, p + "self_attn.k_proj"), lin(h, p + "self_attn.v_proj")
        out = torch.zeros(T, nh * hd, dtype=torch.float64)
        for j in range(nh):
            kv = j * nkv // nh
            qj = q[:, j * hd:(j + 1) * hd]
            kj, vj = k[:, kv * hd:(kv + 1) * hd], v[:, kv * hd:(kv + 1) * hd]
            if p + "self_attn.q_norm.weight" in W:
                qj, kj = norm(qj, W[p + "self_attn.q_norm.weight"]), norm(kj, W[p + "self_attn.k_norm.weight"])
            cq = torch.complex(qj[:, :half], qj[:, half:]) * rot
            ck = torch.complex(kj[:, :half], kj[:, half:]) * rot
            qr, kr = torch.cat([cq.real, cq.imag], 1), torch.cat([ck.real, ck.imag], 1)
            for t in range(T):
                lo = max(0, t + 1 - win)
                s = (kr[lo:t + 1] @ qr[t]) / math.sqrt(hd)
                out[t, j * hd:(j + 1) * hd] = torch.softmax(s, 0) @ vj[lo:t + 1]
        x = x + lin(out, p + "self_attn.o_proj")
        h = norm(x, W[p + "post_attention_layernorm.weight"])
        if p + "mlp.gate_up_proj.weight" in W:
            gu = lin(h, p + "mlp.gate_up_proj")
            g, u = gu[:, :gu.shape[1] // 2], gu[:, gu.shape[1] // 2:]
        else:
            g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        x = x + lin(g / (1 + torch.exp(-g)) * u, p + "mlp.down_proj")
    return norm(x, W[NORM]) @ head_weight(W, config).T


def selftest():
    base = dict(model_type="llama", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=4, vocab_size=50, rms_norm_eps=1e-5, rope_theta=10000.0)
    ids = [3, 17, 0, 49, 8, 8, 21, 5, 30, 2]
    for nkv in (4, 2, 1):
        cfg = dict(base, num_key_value_heads=nkv)
        w = _random_model(cfg, 7 + nkv)
        a, b = forward(w, cfg, ids), _complex_rope_forward(w, cfg, ids)
        assert (a - b).abs().max() < 1e-10, ("independent formulation", nkv)
        # batched == one by one; causal: a later token changes nothing before it
        bat = forward(w, cfg, [ids, ids[::-1]])
        assert (bat[0] - a).abs().max() < 1e-12 and (bat[1] - forward(w, cfg, ids[::-1])).abs().max() < 1e-12
        c = forward(w, cfg, ids[:-1] + [(ids[-1] + 1) % 50])
        assert (c[:-1] - a[:-1]).abs().max() < 1e-12 and (c[-1] - a[-1]).abs().max() > 1e-3
        # GQA == MHA with each KV head repeated for its query heads
        if nkv < 4:
            cm, wm = dict(cfg, num_key_value_heads=4), dict(w)
            for i in range(2):
                for n in ("k", "v"):
                    for s in ("weight", "bias"):
                        key = LAYER_FMT % i + "self_attn.%s_proj.%s" % (n, s)
                        t = w[key].reshape(nkv, 8, *w[key].shape[1:])
                        wm[key] = t.repeat_interleave(4 // nkv, 0).reshape(32, *w[key].shape[1:])
            assert (forward(wm, cm, ids) - a).abs().max() < 1e-10, ("gqa == repeated mha", nkv)
        # interleaved rope on permuted q/k rows == rotate-half on the originals
        wi = dict(w)
        for i in range(2):
            for n, heads in (("q", 4), ("k", nkv)):
                for s in ("weight", "bias"):
                    key = LAYER_FMT % i + "self_attn.%s_proj.%s" % (n, s)
                    wi[key] = hf_to_interleaved_rows(w[key], heads)
                    assert torch.equal(interleaved_to_hf_rows(wi[key], heads), w[key])
        assert (forward(wi, cfg, ids, rope_interleaved=True) - a).abs().max() < 1e-10, ("interleaved", nkv)
        assert (forward(wi, cfg, ids) - a).abs().max() > 1e-3
    # llama3 scaling: factor 1 changes nothing; each branch where it should be
    cfg = dict(base, num_attention_heads=2, rope_theta=10000.0)   # head_dim 16
    plain = rope_inv_freq(cfg)
    one = dict(cfg, rope_scaling=dict(rope_type="llama3", factor=1.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=16))
    assert torch.allclose(rope_inv_freq(one), plain, rtol=1e-15, atol=0)
    sc = dict(cfg, rope_scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=0.5,
                                     high_freq_factor=2.0, original_max_position_embeddings=16))
    got, wl = rope_inv_freq(sc), 2 * math.pi / plain
    for i in range(len(plain)):
        if wl[i] < 8:
            assert got[i] == plain[i]
        elif wl[i] > 32:
            assert abs(got[i] - plain[i] / 4) < 1e-18
        else:
            s = (16 / wl[i] - 0.5) / 1.5
            assert 0 < s < 1 and abs(got[i] - ((1 - s) * plain[i] / 4 + s * plain[i])) < 1e-15
    assert (wl < 8).any() and (wl > 32).any() and ((wl >= 8) & (wl <= 32)).any()
    _selftest_variants(base, ids)
    print("llama_reference selftest: ok")


def _selftest_variants(base, ids):
    """Qwen3's q/k norms (head_dim != hidden / heads), Phi-3's fused
    matrices and the sliding window against the independent formulation."""
    T = len(ids)
    # Qwen3: head_dim 12 with hidden 32 and 4 heads; the norms matter
    q3 = dict(base, model_type="qwen3", num_key_value_heads=2, head_dim=12)
    w = _random_model(q3, 31)
    a = forward(w, q3, ids)
    assert (a - _complex_rope_forward(w, q3, ids)).abs().max() < 1e-10, "qwen3"
    plain = {k: v for k, v in w.items() if "_norm.weight" not in k or "layernorm" in k}
    assert (forward(plain, dict(q3, model_type="qwen2"), ids) - a).abs().max() > 1e-3, "qwen3 norms change nothing"
    # Phi-3: fused rows == the split model; the window as Hugging Face masks it
    for win in (None, 3, T, T + 5):
        mi = dict(base, model_type="mistral", num_key_value_heads=2, sliding_window=win)
        ph = dict(mi, model_type="phi3")
        w = _random_model(mi, 41)
        a = forward(w, mi, ids)
        assert (a - _complex_rope_forward(w, mi, ids)).abs().max() < 1e-10, ("window", win)
        f = fuse_phi3(w)
        assert not any("q_proj" in k or "gate_proj" in k for k in f)
        assert (forward(f, ph, ids) - a).abs().max() < 1e-12, ("phi3 fused", win)
        assert (_complex_rope_forward(f, ph, ids) - a).abs().max() < 1e-10, ("phi3 fused, independent", win)
        full = forward(w, dict(mi, sliding_window=None), ids)
        if win is None or win >= T:
            assert (a - full).abs().max() < 1e-12, ("window at least the sequence", win)
        else:
            # positions < win see the same keys; later ones do not
            assert (a[:win] - full[:win]).abs().max() < 1e-12 and (a[win:] - full[win:]).abs().max() > 1e-3, win
    m = attention_mask(6, 3)
    assert m.tolist()[5] == [False, False, False, True, True, True] and m.tolist()[1] == [True, True] + [False] * 4
    # Qwen's window applies only with use_sliding_window (and is refused per layer)
    assert sliding_window(dict(q3, sliding_window=4)) is None
    assert sliding_window(dict(q3, sliding_window=4, use_sliding_window=True, max_window_layers=2)) is None
    try:
        sliding_window(dict(q3, sliding_window=4, use_sliding_window=True, max_window_layers=1))
        raise AssertionError("per-layer window accepted")
    except ValueError:
        pass


# ---------------------------------------------------------------- main

def main(argv):
    if len(argv) >= 1 and argv[0] == "selftest":
        selftest()
        return 0
    if len(argv) == 3 and argv[0] == "check":
        err = expected_error(argv[1], argv[2])
        print("%s: max |logit error| %.3e" % (argv[2], err))
        return 0 if err < 1e-6 else 1
    if len(argv) >= 3 and argv[0] == "logits":
        w, cfg = load_hf(argv[1])
        logits = forward(w, cfg, [int(t) for t in argv[2:]])[-1]
        top = torch.topk(logits, min(10, logits.numel()))
        for v, i in zip(top.values.tolist(), top.indices.tolist()):
            print("%6d %12.6f" % (i, v))
        return 0
    print(__doc__.split("Command line:")[1].rstrip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
