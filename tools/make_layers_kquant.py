#!/usr/bin/python3
"""Q4_K_M GGUF files of the per-layer attention families, made by llama.cpp's
tools, with the float64 reference of their dequantised weights and
llama.cpp's perplexity.

Usage:
    make_layers_kquant.py OUTDIR --llama-cpp DIR [--commit FIXDIR]

K-quants pack rows of 256 values, so the fixtures of tests/fixtures/layers
(hidden size 32) are widened: the same families and per-layer settings
(tools/layers_reference.py's VARIANTS) with hidden size 256, 4 query heads
and 2 KV heads of 64, an MLP of 512, random weights (layers_reference's
make_weights, seed offset 100 + i, every matrix scaled by sqrt(32 / 256)
so that activations and logits keep the fixtures' sizes). For V in gemma2 gemma3 smollm3 granite
phi3_longrope:
    OUTDIR/V-wide-f32.gguf             F32, in llama.cpp's converter layout
                                       (tools/make_layers_gguf.py)
    OUTDIR/V-wide-q4_k_m.gguf          llama-quantize ... Q4_K_M
    OUTDIR/V-wide-q8_0.gguf            llama-quantize ... Q8_0 (and its
                                       .expected.json, as below)
    OUTDIR/V-wide-q4_k_m.expected.json the float64 reference on the weights
                                       gguf-py dequantises from the Q4_K_M
                                       file: prefill logits of the fixtures'
                                       prompt, greedy decoding of 8 tokens
                                       (format of tools/llama_reference.py's
                                       write_expected; "decode" = greedy ids),
                                       and under "perplexity" llama.cpp's
                                       `llama-perplexity -c 64` on the text
                                       and the reference's under its protocol.
The vocabulary is GPT-2's byte alphabet (one token per byte, ids 0-2
control tokens, bos 1, eos 2; id 255 is the merge of bytes 3 and 4, which
no text holds), so a text of bytes 3..254 is its bytes as ids, in llama.cpp,
in kvlm and here. The text is tests/fixtures/shakespeare_val_slice.txt
(3022 bytes: 47 chunks of 64).

--commit copies the files named in COMMIT (small enough for the repository)
and writes FIXDIR/kquant_summary.json (every file's figures).
"""
import json, os, re, subprocess, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import layers_reference as R  # noqa: E402
import llama_reference as L  # noqa: E402
import make_layers_gguf as G  # noqa: E402

WIDE = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, head_dim=64)
PPL_TEXT = os.path.join("tests", "fixtures", "shakespeare_val_slice.txt")
PPL_CTX = 64
TYPES = ["Q4_K_M", "Q8_0"]
COMMIT = ["granite-wide-q4_k_m", "phi3_longrope-wide-q4_k_m"]


def wide_config(v):
    c = dict(R.BASE)
    c.update(R.VARIANTS[v])
    c.update(WIDE)
    if v == "gemma2":
        c["query_pre_attn_scalar"] = 96  # still not head_dim
    if v == "gemma3":
        c["query_pre_attn_scalar"] = 64
    if v == "phi3_longrope":  # one factor per rotated pair: 0.75 * 64 / 2
        n = int(c["partial_rotary_factor"] * c["head_dim"]) // 2
        c["rope_scaling"] = dict(c["rope_scaling"], long_factor=[1.0 + 0.25 * i for i in range(n)],
                                 short_factor=[1.0 + 0.02 * i for i in range(n)])
    return c


def byte_vocab(n):
    """GPT-2's byte alphabet: token i is byte i's character, i >= 3."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xa1, 0xac + 1)) + list(range(0xae, 0xff + 1))
    cs, k = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    ch = dict(zip(bs, map(chr, cs)))
    toks = ["<%02x>" % i if i < 3 else ch[i] for i in range(n)]
    toks[-1] = ch[3] + ch[4]
    return toks


def text_ids(path):
    with open(path, "rb") as f:
        data = f.read()
    assert all(3 <= b < 255 for b in data)
    return list(data)


def reference_ppl(W, c, ids):
    """llama-perplexity's protocol: chunks of PPL_CTX tokens, no BOS (the
    vocabulary adds none), targets PPL_CTX/2 + 1 .. PPL_CTX - 1 scored."""
    nll, count = 0.0, 0
    for k in range(len(ids) // PPL_CTX):
        chunk = ids[k * PPL_CTX:(k + 1) * PPL_CTX]
        lg = R.forward(W, c, chunk)
        lp = torch.log_softmax(lg, dim=-1)
        for j in range(PPL_CTX // 2, PPL_CTX - 1):
            nll -= float(lp[j, chunk[j + 1]])
            count += 1
    return float(torch.exp(torch.tensor(nll / count, dtype=torch.float64))), count


def llamacpp_ppl(llama, path, text):
    cmd = [os.path.join(llama, "build", "bin", "llama-perplexity"), "-m", path, "-f", text, "-c", str(PPL_CTX),
           "-b", str(PPL_CTX), "-t", "2", "-nr"]
    for _ in range(8):  # llama.cpp's log thread can lose the last line at exit
        r = subprocess.run(cmd, capture_output=True, text=True)
        log = r.stdout + r.stderr
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
        if r.returncode == 0 and m:
            break
    else:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), r.returncode, log[-2000:]))
    n = int(re.search(r"calculating perplexity over (\d+) chunks", log).group(1))
    return {"command": "llama-perplexity -m %s -f %s -c %d -b %d -t 2 -nr" % (os.path.basename(path), PPL_TEXT,
                                                                              PPL_CTX, PPL_CTX),
            "llama_cpp": float(m.group(1)), "chunks": n, "ctx": PPL_CTX}


def one_file(gguf, llama, exe, out, v, c, cg, f32, qt, text, ids, commit):
    """Quantises f32 to qt and writes the file's expected figures."""
    lib = os.path.join(llama, "build", "bin")
    name = "%s-wide-%s" % (v, qt.lower())
    q = os.path.join(out, name + ".gguf")
    subprocess.run([os.path.join(lib, "llama-quantize"), f32, q, qt], check=True, capture_output=True)
    types = sorted({t.tensor_type.name for t in gguf.GGUFReader(q).tensors})
    Wq = G.back_to_hf(gguf, v, c, q)
    with torch.no_grad():
        pre, gids, dec = G.greedy(Wq, cg, R.PROMPT, G.N_GEN)
        ref_ppl, n_scored = reference_ppl(Wq, cg, ids)
    r = subprocess.run([exe, q, "64", str(G.N_GEN), text] + [str(t) for t in R.PROMPT], check=True,
                       capture_output=True, text=True)
    lc = json.loads(r.stdout)
    assert lc["text_ids"] == ids, v
    ppl = llamacpp_ppl(llama, q, text)
    assert n_scored == ppl["chunks"] * (PPL_CTX - PPL_CTX // 2 - 1)
    ppl["reference"] = round(ref_ppl, 6)
    path = os.path.join(out, name + ".expected.json")
    L.write_expected(path, name, qt.lower(), pre, dec, R.PROMPT, gids)
    with open(path) as f:
        ex = json.load(f)
    ex["llamacpp"] = {"greedy_ids": lc["greedy_ids"], "prefill_logits": lc["prefill_logits"],
                      "command": "tools/llamacpp_logits.c, llama.cpp de3ff81, F16 KV, 2 threads"}
    ex["perplexity"] = ppl
    ex["config"] = c
    with open(path, "w") as f:
        json.dump(ex, f, separators=(",", ":"))
        f.write("\n")
    d = float((torch.tensor(lc["prefill_logits"], dtype=torch.float64) - pre).abs().max())
    s = {"file": name + ".gguf", "bytes": os.path.getsize(q), "types": types, "greedy": gids,
         "llama_cpp_greedy": lc["greedy_ids"], "prefill_llama_cpp_vs_reference": round(d, 4),
         "llama_cpp_ppl": ppl["llama_cpp"], "reference_ppl": ppl["reference"], "chunks": ppl["chunks"]}
    print(json.dumps(s))
    if commit and name in COMMIT:
        os.makedirs(commit, exist_ok=True)
        for fn in (name + ".gguf", name + ".expected.json"):
            with open(os.path.join(out, fn), "rb") as a, open(os.path.join(commit, fn), "wb") as b:
                b.write(a.read())
    return s


def main(argv):
    if len(argv) not in (4, 6) or argv[2] != "--llama-cpp" or (len(argv) == 6 and argv[4] != "--commit"):
        sys.exit(__doc__)
    out, llama = argv[1], argv[3]
    commit = argv[5] if len(argv) == 6 else None
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    import gguf  # noqa: E402
    os.makedirs(out, exist_ok=True)
    lib = os.path.join(llama, "build", "bin")
    exe = os.path.join(out, "llamacpp_logits")
    subprocess.run(["cc", "-O2", "-std=c11", "-I" + os.path.join(llama, "include"),
                    "-I" + os.path.join(llama, "ggml", "include"), "-o", exe, os.path.join(HERE, "llamacpp_logits.c"),
                    "-L" + lib, "-lllama", "-Wl,-rpath," + lib], check=True)
    text = os.path.join(ROOT, PPL_TEXT)
    ids = text_ids(text)
    summary = []
    for i, v in enumerate(G.ARCH):
        c = wide_config(v)
        cg = dict(c, query_pre_attn_scalar=c["head_dim"]) if G.ARCH[v].startswith("gemma") else c
        # every matrix scaled by sqrt(32 / 256), the fixtures' width over
        # this one, so activations and logits keep the fixtures' sizes
        W = {k: t * (R.BASE["hidden_size"] / c["hidden_size"]) ** 0.5 if t.dim() == 2 else t
             for k, t in R.make_weights(v, c, 100 + i).items()}
        f32 = os.path.join(out, v + "-wide-f32.gguf")
        G.write_f32(gguf, v, c, W, f32, byte_vocab(c["vocab_size"]))
        for qt in TYPES:
            summary.append(one_file(gguf, llama, exe, out, v, c, cg, f32, qt, text, ids, commit))
    with open(os.path.join(out, "kquant_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    if commit:
        with open(os.path.join(commit, "kquant_summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv)
