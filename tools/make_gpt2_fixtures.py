#!/usr/bin/python3
"""Reference GPT-2 fixtures for kvlm's loaders and forward pass.

Usage:
    make_gpt2_fixtures.py OUTDIR
        Writes one tiny random-weight GPT-2 (n_layer 2, n_head 4, n_embd 64,
        n_ctx 32, vocab 200) in five on-disk layouts, plus the logits each
        one must produce:

        hf_f32/             config.json + model.safetensors, F32, names without
                            a prefix (wte.weight, h.0.attn.c_attn.weight, ...),
                            with the h.{i}.attn.bias causal-mask buffers that old
                            checkpoints carry (a loader must ignore them).
        hf_f16/             F16, names with the "transformer." prefix, tied head.
        hf_bf16_sharded/    BF16, prefixed names, two shards + index json, and an
                            explicit lm_head.weight equal to wte.
        llmc_f32.bin        llm.c checkpoint, version 3 (fp32), vocab padded to 256.
        llmc_bf16.bin       llm.c checkpoint, version 5 (bf16).
        <variant>.expected.json
                            prompt, decode tokens, prefill logits for every
                            prompt position and the logits after each decode
                            token (full recomputation, float64).

        All variants hold the same model; each reference is computed in
        float64 from the weights exactly as stored in that file (after
        rounding to f16/bf16), so only the engine's arithmetic differs.
        The output is deterministic: re-running gives byte-identical files.
        Every file is read back and checked before the script finishes.

    make_gpt2_fixtures.py --gpt2-124m-safetensors DIR [--dtype f32|f16|bf16]
        Writes a random-weight model with the exact GPT-2 124M shapes in the
        Hugging Face layout (about 500 MB at f32), without expected logits,
        for timing the loader on a realistic size.  Keep it out of the repo.
"""
import argparse, json, math, os, struct, sys

import numpy as np
import torch

SEED = 20240326
TINY = dict(n_layer=2, n_head=4, n_embd=64, n_ctx=32, vocab_size=200)
GPT2_124M = dict(n_layer=12, n_head=12, n_embd=768, n_ctx=1024, vocab_size=50257)
PROMPT = [199, 17, 42, 103, 0, 150, 88, 3]
DECODE = [64, 198, 123, 1, 31, 77, 5, 142]
LN_EPS = 1e-5
LLMC_MAGIC = 20240326
# std of the random matrices, chosen so the final logits spread over a few units
# and attention is far from uniform
STD = dict(wte=0.3, wpe=0.3, c_attn=0.4, attn_proj=0.08, c_fc=0.08, mlp_proj=0.08)

TORCH_DTYPE = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ST_NAME = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
ST_SIZE = {"F32": 4, "F16": 2, "BF16": 2}
HF_DTYPE_NAME = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
LAYER_KEYS = ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
              "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
              "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"]


# ---------------------------------------------------------------- the model

def make_weights(cfg):
    """Random float32 weights keyed by unprefixed HF names, Conv1D layout [in, out]."""
    g = torch.Generator().manual_seed(SEED)
    C, V, T = cfg["n_embd"], cfg["vocab_size"], cfg["n_ctx"]
    rnd = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float32)
    ln_w = lambda: 1.0 + 0.1 * rnd(C)
    bias = lambda n: 0.05 * rnd(n)
    w = {"wte.weight": STD["wte"] * rnd(V, C), "wpe.weight": STD["wpe"] * rnd(T, C)}
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = ln_w(), bias(C)
        w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"] = STD["c_attn"] * rnd(C, 3 * C), bias(3 * C)
        w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = STD["attn_proj"] * rnd(C, C), bias(C)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = ln_w(), bias(C)
        w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = STD["c_fc"] * rnd(C, 4 * C), bias(4 * C)
        w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = STD["mlp_proj"] * rnd(4 * C, C), bias(C)
    w["ln_f.weight"], w["ln_f.bias"] = ln_w(), bias(C)
    return w


def rounded(w, dtype):
    """The weights as a file of this dtype stores them (round to nearest even)."""
    return {k: v.to(TORCH_DTYPE[dtype]) for k, v in w.items()}


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + LN_EPS) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(w, cfg, tokens, dt=torch.float64, kv_f16=False):
    """Logits [T, V] for every position of `tokens` (causal), computed in `dt`.
    kv_f16 rounds K and V to f16 as an f16 KV cache would (for tolerance estimates)."""
    W = {k: v.to(dt) for k, v in w.items()}
    C, nh = cfg["n_embd"], cfg["n_head"]
    hd, T = C // nh, len(tokens)
    x = W["wte.weight"][tokens] + W["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        h = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"])
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (t.reshape(T, nh, hd).transpose(0, 1) for t in qkv.split(C, dim=-1))
        if kv_f16:
            k, v = k.half().to(dt), v.half().to(dt)
        att = (q @ k.transpose(1, 2)) / math.sqrt(hd)
        att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"])
        m = gelu_tanh(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        x = x + m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"])
    return x @ W["wte.weight"].T


def reference(w, cfg, **kw):
    """Prefill logits for PROMPT and, for each j, the last-position logits of
    PROMPT + DECODE[:j+1], each a full recomputation."""
    prefill = forward(w, cfg, PROMPT, **kw)
    decode = torch.stack([forward(w, cfg, PROMPT + DECODE[:j + 1], **kw)[-1]
                          for j in range(len(DECODE))])
    return prefill, decode


# ---------------------------------------------------------------- writers

def raw_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:       # numpy has no bf16: write the bit patterns
        t = t.view(torch.int16)
    return t.numpy().tobytes()          # little-endian host (checked in main)


def write_safetensors(path, tensors):
    """tensors: list of (name, torch tensor in its final dtype), packed in order."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    inv = {v: k for k, v in TORCH_DTYPE.items()}
    for name, t in tensors:
        st = ST_NAME[inv[t.dtype]]
        n = t.numel() * ST_SIZE[st]
        header[name] = {"dtype": st, "shape": list(t.shape), "data_offsets": [off, off + n]}
        off += n
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for _, t in tensors:
            f.write(raw_bytes(t))
    return off


def write_config(path, cfg, dtype):
    c = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
         "n_layer": cfg["n_layer"], "n_head": cfg["n_head"], "n_embd": cfg["n_embd"],
         "n_positions": cfg["n_ctx"], "n_ctx": cfg["n_ctx"], "vocab_size": cfg["vocab_size"],
         "layer_norm_epsilon": LN_EPS, "n_inner": None, "activation_function": "gelu_new",
         "bos_token_id": cfg["vocab_size"] - 1, "eos_token_id": cfg["vocab_size"] - 1,
         "torch_dtype": HF_DTYPE_NAME[dtype]}
    with open(path, "w") as f:
        f.write(json.dumps(c, indent=2) + "\n")


def hf_tensors(w, cfg, prefix, mask_buffers=False):
    out = [(prefix + "wte.weight", w["wte.weight"]), (prefix + "wpe.weight", w["wpe.weight"])]
    T = cfg["n_ctx"]
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        if mask_buffers:
            out.append((prefix + p + "attn.bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T)))
        out += [(prefix + p + k, w[p + k]) for k in LAYER_KEYS]
    out += [(prefix + "ln_f.weight", w["ln_f.weight"]), (prefix + "ln_f.bias", w["ln_f.bias"])]
    return out


def write_llmc(path, w, cfg, dtype):
    """llm.c checkpoint: 256 int32 header, then parameters in Linear layout [out, in]."""
    L, C, V, T = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"], cfg["n_ctx"]
    Vp = (V + 127) // 128 * 128
    hdr = [0] * 256
    hdr[:8] = [LLMC_MAGIC, 3 if dtype == "f32" else 5, T, V, L, cfg["n_head"], C, Vp]
    stack = lambda key, tr: torch.stack([w["h.%d.%s" % (i, key)].T if tr else w["h.%d.%s" % (i, key)]
                                         for i in range(L)])
    wte = torch.zeros(Vp, C, dtype=w["wte.weight"].dtype)
    wte[:V] = w["wte.weight"]
    params = [wte, w["wpe.weight"], stack("ln_1.weight", 0), stack("ln_1.bias", 0),
              stack("attn.c_attn.weight", 1), stack("attn.c_attn.bias", 0),
              stack("attn.c_proj.weight", 1), stack("attn.c_proj.bias", 0),
              stack("ln_2.weight", 0), stack("ln_2.bias", 0),
              stack("mlp.c_fc.weight", 1), stack("mlp.c_fc.bias", 0),
              stack("mlp.c_proj.weight", 1), stack("mlp.c_proj.bias", 0),
              w["ln_f.weight"], w["ln_f.bias"]]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *hdr))
        for t in params:
            f.write(raw_bytes(t))


def write_expected(path, variant, dtype, prefill, decode, prompt_ids=None, decode_ids=None):
    """The .expected.json format shared by every model family's fixtures;
    prompt_ids/decode_ids default to this file's PROMPT/DECODE."""
    prompt_ids = PROMPT if prompt_ids is None else prompt_ids
    decode_ids = DECODE if decode_ids is None else decode_ids
    rows = lambda m: ",\n    ".join("[" + ",".join("%.9g" % x for x in r) + "]" for r in m.tolist())
    with open(path, "w") as f:
        f.write('{"variant": "%s", "weights_dtype": "%s",\n' % (variant, dtype))
        f.write(' "prompt": %s,\n "decode": %s,\n' % (json.dumps(prompt_ids), json.dumps(decode_ids)))
        f.write(' "prefill_logits": [\n    %s],\n' % rows(prefill))
        f.write(' "decode_logits": [\n    %s]}\n' % rows(decode))


# ---------------------------------------------------------------- readers (self-check)

def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    assert n % 8 == 0 and 8 + n <= len(data), path
    header = json.loads(data[8:8 + n])
    body, out, end = data[8 + n:], {}, 0
    np_dt = {"F32": np.float32, "F16": np.float16}
    for name, e in sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                          key=lambda kv: kv[1]["data_offsets"][0]):
        b, en = e["data_offsets"]
        assert b == end and en - b == math.prod(e["shape"]) * ST_SIZE[e["dtype"]], (path, name)
        raw = body[b:en]
        if e["dtype"] == "BF16":
            bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(raw, np.dtype(np_dt[e["dtype"]]).newbyteorder("<"))
        out[name] = (e["dtype"], torch.from_numpy(arr.astype(np.float64)).reshape(e["shape"]))
        end = en
    assert end == len(body), path
    return out


def read_llmc(path, cfg):
    data = open(path, "rb").read()
    hdr = struct.unpack("<256i", data[:1024])
    L, C, V, T = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"], cfg["n_ctx"]
    assert hdr[0] == LLMC_MAGIC and hdr[1] in (3, 5) and hdr[2:8] == (T, V, L, cfg["n_head"], C, 256)
    assert not any(hdr[8:])
    Vp, esz = hdr[7], 4 if hdr[1] == 3 else 2
    shapes = [(Vp, C), (T, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
              (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]
    off, ps = 1024, []
    for s in shapes:
        n = math.prod(s)
        raw = data[off:off + n * esz]
        arr = (np.frombuffer(raw, "<f4") if esz == 4 else
               (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32))
        ps.append(torch.from_numpy(arr.astype(np.float64)).reshape(s))
        off += n * esz
    assert off == len(data), path
    assert not ps[0][V:].any(), "padded vocabulary rows must be zero"
    w = {"wte.weight": ps[0][:V], "wpe.weight": ps[1], "ln_f.weight": ps[14], "ln_f.bias": ps[15]}
    for i in range(L):
        for k, idx, tr in [("ln_1.weight", 2, 0), ("ln_1.bias", 3, 0), ("attn.c_attn.weight", 4, 1),
                           ("attn.c_attn.bias", 5, 0), ("attn.c_proj.weight", 6, 1),
                           ("attn.c_proj.bias", 7, 0), ("ln_2.weight", 8, 0), ("ln_2.bias", 9, 0),
                           ("mlp.c_fc.weight", 10, 1), ("mlp.c_fc.bias", 11, 0),
                           ("mlp.c_proj.weight", 12, 1), ("mlp.c_proj.bias", 13, 0)]:
            w["h.%d.%s" % (i, k)] = ps[idx][i].T if tr else ps[idx][i]
    return w


def hf_weights_from(named, cfg, dtype):
    """Map a read-back safetensors dict onto unprefixed names; check dtypes and extras."""
    w, T = {}, cfg["n_ctx"]
    for name, (st, t) in named.items():
        name = name[len("transformer."):] if name.startswith("transformer.") else name
        if name == "lm_head.weight" or (name.endswith(".attn.bias") and t.dim() == 4):
            continue
        assert st == ST_NAME[dtype], (name, st)
        w[name] = t
    if "lm_head.weight" in named:
        assert torch.equal(named["lm_head.weight"][1], w["wte.weight"])
    for name, (st, t) in named.items():
        if name.endswith(".attn.bias") and t.dim() == 4:
            assert st == "F32" and torch.equal(t[0, 0], torch.tril(torch.ones(T, T, dtype=t.dtype)))
    return w


# ---------------------------------------------------------------- main

def write_fixtures(outdir):
    cfg = TINY
    master = make_weights(cfg)
    os.makedirs(outdir, exist_ok=True)
    by_dtype = {d: rounded(master, d) for d in TORCH_DTYPE}
    variants = [("hf_f32", "f32"), ("hf_f16", "f16"), ("hf_bf16_sharded", "bf16"),
                ("llmc_f32", "f32"), ("llmc_bf16", "bf16")]

    d = os.path.join(outdir, "hf_f32")
    os.makedirs(d, exist_ok=True)
    write_config(os.path.join(d, "config.json"), cfg, "f32")
    write_safetensors(os.path.join(d, "model.safetensors"),
                      hf_tensors(by_dtype["f32"], cfg, "", mask_buffers=True))

    d = os.path.join(outdir, "hf_f16")
    os.makedirs(d, exist_ok=True)
    write_config(os.path.join(d, "config.json"), cfg, "f16")
    write_safetensors(os.path.join(d, "model.safetensors"),
                      hf_tensors(by_dtype["f16"], cfg, "transformer."))

    d = os.path.join(outdir, "hf_bf16_sharded")
    os.makedirs(d, exist_ok=True)
    write_config(os.path.join(d, "config.json"), cfg, "bf16")
    ts = hf_tensors(by_dtype["bf16"], cfg, "transformer.")
    ts.append(("lm_head.weight", by_dtype["bf16"]["wte.weight"].clone()))
    first = [t for t in ts if t[0].startswith(("transformer.wte", "transformer.wpe", "transformer.h.0."))]
    rest = [t for t in ts if t[0] not in {n for n, _ in first}]
    shards = [("model-00001-of-00002.safetensors", first), ("model-00002-of-00002.safetensors", rest)]
    total = sum(write_safetensors(os.path.join(d, f), part) for f, part in shards)
    index = {"metadata": {"total_size": total},
             "weight_map": {name: f for f, part in shards for name, _ in sorted(part)}}
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        f.write(json.dumps(index, indent=2) + "\n")

    write_llmc(os.path.join(outdir, "llmc_f32.bin"), by_dtype["f32"], cfg, "f32")
    write_llmc(os.path.join(outdir, "llmc_bf16.bin"), by_dtype["bf16"], cfg, "bf16")

    refs = {}
    for variant, dtype in variants:
        if dtype not in refs:
            refs[dtype] = reference(by_dtype[dtype], cfg)
        write_expected(os.path.join(outdir, variant + ".expected.json"), variant, dtype, *refs[dtype])

    # Self-check: read every file back with independent readers and recompute.
    back = {"hf_f32": hf_weights_from(read_safetensors(os.path.join(outdir, "hf_f32/model.safetensors")), cfg, "f32"),
            "hf_f16": hf_weights_from(read_safetensors(os.path.join(outdir, "hf_f16/model.safetensors")), cfg, "f16"),
            "llmc_f32": read_llmc(os.path.join(outdir, "llmc_f32.bin"), cfg),
            "llmc_bf16": read_llmc(os.path.join(outdir, "llmc_bf16.bin"), cfg)}
    d = os.path.join(outdir, "hf_bf16_sharded")
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    named = {}
    for f in sorted(set(index["weight_map"].values())):
        part = read_safetensors(os.path.join(d, f))
        assert all(index["weight_map"][n] == f for n in part)
        named.update(part)
    assert set(named) == set(index["weight_map"])
    back["hf_bf16_sharded"] = hf_weights_from(named, cfg, "bf16")
    for variant, dtype in variants:
        w = back[variant]
        assert set(w) == set(master), variant
        for k in master:
            assert torch.equal(w[k], by_dtype[dtype][k].double()), (variant, k)
        exp = json.load(open(os.path.join(outdir, variant + ".expected.json")))
        pre, dec = reference(w, cfg)
        assert exp["prompt"] == PROMPT and exp["decode"] == DECODE
        err = max((torch.tensor(exp["prefill_logits"], dtype=torch.float64) - pre).abs().max().item(),
                  (torch.tensor(exp["decode_logits"], dtype=torch.float64) - dec).abs().max().item())
        assert err < 1e-7, (variant, err)   # only the 9-digit text rounding

    # Summary, with what plain float32 arithmetic (and an f16 KV cache) costs.
    print("config:", cfg)
    for dtype, (pre, dec) in refs.items():
        allv = torch.cat([pre, dec])
        p32, d32 = reference(by_dtype[dtype], cfg, dt=torch.float32)
        p16, d16 = reference(by_dtype[dtype], cfg, dt=torch.float32, kv_f16=True)
        e32 = max((p32 - pre).abs().max().item(), (d32 - dec).abs().max().item())
        e16 = max((p16 - pre).abs().max().item(), (d16 - dec).abs().max().item())
        print("weights %-4s logit std %.3f  max|logit| %.3f  argmax(prefill) %s  "
              "f32-forward max err %.2e  f16-KV max err %.2e"
              % (dtype, allv.std().item(), allv.abs().max().item(),
                 pre.argmax(-1).tolist(), e32, e16))
    for root, _, files in sorted(os.walk(outdir)):
        for f in sorted(files):
            p = os.path.join(root, f)
            print("  %-60s %9d bytes" % (os.path.relpath(p, outdir), os.path.getsize(p)))
    print("all files read back and verified")


def write_124m(outdir, dtype):
    cfg = GPT2_124M
    os.makedirs(outdir, exist_ok=True)
    w = rounded(make_weights(cfg), dtype)
    write_config(os.path.join(outdir, "config.json"), cfg, dtype)
    n = write_safetensors(os.path.join(outdir, "model.safetensors"),
                          hf_tensors(w, cfg, "", mask_buffers=(dtype == "f32")))
    print("wrote %s (%d tensor bytes, %s)" % (outdir, n, dtype))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir", nargs="?", help="fixture directory (tiny model + expected logits)")
    ap.add_argument("--gpt2-124m-safetensors", metavar="DIR",
                    help="instead write a random GPT-2 124M-shaped HF checkpoint to DIR")
    ap.add_argument("--dtype", choices=sorted(TORCH_DTYPE), default="f32",
                    help="weight dtype for --gpt2-124m-safetensors")
    a = ap.parse_args()
    assert sys.byteorder == "little", "the writers emit host-order bytes"
    torch.manual_seed(SEED)
    if a.gpt2_124m_safetensors:
        write_124m(a.gpt2_124m_safetensors, a.dtype)
    elif a.outdir:
        write_fixtures(a.outdir)
    else:
        ap.error("give OUTDIR or --gpt2-124m-safetensors DIR")


if __name__ == "__main__":
    sys.exit(main())
