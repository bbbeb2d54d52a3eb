#!/usr/bin/python3
"""Soak test of kvlm serve: mixed load for SOAK_SECONDS, then checks.

    bench/soak.py [--kvlm build/kvlm] [--model models/shakespeare-gpt2]
                  [--seconds 600] [--clients 6] [--json out.json]

Standard library only; `make soak` runs it (SOAK_SECONDS, default 600). It
starts `kvlm serve` on a free port with a small batch and waiting queue,
then clients send, until the time is up: completions and chat, streaming
and not, n > 1, logprobs, stop strings, streams the client drops after a
few events (cancelled), and every 20 s a burst of more requests than
--max-seqs + --max-waiting, some of which get 429 (rejected). Every
request has a deadline (--deadline, 120 s); one that passes it is a hang.

Checks, each printed with its figure, exit status 1 if one fails:
  - no request hung and none failed otherwise (a status other than 200 or
    429, a broken stream, a connection error);
  - completed + cancelled + rejected = sent;
  - kvlm_kv_blocks_used (/metrics) back to 0 after the load;
  - the server's open descriptors (/proc/PID/fd) back to the baseline
    taken before the load;
  - resident memory (/proc/PID/status VmRSS, sampled every 5 s) grows by
    less than --rss-slope-max KiB per minute (least-squares slope over the
    samples after the first minute).
"""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time

PROMPTS = ["ROMEO:", "JULIET:\nO Romeo, Romeo,", "First Citizen:\nBefore we proceed any further, hear me speak.",
           "KING HENRY:", "To be, or not to be", "\n", "MENENIUS:\nEither you must confess yourselves wondrous"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Server:
    def __init__(self, args):
        self.port = free_port()
        cmd = [args.kvlm, "serve", "-m", args.model, "--port", str(self.port), "--max-seqs", str(args.max_seqs),
               "--max-waiting", str(args.max_waiting), "--threads", str(args.threads), "--timeout", "300"]
        self.log = open(args.log, "w")
        self.proc = subprocess.Popen(["nice", "-n", "19"] + cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.pid = self.proc.pid
        for _ in range(600):
            try:
                if self.get("/health")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None:
                sys.exit("soak: kvlm serve exited at start-up; see %s" % args.log)
            time.sleep(0.1)
        else:
            sys.exit("soak: kvlm serve did not answer /health")
        # nice execs kvlm in place: the pid is the server's
        self.pid = self.proc.pid

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body

    def metric(self, name):
        for line in self.get("/metrics")[1].decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.split()[-1])
        return None

    def fds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def fd_names(self):
        out = []
        for fd in os.listdir("/proc/%d/fd" % self.pid):
            try:
                out.append(os.readlink("/proc/%d/fd/%s" % (self.pid, fd)))
            except OSError:
                pass
        return sorted(out)

    def rss_kib(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.n = {"sent": 0, "completed": 0, "cancelled": 0, "rejected": 0, "failed": 0, "hung": 0}
        self.kinds = {}
        self.failures = []

    def add(self, kind, outcome, detail=None):
        with self.lock:
            self.n["sent"] += 1
            self.n[outcome] += 1
            k = self.kinds.setdefault(kind, {})
            k[outcome] = k.get(outcome, 0) + 1
            if detail and len(self.failures) < 20:
                self.failures.append("%s: %s" % (kind, detail))


def one_request(port, deadline, rng, tally, kind=None):
    """Sends one request of a random kind; records its outcome."""
    kind = kind or rng.choice(["complete", "stream", "chat", "chat_stream", "n_logprobs", "drop", "drop",
                               "stop"])
    prompt = rng.choice(PROMPTS)
    maxt = rng.randint(1, 48)
    path, body = "/v1/completions", {"prompt": prompt, "max_tokens": maxt, "seed": rng.randint(0, 1 << 30)}
    if kind in ("chat", "chat_stream"):
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}], "max_tokens": maxt}
    if kind in ("stream", "chat_stream", "drop"):
        body["stream"] = True
    if kind == "drop":
        body["max_tokens"] = 64
    if kind == "n_logprobs":
        body.update(n=rng.randint(2, 3), logprobs=rng.randint(0, 3))
    if kind == "stop":
        body.update(stop=["\n", "e"], temperature=0.7)
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=deadline)
        t0 = time.monotonic()
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status == 429:
            r.read()
            c.close()
            return tally.add(kind, "rejected")
        if r.status != 200:
            detail = "HTTP %d %s" % (r.status, r.read()[:200])
            c.close()
            return tally.add(kind, "failed", detail)
        if not body.get("stream"):
            j = json.loads(r.read())
            c.close()
            ok = len(j.get("choices", [])) == body.get("n", 1)
            return tally.add(kind, "completed" if ok else "failed", None if ok else "choices %s" % j)
        drop_after = rng.randint(1, 6) if kind == "drop" else None
        events = 0
        while True:
            if time.monotonic() - t0 > deadline:
                c.close()
                return tally.add(kind, "hung", "stream past its deadline")
            line = r.readline()
            if not line:
                c.close()
                return tally.add(kind, "failed", "stream ended without [DONE] after %d events" % events)
            if line.startswith(b"data: "):
                if line.strip() == b"data: [DONE]":
                    c.close()
                    return tally.add(kind, "completed")
                events += 1
                if drop_after and events >= drop_after:
                    c.sock.shutdown(socket.SHUT_RDWR)
                    c.close()
                    return tally.add(kind, "cancelled")
    except socket.timeout:
        return tally.add(kind, "hung", "no answer within %d s" % deadline)
    except (OSError, http.client.HTTPException, ValueError) as e:
        return tally.add(kind, "failed", repr(e))


def slope_kib_per_min(samples):
    """Least-squares slope of (seconds, KiB) samples, in KiB per minute."""
    n = len(samples)
    if n < 3:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    return 60.0 * sum((t - mt) * (v - mv) for t, v in samples) / var if var else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvlm", default="build/kvlm")
    ap.add_argument("--model", default="models/shakespeare-gpt2")
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)))
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--max-seqs", type=int, default=4)
    ap.add_argument("--max-waiting", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=120)
    ap.add_argument("--burst-every", type=float, default=20)
    ap.add_argument("--rss-slope-max", type=float, default=256.0, help="KiB per minute")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", default="/tmp/kvlm-soak-server.log")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()

    srv = Server(args)
    # warm-up (not counted): one request of each kind, so what the server
    # opens or allocates once is in the baseline
    warm = Tally()
    for kind in ("complete", "stream", "chat", "chat_stream", "n_logprobs", "drop", "stop"):
        one_request(srv.port, args.deadline, random.Random(7), warm, kind)
    time.sleep(1)
    fd_base, rss_start = srv.fds(), srv.rss_kib()
    fd_names_base = srv.fd_names()
    tally = Tally()
    t_start = time.monotonic()
    end = t_start + args.seconds
    samples = []
    stop = threading.Event()

    def client(i):
        rng = random.Random(args.seed * 1000 + i)
        while time.monotonic() < end:
            one_request(srv.port, args.deadline, rng, tally)

    def sampler():
        while not stop.is_set():
            samples.append((time.monotonic() - t_start, srv.rss_kib()))
            stop.wait(5)

    def bursts():
        rng = random.Random(args.seed)
        k = 0
        while not stop.wait(args.burst_every) and time.monotonic() < end - 5:
            k += 1
            size = args.max_seqs + args.max_waiting + 8
            th = [threading.Thread(target=one_request, args=(srv.port, args.deadline, random.Random(k * 100 + j),
                                                              tally, rng.choice(["complete", "stream"])))
                  for j in range(size)]
            for t in th:
                t.start()
            for t in th:
                t.join()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    threads += [threading.Thread(target=sampler), threading.Thread(target=bursts)]
    for t in threads:
        t.start()
    for t in threads[:args.clients]:
        t.join()
    stop.set()
    for t in threads[args.clients:]:
        t.join()
    elapsed = time.monotonic() - t_start

    # the server catches up with the dropped streams
    kv_used = fds = None
    for _ in range(100):
        kv_used, fds = srv.metric("kvlm_kv_blocks_used"), srv.fds()
        if kv_used == 0 and fds <= fd_base:
            break
        time.sleep(0.1)
    rss_end = srv.rss_kib()
    fd_extra = sorted(set(srv.fd_names()) - set(fd_names_base)) if fds and fds > fd_base else []
    late = [s for s in samples if s[0] >= 60] if elapsed > 120 else samples
    slope = slope_kib_per_min(late)
    n = tally.n
    checks = [
        ("no request hung", n["hung"] == 0, "%d hung" % n["hung"]),
        ("no request failed", n["failed"] == 0, "%d failed" % n["failed"]),
        ("completed + cancelled + rejected = sent", n["completed"] + n["cancelled"] + n["rejected"] == n["sent"],
         "%d + %d + %d = %d, sent %d" % (n["completed"], n["cancelled"], n["rejected"],
                                         n["completed"] + n["cancelled"] + n["rejected"], n["sent"])),
        ("some requests rejected with 429 (bursts)", n["rejected"] > 0, "%d rejected" % n["rejected"]),
        ("KV blocks in use back to 0", kv_used == 0, "kvlm_kv_blocks_used %s" % kv_used),
        ("descriptors back to baseline", fds is not None and fds <= fd_base, "%s open, baseline %d%s" % (fds, fd_base, " (new: %s)" % ", ".join(fd_extra) if fd_extra else "")),
        ("RSS slope below %.0f KiB/min" % args.rss_slope_max, slope < args.rss_slope_max,
         "%.1f KiB/min over %d samples (RSS %d -> %d KiB)" % (slope, len(late), rss_start, rss_end)),
    ]
    alive = srv.proc.poll() is None
    checks.append(("server still running", alive, "pid %d" % srv.pid))
    srv.stop()
    print("soak: %.0f s, %d clients, bursts every %.0f s of %d requests (--max-seqs %d --max-waiting %d)" %
          (elapsed, args.clients, args.burst_every, args.max_seqs + args.max_waiting + 8, args.max_seqs,
           args.max_waiting))
    print("soak: sent %d: completed %d, cancelled %d, rejected %d, failed %d, hung %d" %
          (n["sent"], n["completed"], n["cancelled"], n["rejected"], n["failed"], n["hung"]))
    for kind in sorted(tally.kinds):
        print("  %-12s %s" % (kind, " ".join("%s=%d" % kv for kv in sorted(tally.kinds[kind].items()))))
    for f in tally.failures:
        print("  failure: " + f)
    ok = True
    for name, good, detail in checks:
        print("%s %s: %s" % ("PASS" if good else "FAIL", name, detail))
        ok &= good
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds": elapsed, "counts": n, "kinds": tally.kinds, "kv_blocks_used_end": kv_used,
                       "fds_baseline": fd_base, "fds_end": fds, "rss_start_kib": rss_start, "rss_end_kib": rss_end,
                       "rss_slope_kib_per_min": slope, "samples": samples, "ok": ok}, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
