/*
 * The default number of engine threads: one per physical core the process
 * may run on (cores.c). SMT siblings (hyperthreads) share a core's
 * execution units and its path to memory, and kvlm's matmuls keep those
 * busy from one thread, so a second thread on a core adds contention, not
 * throughput; every core of the affinity mask gets one thread.
 */
#ifndef KVLM_KERNELS_CORES_H
#define KVLM_KERNELS_CORES_H

#include <stddef.h>

#include "kernels/cpu_mask.h"

/* The physical cores among the processors in mask, read from the CPU
 * topology under root (normally "/sys": root/devices/system/cpu/cpuN/
 * topology/thread_siblings_list, else core_id and physical_package_id).
 * A processor counts unless a sibling with a lower number is also in the
 * mask. When a processor of the mask has no readable topology, every
 * processor of the mask counts. Writes the reason to why (n bytes, may be
 * NULL) and returns the count, at least 1 for a non-empty mask. */
int kern_cores_in_mask(const char *root, const kern_cpu_mask *mask, char *why, size_t n);

/* kern_cores_in_mask over this process's affinity mask and /sys, capped
 * at 1024; over the online processors (numbered from 0) when there is no
 * mask to read (KVLM_HAVE_AFFINITY 0, or the call failed). */
int kern_default_threads(char *why, size_t n);

#endif
