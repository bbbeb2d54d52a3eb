/*
 * Load-time weight layouts some kernels read faster
 * (kvlm_model_params.repack, made by model_repack once the weights are
 * bound). Today one: on the avx512-vnni kernels, every Q4_0 matrix of the
 * layers and the output head is repacked into the layout of
 * kernels/q4_0_packed.h (kern_matrix .packed), which the Q4_0 decode
 * kernel (1-3 rows of x) reads directly and every other kernel of those
 * ISA levels unpacks a few rows at a time (kernels/quant_int8_prep.c).
 * The repacked layout replaces the file's bytes instead of adding to
 * them: once a matrix is packed, the whole pages of its file range are
 * dropped from the process (madvise MADV_DONTNEED on the read-only file
 * mapping; they stay in the page cache and read back in if anything still
 * touches them: the embedding lookup of a head tied to the embedding, an
 * engine on another ISA). Weights read into memory (use_mmap 0) keep both.
 * The packed form of a rows x cols matrix is ceil(rows / 4) *
 * ceil(cols / 128) * 288 bytes, the file's bytes when rows is a multiple
 * of 4 and cols of 128. The copies share one arena of 2 MiB pages
 * (model/arena.c); when it cannot be mapped the load fails with
 * KVLM_ERR_NOMEM (the caller asked for the copies; a model without them
 * would run slower than asked, silently).
 */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "error.h"
#include "kernels/q4_0_packed.h"
#include "model/model.h"
#include "tensor.h"

#define TILES_PER_TASK 64

/* Bytes w's packed copy takes in the arena (64-byte aligned), 0 when it
 * gets none. */
static size_t arena_bytes(const kern_matrix *w) {
    if (!w->data || w->dtype != KVLM_Q4_0 || w->packed) return 0;
    return (q4_0_packed_size(w->rows, w->cols) + 63) & ~(size_t)63;
}

/* Drops the whole pages of [p, p + n) from the process when they lie in
 * one of m's read-only file mappings (never weights the model owns or
 * read into memory: those pages would come back zero). */
static void drop_file_pages(const kvlm_model *m, const void *p, size_t n) {
    if (m->ts.read_files) return;
    const uintptr_t a = (uintptr_t)p, e = a + n;
    for (int i = 0; i < m->ts.n_files; i++) {
        const uintptr_t f = (uintptr_t)m->ts.files[i].data, fe = f + m->ts.files[i].size;
        if (a < f || e > fe) continue;
        const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
        const uintptr_t lo = (a + pg - 1) & ~(pg - 1), hi = e & ~(pg - 1);
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
        return;
    }
}

/* Packs w at *at of arena and moves *at past it, then drops its file
 * pages; returns the packed bytes. */
static size_t pack_into(const kvlm_model *m, kern_matrix *w, unsigned char *arena, size_t *at) {
    const size_t size = arena_bytes(w);
    if (!size) return 0;
    const int tiles = (w->rows + 3) / 4;
    #pragma omp parallel for num_threads(kern_load_threads()) schedule(dynamic)
    for (int t = 0; t < tiles; t += TILES_PER_TASK)
        q4_0_pack(w->data, w->rows, w->cols, t, t + TILES_PER_TASK < tiles ? t + TILES_PER_TASK : tiles, arena + *at);
    w->packed = arena + *at;
    *at += size;
    drop_file_pages(m, w->data, (size_t)w->rows * dtype_row_bytes(KVLM_Q4_0, w->cols, NULL));
    return q4_0_packed_size(w->rows, w->cols);
}

/* w's arena bytes (arena NULL), or packs it there (returns the bytes packed). */
static size_t size_or_pack(const kvlm_model *m, kern_matrix *w, unsigned char *arena, size_t *at) {
    return arena ? pack_into(m, w, arena, at) : arena_bytes(w);
}

/* Every matrix of the layers and the output head: with arena NULL the
 * arena bytes they need, else packs them into it and returns the bytes
 * packed. */
static size_t repack_all(kvlm_model *m, unsigned char *arena) {
    size_t total = 0, at = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        kern_matrix *ws[] = MODEL_LAYER_MATRICES(&m->layers[l]);
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) total += size_or_pack(m, ws[i], arena, &at);
    }
    return total + size_or_pack(m, &m->lm_head, arena, &at);
}

int model_repack(kvlm_model *m, kvlm_isa isa, kvlm_error *err) {
    if (isa == KVLM_ISA_AUTO) isa = kvlm_isa_best();
    if ((isa != KVLM_ISA_AVX512_VNNI && isa != KVLM_ISA_AVX512_BF16) || !kern_cpu_supports(isa)) return KVLM_OK;
    const size_t need = repack_all(m, NULL);
    if (!need) return KVLM_OK;
    unsigned char *arena = model_arena(m, need);
    if (!arena)
        return kvlm_error_set(err, KVLM_ERR_NOMEM,
                              "%s: out of memory for the %zu bytes of weights repacked for %s decode "
                              "(load without repacking: kvlm --no-repack, kvlm_model_params.repack 0)",
                              m->source, need, kvlm_isa_name(isa));
    m->repacked_bytes += repack_all(m, arena);
    return KVLM_OK;
}

size_t kvlm_model_repacked_bytes(const kvlm_model *m) { return m->repacked_bytes; }
