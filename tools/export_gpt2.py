#!/usr/bin/python3
"""Export a checkpoint of tools/train_gpt2.py as a Hugging Face GPT-2 directory.

Writes OUT (default models/shakespeare-gpt2):
  config.json        model_type gpt2, gelu_new, n_positions = training context
  model.safetensors  F16 (or BF16) weights, unprefixed HF names (wte.weight,
                     h.0.attn.c_attn.weight, ...), Conv1D [in, out] layout,
                     no lm_head (tied to wte)
  vocab.json         byte-identical copy of models/gpt2-tokenizer/encoder.json
  merges.txt         byte-identical copy of models/gpt2-tokenizer/vocab.bpe
  README.md          data, training command, losses, unigram baseline, size,
                     licences

and the perplexity fixture kvlm's test checks the engine against:
  tests/fixtures/shakespeare_val_slice.txt   a fixed slice of the validation text
  tests/fixtures/shakespeare_ppl.json        its sliding-window perplexity,
                                              computed in float64 from the
                                              exported (rounded) weights

The embedding is expanded to the full 50,257 rows: tokens never seen in
training all get the shared row the training script learned for them, so
the exported model's full-vocabulary probabilities are the ones training
optimised (see train_gpt2.py).

Usage:
  export_gpt2.py --ckpt build/shakespeare/ckpt.pt [--out models/shakespeare-gpt2] [--dtype f16]
"""
import argparse, json, math, os, shutil, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_gpt2_fixtures as fx  # noqa: E402  safetensors writer, config writer, float64 reference
import tokenizer_reference  # noqa: E402
import train_gpt2  # noqa: E402

SLICE_BYTES = 3000      # about 3 KB of validation text, cut at a line end
FIXTURE_DIR = os.path.join(ROOT, "tests", "fixtures")


def full_weights(ck):
    """Float32 weights with the full-vocabulary embedding."""
    vocab = train_gpt2.Vocab(ck["seen"].tolist())
    w = dict(ck["weights"])
    w["wte.weight"] = vocab.expand(w["wte.weight"])
    return w


def sliding_window_nll(w, cfg, ids, context, stride):
    """Hugging Face sliding-window perplexity, float64: (sum of NLL, tokens
    scored, windows). Window [s, e) scores the tokens in [max(prev_e, s+1), e)."""
    total, scored, windows, prev_end = 0.0, 0, 0, 0
    for s in range(0, len(ids), stride):
        e = min(s + context, len(ids))
        logp = torch.log_softmax(fx.forward(w, cfg, ids[s:e]), dim=-1)
        for t in range(max(prev_end, s + 1), e):
            total -= logp[t - s - 1, ids[t]].item()
            scored += 1
        windows += 1
        prev_end = e
        if e == len(ids):
            break
    return total, scored, windows


def val_slice(text_bytes, n_train_tokens, ref, ids):
    """The validation text starts at the byte where token n_train starts; take
    the first speaker block boundary after it and about SLICE_BYTES from there."""
    start = len(ref.decode(ids[:n_train_tokens]))
    val = text_bytes[start:]
    b0 = val.index(b"\n\n") + 2                     # start at a speaker's name
    b1 = val.index(b"\n", b0 + SLICE_BYTES) + 1     # end at a line end
    return val[b0:b1]


def unigram_val_nll(train, val):
    """Add-one smoothed unigram over the full vocabulary, fitted on train."""
    counts = torch.bincount(train, minlength=train_gpt2.VOCAB).double() + 1.0
    logp = torch.log(counts / counts.sum())
    return -logp[val].mean().item()


def write_readme(path, info):
    c = info["cfg"]
    text = f"""# shakespeare-gpt2

A small GPT-2 trained by kvlm's own script on Tiny Shakespeare, shipped so
that `make run` writes real text on a machine that cannot download weights.
It is a genuine Hugging Face GPT-2 directory (`GPT2LMHeadModel`): kvlm,
`transformers` and any other GPT-2 loader read it unchanged.

| | |
| --- | --- |
| architecture | GPT-2: learned positions, pre-LayerNorm, tanh GELU (`gelu_new`), head tied to `wte` |
| layers / heads / width | {c['n_layer']} / {c['n_head']} / {c['n_embd']} (head dim {c['n_embd'] // c['n_head']}, MLP {4 * c['n_embd']}) |
| context | {c['n_ctx']} tokens |
| vocabulary | 50,257 (the GPT-2 tokenizer, unchanged) |
| parameters | {info['params']:,} ({info['emb_params']:,} of them in the token embedding) |
| weights | {info['dtype'].upper()}, `model.safetensors` {info['st_bytes']:,} bytes |
| directory size | {info['dir_bytes']:,} bytes (with the tokenizer files) |

## Data

`data/tinyshakespeare.txt` (1,115,394 bytes; see `data/README.md`), encoded
with the GPT-2 tokenizer: {info['n_tokens']:,} tokens. The first 90%
({info['n_train']:,} tokens) is the training split, the last 10%
({info['n_val']:,} tokens) the validation split. {info['n_seen']:,} distinct
tokens occur in the training split; {info['val_unseen']} validation tokens are
ones training never saw.

## Training

```
{info['train_cmd']}
/usr/bin/python3 tools/export_gpt2.py --ckpt {info['ckpt']} --out {info['out_rel']} --dtype {info['dtype']}
```

AdamW (betas 0.9/0.95, weight decay {info['args']['weight_decay']} on matrices),
peak learning rate {info['args']['lr']} after {info['args']['warmup']} warm-up steps, cosine decay to
{info['args']['min_lr_frac']} of the peak, batch {info['args']['batch']} x {c['n_ctx']} tokens,
{info['steps_done']} steps ({info['steps_done'] * info['args']['batch'] * c['n_ctx']:,} tokens, about
{info['steps_done'] * info['args']['batch'] * c['n_ctx'] / info['n_train']:.1f} passes over the training split), dropout {info['args']['dropout']},
gradient clipping {info['args']['grad_clip']}, seed {info['args']['seed']}, {info['args']['threads']} threads, {info['train_minutes']:.0f} minutes
on a 2-core machine (PyTorch {torch.__version__} from Debian, with Debian's OpenBLAS
through `LD_LIBRARY_PATH`; the reference BLAS is several times slower). The
loss is the exact cross-entropy over all 50,257 tokens (see the comment at the
top of `tools/train_gpt2.py` for how unseen tokens are handled cheaply).
{info['note']}
## Results (mean negative log-likelihood per token, nats)

| | train split | validation split |
| --- | ---: | ---: |
| this model (f32 weights, end of training) | {info['train_loss']:.4f} | {info['val_loss']:.4f} |
| this model, exported {info['dtype'].upper()} weights | | {info['val_loss_rounded']:.4f} |
| unigram baseline (add-one smoothing, fitted on train) | {info['uni_train']:.4f} | {info['uni_val']:.4f} |

Validation perplexity: {math.exp(info['val_loss_rounded']):.1f} for the model against
{math.exp(info['uni_val']):.1f} for the unigram baseline. Losses are over non-overlapping windows of {c['n_ctx']}
tokens, every position scored (so the first tokens of each window have little context).

Sliding-window perplexity of `{info['slice_rel']}` ({info['slice_tokens']} tokens
of validation text, context {c['n_ctx']}, stride {info['stride']}), computed by PyTorch in float64 from the
exported weights and checked against kvlm by `tests/test_perplexity.c`:
mean NLL {info['slice_nll']:.5f}, perplexity {math.exp(info['slice_nll']):.3f}.

```
build/kvlm perplexity -m {info['out_rel']} -f {info['slice_rel']}
```

## Licences

- Model weights: trained by the kvlm project; same licence as kvlm.
- Training text: Tiny Shakespeare (karpathy/char-rnn, `data/tinyshakespeare/input.txt`),
  Shakespeare's plays, public domain.
- `vocab.json` and `merges.txt`: OpenAI's GPT-2 tokenizer files, unchanged,
  under OpenAI's modified MIT licence.
"""
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", default=os.path.join(ROOT, "build", "shakespeare", "ckpt.pt"))
    ap.add_argument("--out", default=os.path.join(ROOT, "models", "shakespeare-gpt2"))
    ap.add_argument("--dtype", choices=["f16", "bf16"], default="f16")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "gpt2-tokenizer"))
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "tinyshakespeare.txt"))
    ap.add_argument("--fixture-dir", default=FIXTURE_DIR, help="where the perplexity fixture goes")
    ap.add_argument("--train-cmd", default=None, help="training command line for the README")
    ap.add_argument("--train-minutes", type=float, default=None)
    ap.add_argument("--train-note", default="", help="a paragraph for the README's training section")
    a = ap.parse_args()
    assert sys.byteorder == "little"
    torch.set_num_threads(2)

    ck = torch.load(a.ckpt)
    cfg = ck["config"]
    w = fx.rounded(full_weights(ck), a.dtype)
    os.makedirs(a.out, exist_ok=True)
    fx.write_config(os.path.join(a.out, "config.json"), cfg, a.dtype)
    st_bytes = fx.write_safetensors(os.path.join(a.out, "model.safetensors"), fx.hf_tensors(w, cfg, ""))
    shutil.copyfile(os.path.join(a.tokenizer, "encoder.json"), os.path.join(a.out, "vocab.json"))
    shutil.copyfile(os.path.join(a.tokenizer, "vocab.bpe"), os.path.join(a.out, "merges.txt"))
    # Read back: every tensor as written.
    back = fx.read_safetensors(os.path.join(a.out, "model.safetensors"))
    for name, t in fx.hf_tensors(w, cfg, ""):
        st_dtype, values = back[name]
        assert st_dtype == fx.ST_NAME[a.dtype] and torch.equal(values, t.double()), name

    ref = tokenizer_reference.Reference(a.out)
    with open(a.data, "rb") as f:
        text = f.read()
    ids = torch.tensor(ref.encode(text), dtype=torch.long)
    train, val = train_gpt2.split(ids)
    seen = set(ck["seen"].tolist())

    # Validation loss of the exported (rounded) weights over the full
    # vocabulary, float32. Every unseen row is a copy of the same rounded
    # shared row, so the compact form (seen rows + that row) is the same model.
    vocab = train_gpt2.Vocab(ck["seen"].tolist())
    wf = {k: v.float() for k, v in w.items()}
    unseen = vocab.to_compact == vocab.n - 1
    shared = wf["wte.weight"][unseen.nonzero()[0, 0]]
    assert torch.equal(wf["wte.weight"][unseen], shared.expand(int(unseen.sum()), -1))
    wf["wte.weight"] = torch.cat([wf["wte.weight"][vocab.seen], shared[None]])
    val_rounded = train_gpt2.evaluate(wf, cfg, vocab.to_compact[val], vocab)
    # The same figures for the float32 weights as trained (train loss over
    # 264 windows spread over the split, as train_gpt2.py reports it).
    w32 = dict(ck["weights"])
    final = {"train_loss": train_gpt2.evaluate(w32, cfg, vocab.to_compact[train], vocab, 264),
             "val_loss": train_gpt2.evaluate(w32, cfg, vocab.to_compact[val], vocab), "steps": ck["step"]}

    # Perplexity fixture.
    piece = val_slice(text, len(train), ref, ids.tolist())
    slice_path = os.path.join(a.fixture_dir, "shakespeare_val_slice.txt")
    with open(slice_path, "wb") as f:
        f.write(piece)
    sids = ref.encode(piece)
    context, stride = cfg["n_ctx"], cfg["n_ctx"] // 2
    nll, scored, windows = sliding_window_nll(w, cfg, sids, context, stride)
    mean = nll / scored
    rel = lambda p: os.path.relpath(os.path.abspath(p), ROOT)
    fixture = {"model": rel(a.out), "file": rel(slice_path), "context": context, "stride": stride,
               "file_tokens": len(sids), "tokens": scored, "windows": windows, "weights_dtype": a.dtype,
               "mean_nll": mean, "perplexity": math.exp(mean)}
    with open(os.path.join(a.fixture_dir, "shakespeare_ppl.json"), "w") as f:
        f.write(json.dumps(fixture, indent=2) + "\n")

    elapsed = max((r.get("elapsed_s", 0) for r in ck["log"]), default=0)
    args = ck["args"]
    train_cmd = a.train_cmd or (
        "LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread /usr/bin/python3 tools/train_gpt2.py "
        "--out %s --n-layer %d --n-head %d --n-embd %d --n-ctx %d --batch %d --steps %d --warmup %d --lr %g "
        "--dropout %g --eval-every %d --ckpt-every %d"
        % (rel(a.ckpt), cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["n_ctx"], args["batch"],
           args["steps"], args["warmup"], args["lr"], args["dropout"], args["eval_every"], args["ckpt_every"]))
    info = dict(cfg=cfg, steps_done=ck["step"], note=("\n" + a.train_note + "\n") if a.train_note else "", params=train_gpt2.param_count(cfg), emb_params=train_gpt2.VOCAB * cfg["n_embd"],
                dtype=a.dtype, st_bytes=os.path.getsize(os.path.join(a.out, "model.safetensors")),
                n_tokens=len(ids), n_train=len(train), n_val=len(val), n_seen=len(seen),
                val_unseen=sum(1 for t in val.tolist() if t not in seen), train_cmd=train_cmd,
                ckpt=rel(a.ckpt), out_rel=rel(a.out), args=args,
                train_minutes=a.train_minutes if a.train_minutes else elapsed / 60,
                train_loss=final.get("train_loss", float("nan")), val_loss=final.get("val_loss", float("nan")),
                val_loss_rounded=val_rounded, uni_train=unigram_val_nll(train, train),
                uni_val=unigram_val_nll(train, val), slice_rel=rel(slice_path), slice_tokens=len(sids),
                stride=stride, slice_nll=mean)
    readme = os.path.join(a.out, "README.md")
    info["dir_bytes"] = 0
    write_readme(readme, info)
    info["dir_bytes"] = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    write_readme(readme, info)
    info["dir_bytes"] = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    write_readme(readme, info)  # the README's own size settles after two passes
    print(json.dumps({k: v for k, v in info.items() if k not in ("args", "cfg")}, indent=1))
    print(json.dumps(fixture, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
