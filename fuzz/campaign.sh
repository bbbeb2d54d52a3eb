#!/bin/sh
# A long fuzzing campaign for one target, budgeted in CPU time rather than
# wall time: fuzz/campaign.sh BUILD_DIR TARGET CPU_SECONDS
# Runs fuzz/run.sh (nice -n 19, the target's corpora) and stops the fuzzer
# with SIGINT once its user + system time reaches what is left of the
# budget, so a run that shares the machine, or is paused (SIGSTOP) while a
# benchmark runs, still gets its full share. The CPU time spent is kept in
# BUILD_DIR/campaign/TARGET.cpu (updated every 5 s) and counted by the next
# call, so a campaign cut short (a reboot, the end of a working day) resumes
# where it stopped;
# each run's log is BUILD_DIR/campaign/TARGET.N.log and its summary line is
# appended to BUILD_DIR/campaign/summary.tsv (time, target, CPU s, wall s,
# inputs run, slowest input s, status, libFuzzer's last status line). Exits non-zero when the
# fuzzer found a crash, a leak or a timeout.
set -eu
build=$1 target=$2 budget=$3
dir=$build/campaign
mkdir -p "$dir"
spent_file=$dir/$target.cpu
spent=0
[ -f "$spent_file" ] && spent=$(cat "$spent_file")
left=$((budget - spent))
if [ "$left" -le 0 ]; then
    echo "fuzz campaign: $target already has ${spent} CPU-s of ${budget}"
    exit 0
fi
n=1
while [ -e "$dir/$target.$n.log" ]; do n=$((n + 1)); done
log=$dir/$target.$n.log
hz=$(getconf CLK_TCK)
echo "fuzz campaign: $target, ${left} CPU-s left of ${budget} (log $log)"
start=$(date +%s)
# The wall-clock limit of run.sh only guards against a stuck monitor.
# libFuzzer times an input by the wall clock, so a campaign paused with
# SIGSTOP would report the input it was running as a hang: the per-input
# timeout is 30 minutes here (the smoke runs keep 10 s), and the slowest
# input's time is in the summary.
FUZZ_UNIT_TIMEOUT=${FUZZ_UNIT_TIMEOUT:-1800} ./fuzz/run.sh "$build" "$target" $((left * 20 + 3600)) 1 >"$log" 2>&1 &
pid=$!
cpu=0
while kill -0 "$pid" 2>/dev/null; do
    # utime and stime are fields 14 and 15 of /proc/PID/stat; the command
    # name (field 2) holds no space here (fuzz_TARGET).
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo "")
    [ -n "$ticks" ] && cpu=$((ticks / hz))
    echo $((spent + cpu)) >"$spent_file" # kept even if this script is killed
    if [ "$cpu" -ge "$left" ]; then
        kill -INT "$pid" 2>/dev/null || true
        break
    fi
    sleep 5
done
rc=0
wait "$pid" || rc=$?
echo $((spent + cpu)) >"$spent_file"
wall=$(($(date +%s) - start))
# libFuzzer exits 72 when interrupted (the budget was reached), 0 when its
# own time limit passed; anything else is a finding.
status=ok
case $rc in 0 | 72) ;; *) status="finding (exit $rc)" ;; esac
last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | awk '{print $2}')
slowest=$(grep -o 'stat::slowest_unit_time_sec: [0-9]*' "$log" | tail -1 | awk '{print $2}')
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$target" "$cpu" "$wall" "${execs:-?}" "${slowest:-?}" "$status" "$last" \
    >>"$dir/summary.tsv"
echo "fuzz campaign: $target ran ${cpu} CPU-s in ${wall} s (total $((spent + cpu)) of ${budget}): $status"
echo "  $last"
[ "$status" = ok ]
