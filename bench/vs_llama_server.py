#!/usr/bin/python3
"""Serving: kvlm serve against llama-server on the same GGUF file, side by side.

    bench/vs_llama_server.py --llama-server PATH/llama-server [--kvlm build/kvlm]
        [--rounds 2] [--concurrency 1,4,16] [-n 48] [--max-tokens 64]
        [--threads 2] [--kv-dtype f16] [--seed-base 1] [--lock /tmp/kvlm-bench.lock]
        [--kvlm-arg=--max-prefill-tokens=32 ...]
        FILE.gguf

Both servers are started once, on free local ports, with the same thread
count and the same KV cache type (--kv-dtype, default f16, llama-server's
own default; llama-server: -c 4096 -np 16, continuous batching, as
`llama-server -m FILE -t 2 -c 4096 -np 16 -ctk f16 -ctv f16 --port P`;
kvlm serve with `--kv-dtype f16` and its other defaults, 16 sequences).
The same closed-loop load, `kvlm loadgen --url URL --concurrency C -n N
--max-tokens M --seed S` (streamed /v1/completions, 32-token prompts of
ids, ignore_eos, temperature 1), then runs against each in turn: for
every concurrency and round kvlm first, then llama-server, the order
flipping every round. Each loadgen run takes the lock file (flock), so on a
shared machine nobody else's benchmark runs beside it; the idle server
waits on a socket meanwhile. The prompts are new in every run (the seed S
is --seed-base + 1000 x C + round, the same for both servers in a round):
a server never sees a prompt again, so neither answers from a prompt cache
(both keep one: kvlm's prefix cache, llama-server's slot and RAM caches)
and time to first token includes every prompt's prefill.

Printed per concurrency: output tokens/s and time to first token p50 for
each server, as median and min-max over rounds, and the per-round ratio
kvlm / llama-server (throughput) and llama-server / kvlm (TTFT, so > 1 means
kvlm answers sooner), median and worst. --json writes every run as well.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, what, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit(f"{what} did not answer {url}/health within {timeout} s")


def loadgen(a, url, c, seed):
    cmd = [a.kvlm, "loadgen", "--url", url, "--concurrency", str(c), "-n", str(a.n),
           "--max-tokens", str(a.max_tokens), "--seed", str(seed), "--json"]
    if a.lock:
        cmd = ["flock", a.lock] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    if j["failed"]:
        sys.exit(f"{url}: {j['failed']} of {j['requests']} requests failed")
    return j


def spread(xs, fmt="{:.1f}"):
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--kvlm", default="build/kvlm")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("-n", type=int, default=48)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-dtype", default="f16", choices=["f32", "f16", "q8_0"],
                    help="KV cache type of both servers (kvlm --kv-dtype, llama-server -ctk/-ctv)")
    ap.add_argument("--seed-base", type=int, default=1, help="prompts of run (C, round) use seed base + 1000 C + round")
    ap.add_argument("--lock", default="/tmp/kvlm-bench.lock", help="flock file per loadgen run ('' for none)")
    ap.add_argument("--kvlm-arg", action="append", default=[], help="extra kvlm serve argument (repeatable)")
    ap.add_argument("--llama-arg", action="append", default=[], help="extra llama-server argument (repeatable)")
    ap.add_argument("--json", help="write every run to this file")
    a = ap.parse_args()
    conc = [int(x) for x in a.concurrency.split(",")]

    kp, lp = free_port(), free_port()
    kurl, lurl = f"http://127.0.0.1:{kp}", f"http://127.0.0.1:{lp}"
    kvlm = subprocess.Popen([a.kvlm, "serve", "-m", a.file, "--port", str(kp), "--threads", str(a.threads),
                             "--kv-dtype", a.kv_dtype] + a.kvlm_arg, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    llama = subprocess.Popen([a.llama_server, "-m", a.file, "-t", str(a.threads), "-c", "4096", "-np", "16",
                              "-ctk", a.kv_dtype, "-ctv", a.kv_dtype, "--port", str(lp)] + a.llama_arg,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = []
    try:
        wait_ready(kurl, kvlm, "kvlm serve")
        wait_ready(lurl, llama, "llama-server")
        for c in conc:
            for r in range(a.rounds):
                order = [("kvlm", kurl), ("llama", lurl)]
                if r % 2:
                    order.reverse()
                for name, url in order:
                    j = loadgen(a, url, c, a.seed_base + 1000 * c + r)
                    runs.append({"server": name, "concurrency": c, "round": r, "result": j})
                    print(f"  c={c:<3} round {r + 1} {name:6s} {j['output_tokens_per_s']:8.1f} tok/s"
                          f"  TTFT p50 {j['ttft_ms']['p50']:8.1f} ms", file=sys.stderr, flush=True)
    finally:
        for p in (kvlm, llama):
            p.terminate()
        for p in (kvlm, llama):
            p.wait()

    print(f"{os.path.basename(a.file)}: {a.n} requests x {a.max_tokens} tokens, {a.threads} threads, "
          f"KV {a.kv_dtype}, {a.rounds} rounds; median (min-max); ratios per round: median (worst)")
    print(f"{'C':>3} | {'kvlm tok/s':>20} | {'llama tok/s':>20} | {'tok/s ratio':>14} | "
          f"{'kvlm TTFT p50 ms':>22} | {'llama TTFT p50 ms':>22} | {'TTFT llama/kvlm':>16}")
    for c in conc:
        def pick(name, key):
            return [x["result"] for x in runs if x["server"] == name and x["concurrency"] == c]
        k, l = pick("kvlm", None), pick("llama", None)
        kt = [x["output_tokens_per_s"] for x in k]
        lt = [x["output_tokens_per_s"] for x in l]
        kf = [x["ttft_ms"]["p50"] for x in k]
        lf = [x["ttft_ms"]["p50"] for x in l]
        rt = [x / y for x, y in zip(kt, lt)]
        rf = [y / x for x, y in zip(kf, lf)]
        print(f"{c:>3} | {spread(kt):>20} | {spread(lt):>20} | "
              f"{statistics.median(rt):6.2f}x ({min(rt):.2f}x) | {spread(kf):>22} | {spread(lf):>22} | "
              f"{statistics.median(rf):6.2f}x ({min(rf):.2f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
