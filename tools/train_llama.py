#!/usr/bin/python3
"""Train and export the small Llama-architecture model that ships in
models/shakespeare-llama (grouped-query attention, tied embeddings).

The model is tools/llama_reference.py's forward, run in float32: RMSNorm
(eps 1e-5), rotary embeddings (rotate-half, theta 10000), grouped-query
causal attention, SwiGLU MLP, a final RMSNorm and an output head tied to the
token embedding. Weights are keyed by the Hugging Face Llama names in the
Linear layout [out, in], so export is a dump (plus the vocabulary expansion).

Data and vocabulary handling are tools/train_gpt2.py's, shared by import:
Tiny Shakespeare encoded with the GPT-2 tokenizer (so the model shares its
vocabulary with models/shakespeare-gpt2), the first 90% of the tokens for
training and the last 10% for validation, random training windows, the
validation loss over every non-overlapping window, and the exact
full-vocabulary cross-entropy trained over the ~11,300 tokens seen in
training plus one shared row for the rest (see train_gpt2.py's docstring).
The optimiser, learning-rate schedule and checkpoint format are train_gpt2's.

Usage:
  train_llama.py train --out build/shakespeare-llama/ckpt.pt [--hidden 64 --layers 8 ...]
  train_llama.py train --bench 10 ...      time a few steps and exit
  train_llama.py export --ckpt build/shakespeare-llama/ckpt.pt [--out models/shakespeare-llama]

export writes, in OUT: config.json (LlamaForCausalLM, tie_word_embeddings
true), model.safetensors (F16 or BF16, HF names, no lm_head), vocab.json and
merges.txt (byte copies of models/gpt2-tokenizer/encoder.json and vocab.bpe),
README.md; and tests/fixtures/llama/shakespeare_llama_ppl.json: the
sliding-window perplexity of tests/fixtures/shakespeare_val_slice.txt (the
GPT-2 export's validation slice) computed in float64 from the exported
weights, for an engine-vs-PyTorch test.
"""
import argparse, hashlib, json, math, os, shutil, sys, time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import llama_reference as ref  # noqa: E402
import train_gpt2 as tg  # noqa: E402  data, vocabulary, optimiser, schedule, checkpoints
import moe_reference  # noqa: E402  the mixture-of-experts FFN (Qwen3-MoE)

RMS_EPS = 1e-5
ROPE_THETA = 10000.0


# ------------------------------------------------------------------ model

def make_config(a):
    assert a.hidden % a.heads == 0 and a.heads % a.kv_heads == 0
    if a.experts:
        return make_moe_config(a)
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": a.hidden, "intermediate_size": a.ffn, "num_hidden_layers": a.layers,
            "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
            "head_dim": a.hidden // a.heads, "hidden_act": "silu", "max_position_embeddings": a.ctx,
            "rms_norm_eps": RMS_EPS, "rope_theta": ROPE_THETA, "rope_scaling": None,
            "tie_word_embeddings": True, "vocab_size": tg.VOCAB, "bos_token_id": tg.EOS,
            "eos_token_id": tg.EOS, "attention_bias": False, "mlp_bias": False,
            "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True}


def make_moe_config(a):
    """Qwen3-MoE (Qwen3MoeForCausalLM): the Llama block with RMSNorm of every
    query and key head (q_norm, k_norm) and, in place of the MLP, a router over
    a.experts SwiGLU experts of a.expert_ffn, the top a.top_k renormalised
    (norm_topk_prob); every layer sparse; head tied to the embedding."""
    assert 1 <= a.top_k <= a.experts
    hd = a.hidden // a.heads
    return {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "hidden_size": a.hidden, "intermediate_size": a.expert_ffn, "num_hidden_layers": a.layers,
            "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": hd,
            "hidden_act": "silu", "max_position_embeddings": a.ctx, "rms_norm_eps": RMS_EPS,
            "rope_theta": ROPE_THETA, "rope_scaling": None, "tie_word_embeddings": True,
            "vocab_size": tg.VOCAB, "bos_token_id": tg.EOS, "eos_token_id": tg.EOS, "attention_bias": False,
            "attention_dropout": 0.0, "num_experts": a.experts, "num_experts_per_tok": a.top_k,
            "moe_intermediate_size": a.expert_ffn, "norm_topk_prob": True, "decoder_sparse_step": 1,
            "mlp_only_layers": [], "use_sliding_window": False, "sliding_window": None,
            "max_window_layers": a.layers, "router_aux_loss_coef": a.router_aux,
            "output_router_logits": False, "initializer_range": 0.02, "use_cache": True}


def is_moe(cfg):
    return cfg["model_type"] == "qwen3_moe"


def param_count(cfg, active=False):
    """Parameters (with active, those one token uses: top-k experts of each layer)."""
    H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    if is_moe(cfg):
        E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
        ffn = (k if active else E) * 3 * H * I + E * H + 2 * hd
    else:
        ffn = 3 * H * I
    return cfg["vocab_size"] * H + L * (2 * H * q + 2 * H * kv + ffn + 2 * H) + H


def init_weights(cfg, gen, n_rows):
    """Float32 parameters keyed by HF names: normal std 0.02, the projections
    into the residual stream (o_proj, down_proj) scaled by 1/sqrt(2 layers),
    unit RMSNorm gains. The embedding has n_rows (compact) rows."""
    H, I, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    q, kv = cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"]
    std, rstd = 0.02, 0.02 / math.sqrt(2 * L)
    rnd = lambda s, *shape: s * torch.randn(*shape, generator=gen)
    w = {ref.EMBED: rnd(std, n_rows, H)}
    for i in range(L):
        p = ref.LAYER_FMT % i
        w[p + "input_layernorm.weight"] = torch.ones(H)
        w[p + "self_attn.q_proj.weight"] = rnd(std, q, H)
        w[p + "self_attn.k_proj.weight"] = rnd(std, kv, H)
        w[p + "self_attn.v_proj.weight"] = rnd(std, kv, H)
        w[p + "self_attn.o_proj.weight"] = rnd(rstd, H, q)
        w[p + "post_attention_layernorm.weight"] = torch.ones(H)
        if is_moe(cfg):
            hd = cfg["head_dim"]
            w[p + "self_attn.q_norm.weight"] = torch.ones(hd)
            w[p + "self_attn.k_norm.weight"] = torch.ones(hd)
            w[p + "mlp.gate.weight"] = rnd(std, cfg["num_experts"], H)
            for e in range(cfg["num_experts"]):
                x = p + "mlp.experts.%d." % e
                w[x + "gate_proj.weight"] = rnd(std, I, H)
                w[x + "up_proj.weight"] = rnd(std, I, H)
                w[x + "down_proj.weight"] = rnd(rstd, H, I)
            continue
        w[p + "mlp.gate_proj.weight"] = rnd(std, I, H)
        w[p + "mlp.up_proj.weight"] = rnd(std, I, H)
        w[p + "mlp.down_proj.weight"] = rnd(rstd, H, I)
    w[ref.NORM] = torch.ones(H)
    return w


def loss_fn(W, cfg, x, y, vocab, dropout=0.0, train=False):
    """Per-token NLL (nats) for compact ids x, y [B, T]: the reference
    forward, the head over the compact rows with log(n_unseen) on the shared
    one; a target outside the seen set is scored by the shared logit alone."""
    h = ref.final_hidden(W, cfg, x, torch.float32, dropout=dropout, train=train)
    B, T, C = h.shape
    logits = torch.addmm(vocab.head_bias, h.reshape(B * T, C), W[ref.EMBED].t())
    y = y.reshape(-1)
    # logsumexp - (logit[y] - [y unseen] * log(n_unseen)), with the fused kernel
    ce = torch.nn.functional.cross_entropy(logits, y, reduction="none")
    return ce + (y == vocab.n - 1).to(logits.dtype) * vocab.head_bias[-1]


@torch.no_grad()
def evaluate(W, cfg, ids, vocab, max_windows=None, batch=8):
    """Mean NLL over non-overlapping windows of ctx+1 tokens (train_gpt2's
    protocol); with max_windows, that many windows spread evenly."""
    T = cfg["max_position_embeddings"]
    n_win = (len(ids) - 1) // T
    every = -(-n_win // max_windows) if max_windows else 1
    wins = list(range(0, n_win, every))
    total, count = 0.0, 0
    for b0 in range(0, len(wins), batch):
        rows = wins[b0:b0 + batch]
        x = torch.stack([ids[r * T:r * T + T] for r in rows])
        y = torch.stack([ids[r * T + 1:r * T + T + 1] for r in rows])
        total += loss_fn(W, cfg, x, y, vocab).sum().item()
        count += y.numel()
    return total / count


class RouterTap:
    """Records every layer's routing while a forward runs
    (tools/moe_reference.py's routing, wrapped): the probabilities for the
    load-balancing loss, the chosen experts for the load table."""

    def __init__(self):
        self.probs, self.experts = [], []

    def __enter__(self):
        self.orig = moe_reference.routing

        def tap(h, W, p, config):
            w, e, probs = self.orig(h, W, p, config)
            self.probs.append(probs)
            self.experts.append(e)
            return w, e, probs
        moe_reference.routing = tap
        return self

    def __exit__(self, *exc):
        moe_reference.routing = self.orig

    def balance_loss(self, n_experts, k):
        """Switch Transformer's auxiliary loss, summed over layers: n * sum_e
        (fraction of the k*T choices that go to e) * (mean probability of e);
        1 per layer when the load is even."""
        total = 0.0
        for probs, e in zip(self.probs, self.experts):
            p = probs.reshape(-1, n_experts)
            f = torch.bincount(e.reshape(-1), minlength=n_experts).to(p.dtype) / e.numel()
            total = total + n_experts * (f * p.mean(0)).sum()
        return total


def sparse_moe_ffn(h, W, p, config, act=None):
    """moe_reference.moe_ffn computed as an engine does: each expert only on
    the rows routed to it (the same function; about k/n of the dense cost).
    Training uses it; evaluation and export use the dense reference."""
    assert act is None
    w, e, _ = moe_reference.routing(h, W, p, config)
    F = torch.nn.functional
    flat, wf, ef = h.reshape(-1, h.shape[-1]), w.reshape(-1, w.shape[-1]), e.reshape(-1, e.shape[-1])
    y = torch.zeros_like(flat)
    for x in range(config["num_experts"]):
        rows, slot = torch.nonzero(ef == x, as_tuple=True)
        if rows.numel() == 0:
            continue
        b = p + "mlp.experts.%d." % x
        hx = flat[rows]
        out = F.silu(hx @ W[b + "gate_proj.weight"].T) * (hx @ W[b + "up_proj.weight"].T)
        y = y.index_add(0, rows, (out @ W[b + "down_proj.weight"].T) * wf[rows, slot].unsqueeze(-1))
    return y.reshape(h.shape)


# ------------------------------------------------------------------ training

def train(a, data=None, cfg=None):
    """Train (or resume) from a's flags. data: (all ids, training ids,
    validation ids) over cfg's vocabulary (tools/train_chat.py's
    conversations); by default Tiny Shakespeare in GPT-2 tokens, split 90/10."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    cfg = cfg or make_config(a)
    if data is None:
        ids = tg.load_tokens(a.data, a.tokenizer)
        tr, va = tg.split(ids)
    else:
        ids, tr, va = data
    vocab = tg.Vocab(tr.tolist(), cfg["vocab_size"])
    tr_c, va_c = vocab.to_compact[tr], vocab.to_compact[va]
    n = param_count(cfg)
    print("tokens %d: train %d, val %d; %d distinct training tokens; params %d (%.2f MB at 2 bytes)"
          % (len(ids), len(tr), len(va), len(vocab.seen), n, n * 2 / 1e6), flush=True)

    W = {k: v.requires_grad_() for k, v in init_weights(cfg, gen, vocab.n).items()}
    opt = tg.make_optimizer(W, a)
    step, log = 0, []
    if a.resume and os.path.exists(a.out):
        ck = torch.load(a.out)
        assert ck["config"] == cfg, "checkpoint config differs from the flags"
        with torch.no_grad():
            for k in W:
                W[k].copy_(ck["weights"][k])
        opt.load_state_dict(ck["opt"])
        step, log = ck["step"], ck["log"]
        gen.set_state(ck["rng"])
        torch.set_rng_state(ck["torch_rng"])
        print("resumed at step %d" % step, flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)

    T, B = a.ctx, a.batch
    t0 = time.time() - (log[-1]["elapsed_s"] if log and "elapsed_s" in log[-1] else 0)
    tl, tl_n = 0.0, 0
    while step < (a.bench or a.steps):
        for g in opt.param_groups:
            g["lr"] = tg.lr_at(step, a)
        starts = torch.randint(0, len(tr) - T - 1, (B,), generator=gen)
        x = torch.stack([tr_c[s:s + T] for s in starts])
        y = torch.stack([tr_c[s + 1:s + T + 1] for s in starts])
        if is_moe(cfg):
            dense, moe_reference.moe_ffn = moe_reference.moe_ffn, sparse_moe_ffn
            try:
                with RouterTap() as tap:
                    loss = loss_fn(W, cfg, x, y, vocab, a.dropout, True).mean()
            finally:
                moe_reference.moe_ffn = dense
            aux = tap.balance_loss(cfg["num_experts"], cfg["num_experts_per_tok"]) / cfg["num_hidden_layers"]
        else:
            loss, aux = loss_fn(W, cfg, x, y, vocab, a.dropout, True).mean(), None
        opt.zero_grad(set_to_none=True)
        (loss if aux is None else loss + a.router_aux * aux).backward()
        torch.nn.utils.clip_grad_norm_(list(W.values()), a.grad_clip)
        opt.step()
        step += 1
        tl, tl_n = tl + loss.item(), tl_n + 1
        if a.bench:
            continue
        if step % a.eval_every == 0 or step == a.steps:
            full = step == a.steps
            vl = evaluate(W, cfg, va_c, vocab, None if full else a.eval_windows)
            rec = {"step": step, "train_loss_running": tl / tl_n, "val_loss": vl, "val_full": full,
                   "lr": tg.lr_at(step - 1, a), "elapsed_s": time.time() - t0}
            log.append(rec)
            print(json.dumps(rec), flush=True)
            tl, tl_n = 0.0, 0
        if step % a.ckpt_every == 0 or step == a.steps:
            tg.save_ckpt(a.out, W, opt, step, cfg, a, log, gen, vocab)
    dt = time.time() - t0
    if a.bench:
        print("bench: %d steps in %.1f s: %.3f s/step, %.0f tokens/s, loss %.3f"
              % (a.bench, dt, dt / a.bench, a.bench * B * T / dt, tl / tl_n), flush=True)
        return 0
    final = {"train_loss": evaluate(W, cfg, tr_c, vocab, a.train_eval_windows),
             "val_loss": evaluate(W, cfg, va_c, vocab), "steps": step, "train_s": dt}
    log.append({"final": final})
    tg.save_ckpt(a.out, W, opt, step, cfg, a, log, gen, vocab)
    print("final " + json.dumps(final), flush=True)
    return 0


# ------------------------------------------------------------------ export

def sliding_window_nll(w, cfg, ids, context, stride):
    """Hugging Face's sliding-window protocol in float64, as tools/export_gpt2.py:
    (sum of NLL, tokens scored, windows); window [s, e) scores [max(prev_e, s+1), e)."""
    total, scored, windows, prev_end = 0.0, 0, 0, 0
    for s in range(0, len(ids), stride):
        e = min(s + context, len(ids))
        logp = torch.log_softmax(ref.forward(w, cfg, ids[s:e]), dim=-1)
        for t in range(max(prev_end, s + 1), e):
            total -= logp[t - s - 1, ids[t]].item()
            scored += 1
        windows += 1
        prev_end = e
        if e == len(ids):
            break
    return total, scored, windows


def export(a):
    import export_gpt2  # noqa: E402  validation slice and unigram baseline, shared with the GPT-2 export
    import tokenizer_reference
    torch.set_num_threads(a.threads)
    ck = torch.load(a.ckpt)
    cfg = dict(ck["config"], torch_dtype={"f16": "float16", "bf16": "bfloat16"}[a.dtype])
    vocab = tg.Vocab(ck["seen"].tolist())
    dt = {"f16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    w = {k: v.detach().to(dt) for k, v in ck["weights"].items()}
    w[ref.EMBED] = vocab.expand(ck["weights"][ref.EMBED].detach()).to(dt)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2) + "\n")
    ref.write_safetensors(os.path.join(a.out, "model.safetensors"), sorted(w.items()))
    shutil.copyfile(os.path.join(a.tokenizer, "encoder.json"), os.path.join(a.out, "vocab.json"))
    shutil.copyfile(os.path.join(a.tokenizer, "vocab.bpe"), os.path.join(a.out, "merges.txt"))
    back, bcfg = ref.load_hf(a.out)
    assert bcfg == cfg and set(back) == set(w)
    for k in w:
        assert torch.equal(back[k], w[k].double()), k

    tok = tokenizer_reference.Reference(a.out)
    with open(a.data, "rb") as f:
        text = f.read()
    ids = torch.tensor(tok.encode(text), dtype=torch.long)
    tr, va = tg.split(ids)
    seen = set(ck["seen"].tolist())
    # Validation loss of the exported (rounded) weights, float32: the compact
    # model with every tensor rounded as exported (its unseen rows all equal
    # the shared row, so this is the loss over all 50,257 rows).
    wr = {k: v.detach().to(dt).float() for k, v in ck["weights"].items()}
    val_rounded = evaluate(wr, cfg, vocab.to_compact[va], vocab)
    full = tg.Vocab(range(tg.VOCAB - 1))          # every token its own row (EOS the last)
    wf = {k: v.float() for k, v in back.items()}

    # Perplexity fixture on the GPT-2 export's validation slice.
    piece = export_gpt2.val_slice(text, len(tr), tok, ids.tolist())
    slice_path = os.path.join(a.fixture_dir, "shakespeare_val_slice.txt")
    if os.path.exists(slice_path):
        with open(slice_path, "rb") as f:
            assert f.read() == piece, "tests/fixtures/shakespeare_val_slice.txt is not the slice export_gpt2 cuts"
    else:
        with open(slice_path, "wb") as f:
            f.write(piece)
    sids = tok.encode(piece)
    context, stride = cfg["max_position_embeddings"], cfg["max_position_embeddings"] // 2
    nll, scored, windows = sliding_window_nll(back, cfg, sids, context, stride)
    rel = lambda p: os.path.relpath(os.path.abspath(p), ROOT)
    fixture = {"model": rel(a.out), "file": rel(slice_path), "file_sha256": hashlib.sha256(piece).hexdigest(),
               "context": context, "stride": stride, "file_tokens": len(sids), "tokens": scored,
               "windows": windows, "weights_dtype": a.dtype, "mean_nll": nll / scored,
               "perplexity": math.exp(nll / scored)}
    moe = is_moe(cfg)
    fx_path = os.path.join(a.fixture_dir, "moe" if moe else "llama",
                           "shakespeare_moe_ppl.json" if moe else "shakespeare_llama_ppl.json")
    os.makedirs(os.path.dirname(fx_path), exist_ok=True)
    with open(fx_path, "w") as f:
        f.write(json.dumps(fixture, indent=2) + "\n")
    load = expert_load(wf, cfg, full.to_compact[va]) if moe else None

    final = next((r["final"] for r in reversed(ck["log"]) if "final" in r), None)
    args = ck["args"]
    if final is None:       # a run stopped at a checkpoint before its last step
        wc = {k: v.detach().float() for k, v in ck["weights"].items()}
        final = {"train_loss": evaluate(wc, cfg, vocab.to_compact[tr], vocab, args["train_eval_windows"]),
                 "val_loss": evaluate(wc, cfg, vocab.to_compact[va], vocab), "steps": ck["step"],
                 "train_s": ck["log"][-1]["elapsed_s"] if ck["log"] else 0}
    info = dict(cfg=cfg, args=args, params=param_count(cfg), emb_params=tg.VOCAB * cfg["hidden_size"],
                active_params=param_count(cfg, True), load=load, name=os.path.basename(os.path.abspath(a.out)),
                dtype=a.dtype, st_bytes=os.path.getsize(os.path.join(a.out, "model.safetensors")),
                n_tokens=len(ids), n_train=len(tr), n_val=len(va), n_seen=len(seen),
                val_unseen=sum(1 for t in va.tolist() if t not in seen), ckpt=rel(a.ckpt), out_rel=rel(a.out),
                steps_done=final["steps"], train_minutes=final.get("train_s", 0) / 60, train_loss=final.get("train_loss", float("nan")),
                val_loss=final.get("val_loss", float("nan")), val_loss_rounded=val_rounded,
                uni_train=export_gpt2.unigram_val_nll(tr, tr), uni_val=export_gpt2.unigram_val_nll(tr, va),
                fixture=fixture, fixture_rel=rel(fx_path), log=[r for r in ck["log"] if "step" in r],
                sample=sample_text(back, cfg, tok, a.sample_prompt, a.sample_tokens),
                sample_prompt=a.sample_prompt, sample_tokens=a.sample_tokens,
                train_cmd=train_command(rel(a.ckpt), args),
                train_note=(" " + a.train_note) if a.train_note else "")
    readme = os.path.join(a.out, "README.md")
    for _ in range(3):      # the README's own size settles after two passes
        info["dir_bytes"] = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out)
                                if f != "README.md") + (os.path.getsize(readme) if os.path.exists(readme) else 0)
        write_readme(readme, info)
    print(json.dumps({k: v for k, v in info.items() if k not in ("args", "cfg", "log", "fixture")}, indent=1))
    print(json.dumps(fixture, indent=1))
    return 0


@torch.no_grad()
def expert_load(w, cfg, ids, batch=8):
    """[layer][expert]: the fraction of the validation tokens' top-k choices
    that go to each expert, over every non-overlapping window (float32)."""
    T, E, L = cfg["max_position_embeddings"], cfg["num_experts"], cfg["num_hidden_layers"]
    counts = torch.zeros(L, E, dtype=torch.float64)
    n_win = (len(ids) - 1) // T
    for b0 in range(0, n_win, batch):
        x = torch.stack([ids[r * T:r * T + T] for r in range(b0, min(n_win, b0 + batch))])
        with RouterTap() as tap:
            ref.final_hidden(w, cfg, x, torch.float32)
        for layer, e in enumerate(tap.experts):
            counts[layer] += torch.bincount(e.reshape(-1), minlength=E).double()
    return (counts / counts.sum(1, keepdim=True)).tolist()


SAMPLE_TEMPERATURE, SAMPLE_TOP_K, SAMPLE_SEED = 0.8, 40, 1234


def lr_at_step(step, g):
    return tg.lr_at(step, argparse.Namespace(**g))


def last_logits(w, cfg, ids):
    """The last position's logits (float64 reference), the head applied to that row only."""
    return ref.final_hidden(w, cfg, ids)[-1] @ ref.head_weight(w, cfg).T


@torch.no_grad()
def sample_text(w, cfg, tok, prompt, n):
    """A seeded sampled continuation (temperature 0.8, top-k 40), float64
    reference forward, for the README; kvlm's sampler is its own."""
    g = torch.Generator().manual_seed(SAMPLE_SEED)
    ids = tok.encode(prompt.encode())
    for _ in range(n):
        logits = last_logits(w, cfg, ids[-cfg["max_position_embeddings"]:]) / SAMPLE_TEMPERATURE
        top = torch.topk(logits, SAMPLE_TOP_K)
        pick = torch.multinomial(torch.softmax(top.values, -1), 1, generator=g)
        ids.append(int(top.indices[pick]))
    return tok.decode(ids).decode("utf-8", "replace")


def train_command(ckpt_rel, g, script="tools/train_llama.py", extra=()):
    """The exact training command line, every hyperparameter spelled out."""
    flags = ["--out", ckpt_rel]
    keys = ("experts", "top_k", "expert_ffn", "router_aux") if g.get("experts") else ("ffn",)
    for k in ("hidden", "layers", "heads", "kv_heads") + keys + ("ctx", "batch", "steps", "warmup", "lr",
              "min_lr_frac", "weight_decay", "dropout", "grad_clip", "eval_every", "eval_windows",
              "train_eval_windows", "ckpt_every", "seed", "threads") + tuple(extra):
        flags += ["--" + k.replace("_", "-"), "%g" % g[k]]
    lines = ["LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread nice -n 19 /usr/bin/python3 %s train" % script]
    for i in range(0, len(flags), 8):
        lines.append("    " + " ".join(flags[i:i + 8]))
    return " \\\n".join(lines)


def write_readme(path, info):
    c, g, fxd = info["cfg"], info["args"], info["fixture"]
    H, L, nh, nkv, hd = (c[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                        "num_key_value_heads", "head_dim"))
    kv16, kv16_mha = 2 * L * nkv * hd * 2, 2 * L * nh * hd * 2
    done = info.get("steps_done", g["steps"])
    toks = done * g["batch"] * c["max_position_embeddings"]
    stopped = ("" if done == g["steps"] else
               f" (the run was planned for {g['steps']} steps and stopped at the checkpoint of step {done},"
               f" its learning rate then {lr_at_step(done, g):.2g})")
    drop = "no dropout" if g["dropout"] == 0 else "dropout %g (training only)" % g["dropout"]
    curve = "\n".join("| %d | %.4f | %.4f%s |" % (r["step"], r["train_loss_running"], r["val_loss"],
                                                  "" if r["val_full"] else " (%d windows)" % g["eval_windows"])
                      for r in info["log"])
    moe = is_moe(c)
    if moe:
        E, k = c["num_experts"], c["num_experts_per_tok"]
        intro = f"""A small mixture-of-experts model in the Qwen3-MoE architecture ({E} experts,
top-{k}), trained by kvlm's own script on Tiny Shakespeare with the GPT-2
tokenizer (the same corpus, split and vocabulary as `models/shakespeare-llama`).
It is a Hugging Face Qwen3-MoE directory (`Qwen3MoeForCausalLM`, tied
embeddings). Its routing is trained, so it is uneven (the expert load below):
tests that run it exercise routing as real MoE models do."""
        arch = (f"Qwen3-MoE: RMSNorm (eps {c['rms_norm_eps']}), RMSNorm of every query and key head, rotary embeddings "
                f"(rotate-half, theta {c['rope_theta']:g}), a router over {E} SwiGLU experts per layer, the top {k} "
                f"renormalised (`norm_topk_prob`), no biases, head tied to `model.embed_tokens`")
        mlp = f"{E} experts of {c['moe_intermediate_size']}, {k} per token"
        params = (f"{info['params']:,} ({info['emb_params']:,} of them in the token embedding; "
                  f"{info['active_params']:,} active per token)")
        loss_note = (f" The training loss adds Switch Transformer's load-balancing loss (weight {g['router_aux']:g},"
                     " its mean over layers; 1 for an even load) to the cross-entropy; the table shows the cross-entropy.")
    else:
        intro = """A small Llama-architecture model with grouped-query attention, trained by
kvlm's own script on Tiny Shakespeare with the GPT-2 tokenizer (the same
corpus, split and vocabulary as `models/shakespeare-gpt2`). It is a genuine
Hugging Face Llama directory (`LlamaForCausalLM`, tied embeddings): kvlm,
`transformers` and other Llama loaders read it unchanged."""
        arch = (f"Llama: RMSNorm (eps {c['rms_norm_eps']}), rotary embeddings (rotate-half, theta "
                f"{c['rope_theta']:g}), SwiGLU MLP, no biases, head tied to `model.embed_tokens`")
        mlp = str(c["intermediate_size"])
        params = f"{info['params']:,} ({info['emb_params']:,} of them in the token embedding)"
        loss_note = ""
    moe_note = (" (its experts `tools/moe_reference.py`'s; training computes each expert on the rows routed"
                " to it only, the same function)") if moe else ""
    load_section = ""
    if info.get("load"):
        rows = "\n".join("| %d | %s |" % (i, " | ".join("%.3f" % f for f in r)) for i, r in enumerate(info["load"]))
        load_section = f"""
## Expert load

The fraction of the validation split's routing choices ({c['num_experts_per_tok']} per token and
layer, every non-overlapping window of {c['max_position_embeddings']} tokens, exported weights,
float32) that goes to each expert; an even load would be {1 / c['num_experts']:.3f} everywhere.

| layer | {" | ".join("expert %d" % e for e in range(c['num_experts']))} |
| ---: | {" | ".join("---:" for _ in range(c['num_experts']))} |
{rows}
"""
    text = f"""# {info['name']}

{intro}

| | |
| --- | --- |
| architecture | {arch} |
| layers / width / MLP | {L} / {H} / {mlp} |
| attention | {nh} query heads over {nkv} KV heads (grouped-query, {nh // nkv} query heads per KV head), head dim {hd} |
| context | {c['max_position_embeddings']} tokens (`max_position_embeddings`, the training window) |
| vocabulary | 50,257 (the GPT-2 tokenizer, unchanged; BOS = EOS = 50256) |
| parameters | {params} |
| weights | {info['dtype'].upper()}, `model.safetensors` {info['st_bytes']:,} bytes |
| directory size | {info['dir_bytes']:,} bytes (with the tokenizer files) |
| KV cache per token | 2 x {L} layers x {nkv} KV heads x {hd} x 2 bytes = {kv16} bytes at f16 ({kv16_mha} for the same model with {nh} KV heads: {nh // nkv}x smaller) |

## Data

`data/tinyshakespeare.txt` (1,115,394 bytes; see `data/README.md`), encoded
with the GPT-2 tokenizer: {info['n_tokens']:,} tokens. The first 90%
({info['n_train']:,} tokens) is the training split, the last 10%
({info['n_val']:,} tokens) the validation split, exactly as for
`models/shakespeare-gpt2`. {info['n_seen']:,} distinct tokens occur in the
training split; {info['val_unseen']} validation tokens are ones training never saw.

## Training

```
{info['train_cmd']}
/usr/bin/python3 tools/train_llama.py export --ckpt {info['ckpt']} --out {info['out_rel']} --dtype {info['dtype']}{info.get('export_flags', '')}
```

AdamW (betas 0.9/0.95, weight decay {g['weight_decay']:g} on matrices), peak
learning rate {g['lr']:g} after {g['warmup']} warm-up steps, cosine decay to
{g['min_lr_frac']:g} of the peak, batch {g['batch']} x {c['max_position_embeddings']} tokens, {done} steps{stopped}
({toks:,} tokens, about {toks / info['n_train']:.1f} passes over the training split), {drop},
gradient clipping {g['grad_clip']:g}, seed {g['seed']}, `torch.set_num_threads({g['threads']})`:
{info['train_minutes']:.0f} minutes of wall clock, periodic evaluations included, on a 2-core machine
(PyTorch {torch.__version__} from Debian, with Debian's OpenBLAS through `LD_LIBRARY_PATH`){info['train_note']}. The loss is the exact
cross-entropy over all 50,257 tokens, trained cheaply as described at the top
of `tools/train_gpt2.py` (the tokens never seen in training share one
embedding row, written into each of their rows at export). The forward pass
is `tools/llama_reference.py`'s, the same code that produces kvlm's Llama
test fixtures{moe_note}.{loss_note}

| step | training loss (running mean) | validation loss |
| ---: | ---: | ---: |
{curve}

## Results (mean negative log-likelihood per token, nats)

| | train split | validation split |
| --- | ---: | ---: |
| this model (f32 weights, end of training) | {info['train_loss']:.4f} | {info['val_loss']:.4f} |
| this model, exported {info['dtype'].upper()} weights | | {info['val_loss_rounded']:.4f} |
| unigram baseline (add-one smoothing, fitted on train) | {info['uni_train']:.4f} | {info['uni_val']:.4f} |

Validation perplexity: {math.exp(info['val_loss_rounded']):.1f} for the model against
{math.exp(info['uni_val']):.1f} for the unigram baseline. Losses are over non-overlapping windows of
{c['max_position_embeddings']} tokens, every position scored; the training-split figure uses
{g['train_eval_windows']} windows spread evenly over it.

Sliding-window perplexity of `{fxd['file']}` ({fxd['file_tokens']} tokens of validation text,
context {fxd['context']}, stride {fxd['stride']}), computed by `tools/llama_reference.py` in
float64 from the exported weights and stored in `{info['fixture_rel']}`
for a kvlm-vs-PyTorch test: mean NLL {fxd['mean_nll']:.5f}, perplexity {fxd['perplexity']:.3f}.

A continuation of the prompt {json.dumps(info['sample_prompt'])} by the exported weights
({info['sample_tokens']} tokens sampled with temperature {SAMPLE_TEMPERATURE}, top-k {SAMPLE_TOP_K}, seed
{SAMPLE_SEED}, float64 reference forward):

```
{info['sample']}
```
{load_section}
## Licences

- Model weights: trained by the kvlm project; same licence as kvlm.
- Training text: Tiny Shakespeare (karpathy/char-rnn, `data/tinyshakespeare/input.txt`),
  Shakespeare's plays, public domain.
- `vocab.json` and `merges.txt`: OpenAI's GPT-2 tokenizer files
  (`models/gpt2-tokenizer/encoder.json` and `vocab.bpe`, byte for byte), under
  OpenAI's modified MIT licence (see `models/gpt2-tokenizer/README.md`).
"""
    with open(path, "w") as f:
        f.write(text)


# ------------------------------------------------------------------ main

def add_train_flags(t, ctx=128, out=os.path.join(ROOT, "build", "shakespeare-llama", "ckpt.pt")):
    """The training flags (shared with tools/train_chat.py)."""
    t.add_argument("--data", default=os.path.join(ROOT, "data", "tinyshakespeare.txt"))
    t.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "gpt2-tokenizer"))
    t.add_argument("--out", default=out)
    t.add_argument("--hidden", type=int, default=64)
    t.add_argument("--layers", type=int, default=8)
    t.add_argument("--heads", type=int, default=8)
    t.add_argument("--kv-heads", type=int, default=2)
    t.add_argument("--ffn", type=int, default=256)
    t.add_argument("--ctx", type=int, default=ctx)
    t.add_argument("--experts", type=int, default=0, help="a Qwen3-MoE of this many experts (0: dense Llama)")
    t.add_argument("--top-k", type=int, default=2, help="experts per token")
    t.add_argument("--expert-ffn", type=int, default=128, help="each expert's intermediate size")
    t.add_argument("--router-aux", type=float, default=0.01, help="weight of the load-balancing loss")
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--steps", type=int, default=800)
    t.add_argument("--warmup", type=int, default=40)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--min-lr-frac", type=float, default=0.1)
    t.add_argument("--weight-decay", type=float, default=0.1)
    t.add_argument("--dropout", type=float, default=0.1)
    t.add_argument("--grad-clip", type=float, default=1.0)
    t.add_argument("--eval-every", type=int, default=100)
    t.add_argument("--eval-windows", type=int, default=64, help="validation windows for periodic evals")
    t.add_argument("--train-eval-windows", type=int, default=264,
                   help="training windows (spread evenly) for the final train loss; 0 = all")
    t.add_argument("--ckpt-every", type=int, default=100)
    t.add_argument("--seed", type=int, default=1337)
    t.add_argument("--threads", type=int, default=2)
    t.add_argument("--resume", action="store_true")
    t.add_argument("--bench", type=int, default=0, help="time this many steps and exit")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train (or --resume) and checkpoint")
    add_train_flags(t)
    e = sub.add_parser("export", help="write the Hugging Face directory and the perplexity fixture")
    e.add_argument("--ckpt", default=os.path.join(ROOT, "build", "shakespeare-llama", "ckpt.pt"))
    e.add_argument("--out", default=os.path.join(ROOT, "models", "shakespeare-llama"))
    e.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    e.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "gpt2-tokenizer"))
    e.add_argument("--data", default=os.path.join(ROOT, "data", "tinyshakespeare.txt"))
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--fixture-dir", default=os.path.join(ROOT, "tests", "fixtures"),
                   help="holds shakespeare_val_slice.txt; the fixture goes to its llama/")
    e.add_argument("--sample-prompt", default="ROMEO:\n")
    e.add_argument("--train-note", default="", help="a remark on the training run for the README")
    e.add_argument("--sample-tokens", type=int, default=100)
    a = ap.parse_args()
    assert sys.byteorder == "little"
    return train(a) if a.cmd == "train" else export(a)


if __name__ == "__main__":
    sys.exit(main())
