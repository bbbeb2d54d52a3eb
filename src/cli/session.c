/* Model flags and opening model, tokenizer and prompt (see session.h). */
#include "cli/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

const char *model_flags_help =
    "  -m PATH            model directory (Hugging Face) or file (.safetensors, llm.c .bin)\n"
    "  --synthetic NAME   random weights with exact shapes: gpt2-124m, gpt2-355m, gpt2-tiny\n"
    "  --dtype T          weight dtype of a synthetic model: f32 (default), f16, bf16, q8_0, q4_0\n"
    "  --tokenizer PATH   tokenizer directory or file (default: the model's directory)\n"
    "  -p, --prompt TEXT  prompt text (needs a tokenizer)\n"
    "  --ids LIST         prompt as token ids, separated by spaces or commas\n"
    "  --threads N        threads (default: all cores)\n"
    "  --isa NAME         kernels: auto, scalar, avx2, avx512 (default auto)\n"
    "  --kv-dtype T       KV cache dtype: f32 (default) or f16\n"
    "  --block-size N     KV block size in tokens (default 16)\n";

void model_flags_init(model_flags *f) {
    memset(f, 0, sizeof *f);
    f->block_size = 16;
}

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

static int parse_dtype(const char *flag, const char *s, int allow_bf16, kvlm_dtype *out) {
    if (kvlm_dtype_parse(s, out) || (!allow_bf16 && *out != KVLM_F32 && *out != KVLM_F16)) {
        fprintf(stderr, "kvlm: %s: '%s' is not one of %s\n", flag, s, allow_bf16 ? "f32, f16, bf16, q8_0, q4_0" : "f32, f16");
        return -1;
    }
    return 0;
}

int model_flags_parse(model_flags *f, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    static const char *names[] = {"-m", "--model", "--synthetic", "--dtype", "--tokenizer", "-p", "--prompt",
                                  "--ids", "--threads", "--isa", "--kv-dtype", "--block-size"};
    int known = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) known |= !strcmp(a, names[k]);
    if (!known) return 0;
    if (!(v = arg_value(argc, argv, i))) return -1;
    int rc = 0;
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) f->model = v;
    else if (!strcmp(a, "--synthetic")) f->synthetic = v;
    else if (!strcmp(a, "--dtype")) rc = parse_dtype(a, v, 1, &f->synth_dtype);
    else if (!strcmp(a, "--tokenizer")) f->tokenizer = v;
    else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) f->prompt = v;
    else if (!strcmp(a, "--ids")) f->ids = v;
    else if (!strcmp(a, "--threads")) rc = arg_int(a, v, 1, 1024, &f->threads);
    else if (!strcmp(a, "--isa")) rc = parse_isa(v, &f->isa);
    else if (!strcmp(a, "--kv-dtype")) rc = parse_dtype(a, v, 0, &f->kv_dtype);
    else if (!strcmp(a, "--block-size")) rc = arg_int(a, v, 1, 4096, &f->block_size);
    return rc ? -1 : 1;
}

kvlm_engine_options session_engine_options(const model_flags *f, int no_cache) {
    (void)no_cache; /* recomputation is no longer an engine mode (see measure/recompute.h) */
    return (kvlm_engine_options){.threads = f->threads, .isa = f->isa};
}

static int open_prompt(cli_session *s, const model_flags *f) {
    kvlm_error err;
    if (f->ids) {
        if (arg_ids("--ids", f->ids, &s->prompt, &s->n_prompt)) return 2;
    } else if (kvlm_tokenizer_encode(s->tok, f->prompt, strlen(f->prompt), 0, &s->prompt, &s->n_prompt, &err)) {
        fprintf(stderr, "kvlm: %s\n", err.msg);
        return 2;
    }
    if (s->n_prompt == 0) {
        fprintf(stderr, "kvlm: the prompt is empty\n");
        return 2;
    }
    for (size_t i = 0; i < s->n_prompt; i++)
        if (s->prompt[i] >= s->c->vocab_size) {
            fprintf(stderr, "kvlm: token id %d is outside the vocabulary [0, %d)\n", s->prompt[i], s->c->vocab_size);
            return 2;
        }
    if ((long)s->n_prompt > s->c->n_ctx) {
        fprintf(stderr, "kvlm: the prompt has %zu tokens, more than the context window of %d\n", s->n_prompt,
                s->c->n_ctx);
        return 2;
    }
    return 0;
}

int session_open(cli_session *s, const model_flags *f, int need_prompt) {
    memset(s, 0, sizeof *s);
    if (!f->model == !f->synthetic) {
        fprintf(stderr, "kvlm: no model: give exactly one of -m PATH or --synthetic PRESET\n");
        return 2;
    }
    if (need_prompt && !f->prompt == !f->ids) {
        fprintf(stderr, "kvlm: give exactly one of -p TEXT or --ids LIST\n");
        return 2;
    }
    if (!(s->m = cli_load_model(f->model, f->synthetic, f->synth_dtype))) return 1;
    s->c = kvlm_model_config(s->m);
    kvlm_error err;
    const char *tok_path = f->tokenizer ? f->tokenizer : kvlm_model_tokenizer_path(s->m);
    if (*tok_path) s->tok = kvlm_tokenizer_load(tok_path, &err);
    if (!s->tok && (f->prompt || f->tokenizer)) {
        fprintf(stderr, "kvlm: -p needs a tokenizer: %s\n",
                *tok_path ? err.msg : "a synthetic model has none (use --tokenizer PATH or --ids)");
        return 1;
    }
    return need_prompt ? open_prompt(s, f) : 0;
}

void session_close(cli_session *s) {
    free(s->prompt);
    kvlm_tokenizer_free(s->tok);
    kvlm_model_free(s->m);
    memset(s, 0, sizeof *s);
}
