/*
 * Values of the Jinja interpreter (src/app/template/): the Python objects a chat
 * template sees (None, bool, int, float, str, list/tuple, dict, namespace,
 * macros and built-in functions) plus jinja2's Undefined, and the arena that
 * owns them.
 *
 * Invariants: every value, string and container made while rendering lives
 * in one arena (tpl_arena) freed at once when the render ends; the arena
 * refuses to grow past its byte limit (a clear error, never an abort).
 * Strings are UTF-8 byte ranges (not NUL-terminated). Lists are immutable
 * once built (templates run in jinja2's immutable sandbox); dicts keep
 * insertion order and are mutable only while being built and as namespaces.
 * This file does not parse or evaluate templates (parse.c, eval.c).
 */
#ifndef KVLM_TEMPLATE_VALUE_H
#define KVLM_TEMPLATE_VALUE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum tv_kind {
    TV_UNDEF = 0, /* jinja2 Undefined: prints empty, falsy, iterates empty */
    TV_NONE,
    TV_BOOL,
    TV_INT,
    TV_FLOAT,
    TV_STR,
    TV_LIST, /* list or tuple (tv_list.tuple) */
    TV_DICT,
    TV_NS,    /* namespace(): a dict whose attributes `set ns.x` may assign */
    TV_MACRO, /* a {% macro %} (tv.macro points at its node) */
    TV_FUNC,  /* a built-in global function (tv.i is its id) */
} tv_kind;

typedef struct tv_list tv_list;
typedef struct tv_dict tv_dict;

typedef struct tv {
    uint8_t k;
    uint8_t safe; /* TV_STR: a markupsafe Markup (made by |safe); see eval.c '+' */
    union {
        int b;
        long long i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        tv_list *l;
        tv_dict *d;
        const void *macro;
    };
    /* For TV_UNDEF: the name or attribute that was missing (for messages),
     * and whether it came from a missing attribute of a defined object. */
    const char *why;
} tv;

struct tv_list {
    size_t n;
    int tuple;
    tv *v;
};

struct tv_dict {
    size_t n, cap;
    tv *key, *val;
};

/* ------------------------------------------------------------------ arena */

typedef struct tpl_arena {
    struct tpl_chunk *head;
    size_t used, limit; /* bytes handed out; 0 limit: unlimited */
    int exhausted;      /* set when an allocation was refused */
} tpl_arena;

/* Zeroed memory from the arena, or NULL when the limit is reached or malloc
 * fails (a->exhausted set). */
void *tpl_alloc(tpl_arena *a, size_t n);
void tpl_arena_free(tpl_arena *a);

/* -------------------------------------------------------------- makers */

/* memcpy for values that may be empty: an empty string, list or dict may
 * have no storage (a NULL pointer), which memcpy must not be given. */
static inline void tpl_copy(void *dst, const void *src, size_t n) {
    if (n) memcpy(dst, src, n);
}

static inline tv tv_undef(const char *why) { return (tv){.k = TV_UNDEF, .why = why}; }
static inline tv tv_none(void) { return (tv){.k = TV_NONE}; }
static inline tv tv_bool(int b) { return (tv){.k = TV_BOOL, .b = !!b}; }
static inline tv tv_int(long long i) { return (tv){.k = TV_INT, .i = i}; }
static inline tv tv_float(double f) { return (tv){.k = TV_FLOAT, .f = f}; }
static inline tv tv_strn(const char *p, size_t n) { return (tv){.k = TV_STR, .s = {p, n}}; }
/* A copy of n bytes in the arena (k = TV_UNDEF with why=NULL on failure). */
tv tv_str_copy(tpl_arena *a, const char *p, size_t n);
tv tv_cstr(const char *s);
tv tv_list_new(tpl_arena *a, size_t n, int tuple);   /* n zero (Undefined) items */
tv tv_dict_new(tpl_arena *a, size_t cap);
/* Sets key (a string) in a dict or namespace: replaces or appends. -1 when
 * out of memory. */
int tv_dict_set(tpl_arena *a, tv_dict *d, tv key, tv val);
/* The value under key, or NULL. */
tv *tv_dict_get(const tv_dict *d, tv key);
tv *tv_dict_gets(const tv_dict *d, const char *key);

/* ------------------------------------------------------------ semantics */

/* Python truthiness (Undefined is false). */
int tv_truthy(tv v);
/* Python ==, with 1 == 1.0 == True (lists and dicts nested deeper than
 * TV_MAX_NESTING compare unequal). */
int tv_equal(tv a, tv b);
/* Python ordering for numbers, strings and lists of them: sets *cmp to <0,
 * 0, >0; returns -1 when the two cannot be ordered (or nest too deep). */
int tv_compare(tv a, tv b, int *cmp);
/* Number of code points of a UTF-8 string. */
size_t tv_utf8_len(const char *p, size_t n);
/* jinja2-style name of a value's type: "str", "list", "dict object"... */
const char *tv_type_name(tv v);

/* ----------------------------------------------------- growing byte text */

typedef struct tpl_buf {
    char *p;
    size_t n, cap, limit; /* limit: 0 unlimited */
    int over;             /* a write would have passed limit, or malloc failed */
} tpl_buf;

void tpl_buf_add(tpl_buf *b, const char *p, size_t n);
void tpl_buf_adds(tpl_buf *b, const char *s);
void tpl_buf_addc(tpl_buf *b, char c);
void tpl_buf_free(tpl_buf *b);

/* Python str(v) appended to b: "None", "True", 1.5, "[1, 'a']", "{'k': 2}";
 * Undefined appends nothing; a container inside itself prints as "[...]"
 * or "{...}". -1 (b holds a partial text) for lists and dicts nested
 * deeper than TV_MAX_NESTING (value.c). */
int tv_str_of(tpl_buf *b, tv v);
#define TV_TOO_DEEP "lists or dicts nested too deeply to print"
/* Python's repr of a float (shortest round-trip, "1.0", "1e+16", "inf"). */
void tv_float_repr(tpl_buf *b, double f);

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys) as
 * transformers' tojson filter does (ensure_ascii defaults to false there).
 * indent: NULL for none, else the string each level adds. item_sep/key_sep
 * NULL for Python's defaults. Returns 0, or -1 with the name of the
 * unserialisable type in *bad. */
int tv_to_json(tpl_buf *b, tv v, const char *indent, const char *item_sep, const char *key_sep, int sort_keys,
               int ensure_ascii, const char **bad);

#endif
