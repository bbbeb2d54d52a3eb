/*
 * kvlm serve with real chat templates, on the shipped models over HTTP.
 *
 * Server A: models/shakespeare-gpt2 with --chat-template FILE (Qwen2.5's
 * template from tests/fixtures/templates): for every fixture conversation,
 * /tokenize of the messages detokenizes to exactly the text Python's jinja2
 * rendered (expected.json); the chat endpoint's greedy answer and prompt
 * size equal /v1/completions on that text.
 *
 * Server B: the shipped Llama GGUF with Mistral-7B-Instruct-v0.2's template:
 * bos_token/eos_token come from the GGUF vocabulary (<|endoftext|>), the
 * rendering equals what the interpreter renders in-process, the template's
 * raise_exception becomes HTTP 400 with its message, and `tools` is refused
 * for a template that does not render them.
 *
 * Server C: a model directory whose tokenizer_config.json holds a list of
 * templates ("default" and "tool_use") and bos/eos as objects: requests
 * with tools use the tool_use template.
 *
 * Server D: a copy of that GGUF with tokenizer.chat_template added (Gemma
 * 2's template) uses it without any option.
 *
 * Plus: a template that does not parse stops `kvlm serve` at start-up with
 * its line and column.
 */
#include "server_harness.h"
#include "app/template/template.h"

#define GPT2 "models/shakespeare-gpt2"
#define GGUF "models/shakespeare-llama/shakespeare-llama-q8_0.gguf"
#define TPL "tests/fixtures/templates/"

static server a, b, c, d;
static json_t *convs, *expected;

static int stop_all(void **state) {
    (void)state;
    int rc = stop_server(&a) | stop_server(&b) | stop_server(&c) | stop_server(&d);
    th_rmtree(a.dir), th_rmtree(b.dir), th_rmtree(c.dir), th_rmtree(d.dir);
    json_decref(convs);
    json_decref(expected);
    return rc;
}

/* Server C's model directory: the shipped GPT-2's files linked, plus a
 * tokenizer_config.json with two named templates. */
static int make_model_dir(const char *dir) {
    static const char *const files[] = {"config.json", "model.safetensors", "vocab.json", "merges.txt"};
    char cwd[512], from[1200], to[1200];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    for (int i = 0; i < 4; i++) {
        snprintf(from, sizeof from, "%s/" GPT2 "/%s", cwd, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        if (symlink(from, to)) return -1;
    }
    size_t n1, n2;
    char *def = th_read_file(TPL "microsoft-Phi-3.5-mini-instruct.jinja", &n1);
    char *tool = th_read_file(TPL "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", &n2);
    if (!def || !tool) return -1;
    json_t *cfg = json_pack("{s[{ssss}{ssss}]s{ss}ss}", "chat_template", "template", def, "name", "default",
                            "template", tool, "name", "tool_use", "bos_token", "content", "<|endoftext|>",
                            "eos_token", "<|endoftext|>");
    (void)n1, (void)n2;
    free(def);
    free(tool);
    snprintf(to, sizeof to, "%s/tokenizer_config.json", dir);
    int rc = cfg ? json_dump_file(cfg, to, 0) : -1;
    json_decref(cfg);
    return rc;
}

/* ------------------------------------------------ a GGUF with a template */

static size_t gguf_skip_value(const unsigned char *b, size_t at, uint32_t type) {
    static const size_t size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (type == 8) {
        uint64_t n;
        memcpy(&n, b + at, 8);
        return at + 8 + n;
    }
    if (type == 9) {
        uint32_t et;
        uint64_t n;
        memcpy(&et, b + at, 4);
        memcpy(&n, b + at + 4, 8);
        at += 12;
        for (uint64_t i = 0; i < n; i++) at = gguf_skip_value(b, at, et);
        return at;
    }
    return at + size[type];
}

/* Copies the shipped GGUF to path with one more metadata entry,
 * tokenizer.chat_template = tpl: the entries, then the tensor infos, then
 * the data re-aligned to 32 bytes (tensor offsets are relative to it). */
static int gguf_with_template(const char *path, const char *tpl) {
    size_t n;
    unsigned char *b = (unsigned char *)th_read_file(GGUF, &n);
    if (!b) return -1;
    uint64_t n_tensors, n_kv;
    memcpy(&n_tensors, b + 8, 8);
    memcpy(&n_kv, b + 16, 8);
    size_t at = 24;
    for (uint64_t i = 0; i < n_kv; i++) {
        uint64_t klen;
        memcpy(&klen, b + at, 8);
        uint32_t type;
        memcpy(&type, b + at + 8 + klen, 4);
        at = gguf_skip_value(b, at + 12 + klen, type);
    }
    size_t kv_end = at;
    for (uint64_t i = 0; i < n_tensors; i++) {
        uint64_t nlen;
        uint32_t nd;
        memcpy(&nlen, b + at, 8);
        memcpy(&nd, b + at + 8 + nlen, 4);
        at += 8 + nlen + 4 + 8 * (size_t)nd + 4 + 8;
    }
    size_t info_end = at, data = (info_end + 31) / 32 * 32;
    FILE *f = fopen(path, "wb");
    if (!f) return free(b), -1;
    uint64_t n_kv1 = n_kv + 1, klen = strlen("tokenizer.chat_template"), vlen = strlen(tpl);
    uint32_t t8 = 8;
    fwrite(b, 1, 16, f);
    fwrite(&n_kv1, 8, 1, f);
    fwrite(b + 24, 1, kv_end - 24, f);
    fwrite(&klen, 8, 1, f), fwrite("tokenizer.chat_template", 1, klen, f), fwrite(&t8, 4, 1, f);
    fwrite(&vlen, 8, 1, f), fwrite(tpl, 1, vlen, f);
    fwrite(b + kv_end, 1, info_end - kv_end, f);
    size_t pos = info_end + 8 + klen + 4 + 8 + vlen;
    static const char zeros[32];
    fwrite(zeros, 1, (32 - pos % 32) % 32, f);
    fwrite(b + data, 1, n - data, f);
    free(b);
    return fclose(f);
}

static int start_all(void **state) {
    (void)state;
    json_error_t je;
    convs = json_load_file(TPL "conversations.json", 0, &je);
    json_t *root = json_load_file(TPL "expected.json", 0, &je);
    expected = json_incref(json_object_get(root, "expected"));
    json_decref(root);
    if (!convs || !expected) return -1;
    if (start_server_in_tempdir(&a, "-m " GPT2 " --threads 1 --max-seqs 2 --chat-template " TPL "Qwen-Qwen2.5-7B-Instruct.jinja"))
        return -1;
    if (start_server_in_tempdir(&b, "-m " GGUF " --threads 1 --max-seqs 2 --chat-template " TPL
                             "mistralai-Mistral-7B-Instruct-v0.2.jinja"))
        return -1;
    char *tmp = th_tempdir();
    if (!tmp) return -1;
    snprintf(c.dir, sizeof c.dir, "%s", tmp);
    free(tmp);
    char args[800];
    snprintf(args, sizeof args, "-m %s --threads 1 --max-seqs 2", c.dir);
    if (make_model_dir(c.dir)) return -1;
    if (start_server(&c, args)) return -1;
    /* Server D: the GGUF's own tokenizer.chat_template (Gemma 2's) */
    char *dd = th_tempdir();
    if (!dd) return -1;
    snprintf(d.dir, sizeof d.dir, "%s", dd);
    free(dd);
    char gguf[700];
    snprintf(gguf, sizeof gguf, "%s/with-template.gguf", d.dir);
    char *tpl = th_read_file(TPL "google-gemma-2-2b-it.jinja", NULL);
    if (!tpl || gguf_with_template(gguf, tpl)) return free(tpl), -1;
    free(tpl);
    snprintf(args, sizeof args, "-m %s --threads 1 --max-seqs 2", gguf);
    return start_server(&d, args);
}

/* {"messages": ..., "tools": ..., "add_generation_prompt": ...} of a fixture conversation. */
static char *request_of(const char *conv, const char *extra) {
    json_t *cv = json_object_get(convs, conv);
    json_t *body = json_pack("{sO}", "messages", json_object_get(cv, "messages"));
    if (json_object_get(cv, "tools")) json_object_set(body, "tools", json_object_get(cv, "tools"));
    if (extra) {
        json_t *x = json_loads(extra, 0, NULL);
        json_object_update(body, x);
        json_decref(x);
    }
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    return s;
}

/* The text a server renders for a conversation: /tokenize then /detokenize. */
static char *server_text(int port, const char *conv) {
    json_t *cv = json_object_get(convs, conv);
    char extra[64];
    snprintf(extra, sizeof extra, "{\"add_generation_prompt\":%s}",
             json_is_true(json_object_get(cv, "add_generation_prompt")) ? "true" : "false");
    char *body = request_of(conv, extra);
    char *out = rendered_prompt(port, body);
    free(body);
    return out;
}

static void test_renders_as_jinja2(void **state) {
    (void)state;
    const char *name;
    json_t *cv;
    int n = 0;
    json_object_foreach(convs, name, cv) {
        json_t *w = json_object_get(json_object_get(json_object_get(expected, "Qwen-Qwen2.5-7B-Instruct"), name),
                                    "output");
        assert_non_null(w);
        const char *want = json_string_value(w);
        char *got = server_text(a.port, name);
        if (strcmp(got, want)) fprintf(stderr, "  %s:\n  want [%s]\n  got  [%s]\n", name, want, got);
        assert_string_equal(got, want);
        free(got);
        n++;
    }
    /* 11 conversations; Qwen2.5's template reads none of the thinking
     * conversations' "variables", which the server does not pass */
    assert_int_equal(n, 11);
    char *log = th_read_file(a.log, NULL);
    assert_non_null(strstr(log, "kvlm serve: chat template --chat-template " TPL "Qwen-Qwen2.5-7B-Instruct.jinja (2507 bytes)"));
    free(log);
}

static void test_chat_is_completion_of_rendering(void **state) {
    (void)state;
    char *body = request_of("multi_turn", "{\"max_tokens\":5,\"temperature\":0,\"ignore_eos\":true}");
    json_t *chat = post(a.port, "/v1/chat/completions", body, 200);
    free(body);
    json_t *want = json_object_get(json_object_get(json_object_get(expected, "Qwen-Qwen2.5-7B-Instruct"), "multi_turn"),
                                   "output");
    json_t *cb = json_pack("{sOsisisb}", "prompt", want, "max_tokens", 5, "temperature", 0, "ignore_eos", 1);
    char *cbs = json_dumps(cb, JSON_COMPACT);
    json_t *comp = post(a.port, "/v1/completions", cbs, 200);
    assert_string_equal(jstr(chat, "choices.0.message.content"), jstr(comp, "choices.0.text"));
    assert_int_equal(jint(chat, "usage.prompt_tokens"), jint(comp, "usage.prompt_tokens"));
    assert_int_equal(jint(chat, "usage.completion_tokens"), 5);
    free(cbs);
    json_decref(cb);
    json_decref(chat);
    json_decref(comp);
}

/* In-process rendering of a fixture template with this test's bos/eos. */
static char *local_render(const char *file, const char *conv, const char *bos, const char *eos) {
    size_t n;
    char *src = th_read_file(file, &n);
    kvlm_error err = {0};
    tpl_template *t = tpl_parse(src, n, &err);
    assert_non_null(t);
    json_t *cv = json_object_get(convs, conv), *tools = json_object_get(cv, "tools");
    json_t *vars = json_pack("{sOsOsOssss}", "messages", json_object_get(cv, "messages"), "tools",
                             tools ? tools : json_null(), "add_generation_prompt",
                             json_object_get(cv, "add_generation_prompt"), "bos_token", bos, "eos_token", eos);
    json_object_set_new(vars, "documents", json_null());
    tpl_render_opts o = {.now = -1};
    tpl_result r;
    if (tpl_render(t, vars, &o, &r)) fail_msg("%s x %s: %s", file, conv, r.err.msg);
    json_decref(vars);
    tpl_free(t);
    free(src);
    return r.text;
}

/* /tokenize of the messages gives the ids of /tokenize of the text. */
static void same_ids(int port, const char *conv, const char *text, int32_t first) {
    json_t *cv = json_object_get(convs, conv);
    char extra[64];
    snprintf(extra, sizeof extra, "{\"add_generation_prompt\":%s}",
             json_is_true(json_object_get(cv, "add_generation_prompt")) ? "true" : "false");
    char *body = request_of(conv, extra);
    json_t *t1 = post(port, "/tokenize", body, 200);
    json_t *pb = json_pack("{ss}", "prompt", text);
    char *pbs = json_dumps(pb, JSON_COMPACT);
    json_t *t2 = post(port, "/tokenize", pbs, 200);
    if (!json_equal(json_object_get(t1, "tokens"), json_object_get(t2, "tokens")))
        fail_msg("%s: the messages and the rendered text tokenize differently", conv);
    if (first >= 0) assert_int_equal(jint(t1, "tokens.0"), first);
    free(body);
    free(pbs);
    json_decref(pb);
    json_decref(t1);
    json_decref(t2);
}

static void test_gguf_bos_eos_and_raise(void **state) {
    (void)state;
    char *text = local_render(TPL "mistralai-Mistral-7B-Instruct-v0.2.jinja", "multi_turn", "<|endoftext|>",
                              "<|endoftext|>");
    assert_string_equal(text, "<|endoftext|>[INST] Hi there [/INST]Hello! How can I help you today?<|endoftext|>"
                              "[INST] Tell me a joke. [/INST]");
    same_ids(b.port, "multi_turn", text, 50256); /* the template's bos_token is the GGUF's token 50256 */
    free(text);
    char *body = request_of("system_user", NULL);
    resp r = http(b.port, "POST", "/v1/chat/completions", body);
    assert_int_equal(r.status, 400);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(j, "error.message"), "Conversation roles must alternate user/assistant/user/assistant/...");
    assert_string_equal(jstr(j, "error.code"), "chat_template_error");
    assert_string_equal(jstr(j, "error.param"), "messages");
    json_decref(j);
    resp_free(&r);
    free(body);
    body = request_of("tools_offered", NULL);
    r = http(b.port, "POST", "/v1/chat/completions", body);
    assert_int_equal(r.status, 400);
    j = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(j, "error.code"), "unsupported_parameter");
    assert_string_equal(jstr(j, "error.param"), "tools");
    json_decref(j);
    resp_free(&r);
    free(body);
    /* OpenAI's form of a tool call: arguments as a JSON string */
    r = http(b.port, "POST", "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":null,"
             "\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":7}}]}]}");
    assert_int_equal(r.status, 400);
    resp_free(&r);
}

static void test_config_template_list(void **state) {
    (void)state;
    char *log = th_read_file(c.log, NULL);
    assert_non_null(strstr(log, "/tokenizer_config.json chat_template \"default\" ("));
    assert_non_null(strstr(log, "bytes), and its \"tool_use\" template for requests with tools"));
    free(log);
    char *text = local_render(TPL "microsoft-Phi-3.5-mini-instruct.jinja", "system_user", "<|endoftext|>",
                              "<|endoftext|>");
    same_ids(c.port, "system_user", text, -1);
    free(text);
    text = local_render(TPL "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "tool_call", "<|endoftext|>",
                        "<|endoftext|>");
    assert_non_null(strstr(text, "<tools>"));
    same_ids(c.port, "tool_call", text, 50256);
    free(text);
}

static void test_gguf_metadata_template(void **state) {
    (void)state;
    char *log = th_read_file(d.log, NULL);
    assert_non_null(strstr(log, "/with-template.gguf tokenizer.chat_template (591 bytes)"));
    free(log);
    char *text = local_render(TPL "google-gemma-2-2b-it.jinja", "multi_turn", "<|endoftext|>", "<|endoftext|>");
    assert_string_equal(text, "<|endoftext|><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"
                              "Hello! How can I help you today?<end_of_turn>\n<start_of_turn>user\nTell me a joke."
                              "<end_of_turn>\n<start_of_turn>model\n");
    same_ids(d.port, "multi_turn", text, 50256);
    free(text);
    char *body = request_of("system_user", NULL);
    resp r = http(d.port, "POST", "/v1/chat/completions", body);
    assert_int_equal(r.status, 400);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(j, "error.message"), "System role not supported");
    json_decref(j);
    resp_free(&r);
    free(body);
}

static void test_bad_template_stops_startup(void **state) {
    (void)state;
    char *d = th_tempdir(), path[600];
    snprintf(path, sizeof path, "%s/bad.jinja", d);
    const char *bad = "{% for m in messages %}\n{{ m.content }\n{% endfor %}";
    assert_int_equal(th_write_file(path, bad, strlen(bad)), 0);
    char *out = NULL;
    int st = th_run_kvlm(&out, "serve -m " GPT2 " --port 0 --threads 1 --chat-template %s", path);
    assert_int_not_equal(st, 0);
    if (!strstr(out, "bad.jinja: template line 2, column 14: unexpected '}'")) fprintf(stderr, "%s\n", out);
    assert_non_null(strstr(out, "bad.jinja: template line 2, column 14: unexpected '}'"));
    free(out);
    st = th_run_kvlm(&out, "serve -m " GPT2 " --port 0 --threads 1 --chat-template %s/none.jinja", d);
    assert_int_equal(st, 2);
    assert_non_null(strstr(out, "is not auto, plain or a readable file"));
    free(out);
    th_rmtree(d);
    free(d);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_chat_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_renders_as_jinja2),     cmocka_unit_test(test_chat_is_completion_of_rendering),
        cmocka_unit_test(test_gguf_bos_eos_and_raise), cmocka_unit_test(test_config_template_list),
        cmocka_unit_test(test_gguf_metadata_template), cmocka_unit_test(test_bad_template_stops_startup),
    };
    int failed = cmocka_run_group_tests_name("chat_templates", tests, start_all, stop_all);
    return failed || dirty_exit;
}
