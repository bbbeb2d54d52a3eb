#!/usr/bin/python3
"""Float64 reference of kvlm's pooled embeddings, for its fixtures and tests.

The embedding of token ids t[0..T) is computed from the model's final-normed
hidden states h[0..T) (tools/llama_reference.py final_hidden: causal
attention over the input alone, positions from 0, rmsnorm with the final
norm weight), in float64:

    mean:  (1/T) sum_i h[i]
    cls:   h[0]
    last:  h[T-1]

and each pooled vector v is written raw and L2-normalised (v / |v|).

Command line:
    embed_reference.py make OUTDIR
        OUTDIR/qwen3.expected.json: the inputs below through the Qwen3
        fixture (tests/fixtures/llama/qwen3, f32 weights), every pooling,
        raw and normalised; OUTDIR/qwen3_mean_f32.gguf: the same weights as
        a GGUF with qwen3.pooling_type = 1 (mean), for the GGUF pooling
        path (tools/write_gguf.py's converter; the rows of q/k are permuted
        to GGUF's rotary layout, so its hidden states are the same).
    embed_reference.py check DIR EXPECTED.json
        recompute a fixture; print the largest difference.
"""
import json, os, sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama_reference as ref  # noqa: E402
import write_gguf  # noqa: E402

MODEL = "tests/fixtures/llama/qwen3"
# Inputs of different lengths (the fixture's context is 64 tokens): a
# longer one, a pair, a single token, one that repeats the first's start.
INPUTS = [[1, 17, 200, 45, 9, 133, 7, 81, 250, 3, 64, 12],
          [2, 99],
          [42],
          [1, 17, 200, 45, 9, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 30, 31, 32, 33, 34, 35,
           36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50]]
POOLINGS = ("mean", "cls", "last")


def pool(h, how):
    """h [T, C] float64 -> the pooled vector [C]."""
    if how == "mean":
        return h.mean(0)
    if how == "cls":
        return h[0]
    if how == "last":
        return h[-1]
    raise ValueError("pooling %r: mean, cls or last" % how)


def embeddings(weights, config, inputs):
    """{pooling: {"raw": [[...]], "normalized": [[...]]}} for every input."""
    out = {p: {"raw": [], "normalized": []} for p in POOLINGS}
    for ids in inputs:
        h = ref.final_hidden(weights, config, ids, torch.float64)
        for p in POOLINGS:
            v = pool(h, p)
            out[p]["raw"].append(v.tolist())
            out[p]["normalized"].append((v / v.norm()).tolist())
    return out


def write(path, model, inputs, emb):
    rows = lambda m: ",\n      ".join("[" + ",".join("%.12g" % x for x in r) + "]" for r in m)
    with open(path, "w") as f:
        f.write('{"model": "%s", "inputs": %s,\n "poolings": {\n' % (model, json.dumps(inputs)))
        parts = []
        for p in POOLINGS:
            parts.append('  "%s": {\n   "raw": [\n      %s],\n   "normalized": [\n      %s]}' %
                         (p, rows(emb[p]["raw"]), rows(emb[p]["normalized"])))
        f.write(",\n".join(parts) + "}}\n")


def make_gguf(hf_dir, out, pooling_type):
    orig = write_gguf.plan_llama

    def plan(ck):
        p = orig(ck)
        p.meta("pooling_type", write_gguf.U32, pooling_type)
        return p
    write_gguf.plan_llama = plan
    try:
        write_gguf.convert(hf_dir, out, "f32", name="qwen3-embed-mean")
    finally:
        write_gguf.plan_llama = orig


def main(argv):
    if len(argv) == 3 and argv[1] == "make":
        outdir = argv[2]
        os.makedirs(outdir, exist_ok=True)
        weights, config = ref.load_hf(MODEL)
        write(os.path.join(outdir, "qwen3.expected.json"), MODEL, INPUTS, embeddings(weights, config, INPUTS))
        make_gguf(MODEL, os.path.join(outdir, "qwen3_mean_f32.gguf"), 1)
        return 0
    if len(argv) == 4 and argv[1] == "check":
        exp = json.load(open(argv[3]))
        weights, config = ref.load_hf(argv[2])
        got = embeddings(weights, config, exp["inputs"])
        err = max(abs(a - b) for p in POOLINGS for k in ("raw", "normalized")
                  for ra, rb in zip(got[p][k], exp["poolings"][p][k]) for a, b in zip(ra, rb))
        print("max |difference| %.3g" % err)
        return 0 if err < 1e-9 else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
