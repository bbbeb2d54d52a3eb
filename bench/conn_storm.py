#!/usr/bin/env python3
"""Connection storms against a running `kvlm serve` (Python 3 standard library only).

Two client behaviours that must not hurt the server:
  bursts    -- BURSTS bursts of N connections that each send
               'POST /v1/completions HTTP/1.1\\r\\nHost: x\\r\\n' (headers never
               finished) and then close;
  slowloris -- SLOW connections that send a header line every few seconds and
               never finish, held for --hold seconds.

During and after each phase it checks that GET /health answers 200 (each probe
with a deadline of --probe-timeout seconds), and, when --pid is given, that the
server's open descriptors (/proc/PID/fd) come back to the count measured before
the storm within --settle seconds (a bounded wait for a condition, not a speed
assertion). Exit status 0 when every check held, 1 otherwise; one line per
check on stdout. Meanwhile a prober thread sends GET /health every
--probe-every seconds and the run ends with its latency per phase (during
the bursts, after them, during the slowloris, after it): probes, how many
answered 200, median and maximum milliseconds (figures, not checks);
--json FILE keeps them.

    bench/conn_storm.py --port 8080 --pid $(pgrep -n kvlm)               # the full run
    bench/conn_storm.py --port 8080 --pid PID --bursts 1 --burst 200 --slow 50 --hold 3   # short (make test)
"""
import argparse
import json
import os
import socket
import sys
import threading
import time

HALF = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"


def health(host, port, timeout):
    """Status of GET /health, or an error string."""
    return timed_health(host, port, timeout)[0]


def timed_health(host, port, timeout):
    """(status of GET /health or an error string, seconds it took)."""
    t0 = time.monotonic()
    st = _health(host, port, timeout)
    return st, time.monotonic() - t0


def _health(host, port, timeout):
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        line = data.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else "no status line: %r" % line
    except OSError as e:
        return "%s: %s" % (type(e).__name__, e)


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def burst(host, port, n, timeout):
    """n half-header connections, each closed at once; returns how many connected."""
    socks, ok = [], 0
    for _ in range(n):
        try:
            s = socket.create_connection((host, port), timeout=timeout)
            s.sendall(HALF)
            socks.append(s)
            ok += 1
        except OSError:
            pass
        if len(socks) >= 100:
            for s in socks:
                s.close()
            socks = []
    for s in socks:
        s.close()
    return ok


class Prober:
    """GET /health every `every` seconds on a thread; latencies kept per phase."""

    def __init__(self, host, port, timeout, every):
        self.host, self.port, self.timeout, self.every = host, port, timeout, every
        self.phase, self.samples, self.stop = "before", {}, threading.Event()
        self.order = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def set_phase(self, phase):
        self.phase = phase

    def run(self):
        while not self.stop.wait(self.every):
            phase = self.phase
            st, dt = timed_health(self.host, self.port, self.timeout)
            if phase not in self.samples:
                self.samples[phase] = []
                self.order.append(phase)
            self.samples[phase].append((st, dt * 1e3))

    def close(self):
        self.stop.set()
        self.thread.join()

    def summary(self):
        out = []
        for phase in self.order:
            v = self.samples[phase]
            ms = sorted(x[1] for x in v)
            out.append({"phase": phase, "probes": len(v), "ok": sum(1 for x in v if x[0] == 200),
                        "median_ms": ms[len(ms) // 2], "max_ms": ms[-1]})
        return out


class Slowloris:
    """n connections that trickle header lines and never end them."""

    def __init__(self, host, port, n, interval):
        self.host, self.port, self.n, self.interval = host, port, n, interval
        self.socks, self.stop, self.refused = [], threading.Event(), 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        for _ in range(self.n):
            try:
                s = socket.create_connection((self.host, self.port), timeout=2)
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
                self.socks.append(s)
            except OSError:
                self.refused += 1
        self.thread.start()

    def run(self):
        i = 0
        while not self.stop.wait(self.interval):
            i += 1
            for s in list(self.socks):
                try:
                    s.sendall(b"X-Slow-%d: 1\r\n" % i)
                except OSError:
                    self.socks.remove(s)
                    s.close()

    def close(self):
        """Closes every connection; returns how many the server had not closed."""
        self.stop.set()
        self.thread.join()
        alive = 0
        for s in self.socks:
            try:
                s.setblocking(False)
                if s.recv(1, socket.MSG_PEEK) == b"":
                    pass  # the server closed it
                else:
                    alive += 1  # it answered something but stayed open
            except BlockingIOError:
                alive += 1
            except OSError:
                pass  # reset by the server
            s.close()
        return alive


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, help="the server's process id: check its descriptors")
    ap.add_argument("--bursts", type=int, default=6)
    ap.add_argument("--burst", type=int, default=1100, help="connections per burst")
    ap.add_argument("--slow", type=int, default=300, help="slowloris connections (0: none)")
    ap.add_argument("--hold", type=float, default=20, help="seconds the slowloris connections are held")
    ap.add_argument("--interval", type=float, default=2, help="seconds between slowloris header lines")
    ap.add_argument("--probe-timeout", type=float, default=5, help="deadline of each /health probe")
    ap.add_argument("--settle", type=float, default=60, help="seconds allowed for descriptors to return")
    ap.add_argument("--slack", type=int, default=0, help="descriptors over the baseline still accepted")
    ap.add_argument("--probe-every", type=float, default=0.2, help="seconds between the prober's /health requests")
    ap.add_argument("--after", type=float, default=0, help="seconds the prober keeps going after each phase")
    ap.add_argument("--json", help="write the prober's latency figures to this file")
    ap.add_argument("--expect-cut", action="store_true",
                    help="the server must have closed every slowloris connection by the end of --hold "
                         "(its --read-timeout is shorter than --hold)")
    a = ap.parse_args()
    failures = 0

    def check(what, ok, detail):
        nonlocal failures
        print("%-4s %s: %s" % ("ok" if ok else "FAIL", what, detail), flush=True)
        if not ok:
            failures += 1

    def healthy(what):
        st = health(a.host, a.port, a.probe_timeout)
        check(what, st == 200, "/health %s" % st)

    def settle(what, base):
        if not a.pid:
            return
        t0 = time.monotonic()
        n = fd_count(a.pid)
        while n > base + a.slack and time.monotonic() < t0 + a.settle:
            time.sleep(0.2)
            n = fd_count(a.pid)
        check(what, n <= base + a.slack,
              "descriptors %d, baseline %d (after %.1f s)" % (n, base, time.monotonic() - t0))

    healthy("before")
    prober = Prober(a.host, a.port, a.probe_timeout, a.probe_every)
    base = fd_count(a.pid) if a.pid else 0
    if a.pid:
        print("     baseline: %d descriptors" % base, flush=True)
    prober.set_phase("during the bursts")
    for b in range(a.bursts):
        t0 = time.monotonic()
        n = burst(a.host, a.port, a.burst, 2)
        print("     burst %d: %d of %d connected in %.1f s" % (b + 1, n, a.burst, time.monotonic() - t0), flush=True)
        healthy("burst %d, just after" % (b + 1))
    prober.set_phase("after the bursts")
    settle("after the bursts", base)
    healthy("after the bursts")
    time.sleep(a.after)
    if a.slow:
        prober.set_phase("during the slowloris")
        sl = Slowloris(a.host, a.port, a.slow, a.interval)
        sl.start()
        print("     slowloris: %d connections open, %d refused" % (a.slow - sl.refused, sl.refused), flush=True)
        end = time.monotonic() + a.hold
        k = 0
        while time.monotonic() < end:
            k += 1
            healthy("slowloris, probe %d" % k)
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        prober.set_phase("after the slowloris")
        alive = sl.close()
        print("     slowloris: %d of its connections still open after %.0f s" % (alive, a.hold), flush=True)
        if a.expect_cut:
            check("slowloris cut by the server", alive == 0, "%d of %d still open" % (alive, a.slow - sl.refused))
        settle("after the slowloris", base)
        healthy("after the slowloris")
        time.sleep(a.after)
    prober.close()
    figures = prober.summary()
    for f in figures:
        print("     /health %s: %d probes, %d answered 200, median %.1f ms, max %.1f ms"
              % (f["phase"], f["probes"], f["ok"], f["median_ms"], f["max_ms"]), flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(figures, fh, indent=1)
    print("%s: %d failed checks" % ("PASS" if not failures else "FAIL", failures), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
