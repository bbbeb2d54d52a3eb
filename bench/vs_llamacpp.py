#!/usr/bin/python3
"""kvlm against llama.cpp on the same GGUF file, side by side.

    bench/vs_llamacpp.py --llama-bench PATH/llama-bench [--kvlm build/kvlm]
                         [--rounds 3] [--pp 120] [--tg 48] [--depth D] [--threads 2]
                         [--contend] [--llama-arg=-nr ...] FILE.gguf ...

For every file and round the two programs run one after the other (kvlm,
then llama-bench; the order flips every round), same threads, same prompt
length and generated tokens, KV cache in f16 in both. Each run reports
prefill (pp) and decode (tg) tokens/s. kvlm bench decodes after its pp
prompt, so llama-bench's tg test runs at depth pp (-d) to decode over the
same context. --depth D decodes after a context of D tokens instead
(llama-bench -d D, kvlm bench --depth D): both compute that context once
per run, untimed, and reuse it for every repeat (llama-bench restores its
saved state, kvlm finds it in its prefix cache).

The table gives per program the median and min-max over rounds, and the
per-round ratios kvlm / llama.cpp: their median and, in brackets, the
worst and best round (a ratio taken within one round, so a busy moment on
a shared machine slows both sides of it). --contend runs one busy process
(`yes`) pinned to CPU 0 during every run of both programs: the shared
machine case.

A second table puts decode against memory: the bytes one decode step
reads (kvlm's count for the file: every weight matrix in full, the output
head, one row of each embedding table), each program's tg
tokens/s times those bytes, and the plain read of the same bytes that kvlm
bench times between its decode repeats (its paired roofline, JSON
roofline.paired.read_gbs) in the same round, with each program's share of
that read. Where both shares are near 1, decode runs at the memory's rate
in both programs and no kernel can widen the tg ratio.
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
    if a.depth:
        cmd += ["--depth", str(a.depth)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    read = j["roofline"].get("paired", {}).get("read_gbs", 0.0)
    return j["pp"]["median_tok_s"], j["tg"]["median_tok_s"], j["weight_dtype"], j["decode_bytes_per_token"], read


def llama_rows(bench, path, a, extra):
    cmd = [bench, "-m", path, "-t", str(a.threads), "-r", str(a.repeats), "-ctk", "f16", "-ctv", "f16",
           "-o", "json"] + extra + a.llama_arg
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def run_llama(bench, path, a):
    pp = [r["avg_ts"] for r in llama_rows(bench, path, a, ["-p", str(a.pp), "-n", "0"])]
    depth = a.depth or a.pp
    tg = [r["avg_ts"] for r in llama_rows(bench, path, a, ["-p", "0", "-n", str(a.tg), "-d", str(depth)])]
    if len(pp) != 1 or len(tg) != 1:
        sys.exit(f"llama-bench gave no pp/tg rows for {path}")
    return pp[0], tg[0]


def contended(fn, on):
    """fn() with, if on, a busy process pinned to CPU 0 for its duration."""
    if not on:
        return fn()
    busy = subprocess.Popen(["taskset", "-c", "0", "yes"], stdout=subprocess.DEVNULL)
    try:
        return fn()
    finally:
        busy.kill()
        busy.wait()


def spread(xs):
    return f"{statistics.median(xs):8.1f} ({min(xs):.1f}-{max(xs):.1f})"


def gbs(tok_s, nbytes):
    """Decode tokens/s as GB/s of weights read (nbytes per token)."""
    return [t * nbytes / 1e9 for t in tok_s]


def ratios(ks, ls, unit="x"):
    r = [k / l for k, l in zip(ks, ls) if l > 0]
    if not r:
        return "-"
    return f"{statistics.median(r):.2f}{unit} ({min(r):.2f}-{max(r):.2f})"


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
    ap.add_argument("--depth", type=int, default=0, help="decode after D tokens of context (default: after pp)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--contend", action="store_true",
                    help="a busy process pinned to CPU 0 during every run of both programs")
    a = ap.parse_args()
    print(f"# pp{a.pp} / tg{a.tg} after {a.depth or a.pp}, {a.threads} threads, KV f16, {a.rounds} rounds alternated, "
          f"{a.repeats} repeats per run{', busy process on CPU 0' if a.contend else ''}; "
          f"ratios: median (worst-best round)")
    print("| file | weights | kvlm pp t/s | llama.cpp pp t/s | pp ratio | kvlm tg t/s | llama.cpp tg t/s | tg ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    memory = []
    for path in a.files:
        k_pp, k_tg, l_pp, l_tg, reads = [], [], [], [], []
        dtype, nbytes = "?", 0
        for r in range(a.rounds):
            order = (0, 1) if r % 2 == 0 else (1, 0)
            for who in order:
                if who == 0:
                    p, t, dtype, nbytes, read = contended(lambda: run_kvlm(a.kvlm, path, a), a.contend)
                    k_pp.append(p), k_tg.append(t), reads.append(read)
                else:
                    p, t = contended(lambda: run_llama(a.llama_bench, path, a), a.contend)
                    l_pp.append(p), l_tg.append(t)
        print(f"| {os.path.basename(path)} | {dtype} | {spread(k_pp)} | {spread(l_pp)} | {ratios(k_pp, l_pp)} "
              f"| {spread(k_tg)} | {spread(l_tg)} | {ratios(k_tg, l_tg)} |", flush=True)
        memory.append((path, nbytes, gbs(k_tg, nbytes), gbs(l_tg, nbytes), reads))
    print()
    print(f"# decode against memory: GB/s = tg tokens/s x bytes per token; plain read: kvlm bench's paired read "
          f"of the same bytes in the same round; shares per round: median (lowest-highest)")
    print("| file | bytes per token | kvlm tg GB/s | llama.cpp tg GB/s | plain read GB/s | kvlm / read "
          "| llama.cpp / read |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for path, nbytes, k_gbs, l_gbs, reads in memory:
        print(f"| {os.path.basename(path)} | {nbytes / 1e6:,.1f} MB | {spread(k_gbs)} | {spread(l_gbs)} "
              f"| {spread(reads)} | {ratios(k_gbs, reads, '')} | {ratios(l_gbs, reads, '')} |")


if __name__ == "__main__":
    main()
