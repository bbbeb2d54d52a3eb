/*
 * The speculative decoding flags every generating command shares
 * (--draft MODEL, --draft-ngram N, --draft-k K) and opening what they name:
 * the draft model with an engine and KV cache of its own, checked against
 * the target (the same vocabulary). docs/speculative.md.
 */
#ifndef KVLM_CLI_DRAFT_H
#define KVLM_CLI_DRAFT_H

#include "cli/options.h"
#include "kvlm.h"

typedef struct draft_flags {
    const char *model; /* --draft: a draft model's path; NULL: none */
    int ngram;         /* --draft-ngram: prompt lookup's longest n-gram; 0: off */
    int k;             /* --draft-k: tokens drafted per step; 0: not given (4) */
    int no_prefix_cache; /* the draft cache without a prefix index (a benchmark repeating
                            one prompt: the draft computes it each time, as the target) */
    int fixed;         /* --draft-fixed: draft at every step (no adaptive policy) */
    int off;           /* --no-draft (kvlm serve): no speculation by default */
} draft_flags;

/* kvlm serve's default speculation without flags: prompt lookup of up to
 * 3-grams, 4 tokens a step, under the adaptive policy (docs/speculative.md
 * has the measurements behind the choice). */
#define DRAFT_DEFAULT_NGRAM 3
#define DRAFT_DEFAULT_K 4

/* The three rows of a command's cli_opt table. */
#define DRAFT_OPTS(f)                                                                                              \
    CLI_STR("--draft", "MODEL", "speculative decoding with MODEL drafting (same tokenizer as -m;\n"               \
            "docs/speculative.md)", &(f)->model),                                                                 \
    CLI_INT("--draft-ngram", "N", "speculative decoding with prompt lookup: draft what followed the\n"            \
            "latest earlier occurrence of the last N (1..8) tokens", &(f)->ngram, 1, 8),                         \
    CLI_INT("--draft-k", "K", "tokens drafted per step (1..16, default 4)", &(f)->k, 1, 16)

/* run's and serve's: speculation without the adaptive policy. */
#define DRAFT_FIXED_OPT(f)                                                                                         \
    CLI_SWITCH("--draft-fixed", "draft at every step (default: only where the measured acceptance and\n"          \
               "step costs say drafting pays; docs/speculative.md)", &(f)->fixed, 1)

/* Nothing given. */
void draft_flags_init(draft_flags *f);
/* 0, or -1 after a usage message when --draft and --draft-ngram are both
 * given, --draft-k or --draft-fixed without either (unless the command
 * drafts by default: serve_default), or --no-draft with any of them. */
int draft_flags_check(const draft_flags *f, const char *cmd, int serve_default);
/* The speculation requests get from the flags: --draft, --draft-ngram, or
 * with serve_default and neither (and no --no-draft) prompt lookup with
 * DRAFT_DEFAULT_NGRAM; mode NONE otherwise. */
kvlm_speculation draft_speculation(const draft_flags *f, int serve_default);

typedef struct cli_draft {
    kvlm_model *m;     /* with --draft */
    kvlm_kv *kv;
    kvlm_engine *e;
    kvlm_speculation spec; /* what requests ask for (mode NONE without the flags) */
} cli_draft;

/* Opens what the flags name for a target model with max_seqs sequences:
 * the draft model is loaded (and repacked) as the model flags mf ask and
 * gets a KV cache of their KV dtype and an engine with their options.
 * Returns 0, or the exit status after printing why (2: the draft does
 * not fit the target). draft_close is safe after a failed open. */
int draft_open(cli_draft *d, const draft_flags *f, const kvlm_model *target, int max_seqs, const model_flags *mf);
/* Hands the draft model to a scheduler (nothing without --draft). */
int draft_attach(const cli_draft *d, kvlm_sched *s, kvlm_error *err);
void draft_close(cli_draft *d);

#endif
