/*
 * Tokens of a Jinja template (lex.c): text runs, the openers and closers of
 * {{ }} and {% %}, and inside them names, literals and operators. Text
 * tokens already have Hugging Face's whitespace handling applied; comments
 * produce no token. Token text lives in the template's arena.
 */
#ifndef KVLM_TEMPLATE_LEX_H
#define KVLM_TEMPLATE_LEX_H

#include "kvlm.h"
#include "app/template/value.h"

enum tpl_tok_kind {
    TK_EOF,
    TK_TEXT,
    TK_VAR_BEGIN,
    TK_VAR_END,
    TK_BLOCK_BEGIN,
    TK_BLOCK_END,
    TK_NAME,
    TK_STR, /* p/n: the unescaped bytes */
    TK_INT, /* i */
    TK_FLOAT, /* f */
    TK_OP,
};

typedef struct tpl_token {
    int kind;
    const char *p;
    size_t n;
    int line, col;
    long long i;
    double f;
} tpl_token;

typedef struct tpl_tokens {
    tpl_token *v;
    size_t n, cap;
} tpl_tokens;

/* Tokens of src, ending with TK_EOF. 0, or -1 with err naming line and
 * column. */
int tpl_lex(const char *src, size_t n, tpl_arena *a, tpl_tokens *out, kvlm_error *err);

#endif
