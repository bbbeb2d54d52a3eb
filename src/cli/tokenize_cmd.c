/*
 * `kvlm tokenize` and `kvlm detokenize`: text to token ids and back, with a
 * model directory or tokenizer file from -m. Output is exact: tokenize
 * prints the ids on one line, detokenize prints the raw bytes of the
 * tokens (invalid UTF-8 included) and nothing else, so
 * `kvlm tokenize ... | kvlm detokenize -m M -` reproduces the input.
 * Exit status: 0 ok, 1 runtime error (files, ids), 2 usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "kvlm.h"

static const char *tokenize_usage =
    "usage: kvlm tokenize -m MODEL [--special] [--pieces] (TEXT... | --file PATH)\n"
    "  -m, --model PATH  model directory or tokenizer file (tokenizer.json,\n"
    "                    vocab.json + merges.txt, encoder.json + vocab.bpe)\n"
    "  --file PATH       read the text from a file ('-' for standard input)\n"
    "  --special         match special tokens such as <|endoftext|> (default: plain text)\n"
    "  --pieces          one token per line: the id, a tab, the token's bytes in quotes\n"
    "                    (bytes outside printable ASCII as \\xHH, and \\n \\t \\r \\\" \\\\)\n"
    "  -h, --help        this help\n"
    "Several TEXT arguments are joined with single spaces. Prints the ids on one\n"
    "line, separated by spaces.\n";

static const char *detokenize_usage =
    "usage: kvlm detokenize -m MODEL (IDS... | -)\n"
    "  -m, --model PATH  model directory or tokenizer file\n"
    "  IDS               token ids separated by spaces or commas, in one or more\n"
    "                    arguments; '-' reads them from standard input\n"
    "  -h, --help        this help\n"
    "Prints the exact bytes of the tokens, without adding a newline.\n";

/* Reads a whole file ('-' = stdin). Returns malloc'ed bytes or NULL. */
static char *slurp(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(buf, cap * 2 + 1);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad) { free(buf); return NULL; }
    if (buf) { buf[n] = 0; *len = n; }
    return buf;
}

/* Joins argv[0..n) with single spaces. */
static char *join_args(char **args, int n, size_t *len) {
    size_t total = 1;
    for (int i = 0; i < n; i++) total += strlen(args[i]) + 1;
    char *s = malloc(total);
    if (!s) return NULL;
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        if (i) s[o++] = ' ';
        size_t l = strlen(args[i]);
        memcpy(s + o, args[i], l);
        o += l;
    }
    s[o] = 0;
    *len = o;
    return s;
}

static void print_piece(FILE *f, const char *p, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c >= 0x20 && c < 0x7F) fputc(c, f);
        else fprintf(f, "\\x%02X", c);
    }
    fputc('"', f);
}

static kvlm_tokenizer *load(const char *cmd, const char *model) {
    kvlm_error err = {0};
    kvlm_tokenizer *t = kvlm_tokenizer_load(model, &err);
    if (!t) fprintf(stderr, "kvlm %s: %s\n", cmd, err.msg);
    return t;
}

int cli_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    int special = 0, pieces = 0, n_text = 0;
    char **text_args = calloc((size_t)argc + 1, sizeof *text_args);
    if (!text_args) return 1;
    int only_text = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (only_text || a[0] != '-' || !a[1]) { text_args[n_text++] = argv[i]; continue; }
        if (!strcmp(a, "--")) only_text = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(tokenize_usage, stdout);
            free(text_args);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = arg_value(argc, argv, &i))) goto usage;
        } else if (!strcmp(a, "--file")) {
            if (!(file = arg_value(argc, argv, &i))) goto usage;
        } else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--pieces")) pieces = 1;
        else {
            fprintf(stderr, "kvlm tokenize: unknown option '%s'\n", a);
            goto usage;
        }
    }
    if (!model) { fprintf(stderr, "kvlm tokenize: -m MODEL is required\n"); goto usage; }
    if (!file == !n_text) {
        fprintf(stderr, "kvlm tokenize: give the text as arguments or with --file, not both\n");
        goto usage;
    }
    size_t len = 0;
    char *text = file ? slurp(file, &len) : join_args(text_args, n_text, &len);
    free(text_args);
    if (!text) {
        fprintf(stderr, "kvlm tokenize: cannot read %s\n", file ? file : "the text");
        return 1;
    }
    kvlm_tokenizer *t = load("tokenize", model);
    if (!t) { free(text); return 1; }
    kvlm_error err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = kvlm_tokenizer_encode(t, text, len, special, &ids, &n, &err);
    if (rc != 0) {
        fprintf(stderr, "kvlm tokenize: %s\n", err.msg);
    } else if (pieces) {
        for (size_t i = 0; i < n; i++) {
            size_t plen;
            const char *p = kvlm_tokenizer_piece(t, ids[i], &plen);
            printf("%d\t", ids[i]);
            print_piece(stdout, p, plen);
            putchar('\n');
        }
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    free(ids);
    free(text);
    kvlm_tokenizer_free(t);
    return rc != 0 || fflush(stdout) != 0 ? 1 : 0;
usage:
    free(text_args);
    fputs(tokenize_usage, stderr);
    return EXIT_USAGE;
}

int cli_detokenize(int argc, char **argv) {
    const char *model = NULL;
    char **id_args = calloc((size_t)argc + 1, sizeof *id_args);
    int n_args = 0;
    if (!id_args) return 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) { id_args[n_args++] = argv[i]; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(detokenize_usage, stdout);
            free(id_args);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = arg_value(argc, argv, &i))) goto usage;
        } else {
            fprintf(stderr, "kvlm detokenize: unknown option '%s'\n", a);
            goto usage;
        }
    }
    if (!model) { fprintf(stderr, "kvlm detokenize: -m MODEL is required\n"); goto usage; }
    if (n_args == 0) { fprintf(stderr, "kvlm detokenize: no token ids given\n"); goto usage; }
    size_t len = 0;
    int from_stdin = n_args == 1 && !strcmp(id_args[0], "-");
    char *list = from_stdin ? slurp("-", &len) : join_args(id_args, n_args, &len);
    free(id_args);
    if (!list) { fprintf(stderr, "kvlm detokenize: cannot read the ids\n"); return 1; }
    int32_t *ids = NULL;
    size_t n = 0;
    int bad_list = arg_ids("IDS", list, &ids, &n) != 0;
    free(list);
    if (bad_list) return EXIT_USAGE;
    kvlm_tokenizer *t = load("detokenize", model);
    if (!t) { free(ids); return 1; }
    kvlm_error err = {0};
    char *text = NULL;
    size_t tlen = 0;
    int rc = kvlm_tokenizer_decode(t, ids, n, &text, &tlen, &err);
    if (rc != 0) fprintf(stderr, "kvlm detokenize: %s\n", err.msg);
    else fwrite(text, 1, tlen, stdout);
    free(text);
    free(ids);
    kvlm_tokenizer_free(t);
    return rc != 0 || fflush(stdout) != 0 ? 1 : 0;
usage:
    free(id_args);
    fputs(detokenize_usage, stderr);
    return EXIT_USAGE;
}
