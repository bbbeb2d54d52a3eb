/*
 * Physical cores of an affinity mask, from the kernel's CPU topology in
 * sysfs (see cores.h for why the default thread count is one per core).
 *
 * Two sources, tried in order for every processor of the mask:
 * topology/thread_siblings_list ("0,2", "0-1", "0-3,8-11": the processors
 * sharing the core) and topology/core_id with topology/physical_package_id
 * (a core is a distinct pair). A source is used only when it reads and
 * parses for every processor of the mask; with neither, each processor
 * of the mask counts (containers and kernels without sysfs topology). The
 * root path is a parameter so tests point it at a tree of their own.
 *
 * The affinity mask comes from kern_affinity_mask (placement.c); where
 * there is none (KVLM_HAVE_AFFINITY 0: not Linux, or make
 * KVLM_POSIX_ONLY=1), the default thread count counts the processors
 * sysconf(_SC_NPROCESSORS_ONLN) reports online, numbered from 0, the same
 * way (on Linux under KVLM_POSIX_ONLY the sysfs topology still splits
 * them into cores; elsewhere each counts).
 *
 * Reads files only: sets no affinity and starts no thread.
 */
#include "kernels/cores.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The file's first line (without its newline) into buf; 0 or -1. */
static int read_line(const char *root, int cpu, const char *name, char *buf, size_t cap) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/devices/system/cpu/cpu%d/topology/%s", root, cpu, name) >= sizeof path)
        return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    buf[strcspn(buf, "\n")] = 0;
    return 0;
}

/* A non-negative decimal below KERN_CPU_MAX at *p; advances *p. */
static int parse_cpu(const char **p, int *out) {
    if (**p < '0' || **p > '9') return -1;
    errno = 0;
    char *end;
    const long v = strtol(*p, &end, 10);
    if (errno || v >= KERN_CPU_MAX) return -1;
    *p = end;
    *out = (int)v;
    return 0;
}

/* A kernel CPU list ("0,2", "0-3,8-11") into set; 0 or -1. */
static int parse_list(const char *s, kern_cpu_mask *set) {
    kern_mask_zero(set);
    const char *p = s;
    for (;;) {
        int a, b;
        if (parse_cpu(&p, &a)) return -1;
        b = a;
        if (*p == '-') {
            p++;
            if (parse_cpu(&p, &b) || b < a) return -1;
        }
        for (int i = a; i <= b; i++) kern_mask_set(set, i);
        if (!*p) return 0;
        if (*p++ != ',') return -1;
    }
}

/* Cores by sibling lists: a processor counts unless a lower-numbered
 * sibling is in the mask too. -1 if a list is missing or malformed. */
static int count_by_siblings(const char *root, const kern_cpu_mask *mask) {
    char line[4096];
    int cores = 0;
    for (int i = 0; i < KERN_CPU_MAX; i++) {
        if (!kern_mask_has(mask, i)) continue;
        kern_cpu_mask sib;
        if (read_line(root, i, "thread_siblings_list", line, sizeof line) || parse_list(line, &sib) ||
            !kern_mask_has(&sib, i))
            return -1;
        int lower = 0;
        for (int j = 0; j < i && !lower; j++) lower = kern_mask_has(&sib, j) && kern_mask_has(mask, j);
        cores += !lower;
    }
    return cores;
}

/* Cores as distinct (package, core id) pairs. -1 if a file is missing. */
static int count_by_core_id(const char *root, const kern_cpu_mask *mask) {
    long pkg[KERN_CPU_MAX], core[KERN_CPU_MAX];
    int n = 0, cores = 0;
    char line[64];
    for (int i = 0; i < KERN_CPU_MAX; i++) {
        if (!kern_mask_has(mask, i)) continue;
        char *end;
        if (read_line(root, i, "core_id", line, sizeof line)) return -1;
        core[n] = strtol(line, &end, 10);
        if (end == line || *end) return -1;
        if (read_line(root, i, "physical_package_id", line, sizeof line)) return -1;
        pkg[n] = strtol(line, &end, 10);
        if (end == line || *end) return -1;
        int seen = 0;
        for (int j = 0; j < n && !seen; j++) seen = pkg[j] == pkg[n] && core[j] == core[n];
        cores += !seen;
        n++;
    }
    return cores;
}

int kern_cores_in_mask(const char *root, const kern_cpu_mask *mask, char *why, size_t n) {
    const int cpus = kern_mask_count(mask);
    int cores = count_by_siblings(root, mask);
    if (cores < 0) cores = count_by_core_id(root, mask);
    if (cores < 1) {
        if (why && n)
            snprintf(why, n, "%d processor%s in this process's affinity mask; no CPU topology under %s", cpus,
                     cpus == 1 ? "" : "s", root);
        return cpus < 1 ? 1 : cpus;
    }
    if (why && n) {
        if (cores == cpus)
            snprintf(why, n, "%d physical core%s available to this process; no SMT siblings", cores,
                     cores == 1 ? "" : "s");
        else
            snprintf(why, n, "%d physical core%s available to this process; %d SMT sibling%s not counted", cores,
                     cores == 1 ? "" : "s", cpus - cores, cpus - cores == 1 ? "" : "s");
    }
    return cores;
}

int kern_default_threads(char *why, size_t n) {
    kern_cpu_mask set;
    int count;
    if (kern_affinity_mask(&set) == 0) {
        count = kern_cores_in_mask("/sys", &set, why, n);
    } else {
        const long online = sysconf(_SC_NPROCESSORS_ONLN);
        const int cpus = online < 1 ? 1 : online > KERN_CPU_MAX ? KERN_CPU_MAX : (int)online;
        kern_mask_zero(&set);
        for (int i = 0; i < cpus; i++) kern_mask_set(&set, i);
        char sub[200];
        count = kern_cores_in_mask("/sys", &set, sub, sizeof sub);
        if (why && n)
            snprintf(why, n, "%d of %d processor%s online (no affinity mask on this system): %s", count, cpus,
                     cpus == 1 ? "" : "s", sub);
    }
    return count > 1024 ? 1024 : count;
}
