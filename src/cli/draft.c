/* The speculative decoding flags and the draft model they open (see draft.h). */
#include "cli/draft.h"

#include <stdio.h>
#include <string.h>

#include "cli/session.h"

void draft_flags_init(draft_flags *f) { *f = (draft_flags){0}; }

int draft_flags_check(const draft_flags *f, const char *cmd, int serve_default) {
    if (f->model && f->ngram) {
        fprintf(stderr, "kvlm %s: --draft and --draft-ngram exclude each other\n", cmd);
        return -1;
    }
    if (f->off && (f->model || f->ngram || f->k || f->fixed)) {
        fprintf(stderr, "kvlm %s: --no-draft excludes --draft, --draft-ngram, --draft-k and --draft-fixed\n", cmd);
        return -1;
    }
    if ((f->k || f->fixed) && !f->model && !f->ngram && !serve_default) {
        fprintf(stderr, "kvlm %s: %s needs --draft or --draft-ngram\n", cmd, f->k ? "--draft-k" : "--draft-fixed");
        return -1;
    }
    return 0;
}

kvlm_speculation draft_speculation(const draft_flags *f, int serve_default) {
    kvlm_speculation sp = kvlm_speculation_default_params();
    sp.k = f->k ? f->k : DRAFT_DEFAULT_K;
    sp.ngram = f->ngram;
    sp.fixed = f->fixed;
    if (f->model) sp.mode = KVLM_DRAFT_MODEL;
    else if (f->ngram) sp.mode = KVLM_DRAFT_NGRAM;
    else if (serve_default && !f->off) {
        sp.mode = KVLM_DRAFT_NGRAM;
        sp.ngram = DRAFT_DEFAULT_NGRAM;
    }
    return sp;
}

int draft_open(cli_draft *d, const draft_flags *f, const kvlm_model *target, int max_seqs, const model_flags *mf) {
    memset(d, 0, sizeof *d);
    d->spec = draft_speculation(f, 0);
    if (!f->model) return 0;
    if (!(d->m = cli_load_model(f->model, NULL, KVLM_F32, mf))) return 1;
    const kvlm_config *dc = kvlm_model_config(d->m), *tc = kvlm_model_config(target);
    if (dc->vocab_size != tc->vocab_size) {
        fprintf(stderr, "kvlm: --draft %s: its vocabulary has %d tokens, the model's %d (they must share one "
                "tokenizer)\n", f->model, dc->vocab_size, tc->vocab_size);
        return 2;
    }
    kvlm_error err;
    const kvlm_engine_options eo = session_engine_options(mf);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = mf->kv_dtype;
    ko.max_seqs = max_seqs;
    ko.no_prefix_cache = f->no_prefix_cache;
    if (!(d->kv = kvlm_kv_create(d->m, &ko, &err)) || !(d->e = kvlm_engine_create(d->m, d->kv, &eo, &err))) {
        fprintf(stderr, "kvlm: --draft %s: %s\n", f->model, err.msg);
        return 1;
    }
    return 0;
}

int draft_attach(const cli_draft *d, kvlm_sched *s, kvlm_error *err) {
    if (!d || !d->e) return 0;
    return kvlm_sched_set_draft(s, d->e, d->kv, kvlm_model_config(d->m)->vocab_size, err);
}

void draft_close(cli_draft *d) {
    kvlm_engine_free(d->e);
    kvlm_kv_free(d->kv);
    kvlm_model_free(d->m);
    memset(d, 0, sizeof *d);
}
