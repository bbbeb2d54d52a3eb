/*
 * Tokenizer loaders: vocab.json + merges.txt (Hugging Face; with
 * tokenizer_config.json beside them for bos/eos and add_bos_token),
 * encoder.json + vocab.bpe (OpenAI's originals, same formats under other
 * names) and the choice of file for a path: the format dispatch.
 * tokenizer.json's pipeline is read by tokenizer/hf_json.c, GGUF files by
 * tokenizer/gguf_file.c; every reader builds the vocabulary with
 * tokenizer/vocab_builder.c, which knows no format.
 *
 * Every failure names the file and the field or line at fault and leaves
 * nothing allocated. This file does not encode or decode text.
 */
#include "tokenizer/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "tokenizer/pretok.h"

/* --------------------------------------------------------------- helpers */

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* merges.txt / vocab.bpe: an optional "#version" first line, then one merge
 * per line as two tokens separated by one space. */
static int load_merges_txt(kvlm_tokenizer *t, const int16_t *rev, const char *path,
                           kvlm_error *err) {
    char *buf;
    size_t len;
    if (tok_read_file(path, &buf, &len, err) != 0) return -1;
    int rc = tok_merges_init(&t->merges, len / 8);
    if (rc != 0) rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
    size_t lineno = 0;
    for (size_t i = 0; rc == 0 && i < len;) {
        const char *line = buf + i;
        const char *nl = memchr(line, '\n', len - i);
        size_t n = nl ? (size_t)(nl - line) : len - i;
        i += n + (nl ? 1 : 0);
        lineno++;
        if (n && line[n - 1] == '\r') n--;
        if (lineno == 1 && n >= 8 && memcmp(line, "#version", 8) == 0) continue;
        char where[1100];
        snprintf(where, sizeof where, "%s:%zu", path, lineno);
        if (n == 0) {
            if (i >= len) break;   /* the newline that ends the file */
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: empty line, expected a merge", where);
            break;
        }
        const char *sp = memchr(line, ' ', n);
        if (!sp || sp == line || sp == line + n - 1 || memchr(sp + 1, ' ', n - (size_t)(sp - line) - 1)) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT,
                                "%s: expected two tokens separated by one space", where);
            break;
        }
        rc = tok_add_merge(t, rev, line, (size_t)(sp - line), sp + 1, n - (size_t)(sp - line) - 1,
                       where, err);
    }
    free(buf);
    return rc;
}

/* ----------------------------------------------------------- entry point */

static int load_pair(kvlm_tokenizer *t, const char *vocab, const char *merges, kvlm_error *err) {
    int16_t rev[TOK_UNMAP_SIZE];
    tok_build_unmap(rev);
    json_t *root = tok_load_json(vocab, err);
    if (!root) return -1;
    int rc = tok_load_vocab(t, root, rev, vocab, err);
    json_decref(root);
    if (rc != 0) return rc;
    if (tok_map_build(t) != 0) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", vocab);
    if (load_merges_txt(t, rev, merges, err) != 0) return -1;
    snprintf(t->source, sizeof t->source, "%s + %s", vocab, merges);
    /* Hugging Face's GPT2Tokenizer: BOS is <|endoftext|> unless
     * tokenizer_config.json names another; it is added only when that file
     * sets add_bos_token. */
    t->bos_id = tok_map_get(t, "<|endoftext|>", 13);
    tok_read_config(t, vocab);
    return tok_finish(t, vocab, err);
}

static int load_tokjson(kvlm_tokenizer *t, const char *path, json_t *root, kvlm_error *err) {
    int rc = tok_load_tokenizer_json(t, root, path, err);
    if (rc != 0) return rc;
    snprintf(t->source, sizeof t->source, "%s", path);
    return tok_finish(t, path, err);
}

static void join(char *out, size_t cap, const char *dir, const char *name) {
    size_t n = strlen(dir);
    snprintf(out, cap, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name);
}

/* A single file: tokenizer.json (any JSON with a "model" object), a flat
 * vocabulary (with its merges file beside it), or a merges file. */
static int load_file(kvlm_tokenizer *t, const char *path, kvlm_error *err) {
    char dir[1024], other[1100];
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (slash == path) snprintf(dir, sizeof dir, "/");
    size_t blen = strlen(base);
    if (strcmp(base, "merges.txt") == 0 || (blen > 4 && strcmp(base + blen - 4, ".bpe") == 0)) {
        join(other, sizeof other, dir, strcmp(base, "merges.txt") == 0 ? "vocab.json" : "encoder.json");
        return load_pair(t, other, path, err);
    }
    json_t *root = tok_load_json(path, err);
    if (!root) return -1;
    int rc;
    if (json_is_object(json_object_get(root, "model"))) {
        rc = load_tokjson(t, path, root, err);
        json_decref(root);
        return rc;
    }
    json_decref(root);
    const char *first = strcmp(base, "encoder.json") == 0 ? "vocab.bpe" : "merges.txt";
    const char *second = strcmp(base, "encoder.json") == 0 ? "merges.txt" : "vocab.bpe";
    join(other, sizeof other, dir, first);
    if (!is_file(other)) join(other, sizeof other, dir, second);
    if (!is_file(other))
        return kvlm_error_set(err, KVLM_ERR_IO, "%s: no merges file beside it (looked for %s and %s)",
                              path, first, second);
    return load_pair(t, path, other, err);
}

int tok_load_path(kvlm_tokenizer *t, const char *path, kvlm_error *err) {
    struct stat st;
    if (!path || !*path) return kvlm_error_set(err, KVLM_ERR_ARG, "tokenizer: empty path");
    if (stat(path, &st) != 0)
        return kvlm_error_set(err, KVLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return load_file(t, path, err);
    char a[1100], b[1100];
    join(a, sizeof a, path, "tokenizer.json");
    if (is_file(a)) {
        json_t *root = tok_load_json(a, err);
        if (!root) return -1;
        int rc = load_tokjson(t, a, root, err);
        json_decref(root);
        return rc;
    }
    static const char *const pairs[2][2] = {{"vocab.json", "merges.txt"},
                                            {"encoder.json", "vocab.bpe"}};
    for (int k = 0; k < 2; k++) {
        join(a, sizeof a, path, pairs[k][0]);
        join(b, sizeof b, path, pairs[k][1]);
        if (is_file(a) && is_file(b)) return load_pair(t, a, b, err);
    }
    return kvlm_error_set(err, KVLM_ERR_IO, "%s: no tokenizer found (looked for tokenizer.json, "
                          "vocab.json + merges.txt, encoder.json + vocab.bpe)", path);
}
