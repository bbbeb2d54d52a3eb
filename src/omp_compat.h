/*
 * OpenMP's run-time calls, or their one-thread stand-ins in a build
 * without OpenMP (make OPENMP=0, which defines KVLM_NO_OPENMP and leaves
 * out -fopenmp: a compiler without it, such as Apple's clang without
 * libomp). kvlm uses OpenMP only while loading (the parallel transposes and
 * repacks of src/model) and in the memory-bandwidth probes (src/measure);
 * the engine's threads are its own pool (team.c). Without OpenMP those
 * loops run on the calling thread: the same results, slower loading, and
 * bandwidth measured by one thread. Holds no state.
 */
#ifndef KVLM_OMP_COMPAT_H
#define KVLM_OMP_COMPAT_H

#if defined(KVLM_NO_OPENMP)
#include <unistd.h>

static inline int omp_get_thread_num(void) { return 0; }
static inline int omp_get_num_threads(void) { return 1; }
static inline int omp_get_max_threads(void) { return 1; }
static inline void omp_set_num_threads(int n) { (void)n; }
/* The processors online, as OpenMP's omp_get_num_procs counts them on a
 * system without affinity masks. */
static inline int omp_get_num_procs(void) {
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}
#else
#include <omp.h>
#endif

#endif
