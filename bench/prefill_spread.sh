#!/bin/sh
# Prefill and decode speed from process to process: N fresh processes of
#   kvlm bench -m MODEL --threads THREADS --pp 120 --tg 4 --repeats 5 --skip-cache-test --json
# per model, each with the thread pool's trace on (docs/threads.md), and the
# spread of their medians.
#
# usage: bench/prefill_spread.sh [-n PROCS] [-t THREADS] [-p PP] [-g TG] MODEL.gguf...
#   KVLM=build/kvlm     the kvlm binary measured ("new")
#   KVLM_OLD=path       optional: a second binary ("old"), run alternately
#                       with new (old new old new ...), the same way
#   OLD_ENV="K=V ..."   optional: environment for the old program only (e.g.
#                       KVLM_OLD=build/kvlm OLD_ENV=KVLM_TEAM_PLACE=0 measures
#                       one binary with and without the workers' moves)
#   LOCK=/tmp/kvlm-bench.lock  each process runs under `flock $LOCK` (LOCK=
#                       empty: no lock)
#   KEEP=dir            optional: keep each process's JSON and trace there
#
# Output: one line per process,
#   model program i pp_median pp_sd% tg_median tg_sd% worker% samecpu% moves shrinks
# (moves: made/not made, workers' moves off the caller's processor, team.c)
# (pp_sd% and tg_sd%: the within-process standard deviation over the
# repeats as a share of the median; worker%/samecpu%: bench/team_trace.awk
# over the process's plain regions, the prefill's), then per model and
# program: best and worst prefill median, worst/best, how many processes are
# within 10% of the best, the largest within-process pp_sd%, and the same for
# decode. The target: every prefill median within 10% of the best
# and every pp_sd% below 5, on a quiet machine.
set -u
N=10 THREADS=2 PP=120 TG=4
KVLM=${KVLM:-build/kvlm}
KVLM_OLD=${KVLM_OLD:-}
OLD_ENV=${OLD_ENV:-}
LOCK=${LOCK-/tmp/kvlm-bench.lock}
KEEP=${KEEP:-}
HERE=$(dirname "$0")

while getopts n:t:p:g: o; do
    case $o in
    n) N=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    p) PP=$OPTARG ;;
    g) TG=$OPTARG ;;
    *) sed -n '2,27p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,27p' "$0"; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/lines

# one process of program $1 on model $2, number $3: prints its line
one() {
    bin=$KVLM envs=
    if [ "$1" = old ]; then bin=$KVLM_OLD envs=$OLD_ENV; fi
    tr=$TMP/trace json=$TMP/json
    rm -f "$tr"
    set -- "$1" "$2" "$3" env $envs KVLM_TEAM_TRACE="$tr" "$bin" bench -m "$2" --threads "$THREADS" --pp "$PP" \
        --tg "$TG" --repeats 5 --skip-cache-test --json
    p=$1 m=$2 i=$3
    shift 3
    if [ -n "$LOCK" ]; then flock "$LOCK" "$@" > "$json" 2> /dev/null; else "$@" > "$json" 2> /dev/null; fi
    v=$(jq -r '[.pp.median_tok_s, .pp.sd_tok_s, .tg.median_tok_s, .tg.sd_tok_s] | @tsv' "$json" 2> /dev/null)
    [ -n "$v" ] || v="0 0 0 0"
    t=$(awk -f "$HERE/team_trace.awk" -v KIND=p "$tr" 2> /dev/null | awk 'NR == 2 { print $4, $6 }')
    [ -n "$t" ] || t="- -"
    mv=$(sed -n 's/.* \([0-9]*\) moves, \([0-9]*\) not made.*/\1\/\2/p' "$tr" 2> /dev/null | head -1)
    sh=$(sed -n 's/.* \([0-9]*\) shrinks.*/\1/p' "$tr" 2> /dev/null | head -1)
    echo "$v" | awk -v m="$(basename "$m")" -v p="$p" -v i="$i" -v t="$t" -v mv="${mv:--}" -v sh="${sh:--}" \
        '{ a = $1 > 0 ? 100 * $2 / $1 : 0; b = $3 > 0 ? 100 * $4 / $3 : 0
           printf "%s %s %d %.1f %.1f %.2f %.1f %s %s %s\n", m, p, i, $1, a, $3, b, t, mv, sh }'
    if [ -n "$KEEP" ]; then
        mkdir -p "$KEEP"
        cp "$json" "$KEEP/$(basename "$m").$p.$i.json"
        cp "$tr" "$KEEP/$(basename "$m").$p.$i.trace" 2> /dev/null
    fi
}

echo "model program i pp_median pp_sd% tg_median tg_sd% worker% samecpu% moves/not shrinks"
for m in "$@"; do
    for i in $(seq "$N"); do
        [ -n "$KVLM_OLD" ] && one old "$m" "$i"
        one new "$m" "$i"
    done
done | tee "$OUT"

echo
echo "per model and program: prefill best worst worst/best within10% max_sd% | decode best worst worst/best max_sd%"
awk 'NR > 0 && $4 > 0 {
         k = $1 " " $2; n[k]++; pp[k, n[k]] = $4
         if (!(k in best) || $4 > best[k]) best[k] = $4
         if (!(k in worst) || $4 < worst[k]) worst[k] = $4
         if ($5 > sd[k]) sd[k] = $5
         if (!(k in tb) || $6 > tb[k]) tb[k] = $6
         if (!(k in tw) || $6 < tw[k]) tw[k] = $6
         if ($7 > tsd[k]) tsd[k] = $7
     }
     END {
         for (k in n) {
             w = 0
             for (j = 1; j <= n[k]; j++) if (pp[k, j] >= 0.9 * best[k]) w++
             printf "  %s: pp %.1f %.1f %.2f %d/%d %.1f | tg %.2f %.2f %.2f %.1f\n", k, best[k], worst[k],
                    worst[k] / best[k], w, n[k], sd[k], tb[k], tw[k], tw[k] / tb[k], tsd[k]
         }
     }' "$OUT" | sort
