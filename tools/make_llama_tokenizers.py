#!/usr/bin/python3
"""Builds kvlm's Llama-family tokenizer fixtures (standard library only).

  make_llama_tokenizers.py build DIR CASES.json
      Trains small BPE vocabularies on a slice of data/tinyshakespeare.txt
      (plus a few lines in other scripts) and writes, in DIR:
        llama3/tokenizer.json   byte-level BPE, Llama 3's Split pattern,
                                ignore_merges, <|begin_of_text|> template
        qwen2/tokenizer.json    byte-level BPE, Qwen2's pattern, NFC,
                                <|im_start|>..., a non-special added token
        llama2/tokenizer.json   SentencePiece-style BPE with byte fallback,
                                Prepend/Replace normalizer, <s> template
        gguf_llama.json         GGUF-style arrays (tokens, scores,
                                token_type, bos, eos, add_bos) of model
                                "llama" with tied scores
        gguf_gpt2.json          GGUF-style arrays of model "gpt2" made from
                                llama3/tokenizer.json (pre "llama-bpe")
      and CASES.json (not committed), the test strings (hex) for every format.
  make_llama_tokenizers.py fixture DIR CASES.json HF_IDS_DIR
      Combines the ids that Hugging Face's tokenizers library gave for the
      valid-UTF-8 cases (tools/tokenizer_hf_ids.js, one file per format in
      HF_IDS_DIR) with tools/tokenizer_llama_reference.py's ids for every
      case; fails if the two disagree anywhere. Writes DIR/<format>_cases.json.

Deterministic: the same inputs give byte-identical files.
"""

import collections
import json
import os
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import tokenizer_reference as gref  # noqa: E402
import tokenizer_llama_reference as ref  # noqa: E402

META = ref.META
CORPUS_BYTES = 120000
MULTILINGUAL = [
    "\u0412 \u043d\u0430\u0447\u0430\u043b\u0435 \u0431\u044b\u043b\u043e \u0441\u043b\u043e\u0432\u043e, \u0438 \u0441\u043b\u043e\u0432\u043e \u0431\u044b\u043b\u043e \u0443 \u0411\u043e\u0433\u0430.",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5, \u03c4\u03b9 \u03ba\u03ac\u03bd\u03b5\u03b9\u03c2;",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002\u6211\u7231\u5317\u4eac\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c\u3002\u4eca\u65e5\u306f\u3044\u3044\u5929\u6c17\u3067\u3059\u306d\u3002",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645\u060c \u0643\u064a\u0641 \u062d\u0627\u0644\u0643\u061f",
    "Na\u00efve caf\u00e9 r\u00e9sum\u00e9 fa\u00e7ade \u00fcber Stra\u00dfe \u00e0 la cr\u00e8me br\u00fbl\u00e9e.",
    "Emoji: \U0001F600 \U0001F44D \u2764\ufe0f \U0001F680 done \u2705",
    "def main():\n    x = [1, 2, 3]\n    return {\"a\": x}\n\nif __name__ == \"__main__\":\n    main()\n",
    "int main(void) {\n\tfor (int i = 0; i < 10; ++i) printf(\"%d\\n\", i);\n\treturn 0;\n}\n",
    "Numbers 1234567890 3.14159 2024-01-31 100% $5.99 +1 (555) 123-4567",
]
N_MERGES = 480


def corpus():
    with open(os.path.join(ROOT, "data", "tinyshakespeare.txt"), encoding="utf-8") as f:
        text = f.read()[:CORPUS_BYTES]
    return text + "\n\n" + "\n".join(MULTILINGUAL * 6)


def _merge_seq(seq, a, b, m):
    out, i = [], 0
    while i < len(seq):
        if i + 1 < len(seq) and seq[i] == a and seq[i + 1] == b:
            out.append(m)
            i += 2
        else:
            out.append(seq[i])
            i += 1
    return out


def train(words, n_merges, allowed=None):
    """words: Counter of tuples of symbols. Most frequent pair first, the
    smallest pair on a tie; pairs with a symbol outside `allowed` never merge."""
    seqs = {w: list(w) for w in words}
    merges = []
    for _ in range(n_merges):
        counts = collections.Counter()
        for w, c in words.items():
            s = seqs[w]
            for k in range(len(s) - 1):
                if allowed is None or (s[k] in allowed and s[k + 1] in allowed):
                    counts[(s[k], s[k + 1])] += c
        if not counts:
            break
        best = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        m = best[0] + best[1]
        merges.append(best)
        if allowed is not None:
            allowed.add(m)
        for w in words:
            if len(seqs[w]) > 1:
                seqs[w] = _merge_seq(seqs[w], best[0], best[1], m)
    return merges


def added(i, content, special=True):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def bytelevel_json(merges, digits, specials, nfc, bos, ignore_merges):
    b2u = gref.bytes_to_unicode()
    vocab = {}
    for b in sorted(b2u, key=lambda b: b2u[b]):
        vocab[b2u[b]] = len(vocab)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    n = len(vocab)
    added_tokens = [added(n + k, c, sp) for k, (c, sp) in enumerate(specials)]
    pattern = ref_pattern(digits)
    j = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added_tokens,
        "normalizer": {"type": "NFC"} if nfc else None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": not nfc, "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab,
                  "merges": [[a, b] for a, b in merges]},
    }
    if bos:
        bid = next(a["id"] for a in added_tokens if a["content"] == bos)
        j["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {bos: {"id": bos, "ids": [bid], "tokens": [bos]}}}]}
    return j


def ref_pattern(digits):
    return ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" +
            ("\\p{N}{1,3}" if digits == 3 else "\\p{N}") +
            "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def build_bytelevel(text, digits, nfc):
    if nfc:
        text = unicodedata.normalize("NFC", text)
    b2u = gref.bytes_to_unicode()
    words = collections.Counter()
    for w in ref.pretokenize_llama(text, digits):
        words[tuple(b2u[b] for b in w.encode("utf-8"))] += 1
    return train(words, N_MERGES)


def build_spm(text):
    words = collections.Counter()
    chars = collections.Counter()
    for line in text.split("\n"):
        if not line:
            continue
        s = META + line.replace(" ", META)
        start = 0
        for i in range(1, len(s)):
            if s[i] == META:
                words[tuple(s[start:i])] += 1
                start = i
        words[tuple(s[start:])] += 1
        chars.update(s)
    # Characters seen fewer than 3 times are left to byte fallback.
    keep = sorted((c for c in chars if chars[c] >= 3), key=lambda c: (-chars[c], c))
    merges = train(words, N_MERGES, allowed=set(keep))
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for a, b in merges:
        vocab[a + b] = len(vocab)
    for c in keep:
        if c not in vocab:
            vocab[c] = len(vocab)
    return vocab, merges


def llama2_json(vocab, merges):
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": META},
            {"type": "Replace", "pattern": {"String": " "}, "content": META}]},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "ignore_merges": False, "vocab": vocab,
                  "merges": [a + " " + b for a, b in merges]},
    }


def gguf_llama(vocab, merges):
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    tokens.append("<|tool|>")   # a user-defined token (type 4)
    merged = {a + b: k for k, (a, b) in enumerate(merges)}
    scores, types = [], []
    for i, t in enumerate(tokens):
        if t == "<unk>":
            types.append(2)
        elif t in ("<s>", "</s>"):
            types.append(3)
        elif t.startswith("<0x") and len(t) == 6:
            types.append(6)
        elif t == "<|tool|>":
            types.append(4)
        else:
            types.append(1)
        if t in merged:
            scores.append(-float(merged[t] // 2))   # pairs of equal scores: ties happen
        elif types[-1] == 1:
            scores.append(-float(len(merges) + i))
        else:
            scores.append(0.0)
    return {"model": "llama", "tokens": tokens, "scores": scores, "token_type": types,
            "merges": [], "bos": 1, "eos": 2, "add_bos": 1, "pre": None}


def gguf_gpt2(tj, bos, eos, pre):
    inv = {i: t for t, i in tj["model"]["vocab"].items()}
    types = {}
    for a in tj["added_tokens"]:
        inv[a["id"]] = a["content"]
        types[a["id"]] = 3 if a["special"] else 4
    n = max(inv) + 1
    tokens = [inv[i] for i in range(n)]
    ids = {t: i for i, t in enumerate(tokens)}
    return {"model": "gpt2", "tokens": tokens, "scores": None,
            "token_type": [types.get(i, 1) for i in range(n)],
            "merges": [a + " " + b for a, b in tj["model"]["merges"]],
            "bos": ids[bos] if bos else -1, "eos": ids[eos], "add_bos": 1 if bos else 0, "pre": pre}


# ------------------------------------------------------------------- cases

def cases():
    """(name, bytes, allow_special, add_special, formats or None for all)."""
    out = [(name, data, sp, False, None) for name, data, sp in gref.fixture_cases()]

    def add(group, items, special=False, add_special=False, formats=None):
        for k, v in enumerate(items):
            out.append(("%s/%d" % (group, k), v if isinstance(v, bytes) else v.encode("utf-8"),
                        special, add_special, formats))

    add("llama_digits", ["1234567", "12345678901234567890", "3.14159265358979", "x=1000000;",
                         "\u0663\u0664\u0665\u0666\u0667", "\uff11\uff12\uff13\uff14\uff15",
                         "a1234b56789c", "0.000001", "9" * 40])
    add("llama_newlines", ["a\r\n\r\nb", "  \r\n  x", "foo!!\n\nbar", "}\n\n\n", "a \n\n b",
                           "\t\r\n\tx", ".\r\n", "x\n\r\ny", "\r\r\r", "a\u2028\nb", " \n\u0085\n",
                           "end.\n", "!?\r\n\r\n", "x \r \n y"])
    add("llama_contraction", ["'\u017f", "IT'\u017f", "'Ll", "'lL", "WE'VE", "it'S", "'K", "I'M",
                              "'RE'VE'D", "'\u0130"])
    add("llama_prefix", [" hello", "\thello", "\nhello", "(hello", "...hello", "1hello",
                         "_hello", "\u00a0hello", "\u0085hello", "\x00hello", "\U0001F600hello"])
    add("meta", ["\u2581", "a\u2581b", "\u2581\u2581 x", "\u2581hello world", " \u2581"])
    add("nfc", ["e\u0301", "A\u030a", "\u212b", "\u1100\u1161\u11a8", "\u0958", "\ufb01",
                "\u00e9\u0301", "o\u0308\u0304", "\u0b47\u0b3e", "q\u0307\u0323", "\u0344",
                "\u2126 \u212a", "\uac00\u11a8", "\u0301e", "a\u0328\u0301", "\u0391\u0301\u0345"])
    add("rare", ["\U0001D518\U0001D52B\U0001D526\U0001D520\U0001D52C\U0001D521\U0001D522",
                 "\u16a0\u16c7\u16bb", "\ua66e", "\U0001F701\U0001F702", "\u2177"])
    add("llama3_special", ["<|begin_of_text|>Hello", "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
                           "a<|eot_id|>b", "<|reserved_special_token_0|>", "<|eot_id|",
                           "<|begin_of_text|><|begin_of_text|>", " <|eot_id|> "],
        special=True, formats=["llama3"])
    add("llama3_special_plain", ["<|begin_of_text|>Hello", "a<|eot_id|>b"], formats=["llama3"])
    add("qwen2_special", ["<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
                          "<|endoftext|>", "x<|im_end|>", "<|im_start|"], special=True, formats=["qwen2"])
    add("qwen2_added", ["<tool_call>{\"a\": 1}</tool_call>", "x<tool_call>y", "<tool_call"],
        formats=["qwen2"])
    add("qwen2_special_plain", ["<|im_start|>user\nHi<|im_end|>"], formats=["qwen2"])
    add("llama2_special", ["<s>Hello", "Hello</s>", "<s> x </s>", "a<s>b", "<unk>", "[INST] hi [/INST]",
                           "<s><s>", "</s> next", "<s>"], special=True, formats=["llama2", "gguf_llama"])
    add("llama2_special_plain", ["<s>Hello", "a</s>b", "<unk>"], formats=["llama2", "gguf_llama"])
    add("gguf_user_defined", ["<|tool|>", "a<|tool|>b", "<|tool|> x"], formats=["gguf_llama"])
    add("bos", ["Hello world", "", " leading", "\u4f60\u597d"], add_special=True)
    add("bos_special", ["<s>Hi", "<|begin_of_text|>Hi"], special=True, add_special=True)
    return out


def write_cases(path):
    doc = [{"name": n, "hex": d.hex(), "special": sp, "add_special": a, "formats": f}
           for n, d, sp, a, f in cases()]
    with open(path, "w", encoding="utf-8") as fp:
        json.dump(doc, fp, separators=(",", ":"))
    return len(doc)


def dump(path, obj, one_per_line=None):
    text = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
    if one_per_line:
        text = text.replace(one_per_line[0], one_per_line[1])
    with open(path, "w", encoding="ascii") as f:
        f.write(text + "\n")


def build(out, cases_path):
    text = corpus()
    os.makedirs(out, exist_ok=True)
    llama3_specials = [("<|begin_of_text|>", True), ("<|end_of_text|>", True),
                       ("<|reserved_special_token_0|>", True), ("<|reserved_special_token_1|>", True),
                       ("<|start_header_id|>", True), ("<|end_header_id|>", True),
                       ("<|reserved_special_token_2|>", True), ("<|eot_id|>", True)]
    qwen2_specials = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                      ("<tool_call>", False), ("</tool_call>", False)]
    tj = {}
    for name, digits, nfc, specials, bos, ignore in (
            ("llama3", 3, False, llama3_specials, "<|begin_of_text|>", True),
            ("qwen2", 1, True, qwen2_specials, None, False)):
        merges = build_bytelevel(text, digits, nfc)
        tj[name] = bytelevel_json(merges, digits, specials, nfc, bos, ignore)
        os.makedirs(os.path.join(out, name), exist_ok=True)
        dump(os.path.join(out, name, "tokenizer.json"), tj[name])
    vocab, merges = build_spm(text)
    os.makedirs(os.path.join(out, "llama2"), exist_ok=True)
    dump(os.path.join(out, "llama2", "tokenizer.json"), llama2_json(vocab, merges))
    dump(os.path.join(out, "gguf_llama.json"), gguf_llama(vocab, merges))
    dump(os.path.join(out, "gguf_gpt2.json"),
         gguf_gpt2(tj["llama3"], "<|begin_of_text|>", "<|end_of_text|>", "llama-bpe"))
    n = write_cases(cases_path)
    print("wrote tokenizers and %d cases to %s" % (n, out))


# ----------------------------------------------------------------- fixture

FORMATS = {
    "llama3": "llama3/tokenizer.json",
    "qwen2": "qwen2/tokenizer.json",
    "llama2": "llama2/tokenizer.json",
    "gguf_llama": "gguf_llama.json",
}


def fixture(out, cases_path, hf_dir):
    with open(cases_path, encoding="utf-8") as f:
        all_cases = json.load(f)
    for fmt, src in FORMATS.items():
        if fmt == "gguf_llama":
            with open(os.path.join(out, src), encoding="utf-8") as f:
                g = json.load(f)
            tok = ref.ScoreTokenizer(g["tokens"], g["scores"], g["token_type"], g["bos"], g["add_bos"])
            hf = None
        else:
            tok = ref.HFTokenizer(os.path.join(out, src))
            with open(os.path.join(hf_dir, fmt + ".json"), encoding="utf-8") as f:
                hf = {(c["name"]): c for c in json.load(f)}
        rows, agree = [], 0
        for c in all_cases:
            if c["formats"] and fmt not in c["formats"]:
                continue
            data = bytes.fromhex(c["hex"])
            ids = tok.encode(data, c["special"], c["add_special"])
            row = {"name": c["name"], "hex": c["hex"], "special": c["special"], "ids": ids}
            if c["add_special"]:
                row["add_special"] = True
            try:
                s = data.decode("utf-8")
                valid = True
            except UnicodeDecodeError:
                valid = False
            if hf is not None and valid:
                h = hf[c["name"]]
                if h["ids"] != ids:
                    sys.exit("%s: case %s: reference %s, Hugging Face %s" % (fmt, c["name"], ids, h["ids"]))
                agree += 1
                row["ref"] = "hf"
                if h["decoded_hex"] != c["hex"]:
                    row["decoded_hex"] = h["decoded_hex"]
            else:
                row["ref"] = "py"
            if fmt == "qwen2":
                row["nfc_stable"] = not valid or unicodedata.normalize("NFC", s) == s
            rows.append(row)
        doc = {"about": "%s token ids: 'ref' hf = Hugging Face tokenizers (npm 'tokenizers' 0.23.2, "
                        "the Rust library) and tools/tokenizer_llama_reference.py agreed; py = the "
                        "Python reference alone (input not valid UTF-8, or a GGUF-only algorithm). "
                        "decoded_hex: Hugging Face's decode of the ids (skip_special_tokens false), "
                        "present when it is not the input itself." % fmt,
               "tokenizer": src, "cases": rows}
        dump(os.path.join(out, fmt + "_cases.json"), doc, (',{"name"', ',\n{"name"'))
        print("%s: %d cases, %d checked against Hugging Face" % (fmt, len(rows), agree))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 5 and sys.argv[1] == "fixture":
        fixture(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
