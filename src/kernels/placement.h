/*
 * Where the calling thread runs (placement.c): the idle time of the other
 * processors it may run on, and a move off one processor. Used by the
 * thread pool's workers (team.c, "Placement").
 */
#ifndef KVLM_KERNELS_PLACEMENT_H
#define KVLM_KERNELS_PLACEMENT_H

#include "kernels/cpu_mask.h" /* kern_cpu_now, kern_affinity_mask */

/* Without an affinity call (cpu_mask.h's KVLM_HAVE_AFFINITY 0) both
 * return 0: placement is a no-op. */

/* Idle and total clock ticks (/proc/stat) of the processors the calling
 * thread may run on other than `cpu`; returns how many there are, 0 when
 * none or when /proc/stat cannot be read. */
int kern_other_idle(int cpu, long long *idle, long long *total);

/* Moves the calling thread off processor `cpu` and leaves its affinity
 * as it was; returns whether it moved (not when `cpu` is the only
 * processor it may run on). */
int kern_move_off(int cpu);

#endif
