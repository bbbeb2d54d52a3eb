#!/usr/bin/python3
"""Float64 PyTorch reference of the mixture-of-experts FFN of Hugging Face's
Qwen2MoeForCausalLM, Qwen3MoeForCausalLM and MixtralForCausalLM, written
from the published architectures; tools/llama_reference.py calls it for
those model types (the rest of the block is the Llama family's). Also the
whole of GptOssForCausalLM (gptoss_forward, at the end: attention sinks,
alternating sliding window, YaRN, biases, top-k-then-softmax routing, the
clamped SwiGLU).

For h [..., T, hidden] (the post-attention-normed rows of one layer):

    p = softmax(h @ router^T)                    over all n experts
    (w, e) = the k largest p of each row         k = num_experts_per_tok
    w /= sum(w)                                  when norm_topk_prob (Mixtral: always)
    y = sum_j w_j * expert_{e_j}(h)              expert(x) = down(silu(gate(x)) * up(x))
    y += sigmoid(h @ shared_expert_gate^T) * shared_expert(h)      (Qwen2-MoE)

Names: Qwen2/3-MoE mlp.gate (router [n, hidden]), mlp.experts.E.{gate,up,
down}_proj, mlp.shared_expert.{gate,up,down}_proj, mlp.shared_expert_gate
[1, hidden]; Mixtral block_sparse_moe.gate, block_sparse_moe.experts.E.{w1
(gate), w3 (up), w2 (down)}. Computed densely here (every expert on every
row, weighted by a [T, n] matrix that is zero outside each row's top k), a
formulation independent of the engine's grouping by expert.

    moe_ffn(h, W, prefix, config, act=None)   -> [..., T, hidden]
    routing(h, W, prefix, config)             -> (weights [.., T, k], experts [.., T, k], probabilities)
"""
import torch


def _names(config, p):
    if config["model_type"] == "mixtral":
        b = p + "block_sparse_moe."
        return b + "gate.weight", b + "experts.%d.", ("w1", "w3", "w2")
    return p + "mlp.gate.weight", p + "mlp.experts.%d.", ("gate_proj", "up_proj", "down_proj")


def n_experts(config):
    return config["num_local_experts"] if config["model_type"] == "mixtral" else config["num_experts"]


def routing(h, W, p, config):
    router, _, _ = _names(config, p)
    probs = torch.softmax(h @ W[router].T, dim=-1)
    w, e = torch.topk(probs, config["num_experts_per_tok"], dim=-1)
    if config["model_type"] == "mixtral" or config.get("norm_topk_prob", False):
        w = w / w.sum(-1, keepdim=True)
    return w, e, probs


def _swiglu(x, g, u, d, act):
    F = torch.nn.functional
    a = act(x) if act else x
    m = F.silu(a @ g.T) * (a @ u.T)
    return (act(m) if act else m) @ d.T


def moe_ffn(h, W, p, config, act=None):
    w, e, _ = routing(h, W, p, config)
    n = n_experts(config)
    dense = torch.zeros(*h.shape[:-1], n, dtype=h.dtype).scatter(-1, e, w)
    _, fmt, (gn, un, dn) = _names(config, p)
    y = torch.zeros_like(h)
    for x in range(n):
        b = fmt % x
        y = y + dense[..., x:x + 1] * _swiglu(h, W[b + gn + ".weight"], W[b + un + ".weight"], W[b + dn + ".weight"], act)
    if config["model_type"] == "qwen2_moe":
        s = p + "mlp.shared_expert."
        gate = torch.sigmoid(h @ W[p + "mlp.shared_expert_gate.weight"].T)
        y = y + gate * _swiglu(h, W[s + "gate_proj.weight"], W[s + "up_proj.weight"], W[s + "down_proj.weight"], act)
    return y


# ---------------------------------------------------------------- gpt-oss
#
# Hugging Face's GptOssForCausalLM, a whole model (its attention differs from
# the Llama family's too), written from the published architecture:
#
#     x = embed_tokens[t]
#     per layer l:
#         h = rms_norm(x, input_layernorm)
#         q, k, v = h @ W^T + b (q_proj, k_proj, v_proj), rotate-half rotary
#             with YaRN frequencies, cos/sin times the attention factor
#         s = q . k / sqrt(head_dim), causal; on layer_types "sliding_attention"
#             layers only keys j > i - sliding_window
#         p = softmax over [s, sinks[head]] (the sink's column dropped after)
#         x = x + o_proj(p @ v) + o_bias
#         h = rms_norm(x, post_attention_layernorm)
#         r = h @ router^T + router_bias; (w, e) = top k of r; w = softmax(w)
#         per expert: gu = h @ gate_up_proj + gate_up_proj_bias ([C, 2F], [in, out]),
#             g = gu[..., 0::2] clamped above at limit, u = gu[..., 1::2] clamped to +-limit,
#             y = ((u + 1) * g * sigmoid(alpha g)) @ down_proj + down_proj_bias
#         x = x + sum_j w_j y_{e_j}
#     logits = rms_norm(x, norm) @ lm_head^T
#
# YaRN (rope_scaling type yarn): inv_freq_i = base^(-2i/d); with
# r(b) = d ln(orig / (2 pi b)) / (2 ln base), low = r(beta_fast),
# high = r(beta_slow) (floor / ceil unless truncate is false), clamped to
# [0, d - 1]; t_i = clamp((i - low) / (high - low), 0, 1);
# inv_freq_i * (t_i / factor + 1 - t_i); attention factor
# attention_factor or 0.1 ln(factor) + 1. alpha = 1.702.

GPTOSS_ALPHA = 1.702


def yarn_inv_freq(config, d):
    """(inv_freq [d/2], attention factor) of config's rope_scaling (yarn or none)."""
    base = float(config.get("rope_theta", 10000.0))
    i = torch.arange(d // 2, dtype=torch.float64)
    f = base ** (-2 * i / d)
    sc = config.get("rope_scaling") or {}
    if sc.get("rope_type", sc.get("type")) != "yarn":
        return f, 1.0
    import math
    fac, orig = float(sc["factor"]), sc.get("original_max_position_embeddings",
                                           config.get("original_max_position_embeddings"))
    r = lambda b: d * math.log(orig / (b * 2 * math.pi)) / (2 * math.log(base))
    low, high = r(sc.get("beta_fast", 32.0)), r(sc.get("beta_slow", 1.0))
    if sc.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001
    t = ((i - low) / (high - low)).clamp(0, 1)
    return f * (t / fac + 1 - t), sc.get("attention_factor") or 0.1 * math.log(fac) + 1


def gptoss_routing(h, W, p, config):
    """(weights [.., k], experts [.., k], logits) of one layer."""
    logits = h @ W[p + "mlp.router.weight"].T + W[p + "mlp.router.bias"]
    v, e = torch.topk(logits, config.get("num_experts_per_tok", config.get("experts_per_token")), dim=-1)
    return torch.softmax(v, dim=-1), e, logits


def gptoss_ffn(h, W, p, config):
    w, e, _ = gptoss_routing(h, W, p, config)
    n = config["num_local_experts"]
    dense = torch.zeros(*h.shape[:-1], n, dtype=h.dtype).scatter(-1, e, w)
    lim = config.get("swiglu_limit", 7.0)
    gu_w, gu_b = W[p + "mlp.experts.gate_up_proj"], W[p + "mlp.experts.gate_up_proj_bias"]
    d_w, d_b = W[p + "mlp.experts.down_proj"], W[p + "mlp.experts.down_proj_bias"]
    y = torch.zeros_like(h)
    for x in range(n):
        gu = h @ gu_w[x] + gu_b[x]
        g, u = gu[..., 0::2].clamp(max=lim), gu[..., 1::2].clamp(-lim, lim)
        y = y + dense[..., x:x + 1] * (((u + 1) * g * torch.sigmoid(GPTOSS_ALPHA * g)) @ d_w[x] + d_b[x])
    return y


def gptoss_forward(W, config, ids):
    """Logits [T, vocab] (float64) at every position of ids."""
    W = {k: v.to(torch.float64) for k, v in W.items()}
    T, H, nh = len(ids), config["hidden_size"], config["num_attention_heads"]
    nkv, hd, eps = config["num_key_value_heads"], config["head_dim"], config.get("rms_norm_eps", 1e-5)
    f, ms = yarn_inv_freq(config, hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * f[None, :]
    cos, sin = ms * torch.cos(ang), ms * torch.sin(ang)

    def rope(x):
        a, b = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)

    def norm(x, w):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w

    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    x = W["model.embed_tokens.weight"][torch.as_tensor(ids)]
    types = config.get("layer_types") or ["sliding_attention" if l % 2 == 0 else "full_attention"
                                          for l in range(config["num_hidden_layers"])]
    for l in range(config["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = norm(x, W[p + "input_layernorm.weight"])
        lin = lambda n: h @ W[p + "self_attn.%s_proj.weight" % n].T + W[p + "self_attn.%s_proj.bias" % n]
        q = rope(lin("q").view(T, nh, hd).transpose(0, 1))
        k = rope(lin("k").view(T, nkv, hd).transpose(0, 1)).repeat_interleave(nh // nkv, 0)
        v = lin("v").view(T, nkv, hd).transpose(0, 1).repeat_interleave(nh // nkv, 0)
        s = q @ k.transpose(1, 2) / hd ** 0.5
        mask = j <= i
        if types[l] == "sliding_attention":
            mask = mask & (j > i - config["sliding_window"])
        s = s.masked_fill(~mask, float("-inf"))
        sink = W[p + "self_attn.sinks"].view(nh, 1, 1).expand(nh, T, 1)
        pr = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
        a = (pr @ v).transpose(0, 1).reshape(T, nh * hd)
        x = x + a @ W[p + "self_attn.o_proj.weight"].T + W[p + "self_attn.o_proj.bias"]
        x = x + gptoss_ffn(norm(x, W[p + "post_attention_layernorm.weight"]), W, p, config)
    return norm(x, W["model.norm.weight"]) @ W["lm_head.weight"].T
