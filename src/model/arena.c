/*
 * Memory a model owns in 2 MiB pages: one anonymous mapping, asked for
 * in transparent huge pages (MADV_HUGEPAGE) and unmapped with the model
 * (today the packed Q4_0 copies of model/repack.c). Decode streams every
 * weight once per token; in 4 KiB pages each page is a TLB entry and a
 * point where the hardware prefetchers stop. Measured gains are small
 * (Q4_0 decode 1.02x in paired runs; docs/performance.md, "Weights in
 * huge pages"). The kernel may still hand out 4 KiB pages (fragmented
 * memory, or transparent huge pages set to "never"); the memory works
 * either way.
 */
#include <sys/mman.h>

#include "model/model.h"

#define HUGE_PAGE ((size_t)2 << 20)

void *model_arena(kvlm_model *m, size_t bytes) {
    if (!bytes || m->arena) return NULL;
    bytes = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    /* Over-map by one huge page so the arena can start on a 2 MiB boundary
     * (only whole aligned 2 MiB ranges can become huge pages). */
    unsigned char *raw = mmap(NULL, bytes + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    unsigned char *p = (unsigned char *)(((size_t)raw + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + HUGE_PAGE > p) munmap(p + bytes, (size_t)(raw + HUGE_PAGE - p));
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    m->arena = p;
    m->arena_bytes = bytes;
    return p;
}

void model_arena_free(kvlm_model *m) {
    if (m->arena) munmap(m->arena, m->arena_bytes);
    m->arena = NULL;
}
