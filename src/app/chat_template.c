/*
 * Chat templates: finding the model's template, parsing it once at start-up
 * and rendering conversations with it (see chat_template.h).
 */
#include "app/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "app/reasoning.h"
#include "app/tool_calls.h"

#define MAX_TEMPLATE_BYTES (1u << 20)

/* Special tokens that end an assistant turn in the templates models ship:
 * the first of this list a template writes is taken, with its companion
 * below when the template writes that too. gpt-oss's harmony template
 * writes <|end|> after every message (its analysis too), <|return|> at the
 * end of the turn and <|call|> after a tool call (which also ends the
 * turn: the tool answers), hence <|return|> before <|end|> (Phi-3's). */
static const char *const turn_ends[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>",
                                        "<|END_OF_TURN_TOKEN|>", "<|return|>", "<|end|>", "<|EOT|>",
                                        "<|end_of_text|>", NULL};
static const char *const companions[][2] = {{"<|return|>", "<|call|>"}};

static void set_token(char *dst, size_t cap, const char *s, size_t n) {
    if (!s || n >= cap) return; /* longer than any real special token: leave "" */
    memcpy(dst, s, n);
    dst[n] = 0;
}

/* tokenizer_config.json's bos_token/eos_token: a string or {"content": string}. */
static void config_token(json_t *root, const char *key, char *dst, size_t cap) {
    json_t *v = json_object_get(root, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (json_is_string(v)) set_token(dst, cap, json_string_value(v), json_string_length(v));
}

static int parse_one(tpl_template **out, const char *src, size_t n, const char *where, kvlm_error *err) {
    kvlm_error e = {0};
    if (n > MAX_TEMPLATE_BYTES)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: the chat template is %zu bytes, more than %u", where, n,
                              MAX_TEMPLATE_BYTES);
    if (!(*out = tpl_parse(src, n, &e)))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s%s", where, e.msg,
                              strncmp(where, "--chat-template", 15) ? " (--chat-template plain or FILE overrides it)"
                                                                    : "");
    return 0;
}

static void note_template(chat_template *t, const char *src) {
    if (rs_template_reasons(src)) t->reasons = 1;
    if (strstr(src, "tools")) {
        tc_family f = tc_family_detect(src);
        if (!t->renders_tools || f != TC_FAMILY_GENERIC) t->tool_family = (int)f;
        t->renders_tools = 1;
    }
    for (int i = 0; !t->n_turn_ends && turn_ends[i]; i++)
        if (strstr(src, turn_ends[i])) t->turn_ends[t->n_turn_ends++] = turn_ends[i];
    for (size_t i = 0; t->n_turn_ends == 1 && i < sizeof companions / sizeof *companions; i++)
        if (!strcmp(t->turn_ends[0], companions[i][0]) && strstr(src, companions[i][1]))
            t->turn_ends[t->n_turn_ends++] = companions[i][1];
}

/* The chat_template of a parsed tokenizer_config.json: a string, or a list
 * of {name, template} ("default", and "tool_use" when present). Returns 1
 * when one was found, 0 when none, -1 on error. */
static int from_config(chat_template *t, json_t *root, const char *where, kvlm_error *err) {
    json_t *ct = json_object_get(root, "chat_template");
    const char *main = NULL, *tool = NULL;
    size_t main_n = 0, tool_n = 0;
    if (json_is_string(ct)) main = json_string_value(ct), main_n = json_string_length(ct);
    else if (json_is_array(ct)) {
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            const char *nm = json_string_value(json_object_get(e, "name"));
            json_t *tx = json_object_get(e, "template");
            if (!nm || !json_is_string(tx)) continue;
            if (!strcmp(nm, "default")) main = json_string_value(tx), main_n = json_string_length(tx);
            if (!strcmp(nm, "tool_use")) tool = json_string_value(tx), tool_n = json_string_length(tx);
        }
        if (!main && tool) main = tool, main_n = tool_n, tool = NULL;
    } else if (ct && !json_is_null(ct))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: chat_template must be a string or a list of {name, template}",
                              where);
    if (!main) return 0;
    char w[300];
    snprintf(w, sizeof w, "%s chat_template%s", where, tool ? " \"default\"" : "");
    if (parse_one(&t->main, main, main_n, w, err)) return -1;
    note_template(t, main);
    if (tool) {
        snprintf(w, sizeof w, "%s chat_template \"tool_use\"", where);
        if (parse_one(&t->tool_use, tool, tool_n, w, err)) return -1;
        note_template(t, tool);
    }
    snprintf(t->origin, sizeof t->origin, "%s chat_template%s (%zu bytes)%s", where, tool ? " \"default\"" : "",
             main_n, tool ? ", and its \"tool_use\" template for requests with tools" : "");
    return 1;
}

static char *read_text(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(MAX_TEMPLATE_BYTES + 1);
    size_t k = buf ? fread(buf, 1, MAX_TEMPLATE_BYTES + 1, f) : 0;
    fclose(f);
    if (!buf || k > MAX_TEMPLATE_BYTES) {
        free(buf);
        return NULL;
    }
    buf[k] = 0;
    *n = k;
    return buf;
}

static int is_gguf(const char *path) {
    struct stat st;
    size_t n = path ? strlen(path) : 0;
    return n > 5 && !strcmp(path + n - 5, ".gguf") && !stat(path, &st) && S_ISREG(st.st_mode);
}

/* tokenizer.chat_template (and .tool_use) and the bos/eos token strings of
 * a GGUF file. Returns 1 when a template was found, 0 when none, -1. */
static int from_gguf(chat_template *t, const char *path, int want_template, kvlm_error *err) {
    kvlm_gguf_chat g;
    int rc = kvlm_gguf_chat_load(path, &g, err) ? -1 : 0;
    if (!rc && g.bos_token) set_token(t->bos, sizeof t->bos, g.bos_token, strlen(g.bos_token));
    if (!rc && g.eos_token) set_token(t->eos, sizeof t->eos, g.eos_token, strlen(g.eos_token));
    char w[300];
    if (!rc && want_template && g.chat_template) {
        const size_t n = strlen(g.chat_template);
        snprintf(w, sizeof w, "%s tokenizer.chat_template", path);
        rc = parse_one(&t->main, g.chat_template, n, w, err);
        if (!rc) note_template(t, g.chat_template);
        if (!rc && g.tool_use_template) {
            snprintf(w, sizeof w, "%s tokenizer.chat_template.tool_use", path);
            rc = parse_one(&t->tool_use, g.tool_use_template, strlen(g.tool_use_template), w, err);
            if (!rc) note_template(t, g.tool_use_template);
        }
        if (!rc)
            snprintf(t->origin, sizeof t->origin, "%s tokenizer.chat_template (%zu bytes%s)", path, n,
                     t->tool_use ? ", with a tool_use template" : "");
    }
    const int found = !rc && t->main != NULL;
    kvlm_gguf_chat_free(&g);
    return rc ? -1 : found;
}

static int from_file(chat_template *t, const char *file, kvlm_error *err) {
    size_t n;
    char *src = read_text(file, &n);
    if (!src)
        return kvlm_error_set(err, KVLM_ERR_ARG,
                              "--chat-template: '%s' is not auto, plain or a readable file of at most %u bytes", file,
                              MAX_TEMPLATE_BYTES);
    size_t len = strlen(file);
    int rc;
    if (len > 5 && !strcmp(file + len - 5, ".json")) {
        json_error_t je;
        json_t *root = json_loads(src, 0, &je);
        char w[300];
        snprintf(w, sizeof w, "--chat-template %s", file);
        rc = root ? from_config(t, root, w, err) : kvlm_error_set(err, KVLM_ERR_ARG, "%s: %s (line %d)", file, je.text,
                                                                  je.line);
        if (rc == 0) rc = kvlm_error_set(err, KVLM_ERR_ARG, "--chat-template %s: no chat_template in it", file);
        if (rc > 0) {
            config_token(root, "bos_token", t->bos, sizeof t->bos);
            config_token(root, "eos_token", t->eos, sizeof t->eos);
            rc = 0;
        }
        json_decref(root);
    } else {
        char w[300];
        snprintf(w, sizeof w, "--chat-template %s", file);
        rc = parse_one(&t->main, src, n, w, err);
        if (!rc) {
            note_template(t, src);
            snprintf(t->origin, sizeof t->origin, "--chat-template %s (%zu bytes)", file, n);
        }
    }
    free(src);
    return rc;
}

int chat_template_load(chat_template *t, const char *model_dir, const char *tokenizer_path, const char *name,
                       kvlm_error *err) {
    memset(t, 0, sizeof *t);
    int forced = name && strcmp(name, "auto");
    int rc = 0, found = 0;
    /* bos/eos strings from the model's files, whatever template is used */
    if (is_gguf(tokenizer_path)) {
        if ((found = from_gguf(t, tokenizer_path, !forced, err)) < 0) return chat_template_free(t), -1;
    } else if (model_dir && *model_dir) {
        char path[1200];
        size_t n;
        snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
        json_error_t je;
        json_t *root = json_load_file(path, 0, &je);
        if (root) {
            config_token(root, "bos_token", t->bos, sizeof t->bos);
            config_token(root, "eos_token", t->eos, sizeof t->eos);
        }
        snprintf(path, sizeof path, "%s/chat_template.jinja", model_dir);
        char *jinja = forced ? NULL : read_text(path, &n);
        if (jinja) {
            rc = parse_one(&t->main, jinja, n, path, err);
            if (!rc) {
                note_template(t, jinja);
                snprintf(t->origin, sizeof t->origin, "%.300s (%zu bytes)", path, n);
                found = 1;
            }
            free(jinja);
        } else if (root && !forced) {
            snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
            found = from_config(t, root, path, err);
            rc = found < 0 ? -1 : 0;
        }
        json_decref(root);
        if (rc) return chat_template_free(t), -1;
    }
    if (forced) { /* drop what the files had: the option wins */
        tpl_free(t->main), tpl_free(t->tool_use);
        t->main = t->tool_use = NULL;
        t->renders_tools = t->tool_family = 0;
        t->n_turn_ends = 0;
        if (!strcmp(name, "plain"))
            snprintf(t->origin, sizeof t->origin, "plain, from --chat-template plain: \"role: content\" lines");
        else if (from_file(t, name, err))
            return chat_template_free(t), -1;
        return 0;
    }
    if (!found)
        snprintf(t->origin, sizeof t->origin,
                 "plain: the model's files have no chat template, messages become \"role: content\" lines");
    return 0;
}

void chat_template_free(chat_template *t) {
    tpl_free(t->main);
    tpl_free(t->tool_use);
    t->main = t->tool_use = NULL;
}

int chat_reserved_var(const char *name) {
    static const char *const names[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token",
                                        "documents", NULL};
    for (int i = 0; names[i]; i++)
        if (!strcmp(name, names[i])) return 1;
    return 0;
}

int chat_render(const chat_template *t, json_t *messages, json_t *tools, int add_generation_prompt, sbuf *out,
                char *msg, size_t msg_size, int *raised) {
    return chat_render_vars(t, messages, tools, NULL, add_generation_prompt, out, msg, msg_size, raised);
}

int chat_render_vars(const chat_template *t, json_t *messages, json_t *tools, json_t *extra, int add_generation_prompt,
                     sbuf *out, char *msg, size_t msg_size, int *raised) {
    *raised = 0;
    if (!t->main) {
        size_t i;
        json_t *m;
        json_array_foreach(messages, i, m) {
            json_t *c = json_object_get(m, "content");
            sbuf_printf(out, "%s: ", json_string_value(json_object_get(m, "role")));
            if (json_is_string(c)) sbuf_add(out, json_string_value(c), json_string_length(c));
            sbuf_adds(out, "\n");
        }
        if (add_generation_prompt) sbuf_adds(out, "assistant:");
        return 0;
    }
    const tpl_template *tpl = tools && t->tool_use ? t->tool_use : t->main;
    json_t *vars = json_pack("{sOsOsbssss}", "messages", messages, "tools", tools ? tools : json_null(),
                             "add_generation_prompt", add_generation_prompt, "bos_token", t->bos, "eos_token", t->eos);
    if (!vars) {
        snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    json_object_set_new(vars, "documents", json_null());
    const char *key;
    json_t *x;
    json_object_foreach(extra, key, x) if (!chat_reserved_var(key)) json_object_set(vars, key, x);
    tpl_render_opts o = {.now = -1};
    tpl_result r;
    int rc = tpl_render(tpl, vars, &o, &r);
    json_decref(vars);
    if (rc) {
        *raised = r.raised;
        snprintf(msg, msg_size, "%s", r.err.msg);
        return -1;
    }
    sbuf_add(out, r.text, r.len);
    tpl_result_free(&r);
    return 0;
}

int chat_turn_ends(const chat_template *t, const char *ends[CHAT_MAX_TURN_ENDS]) {
    for (int i = 0; i < t->n_turn_ends; i++) ends[i] = t->turn_ends[i];
    return t->n_turn_ends;
}
int chat_uses_special(const chat_template *t) { return t->main != NULL; }
int chat_renders_tools(const chat_template *t) { return t->main && t->renders_tools; }
