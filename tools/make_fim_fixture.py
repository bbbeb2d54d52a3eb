#!/usr/bin/python3
"""A GGUF fixture whose tokenizer names fill-in-the-middle tokens, for the
/infill and `suffix` tests (tests/test_fim.c, tests/test_api_server.c).

Usage:
    make_fim_fixture.py OUT.gguf

Takes the weights and hyperparameters of tests/fixtures/llama_gguf/
gqa_q4_0.gguf (Llama, 256-token vocabulary, 64-token context) and gives
them a byte-level BPE tokenizer (tokenizer.ggml.model gpt2, pre qwen2):
    ids 0..95     the bytes "\\n", " " and "!".."~" (GPT-2's byte alphabet)
    ids 96..99    merges "Ġ" "t" -> "Ġt", "e" "r" -> "er", "i" "n" -> "in",
                  "Ġt" "h" -> "Ġth"
    id 100        <|endoftext|> (eos)
    ids 101..106  <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>,
                  <|fim_pad|>, <|repo_name|>, <|file_sep|> (control tokens)
    ids 107..255  <|unused_N|> (control)
The prefix, suffix and middle ids are written as
tokenizer.ggml.fim_{pre,suf,mid}_token_id; the pad, repository and file
separator tokens are left to be found by name, as llama.cpp and kvlm both
do. Text of other bytes has no tokens: tests use only these characters.
Deterministic: the same bytes on every run.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import write_gguf as wg  # noqa: E402

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "llama_gguf",
                   "gqa_q4_0.gguf")


def byte_char(b):
    """GPT-2's printable stand-in for a byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    if b in keep:
        return chr(b)
    n = 0
    for x in range(256):
        if x not in keep:
            if x == b:
                return chr(256 + n)
            n += 1
    raise ValueError(b)


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    meta, tensors = wg.read_gguf(SRC, dequant=False)
    tokens = [byte_char(10), byte_char(32)] + [chr(c) for c in range(ord("!"), ord("~") + 1)]
    merges = [(byte_char(32), "t"), ("e", "r"), ("i", "n"), (byte_char(32) + "t", "h")]
    tokens += [a + b for a, b in merges]
    specials = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>",
                "<|repo_name|>", "<|file_sep|>"]
    n_normal = len(tokens)
    tokens += specials
    tokens += ["<|unused_%d|>" % k for k in range(256 - len(tokens))]
    assert len(tokens) == 256 and len(set(tokens)) == 256
    types = [1] * n_normal + [3] * (256 - n_normal)
    w = wg.GGUFWriter()
    for k, v in meta.items():
        if k == "general.name":
            v = "fim-mini"
        if k == "llama.context_length":
            v = 4096  # room for input_extra in llama-server's layout (its slot context is capped by this)
        if isinstance(v, str):
            w.add(k, wg.STRING, v)
        elif isinstance(v, float):
            w.add(k, wg.F32V, v)
        else:
            w.add(k, wg.U32, v)
    w.add("tokenizer.ggml.model", wg.STRING, "gpt2")
    w.add("tokenizer.ggml.pre", wg.STRING, "qwen2")
    w.add_array("tokenizer.ggml.tokens", wg.STRING, tokens)
    w.add_array("tokenizer.ggml.token_type", wg.I32, types)
    w.add_array("tokenizer.ggml.merges", wg.STRING, ["%s %s" % m for m in merges])
    w.add("tokenizer.ggml.eos_token_id", wg.U32, tokens.index("<|endoftext|>"))
    w.add("tokenizer.ggml.add_bos_token", wg.BOOL, False)
    for key, name in (("fim_pre", "<|fim_prefix|>"), ("fim_suf", "<|fim_suffix|>"), ("fim_mid", "<|fim_middle|>")):
        w.add("tokenizer.ggml.%s_token_id" % key, wg.U32, tokens.index(name))
    for name, (t, ne, raw) in tensors.items():
        w.add_tensor(name, t, ne, lambda raw=raw: bytes(raw))
    w.write(argv[1])


if __name__ == "__main__":
    main(sys.argv)
