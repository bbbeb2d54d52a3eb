#!/usr/bin/python3
"""Train the small GPT-2 that ships in models/shakespeare-gpt2.

The model is exactly what kvlm's engine computes for model_type "gpt2":
learned token and position embeddings, pre-LayerNorm blocks (eps 1e-5),
causal multi-head attention, a 4x MLP with the tanh GELU ("gelu_new"), a
final LayerNorm and an output head tied to the token embedding. Weights are
held in the Hugging Face Conv1D layout ([in, out], y = x @ W + b) and keyed by
the Hugging Face names, so export is a rename-free dump (tools/export_gpt2.py).

Data: Tiny Shakespeare (data/tinyshakespeare.txt) encoded with the real GPT-2
tokenizer (50,257 tokens, tools/tokenizer_reference.py). The first 90% of the
tokens are the training split, the last 10% the validation split. Training
draws random windows of context+1 tokens from the training split; the
validation loss is the mean over every non-overlapping window of the
validation split (all positions scored, dropout off).

Output vocabulary: the full 50,257 tokens, trained exactly but cheaply. Only
the tokens that occur in the training split (about 11,300) get rows of their
own; every other token shares one row u. A model whose unseen rows all equal
u has, for the whole 50,257-way softmax, the normaliser
    sum over seen tokens of exp(h.e_t) + n_unseen * exp(h.u),
so training over n_seen + 1 columns, with log(n_unseen) added to the last
one, minimises the exact full-vocabulary cross-entropy of the exported model
(tools/export_gpt2.py writes u into every unseen row). Validation tokens that
never occur in training are scored with their true probability exp(h.u) / Z.

Optimiser: AdamW (betas 0.9/0.95, weight decay on matrices only), linear
warm-up then cosine decay to a tenth of the peak learning rate.
Deterministic for a given seed and thread count (torch.set_num_threads).

A checkpoint (weights, optimiser state, step, RNG state, loss log) is written
every --ckpt-every steps and at the end; --resume continues from it, so an
interrupted run loses at most that many steps.

Usage:
  train_gpt2.py --out build/shakespeare/ckpt.pt [--n-layer 6 --n-embd 128 ...]
  train_gpt2.py --bench ...     time a few steps and exit
"""
import argparse, json, math, os, sys, time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import tokenizer_reference  # noqa: E402

LN_EPS = 1e-5
VOCAB = 50257
EOS = 50256


# ------------------------------------------------------------------ data

def load_tokens(text_path, tok_dir):
    """Token ids of the whole corpus (no special tokens), cached beside nothing:
    encoding 1 MB takes about a second."""
    ref = tokenizer_reference.Reference(tok_dir)
    with open(text_path, "rb") as f:
        ids = ref.encode(f.read())
    return torch.tensor(ids, dtype=torch.long)


def split(ids):
    n_train = int(0.9 * len(ids))
    return ids[:n_train], ids[n_train:]


class Vocab:
    """Compact ids: the sorted tokens seen in training, then one shared row."""

    def __init__(self, seen, size=VOCAB):
        self.size = size
        self.seen = torch.as_tensor(sorted(set(seen)), dtype=torch.long)
        self.n = len(self.seen) + 1
        self.n_unseen = size - len(self.seen)
        self.to_compact = torch.full((size,), self.n - 1, dtype=torch.long)
        self.to_compact[self.seen] = torch.arange(len(self.seen))
        self.head_bias = torch.zeros(self.n)
        self.head_bias[-1] = math.log(self.n_unseen)

    def expand(self, wte_c):
        """Full [VOCAB, C] embedding: the shared row everywhere, seen rows in place."""
        full = wte_c[-1].expand(self.size, -1).clone()
        full[self.seen] = wte_c[:-1]
        return full


# ------------------------------------------------------------------ model

def layer_keys():
    return ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
            "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]


def init_weights(cfg, gen, n_rows):
    """Float32 parameters keyed by unprefixed HF names. GPT-2's scheme: normal
    std 0.02, residual projections scaled by 1/sqrt(2 n_layer), zero biases,
    unit LayerNorm gains."""
    C, L, T = cfg["n_embd"], cfg["n_layer"], cfg["n_ctx"]
    std, rstd = 0.02, 0.02 / math.sqrt(2 * L)
    rnd = lambda s, *shape: s * torch.randn(*shape, generator=gen)
    w = {"wte.weight": rnd(std, n_rows, C), "wpe.weight": rnd(0.01, T, C)}
    for i in range(L):
        p = "h.%d." % i
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = torch.ones(C), torch.zeros(C)
        w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = rnd(std, C, 3 * C), torch.zeros(3 * C)
        w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = rnd(rstd, C, C), torch.zeros(C)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = torch.ones(C), torch.zeros(C)
        w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = rnd(std, C, 4 * C), torch.zeros(4 * C)
        w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = rnd(rstd, 4 * C, C), torch.zeros(C)
    w["ln_f.weight"], w["ln_f.bias"] = torch.ones(C), torch.zeros(C)
    return w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def forward(W, cfg, idx, head_bias, dropout=0.0, train=False):
    """Compact logits [B, T, n_seen + 1] for compact ids idx [B, T]; head_bias
    adds log(n_unseen) to the shared column (see the module comment)."""
    F = torch.nn.functional
    B, T = idx.shape
    C, nh = cfg["n_embd"], cfg["n_head"]
    hd = C // nh
    drop = (lambda t: F.dropout(t, dropout, True)) if train and dropout > 0 else (lambda t: t)
    x = drop(W["wte.weight"][idx] + W["wpe.weight"][:T])
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        h = F.layer_norm(x, (C,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], LN_EPS)
        qkv = torch.addmm(W[p + "attn.c_attn.bias"], h.reshape(B * T, C), W[p + "attn.c_attn.weight"])
        q, k, v = (t.reshape(B, T, nh, hd).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
        att = drop(torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1))
        y = (att @ v).transpose(1, 2).reshape(B * T, C)
        x = x + drop(torch.addmm(W[p + "attn.c_proj.bias"], y, W[p + "attn.c_proj.weight"]).view(B, T, C))
        h = F.layer_norm(x, (C,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], LN_EPS)
        m = gelu_tanh(torch.addmm(W[p + "mlp.c_fc.bias"], h.reshape(B * T, C), W[p + "mlp.c_fc.weight"]))
        x = x + drop(torch.addmm(W[p + "mlp.c_proj.bias"], m, W[p + "mlp.c_proj.weight"]).view(B, T, C))
    x = F.layer_norm(x, (C,), W["ln_f.weight"], W["ln_f.bias"], LN_EPS)
    return torch.addmm(head_bias, x.reshape(B * T, C), W["wte.weight"].t()).view(B, T, -1)


def loss_fn(W, cfg, x, y, vocab, dropout=0.0, train=False):
    """x, y: compact ids. Exact full-vocabulary cross-entropy in nats; a target
    outside the seen set is scored by the shared logit h.u alone."""
    logits = forward(W, cfg, x, vocab.head_bias, dropout, train).reshape(-1, vocab.n)
    y = y.reshape(-1)
    lse = torch.logsumexp(logits, dim=-1)
    tgt = logits.gather(1, y[:, None])[:, 0]
    tgt = tgt - (y == vocab.n - 1).to(tgt.dtype) * vocab.head_bias[-1]
    return lse - tgt


@torch.no_grad()
def evaluate(W, cfg, ids, vocab, max_windows=None, batch=8):
    """Mean NLL over non-overlapping windows of n_ctx+1 tokens (every position
    of each window scored once); with max_windows, that many windows spread
    evenly over the split."""
    T = cfg["n_ctx"]
    n_win = (len(ids) - 1) // T
    every = -(-n_win // max_windows) if max_windows else 1
    wins = list(range(0, n_win, every))  # evenly spread when capped
    total, count = 0.0, 0
    for b0 in range(0, len(wins), batch):
        rows = wins[b0:b0 + batch]
        x = torch.stack([ids[r * T:r * T + T] for r in rows])
        y = torch.stack([ids[r * T + 1:r * T + T + 1] for r in rows])
        total += loss_fn(W, cfg, x, y, vocab).sum().item()
        count += y.numel()
    return total / count


def param_count(cfg):
    C, L, T = cfg["n_embd"], cfg["n_layer"], cfg["n_ctx"]
    return VOCAB * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


# ------------------------------------------------------------------ training

def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    t = min(1.0, (step - a.warmup) / max(1, a.steps - a.warmup))
    lo = a.lr * a.min_lr_frac
    return lo + 0.5 * (a.lr - lo) * (1.0 + math.cos(math.pi * t))


def make_optimizer(W, a):
    decay = [v for k, v in W.items() if v.dim() == 2]
    no_decay = [v for k, v in W.items() if v.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=a.lr, betas=(0.9, 0.95), eps=1e-8)


def save_ckpt(path, W, opt, step, cfg, a, log, gen, vocab):
    tmp = path + ".tmp"
    torch.save({"seen": vocab.seen, "weights": {k: v.detach().clone() for k, v in W.items()}, "opt": opt.state_dict(),
                "step": step, "config": cfg, "args": vars(a), "log": log,
                "rng": gen.get_state(), "torch_rng": torch.get_rng_state()}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "tinyshakespeare.txt"))
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "gpt2-tokenizer"))
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "shakespeare", "ckpt.pt"))
    ap.add_argument("--n-layer", type=int, default=6)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--n-ctx", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-windows", type=int, default=64, help="validation windows for periodic evals")
    ap.add_argument("--train-eval-windows", type=int, default=264,
                    help="training windows (spread evenly) for the final train loss; 0 = all")
    ap.add_argument("--ckpt-every", type=int, default=250)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--bench", type=int, default=0, help="time this many steps and exit")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    cfg = dict(n_layer=a.n_layer, n_head=a.n_head, n_embd=a.n_embd, n_ctx=a.n_ctx, vocab_size=VOCAB)
    assert a.n_embd % a.n_head == 0

    ids = load_tokens(a.data, a.tokenizer)
    train, val = split(ids)
    vocab = Vocab(train.tolist())
    train_c, val_c = vocab.to_compact[train], vocab.to_compact[val]
    print("tokens %d: train %d, val %d; %d distinct training tokens; params %d (%.2f MB at 2 bytes)"
          % (len(ids), len(train), len(val), len(vocab.seen), param_count(cfg), param_count(cfg) * 2 / 1e6), flush=True)

    W = {k: v.requires_grad_() for k, v in init_weights(cfg, gen, vocab.n).items()}
    opt = make_optimizer(W, a)
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

    T, B = a.n_ctx, a.batch
    t0, tl, tl_n = time.time(), 0.0, 0
    while step < (a.bench or a.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        starts = torch.randint(0, len(train) - T - 1, (B,), generator=gen)
        x = torch.stack([train_c[s:s + T] for s in starts])
        y = torch.stack([train_c[s + 1:s + T + 1] for s in starts])
        loss = loss_fn(W, cfg, x, y, vocab, a.dropout, True).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(W.values()), a.grad_clip)
        opt.step()
        step += 1
        tl, tl_n = tl + loss.item(), tl_n + 1
        if a.bench:
            continue
        if step % a.eval_every == 0 or step == a.steps:
            full = step == a.steps
            vl = evaluate(W, cfg, val_c, vocab, None if full else a.eval_windows)
            rec = {"step": step, "train_loss_running": tl / tl_n, "val_loss": vl, "val_full": full,
                   "lr": lr_at(step - 1, a), "elapsed_s": time.time() - t0}
            log.append(rec)
            print(json.dumps(rec), flush=True)
            tl, tl_n = 0.0, 0
        if step % a.ckpt_every == 0 or step == a.steps:
            save_ckpt(a.out, W, opt, step, cfg, a, log, gen, vocab)
    dt = time.time() - t0
    if a.bench:
        print("bench: %d steps in %.1f s: %.3f s/step, %.0f tokens/s, loss %.3f"
              % (a.bench, dt, dt / a.bench, a.bench * B * T / dt, tl / tl_n), flush=True)
        return 0
    # Final figures over the whole splits (dropout off).
    final = {"train_loss": evaluate(W, cfg, train_c, vocab, a.train_eval_windows), "val_loss": evaluate(W, cfg, val_c, vocab),
             "steps": step}
    log.append({"final": final})
    save_ckpt(a.out, W, opt, step, cfg, a, log, gen, vocab)
    print("final " + json.dumps(final), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
