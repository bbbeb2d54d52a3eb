#!/bin/sh
# Time to first token for a long shared prefix plus a short question, from
# each place its KV can come from (docs/kv-tiers.md):
#   cold         kvlm serve, nothing cached: the whole prompt prefilled
#   pool         the same server, the prefix again with another question
#   ram          a server whose pool is one prompt long: a filler prompt
#                evicts the prefix into --kv-ram-bytes, then the prefix again
#   disk         a server with --kv-cache-dir restarted on its directory
#                (the page cache dropped first when the container allows it)
#   llama-cold   llama-server, nothing cached
#   llama-cache  llama-server's own prompt cache (its slot keeps the prefix)
#   llama-slot   llama-server restarted, slot 0 restored from --slot-save-path,
#                then the prefix with another question (the restore's own
#                time printed apart)
# Each time is a whole non-streamed request of one output token (its
# sampling needs only the prompt's logits), as curl measures it. Then the
# bytes on disk per token against the KV bytes per token, and decode
# tokens/s of `kvlm run` with the disk tier on and off, alternated
# (off on off on ...).
#
# usage: bench/kv_tiers.sh [-t THREADS] [-p PREFIX_TOKENS] [-r ROUNDS] MODEL.gguf
#   KVLM=build/kvlm  LLAMA_SERVER=/tmp/peer/llama.cpp/build/bin/llama-server
#   (LLAMA_SERVER= empty: kvlm only)
set -u
THREADS=2 PREFIX=2048 ROUNDS=2
KVLM=${KVLM:-build/kvlm}
LLAMA_SERVER=${LLAMA_SERVER-/tmp/peer/llama.cpp/build/bin/llama-server}
while getopts t:p:r: o; do
    case $o in
    t) THREADS=$OPTARG ;;
    p) PREFIX=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    *) exit 2 ;;
    esac
done
shift $((OPTIND - 1))
MODEL=${1:?usage: bench/kv_tiers.sh [-t THREADS] [-p PREFIX_TOKENS] [-r ROUNDS] MODEL.gguf}
WORK=$(mktemp -d /tmp/kv-tiers-bench.XXXXXX)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT INT TERM

# Token ids: the prefix, two questions, a filler as long as the prefix.
python3 - "$WORK" "$PREFIX" <<'EOF'
import json, random, sys
work, n = sys.argv[1], int(sys.argv[2])
r = random.Random(41)
ids = lambda k: [r.randrange(1000, 30000) for _ in range(k)]
prefix, q1, q2, filler = ids(n), ids(16), ids(16), ids(n)
for name, p in (("q1", prefix + q1), ("q2", prefix + q2), ("filler", filler + q1)):
    json.dump(p, open("%s/%s.json" % (work, name), "w"))
EOF

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_health() {
    i=0
    while [ $i -lt 600 ]; do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health")" = 200 ] && return 0
        sleep 0.2
        i=$((i + 1))
    done
    echo "server on port $1 did not start" >&2
    exit 1
}
stop() { [ -n "$PID" ] && kill "$PID" && wait "$PID" 2>/dev/null; PID=; }
drop_caches() {
    sync
    if (echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then echo "page cache dropped"
    else echo "page cache NOT dropped (the container refuses /proc/sys/vm/drop_caches)"; fi
}

serve() { # serve PORT ARGS...: starts kvlm serve in the background
    p=$1
    shift
    "$KVLM" serve -m "$MODEL" --threads "$THREADS" --kv-dtype f16 --max-seqs 1 --port "$p" --access-log off \
        --no-draft "$@" >"$WORK/serve.log" 2>&1 &
    PID=$!
    wait_health "$p"
}
ask() { # ask PORT NAME: seconds for one completion of one token
    printf '{"prompt": %s, "max_tokens": 1, "temperature": 0}' "$(cat "$WORK/$2.json")" >"$WORK/body"
    curl -s -o "$WORK/out" -w '%{time_total}' -H 'Content-Type: application/json' \
        --data-binary @"$WORK/body" "http://127.0.0.1:$1/v1/completions"
}
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

llama() { # llama PORT: llama-server with one slot and a slot directory
    "$LLAMA_SERVER" -m "$MODEL" -t "$THREADS" -c 4096 -np 1 -ctk f16 -ctv f16 --port "$1" \
        --slot-save-path "$WORK/slots/" >"$WORK/llama.log" 2>&1 &
    PID=$!
    wait_health "$1"
}
lask() {
    printf '{"prompt": %s, "n_predict": 1, "temperature": 0, "cache_prompt": true}' "$(cat "$WORK/$2.json")" \
        >"$WORK/body"
    curl -s -o "$WORK/out" -w '%{time_total}' -H 'Content-Type: application/json' --data-binary @"$WORK/body" \
        "http://127.0.0.1:$1/completion"
}
slot() { # slot PORT save|restore
    curl -s -o "$WORK/slot.json" -w '%{time_total}' -H 'Content-Type: application/json' \
        -d '{"filename": "prefix.bin"}' "http://127.0.0.1:$1/slots/0?action=$2"
}

echo "kv_tiers: $MODEL, prefix $PREFIX tokens + 16, f16 KV, $THREADS threads, $(nproc) cores (shared: the machine is busy)"
round=1
while [ "$round" -le "$ROUNDS" ]; do
    P=$(port)
    serve "$P"
    cold=$(ask "$P" q1)
    pool=$(ask "$P" q2)
    stop
    # A pool of PREFIX + 64 tokens: the filler evicts the prefix.
    serve "$P" --kv-mib $((($PREFIX + 64) * 32 / 1024)) --kv-ram-bytes 1073741824
    ask "$P" q1 >/dev/null
    ask "$P" filler >/dev/null
    ram=$(ask "$P" q2)
    ramhits=$(metric "$P" kvlm_kv_tier_ram_hits_total)
    stop
    rm -rf "$WORK/dir"
    serve "$P" --kv-cache-dir "$WORK/dir"
    ask "$P" q1 >/dev/null
    sleep 2 # the writer's queue drains
    written=$(metric "$P" kvlm_kv_tier_written_bytes_total)
    stop
    dropped=$(drop_caches)
    serve "$P" --kv-cache-dir "$WORK/dir"
    disk=$(ask "$P" q2)
    diskhits=$(metric "$P" kvlm_kv_tier_disk_hits_total)
    restore=$(metric "$P" kvlm_kv_tier_restore_seconds_sum)
    readb=$(metric "$P" kvlm_kv_tier_read_bytes_total)
    stop
    echo "round $round kvlm: cold ${cold}s  pool ${pool}s  ram ${ram}s (${ramhits} blocks)  disk ${disk}s" \
         "(${diskhits} blocks, ${readb} bytes read in ${restore}s; ${dropped})"
    echo "round $round kvlm: cold/pool $(echo "$cold / $pool" | bc -l | cut -c1-6)x  cold/ram" \
         "$(echo "$cold / $ram" | bc -l | cut -c1-6)x  cold/disk $(echo "$cold / $disk" | bc -l | cut -c1-6)x"
    if [ -n "$LLAMA_SERVER" ]; then
        rm -rf "$WORK/slots"
        mkdir -p "$WORK/slots"
        llama "$P"
        lcold=$(lask "$P" q1)
        lcache=$(lask "$P" q2)
        save=$(slot "$P" save)
        stop
        dropped=$(drop_caches)
        llama "$P"
        lrestore=$(slot "$P" restore)
        lslot=$(lask "$P" q2)
        stop
        echo "round $round llama-server: cold ${lcold}s  prompt cache ${lcache}s  slot save ${save}s," \
             "after restart: restore ${lrestore}s + request ${lslot}s (${dropped})"
        echo "round $round kvlm disk vs llama-server slot restore + request:" \
             "$(echo "($lrestore + $lslot) / $disk" | bc -l | cut -c1-6)x"
    fi
    round=$((round + 1))
done

# Bytes on disk per token against KV bytes per token.
files=$(ls "$WORK/dir" | wc -l)
bytes=$(du -cb "$WORK/dir"/*.kvb | tail -1 | cut -f1)
echo "disk: $files files, $bytes bytes, written $written bytes; $(echo "$bytes / ($files * 16)" | bc) bytes per token" \
     "on disk against $("$KVLM" run -m "$MODEL" --threads "$THREADS" --kv-dtype f16 --ids 1000 -n 0 --stats 2>&1 >/dev/null |
        awk '/KV bytes per token/ {print $5}')" \
     "KV bytes per token (header 80 + 4 x 16 bytes of token ids per file of 16 tokens)"

# Decode speed with the disk tier on and off, alternated.
i=1
while [ $i -le $((ROUNDS * 2)) ]; do
    for mode in off on; do
        extra=
        [ $mode = on ] && rm -rf "$WORK/ddir" && extra="--kv-cache-dir $WORK/ddir"
        tps=$("$KVLM" run -m "$MODEL" --threads "$THREADS" --kv-dtype f16 --ids "$(python3 -c 'print(",".join(str(1000 + i) for i in range(64)))')" \
            -n 128 --ignore-eos --temp 0 --stats $extra 2>&1 >/dev/null | awk '/time per out token/ {gsub(/\(/, "", $7); print $7}')
        echo "decode $mode: $tps tokens/s"
    done
    i=$((i + 1))
done
