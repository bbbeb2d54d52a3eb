/*
 * The tool-call parser (see tool_calls.h): a byte-at-a-time state machine.
 *
 * In text, bytes wait in `hold` while they may begin a marker (or, at the
 * very start in the llama3 family, a bare JSON call), or are whitespace
 * that may turn out to border a call; everything else is released as
 * content. A marker opens a call region; `raw` keeps the region's bytes
 * until a call's name is known (the call is then "committed" and its
 * header sent), so a region that is not a call can be given back as
 * content. A call object is scanned without building it: depth, strings
 * and escapes, and at depth 1 which key each value belongs to; the name's
 * JSON string is decoded with jansson, the arguments are kept as the
 * model's text. Nothing here knows about HTTP or OpenAI's shapes.
 */
#include "app/tool_calls.h"

#include "app/harmony.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NAME 256   /* bytes of a function name */
#define MAX_ID 64      /* bytes of a [CALL_ID] */
#define MAX_WS 4096    /* whitespace held between a call and what follows */

enum {
    S_TEXT,
    S_OBJ_WAIT,     /* after a marker: whitespace, then the '{' of a call */
    S_OBJ,          /* inside a call object */
    S_CLOSE,        /* hermes: whitespace, then </tool_call> */
    S_BETWEEN,      /* llama3: whitespace or ';' before another call */
    S_M_OPEN,       /* after [TOOL_CALLS]: '[' or a name */
    S_ARR_WAIT,     /* '{' of the next element of a call list */
    S_ARR_NEXT,     /* ',' or ']' after an element */
    S_M_NAME,       /* a name before [ARGS] */
    S_M_TAG,        /* [ARGS] or [CALL_ID] */
    S_M_CALLID,     /* an id, up to [ARGS] */
    S_ARGS_WAIT,    /* the '{' of arguments after [ARGS] */
    S_ARGS,         /* inside those arguments */
};

/* phases of a call object at depth 1 */
enum { PH_KEY0, PH_KEY, PH_KEYSTR, PH_COLON, PH_VALUE, PH_STR, PH_PRIM, PH_AFTER };
enum { VK_OTHER, VK_NAME, VK_ARGS };

static const char HERMES_OPEN[] = "<tool_call>", HERMES_CLOSE[] = "</tool_call>";
static const char PYTHON_TAG[] = "<|python_tag|>", MISTRAL_OPEN[] = "[TOOL_CALLS]";

struct tc_parser {
    tc_family family;
    int state, after;       /* after: the state that follows a call object */
    sbuf hold, raw;
    size_t hold_ws;         /* leading whitespace bytes of hold (hold is whitespace, then
                               at most a marker's prefix) */
    int committed;          /* the current call's header was sent */
    int n_calls, saw_text, bare;
    int trim;               /* whitespace right after a call is dropped */
    /* the call object being scanned */
    int depth, in_str, esc, phase, vkind, tentative, n_keys, args_seen;
    char key[16];
    size_t key_len;
    sbuf name_raw, args;
    size_t args_sent;
    char tag[16];
    size_t tag_len, close_at;
    /* events not yet delivered, and where they go */
    sbuf out_content, out_args;
    int out_args_index;
    tc_emit_fn emit;
    void *user;
    int oom;
    hm_parser *hm;          /* the harmony family: its own parser does the work */
};

static const char *const family_names[] = {"generic", "hermes", "llama3", "mistral", "harmony"};

tc_family tc_family_detect(const char *src) {
    if (!src) return TC_FAMILY_GENERIC;
    if (hm_template_is_harmony(src)) return TC_FAMILY_HARMONY;
    if (strstr(src, MISTRAL_OPEN)) return TC_FAMILY_MISTRAL;
    if (strstr(src, HERMES_OPEN)) return TC_FAMILY_HERMES;
    if (strstr(src, PYTHON_TAG) || (strstr(src, "<|start_header_id|>") && strstr(src, "\"parameters\"")))
        return TC_FAMILY_LLAMA3;
    return TC_FAMILY_GENERIC;
}

int tc_is_marker(const char *s, size_t n) {
    static const char *const all[] = {HERMES_OPEN, HERMES_CLOSE, PYTHON_TAG, MISTRAL_OPEN, "[ARGS]", "[CALL_ID]"};
    for (size_t i = 0; s && i < sizeof all / sizeof *all; i++)
        if (strlen(all[i]) == n && !memcmp(s, all[i], n)) return 1;
    return 0;
}

const char *tc_family_name(tc_family f) {
    return (unsigned)f < sizeof family_names / sizeof *family_names ? family_names[f] : "generic";
}

tc_syntax tc_family_syntax(tc_family f) {
    switch (f) {
    case TC_FAMILY_HERMES: return (tc_syntax){"<tool_call>\n", "\n</tool_call>", "arguments"};
    case TC_FAMILY_LLAMA3: return (tc_syntax){"", "", "parameters"};
    case TC_FAMILY_MISTRAL: return (tc_syntax){"[TOOL_CALLS][", "]", "arguments"};
    default: return (tc_syntax){"", "", "arguments"};
    }
}

static int is_ws(int c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
static int is_name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

/* The markers a family reads in text. */
static int markers(const tc_parser *p, const char *out[3]) {
    int n = 0;
    if (p->family == TC_FAMILY_GENERIC || p->family == TC_FAMILY_HERMES) out[n++] = HERMES_OPEN;
    if (p->family == TC_FAMILY_GENERIC || p->family == TC_FAMILY_MISTRAL) out[n++] = MISTRAL_OPEN;
    if (p->family == TC_FAMILY_GENERIC || p->family == TC_FAMILY_LLAMA3) out[n++] = PYTHON_TAG;
    return n;
}

tc_parser *tc_parser_new(tc_family f) {
    tc_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->family = f;
    p->bare = f == TC_FAMILY_GENERIC || f == TC_FAMILY_LLAMA3;
    if (f == TC_FAMILY_HARMONY && !(p->hm = hm_parser_new())) {
        free(p);
        return NULL;
    }
    return p;
}

void tc_parser_free(tc_parser *p) {
    if (!p) return;
    hm_parser_free(p->hm);
    sbuf_free(&p->hold);
    sbuf_free(&p->raw);
    sbuf_free(&p->name_raw);
    sbuf_free(&p->args);
    sbuf_free(&p->out_content);
    sbuf_free(&p->out_args);
    free(p);
}

int tc_parser_calls(const tc_parser *p) { return p->hm ? hm_parser_calls(p->hm) : p->n_calls; }

/* ------------------------------------------------------------- delivery */

static void flush_content(tc_parser *p) {
    if (!p->out_content.len) return;
    tc_event ev = {TC_EV_CONTENT, 0, p->out_content.data, p->out_content.len};
    p->emit(p->user, &ev);
    p->out_content.len = 0;
}

static void flush_args(tc_parser *p) {
    if (!p->out_args.len) return;
    tc_event ev = {TC_EV_ARGS, p->out_args_index, p->out_args.data, p->out_args.len};
    p->emit(p->user, &ev);
    p->out_args.len = 0;
}

static void release(tc_parser *p, const char *s, size_t n) {
    if (!n) return;
    flush_args(p);
    sbuf_add(&p->out_content, s, n);
    p->saw_text = 1;
}

/* Arguments generated since the last sync, once the call is committed. */
static void sync_args(tc_parser *p) {
    if (!p->committed || p->args.len <= p->args_sent) return;
    flush_content(p);
    sbuf_add(&p->out_args, p->args.data + p->args_sent, p->args.len - p->args_sent);
    p->out_args_index = p->n_calls - 1;
    p->args_sent = p->args.len;
}

static void call_begin(tc_parser *p, const char *name, size_t n) {
    flush_content(p);
    flush_args(p);
    tc_event ev = {TC_EV_CALL, p->n_calls, name, n};
    p->emit(p->user, &ev);
    p->n_calls++;
    p->committed = 1;
    p->raw.len = 0;
    sync_args(p);
}

static void call_end(tc_parser *p) {
    if (!p->args.len) sbuf_adds(&p->args, "{}");
    sync_args(p);
    p->committed = 0;
    p->args.len = p->args_sent = 0;
    p->raw.len = 0;
    p->trim = 1;
}

/* -------------------------------------------------------- call objects */

static void obj_start(tc_parser *p, int after, int tentative) {
    p->state = S_OBJ;
    p->after = after;
    p->tentative = tentative;
    p->depth = 1;
    p->in_str = p->esc = 0;
    p->phase = PH_KEY0;
    p->n_keys = p->args_seen = 0;
    p->name_raw.len = 0;
    p->args.len = p->args_sent = 0;
}

static void val_add(tc_parser *p, int c) {
    char ch = (char)c;
    if (p->vkind == VK_NAME) sbuf_add(&p->name_raw, &ch, 1);
    else if (p->vkind == VK_ARGS) sbuf_add(&p->args, &ch, 1);
}

/* A value at depth 1 is complete. -1: the name is not a usable string. */
static int value_end(tc_parser *p) {
    if (p->vkind != VK_NAME) return 0;
    json_t *s = json_loadb(p->name_raw.data ? p->name_raw.data : "", p->name_raw.len, JSON_DECODE_ANY, NULL);
    int ok = json_is_string(s) && json_string_length(s) > 0 && json_string_length(s) <= MAX_NAME &&
             strlen(json_string_value(s)) == json_string_length(s);
    if (ok) call_begin(p, json_string_value(s), json_string_length(s));
    json_decref(s);
    return ok ? 0 : -1;
}

static int key_end(tc_parser *p) {
    static const char *const arg_keys[] = {"\"arguments\"", "\"parameters\""};
    p->key[p->key_len < sizeof p->key ? p->key_len : 0] = 0;
    int is_name = !strcmp(p->key, "\"name\"");
    if (p->tentative && p->n_keys == 0 && !is_name) return -1; /* JSON, but not a call */
    p->n_keys++;
    p->vkind = VK_OTHER;
    if (is_name && !p->committed) p->vkind = VK_NAME;
    for (int i = 0; i < 2; i++)
        if (!strcmp(p->key, arg_keys[i]) && !p->args_seen) p->vkind = VK_ARGS, p->args_seen = 1;
    return 0;
}

/* One byte inside a call object: 0 go on, 1 the object ended, -1 not a call. */
static int obj_byte(tc_parser *p, int c) {
    if (p->depth > 1) { /* inside an object or array value */
        val_add(p, c);
        if (p->in_str) {
            if (p->esc) p->esc = 0;
            else if (c == '\\') p->esc = 1;
            else if (c == '"') p->in_str = 0;
            else if (c < 0x20) return -1;
        } else if (c == '"') p->in_str = 1;
        else if (c == '{' || c == '[') p->depth++;
        else if ((c == '}' || c == ']') && --p->depth == 1) {
            p->phase = PH_AFTER;
            return value_end(p);
        }
        return 0;
    }
    switch (p->phase) {
    case PH_KEY0:
    case PH_KEY:
        if (is_ws(c)) return 0;
        if (c == '}' && p->phase == PH_KEY0) return 1;
        if (c != '"') return -1;
        p->phase = PH_KEYSTR;
        p->key[0] = '"';
        p->key_len = 1;
        p->esc = 0;
        return 0;
    case PH_KEYSTR:
        if (c < 0x20) return -1;
        if (p->key_len < sizeof p->key) p->key[p->key_len] = (char)c;
        p->key_len++;
        if (p->esc) p->esc = 0;
        else if (c == '\\') p->esc = 1;
        else if (c == '"') {
            p->phase = PH_COLON;
            if (p->key_len >= sizeof p->key) p->key_len = 0; /* longer than any key we read */
            return key_end(p);
        }
        return 0;
    case PH_COLON:
        if (is_ws(c)) return 0;
        if (c != ':') return -1;
        p->phase = PH_VALUE;
        return 0;
    case PH_VALUE:
        if (is_ws(c)) return 0;
        if ((p->vkind == VK_ARGS && c != '{') || (p->vkind == VK_NAME && c != '"')) return -1;
        val_add(p, c);
        if (c == '"') p->phase = PH_STR, p->esc = 0;
        else if (c == '{' || c == '[') p->depth = 2, p->in_str = 0;
        else if (strchr("-0123456789tfn", c)) p->phase = PH_PRIM;
        else return -1;
        return 0;
    case PH_STR:
        if (c < 0x20) return -1;
        val_add(p, c);
        if (p->esc) p->esc = 0;
        else if (c == '\\') p->esc = 1;
        else if (c == '"') {
            p->phase = PH_AFTER;
            return value_end(p);
        }
        return 0;
    case PH_PRIM:
        if (is_ws(c) || c == ',' || c == '}') {
            p->phase = c == ',' ? PH_KEY : PH_AFTER;
            if (value_end(p)) return -1;
            return c == '}' ? 1 : 0;
        }
        if (!is_name_char(c) && c != '+') return -1;
        val_add(p, c);
        return 0;
    default: /* PH_AFTER */
        if (is_ws(c)) return 0;
        if (c == ',') p->phase = PH_KEY;
        else if (c == '}') return 1;
        else return -1;
        return 0;
    }
}

/* ---------------------------------------------------------------- text */

static void step(tc_parser *p, int c);

/* The region since the last marker is not a call: its bytes are content. */
static void give_back(tc_parser *p) {
    if (p->committed) call_end(p); /* a call cut short keeps what it had */
    release(p, p->raw.data, p->raw.len);
    p->raw.len = 0;
    p->args.len = p->args_sent = 0;
    p->saw_text = 1;
    p->state = S_TEXT;
}

/* After a call, what follows is not its continuation: read it as text
 * again (it may open the next call). */
static void refeed(tc_parser *p) {
    size_t n = p->raw.len;
    char *copy = n ? malloc(n) : NULL;
    if (n && !copy) {
        p->oom = 1;
        return;
    }
    if (n) memcpy(copy, p->raw.data, n);
    p->raw.len = 0;
    p->state = S_TEXT;
    for (size_t i = 0; i < n; i++) step(p, (unsigned char)copy[i]);
    free(copy);
}

static size_t text_end(const char *s, size_t n) { /* the length without trailing whitespace */
    while (n && is_ws((unsigned char)s[n - 1])) n--;
    return n;
}

/* hold[0..m) without its trailing whitespace, knowing that its first
 * hold_ws bytes are whitespace (so a long run is not scanned again). */
static size_t hold_end(const tc_parser *p, size_t m) {
    while (m > p->hold_ws && is_ws((unsigned char)p->hold.data[m - 1])) m--;
    return m > p->hold_ws ? m : 0;
}

static void text_byte(tc_parser *p, int c) {
    char ch = (char)c;
    if (p->trim && is_ws(c)) return;
    p->trim = 0;
    if (is_ws(c) && p->hold_ws == p->hold.len) p->hold_ws++;
    sbuf_add(&p->hold, &ch, 1);
    const char *h = p->hold.data;
    size_t n = p->hold.len;
    if (c == '{' && p->bare && !p->saw_text && !p->n_calls && p->hold_ws == n - 1) {
        sbuf_add(&p->raw, h, n);
        p->hold.len = p->hold_ws = 0;
        obj_start(p, S_BETWEEN, 1);
        return;
    }
    const char *m[3];
    int nm = markers(p, m);
    size_t keep = 0;
    for (int i = 0; i < nm; i++) {
        size_t ml = strlen(m[i]);
        if (n >= ml && !memcmp(h + n - ml, m[i], ml)) {
            size_t t = hold_end(p, n - ml);
            release(p, h, t);
            sbuf_add(&p->raw, h + t, n - t);
            p->hold.len = p->hold_ws = 0;
            p->state = m[i] == MISTRAL_OPEN ? S_M_OPEN : S_OBJ_WAIT;
            p->after = m[i] == HERMES_OPEN ? S_CLOSE : S_BETWEEN;
            p->close_at = 0;
            return;
        }
        for (size_t k = ml - 1; k > keep; k--) /* the longest suffix that begins this marker */
            if (k <= n && !memcmp(h + n - k, m[i], k)) {
                keep = k;
                break;
            }
    }
    size_t t = hold_end(p, n - keep);
    if (n - keep - t > MAX_WS) t = n - keep; /* a long run of whitespace is plain text */
    release(p, h, t);
    sbuf_consume(&p->hold, t);
    p->hold_ws = n - keep - t; /* what is left: whitespace, then the marker's prefix */
}

static void m_tag(tc_parser *p, int c) {
    static const char args_tag[] = "[ARGS]", id_tag[] = "[CALL_ID]";
    if (p->tag_len + 1 >= sizeof p->tag) return give_back(p);
    p->tag[p->tag_len++] = (char)c;
    p->tag[p->tag_len] = 0;
    if (!strcmp(p->tag, args_tag)) {
        call_begin(p, p->name_raw.data, p->name_raw.len);
        p->state = S_ARGS_WAIT;
    } else if (!strcmp(p->tag, id_tag)) {
        p->state = S_M_CALLID;
        p->tag_len = 0;
    } else if (strncmp(p->tag, args_tag, p->tag_len) && strncmp(p->tag, id_tag, p->tag_len)) {
        give_back(p);
    }
}

static void step(tc_parser *p, int c) {
    char ch = (char)c;
    if (p->state != S_TEXT && !p->committed) sbuf_add(&p->raw, &ch, 1);
    switch (p->state) {
    case S_TEXT: text_byte(p, c); break;
    case S_OBJ_WAIT:
        if (c == '{') obj_start(p, p->after, 0);
        else if (!is_ws(c)) give_back(p);
        break;
    case S_OBJ: {
        int r = obj_byte(p, c);
        sync_args(p);
        if (r < 0 && p->committed) { /* a committed call ends here; the byte is text */
            call_end(p);
            p->state = S_TEXT;
            text_byte(p, c);
        } else if (r < 0) {
            give_back(p);
        } else if (r > 0) {
            if (!p->committed) give_back(p); /* an object without a name */
            else {
                call_end(p);
                p->state = p->after;
                p->close_at = 0;
            }
        }
        break;
    }
    case S_CLOSE:
        if (p->close_at == 0 && is_ws(c) && p->raw.len <= MAX_WS) break;
        if (c == HERMES_CLOSE[p->close_at]) {
            if (!HERMES_CLOSE[++p->close_at]) {
                p->raw.len = 0;
                p->state = S_TEXT;
            }
        } else refeed(p);
        break;
    case S_BETWEEN:
        if ((is_ws(c) || c == ';') && p->raw.len <= MAX_WS) break;
        if (c == '{') obj_start(p, S_BETWEEN, 1);
        else refeed(p);
        break;
    case S_M_OPEN:
        if (is_ws(c)) break;
        if (c == '[') p->state = S_ARR_WAIT;
        else if (is_name_char(c)) {
            p->state = S_M_NAME;
            p->name_raw.len = 0;
            sbuf_add(&p->name_raw, &ch, 1);
        } else give_back(p);
        break;
    case S_ARR_WAIT:
        if (c == '{') obj_start(p, S_ARR_NEXT, 0);
        else if (!is_ws(c)) give_back(p);
        break;
    case S_ARR_NEXT:
        if (is_ws(c) && p->raw.len <= MAX_WS) break;
        if (c == ',') p->state = S_ARR_WAIT;
        else if (c == ']') {
            p->raw.len = 0;
            p->state = S_TEXT;
        } else refeed(p);
        break;
    case S_M_NAME:
        if (is_name_char(c) && p->name_raw.len < MAX_NAME) sbuf_add(&p->name_raw, &ch, 1);
        else if (c == '[') {
            p->tag_len = 0;
            p->state = S_M_TAG;
            m_tag(p, c);
        } else give_back(p);
        break;
    case S_M_TAG: m_tag(p, c); break;
    case S_M_CALLID:
        if (p->tag_len + 1 >= sizeof p->tag) memmove(p->tag, p->tag + 1, --p->tag_len);
        p->tag[p->tag_len++] = ch;
        if (p->tag_len >= 6 && !memcmp(p->tag + p->tag_len - 6, "[ARGS]", 6)) {
            call_begin(p, p->name_raw.data, p->name_raw.len);
            p->state = S_ARGS_WAIT;
        } else if (p->raw.len > MAX_ID + 16) give_back(p);
        break;
    case S_ARGS_WAIT:
        if (is_ws(c)) break;
        if (c != '{') {
            call_end(p);
            p->state = S_TEXT;
            text_byte(p, c);
            break;
        }
        p->depth = 1;
        p->in_str = p->esc = 0;
        sbuf_add(&p->args, &ch, 1);
        p->state = S_ARGS;
        sync_args(p);
        break;
    case S_ARGS:
        sbuf_add(&p->args, &ch, 1);
        if (p->in_str) {
            if (p->esc) p->esc = 0;
            else if (c == '\\') p->esc = 1;
            else if (c == '"') p->in_str = 0;
        } else if (c == '"') p->in_str = 1;
        else if (c == '{' || c == '[') p->depth++;
        else if ((c == '}' || c == ']') && --p->depth == 0) {
            call_end(p);
            p->state = S_TEXT;
        }
        sync_args(p);
        break;
    }
}

int tc_parser_feed(tc_parser *p, const char *text, size_t n, tc_emit_fn emit, void *user) {
    if (p->hm) return hm_parser_feed(p->hm, text, n, emit, user);
    p->emit = emit;
    p->user = user;
    for (size_t i = 0; i < n && !p->oom; i++) step(p, (unsigned char)text[i]);
    flush_content(p);
    flush_args(p);
    return p->oom || p->hold.failed || p->raw.failed || p->args.failed || p->out_content.failed ||
                   p->out_args.failed || p->name_raw.failed
               ? -1
               : 0;
}

int tc_parser_finish(tc_parser *p, tc_emit_fn emit, void *user) {
    if (p->hm) return hm_parser_finish(p->hm, emit, user);
    p->emit = emit;
    p->user = user;
    switch (p->state) {
    case S_TEXT: break;
    case S_CLOSE: case S_BETWEEN: case S_ARR_NEXT: /* a closing tag or separator left out */
        p->raw.len = 0;
        break;
    default:
        if (p->committed) call_end(p); /* cut off: it keeps what came */
        else give_back(p);
    }
    p->state = S_TEXT;
    size_t keep = p->n_calls ? text_end(p->hold.data, p->hold.len) : p->hold.len;
    release(p, p->hold.data, keep);
    p->hold.len = p->hold_ws = 0;
    flush_content(p);
    flush_args(p);
    return p->oom || p->out_content.failed || p->out_args.failed ? -1 : 0;
}

/* ------------------------------------------------------------ at once */

static void collect(void *user, const tc_event *ev) {
    tc_result *r = user;
    if (ev->kind == TC_EV_CONTENT) {
        sbuf_add(&r->content, ev->text, ev->len);
    } else if (ev->kind == TC_EV_REASONING) {
        sbuf_add(&r->reasoning, ev->text, ev->len);
    } else if (ev->kind == TC_EV_CALL) {
        if (r->n_calls == r->cap_calls) {
            int cap = r->cap_calls ? 2 * r->cap_calls : 4;
            tc_call *c = realloc(r->calls, (size_t)cap * sizeof *c);
            if (!c) {
                r->failed = 1;
                return;
            }
            r->calls = c;
            r->cap_calls = cap;
        }
        tc_call *c = &r->calls[r->n_calls++];
        memset(c, 0, sizeof *c);
        if (!(c->name = strndup(ev->text, ev->len))) r->failed = 1;
    } else if (ev->index < r->n_calls) {
        sbuf_add(&r->calls[ev->index].args, ev->text, ev->len);
    }
}

int tc_parse(tc_family f, const char *text, size_t n, tc_result *r) {
    memset(r, 0, sizeof *r);
    tc_parser *p = tc_parser_new(f);
    if (!p) return r->failed = 1, -1;
    int rc = tc_parser_feed(p, text, n, collect, r);
    if (!rc) rc = tc_parser_finish(p, collect, r);
    tc_parser_free(p);
    for (int i = 0; i < r->n_calls; i++) r->failed |= r->calls[i].args.failed;
    if (rc || r->failed || r->content.failed || r->reasoning.failed) return r->failed = 1, -1;
    return 0;
}

void tc_result_free(tc_result *r) {
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        sbuf_free(&r->calls[i].args);
    }
    free(r->calls);
    sbuf_free(&r->content);
    sbuf_free(&r->reasoning);
    memset(r, 0, sizeof *r);
}
