#!/usr/bin/python3
"""Tokenizer files of a Hugging Face directory as GGUF tokenizer.ggml.*
metadata, for tools/write_gguf.py (standard library only).

    tokenizer_metadata(dir, config) -> [(key, value type, value[, element type])]

Sources, in this order of preference: tokenizer.json (byte-level BPE ->
model "gpt2" with merges and a pre-tokeniser name; BPE with byte fallback ->
model "llama" with scores ranking pieces by the merge that makes them),
vocab.json + merges.txt or encoder.json + vocab.bpe (GPT-2), a SentencePiece
tokenizer.model (pieces, scores and types as stored). BOS / EOS / unknown /
padding ids come from tokenizer_config.json, the tokenizer's post-processor
template, then config.json; add_bos_token from tokenizer_config.json, else
from the template (byte-level) or true (SentencePiece). A chat_template string in
tokenizer_config.json becomes tokenizer.chat_template.
"""
import json, os, struct, sys

# GGUF metadata value types used here (the numbering of write_gguf.py)
U32, I32, F32V, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
                  r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
                 r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def warn(msg):
    print("write_gguf: " + msg, file=sys.stderr)


def _bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _token_content(t):
    return t["content"] if isinstance(t, dict) else t


def _special_ids(d, vocab_ids, config):
    """bos, eos ids and the add-BOS flag from tokenizer_config.json / config.json."""
    tc = {}
    p = os.path.join(d, "tokenizer_config.json")
    if os.path.exists(p):
        with open(p) as f:
            tc = json.load(f)
    ids = {}
    for which in ("bos", "eos", "unk", "pad"):
        tok = tc.get(which + "_token")
        tid = vocab_ids.get(_token_content(tok)) if tok else None
        if tid is None:
            v = config.get(which + "_token_id")
            tid = v[0] if isinstance(v, list) and v else v
        ids[which] = tid
    return ids, tc.get("add_bos_token"), tc.get("add_eos_token")


def _merge_str(m):
    return m if isinstance(m, str) else " ".join(m)


def _pre_name(tj, model_type):
    pats = []

    def walk(p):
        if not p:
            return
        if p.get("type") == "Sequence":
            for q in p.get("pretokenizers", []):
                walk(q)
        elif p.get("type") == "Split":
            pats.append(p.get("pattern", {}).get("Regex", ""))
    walk(tj.get("pre_tokenizer"))
    if LLAMA3_PATTERN in pats:
        return "llama-bpe"
    if QWEN2_PATTERN in pats:
        return "qwen2"
    if not pats:
        return "gpt-2"
    if model_type == "qwen2":
        return "qwen2"
    warn("unrecognised pre-tokenizer pattern; writing tokenizer.ggml.pre 'llama-bpe' (%r)" % pats[0][:80])
    return "llama-bpe"


def _names_token(d, which):
    p = os.path.join(d, "tokenizer_config.json")
    if not os.path.exists(p):
        return False
    with open(p) as f:
        return bool(json.load(f).get(which + "_token"))


def _template_bos(tj):
    """The special token a TemplateProcessing post-processor puts first, or None."""
    pp = tj.get("post_processor") or {}
    for p in (pp.get("processors", []) if pp.get("type") == "Sequence" else [pp]):
        if p.get("type") == "TemplateProcessing":
            first = (p.get("single") or [{}])[0]
            if "SpecialToken" in first:
                return first["SpecialToken"]["id"]
    return None


def _template_adds_bos(tj, bos_tok):
    pp = tj.get("post_processor") or {}
    procs = pp.get("processors", [pp]) if pp.get("type") == "Sequence" else [pp]
    for p in procs:
        if p.get("type") == "TemplateProcessing":
            first = (p.get("single") or [{}])[0]
            if "SpecialToken" in first and first["SpecialToken"]["id"] == bos_tok:
                return True
    return False


def _from_tokenizer_json(d, config):
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        raise ValueError("%s/tokenizer.json: model type %s (BPE is converted)" % (d, model.get("type")))
    inv = {i: t for t, i in model["vocab"].items()}
    added = {}
    for a in tj.get("added_tokens", []):
        inv[a["id"]] = a["content"]
        added[a["id"]] = a
    n = max(inv) + 1
    tokens = [inv.get(i, "[PAD%d]" % i) for i in range(n)]
    ids = {t: i for i, t in enumerate(tokens)}
    merges = [_merge_str(m) for m in model.get("merges", [])]
    sp, add_bos, add_eos = _special_ids(d, ids, config)
    tmpl_bos = _template_bos(tj)
    if tmpl_bos is not None and tmpl_bos in ids and not _names_token(d, "bos"):
        sp["bos"] = ids[tmpl_bos]  # the tokenizer's own template beats config.json's id
    types = []
    spm = bool(model.get("byte_fallback"))
    for i, t in enumerate(tokens):
        if i not in inv:
            types.append(TOKEN_UNUSED)
        elif spm and t == model.get("unk_token"):
            types.append(TOKEN_UNKNOWN)
        elif i in added:
            types.append(TOKEN_CONTROL if added[i].get("special") else TOKEN_USER)
        elif spm and len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types.append(TOKEN_BYTE)
        else:
            types.append(TOKEN_NORMAL)
    kv = []
    if spm:
        # SentencePiece-style BPE: the merge order becomes piece scores (the
        # piece made by merge r scores -r, so earlier merges win); other
        # normal pieces rank after every merge, specials and bytes score 0.
        made = {}
        for r, m in enumerate(merges):
            a, b = m.split(" ", 1)
            made.setdefault(a + b, r)
        scores = [(-float(made[t]) if t in made else -float(len(merges) + i)) if types[i] == TOKEN_NORMAL else 0.0
                  for i, t in enumerate(tokens)]
        kv += [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.scores", ARRAY, scores, F32V)]
        if add_bos is None:
            add_bos = True
    else:
        kv += [("tokenizer.ggml.model", STRING, "gpt2"),
               ("tokenizer.ggml.pre", STRING, _pre_name(tj, config.get("model_type"))),
               ("tokenizer.ggml.merges", ARRAY, merges, STRING)]
        if add_bos is None:
            bos_tok = tokens[sp["bos"]] if sp["bos"] is not None else None
            add_bos = _template_adds_bos(tj, bos_tok)
    kv += [("tokenizer.ggml.tokens", ARRAY, tokens, STRING), ("tokenizer.ggml.token_type", ARRAY, types, I32)]
    return kv, sp, add_bos, add_eos


def _from_vocab_merges(d, config, vocab_file, merges_file):
    with open(os.path.join(d, vocab_file), encoding="utf-8") as f:
        vocab = json.load(f)
    with open(os.path.join(d, merges_file), encoding="utf-8") as f:
        merges = [ln.rstrip("\n") for ln in f if ln.strip() and not ln.startswith("#version")]
    n = max(vocab.values()) + 1
    inv = {i: t for t, i in vocab.items()}
    tokens = [inv.get(i, "[PAD%d]" % i) for i in range(n)]
    ids = {t: i for i, t in enumerate(tokens)}
    sp, add_bos, add_eos = _special_ids(d, ids, config)
    if sp["eos"] is None and "<|endoftext|>" in ids:
        sp["eos"] = ids["<|endoftext|>"]
    if sp["bos"] is None and "<|endoftext|>" in ids:
        sp["bos"] = ids["<|endoftext|>"]
    types = [TOKEN_UNUSED if i not in inv else TOKEN_CONTROL if t == "<|endoftext|>" else TOKEN_NORMAL
             for i, t in enumerate(tokens)]
    kv = [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, "gpt-2"),
          ("tokenizer.ggml.tokens", ARRAY, tokens, STRING), ("tokenizer.ggml.token_type", ARRAY, types, I32),
          ("tokenizer.ggml.merges", ARRAY, merges, STRING)]
    return kv, sp, bool(add_bos), add_eos


def _varint(b, o):
    v, s = 0, 0
    while True:
        c = b[o]
        o += 1
        v |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return v, o


def _protobuf_fields(b):
    """(field number, wire type, value) of one protobuf message."""
    o = 0
    while o < len(b):
        key, o = _varint(b, o)
        fn, wt = key >> 3, key & 7
        if wt == 0:
            v, o = _varint(b, o)
        elif wt == 1:
            v, o = b[o:o + 8], o + 8
        elif wt == 2:
            n, o = _varint(b, o)
            v, o = b[o:o + n], o + n
        elif wt == 5:
            v, o = b[o:o + 4], o + 4
        else:
            raise ValueError("tokenizer.model: unsupported protobuf wire type %d" % wt)
        yield fn, wt, v


def _from_sentencepiece(d, config):
    """tokenizer.model: ModelProto field 1 = pieces {1: piece, 2: score, 3: type}."""
    with open(os.path.join(d, "tokenizer.model"), "rb") as f:
        data = f.read()
    tokens, scores, types = [], [], []
    for fn, wt, v in _protobuf_fields(data):
        if fn != 1 or wt != 2:
            continue
        piece, score, ptype = "", 0.0, TOKEN_NORMAL
        for f2, w2, v2 in _protobuf_fields(v):
            if f2 == 1:
                piece = bytes(v2).decode("utf-8")
            elif f2 == 2 and w2 == 5:
                score = struct.unpack("<f", v2)[0]
            elif f2 == 3:
                ptype = v2
        tokens.append(piece)
        scores.append(score)
        types.append(ptype)
    ids = {t: i for i, t in enumerate(tokens)}
    sp, add_bos, add_eos = _special_ids(d, ids, config)
    kv = [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.tokens", ARRAY, tokens, STRING),
          ("tokenizer.ggml.scores", ARRAY, scores, F32V), ("tokenizer.ggml.token_type", ARRAY, types, I32)]
    return kv, sp, True if add_bos is None else add_bos, add_eos


def tokenizer_metadata(d, config):
    """tokenizer.ggml.* entries [(key, type, value[, elem])] from the files in d, or []."""
    has = lambda *fs: all(os.path.exists(os.path.join(d, f)) for f in fs)
    if has("tokenizer.json"):
        kv, sp, add_bos, add_eos = _from_tokenizer_json(d, config)
    elif has("vocab.json", "merges.txt"):
        kv, sp, add_bos, add_eos = _from_vocab_merges(d, config, "vocab.json", "merges.txt")
    elif has("encoder.json", "vocab.bpe"):
        kv, sp, add_bos, add_eos = _from_vocab_merges(d, config, "encoder.json", "vocab.bpe")
    elif has("tokenizer.model"):
        kv, sp, add_bos, add_eos = _from_sentencepiece(d, config)
    else:
        return []
    for which, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"),
                       ("pad", "padding_token_id")):
        if sp.get(which) is not None:
            kv.append(("tokenizer.ggml." + key, U32, int(sp[which])))
    kv.append(("tokenizer.ggml.add_bos_token", BOOL, bool(add_bos)))
    if add_eos is not None:
        kv.append(("tokenizer.ggml.add_eos_token", BOOL, bool(add_eos)))
    p = os.path.join(d, "tokenizer_config.json")
    if os.path.exists(p):
        with open(p, encoding="utf-8") as f:
            template = json.load(f).get("chat_template")
        if isinstance(template, str):       # a list of named templates is not carried over
            kv.append(("tokenizer.chat_template", STRING, template))
    return kv
