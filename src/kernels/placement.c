/*
 * Where the calling thread runs, for the thread pool's placement rule
 * (team.c, "Placement"): how idle the other processors it may run on have
 * been (/proc/stat's clock ticks), and a move off one processor that
 * leaves the thread's affinity as it was; and the affinity mask and
 * processor number of cpu_mask.h. Changes only the calling thread's
 * affinity, and only for an instant; no process-wide state.
 *
 * Where there is no affinity call (KVLM_HAVE_AFFINITY 0: not Linux, or
 * make KVLM_POSIX_ONLY=1) placement is a no-op: no processor number, no
 * idle time of the others, no move; the thread pool then leaves its
 * workers where the scheduler puts them.
 */
#include "kernels/placement.h"

#include <stdio.h>
#include <string.h>

#include "kernels/cpu_mask.h"

#if KVLM_HAVE_AFFINITY
#include <sched.h>

int kern_affinity_mask(kern_cpu_mask *m) {
    cpu_set_t set;
    kern_mask_zero(m);
    if (sched_getaffinity(0, sizeof set, &set)) return -1;
    for (int i = 0; i < CPU_SETSIZE && i < KERN_CPU_MAX; i++)
        if (CPU_ISSET(i, &set)) kern_mask_set(m, i);
    return 0;
}

int kern_cpu_now(void) { return sched_getcpu(); }

/* Moves the calling thread off processor `cpu`: its affinity without that
 * processor (the kernel migrates it at once), then the affinity it had
 * (which does not move it back). Returns whether it moved: not when `cpu`
 * is the only processor it may run on. */
int kern_move_off(int cpu) {
    cpu_set_t had, off;
    if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof had, &had)) return 0;
    off = had;
    CPU_CLR(cpu, &off);
    if (!CPU_COUNT(&off) || sched_setaffinity(0, sizeof off, &off)) return 0;
    sched_setaffinity(0, sizeof had, &had);
    return 1;
}

/* Idle and total clock ticks (/proc/stat) of the processors this thread
 * may run on other than `cpu`; returns how many there are, 0 when none or
 * when /proc/stat cannot be read. */
int kern_other_idle(int cpu, long long *idle, long long *total) {
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed)) return 0;
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return 0;
    char line[512];
    int n = 0, in_cpus = 0;
    *idle = *total = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "cpu", 3)) {
            if (in_cpus) break; /* the per-processor lines come first */
            continue;
        }
        in_cpus = 1;
        int c;
        unsigned long long v[8] = {0};
        if (line[3] < '0' || line[3] > '9' ||
            sscanf(line + 3, "%d %llu %llu %llu %llu %llu %llu %llu %llu", &c, &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7]) < 5)
            continue;
        if (c == cpu || c < 0 || c >= CPU_SETSIZE || !CPU_ISSET(c, &allowed)) continue;
        for (int k = 0; k < 8; k++) *total += (long long)v[k];
        *idle += (long long)(v[3] + v[4]); /* idle, iowait */
        n++;
    }
    fclose(f);
    return n;
}
#else
int kern_affinity_mask(kern_cpu_mask *m) {
    kern_mask_zero(m);
    return -1;
}

int kern_cpu_now(void) { return -1; }

int kern_move_off(int cpu) {
    (void)cpu;
    return 0;
}

int kern_other_idle(int cpu, long long *idle, long long *total) {
    (void)cpu;
    *idle = *total = 0;
    return 0;
}
#endif
