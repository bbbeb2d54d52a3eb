#!/bin/sh
# What watching the engine costs: serving throughput of kvlm serve with no
# client on the engine view, with one client on /kvlm/engine/stream every
# 500 ms and with one every 100 ms, measured side by side (docs/engine-view.md).
#
# usage: bench/engine_view_cost.sh [ROUNDS]      (default 3)
#   KVLM=build/kvlm                  the binary (server and load generator)
#   MODEL=models/shakespeare-gpt2    the served model
#   PORT=18761  THREADS=2  CONC="4 16"
#   KV_BLOCKS=N                      optional: the pool's size in blocks (the
#                                    snapshot lists every block)
#   LOCK=/tmp/kvlm-bench.lock        each (round, concurrency) block runs under
#                                    `flock $LOCK` with the fuzz campaign's
#                                    processes stopped (SIGSTOP) and resumed
#                                    after it, also when it fails
#
# One server for the whole run (--max-seqs 16, --threads THREADS). In each
# block the three watchers (none, 500 ms, 100 ms) take turns, their order
# rotated from round to round; each turn is `kvlm loadgen --concurrency C
# -n 16C --prompt-len 32 --max-tokens 64 --vocab 50257` with the watcher a
# `curl -N` on the stream started 0.3 s before it and stopped after it.
#
# Output: one line per run,
#   round concurrency watcher output_tok/s ttft_p50_ms tpot_p50_ms events cpu_ms_per_1k_tokens
# (events: snapshots the watcher received; cpu: the server process's user +
# system CPU time during the run, from /proc, per 1000 output tokens: what
# the server spent, which other programs on a shared machine disturb less
# than throughput), then per concurrency the ratios of each watcher's
# tokens/s and CPU per token to the unwatched run of the same round, and
# the server's own snapshot build times (/kvlm/engine "snapshot").
set -u
KVLM=${KVLM:-build/kvlm} MODEL=${MODEL:-models/shakespeare-gpt2} PORT=${PORT:-18761}
THREADS=${THREADS:-2} CONC=${CONC:-4 16} LOCK=${LOCK-/tmp/kvlm-bench.lock}
URL=http://127.0.0.1:$PORT

# The server's user + system CPU time in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER/stat"; }

field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }

run_one() { # round conc watcher
    out=$(mktemp) ev=$(mktemp)
    wpid=
    if [ "$3" != none ]; then
        curl -sN "$URL/kvlm/engine/stream?interval_ms=$3" > "$ev" &
        wpid=$!
        sleep 0.3
    fi
    c0=$(cpu_ticks)
    "$KVLM" loadgen --url "$URL" --concurrency "$2" -n $((16 * $2)) --prompt-len 32 --max-tokens 64 \
        --vocab 50257 --json > "$out"
    c1=$(cpu_ticks)
    [ -n "$wpid" ] && kill "$wpid" && wait "$wpid" 2>/dev/null
    events=$(grep -c '^data: ' "$ev")
    cpu=$(field "$out" "round(($c1 - $c0) * 1000.0 / $(getconf CLK_TCK) / d['output_tokens'] * 1000, 1)")
    echo "$1 $2 $3 $(field "$out" "round(d['output_tokens_per_s'])") $(field "$out" "round(d['ttft_ms']['p50'],1)")" \
         "$(field "$out" "round(d['tpot_ms']['p50'],2)") $events $cpu"
    rm -f "$out" "$ev"
}

if [ "${1:-}" = --block ]; then # round conc server_pid: the three watchers, rotated
    SERVER=$4
    case $(( $2 % 3 )) in
    1) order="none 500 100" ;;
    2) order="500 100 none" ;;
    *) order="100 none 500" ;;
    esac
    for w in $order; do run_one "$2" "$3" "$w"; done
    exit 0
fi

ROUNDS=${1:-3}
"$KVLM" serve -m "$MODEL" --port "$PORT" --threads "$THREADS" --max-seqs 16 ${KV_BLOCKS:+--kv-blocks $KV_BLOCKS} \
    --access-log off 2>/dev/null &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for i in $(seq 100); do curl -sf "$URL/health" > /dev/null && break; sleep 0.1; done
"$KVLM" loadgen --url "$URL" --concurrency 4 -n 16 --prompt-len 32 --max-tokens 64 --vocab 50257 > /dev/null # warm-up
LINES=$(mktemp)
for r in $(seq "$ROUNDS"); do
    for c in $CONC; do
        block="pkill -STOP -f '[b]uild-fuzz/fuzz_'; '$0' --block $r $c $SERVER; rc=\$?; pkill -CONT -f '[b]uild-fuzz/fuzz_'; exit \$rc"
        if [ -n "$LOCK" ]; then flock "$LOCK" sh -c "$block"; else sh -c "$block"; fi
    done
done | tee "$LINES"
python3 - "$LINES" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for col, name in ((3, "tokens/s"), (7, "CPU per token")):
    base = {(r[0], r[1]): float(r[col]) for r in rows if r[2] == "none"}
    for conc in sorted({r[1] for r in rows}, key=int):
        for w in ("500", "100"):
            ratios = sorted(float(r[col]) / base[(r[0], r[1])] for r in rows if r[1] == conc and r[2] == w)
            print(f"{name}, concurrency {conc}, watcher {w} ms / none: " + " ".join(f"{x:.3f}" for x in ratios)
                  + f" (median {ratios[len(ratios) // 2]:.3f})")
EOF
curl -s "$URL/kvlm/engine" | python3 -c "import json,sys; d=json.load(sys.stdin); print('pool', d['kv']['n_blocks'], 'blocks; snapshot builds:', d['snapshot'])"
rm -f "$LINES"
