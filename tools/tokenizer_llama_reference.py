#!/usr/bin/python3
"""Independent reference for kvlm's Llama-family tokenizers (standard
library only), written from the published descriptions, sharing no code
with the C tokenizer:

- byte-level BPE as Llama 3 and Qwen2 use it: the Split pattern
      (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|
       ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+
  (Qwen2: \\p{N} one digit at a time) evaluated by hand, alternative by
  alternative, with the leftmost-first semantics of a backtracking regex
  engine; the GPT-2 byte-to-unicode mapping; BPE merging the leftmost
  occurrence of the lowest-ranked pair one at a time (Hugging Face's
  semantics); Qwen2's NFC normalizer (unicodedata).
- SentencePiece-style BPE with byte fallback from tokenizer.json (Llama 2):
  "\u2581" in front of each text fragment and for every space, characters
  as initial symbols, a character missing from the vocabulary as its byte
  tokens <0xXX>, merges by rank one at a time.
- SentencePiece BPE by scores (GGUF vocabularies of model "llama"): among
  adjacent symbols whose concatenation is a piece text may produce, merge
  the one whose piece has the highest score, the leftmost on a tie; a
  leftover symbol outside the vocabulary becomes its byte tokens.

Character classes are those of tools/tokenizer_reference.py (Unicode 14.0:
\\p{L}, \\p{N} general categories, \\s the White_Space property). Bytes
that are not valid UTF-8 are decoded with errors="surrogateescape": each
becomes one character of its own (category Cs: not a letter, number or
space), and is encoded back to its byte before the byte-level mapping or
the byte fallback. So invalid input is tokenised as if each bad byte were
a punctuation character, and decodes back to itself.

Added tokens are matched first (leftmost, longest at a position; special
ones only when allowed), and the text between them is encoded on its own.
"""

import json
import os
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tokenizer_reference as gref  # noqa: E402  (classes, byte mapping, cases)

META = "\u2581"


def _sur(data):
    return data.decode("utf-8", "surrogateescape")


def _raw(s):
    return s.encode("utf-8", "surrogateescape")


def is_l(ch):
    return gref.char_class(ch) == gref.LETTER


def is_n(ch):
    return gref.char_class(ch) == gref.NUMBER


def is_s(ch):
    return gref.char_class(ch) == gref.SPACE


def is_other(ch):
    return gref.char_class(ch) == gref.OTHER


# --------------------------------------------------------- Llama 3 / Qwen2

CONTRACTIONS = ["s", "t", "re", "ve", "m", "ll", "d"]


def _fold_eq(ch, want):
    """(?i:...) for one ASCII letter: simple case folding, one character."""
    f = ch.casefold()
    return f == want


def _match_llama(s, i, max_digits):
    n = len(s)
    c = s[i]
    # (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if c == "'":
        for suf in CONTRACTIONS:
            if i + len(suf) < n and all(_fold_eq(s[i + 1 + k], suf[k]) for k in range(len(suf))):
                return i + 1 + len(suf)
    # [^\r\n\p{L}\p{N}]?\p{L}+
    if not is_l(c) and not is_n(c) and c not in "\r\n" and i + 1 < n and is_l(s[i + 1]):
        j = i + 1
        while j < n and is_l(s[j]):
            j += 1
        return j
    if is_l(c):
        j = i
        while j < n and is_l(s[j]):
            j += 1
        return j
    # \p{N}{1,3} (Qwen2: \p{N})
    if is_n(c):
        j = i
        while j < n and j - i < max_digits and is_n(s[j]):
            j += 1
        return j
    #  ?[^\s\p{L}\p{N}]+[\r\n]*
    st = i + 1 if (c == " " and i + 1 < n and is_other(s[i + 1])) else i
    if is_other(s[st]):
        j = st
        while j < n and is_other(s[j]):
            j += 1
        while j < n and s[j] in "\r\n":
            j += 1
        return j
    # c is white space from here on
    assert is_s(c), repr(c)
    e = i
    while e < n and is_s(s[e]):
        e += 1
    # \s*[\r\n]+ : ends after the last \r or \n of the run
    last = -1
    for k in range(i, e):
        if s[k] in "\r\n":
            last = k
    if last >= 0:
        return last + 1
    # \s+(?!\S)
    if e == n:
        return n
    if e - i >= 2:
        return e - 1
    # \s+
    return e


def pretokenize_llama(s, max_digits=3):
    out, i = [], 0
    while i < len(s):
        j = _match_llama(s, i, max_digits)
        assert j > i
        out.append(s[i:j])
        i = j
    return out


# ------------------------------------------------------------- BPE merges

def bpe_one(ids, ranks):
    """ranks: (a, b) -> (rank, merged id). Leftmost lowest rank, one at a time."""
    ids = list(ids)
    while len(ids) > 1:
        best, at = None, -1
        for k in range(len(ids) - 1):
            r = ranks.get((ids[k], ids[k + 1]))
            if r is not None and (best is None or r[0] < best[0]):
                best, at = r, k
        if best is None:
            break
        ids[at:at + 2] = [best[1]]
    return ids


def _split_added(data, added, allow_special):
    """data: bytes. added: list of (bytes, id, special). Yields ('text', bytes)
    or ('tok', id), leftmost match, longest at a position."""
    cands = sorted([a for a in added if allow_special or not a[2]], key=lambda a: (-len(a[0]), a[1]))
    i = start = 0
    out = []
    while i < len(data):
        hit = None
        for piece, tid, _ in cands:
            if data.startswith(piece, i):
                hit = (piece, tid)
                break
        if hit:
            out.append(("text", data[start:i], start))
            out.append(("tok", hit[1], i))
            i += len(hit[0])
            start = i
        else:
            i += 1
    out.append(("text", data[start:], start))
    return [o for o in out if o[0] == "tok" or o[1]]


# ---------------------------------------------------------- tokenizer.json

class HFTokenizer:
    """The subset of tokenizer.json that Llama 2, Llama 3 and Qwen2 use."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        self.j = j
        model = j["model"]
        self.vocab = model["vocab"]
        self.inv = {v: k for k, v in self.vocab.items()}
        self.added = []
        for a in j.get("added_tokens") or []:
            self.inv[a["id"]] = a["content"]
            self.added.append((a["content"].encode("utf-8"), a["id"], bool(a["special"])))
        self.ranks = {}
        for r, m in enumerate(model["merges"]):
            a, b = m.split(" ") if isinstance(m, str) else m
            self.ranks[(self.vocab[a], self.vocab[b])] = (r, self.vocab[a + b])
        self.ignore_merges = bool(model.get("ignore_merges"))
        pre = j.get("pre_tokenizer") or {}
        self.bytelevel = "ByteLevel" in json.dumps(pre)
        self.nfc = (j.get("normalizer") or {}).get("type") == "NFC"
        self.digits = 3
        if self.bytelevel:
            pat = pre["pretokenizers"][0]["pattern"]["Regex"]
            assert "\\p{N}{1,3}" in pat or "|\\p{N}|" in pat, pat
            self.digits = 3 if "\\p{N}{1,3}" in pat else 1
            self.b2u = gref.bytes_to_unicode()
        self.prefix = []
        pp = j.get("post_processor") or {}
        procs = pp.get("processors", [pp])
        for p in procs:
            if p.get("type") == "TemplateProcessing":
                for item in p["single"]:
                    if "SpecialToken" in item:
                        self.prefix += p["special_tokens"][item["SpecialToken"]["id"]]["ids"]
                    else:
                        break

    def _word_bytelevel(self, word):
        mapped = "".join(self.b2u[b] for b in _raw(word))
        if self.ignore_merges and mapped in self.vocab:
            return [self.vocab[mapped]]
        return bpe_one([self.vocab[ch] for ch in mapped], self.ranks)

    def _word_spm(self, word):
        ids = []
        for ch in word:
            if ch in self.vocab:
                ids.append(self.vocab[ch])
            else:
                ids += [self.vocab["<0x%02X>" % b] for b in _raw(ch)]
        return bpe_one(ids, self.ranks)

    def _fragment(self, data):
        s = _sur(data)
        if self.nfc:
            s = unicodedata.normalize("NFC", s)
        if self.bytelevel:
            out = []
            for w in pretokenize_llama(s, self.digits):
                out += self._word_bytelevel(w)
            return out
        return self._word_spm(META + s.replace(" ", META))

    def encode(self, data, allow_special=False, add_special=False):
        out = list(self.prefix) if add_special else []
        for kind, v, _ in _split_added(data, self.added, allow_special):
            out += [v] if kind == "tok" else self._fragment(v)
        return out

    def decode(self, ids):
        parts = []
        for i in ids:
            p = self.inv[i]
            if self.bytelevel and not any(i == a[1] for a in self.added):
                u2b = {u: b for b, u in self.b2u.items()}
                parts.append(bytes(u2b[c] for c in p))
            elif not self.bytelevel and len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
                parts.append(bytes([int(p[3:5], 16)]))
            else:
                parts.append((p.replace(META, " ") if not self.bytelevel else p).encode("utf-8"))
        out = b"".join(parts)
        if not self.bytelevel and out.startswith(b" "):
            out = out[1:]
        return out


# ------------------------------------------------------ GGUF model "llama"

class ScoreTokenizer:
    """SentencePiece BPE by scores over GGUF-style arrays."""

    def __init__(self, tokens, scores, types, bos, add_bos):
        self.tokens, self.scores, self.types = tokens, scores, types
        self.ids = {}
        for i, t in enumerate(tokens):
            self.ids.setdefault(t, i)
        self.byte = [self.ids["<0x%02X>" % b] for b in range(256)]
        self.added = [(t.encode("utf-8"), i, types[i] == 3) for i, t in enumerate(tokens)
                      if types[i] in (3, 4) and t]
        self.prefix = [bos] if add_bos else []

    def _usable(self, piece):
        i = self.ids.get(piece)
        return i if i is not None and self.types[i] in (0, 1, 4) else None

    def _word(self, s):
        sym = list(s)
        while len(sym) > 1:
            best, at = None, -1
            for k in range(len(sym) - 1):
                i = self._usable(sym[k] + sym[k + 1])
                if i is not None and (best is None or self.scores[i] > best):
                    best, at = self.scores[i], k
            if best is None:
                break
            sym[at:at + 2] = [sym[at] + sym[at + 1]]
        out = []
        for p in sym:
            i = self._usable(p)
            out += [i] if i is not None else [self.byte[b] for b in _raw(p)]
        return out

    def encode(self, data, allow_special=False, add_special=False):
        out = list(self.prefix) if add_special else []
        for kind, v, _ in _split_added(data, self.added, allow_special):
            out += [v] if kind == "tok" else self._word(META + _sur(v).replace(" ", META))
        return out


if __name__ == "__main__":
    tok = HFTokenizer(sys.argv[1])
    print(tok.encode(sys.argv[2].encode("utf-8"), True))
