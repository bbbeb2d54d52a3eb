/*
 * Pinned prefixes (kvlm_kv_pin / _unpin / _pins in kvlm.h): a table of
 * pins, each the list of blocks it holds a pin on (runtime/kv_layout.h:
 * kv_block.pins). A pin is taken on the blocks the prefix index serves
 * for the prompt's whole blocks, found through a scratch sequence that is
 * freed at once, so the blocks are the very ones a later prompt's lookup
 * finds. The invariant kv_pins_check verifies: every block's pin count is
 * the number of pins listing it, and a pinned block is indexed.
 *
 * With a disk tier, the pins' token ids are recorded in its directory
 * (runtime/kv_pin_file.h) each time a pin is made or dropped, and the
 * record found at creation is kept for kvlm_kv_recorded_pin (the caller
 * pins them again; this file does not run the model). A record that fails
 * its checks is reported on stderr, counted as a bad file, removed and
 * ignored.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "error.h"
#include "runtime/kv_layout.h"
#include "runtime/kv_pin_file.h"
#include "runtime/kv_tiers.h"
#include "runtime/kvcache.h"

typedef struct kv_pin {
    int id, tokens, n_blocks;
    int *blocks;
    int32_t *ids; /* the tokens its blocks cover */
} kv_pin;

struct kv_pins {
    kv_pin *pin;
    int n, cap, next_id;
    kv_pin_list recorded; /* found in the directory at creation */
};

void kv_pins_free(kvlm_kv *kv) {
    if (!kv->pins) return;
    for (int i = 0; i < kv->pins->n; i++) free(kv->pins->pin[i].blocks), free(kv->pins->pin[i].ids);
    kv_pin_list_free(&kv->pins->recorded);
    free(kv->pins->pin);
    free(kv->pins);
    kv->pins = NULL;
}

static void record_path(const kvlm_kv *kv, char *path, size_t cap) {
    kv_pin_file_path(kv_tiers_dir(kv->tiers), kv_tiers_prefix(kv->tiers), path, cap);
}

int kv_pins_load(kvlm_kv *kv, kvlm_error *err) {
    if (!kv_tiers_dir(kv->tiers)) return KVLM_OK;
    if (!kv->pins && !(kv->pins = calloc(1, sizeof *kv->pins)))
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    char path[4200];
    record_path(kv, path, sizeof path);
    const char *why = kv_pin_file_read(path, kv_tiers_fingerprint(kv->tiers), &kv->pins->recorded);
    if (why) {
        fprintf(stderr, "kvlm: kv disk tier: the pin record %s is %s; ignored and removed\n", path, why);
        kv_tiers_count_bad(kv->tiers);
        unlink(path);
    }
    return KVLM_OK;
}

/* Writes the live pins to the directory (one line on stderr when that fails). */
static void record(kvlm_kv *kv) {
    if (!kv_tiers_dir(kv->tiers)) return;
    const struct kv_pins *t = kv->pins;
    kv_pin_list l = {.n = t->n, .ids = malloc(((size_t)t->n + 1) * sizeof *l.ids),
                     .lens = malloc(((size_t)t->n + 1) * sizeof *l.lens)};
    char path[4200];
    record_path(kv, path, sizeof path);
    int e = !l.ids || !l.lens ? ENOMEM : 0;
    for (int i = 0; !e && i < t->n; i++) l.ids[i] = t->pin[i].ids, l.lens[i] = t->pin[i].tokens;
    if (!e) e = kv_pin_file_write(kv_tiers_dir(kv->tiers), path, kv_tiers_fingerprint(kv->tiers), &l);
    if (e) fprintf(stderr, "kvlm: kv disk tier: cannot record the pins in %s: %s\n", path, strerror(e));
    free(l.ids), free(l.lens);
}

int kvlm_kv_recorded_pins(const kvlm_kv *kv) { return kv && kv->pins ? kv->pins->recorded.n : 0; }

const int32_t *kvlm_kv_recorded_pin(const kvlm_kv *kv, int i, int *n_tokens) {
    if (i < 0 || i >= kvlm_kv_recorded_pins(kv)) return *n_tokens = 0, NULL;
    *n_tokens = kv->pins->recorded.lens[i];
    return kv->pins->recorded.ids[i];
}

int kvlm_kv_pin(kvlm_kv *kv, const int32_t *tokens, int n, size_t max_pinned_blocks, int *pinned_tokens,
                kvlm_error *err) {
    *pinned_tokens = 0;
    if (!kv->prefix_cache) return kvlm_error_set(err, KVLM_ERR_ARG, "pin: the cache has no prefix index");
    if (!kv->pins && !(kv->pins = calloc(1, sizeof *kv->pins)))
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    struct kv_pins *t = kv->pins;
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 8;
        kv_pin *p = realloc(t->pin, (size_t)cap * sizeof *p);
        if (!p) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        t->pin = p;
        t->cap = cap;
    }
    int cached;
    const int seq = kv_seq_new_cached(kv, tokens, n, &cached, err);
    if (seq < 0) return seq;
    const kv_seq *q = &kv->seqs[seq];
    int *blocks = malloc(((size_t)q->n_blocks * kv->n_slices + 1) * sizeof(int));
    int nb = 0;
    size_t fresh = 0; /* blocks no pin holds yet */
    for (int s = 0; blocks && s < kv->n_slices; s++)
        for (int j = 0; j < q->n_blocks; j++) {
            const int b = kv_tab(kv, q, s)[j];
            if (b < 0) continue;
            blocks[nb++] = b;
            fresh += kv->blk[b].pins == 0;
        }
    int rc = KVLM_OK;
    int32_t *ids = cached > 0 ? malloc((size_t)cached * sizeof *ids) : NULL;
    if (ids) memcpy(ids, tokens, (size_t)cached * sizeof *ids);
    if (!blocks || (cached > 0 && !ids)) rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    else if (!cached)
        rc = kvlm_error_set(err, KVLM_ERR_ARG, "pin: the prefix cache holds no whole block of these %d tokens (blocks "
                            "of %d; run the prompt first)", n, kv->block_size);
    else if (kv->n_pinned + fresh > max_pinned_blocks)
        rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "pin: %zu more blocks would make %zu pinned, over the bound of %zu",
                            fresh, kv->n_pinned + fresh, max_pinned_blocks);
    if (!rc)
        for (int i = 0; i < nb; i++) kv_block_pin(kv, blocks[i]);
    kvlm_kv_seq_free(kv, seq);
    if (rc) {
        free(blocks), free(ids);
        return rc;
    }
    t->pin[t->n++] = (kv_pin){.id = ++t->next_id, .tokens = cached, .n_blocks = nb, .blocks = blocks, .ids = ids};
    *pinned_tokens = cached;
    record(kv);
    return t->next_id;
}

int kvlm_kv_unpin(kvlm_kv *kv, int pin, kvlm_error *err) {
    struct kv_pins *t = kv->pins;
    for (int i = 0; t && i < t->n; i++) {
        if (t->pin[i].id != pin) continue;
        for (int k = 0; k < t->pin[i].n_blocks; k++) kv_block_unpin(kv, t->pin[i].blocks[k]);
        free(t->pin[i].blocks), free(t->pin[i].ids);
        memmove(&t->pin[i], &t->pin[i + 1], (size_t)(t->n - i - 1) * sizeof *t->pin);
        t->n--;
        record(kv);
        return KVLM_OK;
    }
    return kvlm_error_set(err, KVLM_ERR_ARG, "unpin: no pin %d", pin);
}

int kvlm_kv_pins(const kvlm_kv *kv, kvlm_kv_pin_info *out, int cap) {
    const struct kv_pins *t = kv->pins;
    const int n = t ? t->n : 0;
    for (int i = 0; i < n && i < cap; i++)
        out[i] = (kvlm_kv_pin_info){.id = t->pin[i].id, .tokens = t->pin[i].tokens,
                                    .blocks = (size_t)t->pin[i].n_blocks};
    return n;
}

int kv_pins_check(const kvlm_kv *kv, kvlm_error *err) {
    int *count = calloc(kv->n_blocks ? kv->n_blocks : 1, sizeof(int));
    if (!count) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    const struct kv_pins *t = kv->pins;
    int rc = KVLM_OK;
    for (int i = 0; t && i < t->n && !rc; i++)
        for (int k = 0; k < t->pin[i].n_blocks && !rc; k++) {
            const int b = t->pin[i].blocks[k];
            if (b < 0 || (size_t)b >= kv->n_blocks)
                rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "pin %d lists block %d outside the pool", t->pin[i].id, b);
            else count[b]++;
        }
    size_t pinned = 0;
    for (size_t b = 0; b < kv->n_blocks && !rc; b++) {
        const kv_block *k = &kv->blk[b];
        if (k->pins != count[b])
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %zu: %d pins but %d pins list it", b, k->pins, count[b]);
        else if (k->pins && (!k->node || k->in_lru))
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %zu: pinned but %s", b,
                                k->node ? "on the LRU list" : "not indexed");
        pinned += k->pins > 0;
    }
    if (!rc && pinned != kv->n_pinned)
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%zu blocks pinned, %zu counted", pinned, kv->n_pinned);
    free(count);
    return rc;
}
