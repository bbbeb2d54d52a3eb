/*
 * JSON Schema compiled to a grammar (through GBNF text and gbnf.c), for
 * the subset applications send (docs/structured-output.md lists it):
 * type (one or a list), properties / required / additionalProperties,
 * items / minItems / maxItems, enum, const, pattern, minLength /
 * maxLength, format (date, time, date-time, uuid), minimum / maximum /
 * exclusiveMinimum / exclusiveMaximum, anyOf, oneOf, allOf of one schema,
 * $ref to #, #/$defs/... and #/definitions/... (recursion allowed);
 * annotations (title, description, examples, default, ...) are ignored.
 * Any other keyword is an error naming it and its JSON pointer.
 *
 * Choices that keep every output valid (the grammar produces a subset of
 * what the schema accepts):
 * - properties come in the schema's order; optional ones may be left out;
 *   an object with "properties" never gets other properties, whatever
 *   additionalProperties says (an object without "properties" is a map:
 *   any keys, values by additionalProperties);
 * - whitespace: at most two of space, tab, newline at each place JSON
 *   allows it; none before the value;
 * - strings never use \u escapes of surrogates (a pair would be one
 *   character to a validator and two to the grammar's length count);
 * - numbers: at most 16 integer digits, 16 fraction digits, 2 exponent
 *   digits; bounds are exact for integers and kept by integer part and
 *   fraction for numbers (no exponent then);
 * - date: February has 28 days (29 would need the year);
 * - oneOf is compiled as anyOf: with overlapping branches a value may match
 *   more than one of them.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar/grammar.h"

#define JS_MAX_DEPTH 64
#define JS_MAX_REFS 256
#define JS_MAX_INT 9999999999999999LL /* 16 digits */

typedef struct js {
    json_t *doc;
    gr_text out;
    kvlm_error *err;
    int next_rule, failed, depth;
    char *ref_names[JS_MAX_REFS];
    int ref_rule[JS_MAX_REFS];
    int n_refs;
} js;

static const char *PRELUDE =
    "ws ::= ([ \\t\\n] [ \\t\\n]?)?\n"
    "jhex ::= [0-9a-fA-F]\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-CefEF] jhex jhex jhex | [dD] [0-7] jhex jhex))\n"
    "jstring ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jint ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "jinteger ::= \"-\"? jint\n"
    "jnumber ::= \"-\"? jint (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?\n"
    "jvalue ::= jobject | jarray | jstring | jnumber | \"true\" | \"false\" | \"null\"\n"
    "jobject ::= \"{\" ws (jstring ws \":\" ws jvalue ws (\",\" ws jstring ws \":\" ws jvalue ws)*)? \"}\"\n"
    "jarray ::= \"[\" ws (jvalue ws (\",\" ws jvalue ws)*)? \"]\"\n"
    "jdate ::= [0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
    "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))\n"
    "jtime ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
    "(\"Z\" | [-+] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "juuid ::= jhex{8} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{4} \"-\" jhex{12}\n";

static int js_fail(js *j, int code, const char *ptr, const char *fmt, const char *a) {
    if (!j->failed) {
        char msg[400];
        snprintf(msg, sizeof msg, fmt, a);
        kvlm_error_set(j->err, code, "json schema: %s at %s", msg, *ptr ? ptr : "the root");
    }
    j->failed = 1;
    return -1;
}

static void child_ptr(char *out, size_t cap, const char *ptr, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", ptr, a, b ? "/" : "", b ? b : "");
}

static int gen(js *j, json_t *s, const char *ptr);

/* The JSON text of v, compact, as a GBNF literal. */
static int emit_json_literal(js *j, gr_text *t, json_t *v, const char *ptr) {
    char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!d) return js_fail(j, KVLM_ERR_NOMEM, ptr, "%s", "out of memory");
    gr_text_literal(t, d, strlen(d));
    free(d);
    return 0;
}

/* Non-negative integers lo..hi with the same number of digits. */
static void same_len(gr_text *t, const char *lo, const char *hi, size_t n) {
    if (n == 0) return;
    if (lo[0] == hi[0]) {
        gr_text_printf(t, "\"%c\" ", lo[0]);
        same_len(t, lo + 1, hi + 1, n - 1);
        return;
    }
    int lo_zero = 1, hi_nine = 1;
    for (size_t i = 1; i < n; i++) {
        if (lo[i] != '0') lo_zero = 0;
        if (hi[i] != '9') hi_nine = 0;
    }
    if (lo_zero && hi_nine) {
        gr_text_printf(t, "[%c-%c]", lo[0], hi[0]);
        if (n > 1) gr_text_printf(t, " [0-9]{%zu}", n - 1);
        gr_text_add(t, " ", 1);
        return;
    }
    char nines[20], zeros[20];
    memset(nines, '9', n);
    memset(zeros, '0', n);
    gr_text_add(t, "(", 1);
    gr_text_printf(t, "\"%c\" (", lo[0]);
    same_len(t, lo + 1, nines, n - 1);
    gr_text_add(t, ")", 1);
    if (hi[0] - lo[0] > 1) {
        gr_text_printf(t, " | [%c-%c]", lo[0] + 1, hi[0] - 1);
        if (n > 1) gr_text_printf(t, " [0-9]{%zu}", n - 1);
    }
    gr_text_printf(t, " | \"%c\" (", hi[0]);
    same_len(t, zeros, hi + 1, n - 1);
    gr_text_add(t, ")) ", 3);
}

/* Non-negative integers lo..hi (lo <= hi) without leading zeros. */
static void uint_range(gr_text *t, long long lo, long long hi) {
    gr_text_add(t, "(", 1);
    int first = 1;
    long long p = 1;
    for (int d = 1; d <= 17 && lo <= hi; d++, p *= 10) {
        long long top = p * 10 - 1;
        if (lo > top) continue;
        long long a = lo, b = hi < top ? hi : top;
        char sa[24], sb[24];
        snprintf(sa, sizeof sa, "%lld", a);
        snprintf(sb, sizeof sb, "%lld", b);
        if (!first) gr_text_add(t, " | ", 3);
        first = 0;
        gr_text_add(t, "(", 1);
        same_len(t, sa, sb, strlen(sa));
        gr_text_add(t, ")", 1);
        lo = b + 1;
    }
    gr_text_add(t, ")", 1);
}

/* Integers lo..hi (lo <= hi), negative ones with "-". */
static void int_range(gr_text *t, long long lo, long long hi) {
    gr_text_add(t, "(", 1);
    int any = 0;
    if (hi >= 0) {
        uint_range(t, lo > 0 ? lo : 0, hi);
        any = 1;
    }
    if (lo < 0) {
        if (any) gr_text_add(t, " | ", 3);
        gr_text_add(t, "\"-\" ", 4);
        uint_range(t, hi < 0 ? -hi : 1, -lo);
    }
    gr_text_add(t, ")", 1);
}

static int bound(js *j, json_t *s, const char *key, double *v, const char *ptr) {
    json_t *b = json_object_get(s, key);
    if (!b) return 0;
    if (!json_is_number(b)) return js_fail(j, KVLM_ERR_ARG, ptr, "\"%s\" must be a number", key);
    *v = json_number_value(b);
    if (fabs(*v) > (double)JS_MAX_INT) return js_fail(j, KVLM_ERR_ARG, ptr, "\"%s\" beyond 16 digits is not supported", key);
    return 1;
}

static int gen_numeric(js *j, json_t *s, gr_text *t, int integer, const char *ptr) {
    double mn = 0, mx = 0, xmn = 0, xmx = 0;
    int a = bound(j, s, "minimum", &mn, ptr), b = bound(j, s, "maximum", &mx, ptr);
    int c = bound(j, s, "exclusiveMinimum", &xmn, ptr), d = bound(j, s, "exclusiveMaximum", &xmx, ptr);
    if (a < 0 || b < 0 || c < 0 || d < 0) return -1;
    if (!a && !b && !c && !d) {
        gr_text_add(t, integer ? "jinteger" : "jnumber", integer ? 8 : 7);
        return 0;
    }
    long long lo = -JS_MAX_INT, hi = JS_MAX_INT;
    if (a) lo = (long long)ceil(mn);
    if (c && (long long)floor(xmn) + 1 > lo) lo = (long long)floor(xmn) + 1;
    if (b) hi = (long long)floor(mx);
    if (d && (long long)ceil(xmx) - 1 < hi) hi = (long long)ceil(xmx) - 1;
    if (lo > hi) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "the bounds leave no integer (fractions alone are not supported)");
    gr_text_add(t, "(", 1);
    int_range(t, lo, hi);
    if (!integer) {
        /* k.f (f a fraction of 1 to 16 digits) lies in [k, k + 1): the bounds
         * hold for all such f when they hold for k and k + 1 */
        long long pa = 0, pb = JS_MAX_INT, na = 0, nb = JS_MAX_INT;
        if (a) pa = (long long)ceil(mn) > pa ? (long long)ceil(mn) : pa;
        if (c) pa = (long long)floor(xmn) + 1 > pa ? (long long)floor(xmn) + 1 : pa;
        if (b) pb = (long long)floor(mx) - 1 < pb ? (long long)floor(mx) - 1 : pb;
        if (d) pb = (long long)floor(xmx) - 1 < pb ? (long long)floor(xmx) - 1 : pb;
        if (b) na = (long long)ceil(-mx) > na ? (long long)ceil(-mx) : na;
        if (d) na = (long long)floor(-xmx) + 1 > na ? (long long)floor(-xmx) + 1 : na;
        if (a) nb = (long long)floor(-mn) - 1 < nb ? (long long)floor(-mn) - 1 : nb;
        if (c) nb = (long long)floor(-xmn) - 1 < nb ? (long long)floor(-xmn) - 1 : nb;
        if (pa <= pb) { /* k.f, k >= 0 */
            gr_text_add(t, " | ", 3);
            uint_range(t, pa, pb);
            gr_text_add(t, " \".\" [0-9]{1,16}", 16);
        }
        if (na <= nb) { /* -(k.f), k >= 0 */
            gr_text_add(t, " | \"-\" ", 7);
            uint_range(t, na, nb);
            gr_text_add(t, " \".\" [0-9]{1,16}", 16);
        }
    }
    gr_text_add(t, ")", 1);
    return 0;
}

static int get_count(js *j, json_t *s, const char *key, long *v, const char *ptr) {
    json_t *x = json_object_get(s, key);
    if (!x) return 0;
    if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > 10000)
        return js_fail(j, KVLM_ERR_ARG, ptr, "\"%s\" must be an integer from 0 to 10000", key);
    *v = (long)json_integer_value(x);
    return 1;
}

static int gen_string(js *j, json_t *s, gr_text *t, const char *ptr) {
    json_t *fmt = json_object_get(s, "format"), *pat = json_object_get(s, "pattern");
    long mn = 0, mx = -1;
    int a = get_count(j, s, "minLength", &mn, ptr), b = get_count(j, s, "maxLength", &mx, ptr);
    if (a < 0 || b < 0) return -1;
    if (b && mx < mn) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "maxLength is below minLength");
    if (fmt) {
        const char *f = json_string_value(fmt);
        const char *rule = !f ? NULL : !strcmp(f, "date") ? "jdate" : !strcmp(f, "time") ? "jtime"
                         : !strcmp(f, "date-time") ? "jdate \"T\" jtime" : !strcmp(f, "uuid") ? "juuid" : NULL;
        if (!rule) return js_fail(j, KVLM_ERR_UNSUPPORTED, ptr, "unsupported format \"%s\"", f ? f : "(not a string)");
        if (pat || a || b) return js_fail(j, KVLM_ERR_UNSUPPORTED, ptr, "%s", "format with pattern or lengths");
        gr_text_printf(t, "\"\\\"\" %s \"\\\"\"", rule);
        return 0;
    }
    if (pat) {
        const char *p = json_string_value(pat);
        if (!p) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "\"pattern\" must be a string");
        if (a || b) return js_fail(j, KVLM_ERR_UNSUPPORTED, ptr, "%s", "pattern with minLength or maxLength");
        size_t n = strlen(p);
        int anchored_start = n > 0 && p[0] == '^';
        int anchored_end = n > 0 && p[n - 1] == '$' && (n < 2 || p[n - 2] != '\\');
        gr_text_add(t, "\"\\\"\" ", 5);
        if (!anchored_start) gr_text_add(t, "jchar* ", 7);
        if (gr_regex_to_gbnf(p, n, 1, t, j->err)) {
            char msg[200];
            snprintf(msg, sizeof msg, "%.190s", j->err->msg);
            return js_fail(j, KVLM_ERR_ARG, ptr, "pattern: %s", msg);
        }
        if (!anchored_end) gr_text_add(t, " jchar*", 7);
        gr_text_add(t, " \"\\\"\"", 5);
        return 0;
    }
    if (!a && !b) gr_text_add(t, "jstring", 7);
    else if (b) gr_text_printf(t, "\"\\\"\" jchar{%ld,%ld} \"\\\"\"", mn, mx);
    else gr_text_printf(t, "\"\\\"\" jchar{%ld,} \"\\\"\"", mn);
    return 0;
}

static int gen_array(js *j, json_t *s, gr_text *t, const char *ptr) {
    long mn = 0, mx = -1;
    int a = get_count(j, s, "minItems", &mn, ptr), b = get_count(j, s, "maxItems", &mx, ptr);
    if (a < 0 || b < 0) return -1;
    if (b && mx < mn) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "maxItems is below minItems");
    json_t *items = json_object_get(s, "items");
    char item[32] = "jvalue", cp[1100];
    if (items) {
        child_ptr(cp, sizeof cp, ptr, "items", NULL);
        int r = gen(j, items, cp);
        if (r < 0) return -1;
        snprintf(item, sizeof item, "s%d", r);
    }
    if (b && mx == 0) {
        gr_text_add(t, "\"[\" ws \"]\"", 10);
        return 0;
    }
    gr_text_add(t, "\"[\" ws ", 7);
    if (mn == 0) gr_text_add(t, "(", 1);
    gr_text_printf(t, "%s ws (\",\" ws %s ws)", item, item);
    long rlo = mn > 0 ? mn - 1 : 0;
    if (b) gr_text_printf(t, "{%ld,%ld}", rlo, mx - 1);
    else gr_text_printf(t, "{%ld,}", rlo);
    if (mn == 0) gr_text_add(t, ")?", 2);
    gr_text_add(t, " \"]\"", 4);
    return 0;
}

static int gen_object(js *j, json_t *s, gr_text *t, const char *ptr) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *add = json_object_get(s, "additionalProperties");
    char cp[1100];
    if (props && !json_is_object(props)) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "\"properties\" must be an object");
    if (req && !json_is_array(req)) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "\"required\" must be an array");
    if (add && !json_is_boolean(add) && !json_is_object(add))
        return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "\"additionalProperties\" must be a boolean or a schema");
    size_t nreq = req ? json_array_size(req) : 0;
    for (size_t i = 0; i < nreq; i++)
        if (!json_is_string(json_array_get(req, i)))
            return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "\"required\" must hold strings");
    if (!props || json_object_size(props) == 0) {
        if (nreq == 0) {
            if (add && json_is_false(add)) gr_text_add(t, "\"{\" ws \"}\"", 10);
            else if (!add || json_is_true(add)) gr_text_add(t, "jobject", 7);
            else {
                child_ptr(cp, sizeof cp, ptr, "additionalProperties", NULL);
                int r = gen(j, add, cp);
                if (r < 0) return -1;
                gr_text_printf(t, "\"{\" ws (jstring ws \":\" ws s%d ws (\",\" ws jstring ws \":\" ws s%d ws)*)? \"}\"", r, r);
            }
            return 0;
        }
    }
    /* members in order: names, their value rules, required flags */
    size_t np = props ? json_object_size(props) : 0, n = 0;
    const char **names = calloc(np + nreq + 1, sizeof *names);
    int *rules = calloc(np + nreq + 1, sizeof *rules), *required = calloc(np + nreq + 1, sizeof *required);
    if (!names || !rules || !required) {
        free(names);
        free(rules);
        free(required);
        return js_fail(j, KVLM_ERR_NOMEM, ptr, "%s", "out of memory");
    }
    int rc = 0;
    const char *key;
    json_t *v;
    if (props) json_object_foreach(props, key, v) {
        child_ptr(cp, sizeof cp, ptr, "properties", key);
        int r = gen(j, v, cp);
        if (r < 0) { rc = -1; break; }
        names[n] = key;
        rules[n] = r;
        n++;
    }
    for (size_t i = 0; i < nreq && !rc; i++) {
        const char *name = json_string_value(json_array_get(req, i));
        size_t k = 0;
        while (k < n && strcmp(names[k], name)) k++;
        if (k == n) { /* required but not described: any value */
            names[n] = name;
            rules[n] = -1;
            n++;
        }
        required[k] = 1;
    }
    if (!rc) {
        /* R_i: members i.. after one was written; S_i: before any was */
        int base = j->next_rule;
        j->next_rule += 2 * (int)n + 2;
        gr_text defs = {0};
        for (size_t i = 0; i <= n; i++) {
            int R = base + 2 * (int)i, S = R + 1;
            if (i == n) {
                gr_text_printf(&defs, "s%d ::= \"\"\ns%d ::= \"\"\n", R, S);
                break;
            }
            gr_text kv = {0};
            json_t *ks = json_string(names[i]);
            char *kj = ks ? json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
            json_decref(ks);
            if (!kj) { rc = js_fail(j, KVLM_ERR_NOMEM, ptr, "%s", "out of memory"); free(defs.s); break; }
            gr_text_literal(&kv, kj, strlen(kj));
            free(kj);
            if (rules[i] >= 0) gr_text_printf(&kv, " ws \":\" ws s%d ws", rules[i]);
            else gr_text_add(&kv, " ws \":\" ws jvalue ws", 20);
            if (required[i]) {
                gr_text_printf(&defs, "s%d ::= \",\" ws %s s%d\n", R, kv.s, R + 2);
                gr_text_printf(&defs, "s%d ::= %s s%d\n", S, kv.s, R + 2);
            } else {
                gr_text_printf(&defs, "s%d ::= \",\" ws %s s%d | s%d\n", R, kv.s, R + 2, R + 2);
                gr_text_printf(&defs, "s%d ::= %s s%d | s%d\n", S, kv.s, R + 2, S + 2);
            }
            if (kv.oom) defs.oom = 1;
            free(kv.s);
        }
        if (!rc) {
            if (defs.oom) rc = js_fail(j, KVLM_ERR_NOMEM, ptr, "%s", "out of memory");
            else gr_text_add(&j->out, defs.s, defs.n);
            gr_text_printf(t, "\"{\" ws s%d \"}\"", base + 1);
        }
        free(defs.s);
    }
    free(names);
    free(rules);
    free(required);
    return rc;
}

static const char *const KNOWN[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
    "pattern", "minLength", "maxLength", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "title", "description", "$schema", "$id", "$comment",
    "examples", "default", "deprecated", "readOnly", "writeOnly", NULL};

static int resolve_ref(js *j, const char *ref, const char *ptr) {
    for (int i = 0; i < j->n_refs; i++)
        if (!strcmp(j->ref_names[i], ref)) return j->ref_rule[i];
    json_t *target = NULL;
    char tp[1100];
    if (!strcmp(ref, "#")) {
        target = j->doc;
        tp[0] = 0;
    } else {
        const char *name = NULL, *dir = NULL;
        if (!strncmp(ref, "#/$defs/", 8)) { dir = "$defs"; name = ref + 8; }
        else if (!strncmp(ref, "#/definitions/", 14)) { dir = "definitions"; name = ref + 14; }
        char dec[512];
        size_t k = 0;
        for (const char *p = name; p && *p && k + 1 < sizeof dec; p++) {
            if (*p == '/') { name = NULL; break; }
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) { dec[k++] = p[1] == '0' ? '~' : '/'; p++; }
            else dec[k++] = *p;
        }
        dec[k] = 0;
        if (name && dir) target = json_object_get(json_object_get(j->doc, dir), dec);
        if (!target) return js_fail(j, KVLM_ERR_UNSUPPORTED, ptr,
                                    "$ref \"%s\" does not name # or an entry of #/$defs or #/definitions", ref);
        snprintf(tp, sizeof tp, "/%s/%s", dir, name);
    }
    if (j->n_refs == JS_MAX_REFS) return js_fail(j, KVLM_ERR_UNSUPPORTED, ptr, "%s", "more than 256 distinct $ref targets");
    char *copy = strdup(ref);
    if (!copy) return js_fail(j, KVLM_ERR_NOMEM, ptr, "%s", "out of memory");
    int rule = j->next_rule++;
    j->ref_names[j->n_refs] = copy;
    j->ref_rule[j->n_refs++] = rule;
    int r = gen(j, target, tp);
    if (r < 0) return -1;
    gr_text_printf(&j->out, "s%d ::= s%d\n", rule, r);
    return rule;
}

static int gen_type(js *j, json_t *s, const char *type, gr_text *t, const char *ptr) {
    if (!strcmp(type, "string")) return gen_string(j, s, t, ptr);
    if (!strcmp(type, "integer")) return gen_numeric(j, s, t, 1, ptr);
    if (!strcmp(type, "number")) return gen_numeric(j, s, t, 0, ptr);
    if (!strcmp(type, "boolean")) { gr_text_add(t, "(\"true\" | \"false\")", 18); return 0; }
    if (!strcmp(type, "null")) { gr_text_add(t, "\"null\"", 6); return 0; }
    if (!strcmp(type, "object")) return gen_object(j, s, t, ptr);
    if (!strcmp(type, "array")) return gen_array(j, s, t, ptr);
    return js_fail(j, KVLM_ERR_ARG, ptr, "unknown type \"%s\"", type);
}

static int gen_body(js *j, json_t *s, gr_text *t, const char *ptr) {
    char cp[1100];
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        int ok = 0;
        for (int i = 0; KNOWN[i] && !ok; i++) ok = !strcmp(KNOWN[i], key);
        if (!ok) return js_fail(j, KVLM_ERR_UNSUPPORTED, ptr, "unsupported keyword \"%s\"", key);
    }
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "\"$ref\" must be a string");
        int r = resolve_ref(j, json_string_value(ref), ptr);
        if (r < 0) return -1;
        gr_text_printf(t, "s%d", r);
        return 0;
    }
    json_t *cst = json_object_get(s, "const"), *en = json_object_get(s, "enum");
    if (cst) return emit_json_literal(j, t, cst, ptr);
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0)
            return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "\"enum\" must be a non-empty array");
        gr_text_add(t, "(", 1);
        for (size_t i = 0; i < json_array_size(en); i++) {
            if (i) gr_text_add(t, " | ", 3);
            if (emit_json_literal(j, t, json_array_get(en, i), ptr)) return -1;
        }
        gr_text_add(t, ")", 1);
        return 0;
    }
    static const char *const combos[] = {"anyOf", "oneOf", "allOf"};
    for (int c = 0; c < 3; c++) {
        json_t *list = json_object_get(s, combos[c]);
        if (!list) continue;
        if (!json_is_array(list) || json_array_size(list) == 0)
            return js_fail(j, KVLM_ERR_ARG, ptr, "\"%s\" must be a non-empty array", combos[c]);
        if (c == 2 && json_array_size(list) > 1)
            return js_fail(j, KVLM_ERR_UNSUPPORTED, ptr, "%s", "allOf with more than one schema");
        gr_text_add(t, "(", 1);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            child_ptr(cp, sizeof cp, ptr, combos[c], idx);
            int r = gen(j, json_array_get(list, i), cp);
            if (r < 0) return -1;
            gr_text_printf(t, "%ss%d", i ? " | " : "", r);
        }
        gr_text_add(t, ")", 1);
        return 0;
    }
    json_t *type = json_object_get(s, "type");
    if (!type) {
        const char *inferred = NULL;
        if (json_object_get(s, "properties") || json_object_get(s, "required") || json_object_get(s, "additionalProperties"))
            inferred = "object";
        else if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
            inferred = "array";
        else if (json_object_get(s, "pattern") || json_object_get(s, "minLength") || json_object_get(s, "maxLength") ||
                 json_object_get(s, "format"))
            inferred = "string";
        else if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
                 json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum"))
            inferred = "number";
        if (!inferred) {
            gr_text_add(t, "jvalue", 6);
            return 0;
        }
        return gen_type(j, s, inferred, t, ptr);
    }
    if (json_is_string(type)) return gen_type(j, s, json_string_value(type), t, ptr);
    if (!json_is_array(type) || json_array_size(type) == 0)
        return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "\"type\" must be a string or a non-empty array of strings");
    gr_text_add(t, "(", 1);
    for (size_t i = 0; i < json_array_size(type); i++) {
        const char *ty = json_string_value(json_array_get(type, i));
        if (!ty) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "\"type\" must be a string or a non-empty array of strings");
        if (i) gr_text_add(t, " | ", 3);
        gr_text_add(t, "(", 1);
        if (gen_type(j, s, ty, t, ptr)) return -1;
        gr_text_add(t, ")", 1);
    }
    gr_text_add(t, ")", 1);
    return 0;
}

/* Writes a rule for schema s; returns its number (rule "s<n>") or -1. */
static int gen(js *j, json_t *s, const char *ptr) {
    if (j->failed) return -1;
    if (json_is_true(s)) s = NULL;
    else if (json_is_false(s)) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "the schema false accepts nothing");
    else if (!json_is_object(s)) return js_fail(j, KVLM_ERR_ARG, ptr, "%s", "a schema must be an object or a boolean");
    if (++j->depth > JS_MAX_DEPTH) return js_fail(j, KVLM_ERR_UNSUPPORTED, ptr, "%s", "schema nested more than 64 deep");
    int rule = j->next_rule++;
    gr_text body = {0};
    int rc = s ? gen_body(j, s, &body, ptr) : (gr_text_add(&body, "jvalue", 6), 0);
    j->depth--;
    if (!rc) {
        if (body.oom) rc = js_fail(j, KVLM_ERR_NOMEM, ptr, "%s", "out of memory");
        else gr_text_printf(&j->out, "s%d ::= ", rule), gr_text_add(&j->out, body.s, body.n), gr_text_add(&j->out, "\n", 1);
    }
    free(body.s);
    return rc ? -1 : rule;
}

/* The GBNF text for a schema (for tests and debugging): malloc'ed. */
char *gr_json_schema_gbnf(const char *schema_json, size_t len, kvlm_error *err);

char *gr_json_schema_gbnf(const char *schema_json, size_t len, kvlm_error *err) {
    json_error_t je;
    json_t *doc = schema_json ? json_loadb(schema_json, len, JSON_DECODE_ANY, &je) : NULL;
    if (!doc) {
        kvlm_error_set(err, KVLM_ERR_ARG, "json schema: not valid JSON (line %d column %d: %s)", schema_json ? je.line : 0,
                       schema_json ? je.column : 0, schema_json ? je.text : "no text");
        return NULL;
    }
    js j = {.doc = doc, .err = err};
    gr_text_add(&j.out, PRELUDE, strlen(PRELUDE));
    int r = gen(&j, doc, "");
    if (r >= 0) gr_text_printf(&j.out, "root ::= s%d\n", r);
    for (int i = 0; i < j.n_refs; i++) free(j.ref_names[i]);
    json_decref(doc);
    if (r < 0 || j.out.oom) {
        if (r >= 0) kvlm_error_set(err, KVLM_ERR_NOMEM, "json schema: out of memory");
        free(j.out.s);
        return NULL;
    }
    return j.out.s;
}

kvlm_grammar *kvlm_grammar_from_json_schema(const char *schema_json, size_t len, kvlm_error *err) {
    char *text = gr_json_schema_gbnf(schema_json, len, err);
    if (!text) return NULL;
    kvlm_grammar *g = gr_parse_gbnf(text, strlen(text), "json schema", err);
    free(text);
    return g;
}

kvlm_grammar *kvlm_grammar_json_object(kvlm_error *err) {
    gr_text t = {0};
    gr_text_add(&t, PRELUDE, strlen(PRELUDE));
    gr_text_add(&t, "root ::= jobject\n", 17);
    if (t.oom) {
        free(t.s);
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    kvlm_grammar *g = gr_parse_gbnf(t.s, t.n, "json object", err);
    free(t.s);
    return g;
}
