#!/bin/sh
# How long the thread pool takes to use its whole team again after a
# competing process ends: one long decode run (`kvlm bench --pp 16 --tg
# TOKENS --repeats R`) with the pool's trace on; BEFORE seconds after it
# starts a busy process (`taskset -c 0 yes` by default) runs for BUSY_S
# seconds and is killed. The trace, cut into WINDOW ms windows, shows each
# window's adaptive size and where the worker ran (bench/team_trace.awk);
# the recovery time is from the kill to the start of the first window
# after it from which on every window has the full team size (no region
# reduced) and workers claiming at least MIN_SHARE % of the items.
#
# usage: bench/team_recovery.sh [-t THREADS] [-n TOKENS] [-r REPEATS] MODEL.gguf
#   KVLM=build/kvlm  BUSY="taskset -c 0 yes"  BEFORE=6  BUSY_S=3  WINDOW=100
#   MIN_SHARE=0  LOCK=/tmp/kvlm-bench.lock (LOCK= empty: no lock)
#   KEEP=file (optional: keep the trace)
set -u
THREADS=2 TOKENS=64 REPEATS=12
KVLM=${KVLM:-build/kvlm}
BUSY=${BUSY:-taskset -c 0 yes}
BEFORE=${BEFORE:-6} BUSY_S=${BUSY_S:-3} WINDOW=${WINDOW:-100} MIN_SHARE=${MIN_SHARE:-0}
LOCK=${LOCK-/tmp/kvlm-bench.lock}
KEEP=${KEEP:-}
HERE=$(dirname "$0")
while getopts t:n:r: o; do
    case $o in
    t) THREADS=$OPTARG ;;
    n) TOKENS=$OPTARG ;;
    r) REPEATS=$OPTARG ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || { sed -n '2,15p' "$0"; exit 2; }
if [ "${LOCKED:-}" != 1 ] && [ -n "$LOCK" ]; then
    LOCKED=1 exec flock "$LOCK" "$0" -t "$THREADS" -n "$TOKENS" -r "$REPEATS" "$1"
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
uptime_s() { cut -d' ' -f1 /proc/uptime; }

KVLM_TEAM_TRACE=$TMP/trace "$KVLM" bench -m "$1" --threads "$THREADS" --pp 16 --tg "$TOKENS" --repeats "$REPEATS" \
    --kv-dtype f16 --skip-cache-test --bw-mib 64 > "$TMP/out" 2>&1 &
k=$!
sleep "$BEFORE"
$BUSY > /dev/null &
y=$!
on=$(uptime_s)
sleep "$BUSY_S"
kill "$y"
wait "$y" 2> /dev/null
off=$(uptime_s)
wait "$k"
[ -n "$KEEP" ] && cp "$TMP/trace" "$KEEP"
opened=$(sed -n 's/.*opened at \([0-9.]*\) s.*/\1/p' "$TMP/trace" | head -1)
[ -n "$opened" ] || { echo "no trace (did kvlm run?)"; cat "$TMP/out"; exit 1; }
awk -f "$HERE/team_trace.awk" -v WINDOW="$WINDOW" "$TMP/trace" > "$TMP/windows"
awk -v on="$on" -v off="$off" -v opened="$opened" -v W="$WINDOW" -v min="$MIN_SHARE" '
    NR == 1 { print "t_s_after_kill " $0; next }
    {
        t = opened + $2 / 1000 - off   # window start, seconds after the kill
        tag = (opened + $2 / 1000 < on) ? "quiet" : (t < 0 ? "busy" : "after")
        printf "%7.2f %-5s %s\n", t, tag, $0
        if (tag == "after") {
            ok = $12 == 0 && $3 > 0 && $5 >= min
            if (ok && !run) { run = 1; first = t }
            if (!ok) run = 0
        }
        if (tag == "busy") { bw += $5 * $3; br += $3; bred += $12 }
        if (tag == "quiet") { qw += $5 * $3; qr += $3 }
    }
    END {
        printf "\nquiet before: worker share %.1f%% over %d regions\n", qr ? qw / qr : 0, qr
        printf "busy (%.1f s): worker share %.1f%% over %d regions, %d regions with a reduced team\n", off - on,
               br ? bw / br : 0, br, bred
        if (run) printf "recovered: full team with workers claiming >= %d%% of the items from %.2f s after the kill (window %d ms)\n", min, first < 0 ? 0 : first, W
        else printf "not recovered before the run ended\n"
    }' "$TMP/windows"
grep "^tg" "$TMP/out" || true
