/*
 * `kvlm run`: generate from a prompt as one request on a one-request
 * scheduler (cli/generate.h), streaming text as tokens arrive, with the
 * phase timings and KV cache figures on request (--stats) or everything as
 * one JSON object (--json). The text is the scheduler's, so it is what
 * kvlm serve returns for the same request: an end-of-sequence token ends
 * the generation and is not printed, a stop string and what follows it
 * never are. --no-cache runs the scheduler's recompute policy.
 * --json-schema, --grammar and --regex constrain the output (the
 * scheduler masks the tokens that cannot continue it). --draft and
 * --draft-ngram decode speculatively (cli/draft.h; the same text at
 * temperature 0, the same distribution otherwise).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/draft.h"
#include "cli/generate.h"
#include "cli/options.h"
#include "cli/session.h"
#include "app/json_text.h"
#include "kvlm_measure.h"

typedef struct run_opts {
    model_flags mf;
    sampling_flags smp;
    int n, logprobs, no_cache, stats, json, ignore_eos;
    const char *json_schema, *grammar, *regex;
    const char *kv_cache_dir;  /* the disk tier (docs/kv-tiers.md); NULL: none */
    uint64_t kv_disk_bytes;
    draft_flags draft;
} run_opts;

static int parse(int argc, char **argv, run_opts *o) {
    *o = (run_opts){.n = 64};
    model_flags_init(&o->mf);
    sampling_flags_init(&o->smp);
    draft_flags_init(&o->draft);
    const cli_opt own[] = {
        CLI_INT("-n", "N", "tokens to generate at most (default 64; 0 = prefill only)", &o->n, 0, 1 << 20),
        CLI_SWITCH("--ignore-eos", "do not stop at the end-of-sequence token", &o->ignore_eos, 1),
        CLI_SWITCH("--no-cache", "recompute the whole context at every step", &o->no_cache, 1),
        CLI_SWITCH("--stats", "print timings and KV cache figures after the text (stderr)", &o->stats, 1),
        CLI_STR("--kv-cache-dir", "DIR", "reuse the prompt's KV blocks from DIR and write its full blocks there\n"
                "(docs/kv-tiers.md)", &o->kv_cache_dir),
        CLI_U64("--kv-disk-bytes", "BYTES", "bound of --kv-cache-dir (default 1073741824)", &o->kv_disk_bytes),
        CLI_INT("--logprobs", "K", "with --json: top K log-probabilities per generated token", &o->logprobs, 1, 100),
        CLI_STR("--json-schema", "FILE", "constrain the output to JSON valid under the JSON Schema in FILE "
                "(docs/structured-output.md)", &o->json_schema),
        CLI_STR("--grammar", "FILE", "constrain the output to the GBNF grammar in FILE (start rule root)", &o->grammar),
        CLI_STR("--regex", "RE", "constrain the output to match the regular expression RE", &o->regex),
        DRAFT_OPTS(&o->draft),
        DRAFT_FIXED_OPT(&o->draft),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "run",
        .usage = "run (-m MODEL | --synthetic PRESET) (-p TEXT | --ids LIST | -f FILE) [options]",
        .about = "Generates from the prompt on one sequence, streaming the text as tokens arrive.\n",
        .groups = CLI_LOADS_MODEL | CLI_TOKENIZER | CLI_PROMPT | CLI_FILE | CLI_SAMPLING | CLI_JSON,
        .opts = own,
        .mf = &o->mf,
        .smp = &o->smp,
        .json = &o->json,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    if (o->logprobs && !o->json) return cli_usage_error(&spec, "--logprobs needs --json");
    if (!!o->json_schema + !!o->grammar + !!o->regex > 1)
        return cli_usage_error(&spec, "--json-schema, --grammar and --regex exclude each other");
    if (draft_flags_check(&o->draft, "run", 0)) return -1;
    if ((o->draft.model || o->draft.ngram) && o->no_cache)
        return cli_usage_error(&spec, "speculative decoding (--draft, --draft-ngram) needs the KV cache: not with "
                               "--no-cache");
    return 0;
}

/* The grammar of --json-schema, --grammar or --regex (NULL without one);
 * sets *failed after printing why it could not be built. */
static kvlm_grammar *load_grammar(const run_opts *o, int *failed) {
    kvlm_error err = {0};
    kvlm_grammar *g = NULL;
    *failed = 0;
    if (o->regex) {
        g = kvlm_grammar_from_regex(o->regex, strlen(o->regex), &err);
    } else if (o->json_schema || o->grammar) {
        const char *flag = o->json_schema ? "--json-schema" : "--grammar";
        size_t len = 0;
        char *text = arg_read_file(flag, o->json_schema ? o->json_schema : o->grammar, &len);
        if (!text) {
            *failed = 1;
            return NULL;
        }
        g = o->json_schema ? kvlm_grammar_from_json_schema(text, len, &err) : kvlm_grammar_from_gbnf(text, len, &err);
        free(text);
    } else {
        return NULL;
    }
    if (!g) {
        fprintf(stderr, "kvlm: %s\n", err.msg);
        *failed = 1;
    }
    return g;
}

typedef struct run_stats {
    int prompt_tokens, generated, decode_steps, drafted, accepted;
    double prefill_ms, ttft_ms, prefill_ms_per_token, tpot_ms, decode_tok_s;
    kvlm_kv_stats kv;
    int kv_tokens;
    size_t repacked; /* kvlm_model_repacked_bytes */
    kvlm_kv_layer_type types[8]; /* the cache's layer types (kvlm_kv_layer_types) */
    int n_types;
    size_t kv_held;    /* kvlm_kv_seq_bytes at kv_tokens: what one sequence this long holds */
    size_t params, active_params, decode_bytes; /* kvlm_model_param_count, _active_param_count, _decode_bytes */
} run_stats;

/* The bytes of one head's K or V of one token, as the stats line spells
 * them out: "32 head dim x 2 B", or for q8_0 "(32 x 1 B + 1 x 2 B scale)". */
static void head_bytes_text(const kvlm_config *c, kvlm_dtype kvt, char *buf, size_t cap) {
    if (kvt == KVLM_Q8_0) {
        const int nb = c->head_dim / 32;
        snprintf(buf, cap, "(%d x 1 B + %d x 2 B scale%s)", c->head_dim, nb, nb > 1 ? "s" : "");
    } else {
        snprintf(buf, cap, "%d head dim x %zu B", c->head_dim, kvlm_dtype_size(kvt));
    }
}

/* The --stats summary: a line for each figure that applies to this run
 * (time to first token once a token came, time per out token once decode
 * steps ran, repacked weights when Q4_0 weights were packed or
 * --no-repack kept them from it, drafted / accepted with speculation). */
static void print_stats(const run_stats *st, const kvlm_config *c, const kvlm_engine *e, const model_flags *mf,
                        int speculating) {
    const kvlm_dtype kvt = mf->kv_dtype;
    char head[64], why[160];
    head_bytes_text(c, kvt, head, sizeof head);
    session_threads_why(mf, why, sizeof why);
    FILE *f = stderr;
    fprintf(f, "\n--- kvlm stats ---\n");
    fprintf(f, "prompt tokens        %d\n", st->prompt_tokens);
    fprintf(f, "prefill              %.2f ms (%.3f ms per prompt token, %.0f tokens/s)\n", st->prefill_ms,
            st->prefill_ms_per_token, st->prefill_ms > 0 ? st->prompt_tokens / st->prefill_ms * 1e3 : 0.0);
    if (st->generated > 0) fprintf(f, "time to first token  %.2f ms\n", st->ttft_ms);
    fprintf(f, "generated tokens     %d\n", st->generated);
    if (st->decode_steps > 0)
        fprintf(f, "time per out token   %.2f ms (%.1f tokens/s, %d decode steps)\n", st->tpot_ms, st->decode_tok_s,
                st->decode_steps);
    fprintf(f, "threads / kernels    %d / %s (threads: %s)\n", kvlm_engine_threads(e), kvlm_isa_name(kvlm_engine_isa(e)),
            why);
    char experts[64] = "";
    if (c->n_expert)
        snprintf(experts, sizeof experts, ": %d of %d experts per layer", c->n_expert_used, c->n_expert);
    fprintf(f, "parameters           %zu (%zu active per token%s)\n", st->params, st->active_params, experts);
    fprintf(f, "weights per token    %zu bytes read by a decode step\n", st->decode_bytes);
    if (st->repacked > 0)
        fprintf(f, "repacked weights     %zu bytes (Q4_0 packed for decode; --no-repack: 0)\n", st->repacked);
    else if (mf->no_repack && c->weight_dtype == KVLM_Q4_0)
        fprintf(f, "repacked weights     0 bytes (--no-repack: Q4_0 read in the file's layout)\n");
    fprintf(f, "KV dtype             %s, %d tokens per block\n", kvlm_dtype_name(kvt), mf->block_size);
    fprintf(f, "KV bytes per token   %zu (2 x %d layers x %d KV heads x %s)\n", st->kv.bytes_per_token, c->n_layer,
            c->n_kv_head, head);
    fprintf(f, "KV live              %zu bytes for %d tokens\n", st->kv.bytes_live, st->kv_tokens);
    fprintf(f, "KV K shape per layer (1, %d, %d, %d)\n", c->n_kv_head, st->kv_tokens, c->head_dim);
    fprintf(f, "KV reserved          %zu bytes in %zu block%s (%.1f%% holds tokens)\n", st->kv.bytes_reserved,
            st->kv.blocks_used, st->kv.blocks_used == 1 ? "" : "s", st->kv.bytes_reserved ? 100.0 * st->kv.bytes_live / st->kv.bytes_reserved : 0.0);
    if (speculating) fprintf(f, "drafted / accepted   %d / %d\n", st->drafted, st->accepted);
    if (st->kv.tier_disk_files || st->kv.tier_disk_hits || st->kv.tier_bytes_written || st->kv.tier_bad_files)
        fprintf(f, "KV disk tier         %llu blocks restored (%llu bytes read in %.2f ms), %zu files (%zu bytes), "
                "%llu bad files removed\n", (unsigned long long)st->kv.tier_disk_hits,
                (unsigned long long)st->kv.tier_bytes_read, st->kv.tier_restore_ns * 1e-6, st->kv.tier_disk_files,
                st->kv.tier_disk_bytes, (unsigned long long)st->kv.tier_bad_files);
    /* Per layer type, when the layers do not all attend alike. */
    if (st->n_types > 1 || (st->n_types == 1 && st->types[0].window)) {
        for (int i = 0; i < st->n_types && i < 8; i++) {
            const kvlm_kv_layer_type *t = &st->types[i];
            char w[48];
            if (t->window) snprintf(w, sizeof w, "window %d", t->window);
            else snprintf(w, sizeof w, "global");
            fprintf(f, "KV %-17s %zu bytes per token (%d layers)%s\n", w, t->bytes_per_token, t->n_layers,
                    t->window && t->releases ? ", blocks before the window given back" : "");
        }
        fprintf(f, "KV held at %-6d    %zu bytes in whole blocks (every layer whole: %zu)\n", st->kv_tokens,
                st->kv_held, (size_t)st->kv_tokens * st->kv.bytes_per_token);
    }
}
static void print_json(const run_opts *o, const int32_t *prompt, int n_prompt, const gen_result *g, int has_text,
                       const run_stats *st, const kvlm_config *c, const kvlm_engine *e) {
    char why[160];
    json_t *root = json_object(), *pids = json_array(), *ids = json_array(), *js = json_object();
    for (int i = 0; i < n_prompt; i++) json_array_append_new(pids, json_integer(prompt[i]));
    for (int i = 0; i < g->n_ids; i++) json_array_append_new(ids, json_integer(g->ids[i]));
    json_object_set_new(root, "prompt_ids", pids);
    json_object_set_new(root, "ids", ids);
    json_object_set_new(root, "text", has_text ? ts_json_string(g->text, g->text_len) : json_null());
    json_object_set_new(root, "finish_reason", json_string(gen_finish_name(g->finish)));
    json_object_set_new(js, "prompt_tokens", json_integer(st->prompt_tokens));
    json_object_set_new(js, "generated_tokens", json_integer(st->generated));
    json_object_set_new(js, "prefill_ms", json_real(st->prefill_ms));
    json_object_set_new(js, "ttft_ms", json_real(st->ttft_ms));
    json_object_set_new(js, "prefill_ms_per_token", json_real(st->prefill_ms_per_token));
    json_object_set_new(js, "tpot_ms", json_real(st->tpot_ms));
    json_object_set_new(js, "decode_tokens_per_s", json_real(st->decode_tok_s));
    json_object_set_new(js, "threads", json_integer(kvlm_engine_threads(e)));
    json_object_set_new(js, "threads_reason", json_string(session_threads_why(&o->mf, why, sizeof why)));
    json_object_set_new(js, "kv_dtype", json_string(kvlm_dtype_name(o->mf.kv_dtype)));
    json_object_set_new(js, "kv_tokens", json_integer(st->kv_tokens));
    json_object_set_new(js, "kv_bytes", json_integer((json_int_t)st->kv.bytes_live));
    json_object_set_new(js, "kv_bytes_per_token", json_integer((json_int_t)st->kv.bytes_per_token));
    json_object_set_new(js, "kv_k_shape", json_pack("[iiii]", 1, c->n_kv_head, st->kv_tokens, c->head_dim));
    json_object_set_new(js, "kv_bytes_reserved", json_integer((json_int_t)st->kv.bytes_reserved));
    json_object_set_new(js, "kv_blocks_used", json_integer((json_int_t)st->kv.blocks_used));
    json_object_set_new(js, "kv_block_size", json_integer(o->mf.block_size));
    json_t *types = json_array();
    for (int i = 0; i < st->n_types && i < 8; i++)
        json_array_append_new(types, json_pack("{s:i,s:i,s:I,s:b}", "window", st->types[i].window, "layers",
                                               st->types[i].n_layers, "bytes_per_token",
                                               (json_int_t)st->types[i].bytes_per_token, "releases",
                                               st->types[i].releases));
    json_object_set_new(js, "kv_layer_types", types);
    json_object_set_new(js, "kv_bytes_held", json_integer((json_int_t)st->kv_held));
    json_object_set_new(js, "decode_steps", json_integer(st->decode_steps));
    json_object_set_new(js, "drafted_tokens", json_integer(st->drafted));
    json_object_set_new(js, "accepted_tokens", json_integer(st->accepted));
    json_object_set_new(js, "repacked_bytes", json_integer((json_int_t)st->repacked));
    json_object_set_new(js, "params", json_integer((json_int_t)st->params));
    json_object_set_new(js, "active_params", json_integer((json_int_t)st->active_params));
    json_object_set_new(js, "decode_bytes_per_token", json_integer((json_int_t)st->decode_bytes));
    json_object_set_new(root, "stats", js);
    if (o->logprobs) {
        json_t *lps = json_array();
        for (int i = 0; i < g->n_ids; i++) {
            json_t *top = json_array();
            for (int k = 0; k < o->logprobs && k < c->vocab_size; k++)
                json_array_append_new(top, json_pack("{s:i,s:f}", "id", g->lp_ids[i * o->logprobs + k], "logprob",
                                                     (double)g->lp_vals[i * o->logprobs + k]));
            json_array_append_new(lps, json_pack("{s:i,s:f,s:o}", "id", g->ids[i], "logprob", (double)g->chosen_lp[i],
                                                 "top", top));
        }
        json_object_set_new(root, "logprobs", lps);
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(9));
    puts(s);
    free(s);
    json_decref(root);
}

int cli_run(int argc, char **argv) {
    run_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    int bad_grammar;
    kvlm_grammar *grammar = load_grammar(&o, &bad_grammar);
    if (bad_grammar) return EXIT_USAGE;
    cli_session ss;
    int rc = session_open(&ss, &o.mf, 1);
    if (rc) {
        session_close(&ss);
        kvlm_grammar_free(grammar);
        return rc;
    }
    const kvlm_config *c = ss.c;
    kvlm_error err;
    rc = 1;
    kvlm_kv *kv = NULL;
    kvlm_engine *e = NULL;
    cli_draft draft = {0};
    gen_result g = {0};
    const int n_prompt = (int)ss.n_prompt;
    int max_new = o.n;
    if (n_prompt >= c->n_ctx) {
        fprintf(stderr, "kvlm run: the prompt has %d tokens; the context window of %d leaves no room to generate\n",
                n_prompt, c->n_ctx);
        rc = EXIT_USAGE;
        goto out;
    }
    if ((long)n_prompt + o.n > c->n_ctx) {
        max_new = c->n_ctx - n_prompt;
        fprintf(stderr, "kvlm run: -n %d would pass the context window of %d; generating %d\n", o.n, c->n_ctx, max_new);
    }
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = o.mf.kv_dtype;
    ko.block_size = o.mf.block_size;
    ko.max_seqs = 1;
    ko.no_prefix_cache = o.no_cache;
    ko.tier_dir = o.kv_cache_dir;
    ko.tier_disk_bytes = (size_t)o.kv_disk_bytes;
    kvlm_engine_options eo = session_engine_options(&o.mf);
    if (!(kv = kvlm_kv_create(ss.m, &ko, &err)) || !(e = kvlm_engine_create(ss.m, kv, &eo, &err))) {
        fprintf(stderr, "kvlm: %s\n", err.msg);
        rc = err.code == KVLM_ERR_ARG ? EXIT_USAGE : 1;
        goto out;
    }
    if ((rc = draft_open(&draft, &o.draft, ss.m, 1, &o.mf))) goto out;
    rc = 1;
    int32_t eos[KVLM_MAX_EOS + 1];
    const int n_eos = o.ignore_eos ? 0 : kvlm_eos_ids(ss.m, ss.tok, eos, KVLM_MAX_EOS + 1);
    gen_request rq = {.prompt = ss.prompt, .n_prompt = n_prompt, .max_new = max_new, .eos_ids = eos,
                      .n_eos = n_eos < KVLM_MAX_EOS + 1 ? n_eos : KVLM_MAX_EOS + 1, .sampling = o.smp.o,
                      .logprobs = o.logprobs, .text = 1, .tok = ss.tok, .stops = o.smp.stops,
                      .n_stops = o.smp.n_stops, .recompute = o.no_cache, .stream = o.json ? NULL : stdout,
                      .grammar = grammar, .speculation = draft.spec, .draft = &draft};
    if (!o.json && o.mf.prompt) {
        fputs(o.mf.prompt, stdout); /* the prompt as given, not its BOS */
    } else if (!o.json && ss.tok) {
        char *ptext = NULL;
        size_t plen = 0;
        if (kvlm_tokenizer_decode(ss.tok, ss.prompt, ss.n_prompt, &ptext, &plen, &err) == 0)
            fwrite(ptext, 1, plen, stdout);
        free(ptext);
    }
    fflush(stdout);
    if (gen_run(e, kv, c->vocab_size, &rq, &g, &err)) {
        if (!o.json) putchar('\n');
        fprintf(stderr, "kvlm: %s\n", err.msg);
        rc = err.code == KVLM_ERR_ARG ? EXIT_USAGE : 1;
        goto out;
    }
    if (!o.json) putchar('\n');
    run_stats st = {.prompt_tokens = n_prompt, .generated = g.n_ids, .decode_steps = g.decode_steps,
                    .drafted = g.drafted, .accepted = g.accepted, .repacked = kvlm_model_repacked_bytes(ss.m),
                    .params = kvlm_model_param_count(ss.m), .active_params = kvlm_model_active_param_count(ss.m),
                    .decode_bytes = kvlm_model_decode_bytes(ss.m)};
    st.prefill_ms = g.prefill_s * 1e3;
    st.ttft_ms = g.ttft_s * 1e3;
    st.prefill_ms_per_token = st.prefill_ms / n_prompt;
    /* tokens after the first came from the decode steps (more than one
     * a step when speculation keeps drafts) */
    const int decoded = g.n_ids > 1 ? g.n_ids - 1 : 0;
    st.tpot_ms = decoded ? g.decode_s * 1e3 / decoded : 0;
    st.decode_tok_s = g.decode_s > 0 ? decoded / g.decode_s : 0;
    st.kv = g.kv;
    st.kv_tokens = (int)g.kv.tokens;
    st.n_types = kvlm_kv_layer_types(kv, st.types, 8);
    st.kv_held = kvlm_kv_seq_bytes(kv, st.kv_tokens);
    if (o.json) print_json(&o, ss.prompt, n_prompt, &g, ss.tok != NULL, &st, c, e);
    else if (o.stats) print_stats(&st, c, e, &o.mf, draft.spec.mode != KVLM_DRAFT_NONE);
    rc = 0;
out:
    gen_result_free(&g);
    draft_close(&draft);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    session_close(&ss);
    kvlm_grammar_free(grammar);
    return rc;
}
