#!/usr/bin/python3
"""Float64 PyTorch reference of the mixture-of-experts FFN of Hugging Face's
Qwen2MoeForCausalLM, Qwen3MoeForCausalLM and MixtralForCausalLM, written
from the published architectures; tools/llama_reference.py calls it for
those model types (the rest of the block is the Llama family's).

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
