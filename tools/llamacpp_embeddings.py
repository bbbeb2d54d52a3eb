#!/usr/bin/python3
"""kvlm's /v1/embeddings beside llama.cpp's llama-server on the same GGUF file.

For each pooling (mean, cls, last) both servers are started on MODEL with
that pooling and an f32 KV cache (llama-server --embeddings --pooling P
-ctk f32 -ctv f32; kvlm serve --pooling P --kv-dtype f32), the same inputs
are sent to both as token ids (so the two tokenizers play no part) and as
text, and the vectors (L2-normalised by both) are compared: the largest |difference| of a value and the smallest
cosine similarity over the inputs. Prints a Markdown table (docs/server.md
keeps the one measured).

    tools/llamacpp_embeddings.py [--model GGUF] [--kvlm build/kvlm]
        [--llama-server /tmp/peer/llama.cpp/build/bin/llama-server]

Standard library only. Exit status 1 when a cosine similarity is below
--min-cosine (default 0.999).
"""
import argparse, json, math, os, re, subprocess, sys, time, urllib.request

INPUTS_IDS = [[40, 1101, 13, 198, 464, 3797, 286], [32, 1], [464], list(range(300, 340))]
INPUTS_TEXT = ["ROMEO: But soft, what light through yonder window breaks?", "JULIET:"]


def post(port, body):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/embeddings" % port, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return [d["embedding"] for d in sorted(json.load(r)["data"], key=lambda d: d["index"])]


def wait_ready(proc, port, what):
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %d" % (what, proc.returncode))
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/health" % port, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    raise RuntimeError("%s did not become ready" % what)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def compare(a, b):
    diff = max(abs(x - y) for va, vb in zip(a, b) for x, y in zip(va, vb))
    cos = min(sum(x * y for x, y in zip(va, vb)) / math.sqrt(sum(x * x for x in va) * sum(y * y for y in vb))
              for va, vb in zip(a, b))
    return diff, cos


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/shakespeare-llama/shakespeare-llama-q8_0.gguf")
    ap.add_argument("--kvlm", default="build/kvlm")
    ap.add_argument("--llama-server", default="/tmp/peer/llama.cpp/build/bin/llama-server")
    ap.add_argument("--min-cosine", type=float, default=0.999)
    a = ap.parse_args()
    rows, ok = [], True
    for pooling in ("mean", "cls", "last"):
        lp, kp = free_port(), free_port()
        null = open(os.devnull, "w")
        llama = subprocess.Popen([a.llama_server, "-m", a.model, "--embeddings", "--pooling", pooling, "--port",
                                  str(lp), "-t", "2", "-np", "1", "-c", "0", "-ctk", "f32", "-ctv", "f32"],
                                 stdout=null, stderr=null)
        kvlm = subprocess.Popen([a.kvlm, "serve", "-m", a.model, "--pooling", pooling, "--kv-dtype", "f32", "--port",
                                 str(kp), "--threads", "2", "--access-log", "off"], stdout=null, stderr=null)
        try:
            wait_ready(llama, lp, "llama-server")
            wait_ready(kvlm, kp, "kvlm serve")
            for kind, inputs in (("token ids", INPUTS_IDS), ("text", INPUTS_TEXT)):
                diff, cos = compare(post(kp, {"input": inputs}), post(lp, {"input": inputs}))
                rows.append((pooling, kind, len(inputs), diff, cos))
                ok &= cos >= a.min_cosine
        finally:
            for p in (llama, kvlm):
                p.terminate()
                p.wait()
    print("| pooling | inputs | n | max abs difference | min cosine |")
    print("|---|---|---|---|---|")
    for pooling, kind, n, diff, cos in rows:
        print("| %s | %s | %d | %.2e | %.7f |" % (pooling, kind, n, diff, cos))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
