/* The models of kvlm chat and /model's switch (see chat_models.h). */
#include "cli/chat_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

int chat_engine_open(chat_engine *ce, const model_flags *mf, const char *tpl_name, const chat_kv_tiers *tiers) {
    memset(ce, 0, sizeof *ce);
    int rc = session_open(&ce->ss, mf, SESSION_TOKENIZER);
    ce->open = 1;
    if (rc) return rc;
    ce->c = ce->ss.c;
    ce->tok = ce->ss.tok;
    kvlm_error err;
    if (chat_template_load(&ce->tpl, kvlm_model_dir(ce->ss.m), kvlm_model_tokenizer_path(ce->ss.m), tpl_name,
                           &err)) {
        fprintf(stderr, "kvlm chat: %s\n", err.msg);
        return err.code == KVLM_ERR_ARG ? EXIT_USAGE : 1;
    }
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = mf->kv_dtype;
    ko.block_size = mf->block_size;
    ko.max_seqs = 1;
    if (tiers) {
        ko.tier_dir = tiers->dir;
        ko.tier_disk_bytes = tiers->disk_bytes;
        ko.tier_ram_bytes = tiers->ram_bytes;
    }
    kvlm_engine_options eo = session_engine_options(mf);
    if (!(ce->kv = kvlm_kv_create(ce->ss.m, &ko, &err)) || !(ce->e = kvlm_engine_create(ce->ss.m, ce->kv, &eo, &err))) {
        fprintf(stderr, "kvlm chat: %s\n", err.msg);
        return err.code == KVLM_ERR_ARG ? EXIT_USAGE : 1;
    }
    return 0;
}

void chat_engine_close(chat_engine *ce) {
    if (!ce->open) return;
    kvlm_engine_free(ce->e);
    kvlm_kv_free(ce->kv);
    chat_template_free(&ce->tpl);
    session_close(&ce->ss);
    memset(ce, 0, sizeof *ce);
}

void chat_engine_set_ends(chat_engine *ce, const int32_t *turn_ends, int n_turn_ends) {
    ce->n_ends = kvlm_eos_ids(ce->ss.m, ce->tok, ce->ends, KVLM_MAX_EOS + 1);
    if (ce->n_ends > KVLM_MAX_EOS + 1) ce->n_ends = KVLM_MAX_EOS + 1;
    if (ce->n_ends < 0) ce->n_ends = 0;
    for (int i = 0; i < n_turn_ends && i < CHAT_MAX_TURN_ENDS; i++) ce->ends[ce->n_ends++] = turn_ends[i];
}

void chat_models_print(const chat_models *cm, FILE *f) {
    if (!cm->list->n) fprintf(f, "* %s (synthetic)\n", cm->mf.synthetic);
    for (int i = 0; i < cm->list->n; i++) {
        char name[256];
        fprintf(f, "%s %s  %s\n", i == cm->index ? "*" : " ", model_list_name(cm->list, i, name, sizeof name),
                cm->list->paths[i]);
    }
}

static int find(const model_list *l, const char *name) {
    for (int i = 0; i < l->n; i++) {
        char n[256], s[256];
        model_list_stem(l->paths[i], s, sizeof s);
        if (!strcmp(model_list_name(l, i, n, sizeof n), name) || !strcmp(s, name)) return i;
    }
    return -1;
}

int chat_models_switch(chat_models *cm, chat_state *st, const char *name) {
    FILE *f = st->info;
    if (!cm->list->n) {
        fputs("/model: a synthetic model only; give -m for each model to switch between\n", f);
        return -1;
    }
    char cur[256];
    model_list_name(cm->list, cm->index, cur, sizeof cur);
    if (!name) {
        fprintf(f, "model %s (/models lists them, /model NAME switches)\n", cur);
        return 0;
    }
    const int i = find(cm->list, name);
    if (i < 0) {
        fprintf(f, "unknown model '%s'; the models are:", name);
        for (int k = 0; k < cm->list->n; k++) {
            char n[256];
            fprintf(f, "%s %s", k ? "," : "", model_list_name(cm->list, k, n, sizeof n));
        }
        fputc('\n', f);
        return -1;
    }
    if (i == cm->index) {
        fprintf(f, "model %s is in use already\n", cur);
        return 0;
    }
    model_flags mf = cm->mf;
    mf.model = cm->list->paths[i];
    chat_engine *next = &cm->slot[1 - cm->cur];
    fflush(f);
    if (chat_engine_open(next, &mf, cm->tpl_name, &cm->tiers)) {
        chat_engine_close(next);
        fprintf(f, "/model: cannot use %s (the reason is above); the model stays %s\n", name, cur);
        return -1;
    }
    chat_engine_close(&cm->slot[cm->cur]);
    cm->cur = 1 - cm->cur;
    cm->index = i;
    cm->mf.model = mf.model;
    chat_conv_retarget(&st->conv, &next->tpl, next->tok);
    chat_engine_set_ends(next, st->conv.turn_ends, st->conv.n_turn_ends);
    st->m = next->ss.m;
    st->kv = next->kv;
    st->template_origin = next->tpl.origin;
    chat_state_forget_ids(st);
    st->last.valid = 0;
    char nm[256];
    fprintf(f, "model %s: %s (%s, %d layers, context %d tokens), chat template %s\n",
            model_list_name(cm->list, i, nm, sizeof nm), mf.model, next->c->arch, next->c->n_layer, next->c->n_ctx,
            next->tpl.origin);
    if (!chat_conv_len(&st->conv)) {
        fputs("the conversation is empty; its KV cache is new\n", f);
        return 0;
    }
    sbuf text = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    char msg[600];
    if (chat_conv_prompt(&st->conv, &text, &ids, &n, msg, sizeof msg)) {
        fprintf(f, "the conversation's %zu messages: %s\n", chat_conv_len(&st->conv), msg);
    } else {
        fprintf(f, "the conversation's %zu messages are %zu tokens with this template; the KV cache is rebuilt: "
                   "the next reply prefills them again\n", chat_conv_len(&st->conv), n);
        if (n >= (size_t)next->c->n_ctx)
            fprintf(f, "the conversation no longer fits the context window of %d tokens; /reset starts a new one\n",
                    next->c->n_ctx);
    }
    sbuf_free(&text);
    free(ids);
    return 0;
}
