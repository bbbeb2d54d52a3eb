#!/usr/bin/python3
"""Greedy continuations of the shipped trained models, computed in float64
by tools/llama_reference.py (tools/moe_reference.py for the experts) from
the exported weights, for tests/test_shipped_models.c:

  tests/fixtures/shipped/shakespeare_moe.json    models/shakespeare-moe,
      the prompt "ROMEO:" (GPT-2 ids), 24 greedy ids.
  tests/fixtures/shipped/shakespeare_chat.json   models/shakespeare-chat:
      "chat": a system and a user turn rendered by the model's template
      (ChatML), the greedy reply up to <|im_end|> or 24 tokens, and its text;
      "long": the first 1000 tokens of the validation conversations
      (tools/train_chat.py's stream), 8 greedy ids.

Each greedy step records the gap between the best and second-best logit;
a continuation is cut before the first step whose gap is under MIN_GAP, so
an engine computing in float32 from the same F16 weights must pick the same
ids. The smallest gap kept is written beside the ids.

    /usr/bin/python3 tools/make_shipped_fixtures.py
"""
import json, os, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import llama_reference as ref  # noqa: E402
import tokenizer_reference  # noqa: E402
import train_chat as tc  # noqa: E402
import train_llama as tl  # noqa: E402

MIN_GAP = 1e-3
OUT = os.path.join(ROOT, "tests", "fixtures", "shipped")
CHAT_SYSTEM = "A scene from Romeo and Juliet, by William Shakespeare."
CHAT_USER = "ROMEO: But soft, what light through yonder window breaks?"


@torch.no_grad()
def greedy(w, cfg, prompt, n, stop=None):
    """(ids, smallest gap) of up to n greedy tokens after prompt; stops after
    `stop` (not included) or before a step whose gap is below MIN_GAP."""
    ids, gaps = [], []
    for _ in range(n):
        top = torch.topk(tl.last_logits(w, cfg, list(prompt) + ids), 2)
        gap = (top.values[0] - top.values[1]).item()
        if gap < MIN_GAP:
            break
        t = int(top.indices[0])
        if t == stop:
            gaps.append(gap)
            break
        ids.append(t)
        gaps.append(gap)
    return ids, (min(gaps) if gaps else None)


def write(name, obj):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name), "w") as f:
        f.write(json.dumps(obj, indent=1) + "\n")


def moe():
    d = os.path.join(ROOT, "models", "shakespeare-moe")
    w, cfg = ref.load_hf(d)
    tok = tokenizer_reference.Reference(d)
    prompt = tok.encode(b"ROMEO:")
    ids, gap = greedy(w, cfg, prompt, 24)
    write("shakespeare_moe.json", {"model": "models/shakespeare-moe", "prompt": "ROMEO:", "prompt_ids": prompt,
                                   "ids": ids, "text": tok.decode(ids).decode("utf-8", "replace"),
                                   "min_gap": gap})
    print("moe:", len(ids), "ids, gap", gap)


def chat():
    d = os.path.join(ROOT, "models", "shakespeare-chat")
    w, cfg = ref.load_hf(d)
    tok = tc.ChatTokenizer(os.path.join(ROOT, "models", "gpt2-tokenizer"))
    text = tc.turn("system", CHAT_SYSTEM) + tc.turn("user", CHAT_USER) + "<|im_start|>assistant\n"
    prompt = tok.encode(text)
    ids, gap = greedy(w, cfg, prompt, 24, stop=tc.IM_END)
    a = type("A", (), {"data": os.path.join(ROOT, "data", "tinyshakespeare.txt"),
                       "tokenizer": os.path.join(ROOT, "models", "gpt2-tokenizer"), "conv_tokens": 1024})
    _, _, va, _ = tc.load_data(a)
    long_prompt = va[:1000].tolist()
    long_ids, long_gap = greedy(w, cfg, long_prompt, 8)
    write("shakespeare_chat.json", {
        "model": "models/shakespeare-chat",
        "chat": {"system": CHAT_SYSTEM, "user": CHAT_USER, "rendered": text, "prompt_ids": prompt, "ids": ids,
                 "finished": len(ids) < 24, "reply": tok.decode(ids).decode("utf-8", "replace"), "min_gap": gap},
        "long": {"what": "the first 1000 tokens of the validation conversations", "prompt_ids": long_prompt,
                 "ids": long_ids, "min_gap": long_gap}})
    print("chat:", len(ids), "ids, gap", gap, "; long:", len(long_ids), "ids, gap", long_gap)


if __name__ == "__main__":
    torch.set_num_threads(2)
    which = sys.argv[1:] or ["moe", "chat"]
    for n in which:
        {"moe": moe, "chat": chat}[n]()
