#!/bin/sh
# Decode speed on a shared machine: each program's tokens/s without and with
# one busy process (by default pinned to one core, `taskset -c 0 yes >
# /dev/null`; see BUSY), started just before the run and killed after it.
#
# usage: bench/contention.sh [-r ROUNDS] [-n TOKENS] [-t THREADS] MODEL.gguf...
#   KVLM=build/kvlm          the kvlm binary measured ("new")
#   KVLM_OLD=path            optional: a second kvlm binary ("old", e.g. a copy
#                            of main's build/kvlm), measured the same way
#   LLAMA_BENCH=path         optional: llama.cpp's llama-bench (never needed
#                            by kvlm; only a point of comparison)
#   ONE=1                    optional: also KVLM at one thread ("one"; its busy
#                            speed against new's quiet is what a team that
#                            shrank to one thread at once would keep)
#   LOCK=/tmp/kvlm-bench.lock  every (round, model) block runs under
#                            `flock $LOCK`, so each locked stretch stays short;
#                            LOCK= (empty) runs without the lock: use it when
#                            the caller holds that lock already
#   WRAP=cmd                 optional: run each (round, model) block as
#                            `cmd bench/contention.sh --block ...` instead of
#                            under flock (a command that takes the lock
#                            itself and may quiet other jobs meanwhile)
#   BUSY="taskset -c 0 yes"  the competing process: a command that runs until
#                            sent SIGTERM (stopping any children it started),
#                            stdout to /dev/null
#   TIMEOUT=90               seconds before one run is given up ("timeout")
#
# Rounds alternate the programs (old, new, one, llama) inside each model,
# quiet then busy for each program. kvlm runs `kvlm bench --pp 16 --tg TOKENS
# --repeats 2 --kv-dtype f16` (decode median); llama-bench runs `-p 0 -n
# TOKENS -r 2 -ctk f16 -ctv f16` (mean). Both at THREADS threads (default 2).
#
# Output: one line per run,
#   round model program quiet_tok/s busy_tok/s kept
# where kept = busy / quiet (the share of its own uncontended speed a
# program keeps; the target for kvlm is >= 0.50), then, per model, the
# worst round's kept for each program and, with KVLM_OLD, new/old quiet
# ratios per round (uncontended speed against the other binary).
set -u
ROUNDS=3 TOKENS=${TOKENS:-32} THREADS=${THREADS:-2}
KVLM=${KVLM:-build/kvlm}
KVLM_OLD=${KVLM_OLD:-}
ONE=${ONE:-}
LLAMA_BENCH=${LLAMA_BENCH:-}
LOCK=${LOCK-/tmp/kvlm-bench.lock}
TIMEOUT=${TIMEOUT:-90}
WRAP=${WRAP:-}
BUSY=${BUSY:-taskset -c 0 yes}

# tokens/s of one run of program $1 on model $2, or "timeout"/"error".
run_one() {
    case $1 in
    llama)
        r=$(timeout "$TIMEOUT" "$LLAMA_BENCH" -m "$2" -t "$THREADS" -p 0 -n "$TOKENS" -r 2 -ctk f16 -ctv f16 -o csv 2>/dev/null)
        rc=$?
        v=$(printf '%s\n' "$r" | awk -F, '{ gsub(/"/, "") }
                                          NR == 1 { for (i = 1; i <= NF; i++) if ($i == "avg_ts") c = i; next }
                                          c { print $c; exit }') ;;
    *)
        bin=$KVLM th=$THREADS
        [ "$1" = old ] && bin=$KVLM_OLD
        [ "$1" = one ] && th=1
        r=$(timeout "$TIMEOUT" "$bin" bench -m "$2" --pp 16 --tg "$TOKENS" --repeats 2 --threads "$th" \
            --kv-dtype f16 --no-cache-test --bw-mib 64 2>/dev/null)
        rc=$?
        v=$(printf '%s\n' "$r" | awk '$1 ~ /^tg/ { print $4; exit }') ;;
    esac
    if [ $rc -eq 124 ]; then echo timeout; elif [ -z "$v" ]; then echo error; else echo "$v"; fi
}

busy_run() {
    $BUSY > /dev/null &
    y=$!
    sleep 0.2
    v=$(run_one "$1" "$2")
    kill "$y"
    wait "$y" 2> /dev/null
    echo "$v"
}

# One round over one model: every program quiet then busy.
block() {
    progs=""
    [ -n "$KVLM_OLD" ] && progs="old"
    progs="$progs new"
    [ -n "$ONE" ] && progs="$progs one"
    [ -n "$LLAMA_BENCH" ] && progs="$progs llama"
    for p in $progs; do
        q=$(run_one "$p" "$2")
        b=$(busy_run "$p" "$2")
        k=$(awk -v q="$q" -v b="$b" 'BEGIN { if (q + 0 > 0 && b + 0 > 0) printf "%.2f", b / q; else print "-" }')
        echo "$1 $(basename "$2") $p $q $b $k"
    done
}

if [ "${1:-}" = --block ]; then # internal: one round over one model, under the lock
    block "$2" "$3"
    exit 0
fi

while getopts r:n:t: o; do
    case $o in
    r) ROUNDS=$OPTARG ;;
    n) TOKENS=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    *) sed -n '2,37p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,37p' "$0"; exit 2; }
export KVLM KVLM_OLD ONE LLAMA_BENCH TOKENS THREADS TIMEOUT BUSY
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

echo "round model program quiet_tok/s busy_tok/s kept"
for r in $(seq "$ROUNDS"); do
    for m in "$@"; do
        if [ -n "$WRAP" ]; then
            $WRAP "$0" --block "$r" "$m"
        elif [ -n "$LOCK" ]; then
            flock "$LOCK" "$0" --block "$r" "$m"
        else
            block "$r" "$m"
        fi
    done
done | tee "$OUT"

echo
echo "worst round per model and program (kept = busy / quiet):"
awk 'NF == 6 { key = $2 " " $3; if (!(key in w) || $6 == "-" || ($6 + 0 < w[key] + 0 && w[key] != "-")) w[key] = $6 }
     END { for (k in w) print "  " k " kept " w[k] }' "$OUT" | sort
if [ -n "$KVLM_OLD" ]; then
    echo "new / old quiet tokens/s per round:"
    awk 'NF == 6 && $3 == "old" { o[$1 " " $2] = $4 }
         NF == 6 && $3 == "new" { n[$1 " " $2] = $4 }
         END { for (k in n) if (o[k] + 0 > 0) printf "  round %s %.2f\n", k, n[k] / o[k] }' "$OUT" | sort
fi
if [ -n "$ONE" ]; then
    echo "one thread busy / new quiet tokens/s per round:"
    awk 'NF == 6 && $3 == "new" { q[$1 " " $2] = $4 }
         NF == 6 && $3 == "one" { b[$1 " " $2] = $5 }
         END { for (k in b) if (q[k] + 0 > 0) printf "  round %s %.2f\n", k, b[k] / q[k] }' "$OUT" | sort
fi
