#!/usr/bin/python3
"""Independent reference for kvlm's GPT-2 byte-level BPE tokenizer.

Written in plain Python from the published algorithm (the GPT-2 paper's
byte-level BPE and its pre-tokenisation pattern) so that the C tokenizer can
be checked against something that shares none of its code. Standard library
only: the third-party `regex` module is not used; the pattern

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

is evaluated by hand, alternative by alternative, with the leftmost-first
semantics of a backtracking regex engine.

Character classes (Unicode 14.0, Python 3.11's unicodedata):
  \\p{L}  general category Lu, Ll, Lt, Lm or Lo
  \\p{N}  general category Nd, Nl or No
  \\s     the Unicode White_Space property (what the `regex` module, Rust's
         `regex` and Oniguruma use). This is NOT str.isspace(), which also
         accepts U+001C..U+001F, and not PCRE2 10.42's UCP \\s, which also
         accepts U+180E.
Input that is not valid UTF-8: the bytes are decoded with
errors="surrogateescape", so each byte that is not part of a well-formed
UTF-8 sequence becomes one character of its own (a lone surrogate, category
Cs) that is neither a letter, a number nor white space; pieces are turned
back into their original bytes before the byte-to-unicode mapping.

Usage:
  tokenizer_reference.py encode [--special] [--model DIR] TEXT
  tokenizer_reference.py encode-hex [--special] [--model DIR] HEX
  tokenizer_reference.py pieces [--model DIR] TEXT     pre-tokens, one per line
  tokenizer_reference.py fixture OUT.json              writes the test fixture
  tokenizer_reference.py unicode-table OUT.c           writes the C class table
  tokenizer_reference.py selftest
The model directory (default models/gpt2-tokenizer) holds encoder.json and
vocab.bpe (or vocab.json and merges.txt).
"""

import json
import os
import random
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_MODEL = os.path.join(ROOT, "models", "gpt2-tokenizer")
SPECIAL_TOKENS = ["<|endoftext|>"]

# Unicode White_Space (PropList.txt); stable since Unicode 6.3.
WHITE_SPACE = frozenset(
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680]
    + list(range(0x2000, 0x200B))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)

LETTER, NUMBER, SPACE, OTHER = "L", "N", "S", "O"


def char_class(ch):
    cp = ord(ch)
    if cp in WHITE_SPACE:
        return SPACE
    cat = unicodedata.category(ch)
    if cat[0] == "L":
        return LETTER
    if cat[0] == "N":
        return NUMBER
    return OTHER


# ------------------------------------------------------------ pre-tokenising

CONTRACTIONS = ["s", "t", "re", "ve", "m", "ll", "d"]


def _run(s, i, cls):
    """End of the run of characters of class cls starting at i (may be i)."""
    while i < len(s) and char_class(s[i]) == cls:
        i += 1
    return i


def _alt_contraction(s, i):
    if s[i] != "'":
        return None
    for c in CONTRACTIONS:
        if s.startswith(c, i + 1):
            return i + 1 + len(c)
    return None


def _alt_optional_space_run(s, i, cls):
    """` ?X+`: the optional space is tried first, then the bare run."""
    if s[i] == " " and i + 1 < len(s) and char_class(s[i + 1]) == cls:
        return _run(s, i + 1, cls)
    if char_class(s[i]) == cls:
        return _run(s, i, cls)
    return None


def _alt_space_not_before_nonspace(s, i):
    """`\\s+(?!\\S)`: greedy run, then give back characters one at a time
    until the lookahead holds (end of input or a white-space character)."""
    end = _run(s, i, SPACE)
    for k in range(end, i, -1):
        if k == len(s) or char_class(s[k]) == SPACE:
            return k
    return None


def _alt_space(s, i):
    end = _run(s, i, SPACE)
    return end if end > i else None


def pretokenize(s):
    """Splits a str into the pieces the GPT-2 pattern finds (findall)."""
    out = []
    i = 0
    while i < len(s):
        for alt in (
            _alt_contraction,
            lambda s, i: _alt_optional_space_run(s, i, LETTER),
            lambda s, i: _alt_optional_space_run(s, i, NUMBER),
            lambda s, i: _alt_optional_space_run(s, i, OTHER),
            _alt_space_not_before_nonspace,
            _alt_space,
        ):
            end = alt(s, i)
            if end is not None:
                break
        # Every character is L, N, S or O, so one alternative always matches.
        assert end is not None and end > i
        out.append(s[i:end])
        i = end
    return out


# ---------------------------------------------------------------- byte level


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character table: printable
    Latin-1 bytes map to themselves, the other 68 to U+0100 onwards."""
    keep = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\u00a1"), ord("\u00ac") + 1))
        + list(range(ord("\u00ae"), ord("\u00ff") + 1))
    )
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Reference:
    def __init__(self, model_dir=DEFAULT_MODEL):
        pairs = [("encoder.json", "vocab.bpe"), ("vocab.json", "merges.txt")]
        for vocab_name, merges_name in pairs:
            vp = os.path.join(model_dir, vocab_name)
            mp = os.path.join(model_dir, merges_name)
            if os.path.exists(vp) and os.path.exists(mp):
                break
        else:
            raise SystemExit("no encoder.json+vocab.bpe or vocab.json+merges.txt in " + model_dir)
        with open(vp, encoding="utf-8") as f:
            self.encoder = json.load(f)
        self.decoder = {v: k for k, v in self.encoder.items()}
        with open(mp, encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        merges = [tuple(l.split(" ")) for l in lines if l]
        # A pair listed twice keeps its last rank (dict semantics).
        self.ranks = {m: r for r, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {c: b for b, c in self.byte_encoder.items()}
        self.cache = {}

    def bpe(self, word):
        """word: str in the byte-level alphabet. Returns the list of symbols.
        Each round takes the adjacent pair of lowest rank and merges every
        occurrence of it, left to right, without overlap."""
        if word in self.cache:
            return self.cache[word]
        symbols = list(word)
        while len(symbols) > 1:
            best = None
            for pair in zip(symbols, symbols[1:]):
                r = self.ranks.get(pair)
                if r is not None and (best is None or r < best[0]):
                    best = (r, pair)
            if best is None:
                break
            first, second = best[1]
            merged = []
            i = 0
            while i < len(symbols):
                if i + 1 < len(symbols) and symbols[i] == first and symbols[i + 1] == second:
                    merged.append(first + second)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        self.cache[word] = symbols
        return symbols

    def encode_ordinary(self, text):
        """text: str (possibly holding surrogate escapes)."""
        ids = []
        for piece in pretokenize(text):
            raw = piece.encode("utf-8", "surrogateescape")
            word = "".join(self.byte_encoder[b] for b in raw)
            ids.extend(self.encoder[s] for s in self.bpe(word))
        return ids

    def encode(self, data, allow_special=False):
        """data: bytes. Special tokens are split out first (leftmost, then
        longest) when allowed; the text between them is encoded alone."""
        text = data.decode("utf-8", "surrogateescape")
        if not allow_special:
            return self.encode_ordinary(text)
        ids = []
        specials = [s for s in SPECIAL_TOKENS if s in self.encoder]
        start = 0
        i = 0
        while i < len(text):
            hit = None
            for s in specials:
                if text.startswith(s, i) and (hit is None or len(s) > len(hit)):
                    hit = s
            if hit is None:
                i += 1
                continue
            ids.extend(self.encode_ordinary(text[start:i]))
            ids.append(self.encoder[hit])
            i += len(hit)
            start = i
        ids.extend(self.encode_ordinary(text[start:]))
        return ids

    def decode(self, ids):
        return bytes(self.byte_decoder[c] for i in ids for c in self.decoder[i])


# ------------------------------------------------------------------ fixture


def _u(s):
    return s.encode("utf-8")


def fixture_cases():
    """(name, bytes, allow_special). Grouped by what they exercise."""
    c = []

    def add(group, items, special=False):
        for k, v in enumerate(items):
            c.append(("%s/%d" % (group, k), v if isinstance(v, bytes) else _u(v), special))

    add("basic", ["", "Hello world", " Hello", "Hello", "hello world!", "a", " ", "!",
                  "The quick brown fox jumps over the lazy dog.",
                  "HELLO WORLD", "hElLo WoRlD", "I", " I", "x y z"])
    add("prose", [
        "It was the best of times, it was the worst of times, it was the age of wisdom.",
        "Call me Ishmael. Some years ago\u2014never mind how long precisely\u2014having little money.",
        "\u201cWhat\u2019s that?\u201d she asked. \u2018Nothing,\u2019 he replied\u2026",
        "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
        "Mr. and Mrs. Dursley, of number four, Privet Drive, were proud to say that they were perfectly normal.",
        "e.g. i.e. etc. vs. a.m. p.m. U.S.A. Ph.D.",
        "To be, or not to be: that is the question:\nWhether 'tis nobler in the mind to suffer",
        "Na\u00efve caf\u00e9 r\u00e9sum\u00e9 fa\u00e7ade co\u00f6perate \u00fcber Stra\u00dfe",
        "\u0412 \u043d\u0430\u0447\u0430\u043b\u0435 \u0431\u044b\u043b\u043e \u0441\u043b\u043e\u0432\u043e. \u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5!",
        "Ce n'est pas une pipe. L'homme qu'il a vu.",
        "She said: \"I'm here\" -- and left...",
        "Question? Answer! Exclamation!!! Ellipsis... (parenthetical) [bracketed] {braced}",
        "semi;colon:colon,comma.period",
        "https://example.com/path?query=1&other=two#frag",
        "user@example.org, +1 (555) 123-4567",
        "#hashtag @mention $dollar %percent ^caret &amp *star",
        "under_score snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
        "ALL CAPS SENTENCE WITH NUMBERS 123 AND PUNCTUATION!",
    ])
    add("code", [
        "int main(void) {\n    return 0;\n}\n",
        "def f(x):\n\treturn x ** 2  # square\n",
        "for (size_t i = 0; i < n; ++i) a[i] += b[i] * c;",
        "if x != None and y >= 3:\n        print(f\"{x!r} {y:>10}\")\n",
        "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
        "<html><body class=\"main\"><p>Hi &amp; bye</p></body></html>",
        "SELECT id, name FROM users WHERE age > 21 ORDER BY name DESC;",
        "#!/bin/sh\nset -eu\nexec \"$@\" 2>&1 | tee -a log.txt\n",
        "x = y if y else z; lambda a, *args, **kw: None",
        "std::vector<std::pair<int, std::string>> v{{1, \"a\"}};",
        "    \n        \n",
        "\t\tif (a) {\n\t\t\tb();\n\t\t}\n",
        "a->b->c; p->q = &r; *s++ = '\\0';",
        "// comment\n/* block\n * comment */\n",
        "0x7fffffff 0b1010 0o777 1_000_000 3.14f 1e-9",
        "fn main() { let s: &str = \"hi\"; println!(\"{}\", s); }",
        "$ git commit -m 'fix: don't crash'  && echo ok",
        "    def __init__(self, *, name: str = 'x') -> None:\n        self._name = name\n",
        "@@ -1,3 +1,4 @@\n-old line\n+new line\n context\n",
        "key1=value1\nkey2 = value 2\n[section]\n",
    ])
    add("space", [
        "  ", "   ", "    ", "          ", "a  b", "a   b", "a    b", "a \tb", "a\t b",
        "a\t\tb", "\t", "\t\t\t", "\n", "\n\n", "\n\n\n", "a\nb", "a\n\nb", "a\n\n\nb",
        "a \n b", "a\r\nb", "\r\n\r\n", "trailing   ", "  leading", "  both  ",
        " \n \n ", "word\n  indented", "x \u00a0y", "x\u00a0\u00a0y", "x\u3000y",
        "x\u2028y", "x\u2029y", "x \u2009 y", "\u200a\u200a", "x\u0085y", "x\u0085\u0085y",
        "x\u1680y", "x\u202fy", "x\u205fy", "\x0b\x0c", "a\x0bb\x0cc",
        "x\u180ey", "x \u180e y", "x\x1cy", "x\x1c\x1d\x1e\x1fy", "x \x1f",
        "  \x1c  ", "end with newline\n", " \t \t ", "a " + " " * 30 + "b",
        " " * 64, "\n" * 20, "a\n \n \nb",
    ])
    add("number", [
        "0", "123", "1234567890", " 42", "3.14159", "1,000,000", "-17", "+3",
        "2024-01-31", "10:30pm", "v1.2.3", "1st 2nd 3rd 4th", "100%", "$5.99",
        "\uff12\uff10\uff12\uff14", "\u216b \u2163", "\u00bd \u00be \u2155", "x\u00b2 + y\u00b3",
        "\u0661\u0662\u0663", "\u0967\u0968\u0969", "\u4e00\u4e8c\u4e09 123", "7a7b7c", "a1b2c3",
        "1 2 3 4 5", "12  34", "\u2460\u2461\u2462",
    ])
    contractions = []
    for base in ["it", "you", "they", "I", "we", "he", "do"]:
        for suf in CONTRACTIONS:
            contractions.append(base + "'" + suf)
    add("contraction", contractions)
    add("contraction_case", [
        "DON'T", "IT'S", "I'M", "YOU'RE", "WE'VE", "THEY'LL", "HE'D", "Don'T",
        "'S", "'T", "'RE", "'Ve", "'LL", "'D", "'M", "dON't", "It'S",
    ])
    add("contraction_edge", [
        "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'", "''", "'''s", "''s",
        "y'all", "rock'n'roll", "'tis", "o'clock", "don't've", "'sup", "'ss",
        "'red", "'llama", "'dog", " 's", " 'll", "x 're", "?'s", "!'ll", "1's",
        "\u2019s", "it\u2019s", "'\u00e9", "'\u00e9t\u00e9", "'1", "' s", "\t's", "\n'd",
        "'s's's", "I'm'd", "'e", "'v", "'r",
    ])
    add("emoji", [
        "\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",
        "\U0001F1EB\U0001F1F7\U0001F1EF\U0001F1F5", "1\ufe0f\u20e3", "\u2764\ufe0f", "I \u2764 NY",
        "hi \U0001F600 there", "\U0001F600\U0001F600\U0001F600", " \U0001F680 launch",
        "\U0001F3F3\ufe0f\u200d\U0001F308", "\U0001F9D1\U0001F3FB\u200D\U0001F4BB code",
        "done \u2705!", "\u2603\u2604\u2605", "\U0001F4A9\U0001F4A9 lol",
        "#\ufe0f\u20e3", "\U0001F468\U0001F3FF\u200D\U0001F9B2",
    ])
    add("cjk", [
        "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8",
        "\u3053\u3093\u306b\u3061\u306f\u4e16\u754c", "\u30ab\u30bf\u30ab\u30ca \u3072\u3089\u304c\u306a",
        "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8", "\u4e2d\u6587 English \u6df7\u5408 text",
        "\u300c\u5f15\u7528\u300d\u3010\u62ec\u5f27\u3011", "\u6771\u4eac\u90fd\u6e0b\u8c37\u533a 1-2-3",
        "\U00020000\U0002A6D6", "\u3000\u5168\u89d2\u7a7a\u767d", "\uff21\uff22\uff23\uff41\uff42",
        "\u4eca\u65e5\u306f\u3001\u3044\u3044\u5929\u6c17\u3067\u3059\u306d\u3002",
    ])
    add("combining", [
        "e\u0301", "cafe\u0301", "n\u0303o", "a\u0300\u0301\u0302\u0303",
        "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u036b\u0357\u0334\u0362\u0335\u031c\u0330\u0354L\u0368\u0367\u0369\u0358\u0320G\u0311\u0357\u030e\u0305\u035b\u0341\u0334\u033b\u0348\u034d\u0354\u0339O",
        "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a", "\u0301\u0301 lone marks",
        " \u0301", "x\u20d7", "\u1100\u1161\u11a8", "\u0bb5\u0ba3\u0b95\u0bcd\u0b95\u0bae\u0bcd",
    ])
    add("rtl", [
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u0628\u0650\u0633\u0652\u0645\u0650 \u0627\u0644\u0644\u0651\u064e\u0647\u0650",
        "abc \u05d0\u05d1\u05d2 def", "\u200f\u05e9\u05dc\u05d5\u05dd\u200e hi", "\u202bembedded\u202c",
        "\u0633\u0644\u0627\u0645 123 \u06f1\u06f2\u06f3", "\u05d1\u05bc\u05b0\u05e8\u05b5\u05d0\u05e9\u05b4\u05c1\u05d9\u05ea",
        "\u0627\u0644\u0639\u0631\u0628\u064a\u0629: \u00ab\u0646\u0635\u00bb", "\u0715\u0710\u0718\u0715 \u0780\u07a6",
    ])
    add("control", [
        "\x00", "a\x00b", "\x01\x02\x03", "\x07bell", "\x1b[31mred\x1b[0m", "\x7f",
        "x\x08y", "tab\x09end", "\u0080\u0081\u009f", "\ufeffBOM", "zero\u200bwidth",
        "soft\u00adhyphen", "join\u200dner", "\u2060word\u2060", "\x00\x00\x00 \x00",
        "\ufffd replacement", "\U000E0041\U000E0042 tags", "\U000F0000 private", "\ue000\uf8ff",
        "\U0010FFFF", "\ufffe\uffff", "x\u061cy",
    ])
    add("invalid_utf8", [
        b"\x80", b"\xff", b"\xfe\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80",
        b"\xed\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xc3", b"\xe2\x82",
        b"\xf0\x9f\x98", b"abc\xe2\x82", b"\xe2\x82abc", b"ab\xffcd", b" \xff", b"  \x80",
        b"!\x80?", b"\x80's", b"'\x80s", b"\xc3\xa9\xc3", b"\x80\x80\x80\x80", b"1\xff2",
        b"\xe2\x82\xe2\x82\xac", b"\xf0\x9f\x98\x80\x80", b"a \xc3 b", b"\xff \xff\n\xff",
        b"caf\xe9", b"\xef\xbb", b"Hello\xc0\x80World", b"\xf8\x88\x80\x80\x80",
        b"\t\xa0", b"\xa0\xa0 \xa0", b"x\n\xfe", b"\xc2\x85\xc2",
    ])
    add("special_allowed", [
        "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<|endoftext|><|endoftext|>",
        "Hello<|endoftext|>World", "<|endoftext|", "<|endoftext|>>", "<<|endoftext|>",
        "text\n<|endoftext|>\nmore", "x <|endoftext|>'s",
    ], special=True)
    add("special_plain", [
        "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<|endoftext|><|endoftext|>",
        "<|endoftext", "<|startoftext|>",
    ])
    add("long", [
        "a" * 300, "!" * 200, " " * 257 + "x", "ab" * 150, "\u00e9" * 120,
        "x" + "\t" * 100, ("word " * 60).strip(), "-" * 80 + "\n" + "=" * 80,
        "\U0001F600" * 40, "1234567890" * 20,
    ])
    rng = random.Random(20240131)
    alphabet = (list("abcXYZ019 '\t\n.,!?-_") + ["s", "t", "re", "ll", "'s", "  ", "\u00a0",
                "\u00e9", "\u4e2d", "\U0001F600", "\u0301", "\u0661", "\u05d0", "\u200d",
                "\x00", "\x1c", "\u0085", "\u3000", "\u180e"])
    rnd = []
    for _ in range(40):
        n = rng.randrange(1, 24)
        rnd.append("".join(rng.choice(alphabet) for _ in range(n)))
    add("random_text", rnd)
    rb = []
    for _ in range(20):
        n = rng.randrange(1, 24)
        rb.append(bytes(rng.choice(b"ab 's\n\x80\xbf\xc3\xa9\xe2\x82\xac\xf0\x9f\xff") for _ in range(n)))
    add("random_bytes", rb)
    return c


def write_fixture(path, ref):
    cases = []
    for name, data, special in fixture_cases():
        entry = {"name": name, "hex": data.hex(), "special": special,
                 "ids": ref.encode(data, special)}
        try:
            entry["text"] = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        assert ref.decode(entry["ids"]) == data, name
        cases.append(entry)
    doc = {
        "about": "GPT-2 token ids from tools/tokenizer_reference.py; the text of each "
                 "case is in hex (text is a readable copy when the bytes are valid UTF-8).",
        "model": "models/gpt2-tokenizer",
        "cases": cases,
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=None, separators=(",", ":"))
        f.write("\n")
    # One case per line keeps diffs readable.
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = text.replace(',{"name"', ',\n{"name"').replace('"cases":[{', '"cases":[\n{')
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return len(cases)


# ----------------------------------------------------- C class table writer


def write_unicode_table(path):
    """Ranges of code points >= 0x80 that are letters, numbers or white space
    (everything else is 'other'), merged where adjacent, for the C
    pre-tokeniser."""
    ranges = []
    for cp in range(0x80, 0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        cls = char_class(chr(cp))
        if cls == OTHER:
            continue
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == cls:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, cls])
    code = {LETTER: "TOK_L", NUMBER: "TOK_N", SPACE: "TOK_S"}
    with open(path, "w", encoding="ascii") as f:
        f.write("/*\n * Unicode %s character classes for the GPT-2 pre-tokeniser: the code\n"
                " * points >= U+0080 that are letters (\\p{L}), numbers (\\p{N}) or white\n"
                " * space (White_Space), as sorted, non-overlapping ranges; every other\n"
                " * code point is TOK_O. Generated by `tools/tokenizer_reference.py\n"
                " * unicode-table` from Python's unicodedata; do not edit by hand.\n"
                " * tests/test_tokenizer.c checks every code point against PCRE2.\n */\n"
                % unicodedata.unidata_version)
        f.write('#include "tokenizer/pretok.h"\n\n')
        f.write("const tok_urange tok_uranges[] = {\n")
        for k in range(0, len(ranges), 3):
            f.write("   " + "".join(" {0x%05X, 0x%05X, %s}," % (lo, hi, code[cls])
                                    for lo, hi, cls in ranges[k:k + 3]) + "\n")
        f.write("};\n\nconst size_t tok_n_uranges = sizeof tok_uranges / sizeof tok_uranges[0];\n")
    return len(ranges)


# ------------------------------------------------------------------ selftest


def selftest(ref):
    def check(got, want, what):
        if got != want:
            raise SystemExit("selftest failed: %s: got %r, want %r" % (what, got, want))

    check(ref.encode(b"Hello world"), [15496, 995], "Hello world")
    check(ref.encode(b" Hello"), [18435], " Hello")
    check(ref.encode(b"<|endoftext|>", True), [50256], "special allowed")
    check(50256 in ref.encode(b"<|endoftext|>", False), False, "special not allowed")
    P = pretokenize
    check(P("Hello world"), ["Hello", " world"], "words")
    check(P("a   b"), ["a", "  ", " b"], "space run before a word")
    check(P("a   "), ["a", "   "], "space run at the end")
    check(P("\n\nHi"), ["\n", "\n", "Hi"], "newlines before a word")
    check(P(" \thi"), [" ", "\t", "hi"], "space then tab")
    check(P("DON'T"), ["DON", "'", "T"], "upper-case contraction")
    check(P("don't"), ["don", "'t"], "contraction")
    check(P("?'s"), ["?'", "s"], "punctuation swallows the apostrophe")
    check(P("they'll've"), ["they", "'ll", "'ve"], "two contractions")
    check(P("x \u00a0y"), ["x", " ", "\u00a0", "y"], "nbsp is white space")
    check(P("x\x1cy"), ["x", "\x1c", "y"], "U+001C is not white space")
    check(P("x\u180ey"), ["x", "\u180e", "y"], "U+180E is not white space")
    check(P("x\u0085\u0085y"), ["x", "\u0085", "\u0085", "y"], "NEL is white space")
    check(P("123abc"), ["123", "abc"], "numbers then letters")
    check(P(" 123"), [" 123"], "space number")
    check(P("e\u0301"), ["e", "\u0301"], "combining mark is not a letter")
    s = b"ab\xffcd \xff\xfe!".decode("utf-8", "surrogateescape")
    check([p.encode("utf-8", "surrogateescape") for p in P(s)],
          [b"ab", b"\xff", b"cd", b" \xff\xfe!"], "invalid bytes are other")
    check(b"\xe2\x82\xe2\x82\xac".decode("utf-8", "surrogateescape"), "\udce2\udc82\u20ac",
          "each invalid byte is one character")
    # White_Space is str.isspace() without U+001C..U+001F.
    ws = {cp for cp in range(0x110000) if chr(cp).isspace()} - {0x1C, 0x1D, 0x1E, 0x1F}
    check(ws, set(WHITE_SPACE), "White_Space set")
    check(ref.decode(ref.encode(b"\xff\x00 x\xc3")), b"\xff\x00 x\xc3", "round trip")
    print("selftest ok (Unicode %s)" % unicodedata.unidata_version)


def main(argv):
    args = argv[1:]
    model = DEFAULT_MODEL
    special = False
    rest = []
    i = 0
    while i < len(args):
        if args[i] == "--model":
            model = args[i + 1]
            i += 2
        elif args[i] == "--special":
            special = True
            i += 1
        else:
            rest.append(args[i])
            i += 1
    if not rest:
        print(__doc__)
        return 2
    cmd = rest[0]
    if cmd == "unicode-table" and len(rest) == 2:
        print("%d ranges" % write_unicode_table(rest[1]))
        return 0
    ref = Reference(model)
    if cmd == "encode" and len(rest) == 2:
        print(" ".join(map(str, ref.encode(rest[1].encode("utf-8", "surrogateescape"), special))))
    elif cmd == "encode-hex" and len(rest) == 2:
        print(" ".join(map(str, ref.encode(bytes.fromhex(rest[1]), special))))
    elif cmd == "pieces" and len(rest) == 2:
        for p in pretokenize(rest[1]):
            print(repr(p))
    elif cmd == "fixture" and len(rest) == 2:
        print("%d cases" % write_fixture(rest[1], ref))
    elif cmd == "selftest":
        selftest(ref)
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
