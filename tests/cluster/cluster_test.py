#!/usr/bin/python3
"""Three kvlm serve replicas behind HAProxy (deploy/haproxy.cfg) on this machine.

    tests/cluster/cluster_test.py [--kvlm build/kvlm] [--model models/shakespeare-gpt2]
                                  [--rounds 2] [--json out.json] [--docs docs/deploy.md]

Standard library only; `make test-cluster` runs it (it needs haproxy:
scripts/setup.sh --cluster). The replicas start with --port 0 and
--agent-port 0; their ports reach HAProxy through the environment the
config reads (KVLM_R1.., KVLM_R1_AGENT..), the only part of it that is
not as shipped. Phases, each printed with its figures:

  affinity vs round robin: a workload of SYSTEMS shared system prompts, each
      asked QUESTIONS different questions, streamed, from CLIENTS clients at
      once, in a fixed shuffled order; once through the config's prefix hash
      and once with KVLM_BALANCE=roundrobin, on fresh replicas each time,
      alternating for --rounds rounds. Measured: the prefix-cache hit rate
      (prompt tokens served from the cache / prompt tokens looked up, summed
      over the replicas' /metrics), time to first token p50 (client side,
      to the first content event), and how many replicas each system prompt
      reached (X-Kvlm-Replica).
  one at a time: with no load to bound, every request of one prefix key
      reaches one replica, for a key from the X-Prefix-Key header, from
      prompt_cache_key and from the system message.
  shared disk: three replicas share one --kv-cache-dir; a ~100-token
      prompt through HAProxy reaches one of them cold, which writes its
      whole KV blocks there; the same prompt straight to each other replica
      is answered from those files: disk hits, the prefix not prefilled,
      token ids identical at temperature 0; times to first token printed.
  kill: one replica is SIGKILLed mid-run; a request may fail only if it had
      reached that replica (its stream began there); it is then restarted on
      the same ports and must rejoin.
  rolling restart: under continuous load, each replica in turn gets
      SIGTERM (kvlm drains: new connections refused, /health 503, the agent
      says "drain", accepted requests finish), exits, starts again on its
      ports and must be UP in HAProxy before the next one goes.

Checks (exit status 1 if one fails): affinity's hit rate is above round
robin's; one replica per key one at a time; with a shared directory,
every whole block of the prompt a disk hit on the other replicas, fewer
than 16 of its tokens prefilled there and the same tokens; no failure but of requests
that had reached the killed replica; none at all in the rolling restart,
every drained replica exiting 0; every restarted replica serving again.
With --docs FILE the results replace
the block between '<!-- cluster-results -->' and '<!-- /cluster-results -->'.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSTEMS = 24
QUESTIONS = 4
CLIENTS = 6
WORDS = ("noble lord gentle heart crown sword grace honour night morrow sweet fair love death king queen duke "
         "father mother brother sister friend enemy castle tower field battle peace war faith fortune").split()
QUESTION_WORDS = "who what where when why how shall will doth hath".split()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def system_prompt(i):
    """A distinct system prompt of about 60 tokens."""
    rng = random.Random(1000 + i)
    return "You are player %d. " % i + " ".join(rng.choice(WORDS) for _ in range(44)) + "."


def question(i, k):
    rng = random.Random(2000 + 97 * i + k)
    return " ".join(rng.choice(QUESTION_WORDS + WORDS) for _ in range(6)) + "?"


def workload(seed, systems=SYSTEMS, questions=QUESTIONS):
    items = [(i, k) for i in range(systems) for k in range(questions)]
    random.Random(seed).shuffle(items)
    return items


class Replica:
    def __init__(self, args, name, port=0, agent=0, extra=()):
        self.args, self.name, self.extra = args, name, list(extra)
        self.log_path = os.path.join(args.dir, name + ".log")
        self.start(port, agent)

    def start(self, port=0, agent=0):
        cmd = [self.args.kvlm, "serve", "-m", self.args.model, "--port", str(port), "--agent-port", str(agent),
               "--replica-id", self.name, "--threads", "1", "--max-seqs", "4", "--kv-blocks", "64",
               "--drain-timeout", "30", "--access-log", "off"] + self.extra
        self.log = open(self.log_path, "a")
        start = self.log.tell()  # this start's lines only
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            with open(self.log_path) as f:
                f.seek(start)
                text = f.read()
            m = re.findall(r"listening on http://127\.0\.0\.1:(\d+)", text)
            a = re.findall(r"agent check on 127\.0\.0\.1:(\d+)", text)
            if m and a and "kvlm serve: ready" in text:
                self.port, self.agent = int(m[-1]), int(a[-1])
                return
            if self.proc.poll() is not None:
                sys.exit("cluster: replica %s exited at start-up; see %s" % (self.name, self.log_path))
            time.sleep(0.05)
        sys.exit("cluster: replica %s did not get ready" % self.name)

    def metric(self, name):
        return self.metrics().get(name, 0.0)

    def metrics(self):
        """{name: value} of the unlabelled series of /metrics."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        out = {}
        for line in text.splitlines():
            f = line.split()
            if len(f) == 2 and not line.startswith("#") and "{" not in f[0]:
                out[f[0]] = float(f[1])
        return out

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class Balancer:
    def __init__(self, args, replicas, balance=None):
        self.port, self.stats = free_port(), free_port()
        env = dict(os.environ, KVLM_LISTEN="127.0.0.1:%d" % self.port, KVLM_STATS="127.0.0.1:%d" % self.stats)
        for i, r in enumerate(replicas, 1):
            env["KVLM_R%d" % i] = "127.0.0.1:%d" % r.port
            env["KVLM_R%d_AGENT" % i] = str(r.agent)
        if balance:
            env["KVLM_BALANCE"] = balance
        self.log = open(os.path.join(args.dir, "haproxy.log"), "a")
        self.proc = subprocess.Popen([args.haproxy, "-db", "-f", os.path.join(ROOT, "deploy", "haproxy.cfg")],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_up([r.name for r in replicas])

    def rows(self):
        """The stats page's CSV as dicts, one per proxy and server ([] when
        the page cannot be read)."""
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.stats, timeout=5)
            c.request("GET", "/;csv")
            rows = c.getresponse().read().decode().splitlines()
            c.close()
        except OSError:
            return []
        head = rows[0].lstrip("# ").split(",")
        return [dict(zip(head, row.split(","))) for row in rows[1:]]

    def servers(self):
        """{server name: status} from the stats page's CSV; a server whose
        agent has not answered yet counts as "UP, agent pending" (its first
        answer may still move keys on the hash ring)."""
        out = {}
        for f in self.rows():
            if f.get("pxname") == "kvlm" and f.get("svname") not in ("BACKEND", "FRONTEND"):
                pending = f["status"] == "UP" and f.get("agent_status") in ("INI", "")
                out[f["svname"]] = "UP, agent pending" if pending else f["status"]
        return out

    def wait_idle(self, timeout=10):
        """Waits until HAProxy holds no session on any replica (a response
        the client has read may still count against its replica for a
        moment, and the bounded-load hash counts it); returns each
        replica's status, weight and retry and redispatch counts then,
        "name:status:weight:wretr:wredis"."""
        deadline = time.time() + timeout
        while True:
            rows = [f for f in self.rows() if f.get("pxname") == "kvlm" and f.get("svname") != "BACKEND"]
            if (rows and all(f.get("scur") == "0" for f in rows)) or time.time() > deadline:
                return " ".join(":".join([f["svname"]] + [f.get(k, "") for k in ("status", "weight", "wretr", "wredis")])
                                for f in rows)
            time.sleep(0.02)

    def wait_up(self, names, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            st = self.servers()
            if st and all(st.get(n) == "UP" for n in names):
                return
            if self.proc.poll() is not None:
                sys.exit("cluster: haproxy exited; see %s" % self.log.name)
            time.sleep(0.1)
        sys.exit("cluster: servers not UP in HAProxy after %ds: %s" % (timeout, self.servers()))

    def cpu_seconds(self):
        """HAProxy's user + system CPU time so far (/proc/PID/stat)."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def bytes_out(self):
        """Bytes the frontend sent to clients (the stats page's bout)."""
        for f in self.rows():
            if f.get("pxname") == "kvlm_api" and f.get("svname") == "FRONTEND":
                return int(f["bout"])
        return 0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


def chat(port, sys_i, q_k, stream=True, max_tokens=8, headers=None, extra=None):
    """One chat completion through the balancer. Returns a dict: ok, replica
    (from X-Kvlm-Replica, None before headers), ttft (s, streaming), error,
    start and end (time.time())."""
    body = {"messages": [{"role": "system", "content": system_prompt(sys_i)},
                         {"role": "user", "content": question(sys_i, q_k)}],
            "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    body.update(extra or {})
    out = {"ok": False, "replica": None, "ttft": None, "error": None, "system": sys_i, "stream": stream,
           "start": time.time(), "end": None}
    t0 = time.perf_counter()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/chat/completions", json.dumps(body),
                  dict({"Content-Type": "application/json"}, **(headers or {})))
        r = c.getresponse()
        out["replica"] = r.getheader("X-Kvlm-Replica")
        if r.status != 200:
            out["error"] = "HTTP %d %s" % (r.status, r.read()[:200])
            return out
        if not stream:
            json.loads(r.read())
            out["ok"] = True
            return out
        done = False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                done = True
                r.read()  # the end of the chunked body: the exchange is over for HAProxy too
                break
            ev = json.loads(line[6:])
            delta = ev["choices"][0].get("delta", {}) if ev.get("choices") else {}
            if out["ttft"] is None and delta.get("content"):
                out["ttft"] = time.perf_counter() - t0
        c.close()
        out["ok"] = done
        if not done:
            out["error"] = "the stream ended without [DONE]"
    except (OSError, http.client.HTTPException, ValueError) as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    return out


def run_load(port, items, stream_of=lambda n: True, on_progress=None, max_tokens=8, stop=None):
    """Sends items from CLIENTS threads, all of them or until `stop` is
    set; returns the results of those sent, in order."""
    results = [None] * len(items)
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                n = nxt[0]
                nxt[0] += 1
            if n >= len(items) or (stop and stop.is_set()):
                return
            if on_progress:
                on_progress(n)
            results[n] = chat(port, items[n][0], items[n][1], stream=stream_of(n), max_tokens=max_tokens)
            results[n]["end"] = time.time()

    ts = [threading.Thread(target=worker) for _ in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return [r for r in results if r is not None]


def p50(xs):
    xs = sorted(x for x in xs if x is not None)
    return xs[len(xs) // 2] if xs else float("nan")


def compare(args, seed, balance):
    """One workload on fresh replicas through one balance mode."""
    reps = [Replica(args, "r%d" % i) for i in (1, 2, 3)]
    lb = Balancer(args, reps, balance)
    try:
        cpu0 = lb.cpu_seconds()
        t0 = time.time()
        res = run_load(lb.port, workload(seed))
        wall = time.time() - t0
        cpu = lb.cpu_seconds() - cpu0
        bout = lb.bytes_out()
        q = sum(r.metric("kvlm_prefix_cache_queries_total") for r in reps)
        h = sum(r.metric("kvlm_prefix_cache_hits_total") for r in reps)
    finally:
        lb.stop()
        for r in reps:
            r.stop()
    bad = [r for r in res if not r["ok"]]
    spread = {}
    for r in res:
        spread.setdefault(r["system"], set()).add(r["replica"])
    per_replica = {}
    for r in res:
        per_replica[r["replica"]] = per_replica.get(r["replica"], 0) + 1
    return {"mode": balance or "prefix hash", "requests": len(res), "failed": len(bad),
            "errors": [b["error"] for b in bad][:5], "hit_rate": h / q if q else 0.0,
            "ttft_p50_ms": 1e3 * p50(r["ttft"] for r in res),
            "replicas_per_prompt": sum(len(v) for v in spread.values()) / len(spread), "per_replica": per_replica,
            "seconds": wall, "haproxy_cpu_s": cpu, "bytes_to_clients": bout}


def sticky(args):
    """One request at a time (no load to bound: each is sent once HAProxy
    holds no session on any replica): every request of one prefix key must
    reach one replica, for each source of the key the config reads.
    Returns {source: [replicas per key]}."""
    reps = [Replica(args, "r%d" % i) for i in (1, 2, 3)]
    lb = Balancer(args, reps)
    sources = {
        "X-Prefix-Key header": lambda i, k: chat(lb.port, 100 + k, k, headers={"X-Prefix-Key": "tenant-%d" % i}),
        "prompt_cache_key": lambda i, k: chat(lb.port, 200 + k, k, extra={"prompt_cache_key": "pck-%d" % i}),
        "system message": lambda i, k: chat(lb.port, i, k),
    }
    out = {}
    try:
        for name, send in sources.items():
            seen = {}
            trail = []
            for i in range(6):
                for k in range(3):
                    servers = lb.wait_idle()
                    r = send(i, k)
                    seen.setdefault(i, set()).add(r["replica"] if r["ok"] else "failed")
                    trail.append("key %d -> %s (%s)" % (i, r["replica"] if r["ok"] else "failed", servers))
            out[name] = [len(v) for v in seen.values()]
            out[name + " replicas"] = sorted(set().union(*seen.values()))
            if any(len(v) != 1 for v in seen.values()):
                out[name + " trail"] = trail  # printed on failure: each request's replica and the servers' weights
    finally:
        lb.stop()
        for r in reps:
            r.stop()
    return out


def long_prompt(seed=4242):
    """A completion prompt of about 100 tokens of the shipped model's 128
    (six whole KV blocks of 16 and a part)."""
    rng = random.Random(seed)
    return "The lord said unto his court: " + " ".join(rng.choice(WORDS) for _ in range(88)) + ". And the king"


def complete_ids(port, prompt, max_tokens=8):
    """One streamed greedy completion straight to a port. Returns (token
    ids, time to the first token in s, error or None)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "logprobs": 1,
            "return_tokens_as_token_ids": True}
    t0 = time.perf_counter()
    ttft, ids = None, []
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        replica = r.getheader("X-Kvlm-Replica")
        if r.status != 200:
            return [], None, replica, "HTTP %d %s" % (r.status, r.read()[:200])
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if line == b"data: [DONE]":
                r.read()
                break
            if not line.startswith(b"data: "):
                continue
            ev = json.loads(line[6:])
            for ch in ev.get("choices") or []:
                toks = (ch.get("logprobs") or {}).get("tokens") or []
                if toks and ttft is None:
                    ttft = time.perf_counter() - t0
                ids += [int(t.split(":", 1)[1]) for t in toks]
        c.close()
    except (OSError, http.client.HTTPException, ValueError) as e:
        return ids, ttft, None, "%s: %s" % (type(e).__name__, e)
    return ids, ttft, replica, None


def shared_disk(args):
    """Three replicas sharing one --kv-cache-dir: a long prompt through
    HAProxy reaches one replica (cold), which writes its whole KV blocks to
    the directory; the same prompt sent straight to each other replica
    must be answered from those files (disk hits, the prefix not
    prefilled again) with the same token ids."""
    cache = os.path.join(args.dir, "kv-shared")
    reps = [Replica(args, "r%d" % i, extra=["--kv-cache-dir", cache]) for i in (1, 2, 3)]
    lb = Balancer(args, reps)
    out = {"others": [], "problems": []}
    try:
        prompt = long_prompt()
        ids, ttft, first, err = complete_ids(lb.port, prompt)
        out.update(first=first, cold_ttft_ms=1e3 * (ttft or float("nan")), tokens=ids)
        if err or first not in [r.name for r in reps]:
            out["problems"].append("the request through HAProxy: %s (replica %s)" % (err, first))
            return out
        a = next(r for r in reps if r.name == first)
        ma = a.metrics()
        blocks = int((ma.get("kvlm_prompt_tokens_total", 0) - 1) // 16)
        out["blocks"] = blocks
        deadline = time.time() + 20  # the writer thread's files, counted once renamed into place
        while a.metric("kvlm_kv_tier_disk_files") < blocks and time.time() < deadline:
            time.sleep(0.05)
        out["files"] = int(a.metric("kvlm_kv_tier_disk_files"))
        for b in reps:
            if b is a:
                continue
            # first a cold prompt of the same length on this replica: its cold time to first token
            _, ttft_c, _, err_c = complete_ids(b.port, long_prompt(4343 + len(out["others"])))
            m0 = b.metrics()
            ids_b, ttft_b, _, err_b = complete_ids(b.port, prompt)
            m1 = b.metrics()
            d = {k: m1.get(k, 0) - m0.get(k, 0) for k in ("kvlm_kv_tier_disk_hits_total", "kvlm_prompt_tokens_total",
                                                          "kvlm_prompt_tokens_cached_total")}
            o = {"replica": b.name, "ttft_ms": 1e3 * (ttft_b or float("nan")), "same": ids_b == ids,
                 "cold_ttft_ms": 1e3 * (ttft_c or float("nan")),
                 "disk_hits": int(d["kvlm_kv_tier_disk_hits_total"]),
                 "prefilled": int(d["kvlm_prompt_tokens_total"] - d["kvlm_prompt_tokens_cached_total"]),
                 "prompt_tokens": int(d["kvlm_prompt_tokens_total"]), "error": err_b}
            out["others"].append(o)
            if err_c:
                out["problems"].append("%s: its cold prompt: %s" % (b.name, err_c))
            if err_b or not o["same"]:
                out["problems"].append("%s: %s; tokens %s against %s's %s" % (b.name, err_b, ids_b, first, ids))
            if o["disk_hits"] < blocks or o["prefilled"] >= 16:
                out["problems"].append("%s: %d disk hits (want %d), %d of %d prompt tokens prefilled (want < 16)" % (
                    b.name, o["disk_hits"], blocks, o["prefilled"], o["prompt_tokens"]))
    finally:
        lb.stop()
        for r in reps:
            r.stop()
    return out


def kill(args):
    """Runs a workload of longer generations (32 tokens), half streamed;
    at a third of it SIGKILLs replica r2, then restarts it on its ports and
    checks it serves again."""
    reps = [Replica(args, "r%d" % i) for i in (1, 2, 3)]
    lb = Balancer(args, reps)
    victim = reps[1]
    items = workload(7, systems=SYSTEMS, questions=10)
    at = len(items) // 3
    fired = threading.Event()
    t_fire = [None]

    def progress(n):
        if n == at and not fired.is_set():
            fired.set()
            t_fire[0] = time.time()
            victim.proc.send_signal(signal.SIGKILL)

    try:
        res = run_load(lb.port, items, stream_of=lambda n: n % 2 == 0, on_progress=progress, max_tokens=32)
        rc = victim.stop()
        victim.start(victim.port, victim.agent)
        lb.wait_up(["r1", "r2", "r3"])
        after = run_load(lb.port, workload(99, systems=SYSTEMS, questions=1))
    finally:
        lb.stop()
        for r in reps:
            r.stop()
    bad = [r for r in res if not r["ok"]]
    # A failure is excused only if its stream had begun on the victim.
    unexcused = [r for r in bad if r["replica"] != victim.name]
    return {"requests": len(res), "failed": len(bad), "failed_elsewhere": len(unexcused),
            "victim_in_flight": sum(1 for r in res if r["replica"] == victim.name and r["start"] < t_fire[0] < r["end"]),
            "errors": [b["error"] for b in unexcused][:5], "exit_status": rc,
            "served_after_restart": sum(1 for r in after if r["ok"] and r["replica"] == victim.name),
            "failed_after_restart": sum(1 for r in after if not r["ok"])}


def rolling(args):
    """A rolling restart under load: clients send 32-token generations,
    half streamed, without pause, while each replica in turn gets SIGTERM
    (kvlm drains), exits, starts again on its ports and is UP in HAProxy
    again before the next one goes."""
    reps = [Replica(args, "r%d" % i) for i in (1, 2, 3)]
    lb = Balancer(args, reps)
    stop = threading.Event()
    steps, problems = [], []

    def restart_each():
        try:
            time.sleep(1.0)
            for r in reps:
                t = time.time()
                r.proc.send_signal(signal.SIGTERM)
                rc = r.stop()
                t_exit = time.time()
                r.start(r.port, r.agent)
                lb.wait_up([x.name for x in reps])
                steps.append({"replica": r.name, "signal": t, "exit_status": rc, "drain_s": t_exit - t,
                              "back": time.time(), "back_s": time.time() - t})
            time.sleep(1.0)
        except SystemExit as e:
            problems.append(str(e))
        finally:
            stop.set()

    th = threading.Thread(target=restart_each)
    try:
        th.start()
        res = run_load(lb.port, workload(11, systems=SYSTEMS, questions=1000), stream_of=lambda n: n % 2 == 0,
                       max_tokens=32, stop=stop)
        th.join()
    finally:
        lb.stop()
        for r in reps:
            r.stop()
    for st in steps:
        name = st["replica"]
        st["in_flight"] = sum(1 for r in res if r["replica"] == name and r["start"] < st["signal"] < r["end"])
        st["served_after"] = sum(1 for r in res if r["ok"] and r["replica"] == name and r["start"] > st["back"])
    bad = [r for r in res if not r["ok"]]
    return {"requests": len(res), "failed": len(bad), "errors": [b["error"] for b in bad][:5], "steps": steps,
            "problems": problems}


def docs_block(out):
    lines = ["<!-- cluster-results -->",
             "Written by `tests/cluster/cluster_test.py --rounds %d --docs docs/deploy.md` on %s: three replicas"
             % (out["rounds"], out["date"]),
             "of `%s`, one engine thread each, `--max-seqs 4 --kv-blocks 64`, HAProxy and the clients on one"
             % os.path.basename(out["model"].rstrip("/")),
             "machine (%s, %d cores); %d shared system prompts x %d questions, %d clients at once, 8 tokens"
             % (out["cpu"], os.cpu_count(), SYSTEMS, QUESTIONS, CLIENTS),
             "each, streamed; each round on fresh replicas, the two modes alternating.", "",
             "| round | balance | prefix-cache hit rate | TTFT p50 | replicas per system prompt | requests per replica "
             "| failed | HAProxy CPU per request | bytes to the client per request |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in out["compare"]:
        lines.append("| %d | %s | %.1f%% | %.1f ms | %.2f | %s | %d | %.2f ms | %.0f |" % (
            r["round"], r["mode"], 100 * r["hit_rate"], r["ttft_p50_ms"], r["replicas_per_prompt"],
            " / ".join(str(r["per_replica"].get(n, 0)) for n in ("r1", "r2", "r3")), r["failed"],
            1e3 * r["haproxy_cpu_s"] / r["requests"], r["bytes_to_clients"] / r["requests"]))
    lines += ["", "One request at a time, 6 keys x 3 requests per source of the prefix key: replicas each key "
              "reached: " + "; ".join("%s %s" % (n, out["sticky"][n]) for n in
                                      ("X-Prefix-Key header", "prompt_cache_key", "system message")) + "."]
    k = out["kill"]
    lines += ["", "SIGKILL to r2 a third into %d requests of 32 tokens, half streamed: %d in flight on r2, %d "
              "failed, %d of them had not reached r2; restarted, r2 served %d of the next %d requests." % (
                  k["requests"], k["victim_in_flight"], k["failed"], k["failed_elsewhere"],
                  k["served_after_restart"], SYSTEMS)]
    sd = out["shared_disk"]
    lines += ["", "Shared `--kv-cache-dir`: a %d-token prompt (%d whole blocks of 16) through HAProxy reached %s, cold, "
              "first token after %.1f ms; the same prompt straight to the others: %s." % (
                  sd["others"][0]["prompt_tokens"] if sd["others"] else 0, sd.get("blocks", 0), sd.get("first"),
                  sd.get("cold_ttft_ms", float("nan")),
                  "; ".join("%s %d disk hits, %d tokens prefilled, first token after %.1f ms (a cold prompt of "
                            "that length there: %.1f ms), tokens %s" % (
                      o["replica"], o["disk_hits"], o["prefilled"], o["ttft_ms"], o["cold_ttft_ms"],
                      "identical" if o["same"] else "different") for o in sd["others"]))]
    rl = out["rolling"]
    lines += ["", "Rolling restart under load (%d requests of 32 tokens, half streamed, %d failed):" % (
        rl["requests"], rl["failed"]), "",
              "| replica | in flight at SIGTERM | exit status | SIGTERM to exit | SIGTERM to UP again in HAProxy "
              "| requests it served afterwards |", "|---|---|---|---|---|---|"]
    for st in rl["steps"]:
        lines.append("| %s | %d | %s | %.2f s | %.2f s | %d |" % (
            st["replica"], st["in_flight"], st["exit_status"], st["drain_s"], st["back_s"], st["served_after"]))
    lines.append("<!-- /cluster-results -->")
    return "\n".join(lines)


def print_shared_disk(sd):
    print("cluster: shared --kv-cache-dir: %d-block prompt through HAProxy to %s (cold, TTFT %.1f ms), %s files "
          "written" % (sd.get("blocks", 0), sd.get("first"), sd.get("cold_ttft_ms", float("nan")), sd.get("files")))
    for o in sd["others"]:
        print("cluster: shared --kv-cache-dir: the same prompt straight to %s: %d disk hits, %d of %d prompt tokens "
              "prefilled, TTFT %.1f ms (a cold prompt of its length there: %.1f ms), tokens %s" % (
                  o["replica"], o["disk_hits"], o["prefilled"], o["prompt_tokens"], o["ttft_ms"], o["cold_ttft_ms"],
                                                      "identical" if o["same"] else "DIFFERENT"))


def only_shared_disk(args):
    sd = shared_disk(args)
    print_shared_disk(sd)
    fails = ["shared --kv-cache-dir: %s" % p for p in sd["problems"]]
    if len(sd["others"]) != 2:
        fails.append("shared --kv-cache-dir: %d of 2 other replicas asked" % len(sd["others"]))
    for f in fails:
        print("cluster: FAIL " + f)
    print("cluster: logs in %s" % args.dir)
    print("cluster: %s" % ("FAIL" if fails else "ok"))
    return 1 if fails else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvlm", default=os.path.join(ROOT, "build", "kvlm"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "shakespeare-gpt2"))
    ap.add_argument("--haproxy", default="haproxy")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--dir", default=None, help="logs (default: a temporary directory, removed when all passed)")
    ap.add_argument("--json")
    ap.add_argument("--docs")
    ap.add_argument("--only", choices=["shared-disk"], help="run this phase alone")
    args = ap.parse_args()
    own_dir = not args.dir
    if own_dir:
        args.dir = tempfile.mkdtemp(prefix="kvlm-cluster-")
    os.makedirs(args.dir, exist_ok=True)
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    out = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "cpu": cpu, "rounds": args.rounds, "compare": []}
    t0 = time.time()
    if args.only:
        return only_shared_disk(args)
    for rnd in range(1, args.rounds + 1):
        modes = [None, "roundrobin"] if rnd % 2 else ["roundrobin", None]
        for mode in modes:
            r = compare(args, 100 + rnd, mode)
            r["round"] = rnd
            out["compare"].append(r)
            print("cluster: round %d %-11s hit rate %5.1f%%  TTFT p50 %6.1f ms  replicas per prompt %.2f  "
                  "per replica %s  failed %d  HAProxy %.2f ms CPU and %.0f bytes out per request" % (
                      rnd, r["mode"], 100 * r["hit_rate"], r["ttft_p50_ms"], r["replicas_per_prompt"],
                      r["per_replica"], r["failed"], 1e3 * r["haproxy_cpu_s"] / r["requests"],
                      r["bytes_to_clients"] / r["requests"]))
    st = sticky(args)
    out["sticky"] = st
    for name in ("X-Prefix-Key header", "prompt_cache_key", "system message"):
        print("cluster: one at a time, key from the %s: replicas per key %s, replicas used %s" % (
            name, st[name], st[name + " replicas"]))
        if any(n != 1 for n in st[name]) or "failed" in st[name + " replicas"]:
            fails_early = out.setdefault("fails_early", [])
            fails_early.append("key from the %s: a key reached several replicas or failed: %s %s; requests: %s" % (
                name, st[name], st[name + " replicas"], "; ".join(st.get(name + " trail", []))))
    sd = shared_disk(args)
    out["shared_disk"] = sd
    print_shared_disk(sd)
    k = kill(args)
    out["kill"] = k
    print("cluster: kill: %d requests, %d in flight on r2 at SIGKILL, %d failed (%d had not reached r2), "
          "r2 served %d after its restart" % (k["requests"], k["victim_in_flight"], k["failed"],
                                              k["failed_elsewhere"], k["served_after_restart"]))
    rl = rolling(args)
    out["rolling"] = rl
    for st in rl["steps"]:
        print("cluster: rolling restart: %s had %d in flight at SIGTERM, exited %s after %.2f s, UP again after "
              "%.2f s, then served %d" % (st["replica"], st["in_flight"], st["exit_status"], st["drain_s"],
                                          st["back_s"], st["served_after"]))
    print("cluster: rolling restart: %d requests, %d failed" % (rl["requests"], rl["failed"]))
    out["seconds"] = time.time() - t0
    print("cluster: %.1f s" % out["seconds"])
    fails = out.pop("fails_early", [])
    for r in out["compare"]:
        if r["failed"]:
            fails.append("%s round %d: %d requests failed: %s" % (r["mode"], r["round"], r["failed"], r["errors"]))
    hit = {m: [r["hit_rate"] for r in out["compare"] if r["mode"] == m] for m in ("prefix hash", "roundrobin")}
    if min(hit["prefix hash"]) <= max(hit["roundrobin"]):
        fails.append("the prefix hash's hit rate %s is not above round robin's %s" % (hit["prefix hash"],
                                                                                       hit["roundrobin"]))
    if k["failed_elsewhere"]:
        fails.append("kill: %d requests failed that had not reached r2: %s" % (k["failed_elsewhere"], k["errors"]))
    if not k["served_after_restart"] or k["failed_after_restart"]:
        fails.append("kill: after its restart r2 served %d requests, %d failed" % (
            k["served_after_restart"], k["failed_after_restart"]))
    fails += ["shared --kv-cache-dir: %s" % p for p in sd["problems"]]
    if len(sd["others"]) != 2:
        fails.append("shared --kv-cache-dir: %d of 2 other replicas asked" % len(sd["others"]))
    fails += ["rolling restart: %s" % p for p in rl["problems"]]
    if rl["failed"]:
        fails.append("rolling restart: %d requests failed: %s" % (rl["failed"], rl["errors"]))
    for st in rl["steps"]:
        if st["exit_status"] != 0 or not st["served_after"]:
            fails.append("rolling restart: %s exited with %s and served %d requests after its restart" % (
                st["replica"], st["exit_status"], st["served_after"]))
    if len(rl["steps"]) != 3:
        fails.append("rolling restart: %d of 3 replicas restarted" % len(rl["steps"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.docs:
        with open(args.docs) as f:
            text = f.read()
        new = re.sub(r"<!-- cluster-results -->.*?<!-- /cluster-results -->", lambda _: docs_block(out), text,
                     flags=re.S)
        if new == text and "<!-- cluster-results -->" not in text:
            fails.append("%s has no <!-- cluster-results --> block" % args.docs)
        with open(args.docs, "w") as f:
            f.write(new)
    for f in fails:
        print("cluster: FAIL " + f)
    if fails or not own_dir:
        print("cluster: logs in %s" % args.dir)
    else:
        shutil.rmtree(args.dir)
    print("cluster: %s" % ("FAIL" if fails else "ok"))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
