#!/usr/bin/python3
"""GGUF fixtures for kvlm's parity tests, converted from the Hugging Face
fixtures by tools/write_gguf.py.

Usage:
    make_gguf_fixtures.py OUTDIR [--all]

Writes into OUTDIR (tests/fixtures/llama_gguf):
    gqa_f32.gguf, gqa_f16.gguf, gqa_bf16.gguf, gqa_q8_0.gguf, gqa_q4_0.gguf
        tests/fixtures/llama/gqa (Llama, 4 query heads over 2 KV heads) with
        its matrices stored in each type (vectors stay F32), q/k rows in
        GGUF's interleaved rotary order. The F16 and BF16 files are converted
        from gqa_f16 and gqa_bf16 (the same weights already rounded, norms
        included), the others from gqa.
    gpt2_f32.gguf
        tests/fixtures/gpt2/hf_f32 (GPT-2, tied head, no tokenizer).
    qwen3_q8_0.gguf, phi3_q8_0.gguf, mistral_swa_q8_0.gguf
        tests/fixtures/llama/qwen3 (architecture qwen3: attn_q_norm /
        attn_k_norm, head_dim 24 != 64 / 4), phi3 (architecture phi3: fused
        attn_qkv, ffn_up holding [gate; up], phi3.attention.sliding_window 7)
        and mistral_swa (architecture llama, llama.attention.sliding_window
        5) with Q8_0 matrices, each with its own .expected.json.
    gqa_q8_0.expected.json, gqa_q4_0.expected.json
        logits (the .expected.json format of every fixture) computed in float64
        by tools/llama_reference.py from the weights as the file stores them
        (dequantised), with the interleaved rotary pairing.
    manifest.json
        for every .gguf: the expected-logits file to compare with (the F32,
        F16 and BF16 files hold exactly the weights of an existing Hugging Face
        fixture, so they reuse its .expected.json; the script recomputes those
        logits from the GGUF file and checks they agree to 2e-8, the JSON's
        9 significant digits), the weight
        type, and the measured error of a float32 forward.

--all also writes (for local checks, not committed) the mha, mqa, qwen2 and
llama3_rope variants in F32 and Q8_0, each with its own expected logits.

When gguf-py (llama.cpp's Python package) can be imported (put its
directory on PYTHONPATH), every file written is also read back with
gguf.GGUFReader and its tensor names and metadata keys are checked against
gguf-py's tables for the architecture (MODEL_TENSORS / TENSOR_NAMES, Keys);
without it that check is skipped with a note.

Deterministic: re-running gives byte-identical files. Needs python3-torch
and python3-numpy.
"""
import json, os, sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import write_gguf as wg  # noqa: E402
import llama_reference as ref  # noqa: E402
import make_llama_fixtures as mlf  # noqa: E402
import make_gpt2_fixtures as mgf  # noqa: E402

LLAMA_DIR = os.path.join("tests", "fixtures", "llama")
GPT2_DIR = os.path.join("tests", "fixtures", "gpt2")
# suggested bound on max |logit error| for an engine with f32 activations and
# an f32 KV cache: every file's float32 forward stays within 2e-5 of the
# float64 expected logits (the quantised kernels compute with the exact
# dequantised weights, so they are held to the same bound)
TOLERANCE = 1e-4


def rel(p):
    return os.path.relpath(p, ROOT)


# ---------------------------------------------------------------- GGUF -> reference weights

def llama_from_gguf(path, hf_config):
    """(weights keyed by Hugging Face names, config) from a llama/qwen2 GGUF file;
    q/k rows stay as stored (interleaved for arch llama)."""
    meta, ts = wg.read_gguf(path)
    arch = meta["general.architecture"]
    m = lambda k, d=None: meta.get(arch + "." + k, d)
    window = m("attention.sliding_window", 0)
    mt = arch if arch in ("qwen2", "qwen3", "phi3") else "mistral" if window else "llama"
    cfg = {"model_type": mt, "sliding_window": window or None, "hidden_size": m("embedding_length"),
           "intermediate_size": m("feed_forward_length"), "num_hidden_layers": m("block_count"),
           "num_attention_heads": m("attention.head_count"), "num_key_value_heads": m("attention.head_count_kv"),
           "head_dim": m("attention.key_length"), "max_position_embeddings": m("context_length"),
           "vocab_size": m("vocab_size"), "rms_norm_eps": m("attention.layer_norm_rms_epsilon"),
           "rope_theta": m("rope.freq_base"), "tie_word_embeddings": "output.weight" not in ts,
           "rope_scaling": None}
    if "rope_freqs.weight" in ts:
        # the reference takes rope_scaling; check the stored factors are the ones it implies
        cfg["rope_scaling"] = hf_config["rope_scaling"]
        plain = dict(cfg, rope_scaling=None)
        want = (ref.rope_inv_freq(plain) / ref.rope_inv_freq(cfg)).numpy()
        got = ts["rope_freqs.weight"][2].astype(np.float64)
        assert np.allclose(got, want, rtol=1e-6), (path, got, want)
    names = {"token_embd.weight": ref.EMBED, "output_norm.weight": ref.NORM, "output.weight": ref.HEAD}
    per = {"attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
           "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
           "ffn_down.weight": "mlp.down_proj.weight", "attn_output.weight": "self_attn.o_proj.weight"}
    for p in ("q", "k", "v"):
        for kind in ("weight", "bias"):
            per["attn_%s.%s" % (p, kind)] = "self_attn.%s_proj.%s" % (p, kind)
    per.update({"attn_qkv.weight": "self_attn.qkv_proj.weight", "attn_q_norm.weight": "self_attn.q_norm.weight",
                "attn_k_norm.weight": "self_attn.k_norm.weight"})
    if arch == "phi3":
        per["ffn_up.weight"] = "mlp.gate_up_proj.weight"
    w = {}
    for name, (_, _, arr) in ts.items():
        if name == "rope_freqs.weight":
            continue
        if name.startswith("blk."):
            _, i, rest = name.split(".", 2)
            hf = ref.LAYER_FMT % int(i) + per[rest]
        else:
            hf = names[name]
        w[hf] = torch.from_numpy(arr.astype(np.float64))
    return w, cfg, arch == "llama"


def gpt2_from_gguf(path):
    meta, ts = wg.read_gguf(path)
    m = lambda k: meta["gpt2." + k]
    cfg = dict(n_layer=m("block_count"), n_head=m("attention.head_count"), n_embd=m("embedding_length"),
               n_ctx=m("context_length"), vocab_size=m("vocab_size"))
    assert abs(m("attention.layer_norm_epsilon") - mgf.LN_EPS) < 1e-9 and "output.weight" not in ts
    to = lambda a, t=False: torch.from_numpy((a.T if t else a).astype(np.float64))
    w = {"wte.weight": to(ts["token_embd.weight"][2]), "wpe.weight": to(ts["position_embd.weight"][2]),
         "ln_f.weight": to(ts["output_norm.weight"][2]), "ln_f.bias": to(ts["output_norm.bias"][2])}
    pairs = (("ln_1", "attn_norm", False), ("attn.c_attn", "attn_qkv", True), ("attn.c_proj", "attn_output", True),
             ("ln_2", "ffn_norm", False), ("mlp.c_fc", "ffn_up", True), ("mlp.c_proj", "ffn_down", True))
    for i in range(cfg["n_layer"]):
        for hf, gg, t in pairs:
            w["h.%d.%s.weight" % (i, hf)] = to(ts["blk.%d.%s.weight" % (i, gg)][2], t)
            w["h.%d.%s.bias" % (i, hf)] = to(ts["blk.%d.%s.bias" % (i, gg)][2])
    return w, cfg


# ---------------------------------------------------------------- gguf-py cross-check

def check_with_gguf_py(path):
    """Reads path with llama.cpp's gguf-py and checks every tensor name and
    metadata key against its tables for the file's architecture. Returns a
    note, or None when gguf-py cannot be imported."""
    try:
        import gguf
    except ImportError:
        return None
    r = gguf.GGUFReader(path)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    march = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    allowed = set()
    for t in gguf.MODEL_TENSORS[march]:
        base = gguf.TENSOR_NAMES[t]
        for i in range(64):
            for suffix in (".weight", ".bias"):
                allowed.add(base.format(bid=i) + suffix)
    bad = [t.name for t in r.tensors if t.name not in allowed]
    assert not bad, (path, "tensor names gguf-py does not know for %s" % arch, bad)
    keys = set()

    def collect(ns, depth=0):
        for name in dir(ns):
            if name.startswith("_"):
                continue
            v = getattr(ns, name)
            if isinstance(v, str):
                keys.add(v.replace("{arch}", arch))
            elif isinstance(v, type) and depth < 3:
                collect(v, depth + 1)
    collect(gguf.Keys)
    unknown = [k for k in r.fields if not k.startswith("GGUF.") and k not in keys]
    assert not unknown, (path, "metadata keys gguf-py does not know", unknown)
    mine, _ = wg.read_gguf(path, dequant=False)
    assert len(r.tensors) == len(_), path
    return "gguf-py %s: %d tensors, %d keys known" % (arch, len(r.tensors), len(mine))


# ---------------------------------------------------------------- logits

def max_diff(a, b):
    return max((a[0] - b[0]).abs().max().item(), (a[1] - b[1]).abs().max().item())


def load_expected(path):
    with open(path) as f:
        e = json.load(f)
    return torch.tensor(e["prefill_logits"], dtype=torch.float64), torch.tensor(e["decode_logits"], dtype=torch.float64)


def one(outdir, name, src, qtype, family, reuse, manifest, baseline):
    out = os.path.join(outdir, name + ".gguf")
    wg.convert(src, out, qtype, quiet=True)
    if family == "gpt2":
        w, cfg = gpt2_from_gguf(out)
        exp = mgf.reference(w, cfg)
        f32 = mgf.reference(w, cfg, dt=torch.float32)
        prompt, decode = mgf.PROMPT, mgf.DECODE
    else:
        with open(os.path.join(src, "config.json")) as f:
            hf_cfg = json.load(f)
        w, cfg, inter = llama_from_gguf(out, hf_cfg)
        exp = ref.reference(w, cfg, mlf.PROMPT, mlf.DECODE, rope_interleaved=inter)
        f32 = ref.reference(w, cfg, mlf.PROMPT, mlf.DECODE, rope_interleaved=inter, dtype=torch.float32)
        prompt, decode = mlf.PROMPT, mlf.DECODE
    f32_err = max_diff([t.double() for t in f32], exp)
    if reuse:
        d = max_diff(load_expected(os.path.join(ROOT, reuse)), exp)
        assert d < 2e-8, (name, reuse, d)  # 9 significant digits in the JSON
        expected = reuse
    else:
        expected = rel(os.path.join(outdir, name + ".expected.json"))
        mgf.write_expected(os.path.join(outdir, name + ".expected.json"), name, qtype, exp[0], exp[1],
                           prompt, decode)
        d = max_diff(load_expected(os.path.join(outdir, name + ".expected.json")), exp)
        assert d < 1e-7, (name, d)
    quant_shift = max_diff(exp, baseline) if baseline is not None else 0.0
    note = check_with_gguf_py(out)
    print("  %s" % (note or "gguf-py not importable: names and keys not cross-checked"))
    manifest.append({"gguf": rel(out), "expected": expected, "weights_dtype": qtype, "source": rel(src),
                     "architecture": wg.read_gguf(out, dequant=False)[0]["general.architecture"],
                     "f32_forward_max_error": float("%.2g" % f32_err), "tolerance": TOLERANCE,
                     "max_logit_shift_from_f32_weights": float("%.2g" % quant_shift)})
    print("%-18s %-5s %8d bytes  f32-forward err %.1e  vs f32 weights %.3g  expected %s" %
          (name, qtype, os.path.getsize(out), f32_err, quant_shift, expected))
    return exp


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit(__doc__)
    outdir, every = argv[0], "--all" in argv[1:]
    os.makedirs(outdir, exist_ok=True)
    manifest = []
    base = None
    # F16 and BF16 are converted from the fixtures already rounded to them, so
    # that the F32 vectors (norms) hold the same values and the logits agree
    for qt, src, reuse in (("f32", "gqa", "gqa.expected.json"), ("f16", "gqa_f16", "gqa_f16.expected.json"),
                           ("bf16", "gqa_bf16", "gqa_bf16.expected.json"), ("q8_0", "gqa", None),
                           ("q4_0", "gqa", None)):
        e = one(outdir, "gqa_" + qt, os.path.join(ROOT, LLAMA_DIR, src), qt, "llama",
                reuse and os.path.join(LLAMA_DIR, reuse), manifest, base)
        base = e if base is None else base
    one(outdir, "gpt2_f32", os.path.join(ROOT, GPT2_DIR, "hf_f32"), "f32", "gpt2",
        os.path.join(GPT2_DIR, "hf_f32.expected.json"), manifest, None)
    for v in ("qwen3", "phi3", "mistral_swa"):
        one(outdir, v + "_q8_0", os.path.join(ROOT, LLAMA_DIR, v), "q8_0", "llama", None, manifest,
            load_expected(os.path.join(ROOT, LLAMA_DIR, v + ".expected.json")))
    if every:
        for v in ("mha", "mqa", "qwen2", "llama3_rope"):
            b = one(outdir, v + "_f32", os.path.join(ROOT, LLAMA_DIR, v), "f32", "llama",
                    os.path.join(LLAMA_DIR, v + ".expected.json"), manifest, None)
            one(outdir, v + "_q8_0", os.path.join(ROOT, LLAMA_DIR, v), "q8_0", "llama", None, manifest, b)
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
