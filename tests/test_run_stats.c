/*
 * The lines of `kvlm run --stats`: each is printed when it applies to the
 * run and only then. A time per out token needs decode steps (-n 2 and
 * more), drafted / accepted needs speculation, repacked weights needs
 * Q4_0 weights that were packed (the best ISA is avx512-vnni or
 * avx512-bf16) or kept from it by --no-repack; the other lines are always
 * there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define GPT2 "models/shakespeare-gpt2"

static const char *const ALWAYS[] = {"--- kvlm stats ---\n", "prompt tokens        ", "prefill              ",
                                     "generated tokens     ", "threads / kernels    ", "KV dtype             ",
                                     "KV bytes per token   ", "KV live              ", "KV K shape per layer ",
                                     "KV reserved          "};

typedef struct stats_case {
    const char *args;
    int ttft, tpot, repacked, drafted; /* 1: the line is there, 0: it is not */
    const char *repacked_text;          /* with repacked: what the line says */
} stats_case;

static int has_line(const char *out, const char *start) {
    for (const char *p = strstr(out, start); p; p = strstr(p + 1, start))
        if (p == out || p[-1] == '\n') return 1;
    return 0;
}

static void check(const stats_case *c) {
    char *out = NULL;
    int rc = th_run_kvlm(&out, "run %s --stats 2>&1", c->args);
    if (rc != 0) fail_msg("kvlm run %s: exit %d: %s", c->args, rc, out ? out : "");
    for (size_t i = 0; i < sizeof ALWAYS / sizeof ALWAYS[0]; i++)
        if (!has_line(out, ALWAYS[i])) fail_msg("run %s: no line '%s' in:\n%s", c->args, ALWAYS[i], out);
    const struct {
        const char *line;
        int want;
    } opt[] = {{"time to first token  ", c->ttft},
               {"time per out token   ", c->tpot},
               {"repacked weights     ", c->repacked},
               {"drafted / accepted   ", c->drafted}};
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
        if (has_line(out, opt[i].line) != opt[i].want)
            fail_msg("run %s: line '%s' %s in:\n%s", c->args, opt[i].line, opt[i].want ? "missing" : "printed", out);
    if (c->repacked && c->repacked_text && !strstr(out, c->repacked_text))
        fail_msg("run %s: no '%s' in:\n%s", c->args, c->repacked_text, out);
    free(out);
}

static void test_lines_that_apply(void **state) {
    (void)state;
    const int vnni = kvlm_isa_best() == KVLM_ISA_AVX512_VNNI || kvlm_isa_best() == KVLM_ISA_AVX512_BF16;
    const char *q4 = "--synthetic gpt2-tiny --dtype q4_0 --ids 1,2,3 -n 3 --temp 0 --ignore-eos";
    char a[256], b[256], d[256];
    snprintf(a, sizeof a, "%s", q4);
    snprintf(b, sizeof b, "%s --no-repack", q4);
    snprintf(d, sizeof d, "%s --isa scalar", q4);
    const stats_case cases[] = {
        /* the quick start's model: f32 weights, no speculation */
        {"-m " GPT2 " -p ROMEO: -n 8 --temp 0 --ignore-eos", 1, 1, 0, 0, NULL},
        /* one token: no decode step */
        {"-m " GPT2 " -p ROMEO: -n 1 --temp 0", 1, 0, 0, 0, NULL},
        /* speculation: drafted / accepted, even when nothing was drafted */
        {"-m " GPT2 " -p ROMEO: -n 8 --temp 0 --ignore-eos --draft-ngram 3", 1, 1, 0, 1, NULL},
        /* Q4_0: packed where the ISA packs, kept from it by --no-repack, not applicable to the scalar kernels */
        {a, 1, 1, vnni, 0, " bytes (Q4_0 packed for decode; --no-repack: 0)"},
        {b, 1, 1, 1, 0, "repacked weights     0 bytes (--no-repack: Q4_0 read in the file's layout)"},
        {d, 1, 1, 0, 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check(&cases[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lines_that_apply)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
