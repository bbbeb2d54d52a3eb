/*
 * `kvlm tokenize` and `kvlm detokenize`: text to token ids and back, with a
 * model directory or tokenizer file from -m. Output is exact: tokenize
 * prints the ids on one line, detokenize prints the raw bytes of the
 * tokens (invalid UTF-8 included) and nothing else, so
 * `kvlm tokenize ... | kvlm detokenize -m M -` reproduces the input.
 * --json prints one document instead: {"ids": [...], "n_tokens": N} (plus
 * "pieces" with --pieces) and {"ids": [...], "text": "...", "bytes": N,
 * "utf8": true|false}; JSON strings cannot hold invalid UTF-8, so such
 * bytes show as U+FFFD there ("bytes" counts the exact ones).
 * Exit status: 0 ok, 1 runtime error (files, ids), 2 usage error.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "app/json_text.h"
#include "kvlm.h"

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

static int print_json_doc(json_t *doc) {
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    int rc = s ? 0 : -1;
    if (s) puts(s);
    free(s);
    json_decref(doc);
    return rc;
}

static void print_ids(const kvlm_tokenizer *t, const int32_t *ids, size_t n, int pieces, int json) {
    if (json) {
        json_t *a = json_array(), *pa = pieces ? json_array() : NULL;
        for (size_t i = 0; i < n; i++) {
            json_array_append_new(a, json_integer(ids[i]));
            size_t plen;
            const char *p = pa ? kvlm_tokenizer_piece(t, ids[i], &plen) : NULL;
            if (pa) json_array_append_new(pa, ts_json_string(p, p ? plen : 0));
        }
        json_t *doc = json_pack("{s:o,s:I}", "ids", a, "n_tokens", (json_int_t)n);
        if (doc && pa) json_object_set_new(doc, "pieces", pa);
        print_json_doc(doc);
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
}

int cli_tokenize(int argc, char **argv) {
    const char *model = NULL;
    int special = 0, pieces = 0, json = 0;
    model_flags mf;
    model_flags_init(&mf);
    const cli_opt own[] = {
        CLI_STR("-m, --model", "PATH",
                "model directory or tokenizer file (tokenizer.json,\nvocab.json + merges.txt, encoder.json + vocab.bpe)",
                &model),
        CLI_SWITCH("--special",
                   "encode as kvlm run and kvlm serve encode a prompt: special tokens such\n"
                   "as <|endoftext|> matched, BOS when the model's files ask (default: plain text)",
                   &special, 1),
        CLI_SWITCH("--pieces",
                   "one token per line: the id, a tab, the token's bytes in quotes\n"
                   "(bytes outside printable ASCII as \\xHH, and \\n \\t \\r \\\" \\\\)",
                   &pieces, 1),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "tokenize",
        .usage = "tokenize -m MODEL [--special] [--pieces] [--json] (TEXT... | -f FILE)",
        .about = "Prints the token ids of the text on one line, separated by spaces. Several TEXT\n"
                 "arguments are joined with single spaces; after --, a TEXT may start with '-'.\n",
        .groups = CLI_FILE | CLI_JSON,
        .unused = "it needs only a tokenizer (-m)",
        .opts = own,
        .operands = "TEXT...",
        .mf = &mf,
        .json = &json,
    };
    if (cli_parse(&spec, argc, argv)) return EXIT_USAGE;
    int rc = 0;
    if (!model) rc = cli_usage_error(&spec, "-m MODEL is required");
    else if (!mf.file == !spec.n_operands) rc = cli_usage_error(&spec, "give the text as arguments or with -f FILE (one of them)");
    size_t len = 0;
    char *text = rc ? NULL : mf.file ? arg_read_file("--file", mf.file, &len) : join_args(spec.operand, spec.n_operands, &len);
    free(spec.operand);
    if (rc) return EXIT_USAGE;
    if (!text) return 1;
    kvlm_tokenizer *t = load("tokenize", model);
    if (!t) {
        free(text);
        return 1;
    }
    kvlm_error err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    rc = special ? kvlm_tokenizer_encode_prompt(t, text, len, 1, &ids, &n, &err)
                 : kvlm_tokenizer_encode(t, text, len, 0, &ids, &n, &err);
    if (rc != 0) fprintf(stderr, "kvlm tokenize: %s\n", err.msg);
    else print_ids(t, ids, n, pieces, json);
    free(ids);
    free(text);
    kvlm_tokenizer_free(t);
    return rc != 0 || fflush(stdout) != 0 ? 1 : 0;
}

int cli_detokenize(int argc, char **argv) {
    const char *model = NULL;
    int json = 0;
    const cli_opt own[] = {
        CLI_STR("-m, --model", "PATH", "model directory or tokenizer file", &model),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "detokenize",
        .usage = "detokenize -m MODEL [--json] (IDS... | -)",
        .about = "Prints the exact bytes of the tokens, without adding a newline. IDS are token ids\n"
                 "separated by spaces or commas, in one or more arguments; '-' reads them from\n"
                 "standard input.\n",
        .groups = CLI_JSON,
        .unused = "it needs only a tokenizer (-m)",
        .opts = own,
        .operands = "IDS...",
        .json = &json,
    };
    if (cli_parse(&spec, argc, argv)) return EXIT_USAGE;
    int rc = 0;
    if (!model) rc = cli_usage_error(&spec, "-m MODEL is required");
    else if (spec.n_operands == 0) rc = cli_usage_error(&spec, "no token ids given");
    size_t len = 0;
    int from_stdin = spec.n_operands == 1 && !strcmp(spec.operand[0], "-");
    char *list = rc ? NULL : from_stdin ? arg_read_file("-", "-", &len) : join_args(spec.operand, spec.n_operands, &len);
    free(spec.operand);
    if (rc) return EXIT_USAGE;
    if (!list) return 1;
    int32_t *ids = NULL;
    size_t n = 0;
    int bad_list = arg_ids("IDS", list, &ids, &n) != 0;
    free(list);
    if (bad_list) return EXIT_USAGE;
    kvlm_tokenizer *t = load("detokenize", model);
    if (!t) {
        free(ids);
        return 1;
    }
    kvlm_error err = {0};
    char *text = NULL;
    size_t tlen = 0;
    rc = kvlm_tokenizer_decode(t, ids, n, &text, &tlen, &err);
    if (rc != 0) {
        fprintf(stderr, "kvlm detokenize: %s\n", err.msg);
    } else if (json) {
        json_t *a = json_array();
        for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
        json_t *exact = json_stringn(text ? text : "", tlen); /* NULL: not valid UTF-8 */
        json_t *doc = json_pack("{s:o,s:o,s:I,s:b}", "ids", a, "text", ts_json_string(text, tlen), "bytes",
                                (json_int_t)tlen, "utf8", exact != NULL);
        json_decref(exact);
        rc = print_json_doc(doc) ? 1 : 0;
    } else {
        fwrite(text, 1, tlen, stdout);
    }
    free(text);
    free(ids);
    kvlm_tokenizer_free(t);
    return rc != 0 || fflush(stdout) != 0 ? 1 : 0;
}
