/*
 * libFuzzer target: the chat-template engine (src/app/template/: lexer,
 * parser, evaluator, builtins). The input is a template, then optionally
 * "\n#####\n" and a JSON value given to it as `messages` (a fixed
 * conversation with a system, user, assistant-with-tool-call and tool turn
 * when absent or not JSON). The template is parsed; when it parses it is
 * rendered with messages, tools, add_generation_prompt, bos_token and
 * eos_token, under limits smaller than the defaults (so a slow template
 * costs milliseconds, not seconds) and a fixed clock.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "app/template/template.h"

static const char default_messages[] =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi <b> & \\u00e9\"},"
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
    "\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1}}}]},{\"role\":\"tool\",\"content\":\"2\","
    "\"tool_call_id\":\"c1\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"again\"}]}]";

static const char default_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"d\",\"parameters\":"
    "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"]}}}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *src, *msg;
    size_t ns, nm;
    static const char sep[] = "\n#####\n";
    fuzz_split(data, size, sep, sizeof sep - 1, &src, &ns, &msg, &nm);
    kvlm_error err;
    tpl_template *t = tpl_parse((const char *)src, ns, &err);
    if (!t) return 0;
    json_t *messages = nm ? json_loadb((const char *)msg, nm, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL) : NULL;
    if (!messages) messages = json_loads(default_messages, 0, NULL);
    json_t *vars = json_pack("{soso sbssss}", "messages", messages, "tools", json_loads(default_tools, 0, NULL),
                             "add_generation_prompt", 1, "bos_token", "<s>", "eos_token", "</s>");
    if (!vars) abort();
    tpl_limits lim = {.max_output = 1 << 16, .max_memory = 16 << 20, .max_iterations = 20000, .max_depth = 64};
    tpl_render_opts o = {.limits = &lim, .now = 1700000000};
    tpl_result r;
    if (tpl_render(t, vars, &o, &r) == 0 && r.len != strlen(r.text) && memchr(r.text, 0, r.len) == NULL)
        abort(); /* the length must agree with the text */
    tpl_result_free(&r);
    json_decref(vars);
    tpl_free(t);
    return 0;
}
