# Summarises thread pool traces (KVLM_TEAM_TRACE=FILE, docs/threads.md):
# per team, or per WINDOW milliseconds of it with -v WINDOW=ms, over the
# regions offered to two or more threads (kind p and s; KIND=p or KIND=s
# keeps one kind):
#   regions   regions offered to >= 2 threads (serial: run on the caller
#             alone because the adaptive size was 1)
#   worker%   share of those regions' items that workers claimed (with one
#             worker at full speed on its own core, about 50% at 2 threads)
#   absent%   worker slots that claimed no item
#   samecpu%  worker slots that claimed items on the processor the caller
#             published from (two threads sharing one core: 1-thread speed)
#   woken%    worker slots asleep at publication (woken by a futex)
#   start_us  median time from publication to a worker's first claim
#   late steals shrinks-visible (active < threads at region end)
#
# usage: awk -f bench/team_trace.awk [-v WINDOW=100] [-v KIND=p] TRACE...
function flush(   key, med, n, i, j, t) {
    if (!regions && !serial) return
    n = 0
    for (i = 0; i < nstart; i++) s[n++] = starts[i]
    for (i = 1; i < n; i++) { t = s[i]; for (j = i - 1; j >= 0 && s[j] > t; j--) s[j + 1] = s[j]; s[j + 1] = t }
    med = n ? s[int((n - 1) / 2)] : -1
    key = WINDOW ? sprintf("%s %9.0f", team, wstart) : team
    printf "%s %7d %6d %7.1f %7.1f %8.1f %6.1f %8.1f %5d %6d %7d\n", key, regions, serial,
           items ? 100 * witems / items : 0, slots ? 100 * absent / slots : 0,
           present ? 100 * same / present : 0, slots ? 100 * woken / slots : 0, med, late, steals, small
    regions = serial = items = witems = slots = absent = present = same = woken = late = steals = small = nstart = 0
}
BEGIN {
    if (WINDOW) printf "%-14s %9s", "team", "t_ms"; else printf "%-14s", "team"
    printf " %7s %6s %7s %7s %8s %6s %8s %5s %6s %7s\n", "regions", "serial", "worker%", "absent%", "samecpu%",
           "woken%", "start_us", "late", "steals", "reduced"
}
/^# kvlm team trace:/ {
    flush()
    nteam++
    team = sprintf("pid%s", $6); sub(/,/, "", team)
    threads = $7
    wstart = 0
    next
}
/^#/ { next }
{
    if (KIND && $2 != KIND) next
    if (WINDOW && $1 >= wstart + WINDOW) { flush(); wstart = WINDOW * int($1 / WINDOW) }
    if ($4 < 2) { serial++; small++; next }
    regions++
    items += $3
    late += $7
    steals += $8
    if ($9 < threads) small++
    for (f = 13; f <= NF; f++) { # worker slots: w:items@cpu+start[w]
        split($f, a, /[:@+]/)
        slots++
        if ($f ~ /w$/) woken++
        if (a[2] + 0 == 0) { absent++; continue }
        present++
        witems += a[2]
        if (a[3] >= 0 && a[3] == $10) same++ # -1: the system gave no processor number
        starts[nstart++] = a[4] + 0
    }
}
END { flush() }
