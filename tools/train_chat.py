#!/usr/bin/python3
"""Train and export models/shakespeare-chat: a small Llama-architecture chat
model with a 1024-token context, trained on Tiny Shakespeare's speeches laid
out as ChatML conversations.

Data. data/tinyshakespeare.txt is a run of speeches ("NAME:\\n" then the
lines), separated by blank lines, from nine plays in a fixed order. The plays
carry no titles in the file; PLAYS below names each one by the index of its
first speech (checked against the speaker expected there). Each play's
speeches, in order, are cut into conversations of at most --conv-tokens
tokens:

    <|im_start|>system\\nA scene from PLAY, by William Shakespeare.<|im_end|>\\n
    <|im_start|>user\\nNAME:\\nspeech<|im_end|>\\n
    <|im_start|>assistant\\nNAME:\\nnext speech<|im_end|>\\n
    ... (user and assistant alternate) ...
    <|endoftext|>

so the model answers a speech with the next one, speaker name first. The
conversations are concatenated into one token stream; training draws random
windows of --ctx tokens from it (every position scored, the tags included),
so positions up to 1023 are learnt. A speech belongs to the training split
when it starts in the first 90% of the file's bytes (the split of the other
shipped models, cut at a speech boundary), to the validation split otherwise.

Vocabulary: GPT-2's 50,257 tokens (BOS = <|endoftext|> = 50256) plus
<|im_start|> = 50257 and <|im_end|> = 50258, written as tokenizer.json with
the two tags as special added tokens. The model, optimiser, loss and
checkpoints are tools/train_llama.py's (called with this data and config).

Usage:
  train_chat.py train --out build/shakespeare-chat/ckpt.pt [train_llama.py's flags]
  train_chat.py export --ckpt build/shakespeare-chat/ckpt.pt [--out models/shakespeare-chat]
  train_chat.py data          print the split sizes and the first conversation
"""
import argparse, json, math, os, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import llama_reference as ref  # noqa: E402
import tokenizer_reference  # noqa: E402
import train_gpt2 as tg  # noqa: E402
import train_llama as tl  # noqa: E402

IM_START, IM_END, EOT = 50257, 50258, 50256
VOCAB = 50259
SPECIAL = {"<|endoftext|>": EOT, "<|im_start|>": IM_START, "<|im_end|>": IM_END}
AUTHOR = "William Shakespeare"

# (index of the play's first speech in the file, its speaker, title)
PLAYS = [(0, "First Citizen", "Coriolanus"), (1107, "GLOUCESTER", "King Richard III"),
         (2196, "KING RICHARD II", "King Richard II"), (2751, "GREGORY", "Romeo and Juliet"),
         (3590, "WARWICK", "King Henry VI, Part 3"), (4403, "ARCHIDAMUS", "The Winter's Tale"),
         (5149, "DUKE VINCENTIO", "Measure for Measure"), (6046, "SLY", "The Taming of the Shrew"),
         (6939, "Master", "The Tempest")]


class ChatTokenizer:
    """GPT-2 byte-level BPE (tools/tokenizer_reference.py) with the ChatML
    tags as special tokens: text between tags is encoded alone, as
    tokenizer.json's added tokens split it."""

    def __init__(self, gpt2_dir):
        self.bpe = tokenizer_reference.Reference(gpt2_dir)

    def encode(self, text):
        ids, i, start = [], 0, 0
        while i < len(text):
            hit = next((s for s in SPECIAL if text.startswith(s, i)), None)
            if hit is None:
                i += 1
                continue
            if start < i:
                ids += self.bpe.encode(text[start:i].encode())
            ids.append(SPECIAL[hit])
            i = start = i + len(hit)
        if start < len(text):
            ids += self.bpe.encode(text[start:].encode())
        return ids

    def decode(self, ids):
        inv = {v: k.encode() for k, v in SPECIAL.items()}
        return b"".join(inv[i] if i in inv else self.bpe.decode([i]) for i in ids)


def speeches(text):
    """[(byte offset, speaker, speech text with its name line)] in file order."""
    out, pos = [], 0
    for block in text.split("\n\n"):
        if block.strip():
            out.append((pos, block.split(":\n", 1)[0], block.strip("\n")))
        pos += len(block.encode()) + 2
    return out


def play_of(sp):
    """Title of each speech's play (PLAYS, checked)."""
    titles = []
    for k, (start, who, title) in enumerate(PLAYS):
        assert sp[start][1] == who, "PLAYS: speech %d is %r, not %r" % (start, sp[start][1], who)
        end = PLAYS[k + 1][0] if k + 1 < len(PLAYS) else len(sp)
        titles += [title] * (end - start)
    return titles


def turn(role, content):
    return "<|im_start|>%s\n%s<|im_end|>\n" % (role, content)


def conversations(text, tok, max_tokens):
    """(train ids, validation ids, counts): the ChatML streams of each split."""
    sp = speeches(text)
    titles = play_of(sp)
    cut = int(0.9 * len(text.encode()))
    streams = {"train": [], "val": []}
    counts = {"train": [0, 0], "val": [0, 0]}        # conversations, speeches
    conv, n_conv, key, title = [], 0, None, None

    def flush():
        if conv:
            streams[key].extend(conv + [EOT])
            counts[key][0] += 1
    for (off, who, body), t in zip(sp, titles):
        k = "train" if off < cut else "val"
        if k != key or t != title:
            flush()
            key, title = k, t
            conv = tok.encode(turn("system", "A scene from %s, by %s." % (t, AUTHOR)))
            n_conv = 0
        role = "user" if n_conv % 2 == 0 else "assistant"
        ids = tok.encode(turn(role, body))
        if len(conv) + len(ids) + 1 > max_tokens and n_conv > 0:
            flush()
            conv, n_conv = tok.encode(turn("system", "A scene from %s, by %s." % (t, AUTHOR))), 0
            ids = tok.encode(turn("user", body))
        conv += ids[:max_tokens - len(conv) - 1]
        n_conv += 1
        counts[k][1] += 1
    flush()
    return (torch.tensor(streams["train"], dtype=torch.long), torch.tensor(streams["val"], dtype=torch.long),
            counts)


def load_data(a):
    with open(a.data, encoding="utf-8") as f:
        text = f.read()
    tok = ChatTokenizer(a.tokenizer)
    tr, va, counts = conversations(text, tok, a.conv_tokens)
    return tok, tr, va, counts


def make_config(a):
    c = tl.make_config(a)
    c.update(vocab_size=VOCAB, bos_token_id=EOT, eos_token_id=[IM_END, EOT])
    return c


def train(a):
    tok, tr, va, counts = load_data(a)
    print("conversations: train %d (%d speeches, %d tokens), val %d (%d speeches, %d tokens)"
          % (counts["train"][0], counts["train"][1], len(tr), counts["val"][0], counts["val"][1], len(va)),
          flush=True)
    return tl.train(a, (torch.cat([tr, va]), tr, va), make_config(a))


# ------------------------------------------------------------------ export

# ChatML with tools: a tools list goes into the system turn as one JSON
# signature a line inside <tools>; an assistant's tool calls are
# <tool_call>{"name": ..., "arguments": ...}</tool_call> blocks after its
# text; a tool's answer is a user turn holding <tool_response>.
CHAT_TEMPLATE = (
    "{%- set sys = messages[0].content if messages and messages[0].role == 'system' else none -%}\n"
    "{%- if tools -%}\n"
    "{{- '<|im_start|>system\\n' -}}\n"
    "{%- if sys is not none -%}{{- sys + '\\n\\n' -}}{%- endif -%}\n"
    "{{- 'These tools may be called; their signatures, one JSON object a line:\\n<tools>\\n' -}}\n"
    "{%- for tool in tools -%}{{- (tool | tojson) + '\\n' -}}{%- endfor -%}\n"
    "{{- '</tools>\\nTo call one, answer with <tool_call>\\n{\"name\": NAME, \"arguments\": {...}}\\n</tool_call>.<|im_end|>\\n' -}}\n"
    "{%- elif sys is not none -%}\n"
    "{{- '<|im_start|>system\\n' + sys + '<|im_end|>\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    "{%- if m.role == 'system' and loop.first -%}\n"
    "{%- elif m.role == 'tool' -%}\n"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' -}}\n"
    "{%- else -%}\n"
    "{{- '<|im_start|>' + m.role + '\\n' + (m.content or '') -}}\n"
    "{%- for tc in m.tool_calls or [] -%}\n"
    "{%- set f = tc.function if tc.function is defined else tc -%}\n"
    "{{- ('\\n' if (m.content or not loop.first) else '') + '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' -}}\n"
    "{{- (f.arguments if f.arguments is string else (f.arguments | tojson)) + '}\\n</tool_call>' -}}\n"
    "{%- endfor -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n")


def tokenizer_files(gpt2_dir, out):
    """tokenizer.json (GPT-2's BPE with the three special added tokens) and
    tokenizer_config.json (the chat template, no BOS added, EOS <|im_end|>)."""
    with open(os.path.join(gpt2_dir, "encoder.json"), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(gpt2_dir, "vocab.bpe"), encoding="utf-8") as f:
        merges = [l for l in f.read().split("\n")[1:] if l]
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for c, i in sorted(SPECIAL.items(), key=lambda x: x[1])]
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
          "post_processor": None,
          "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
          "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                    "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                    "merges": merges}}
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    tc = {"add_bos_token": False, "add_prefix_space": False,
          "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
          "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
          "model_max_length": 1024, "clean_up_tokenization_spaces": False, "errors": "replace",
          "tokenizer_class": "GPT2Tokenizer", "chat_template": CHAT_TEMPLATE}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(tc, indent=2, ensure_ascii=False) + "\n")


@torch.no_grad()
def chat_sample(w, cfg, tok, messages, n, seed=1234, temperature=0.8, top_k=40):
    """A seeded sampled assistant reply (float64 reference forward), ending at <|im_end|>;
    the prompt is the template's rendering of plain system and user turns."""
    text = "".join(turn(m["role"], m["content"]) for m in messages) + "<|im_start|>assistant\n"
    ids = tok.encode(text)
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        logits = tl.last_logits(w, cfg, (ids + out)[-cfg["max_position_embeddings"]:]) / temperature
        top = torch.topk(logits, top_k)
        nxt = int(top.indices[torch.multinomial(torch.softmax(top.values, -1), 1, generator=g)])
        if nxt == IM_END:
            break
        out.append(nxt)
    return text, tok.decode(out).decode("utf-8", "replace")


def export(a):
    torch.set_num_threads(a.threads)
    ck = torch.load(a.ckpt)
    cfg = dict(ck["config"], torch_dtype="float16")
    vocab = tg.Vocab(ck["seen"].tolist(), VOCAB)
    w = {k: v.detach().half() for k, v in ck["weights"].items()}
    w[ref.EMBED] = vocab.expand(ck["weights"][ref.EMBED].detach()).half()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2) + "\n")
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        f.write(json.dumps({"bos_token_id": EOT, "eos_token_id": [IM_END, EOT]}, indent=2) + "\n")
    ref.write_safetensors(os.path.join(a.out, "model.safetensors"), sorted(w.items()))
    tokenizer_files(a.tokenizer, a.out)
    back, bcfg = ref.load_hf(a.out)
    assert bcfg == cfg and set(back) == set(w)
    for k in w:
        assert torch.equal(back[k], w[k].double()), k
    tok, tr, va, counts = load_data(a)
    # The exported model's loss: the compact model with every tensor rounded
    # to f16 (its unseen rows all equal the shared row, so this is exact).
    wr = {k: v.detach().half().float() for k, v in ck["weights"].items()}
    log = [r for r in ck["log"] if "step" in r]
    final = next((r["final"] for r in reversed(ck["log"]) if "final" in r), None)
    windows = None
    if final is None:       # stopped at a checkpoint: its last periodic evaluation
        last, windows = log[-1], ck["args"]["eval_windows"]
        final = {"steps": ck["step"], "train_loss": last["train_loss_running"], "val_loss": last["val_loss"],
                 "train_s": last["elapsed_s"]}
        if last["step"] != ck["step"]:
            # Checkpointed past its last evaluation: evaluate these weights
            # (f32) here, the training loss over windows of the training split.
            # The checkpoint does not record the wall clock: --train-seconds.
            wf = {k: v.detach().float() for k, v in ck["weights"].items()}
            nw = ck["args"]["train_eval_windows"]
            final = {"steps": ck["step"], "train_windows": nw,
                     "train_loss": tl.evaluate(wf, cfg, vocab.to_compact[tr], vocab, nw, batch=1),
                     "val_loss": tl.evaluate(wf, cfg, vocab.to_compact[va], vocab, windows, batch=1),
                     "train_s": a.train_seconds if a.train_seconds else last["elapsed_s"]}
    val_rounded = tl.evaluate(wr, cfg, vocab.to_compact[va], vocab, windows, batch=1)
    msgs = [{"role": "system", "content": "A scene from Romeo and Juliet, by William Shakespeare."},
            {"role": "user", "content": "ROMEO:\nBut soft, what light through yonder window breaks?"}]
    prompt, reply = chat_sample(back, cfg, tok, msgs, 80)
    info = dict(cfg=cfg, args=ck["args"], log=log, final=final, val_rounded=val_rounded, counts=counts, windows=windows,
                n_train=len(tr), n_val=len(va), n_seen=len(ck["seen"]), prompt=prompt, reply=reply,
                params=tl.param_count(cfg), ckpt=os.path.relpath(os.path.abspath(a.ckpt), ROOT),
                out_rel=os.path.relpath(os.path.abspath(a.out), ROOT), note=a.train_note)
    readme = os.path.join(a.out, "README.md")
    for _ in range(3):
        info["sizes"] = {f: os.path.getsize(os.path.join(a.out, f)) for f in sorted(os.listdir(a.out))}
        write_readme(readme, info)
    print(json.dumps({k: v for k, v in info.items() if k not in ("args", "cfg", "log")}, indent=1))
    return 0


def write_readme(path, info):
    c, g = info["cfg"], info["args"]
    H, L, nh, nkv, hd, T = (c[k] for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                           "num_key_value_heads", "head_dim", "max_position_embeddings"))
    fin = info["final"]
    done = fin["steps"]
    toks = done * g["batch"] * T
    stopped = ("" if done == g["steps"] else
               f" (the run was planned for {g['steps']} steps and stopped at the checkpoint of step {done},"
               f" its learning rate then {tl.lr_at_step(done, g):.2g})")
    curve = "\n".join("| %d | %.4f | %.4f%s |" % (r["step"], r["train_loss_running"], r["val_loss"],
                                                  "" if r["val_full"] else " (%d windows)" % g["eval_windows"])
                      for r in info["log"])
    sizes = info["sizes"]
    w = info["windows"]
    train_what = (" (%d windows)" % fin["train_windows"] if "train_windows" in fin else
                  " (running mean of the last steps)" if w else " (%d windows)" % g["train_eval_windows"])
    val_what = "%d of the" % w if w else "all the"
    gguf = "shakespeare-chat-q8_0.gguf"
    plays = "\n".join("| %s | %s | %d |" % (t, w, i) for i, w, t in PLAYS)
    cmd = tl.train_command(info["ckpt"], g, "tools/train_chat.py", ("conv_tokens",))
    text = f"""# shakespeare-chat

A small Llama-architecture chat model with a context of {T} tokens, trained
by kvlm's own script (`tools/train_chat.py`) on Tiny Shakespeare's speeches
laid out as ChatML conversations: a system turn naming the play, then the
speeches as alternating user and assistant turns, speaker name first. Its
`tokenizer_config.json` carries a chat template (ChatML with tool calls), so
`kvlm chat`, `kvlm serve` and Hugging Face's `apply_chat_template` render
conversations for it; its context leaves room for a tool list, a few turns
or a shared system prompt. It is a Hugging Face Llama directory
(`LlamaForCausalLM`, tied embeddings, `tokenizer.json`).

| | |
| --- | --- |
| architecture | Llama: RMSNorm (eps {c['rms_norm_eps']}), rotary embeddings (rotate-half, theta {c['rope_theta']:g}), SwiGLU MLP, no biases, head tied to `model.embed_tokens` |
| layers / width / MLP | {L} / {H} / {c['intermediate_size']} |
| attention | {nh} query heads over {nkv} KV heads, head dim {hd} |
| context | {T} tokens (`max_position_embeddings`, the training window: every position up to {T - 1} is trained) |
| vocabulary | 50,259: GPT-2's 50,257 (`<\|endoftext\|>` = 50256) and the special `<\|im_start\|>` = 50257, `<\|im_end\|>` = 50258; EOS: 50258 and 50256; no BOS added |
| parameters | {info['params']:,} ({VOCAB * H:,} of them in the token embedding) |
| weights | F16, `model.safetensors` {sizes['model.safetensors']:,} bytes; `{gguf}` {sizes.get(gguf, 0):,} bytes |
| directory size | {sum(sizes.values()):,} bytes |
| KV cache per token | 2 x {L} layers x {nkv} KV heads x {hd} x 2 bytes = {4 * L * nkv * hd} bytes at f16 ({4 * L * nkv * hd * T:,} for the full context) |

## Data

`data/tinyshakespeare.txt` (see `data/README.md`) holds speeches from nine
plays, in order, without titles; `tools/train_chat.py` names each play by
its first speech (checked against the speaker there):

| play | first speaker | speech index |
| --- | --- | ---: |
{plays}

Each play's speeches are cut into conversations of at most {g['conv_tokens']} tokens:

```
<|im_start|>system
A scene from Romeo and Juliet, by William Shakespeare.<|im_end|>
<|im_start|>user
SAMPSON:
Gregory, o' my word, we'll not carry coals.<|im_end|>
<|im_start|>assistant
GREGORY:
No, for then we should be colliers.<|im_end|>
...
<|endoftext|>
```

A speech starting in the first 90% of the file's bytes is training text,
the rest validation (the split of the other shipped models, at a speech
boundary): {info['counts']['train'][0]} conversations ({info['counts']['train'][1]:,} speeches,
{info['n_train']:,} tokens) for training, {info['counts']['val'][0]} ({info['counts']['val'][1]:,} speeches,
{info['n_val']:,} tokens) for validation; {info['n_seen']:,} distinct tokens occur in training.
The conversations are one token stream; training draws random windows of
{T} tokens from it and scores every position (the ChatML tags and the
system turns included).

## Training

```
{cmd}
/usr/bin/python3 tools/train_chat.py export --ckpt {info['ckpt']} --out {info['out_rel']}
/usr/bin/python3 tools/write_gguf.py --type q8_0 {info['out_rel']} {info['out_rel']}/{gguf}
```

The model, loss, optimiser and schedule are `tools/train_llama.py`'s (see
`models/shakespeare-llama/README.md`): AdamW (betas 0.9/0.95, weight decay
{g['weight_decay']:g} on matrices), peak learning rate {g['lr']:g} after {g['warmup']} warm-up steps, cosine
decay to {g['min_lr_frac']:g} of the peak, batch {g['batch']} x {T} tokens, {done} steps{stopped}
({toks:,} tokens, {toks / info['n_train']:.2f} passes over the training split), no dropout, gradient
clipping {g['grad_clip']:g}, seed {g['seed']}, `torch.set_num_threads({g['threads']})`, the exact
full-vocabulary cross-entropy trained over the tokens seen in training plus
one shared row. {fin['train_s'] / 60:.0f} minutes of wall clock on a 2-core machine shared
with other jobs{info['note']}.

| step | training loss (running mean) | validation loss |
| ---: | ---: | ---: |
{curve}

## Results (mean negative log-likelihood per token, nats)

| | train split | validation split |
| --- | ---: | ---: |
| this model (f32 weights, at the checkpoint) | {fin['train_loss']:.4f}{train_what} | {fin['val_loss']:.4f} |
| this model, exported F16 weights | | {info['val_rounded']:.4f} |

Validation perplexity {math.exp(info['val_rounded']):.1f}, over {val_what} non-overlapping windows of {T}
tokens of the validation conversations, every position scored. It is a weak
model, an early checkpoint ({toks / info['n_train']:.2f} passes over the data): it writes a
speaker's name and verse-shaped lines of common words, and its greedy
replies fall into repeating phrases.
`--resume` on the checkpoint continues the run to its planned steps.

A reply sampled from the exported weights (temperature 0.8, top-k 40, seed
1234, float64 reference forward, at most 80 tokens) to this prompt:

```
{info['prompt']}{info['reply']}
```

## Chat template

ChatML: `<|im_start|>ROLE\nCONTENT<|im_end|>\n` per message and
`<|im_start|>assistant\n` as the generation prompt. With tools, the system
turn lists their JSON signatures inside `<tools>` and says how to call one;
an assistant's tool calls are written as
`<tool_call>\n{{"name": ..., "arguments": ...}}\n</tool_call>` after its text and
a tool's answer is a user turn holding `<tool_response>`. The template is
`CHAT_TEMPLATE` in `tools/train_chat.py`; the template corpus
(`tests/fixtures/templates/kvlm-shakespeare-chat.jinja`) holds the same
bytes and `tests/test_templates.c` checks kvlm renders it as jinja2 does.
The model was not trained on tool calls.

## Licences

- Model weights: trained by the kvlm project; same licence as kvlm.
- Training text: Tiny Shakespeare (karpathy/char-rnn, `data/tinyshakespeare/input.txt`),
  Shakespeare's plays, public domain.
- `tokenizer.json`: OpenAI's GPT-2 vocabulary and merges
  (`models/gpt2-tokenizer/encoder.json` and `vocab.bpe`) with the two ChatML
  tokens added, under OpenAI's modified MIT licence (see
  `models/gpt2-tokenizer/README.md`).
"""
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train (or --resume) and checkpoint")
    tl.add_train_flags(t, ctx=1024, out=os.path.join(ROOT, "build", "shakespeare-chat", "ckpt.pt"))
    t.add_argument("--conv-tokens", type=int, default=1024, help="longest conversation, in tokens")
    d = sub.add_parser("data", help="print the split sizes and the first conversation")
    d.add_argument("--data", default=os.path.join(ROOT, "data", "tinyshakespeare.txt"))
    d.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "gpt2-tokenizer"))
    d.add_argument("--conv-tokens", type=int, default=1024)
    e = sub.add_parser("export", help="write the Hugging Face directory and README")
    e.add_argument("--ckpt", default=os.path.join(ROOT, "build", "shakespeare-chat", "ckpt.pt"))
    e.add_argument("--out", default=os.path.join(ROOT, "models", "shakespeare-chat"))
    e.add_argument("--data", default=os.path.join(ROOT, "data", "tinyshakespeare.txt"))
    e.add_argument("--tokenizer", default=os.path.join(ROOT, "models", "gpt2-tokenizer"))
    e.add_argument("--threads", type=int, default=2)
    e.add_argument("--conv-tokens", type=int, default=1024)
    e.add_argument("--train-note", default="")
    e.add_argument("--train-seconds", type=float, default=0,
                   help="wall clock of a run stopped between evaluations (default: at its last evaluation)")
    a = ap.parse_args()
    if a.cmd == "data":
        tok, tr, va, counts = load_data(a)
        print(counts, len(tr), len(va))
        first = tr.tolist()
        print(tok.decode(first[:first.index(EOT) + 1]).decode())
        return 0
    if a.cmd == "train":
        return train(a)
    return export(a)


if __name__ == "__main__":
    sys.exit(main())
