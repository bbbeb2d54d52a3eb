/*
 * A set of processor numbers that every platform can hold (cpu_set_t is
 * glibc's), and this process's affinity mask where the system gives one.
 *
 * KVLM_HAVE_AFFINITY is 1 on Linux (sched_getaffinity / sched_setaffinity,
 * sched_getcpu) and 0 elsewhere, and 0 on Linux too when built with
 * KVLM_POSIX_ONLY (make KVLM_POSIX_ONLY=1), so that the fallbacks of
 * cores.c and placement.c are built and tested there: the default thread
 * count from the online processors (sysconf), and no thread placement.
 * Holds no state.
 */
#ifndef KVLM_KERNELS_CPU_MASK_H
#define KVLM_KERNELS_CPU_MASK_H

#include <stdint.h>
#include <string.h>

#if defined(__linux__) && !defined(KVLM_POSIX_ONLY)
#define KVLM_HAVE_AFFINITY 1
#else
#define KVLM_HAVE_AFFINITY 0
#endif

/* Processors 0 .. KERN_CPU_MAX - 1 (glibc's CPU_SETSIZE). */
#define KERN_CPU_MAX 1024

typedef struct kern_cpu_mask {
    uint64_t bits[KERN_CPU_MAX / 64];
} kern_cpu_mask;

static inline void kern_mask_zero(kern_cpu_mask *m) { memset(m, 0, sizeof *m); }
static inline void kern_mask_set(kern_cpu_mask *m, int cpu) {
    if (cpu >= 0 && cpu < KERN_CPU_MAX) m->bits[cpu / 64] |= (uint64_t)1 << (cpu % 64);
}
static inline void kern_mask_clear(kern_cpu_mask *m, int cpu) {
    if (cpu >= 0 && cpu < KERN_CPU_MAX) m->bits[cpu / 64] &= ~((uint64_t)1 << (cpu % 64));
}
static inline int kern_mask_has(const kern_cpu_mask *m, int cpu) {
    return cpu >= 0 && cpu < KERN_CPU_MAX && (m->bits[cpu / 64] >> (cpu % 64) & 1);
}
static inline int kern_mask_count(const kern_cpu_mask *m) {
    int n = 0;
    for (int i = 0; i < KERN_CPU_MAX / 64; i++) n += __builtin_popcountll(m->bits[i]);
    return n;
}

/* This process's affinity mask into m: 0, or -1 where it cannot be read
 * (no affinity call on this platform, or the call failed; m is then
 * empty). */
int kern_affinity_mask(kern_cpu_mask *m);

/* The processor the calling thread runs on, or -1 where the system does
 * not say (no sched_getcpu). */
int kern_cpu_now(void);

#endif
