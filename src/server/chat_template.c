/* Chat templates: recognition and rendering (see chat_template.h). */
#include "server/chat_template.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char *const names[] = {"plain", "chatml", "llama3"};

const char *chat_format_name(chat_format f) { return names[f]; }

/* The template string of a tokenizer_config.json: a string, or a list of
 * {name, template} of which "default" (or the first) is taken. */
static const char *config_template(json_t *root) {
    json_t *t = json_object_get(root, "chat_template");
    if (json_is_string(t)) return json_string_value(t);
    if (!json_is_array(t) || json_array_size(t) == 0) return NULL;
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e) {
        const char *nm = json_string_value(json_object_get(e, "name"));
        if (nm && !strcmp(nm, "default")) return json_string_value(json_object_get(e, "template"));
    }
    return json_string_value(json_object_get(json_array_get(t, 0), "template"));
}

int chat_template_load(chat_template *t, const char *model_dir, const char *name, kvlm_error *err) {
    memset(t, 0, sizeof *t);
    if (name && strcmp(name, "auto")) {
        for (int f = 0; f < 3; f++)
            if (!strcmp(name, names[f])) {
                t->format = (chat_format)f;
                snprintf(t->origin, sizeof t->origin, "--chat-template %s", name);
                return 0;
            }
        return kvlm_error_set(err, KVLM_ERR_ARG, "--chat-template: '%s' is not one of auto, plain, chatml, llama3",
                              name);
    }
    snprintf(t->origin, sizeof t->origin, "no chat_template in the model's files");
    if (!model_dir || !*model_dir) return 0;
    char path[1100];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    json_t *root = json_load_file(path, 0, NULL);
    const char *tpl = root ? config_template(root) : NULL;
    if (tpl) {
        if (strstr(tpl, "<|im_start|>")) t->format = CHAT_CHATML;
        else if (strstr(tpl, "<|start_header_id|>")) t->format = CHAT_LLAMA3;
        snprintf(t->origin, sizeof t->origin, "%s: %s", "tokenizer_config.json chat_template",
                 t->format == CHAT_PLAIN ? "not recognised (kvlm does not run Jinja)" : "recognised");
    }
    json_decref(root);
    return 0;
}

void chat_render(const chat_template *t, const chat_message *msgs, int n, int add_generation_prompt, sbuf *out) {
    if (t->format == CHAT_LLAMA3) sbuf_adds(out, "<|begin_of_text|>");
    for (int i = 0; i < n; i++) {
        const chat_message *m = &msgs[i];
        switch (t->format) {
        case CHAT_PLAIN:
            sbuf_printf(out, "%s: ", m->role);
            sbuf_add(out, m->content, m->content_len);
            sbuf_adds(out, "\n");
            break;
        case CHAT_CHATML:
            sbuf_printf(out, "<|im_start|>%s\n", m->role);
            sbuf_add(out, m->content, m->content_len);
            sbuf_adds(out, "<|im_end|>\n");
            break;
        case CHAT_LLAMA3:
            sbuf_printf(out, "<|start_header_id|>%s<|end_header_id|>\n\n", m->role);
            sbuf_add(out, m->content, m->content_len);
            sbuf_adds(out, "<|eot_id|>");
            break;
        }
    }
    if (!add_generation_prompt) return;
    static const char *const opening[] = {"assistant:", "<|im_start|>assistant\n",
                                          "<|start_header_id|>assistant<|end_header_id|>\n\n"};
    sbuf_adds(out, opening[t->format]);
}

const char *chat_turn_end(const chat_template *t) {
    return t->format == CHAT_CHATML ? "<|im_end|>" : t->format == CHAT_LLAMA3 ? "<|eot_id|>" : NULL;
}

int chat_uses_special(const chat_template *t) { return t->format != CHAT_PLAIN; }
