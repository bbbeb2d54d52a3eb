#!/usr/bin/python3
"""Float64 NumPy reference forward pass of a GGUF file as llama.cpp lays it
out, for the architectures gpt2, llama, qwen2 and qwen3, on the weights
gguf-py dequantises from the file (gguf.quants.dequantize: exactly the
values a quantised block stands for). Written from the published model
descriptions; shares no code with kvlm's C engine or with llama.cpp's.

    GGUFModel(path, gguf)      reads metadata and every tensor (float64)
    .forward(ids)              logits [len(ids), vocab] for positions 0..n-1
    .greedy(prompt, n)         (n greedy ids, logits [n, vocab] each was
                                chosen from), recomputing the whole sequence
                                each step (no cache to get wrong)

Architectures (x: the residual stream, rows are positions):
- gpt2: x = token_embd[t] + position_embd[pos]; per block
  x += attn_output(attn(LayerNorm(x))) with attn_qkv split q|k|v, then
  x += ffn_down(gelu_tanh(ffn_up(LayerNorm(x)))); logits =
  LayerNorm(x) @ token_embd^T (GPT-2 files have no output.weight).
- llama / qwen2 / qwen3: x = token_embd[t]; per block
  x += attn_output(attn(rmsnorm(x))), x += ffn_down(silu(ffn_gate(h)) *
  ffn_up(h)) with h = rmsnorm(x); logits = rmsnorm(x) @ output^T
  (token_embd when the file has no output.weight). qwen2 adds q/k/v biases;
  qwen3 applies rmsnorm over each head's q and k (attn_q_norm /
  attn_k_norm, the model's epsilon) before rope.
- Mixtures of experts (qwen2moe, qwen3moe, llama with expert_count): the
  FFN is a router, experts stacked in 3-D tensors and Qwen2-MoE's gated
  shared expert (GGUFModel._moe).
- Attention: causal, softmax(q k^T / sqrt(head_dim)); query head j reads
  KV head j // (heads / kv_heads). Head dim from attention.key_length when
  present, else embedding_length / heads.
- Rope with base rope.freq_base, theta_i = pos * base^(-2i/d): llama
  files rotate adjacent pairs (2i, 2i+1) of each head (llama.cpp's "normal"
  mode; the converter permuted q/k rows for it); qwen2 and qwen3 rotate
  (i, i + d/2) ("neox" mode, rows as Hugging Face stores them).
Does not model rope scaling, sliding windows, or anything the fixtures do
not use; an unknown architecture or tensor layout raises.
"""
import numpy as np

F64 = np.float64


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _ln(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def _softmax(s):
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


class GGUFModel:
    def __init__(self, path, gguf):
        r = gguf.GGUFReader(path)
        self.meta = {}
        for k, f in r.fields.items():
            if f.types and f.types[0] != gguf.GGUFValueType.ARRAY:
                self.meta[k] = f.contents()
        self.arch = self.meta["general.architecture"]
        if self.arch not in ("gpt2", "llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe"):
            raise ValueError("%s: architecture %s is not modelled" % (path, self.arch))
        self.w, self.types = {}, {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type).astype(F64)
            shape = tuple(int(n) for n in reversed(t.shape.tolist()))
            self.w[t.name] = a.reshape(shape)
            self.types[t.name] = t.tensor_type.name
        m = lambda k, d=None: self.meta.get(self.arch + "." + k, d)
        self.n_layer, self.n_embd = m("block_count"), m("embedding_length")
        self.n_head = m("attention.head_count")
        self.n_kv = m("attention.head_count_kv", self.n_head)
        self.head_dim = m("attention.key_length", self.n_embd // self.n_head)
        self.eps = m("attention.layer_norm_rms_epsilon") if self.arch != "gpt2" else m("attention.layer_norm_epsilon")
        self.theta = m("rope.freq_base", 10000.0)
        self.n_vocab = self.w["token_embd.weight"].shape[0]
        self.n_expert_used = m("expert_used_count", 0)
        self.expert_norm = bool(m("expert_weights_norm", self.arch != "qwen2moe"))

    # ------------------------------------------------------------ pieces

    def _rope(self, x, pos):
        """x [T, heads, d] rotated in place of a copy."""
        d = self.head_dim
        inv = self.theta ** (-np.arange(0, d, 2, dtype=F64) / d)
        ang = pos[:, None].astype(F64) * inv[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        y = x.copy()
        if self.arch == "llama":
            a, b = x[..., 0::2], x[..., 1::2]
            y[..., 0::2], y[..., 1::2] = a * c - b * s, a * s + b * c
        else:
            a, b = x[..., : d // 2], x[..., d // 2:]
            y[..., : d // 2], y[..., d // 2:] = a * c - b * s, a * s + b * c
        return y

    def _attend(self, q, k, v):
        T = q.shape[0]
        group = self.n_head // self.n_kv
        out = np.empty((T, self.n_head, self.head_dim), F64)
        mask = np.triu(np.full((T, T), -np.inf), 1)
        for h in range(self.n_head):
            sc = q[:, h, :] @ k[:, h // group, :].T / np.sqrt(self.head_dim) + mask
            out[:, h, :] = _softmax(sc) @ v[:, h // group, :]
        return out.reshape(T, self.n_head * self.head_dim)

    def _lin(self, x, name):
        y = x @ self.w[name + ".weight"].T
        b = self.w.get(name + ".bias")
        return y + b if b is not None else y

    # ------------------------------------------------------------ forward

    def forward(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        T = len(ids)
        pos = np.arange(T)
        w = self.w
        if self.arch == "gpt2":
            x = w["token_embd.weight"][ids] + w["position_embd.weight"][pos]
            for i in range(self.n_layer):
                p = "blk.%d." % i
                h = _ln(x, w[p + "attn_norm.weight"], w[p + "attn_norm.bias"], self.eps)
                qkv = self._lin(h, p + "attn_qkv")
                E = self.n_embd
                q, k, v = (qkv[:, j * E:(j + 1) * E].reshape(T, self.n_head, self.head_dim) for j in range(3))
                x = x + self._lin(self._attend(q, k, v), p + "attn_output")
                h = _ln(x, w[p + "ffn_norm.weight"], w[p + "ffn_norm.bias"], self.eps)
                x = x + self._lin(_gelu(self._lin(h, p + "ffn_up")), p + "ffn_down")
            x = _ln(x, w["output_norm.weight"], w["output_norm.bias"], self.eps)
            return x @ w["token_embd.weight"].T
        x = w["token_embd.weight"][ids]
        for i in range(self.n_layer):
            p = "blk.%d." % i
            h = _rms(x, w[p + "attn_norm.weight"], self.eps)
            q = self._lin(h, p + "attn_q").reshape(T, self.n_head, self.head_dim)
            k = self._lin(h, p + "attn_k").reshape(T, self.n_kv, self.head_dim)
            v = self._lin(h, p + "attn_v").reshape(T, self.n_kv, self.head_dim)
            if p + "attn_q_norm.weight" in w:
                q = _rms(q, w[p + "attn_q_norm.weight"], self.eps)
                k = _rms(k, w[p + "attn_k_norm.weight"], self.eps)
            q, k = self._rope(q, pos), self._rope(k, pos)
            x = x + self._lin(self._attend(q, k, v), p + "attn_output")
            h = _rms(x, w[p + "ffn_norm.weight"], self.eps)
            if p + "ffn_gate_inp.weight" in w:
                x = x + self._moe(h, p)
                continue
            g = self._lin(h, p + "ffn_gate")
            x = x + self._lin(g / (1.0 + np.exp(-g)) * self._lin(h, p + "ffn_up"), p + "ffn_down")
        x = _rms(x, w["output_norm.weight"], self.eps)
        return x @ w.get("output.weight", w["token_embd.weight"]).T

    def _moe(self, h, p):
        """Mixture of experts, row by row: softmax over the router's
        outputs, the expert_used_count largest (renormalised to sum 1
        unless qwen2moe or expert_weights_norm false), each expert
        ffn_down_exps[e](silu(ffn_gate_exps[e] h) * ffn_up_exps[e] h); plus
        sigmoid(ffn_gate_inp_shexp . h) times the shared expert."""
        w = self.w
        probs = _softmax(h @ w[p + "ffn_gate_inp.weight"].T)
        out = np.zeros_like(h)
        silu = lambda g: g / (1.0 + np.exp(-g))
        for t in range(h.shape[0]):
            top = np.argsort(-probs[t], kind="stable")[:self.n_expert_used]
            wt = probs[t, top] / (probs[t, top].sum() if self.expert_norm else 1.0)
            for e, a in zip(top, wt):
                g = w[p + "ffn_gate_exps.weight"][e] @ h[t]
                u = w[p + "ffn_up_exps.weight"][e] @ h[t]
                out[t] += a * (w[p + "ffn_down_exps.weight"][e] @ (silu(g) * u))
        if p + "ffn_gate_inp_shexp.weight" in w:
            gate = 1.0 / (1.0 + np.exp(-(h @ w[p + "ffn_gate_inp_shexp.weight"].reshape(-1))))
            g, u = self._lin(h, p + "ffn_gate_shexp"), self._lin(h, p + "ffn_up_shexp")
            out += gate[:, None] * self._lin(silu(g) * u, p + "ffn_down_shexp")
        return out

    def greedy(self, prompt, n):
        ids, out, logits = list(prompt), [], []
        for _ in range(n):
            last = self.forward(ids)[-1]
            t = int(np.argmax(last))
            out.append(t)
            logits.append(last)
            ids.append(t)
        return out, np.array(logits)
