/*
 * `kvlm chat` with several models (-m repeated, --alias, --models-dir) and
 * /model, /models, on the shipped shakespeare-llama (plain template,
 * context 128) and shakespeare-chat (ChatML template, context 1024) at
 * temperature 0:
 *   - after /model the next reply is exactly what `kvlm run` on the new
 *     model gives for the whole conversation rendered with the new model's
 *     template (built here by hand), and back again; every token of it is
 *     prefilled (the KV cache is the new model's) and the switch names the
 *     token count of the conversation re-rendered;
 *   - /models lists the models in order with the one in use marked; an
 *     unknown name lists the known ones and keeps the model; --alias and
 *     --models-dir name the models;
 *   - bad flags: --synthetic or --tokenizer with several models.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"

#define LLAMA "models/shakespeare-llama"
#define CHAT "models/shakespeare-chat"
#define FLAGS "--temp 0 -n 12"

typedef struct ref {
    char *text;
    int n_ids, n_prompt;
} ref;

/* What `kvlm run -m model` generates from prompt with FLAGS. */
static ref run_ref(const char *model, const char *prompt, const char *flags) {
    char *dir = th_tempdir(), path[600], *out = NULL;
    snprintf(path, sizeof path, "%s/prompt.txt", dir);
    assert_int_equal(th_write_file(path, prompt, strlen(prompt)), 0);
    int st = th_run_kvlm(&out, "run -m %s -f %s %s --json 2>/dev/null", model, path, flags);
    if (st) fail_msg("kvlm run: exit %d: %s", st, out);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    ref r = {.text = strdup(json_string_value(json_object_get(j, "text"))),
             .n_ids = (int)json_array_size(json_object_get(j, "ids")),
             .n_prompt = (int)json_array_size(json_object_get(j, "prompt_ids"))};
    json_decref(j);
    free(out);
    th_rmtree(dir);
    free(dir);
    return r;
}

/* Line i (0-based) of the --json replies in out: its content and counts. */
static void reply_line(const char *out, int i, const ref *want) {
    const char *line = out;
    for (int k = 0; k < i; k++) {
        line = strchr(line, '\n');
        assert_non_null(line);
        line++;
    }
    json_t *j = json_loadb(line, strcspn(line, "\n"), 0, NULL);
    if (!j) fail_msg("reply %d is not JSON: %s", i, line);
    assert_string_equal(json_string_value(json_object_get(j, "content")), want->text);
    assert_int_equal(json_integer_value(json_object_get(j, "prompt_tokens")), want->n_prompt);
    assert_int_equal(json_integer_value(json_object_get(j, "completion_tokens")), want->n_ids);
    json_decref(j);
}

#define SCRIPT "Good morrow.\n/model shakespeare-chat\nWhat news?\n/stats\n/model shakespeare-llama\nAnd then?\n/stats\n"

static void test_switch_and_back(void **state) {
    (void)state;
    char p[8192];
    ref r1 = run_ref(LLAMA, "user: Good morrow.\nassistant:", FLAGS);
    /* the conversation in shakespeare-chat's ChatML, then the plain lines again */
    snprintf(p, sizeof p,
             "<|im_start|>user\nGood morrow.<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n<|im_start|>assistant\n",
             r1.text);
    ref moved = run_ref(CHAT, p, "--temp 0 -n 1"); /* the conversation as the switch re-renders it */
    snprintf(p, sizeof p,
             "<|im_start|>user\nGood morrow.<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n"
             "<|im_start|>user\nWhat news?<|im_end|>\n<|im_start|>assistant\n",
             r1.text);
    ref r2 = run_ref(CHAT, p, FLAGS);
    snprintf(p, sizeof p, "user: Good morrow.\nassistant: %s\nuser: What news?\nassistant: %s\nuser: And then?\nassistant:",
             r1.text, r2.text);
    ref r3 = run_ref(LLAMA, p, FLAGS);
    char *out = NULL;
    int st = th_run_kvlm(&out, "chat -m " LLAMA " -m " CHAT " " FLAGS " --json 2>/dev/null <<'EOF'\n" SCRIPT "EOF\n");
    assert_int_equal(st, 0);
    reply_line(out, 0, &r1);
    reply_line(out, 1, &r2);
    reply_line(out, 2, &r3);
    free(out);
    /* what the switches said, and that nothing was reused across them */
    st = th_run_kvlm(&out, "chat -m " LLAMA " -m " CHAT " " FLAGS " >/dev/null <<'EOF'\n" SCRIPT "EOF\n");
    assert_int_equal(st, 0);
    char want[512];
    snprintf(want, sizeof want,
             "model shakespeare-chat: " CHAT " (llama, 4 layers, context 1024 tokens), chat template " CHAT
             "/tokenizer_config.json chat_template");
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want,
             "the conversation's 2 messages are %d tokens with this template; the KV cache is rebuilt: the next reply "
             "prefills them again\n", moved.n_prompt);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "prompt tokens        %d (0 reused from the KV cache, %d prefilled)", r2.n_prompt,
             r2.n_prompt);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "model shakespeare-llama: " LLAMA " (llama, 8 layers, context 128 tokens), chat "
                                "template plain"));
    snprintf(want, sizeof want, "prompt tokens        %d (0 reused from the KV cache, %d prefilled)", r3.n_prompt,
             r3.n_prompt);
    assert_non_null(strstr(out, want));
    free(out);
    free(r1.text), free(r2.text), free(r3.text), free(moved.text);
}

static void test_names(void **state) {
    (void)state;
    char *out = NULL;
    int st = th_run_kvlm(&out, "chat -m " LLAMA " -m " CHAT " --alias bard " FLAGS
                               " >/dev/null <<'EOF'\n/models\n/model nope\n/model\n/model bard\n/models\n"
                               "/model shakespeare-chat\nEOF\n");
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "kvlm chat: 2 models (/models lists them, /model NAME switches); this one is "
                                "shakespeare-llama\n"));
    assert_non_null(strstr(out, "* shakespeare-llama  " LLAMA "\n  bard  " CHAT "\n"
                                "unknown model 'nope'; the models are: shakespeare-llama, bard\n"
                                "model shakespeare-llama (/models lists them, /model NAME switches)\n"
                                "model bard: " CHAT " (llama, 4 layers"));
    assert_non_null(strstr(out, "the conversation is empty; its KV cache is new\n"
                                "  shakespeare-llama  " LLAMA "\n* bard  " CHAT "\n"
                                "model bard is in use already\n"));
    free(out);
    /* --models-dir: each directory with a config.json, in name order */
    char *dir = th_tempdir(), cwd[2048], a[4096], b[4096], link[4200];
    assert_non_null(getcwd(cwd, sizeof cwd));
    snprintf(a, sizeof a, "%s/" CHAT, cwd);
    snprintf(b, sizeof b, "%s/" LLAMA, cwd);
    snprintf(link, sizeof link, "%s/a-chat", dir);
    assert_int_equal(symlink(a, link), 0);
    snprintf(link, sizeof link, "%s/b-llama", dir);
    assert_int_equal(symlink(b, link), 0);
    st = th_run_kvlm(&out, "chat --models-dir %s " FLAGS " >/dev/null <<'EOF'\n/models\n/model b-llama\nEOF\n", dir);
    assert_int_equal(st, 0);
    snprintf(a, sizeof a, "* a-chat  %s/a-chat\n  b-llama  %s/b-llama\nmodel b-llama: %s/b-llama (llama, 8 layers",
             dir, dir, dir);
    assert_non_null(strstr(out, a));
    free(out);
    th_rmtree(dir);
    free(dir);
    const th_cli_case bad[] = {
        {"chat -m " LLAMA " -m " CHAT " --synthetic llama-tiny </dev/null", 2, "--synthetic"},
        {"chat -m " LLAMA " -m " CHAT " --tokenizer " LLAMA " </dev/null", 2, "--tokenizer works with one model"},
        {"chat --alias x </dev/null", 2, "--alias"},
        {"chat --models-dir /nonexistent </dev/null", 2, "cannot read '/nonexistent'"},
    };
    th_expect_cli(bad, sizeof bad / sizeof bad[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_switch_and_back),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
