#!/usr/bin/python3
"""Cross-engine fixtures: tiny GGUF models written with llama.cpp's gguf-py
the way its converter would (tools/llamacpp_models.py), quantised with
llama.cpp's llama-quantize, with expected numbers from two independent
sources: a float64 NumPy forward on the weights gguf-py dequantises from
each file (tools/llamacpp_reference.py), and llama.cpp itself
(llama-perplexity, and tools/llamacpp_logits.c built against libllama).

Usage:
    make_llamacpp_fixtures.py OUTDIR --llama-cpp DIR [--archs A,B,...] [--commit FIXDIR [--commit-only]]

DIR is a llama.cpp source tree with a CMake build in DIR/build (bin/
llama-quantize, llama-perplexity, libllama.so); gguf-py is imported from
DIR/gguf-py. Writes into OUTDIR, for ARCH in gpt2 llama qwen2 qwen3 (or the
architectures --archs names, e.g. the mixtures of experts qwen3moe,qwen2moe,mixtral,
which get MOE_TYPES only):
    ARCH-f16.gguf                 the converter's --outtype f16 layout
    ARCH-TYPE.gguf                llama-quantize ARCH-f16.gguf OUT TYPE (its
                                  default mixes, not --pure) for TYPE in
                                  TYPES and the architecture's EXTRA_TYPES
                                  (MXFP4: see QUANTIZE_AS)
    ARCH-f16/TYPE.expected.json   see write_expected (F16 files too)
    summary.json                  every file's numbers in one list
With --commit FIXDIR, copies COMMITTED (and their .expected.json) into
FIXDIR and writes FIXDIR/manifest.json (file, sha256, bytes, architecture,
tensor types, both perplexities); --commit-only does only that, from the
files and summary.json an earlier run left in OUTDIR.

The perplexity text is tests/fixtures/shakespeare_val_slice.txt, scored
with `llama-perplexity -m FILE -f TEXT -c 128 -t 2 -nr` (chunks of 128 tokens,
BOS first when the vocabulary adds it, the second half of every chunk
scored; -nr: no weight repacking, whose AMX kernels trap where the
hypervisor does not enable AMX tiles); kvlm reproduces that protocol with
`kvlm perplexity --chunks --context 128`. Deterministic: fixed seeds;
llama-quantize is deterministic for a given build.
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

TYPES = ["Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K"]
EXTRA_TYPES = {"llama": ["Q2_K", "Q3_K_M", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS", "MXFP4"],
               "gpt2": ["Q3_K_M"], "qwen2": ["IQ4_XS"], "qwen3": ["IQ4_XS", "MXFP4"]}
# llama-quantize writes MXFP4 only for 3-D expert tensors (its MXFP4_MOE
# type); for these dense models its --tensor-type override asks for MXFP4
# attention and feed-forward matrices over a Q8_0 base
QUANTIZE_AS = {"MXFP4": ["--tensor-type", "attn=mxfp4", "--tensor-type", "ffn=mxfp4", "Q8_0"]}
# the mixtures of experts (--archs): the two types their downloads come in most
MOE_TYPES = ["Q8_0", "Q4_K_M"]
# one K-quant per architecture, each a different type, one Q8_0, one IQ4_XS,
# one MXFP4; of the mixtures of experts (tests/fixtures/moe_gguf), each
# architecture once
COMMITTED = ["gpt2-q3_k_m", "llama-q4_k_m", "qwen2-q6_k", "qwen3-q5_k_m", "qwen2-q8_0", "qwen3-iq4_xs", "llama-mxfp4",
             "qwen3moe-q4_k_m", "qwen2moe-q4_k_m", "mixtral-q8_0"]
PROMPT = "ROMEO:\nBut soft"
N_GEN = 16
PPL_TEXT = os.path.join("tests", "fixtures", "shakespeare_val_slice.txt")
PPL_CTX = 128
LLAMA_CPP_RELEASE = "de3ff81 (npm node-llama-cpp@3.22.1)"


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def build_oracle(llama, out):
    exe = os.path.join(out, "llamacpp_logits")
    lib = os.path.join(llama, "build", "bin")
    run(["cc", "-O2", "-std=c11", "-Wall", "-I" + os.path.join(llama, "include"),
         "-I" + os.path.join(llama, "ggml", "include"), "-o", exe, os.path.join(HERE, "llamacpp_logits.c"),
         "-L" + lib, "-lllama", "-Wl,-rpath," + lib])
    return exe


def llamacpp_ppl(llama, path, text):
    cmd = [os.path.join(llama, "build", "bin", "llama-perplexity"), "-m", path, "-f", text, "-c", str(PPL_CTX),
           "-t", "2", "-nr"]
    # llama.cpp logs from a background thread that can lose the last lines
    # at exit on a busy machine: a run without its final line is retried
    for _ in range(8):
        r = subprocess.run(cmd, capture_output=True, text=True)
        log = r.stdout + r.stderr
        ppl = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
        if r.returncode == 0 and ppl:
            break
    else:
        raise RuntimeError("%s: exit %d\n%s" % (" ".join(cmd), r.returncode, log[-2000:]))
    chunks = re.search(r"calculating perplexity over (\d+) chunks", log)
    shown = "llama-perplexity -m %s -f %s -c %d -t 2 -nr" % (os.path.basename(path), PPL_TEXT, PPL_CTX)
    return {"command": shown, "perplexity": float(ppl.group(1)), "stderr": float(ppl.group(2)),
            "chunks": int(chunks.group(1)), "ctx": PPL_CTX, "scored_per_chunk": PPL_CTX - PPL_CTX // 2 - 1}


def reference_ppl(model, text_ids, bos):
    """llama-perplexity's protocol on the float64 reference: chunks of
    PPL_CTX tokens of text_ids, the first replaced by bos unless it is None,
    scoring targets PPL_CTX/2 + 1 .. PPL_CTX - 1. (perplexity, count)"""
    import numpy as np
    nll, count = 0.0, 0
    for c in range(len(text_ids) // PPL_CTX):
        chunk = list(text_ids[c * PPL_CTX:(c + 1) * PPL_CTX])
        if bos is not None:
            chunk[0] = bos
        lg = model.forward(chunk)
        for j in range(PPL_CTX // 2, PPL_CTX - 1):
            row = lg[j]
            mx = row.max()
            nll += mx + np.log(np.exp(row - mx).sum()) - row[chunk[j + 1]]
            count += 1
    return float(np.exp(nll / count)), count


def rows(a, fmt="%.5f"):
    return [[float(fmt % x) for x in r] for r in a]


def write_expected(path, name, arch, gguf_types, prompt, ref_prefill, ref_ids, ref_logits, lc, ppl, text_ids_ok):
    """The .expected.json: the float64 reference (prompt ids, logits at every
    prompt position, N_GEN greedy ids and the logits each was chosen from,
    5 decimals; its perplexity under llama-perplexity's protocol),
    llama.cpp's greedy ids, perplexity and command, and how far llama.cpp's
    logits are from the reference."""
    import numpy as np
    ref_ppl = ppl.pop("reference_perplexity")
    lp = np.array(lc["prefill_logits"])
    lg = np.array(lc["greedy_logits"])
    srt = np.sort(ref_logits, axis=1)
    same = sum(1 for a, b in zip(ref_ids, lc["greedy_ids"]) if a == b)
    e = {
        "file": name + ".gguf", "architecture": arch, "tensor_types": gguf_types,
        "prompt_text": PROMPT, "prompt": prompt,
        "reference": {
            "what": "float64 NumPy forward (tools/llamacpp_reference.py) on the weights gguf-py dequantises",
            "prefill_logits": rows(ref_prefill), "greedy_ids": ref_ids, "greedy_logits": rows(ref_logits),
            "greedy_min_top2_gap": round(float((srt[:, -1] - srt[:, -2]).min()), 5),
            "perplexity": round(ref_ppl, 6)},
        "llama_cpp": {
            "release": LLAMA_CPP_RELEASE, "greedy_ids": lc["greedy_ids"],
            "greedy_ids_equal_reference": same,
            "prefill_max_abs_diff_from_reference": round(float(np.abs(lp - ref_prefill).max()), 5),
            "greedy_logits_max_abs_diff_from_reference": round(float(np.abs(lg - ref_logits).max()), 5),
            "text_tokens": len(lc["text_ids"]), "text_ids_equal_python_tokenizer": text_ids_ok,
            "perplexity": ppl},
    }
    with open(path, "w") as f:
        json.dump(e, f, separators=(",", ":"))
        f.write("\n")
    return e


def commit_subset(out, commit, summary):
    """Copies COMMITTED and their .expected.json from out into commit and
    writes commit/manifest.json."""
    os.makedirs(commit, exist_ok=True)
    man = []
    made = set(x["file"] for x in summary)
    for name in [n for n in COMMITTED if n + ".gguf" in made]:
        for suffix in (".gguf", ".expected.json"):
            shutil.copyfile(os.path.join(out, name + suffix), os.path.join(commit, name + suffix))
        p = os.path.join(commit, name + ".gguf")
        with open(p, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        s = next(x for x in summary if x["file"] == name + ".gguf")
        man.append({"gguf": name + ".gguf", "expected": name + ".expected.json", "sha256": digest,
                    "bytes": os.path.getsize(p), "architecture": name.split("-")[0], "tensor_types": s["types"],
                    "llama_cpp_perplexity": s["llama_cpp_ppl"], "reference_perplexity": s["reference_ppl"]})
    with open(os.path.join(commit, "manifest.json"), "w") as f:
        json.dump(man, f, indent=1)
        f.write("\n")


def main(argv):
    if len(argv) < 3 or argv[1] != "--llama-cpp":
        sys.exit(__doc__)
    out, llama = argv[0], argv[2]
    commit = argv[argv.index("--commit") + 1] if "--commit" in argv else None
    if "--commit-only" in argv:  # the files of an earlier run in out
        with open(os.path.join(out, "summary.json")) as f:
            commit_subset(out, commit, json.load(f))
        return
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    import gguf
    import llamacpp_models as lm
    import llamacpp_reference as ref
    os.makedirs(out, exist_ok=True)
    oracle = build_oracle(llama, out)
    text = os.path.join(ROOT, PPL_TEXT)
    with open(text, encoding="utf-8") as f:
        text_str = f.read()
    quantize = os.path.join(llama, "build", "bin", "llama-quantize")
    summary = []
    archs = argv[argv.index("--archs") + 1].split(",") if "--archs" in argv else \
        [a for a in lm.ARCHS if "experts" not in lm.ARCHS[a]]
    for arch in archs:
        f16 = os.path.join(out, arch + "-f16.gguf")
        voc = lm.write_f16(arch, f16, gguf)
        add_bos = bool(lm.ARCHS[arch]["add_bos"])
        prompt = voc.encode(PROMPT, add_bos)
        text_ids = voc.encode(text_str, add_bos)
        names = [arch + "-f16"]
        for t in MOE_TYPES if "experts" in lm.ARCHS[arch] else TYPES + EXTRA_TYPES.get(arch, []):
            name = "%s-%s" % (arch, t.lower())
            how = QUANTIZE_AS.get(t, [t])
            run([quantize] + how[:-1] + [f16, os.path.join(out, name + ".gguf"), how[-1], "2"])
            names.append(name)
        for name in names:
            path = os.path.join(out, name + ".gguf")
            m = ref.GGUFModel(path, gguf)
            types = sorted(set(m.types.values()))
            pre = m.forward(prompt)
            ids, logits = m.greedy(prompt, N_GEN)
            r = run([oracle, path, str(PPL_CTX), str(N_GEN), text] + [str(i) for i in prompt])
            lc = json.loads(r.stdout)
            ppl = llamacpp_ppl(llama, path, text)
            bos = voc.id[lm.ARCHS[arch]["bos"]] if add_bos else None
            ppl["reference_perplexity"], n_scored = reference_ppl(m, text_ids, bos)
            assert n_scored == ppl["chunks"] * ppl["scored_per_chunk"], (name, n_scored)
            e = write_expected(os.path.join(out, name + ".expected.json"), name, arch, types, prompt, pre, ids,
                               logits, lc, ppl, lc["text_ids"] == text_ids)
            s = {"file": name + ".gguf", "bytes": os.path.getsize(path), "types": types,
                 "llama_cpp_ppl": ppl["perplexity"], "reference_ppl": e["reference"]["perplexity"],
                 "chunks": ppl["chunks"],
                 "greedy_equal": e["llama_cpp"]["greedy_ids_equal_reference"],
                 "prefill_diff": e["llama_cpp"]["prefill_max_abs_diff_from_reference"],
                 "min_gap": e["reference"]["greedy_min_top2_gap"],
                 "tokens_equal": e["llama_cpp"]["text_ids_equal_python_tokenizer"]}
            summary.append(s)
            print(json.dumps(s))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    if commit:
        commit_subset(out, commit, summary)

if __name__ == "__main__":
    main(sys.argv[1:])
