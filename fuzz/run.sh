#!/bin/sh
# Runs one libFuzzer target: fuzz/run.sh BUILD_DIR TARGET SECONDS [JOBS]
# Starts from the committed seeds (fuzz/corpus/TARGET), the inputs earlier
# campaigns kept (fuzz/found/TARGET, see fuzz/keep.sh) and what earlier
# runs on this machine found (BUILD_DIR/corpus/TARGET, where new inputs are
# written);
# crashes go to BUILD_DIR/crashes/TARGET/. Runs under nice -n 19. An input
# that runs longer than FUZZ_UNIT_TIMEOUT seconds (default 10) is a finding.
# Exits non-zero when the fuzzer found a crash, a leak or a timeout.
set -eu
build=$1 target=$2 secs=$3 jobs=${4:-1}
unit_timeout=${FUZZ_UNIT_TIMEOUT:-10}
bin=$build/fuzz_$target
seeds=fuzz/corpus/$target
found=""
[ -d "fuzz/found/$target" ] && found="fuzz/found/$target"
work=$build/corpus/$target
crashes=$build/crashes/$target
mkdir -p "$work" "$crashes"
dict=""
[ -f "fuzz/$target.dict" ] && dict="-dict=fuzz/$target.dict"
echo "fuzz: $target for ${secs}s ($jobs job(s))"
if [ "$jobs" -gt 1 ]; then
    # shellcheck disable=SC2086
    exec nice -n 19 "$bin" -max_total_time="$secs" -timeout="$unit_timeout" -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 -artifact_prefix="$crashes/" -jobs="$jobs" -workers="$jobs" $dict "$work" "$seeds" $found
fi
# shellcheck disable=SC2086
exec nice -n 19 "$bin" -max_total_time="$secs" -timeout="$unit_timeout" -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$crashes/" $dict "$work" "$seeds" $found
