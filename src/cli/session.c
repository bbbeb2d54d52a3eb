/* Opening model, tokenizer and prompt from the model flags (see session.h). */
#include "cli/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

kvlm_engine_options session_engine_options(const model_flags *f) {
    kvlm_engine_options o = kvlm_engine_default_params();
    o.threads = f->threads;
    o.isa = f->isa;
    return o;
}

const char *session_threads_why(const model_flags *f, char *buf, size_t n) {
    if (f->threads) snprintf(buf, n, "--threads");
    else kvlm_default_threads(buf, n);
    return buf;
}

kvlm_model *cli_load_model_status(const char *path, const char *synthetic, kvlm_dtype synth_dtype,
                                  const model_flags *f, int *status) {
    kvlm_error err;
    kvlm_model_params mp = kvlm_model_default_params();
    mp.isa = f->isa;
    mp.repack = !f->no_repack;
    kvlm_model *m = path ? kvlm_model_load(path, &mp, &err) : kvlm_model_synthetic(synthetic, synth_dtype, 1234, &mp, &err);
    if (!m) fprintf(stderr, "kvlm: %s\n", err.msg);
    /* A model file that is readable but wrong (a field out of range, a
     * layer pattern that does not fit, a refused architecture) is bad
     * input: status 2, as for a bad flag; anything else 1. */
    if (status) *status = !m && path && (err.code == KVLM_ERR_FORMAT || err.code == KVLM_ERR_UNSUPPORTED) ? 2 : 1;
    return m;
}

kvlm_model *cli_load_model(const char *path, const char *synthetic, kvlm_dtype synth_dtype, const model_flags *f) {
    return cli_load_model_status(path, synthetic, synth_dtype, f, NULL);
}

/* The prompt's text from -p or -f (or the default); NULL for --ids. */
static int prompt_text(const model_flags *f, char **own, const char **text, size_t *len) {
    *own = NULL;
    *text = f->prompt ? f->prompt : f->ids || f->file ? NULL : f->default_prompt;
    if (*text) {
        *len = strlen(*text);
        return 0;
    }
    if (!f->file) return 0;
    if (!(*own = arg_read_file("--file", f->file, len))) return 1;
    *text = *own;
    return 0;
}

static int open_prompt(cli_session *s, const model_flags *f) {
    kvlm_error err;
    char *own;
    const char *text;
    size_t len = 0;
    if (prompt_text(f, &own, &text, &len)) return 1;
    if (!text) {
        if (arg_ids("--ids", f->ids, &s->prompt, &s->n_prompt)) return 2;
    } else if (kvlm_tokenizer_encode_prompt(s->tok, text, len, 1, &s->prompt, &s->n_prompt,
                                            &err)) { /* as kvlm serve encodes a completion prompt */
        fprintf(stderr, "kvlm: %s\n", err.msg);
        free(own);
        return 2;
    }
    free(own);
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

int session_open(cli_session *s, const model_flags *f, int need) {
    memset(s, 0, sizeof *s);
    if (!f->model == !f->synthetic) {
        fprintf(stderr, "kvlm: no model: give exactly one of -m MODEL or --synthetic PRESET\n");
        return 2;
    }
    int given = !!f->prompt + !!f->ids + !!f->file;
    if ((need & SESSION_PROMPT) && (given > 1 || (given == 0 && !f->default_prompt))) {
        fprintf(stderr, "kvlm: give exactly one of -p TEXT, --ids LIST or -f FILE\n");
        return 2;
    }
    int status;
    if (!(s->m = cli_load_model_status(f->model, f->synthetic, f->synth_dtype, f, &status))) return status;
    s->c = kvlm_model_config(s->m);
    kvlm_error err;
    const char *tok_path = f->tokenizer ? f->tokenizer : kvlm_model_tokenizer_path(s->m);
    if (*tok_path) s->tok = kvlm_tokenizer_load(tok_path, &err);
    if (!s->tok && f->tokenizer) {
        fprintf(stderr, "kvlm: --tokenizer: %s\n", err.msg);
        return 1;
    }
    const int text = (need & SESSION_PROMPT) && !f->ids;
    if (!s->tok && (text || (need & SESSION_TOKENIZER))) {
        const char *what = !text ? "the text needs a tokenizer"
                           : f->prompt ? "-p needs a tokenizer"
                           : f->file   ? "-f needs a tokenizer"
                                       : "the default prompt needs a tokenizer (or give --ids LIST)";
        fprintf(stderr, "kvlm: %s: %s\n", what, *tok_path ? err.msg : "a synthetic model has none (use --tokenizer PATH)");
        return 1;
    }
    return (need & SESSION_PROMPT) ? open_prompt(s, f) : 0;
}

void session_close(cli_session *s) {
    free(s->prompt);
    kvlm_tokenizer_free(s->tok);
    kvlm_model_free(s->m);
    memset(s, 0, sizeof *s);
}
