/*
 * `kvlm run`: generate from a prompt on one sequence, streaming text as
 * tokens arrive, with the phase timings and KV cache figures on request
 * (--stats) or everything as one JSON object (--json).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/generate.h"

static const char *usage =
    "usage: kvlm run (-m MODEL | --synthetic PRESET) (-p TEXT | --ids \"ID ID ...\") [options]\n"
    "  -m PATH            model directory (Hugging Face) or file (.safetensors, llm.c .bin)\n"
    "  --synthetic NAME   random weights with exact shapes: gpt2-124m, gpt2-355m, gpt2-tiny\n"
    "  --dtype T          weight dtype of a synthetic model: f32 (default), f16, bf16\n"
    "  -p, --prompt TEXT  prompt text (needs the model's tokenizer files)\n"
    "  --tokenizer PATH   tokenizer directory or file (default: the model's directory)\n"
    "  --ids LIST         prompt as token ids, separated by spaces or commas\n"
    "  -n N               tokens to generate (default 64; 0 = prefill only)\n"
    "  --temp T           temperature, 0 = greedy (default 0.7)\n"
    "  --top-k K          keep the K most likely tokens, 0 = off (default 0)\n"
    "  --top-p P          keep the smallest set with mass >= P (default 0.9)\n"
    "  --seed S           random seed (default 1)\n"
    "  --ignore-eos       do not stop at the end-of-sequence token\n"
    "  --threads N        threads (default: all cores)\n"
    "  --isa NAME         kernels: auto, scalar, avx2, avx512 (default auto)\n"
    "  --kv-dtype T       KV cache dtype: f32 (default) or f16\n"
    "  --block-size N     KV block size in tokens (default 16)\n"
    "  --no-cache         recompute the whole context at every step\n"
    "  --stats            print timings and KV cache figures after the text\n"
    "  --json             print one JSON object instead of streaming text\n"
    "  --logprobs K       with --json: top K log-probabilities per generated token\n";

typedef struct run_opts {
    const char *model, *synthetic, *prompt, *ids, *tokenizer;
    kvlm_dtype synth_dtype, kv_dtype;
    int n, threads, top_k, logprobs, block_size, no_cache, stats, json, ignore_eos;
    float temp, top_p;
    uint64_t seed;
    kvlm_isa isa;
} run_opts;

static int parse_isa(const char *s, kvlm_isa *out) {
    const char *names[] = {"auto", "scalar", "avx2", "avx512"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) {
            *out = (kvlm_isa)i;
            return 0;
        }
    fprintf(stderr, "kvlm: --isa: '%s' is not one of auto, scalar, avx2, avx512\n", s);
    return -1;
}

static int parse_dtype_flag(const char *flag, const char *s, int allow_bf16, kvlm_dtype *out) {
    if (kvlm_dtype_parse(s, out) || (!allow_bf16 && *out == KVLM_BF16)) {
        fprintf(stderr, "kvlm: %s: '%s' is not one of %s\n", flag, s, allow_bf16 ? "f32, f16, bf16" : "f32, f16");
        return -1;
    }
    return 0;
}

static int parse(int argc, char **argv, run_opts *o) {
    *o = (run_opts){.n = 64, .temp = 0.7f, .top_p = 0.9f, .seed = 1, .block_size = 16};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
#define VAL() do { if (!(v = arg_value(argc, argv, &i))) return -1; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); exit(0); }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); o->model = v; }
        else if (!strcmp(a, "--synthetic")) { VAL(); o->synthetic = v; }
        else if (!strcmp(a, "--dtype")) { VAL(); if (parse_dtype_flag(a, v, 1, &o->synth_dtype)) return -1; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { VAL(); o->prompt = v; }
        else if (!strcmp(a, "--ids")) { VAL(); o->ids = v; }
        else if (!strcmp(a, "--tokenizer")) { VAL(); o->tokenizer = v; }
        else if (!strcmp(a, "-n")) { VAL(); if (arg_int(a, v, 0, 1 << 20, &o->n)) return -1; }
        else if (!strcmp(a, "--temp")) { VAL(); if (arg_float(a, v, 0, 100, &o->temp)) return -1; }
        else if (!strcmp(a, "--top-k")) { VAL(); if (arg_int(a, v, 0, 1 << 22, &o->top_k)) return -1; }
        else if (!strcmp(a, "--top-p")) { VAL(); if (arg_float(a, v, 1e-6, 1, &o->top_p)) return -1; }
        else if (!strcmp(a, "--seed")) { VAL(); if (arg_u64(a, v, &o->seed)) return -1; }
        else if (!strcmp(a, "--threads")) { VAL(); if (arg_int(a, v, 1, 1024, &o->threads)) return -1; }
        else if (!strcmp(a, "--isa")) { VAL(); if (parse_isa(v, &o->isa)) return -1; }
        else if (!strcmp(a, "--kv-dtype")) { VAL(); if (parse_dtype_flag(a, v, 0, &o->kv_dtype)) return -1; }
        else if (!strcmp(a, "--block-size")) { VAL(); if (arg_int(a, v, 1, 4096, &o->block_size)) return -1; }
        else if (!strcmp(a, "--logprobs")) { VAL(); if (arg_int(a, v, 1, 100, &o->logprobs)) return -1; }
        else if (!strcmp(a, "--no-cache")) o->no_cache = 1;
        else if (!strcmp(a, "--stats")) o->stats = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1;
        else { fprintf(stderr, "kvlm run: unknown argument '%s' (see kvlm run --help)\n", a); return -1; }
#undef VAL
    }
    if (!o->model == !o->synthetic) {
        fprintf(stderr, "kvlm run: no model: give exactly one of -m PATH or --synthetic PRESET\n");
        return -1;
    }
    if (!o->prompt == !o->ids) {
        fprintf(stderr, "kvlm run: give exactly one of -p TEXT or --ids LIST\n");
        return -1;
    }
    if (o->logprobs && !o->json) {
        fprintf(stderr, "kvlm run: --logprobs needs --json\n");
        return -1;
    }
    return 0;
}

typedef struct stream_ctx {
    const kvlm_tokenizer *tok;
    kvlm_utf8_stream utf8;
} stream_ctx;

static void stream_token(int32_t id, void *p) {
    stream_ctx *s = p;
    if (!s->tok) {
        printf("%d ", id);
    } else {
        size_t len;
        const char *piece = kvlm_tokenizer_piece(s->tok, id, &len);
        char buf[512];
        if (piece && len <= sizeof buf - 4) fwrite(buf, 1, kvlm_utf8_push(&s->utf8, piece, len, buf), stdout);
    }
    fflush(stdout);
}

/* The generated ids as text (raw bytes, invalid UTF-8 kept). */
static char *detok(const kvlm_tokenizer *tok, const int32_t *ids, int n) {
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    for (int i = 0; s && i < n; i++) {
        size_t pl = 0;
        const char *p = tok ? kvlm_tokenizer_piece(tok, ids[i], &pl) : NULL;
        if (!p) continue;
        if (len + pl + 1 > cap) {
            while (len + pl + 1 > cap) cap *= 2;
            char *ns = realloc(s, cap);
            if (!ns) { free(s); return NULL; }
            s = ns;
        }
        memcpy(s + len, p, pl);
        len += pl;
    }
    if (s) s[len] = 0;
    return s;
}

typedef struct run_stats {
    int prompt_tokens, generated;
    double prefill_ms, ttft_ms, prefill_ms_per_token, tpot_ms, decode_tok_s;
    kvlm_kv_stats kv;
    int kv_tokens;
} run_stats;

static void print_stats(const run_stats *st, const kvlm_config *c, const kvlm_engine *e, kvlm_dtype kvt,
                        int block_size) {
    fprintf(stderr,
            "\n--- kvlm stats ---\n"
            "prompt tokens        %d\n"
            "prefill              %.2f ms (%.3f ms per prompt token, %.0f tokens/s)\n"
            "time to first token  %.2f ms\n"
            "generated tokens     %d\n"
            "time per out token   %.2f ms (%.1f tokens/s, %d decode steps)\n"
            "threads / kernels    %d / %s\n"
            "KV dtype             %s, %d tokens per block\n"
            "KV bytes per token   %zu (2 x %d layers x %d KV heads x %d head dim x %zu B)\n"
            "KV live              %zu bytes for %d tokens\n"
            "KV K shape per layer (1, %d, %d, %d)\n"
            "KV reserved          %zu bytes in %zu blocks (%.1f%% holds tokens)\n",
            st->prompt_tokens, st->prefill_ms, st->prefill_ms_per_token,
            st->prefill_ms > 0 ? st->prompt_tokens / st->prefill_ms * 1e3 : 0.0, st->ttft_ms, st->generated,
            st->tpot_ms, st->decode_tok_s, st->generated > 0 ? st->generated - 1 : 0, kvlm_engine_threads(e),
            kvlm_isa_name(kvlm_engine_isa(e)), kvlm_dtype_name(kvt), block_size, st->kv.bytes_per_token,
            c->n_layer, c->n_kv_head, c->head_dim, kvlm_dtype_size(kvt), st->kv.bytes_live, st->kv_tokens,
            c->n_kv_head, st->kv_tokens, c->head_dim, st->kv.bytes_reserved, st->kv.blocks_used,
            st->kv.bytes_reserved ? 100.0 * st->kv.bytes_live / st->kv.bytes_reserved : 0.0);
}

static void print_json(const run_opts *o, const int32_t *prompt, int n_prompt, const gen_result *g,
                       const kvlm_tokenizer *tok, const run_stats *st, const kvlm_config *c) {
    json_t *root = json_object(), *pids = json_array(), *ids = json_array(), *js = json_object();
    for (int i = 0; i < n_prompt; i++) json_array_append_new(pids, json_integer(prompt[i]));
    for (int i = 0; i < g->n_ids; i++) json_array_append_new(ids, json_integer(g->ids[i]));
    json_object_set_new(root, "prompt_ids", pids);
    json_object_set_new(root, "ids", ids);
    char *text = detok(tok, g->ids, g->n_ids);
    json_object_set_new(root, "text", tok && text ? json_stringn_nocheck(text, strlen(text)) : json_null());
    free(text);
    json_object_set_new(root, "finish_reason", json_string(g->stopped_eos ? "stop" : "length"));
    json_object_set_new(js, "prompt_tokens", json_integer(st->prompt_tokens));
    json_object_set_new(js, "generated_tokens", json_integer(st->generated));
    json_object_set_new(js, "prefill_ms", json_real(st->prefill_ms));
    json_object_set_new(js, "ttft_ms", json_real(st->ttft_ms));
    json_object_set_new(js, "prefill_ms_per_token", json_real(st->prefill_ms_per_token));
    json_object_set_new(js, "tpot_ms", json_real(st->tpot_ms));
    json_object_set_new(js, "decode_tokens_per_s", json_real(st->decode_tok_s));
    json_object_set_new(js, "kv_dtype", json_string(kvlm_dtype_name(o->kv_dtype)));
    json_object_set_new(js, "kv_tokens", json_integer(st->kv_tokens));
    json_object_set_new(js, "kv_bytes", json_integer((json_int_t)st->kv.bytes_live));
    json_object_set_new(js, "kv_bytes_per_token", json_integer((json_int_t)st->kv.bytes_per_token));
    json_object_set_new(js, "kv_k_shape", json_pack("[iiii]", 1, c->n_kv_head, st->kv_tokens, c->head_dim));
    json_object_set_new(js, "kv_bytes_reserved", json_integer((json_int_t)st->kv.bytes_reserved));
    json_object_set_new(js, "kv_blocks_used", json_integer((json_int_t)st->kv.blocks_used));
    json_object_set_new(js, "kv_block_size", json_integer(o->block_size));
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

static int prompt_ids(const run_opts *o, const kvlm_tokenizer *tok, int32_t **ids, size_t *n) {
    if (o->ids) return arg_ids("--ids", o->ids, ids, n);
    kvlm_error err;
    if (kvlm_tokenizer_encode(tok, o->prompt, strlen(o->prompt), 0, ids, n, &err)) {
        fprintf(stderr, "kvlm: %s\n", err.msg);
        return -1;
    }
    if (*n == 0) {
        fprintf(stderr, "kvlm run: the prompt is empty\n");
        free(*ids);
        return -1;
    }
    return 0;
}

int cli_run(int argc, char **argv) {
    run_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    kvlm_model *m = cli_load_model(o.model, o.synthetic, o.synth_dtype);
    if (!m) return 1;
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_error err;
    int rc = 1;
    kvlm_tokenizer *tok = NULL;
    kvlm_kv *kv = NULL;
    kvlm_engine *e = NULL;
    kvlm_sampler *smp = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    gen_result g = {0};
    const char *tok_path = o.tokenizer ? o.tokenizer : kvlm_model_dir(m);
    if (*tok_path) tok = kvlm_tokenizer_load(tok_path, &err);
    if (!tok && (o.prompt || o.tokenizer)) {
        fprintf(stderr, "kvlm run: -p needs a tokenizer: %s\n",
                *tok_path ? err.msg : "a synthetic model has none (use --tokenizer PATH or --ids)");
        goto out;
    }
    if (prompt_ids(&o, tok, &ids, &n_ids)) { rc = EXIT_USAGE; goto out; }
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= c->vocab_size) {
            fprintf(stderr, "kvlm run: token id %d is outside the vocabulary [0, %d)\n", ids[i], c->vocab_size);
            rc = EXIT_USAGE;
            goto out;
        }
    if ((long)n_ids > c->n_ctx) {
        fprintf(stderr, "kvlm run: the prompt has %zu tokens, more than the context window of %d\n", n_ids, c->n_ctx);
        rc = EXIT_USAGE;
        goto out;
    }
    int max_new = o.n;
    if ((long)n_ids + o.n - 1 > c->n_ctx) {
        max_new = c->n_ctx - (int)n_ids + 1;
        fprintf(stderr, "kvlm run: -n %d would pass the context window of %d; generating %d\n", o.n, c->n_ctx, max_new);
    }
    kvlm_kv_options ko = {.dtype = o.kv_dtype, .block_size = o.block_size, .max_seqs = 1};
    kvlm_engine_options eo = {.threads = o.threads, .isa = o.isa, .no_cache = o.no_cache};
    kvlm_sampler_options so = {.temperature = o.temp, .top_k = o.top_k, .top_p = o.top_p, .seed = o.seed};
    int seq;
    if (!(kv = kvlm_kv_create(m, &ko, &err)) || !(e = kvlm_engine_create(m, kv, &eo, &err)) ||
        !(smp = kvlm_sampler_create(&so, c->vocab_size, &err)) || (seq = kvlm_kv_seq_new(kv, &err)) < 0) {
        fprintf(stderr, "kvlm: %s\n", err.msg);
        goto out;
    }
    stream_ctx sc = {.tok = tok};
    gen_request rq = {.prompt = ids, .n_prompt = (int)n_ids, .max_new = max_new, .stop_at_eos = !o.ignore_eos,
                      .logprobs_k = o.logprobs, .on_token = o.json ? NULL : stream_token, .ctx = &sc};
    if (!o.json && tok) {
        char *ptext = detok(tok, ids, (int)n_ids);
        if (ptext) fputs(ptext, stdout);
        free(ptext);
    }
    if (gen_run(e, seq, smp, c->vocab_size, c->eos_id, &rq, &g, &err)) {
        fprintf(stderr, "kvlm: %s\n", err.msg);
        goto out;
    }
    if (!o.json) {
        char tail[8];
        fwrite(tail, 1, kvlm_utf8_flush(&sc.utf8, tail), stdout);
        putchar('\n');
    }
    run_stats st = {.prompt_tokens = (int)n_ids, .generated = g.n_ids};
    st.prefill_ms = g.prefill_s * 1e3;
    st.ttft_ms = g.ttft_s * 1e3;
    st.prefill_ms_per_token = st.prefill_ms / (double)n_ids;
    st.tpot_ms = g.decode_steps ? g.decode_s * 1e3 / g.decode_steps : 0;
    st.decode_tok_s = g.decode_s > 0 ? g.decode_steps / g.decode_s : 0;
    kvlm_kv_get_stats(kv, &st.kv);
    st.kv_tokens = kvlm_kv_seq_len(kv, seq);
    if (o.json) print_json(&o, ids, (int)n_ids, &g, tok, &st, c);
    else if (o.stats) print_stats(&st, c, e, o.kv_dtype, o.block_size);
    rc = 0;
out:
    gen_result_free(&g);
    free(ids);
    kvlm_sampler_free(smp);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    kvlm_tokenizer_free(tok);
    kvlm_model_free(m);
    return rc;
}
