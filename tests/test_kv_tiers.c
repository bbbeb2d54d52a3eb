/*
 * The KV cache's memory and disk tiers (runtime/kv_tiers.h), on the
 * synthetic llama-tiny (2 layers, 2 KV heads of 16, context 64) with
 * blocks of 8 tokens, f32 KV: a 41-token prompt leaves 5 whole blocks to
 * reuse (one token is always computed), greedy decoding of 8 tokens.
 * - a cache restarted on the same directory answers from disk: 5 blocks
 *   restored, the same tokens as a cold run, exact file and byte counts;
 * - the memory tier keeps blocks a small pool evicted, and gives them back;
 * - faults: a flipped bit, a truncated file, a file of another model
 *   (another seed) and one of another format version are each counted,
 *   removed and recomputed (the lookup stops before them; the tokens equal
 *   the cold run's); tmp files of a killed writer are removed at start and
 *   its finished files are served; a failing write is counted once and
 *   the tier stops writing; on a real full disk (a 2 MiB tmpfs, filled
 *   but for room for two files; skipped with a printed reason where mount
 *   is not permitted) the third write fails with ENOSPC, one log line
 *   says so, the tier stops writing, and the tokens stay the cold run's,
 *   again after a restart on the full directory that restores the two;
 * - pins: with a directory, a pin's ids are recorded and a new cache on it
 *   reads them back; an unpin empties the record; a truncated record, a
 *   flipped bit, another version and another model's record are refused
 *   whole (and a cache finding a bad one counts, removes and ignores it).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "kvlm.h"
#include "runtime/kv_block_file.h"
#include "runtime/kv_pin_file.h"
#include "runtime/kv_tiers.h"
#include "runtime/kvcache.h"

#define BS 8
#define NP 41
#define NG 8
#define FULL 5 /* (NP - 1) / BS */

static kvlm_model *preset(const char *name, uint64_t seed) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic(name, KVLM_F32, seed, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    return m;
}

static kvlm_model *model(uint64_t seed) { return preset("llama-tiny", seed); }

static kvlm_kv *cache(const kvlm_model *m, size_t n_blocks, size_t ram, const char *dir) {
    kvlm_error err;
    kvlm_kv_options o = kvlm_kv_default_params();
    o.block_size = BS;
    o.n_blocks = n_blocks;
    o.tier_ram_bytes = ram;
    o.tier_dir = dir;
    kvlm_kv *kv = kvlm_kv_create(m, &o, &err);
    if (!kv) fail_msg("%s", err.msg);
    return kv;
}

static kvlm_kv_stats stats(const kvlm_kv *kv) {
    kvlm_kv_stats st;
    kvlm_kv_get_stats(kv, &st);
    return st;
}

/* Greedy decoding of NG tokens after prompt; returns the blocks reused. */
static int run(kvlm_model *m, kvlm_kv *kv, const int32_t *prompt, int32_t *out) {
    kvlm_error err;
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 1;
    kvlm_engine *e = kvlm_engine_create(m, kv, &eo, &err);
    if (!e) fail_msg("%s", err.msg);
    int cached = 0;
    const int seq = kvlm_kv_seq_new_prefixed(kv, prompt, NP, &cached, &err);
    if (seq < 0) fail_msg("%s", err.msg);
    const int V = 256;
    float logits[256];
    kvlm_batch_item it = {.seq = seq, .tokens = prompt + cached, .n_tokens = NP - cached};
    if (kvlm_engine_step(e, &it, 1, logits, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < NG; i++) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        out[i] = best;
        it = (kvlm_batch_item){.seq = seq, .tokens = &out[i], .n_tokens = 1};
        if (kvlm_engine_step(e, &it, 1, logits, &err)) fail_msg("%s", err.msg);
    }
    kvlm_kv_seq_free(kv, seq);
    kvlm_engine_free(e);
    return cached / BS;
}

static void prompt_of(int32_t *p, int salt) {
    for (int i = 0; i < NP; i++) p[i] = (int32_t)((i * 37 + salt * 11 + 5) % 256);
}

/* The cold run's tokens (no tiers, fresh pool). */
static void cold(kvlm_model *m, const int32_t *prompt, int32_t *out) {
    kvlm_kv *kv = cache(m, 0, 0, NULL);
    assert_int_equal(run(m, kv, prompt, out), 0);
    kvlm_kv_free(kv);
}

/* A cache on dir that ran prompt once and wrote its files. */
static void populate(kvlm_model *m, const char *dir, const int32_t *prompt) {
    int32_t out[NG];
    kvlm_kv *kv = cache(m, 0, 0, dir);
    run(m, kv, prompt, out);
    kv_tiers_flush(kv_tiers_of(kv));
    kvlm_kv_free(kv);
}

/* Path of the file of block j: files sorted by mtime would do, but the
 * names carry the chain hash; we find the j-th by reading each header's
 * token ids. */
static int block_file(const char *dir, const int32_t *prompt, int j, char *path, size_t cap) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d)) && !found) {
        if (!strstr(e->d_name, ".kvb")) continue;
        snprintf(path, cap, "%s/%s", dir, e->d_name);
        size_t n;
        char *b = th_read_file(path, &n);
        if (b && n > KV_BLOCK_HEADER_BYTES + BS * 4 &&
            !memcmp(b + KV_BLOCK_HEADER_BYTES, prompt + j * BS, BS * sizeof(int32_t)))
            found = 1;
        free(b);
    }
    if (d) closedir(d);
    return found;
}

static int count_files(const char *dir, const char *part) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, part)) n++;
    if (d) closedir(d);
    return n;
}

static void test_restart(void **state) {
    (void)state;
    kvlm_model *m = model(3);
    int32_t prompt[NP], ref[NG], out[NG];
    prompt_of(prompt, 1);
    cold(m, prompt, ref);
    char *dir = th_tempdir();
    kvlm_kv *kv = cache(m, 0, 0, dir);
    assert_int_equal(run(m, kv, prompt, out), 0);
    assert_memory_equal(out, ref, sizeof ref);
    kv_tiers_flush(kv_tiers_of(kv));
    kvlm_kv_stats st = stats(kv);
    /* 41 + 8 tokens, 48 committed (the last sampled token is never
     * stepped): 6 full blocks, one file each of 80 + 32 + 8 x 2 layers x
     * 2 heads x 16 x 2 (K, V) x 4 bytes. */
    const size_t file = 80 + BS * 4 + BS * 2 * 2 * 16 * 2 * 4;
    assert_int_equal(st.tier_disk_files, 6);
    assert_int_equal(st.tier_bytes_written, 6 * file);
    assert_int_equal(st.tier_disk_bytes, 6 * file);
    assert_int_equal(count_files(dir, ".kvb"), 6);
    kvlm_kv_free(kv);
    /* A new cache on the same directory: every reusable block from disk. */
    kv = cache(m, 0, 0, dir);
    assert_int_equal(stats(kv).tier_disk_files, 6);
    assert_int_equal(run(m, kv, prompt, out), FULL);
    assert_memory_equal(out, ref, sizeof ref);
    st = stats(kv);
    assert_int_equal(st.tier_disk_hits, FULL);
    assert_int_equal(st.tier_bytes_read, FULL * file);
    assert_int_equal(st.tier_restores, 1);
    /* the restore-latency histogram: one lookup, under disk, its time in
     * the first bucket whose bound holds it */
    uint64_t in_disk = 0, in_ram = 0;
    int bucket = -1;
    for (int b = 0; b < KVLM_KV_RESTORE_BUCKETS; b++) {
        in_disk += st.tier_restore_buckets[1][b], in_ram += st.tier_restore_buckets[0][b];
        if (st.tier_restore_buckets[1][b]) bucket = b;
    }
    assert_int_equal(in_disk, 1);
    assert_int_equal(in_ram, 0);
    assert_int_equal(st.tier_restore_ns_by[1], st.tier_restore_ns);
    assert_true((double)st.tier_restore_ns * 1e-9 <= kvlm_kv_restore_bucket_bound(bucket));
    assert_true(bucket == 0 || (double)st.tier_restore_ns * 1e-9 > kvlm_kv_restore_bucket_bound(bucket - 1));
    assert_true(kvlm_kv_restore_bucket_bound(KVLM_KV_RESTORE_BUCKETS - 1) > 1e300);
    assert_true(kvlm_kv_restore_bucket_bound(0) == 0.0001);
    assert_int_equal(st.prefix_hit_tokens, FULL * BS);
    assert_int_equal(st.tier_bad_files, 0);
    /* In the pool now: the next lookup does not touch the disk. */
    assert_int_equal(run(m, kv, prompt, out), FULL);
    assert_int_equal(stats(kv).tier_disk_hits, FULL);
    kvlm_kv_free(kv);
    /* Another model (seed) on the same directory: nothing served. */
    kvlm_model *m2 = model(4);
    kv = cache(m2, 0, 0, dir);
    assert_int_equal(stats(kv).tier_disk_files, 0);
    assert_int_equal(run(m2, kv, prompt, out), 0);
    kvlm_kv_free(kv);
    kvlm_model_free(m2);
    th_rmtree(dir), free(dir);
    kvlm_model_free(m);
}

static void test_ram(void **state) {
    (void)state;
    kvlm_model *m = model(3);
    int32_t p1[NP], p2[NP], ref[NG], out[NG];
    prompt_of(p1, 1), prompt_of(p2, 2);
    cold(m, p1, ref);
    /* A pool of 8 blocks: the first prompt leaves 6 full blocks on the
     * LRU list (its first block most recent) and 2 free; the second takes
     * the 2 free and evicts 5, the first prompt's blocks 1-5. Its lookup
     * then finds block 0 in the pool and, with the memory tier, blocks 1-4
     * in memory. */
    for (int ram = 0; ram <= 1; ram++) {
        kvlm_kv *kv = cache(m, 8, ram ? (size_t)1 << 20 : 0, NULL);
        assert_int_equal(run(m, kv, p1, out), 0);
        assert_int_equal(run(m, kv, p2, out), 0);
        kvlm_kv_stats st = stats(kv);
        assert_int_equal(st.evictions, 5);
        assert_int_equal(st.tier_spills, ram ? 5 : 0);
        assert_int_equal(st.tier_ram_blocks, ram ? 5 : 0);
        assert_int_equal(st.tier_ram_bytes, ram ? 5 * (size_t)(BS * 2 * 2 * 16 * 2 * 4) : 0);
        assert_int_equal(run(m, kv, p1, out), ram ? FULL : 1);
        assert_memory_equal(out, ref, sizeof ref);
        st = stats(kv);
        assert_int_equal(st.tier_ram_hits, ram ? FULL - 1 : 0);
        assert_int_equal(st.tier_restores, ram ? 1 : 0);
        uint64_t in_ram = 0, in_disk = 0;
        for (int b = 0; b < KVLM_KV_RESTORE_BUCKETS; b++)
            in_ram += st.tier_restore_buckets[0][b], in_disk += st.tier_restore_buckets[1][b];
        assert_int_equal(in_ram, ram ? 1 : 0); /* the histogram's memory-only lookups */
        assert_int_equal(in_disk, 0);
        assert_int_equal(st.tier_restore_ns_by[0], st.tier_restore_ns);
        assert_int_equal(st.prefix_hit_tokens, (ram ? FULL : 1) * BS);
        kvlm_kv_free(kv);
    }
    /* A memory tier of 2 blocks keeps the last two evicted only. */
    const size_t pos = BS * 2 * 2 * 16 * 2 * 4;
    kvlm_kv *kv = cache(m, 8, 2 * pos, NULL);
    run(m, kv, p1, out), run(m, kv, p2, out);
    assert_int_equal(stats(kv).tier_ram_blocks, 2);
    assert_int_equal(stats(kv).tier_ram_bytes, 2 * pos);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

enum fault { FLIP, TRUNCATE, FOREIGN, VERSION };

static void fault_case(kvlm_model *m, kvlm_model *other, enum fault f, int j) {
    int32_t prompt[NP], ref[NG], out[NG];
    prompt_of(prompt, 1);
    cold(m, prompt, ref);
    char *dir = th_tempdir(), path[4200];
    populate(m, dir, prompt);
    assert_true(block_file(dir, prompt, j, path, sizeof path));
    size_t n;
    unsigned char *b = (unsigned char *)th_read_file(path, &n);
    assert_non_null(b);
    if (f == FLIP) b[n - 100] ^= 0x04;
    if (f == VERSION) b[8] = 2;
    if (f == FOREIGN) { /* the same block written for another model */
        char *dir2 = th_tempdir(), path2[4200];
        populate(other, dir2, prompt);
        assert_true(block_file(dir2, prompt, j, path2, sizeof path2));
        free(b);
        b = (unsigned char *)th_read_file(path2, &n);
        th_rmtree(dir2), free(dir2);
    }
    assert_int_equal(th_write_file(path, b, f == TRUNCATE ? n / 2 : n), 0);
    free(b);
    kvlm_kv *kv = cache(m, 0, 0, dir);
    assert_int_equal(run(m, kv, prompt, out), j);
    assert_memory_equal(out, ref, sizeof ref);
    kv_tiers_flush(kv_tiers_of(kv));
    kvlm_kv_stats st = stats(kv);
    assert_int_equal(st.tier_bad_files, 1);
    assert_int_equal(st.tier_disk_hits, j);
    kvlm_kv_free(kv);
    /* Recomputed and written again: the next start reuses all. */
    kv = cache(m, 0, 0, dir);
    assert_int_equal(run(m, kv, prompt, out), FULL);
    assert_memory_equal(out, ref, sizeof ref);
    assert_int_equal(stats(kv).tier_bad_files, 0);
    kvlm_kv_free(kv);
    th_rmtree(dir), free(dir);
}

static void test_faults(void **state) {
    (void)state;
    kvlm_model *m = model(3), *other = model(9);
    fault_case(m, other, FLIP, 2);
    fault_case(m, other, TRUNCATE, 0);
    fault_case(m, other, FOREIGN, 4);
    fault_case(m, other, VERSION, 1);
    kvlm_model_free(m), kvlm_model_free(other);
}

static void test_killed_writer(void **state) {
    (void)state;
    kvlm_model *m = model(3);
    int32_t prompt[NP], ref[NG], out[NG];
    prompt_of(prompt, 1);
    cold(m, prompt, ref);
    char *dir = th_tempdir(), path[4200];
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* writes queued, then killed whatever the writer is doing */
        kvlm_kv *kv = cache(m, 0, 0, dir);
        run(m, kv, prompt, out);
        raise(SIGKILL);
        _exit(3);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    /* And a tmp file it left half written. */
    snprintf(path, sizeof path, "%s/.tmp-%ld-7", dir, (long)pid);
    assert_int_equal(th_write_file(path, "KVLMBLK", 7), 0);
    kvlm_kv *kv = cache(m, 0, 0, dir);
    assert_int_equal(count_files(dir, ".tmp-"), 0);
    const int reused = run(m, kv, prompt, out);
    assert_true(reused >= 0 && reused <= FULL);
    assert_memory_equal(out, ref, sizeof ref);
    assert_int_equal(stats(kv).tier_bad_files, 0);
    assert_int_equal(stats(kv).tier_disk_hits, reused);
    kvlm_kv_free(kv);
    th_rmtree(dir), free(dir);
    kvlm_model_free(m);
}

static void test_write_failure(void **state) {
    (void)state;
    kvlm_model *m = model(3);
    int32_t prompt[NP], ref[NG], out[NG];
    prompt_of(prompt, 1);
    cold(m, prompt, ref);
    char *dir = th_tempdir();
    kvlm_kv *kv = cache(m, 0, 0, dir);
    kv_tiers_fail_writes_after(kv_tiers_of(kv), 2);
    assert_int_equal(run(m, kv, prompt, out), 0);
    assert_memory_equal(out, ref, sizeof ref);
    kv_tiers_flush(kv_tiers_of(kv));
    kvlm_kv_stats st = stats(kv);
    assert_int_equal(st.tier_disk_files, 2);
    assert_int_equal(st.tier_write_errors, 1);
    /* 6 blocks: 2 written, 1 failed, the 3 after it dropped. */
    assert_int_equal(st.tier_writes_dropped, 3);
    kvlm_kv_free(kv);
    assert_int_equal(count_files(dir, ".kvb"), 2);
    assert_int_equal(count_files(dir, ".tmp-"), 0);
    th_rmtree(dir), free(dir);
    kvlm_model_free(m);
}

/* Runs prompt on a cache on dir with stderr in a file; returns the blocks
 * reused and the number of "write failed" lines the run printed. */
static int run_logged(kvlm_model *m, const char *dir, const int32_t *prompt, int32_t *out, kvlm_kv_stats *st,
                      int *lines, char *line, size_t cap) {
    char log[4200];
    snprintf(log, sizeof log, "%s.log", dir);
    fflush(stderr);
    const int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    kvlm_kv *kv = cache(m, 0, 0, dir);
    const int reused = run(m, kv, prompt, out);
    kv_tiers_flush(kv_tiers_of(kv));
    *st = stats(kv);
    kvlm_kv_free(kv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char buf[1024];
    *lines = 0;
    line[0] = 0;
    while (fgets(buf, sizeof buf, f))
        if (strstr(buf, "write failed") && (*lines)++ == 0) snprintf(line, cap, "%s", buf);
    fclose(f);
    unlink(log);
    return reused;
}

static void test_full_disk(void **state) {
    (void)state;
    char *dir = th_tempdir();
    if (mount("tmpfs", dir, "tmpfs", 0, "size=2m")) {
        printf("test_full_disk: skipped: cannot mount a tmpfs on %s: %s (needs root)\n", dir, strerror(errno));
        th_rmtree(dir), free(dir);
        skip();
    }
    /* Fill it, then free 5 pages: two files of 4,208 bytes (2 pages each)
     * fit, the third does not. */
    char filler[4200];
    snprintf(filler, sizeof filler, "%s/filler", dir);
    int fd = open(filler, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    static char page[4096];
    off_t size = 0;
    ssize_t w;
    while ((w = write(fd, page, sizeof page)) > 0) size += w;
    assert_int_equal(errno, ENOSPC);
    assert_true(size > 5 * 4096);
    assert_int_equal(ftruncate(fd, size - 5 * 4096), 0);
    close(fd);
    kvlm_model *m = model(3);
    int32_t prompt[NP], ref[NG], out[NG];
    prompt_of(prompt, 1);
    cold(m, prompt, ref);
    kvlm_kv_stats st;
    int lines;
    char line[1024];
    assert_int_equal(run_logged(m, dir, prompt, out, &st, &lines, line, sizeof line), 0);
    assert_memory_equal(out, ref, sizeof ref);
    assert_int_equal(st.tier_disk_files, 2);
    assert_int_equal(st.tier_write_errors, 1);
    assert_int_equal(st.tier_writes_dropped, 3); /* 6 blocks: 2 written, 1 failed, 3 not tried */
    assert_int_equal(lines, 1);
    assert_non_null(strstr(line, strerror(ENOSPC)));
    assert_int_equal(count_files(dir, ".kvb"), 2);
    assert_int_equal(count_files(dir, ".tmp-"), 0); /* the failed file's tmp is gone */
    /* Restarted on the full directory: the two blocks restored, the rest
     * recomputed, one line again for the first failed write. */
    assert_int_equal(run_logged(m, dir, prompt, out, &st, &lines, line, sizeof line), 2);
    assert_memory_equal(out, ref, sizeof ref);
    assert_int_equal(st.tier_disk_hits, 2);
    assert_int_equal(st.tier_write_errors, 1);
    assert_int_equal(lines, 1);
    assert_int_equal(count_files(dir, ".tmp-"), 0);
    assert_int_equal(umount2(dir, MNT_DETACH), 0);
    th_rmtree(dir), free(dir);
    kvlm_model_free(m);
}

static void test_pin_record(void **state) {
    (void)state;
    kvlm_model *m = model(3);
    int32_t prompt[NP], out[NG];
    prompt_of(prompt, 1);
    char *dir = th_tempdir();
    kvlm_kv *kv = cache(m, 0, 0, dir);
    assert_int_equal(kvlm_kv_recorded_pins(kv), 0);
    run(m, kv, prompt, out);
    kvlm_error err;
    int pinned = 0;
    const int id = kvlm_kv_pin(kv, prompt, NP, 1000, &pinned, &err);
    assert_int_equal(id, 1);
    assert_int_equal(pinned, NP / BS * BS);
    assert_int_equal(count_files(dir, ".pins"), 1);
    char path[4200];
    kv_pin_file_path(dir, kv_tiers_prefix(kv_tiers_of(kv)), path, sizeof path);
    kv_fingerprint fp = *kv_tiers_fingerprint(kv_tiers_of(kv));
    kvlm_kv_free(kv);
    /* the record: 48 + 4 + 4 x 40 bytes */
    size_t n = 0;
    unsigned char *bytes = (unsigned char *)th_read_file(path, &n);
    assert_non_null(bytes);
    assert_int_equal(n, KV_PIN_FILE_HEADER + 4 + 4 * pinned);
    kv = cache(m, 0, 0, dir);
    assert_int_equal(kvlm_kv_recorded_pins(kv), 1);
    int len = 0;
    const int32_t *ids = kvlm_kv_recorded_pin(kv, 0, &len);
    assert_int_equal(len, pinned);
    assert_memory_equal(ids, prompt, (size_t)pinned * sizeof *ids);
    assert_null(kvlm_kv_recorded_pin(kv, 1, &len));
    assert_int_equal(len, 0);
    /* pinned again, then unpinned: the record holds none */
    run(m, kv, prompt, out);
    assert_int_equal(kvlm_kv_pin(kv, prompt, NP, 1000, &pinned, &err), 1);
    assert_int_equal(kvlm_kv_unpin(kv, 1, &err), 0);
    kvlm_kv_free(kv);
    kv_pin_list l;
    assert_null(kv_pin_file_read(path, &fp, &l));
    assert_int_equal(l.n, 0);
    /* faults, each refused whole */
    kv_pin_list one = {.n = 1, .ids = (int32_t *[]){prompt}, .lens = (int[]){pinned}};
    size_t sz;
    unsigned char *good = kv_pin_file_encode(&fp, &one, &sz);
    assert_int_equal(sz, n);
    assert_null(kv_pin_file_decode(good, sz, &fp, &l));
    assert_int_equal(l.n, 1);
    assert_int_equal(l.lens[0], pinned);
    kv_pin_list_free(&l);
    assert_string_equal(kv_pin_file_decode(good, sz - 4, &fp, &l), "truncated");
    assert_string_equal(kv_pin_file_decode(good, 20, &fp, &l), "truncated");
    good[100] ^= 1;
    assert_string_equal(kv_pin_file_decode(good, sz, &fp, &l), "corrupt");
    good[100] ^= 1;
    good[8] = 9;
    assert_string_equal(kv_pin_file_decode(good, sz, &fp, &l), "foreign version");
    good[8] = KV_PIN_FILE_VERSION;
    kv_fingerprint other = fp;
    other.bytes[3] ^= 0x40;
    assert_string_equal(kv_pin_file_decode(good, sz, &other, &l), "foreign fingerprint");
    assert_int_equal(l.n, 0);
    /* a cache finding a bad record: counted, removed, ignored */
    good[100] ^= 1;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(good, 1, sz, f), sz);
    fclose(f);
    kv = cache(m, 0, 0, dir);
    assert_int_equal(kvlm_kv_recorded_pins(kv), 0);
    assert_int_equal(stats(kv).tier_bad_files, 1);
    assert_int_equal(count_files(dir, ".pins"), 0);
    kvlm_kv_free(kv);
    free(good), free(bytes);
    th_rmtree(dir), free(dir);
    kvlm_model_free(m);
}

/* gemma3-tiny: 12 layers, window 8 on 10 of them, 6 slices of 2 layers.
 * Window slices give their old blocks back while the request runs; the
 * disk tier wrote every position with all its slices, so a restart
 * restores them whole. Under pool pressure, positions whose window blocks
 * are gone are refused by the memory tier (counted), and the output stays
 * the cold run's. */
static void test_window_layers(void **state) {
    (void)state;
    kvlm_model *m = preset("gemma3-tiny", 5);
    int32_t p1[NP], p2[NP], ref[NG], out[NG];
    prompt_of(p1, 1), prompt_of(p2, 2);
    cold(m, p1, ref);
    char *dir = th_tempdir();
    populate(m, dir, p1);
    kvlm_kv *kv = cache(m, 0, 0, dir);
    assert_int_equal(stats(kv).tier_disk_files, 6);
    assert_int_equal(run(m, kv, p1, out), FULL);
    assert_memory_equal(out, ref, sizeof ref);
    assert_int_equal(stats(kv).tier_disk_hits, FULL);
    kvlm_error err;
    if (kv_check_invariants(kv, &err)) fail_msg("invariants: %s", err.msg);
    kvlm_kv_free(kv);
    kv = cache(m, 40, (size_t)1 << 22, NULL); /* a 41-token prefill holds 36 */
    run(m, kv, p1, out), run(m, kv, p2, out);
    const int again = run(m, kv, p1, out);
    assert_memory_equal(out, ref, sizeof ref);
    kvlm_kv_stats st = stats(kv);
    /* Window blocks leave the LRU list before their global block: every
     * evicted position is refused, nothing is restored, and the prompt is
     * recomputed. */
    assert_true(st.evictions > 0);
    assert_true(st.tier_spill_refused > 0);
    assert_int_equal(st.tier_spills, 0);
    assert_int_equal(st.tier_ram_hits, 0);
    assert_int_equal(again, 0);
    if (kv_check_invariants(kv, &err)) fail_msg("invariants: %s", err.msg);
    kvlm_kv_free(kv);
    th_rmtree(dir), free(dir);
    kvlm_model_free(m);
}

/* kvlm_kv_prefetch reads the 5 reusable blocks' files ahead: the lookup
 * then takes them from the staging list (disk hits, bytes counted once),
 * with the cold run's tokens; positions the pool holds are not read. */
static void test_prefetch(void **state) {
    (void)state;
    kvlm_model *m = model(3);
    int32_t prompt[NP], ref[NG], out[NG];
    prompt_of(prompt, 1);
    cold(m, prompt, ref);
    char *dir = th_tempdir();
    populate(m, dir, prompt);
    kvlm_kv *kv = cache(m, 0, 0, dir);
    kvlm_kv_prefetch(kv, prompt, NP);
    kv_tiers_flush(kv_tiers_of(kv));
    const size_t file = 80 + BS * 4 + BS * 2 * 2 * 16 * 2 * 4;
    kvlm_kv_stats st = stats(kv);
    assert_int_equal(st.tier_prefetched, FULL);
    assert_int_equal(st.tier_bytes_read, FULL * file);
    assert_int_equal(st.tier_disk_hits, 0);
    assert_int_equal(run(m, kv, prompt, out), FULL);
    assert_memory_equal(out, ref, sizeof ref);
    st = stats(kv);
    assert_int_equal(st.tier_disk_hits, FULL);
    assert_int_equal(st.tier_bytes_read, FULL * file);
    /* All in the pool now: nothing to read. */
    kvlm_kv_prefetch(kv, prompt, NP);
    kv_tiers_flush(kv_tiers_of(kv));
    assert_int_equal(stats(kv).tier_prefetched, FULL);
    kvlm_kv_free(kv);
    th_rmtree(dir), free(dir);
    kvlm_model_free(m);
}

/* kvlm run --kv-cache-dir twice: the second run restores the prompt's 5
 * full blocks (of 8 tokens; f16 KV: 2160-byte files) and prints the same
 * tokens. */
static void test_cli_run(void **state) {
    (void)state;
    char *dir = th_tempdir(), *out1 = NULL, *out2 = NULL;
    const char *args = "run --synthetic llama-tiny --ids 3,1,4,1,5,9,2,6,5,3,5,8,9,7,9,3,2,3,8,4,6,2,6,4,3,3,8,3,2,7,"
                       "9,5,0,2,8,8,4,1,9,7,1 -n 8 --temp 0 --block-size 8 --stats --kv-cache-dir";
    assert_int_equal(th_run_kvlm(&out1, "%s %s", args, dir), 0);
    assert_int_equal(th_run_kvlm(&out2, "%s %s", args, dir), 0);
    assert_non_null(strstr(out2, "KV disk tier         5 blocks restored (10800 bytes read"));
    assert_non_null(strstr(out2, "6 files (12960 bytes), 0 bad files removed"));
    const char *e1 = strstr(out1, "\n--- kvlm stats"), *e2 = strstr(out2, "\n--- kvlm stats");
    assert_non_null(e1), assert_non_null(e2);
    assert_int_equal(e1 - out1, e2 - out2);
    assert_memory_equal(out1, out2, (size_t)(e1 - out1)); /* the generated text */
    free(out1), free(out2);
    th_rmtree(dir), free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restart),
        cmocka_unit_test(test_ram),
        cmocka_unit_test(test_faults),
        cmocka_unit_test(test_killed_writer),
        cmocka_unit_test(test_write_failure),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_pin_record),
        cmocka_unit_test(test_window_layers),
        cmocka_unit_test(test_cli_run),
        cmocka_unit_test(test_prefetch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
