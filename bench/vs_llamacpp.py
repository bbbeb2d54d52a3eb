#!/usr/bin/python3
"""kvlm against llama.cpp on the same GGUF file, side by side.

    bench/vs_llamacpp.py --llama-bench PATH/llama-bench [--kvlm build/kvlm]
                         [--rounds 3] [--pp 120] [--tg 48] [--threads 2]
                         [--llama-arg=-nr ...] FILE.gguf ...

For every file and round the two programs run one after the other (kvlm,
then llama-bench; the order flips every round), same threads, same prompt
length and generated tokens, KV cache in f16 in both. Each run reports
prefill (pp) and decode (tg) tokens/s; the table gives per program the
median and min-max over rounds, and the median of the per-round ratios
kvlm / llama.cpp (a ratio taken within one round, so a busy moment on a
shared machine slows both sides of it).

llama-bench's tg test decodes from an empty context and kvlm bench decodes
after its pp prompt; at these lengths the attention share is small and the
difference is noted in the output header.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run_kvlm(kvlm, path, a):
    cmd = [kvlm, "bench", "-m", path, "--pp", str(a.pp), "--tg", str(a.tg), "--repeats", str(a.repeats),
           "--threads", str(a.threads), "--kv-dtype", "f16", "--no-cache-test", "--bw-mib", "64", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    return j["pp"]["median_tok_s"], j["tg"]["median_tok_s"], j["weight_dtype"]


def run_llama(bench, path, a):
    cmd = [bench, "-m", path, "-t", str(a.threads), "-p", str(a.pp), "-n", str(a.tg), "-r", str(a.repeats),
           "-ctk", "f16", "-ctv", "f16", "-o", "json"] + a.llama_arg
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    pp = tg = None
    for row in json.loads(out):
        if row["n_prompt"] > 0 and row["n_gen"] == 0:
            pp = row["avg_ts"]
        elif row["n_gen"] > 0 and row["n_prompt"] == 0:
            tg = row["avg_ts"]
    if pp is None or tg is None:
        sys.exit(f"llama-bench gave no pp/tg rows for {path}")
    return pp, tg


def spread(xs):
    return f"{statistics.median(xs):8.1f} ({min(xs):.1f}-{max(xs):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--kvlm", default="build/kvlm")
    ap.add_argument("--llama-arg", action="append", default=[],
                    help="extra llama-bench argument (repeat), e.g. --llama-arg=-nr where its repacked "
                         "AMX kernels do not run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pp", type=int, default=120)
    ap.add_argument("--tg", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    print(f"# pp{a.pp} / tg{a.tg}, {a.threads} threads, KV f16, {a.rounds} rounds alternated, "
          f"{a.repeats} repeats per run (kvlm tg after its pp prompt, llama.cpp tg from an empty context)")
    print("| file | weights | kvlm pp t/s | llama.cpp pp t/s | pp ratio | kvlm tg t/s | llama.cpp tg t/s | tg ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for path in a.files:
        k_pp, k_tg, l_pp, l_tg = [], [], [], []
        dtype = "?"
        for r in range(a.rounds):
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for who in order:
                if who == 0:
                    p, t, dtype = run_kvlm(a.kvlm, path, a)
                    k_pp.append(p), k_tg.append(t)
                else:
                    p, t = run_llama(a.llama_bench, path, a)
                    l_pp.append(p), l_tg.append(t)
        rpp = statistics.median(k / l for k, l in zip(k_pp, l_pp))
        rtg = statistics.median(k / l for k, l in zip(k_tg, l_tg))
        print(f"| {os.path.basename(path)} | {dtype} | {spread(k_pp)} | {spread(l_pp)} | {rpp:.2f}x "
              f"| {spread(k_tg)} | {spread(l_tg)} | {rtg:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
