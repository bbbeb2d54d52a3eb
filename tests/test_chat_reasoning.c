/*
 * `kvlm chat` with reasoning models: the reply is split into reasoning and
 * answer by the splitters kvlm serve uses, and the conversation keeps the
 * answer as content and the reasoning as reasoning_content (and thinking
 * for harmony). The output is known because a regular expression or a
 * grammar (--regex, --grammar) forces it on the gpt-oss-shaped fixture
 * (tests/fixtures/moe_gguf/gpt-oss-mxfp4.gguf, random weights, its
 * context_length raised to 1024 in a copy so gpt-oss's template fits;
 * its o200k-style vocabulary spells any text):
 *   - gpt-oss's template (harmony): an analysis message then a final one;
 *     the printed answer, the reasoning hidden (the default off a terminal)
 *     and shown with its labels, --json's content and reasoning_content,
 *     and the exact prompt of the next turn (the answer only, as jinja2's
 *     gpt-oss template renders it: earlier reasoning dropped);
 *   - a tool call message is never answer text;
 *   - the markers the model writes as special tokens reach the parser (a
 *     <|message|> forced by logit bias opens a message);
 *   - Qwen3's template and a template whose prompt opens <think>: the
 *     same split and the next turn's exact prompt;
 *   - /save FILE.json keeps the split, /save FILE then /load FILE in
 *     another process renders the same next prompt; a saved reasoning
 *     that is not a string is refused;
 *   - on a terminal: reasoning dimmed after its label, plain with a label
 *     under NO_COLOR, /reasoning hide and show between replies;
 *   - bad --reasoning, --grammar with --regex, a bad regex, a bad
 *     /reasoning argument.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pty.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "helpers.h"

#define GGUF "tests/fixtures/moe_gguf/gpt-oss-mxfp4.gguf"
#define HARMONY_TPL "tests/fixtures/templates/openai-gpt-oss-120b.jinja"
#define QWEN3_TPL "tests/fixtures/templates/Qwen-Qwen3-0.6B.jinja"
#define THINK_TPL "tests/fixtures/tool_template/think-mini.jinja"
#define COMMON "--threads 1 --temp 0 -n 120"
/* an analysis message, then the final answer (shell-quoted) */
#define HARMONY_RE                                                                                                 \
    "'<\\|channel\\|>analysis<\\|message\\|>Think first\\.<\\|end\\|><\\|start\\|>assistant<\\|channel\\|>final" \
    "<\\|message\\|>Yes\\.'"
#define THINK_RE "'<think>Think first\\.</think>Yes\\.'"

static char dir[512], model[600];

/* A copy of the fixture whose gpt-oss.context_length (a GGUF u32) is 1024. */
static int setup(void **state) {
    (void)state;
    char *d = th_tempdir();
    if (!d) return -1;
    snprintf(dir, sizeof dir, "%s", d);
    free(d);
    size_t len = 0;
    char *buf = th_read_file(GGUF, &len);
    static const char key[] = "gpt-oss.context_length";
    char *at = buf ? memmem(buf, len, key, sizeof key - 1) : NULL;
    uint32_t type = 0, ctx = 1024;
    if (at) memcpy(&type, at + sizeof key - 1, 4);
    if (!at || type != 4) {
        free(buf);
        return -1;
    }
    memcpy(at + sizeof key - 1 + 4, &ctx, 4);
    snprintf(model, sizeof model, "%s/gpt-oss-1k.gguf", dir);
    const int rc = th_write_file(model, buf, len);
    free(buf);
    return rc;
}

static int teardown(void **state) {
    (void)state;
    th_rmtree(dir);
    return 0;
}

/* Runs `kvlm chat -m MODEL ARGS` on the input lines; stdout only in *out
 * (stderr to the file err when not NULL). Returns the exit status. */
static int chat(char **out, const char *err, const char *args, const char *input) {
    return th_run_kvlm(out, "chat -m %s " COMMON " %s 2>%s <<'EOF'\n%sEOF\n", model, args, err ? err : "/dev/null",
                       input);
}

/* The n-th (from 0) prompt --verbose printed into the file err, malloc'ed. */
static char *prompt_of(const char *err, int n) {
    char *text = th_read_file(err, NULL), *p = text;
    assert_non_null(text);
    for (int i = 0; i <= n; i++) {
        p = strstr(p, "tokens ---\n");
        assert_non_null(p);
        p += strlen("tokens ---\n");
    }
    char *end = strstr(p, "\n--- end of prompt ---");
    assert_non_null(end);
    char *r = strndup(p, (size_t)(end - p));
    free(text);
    return r;
}

/* The second prompt is the first followed by exactly `added`. */
static void assert_next_prompt(const char *err, const char *added) {
    char *p0 = prompt_of(err, 0), *p1 = prompt_of(err, 1), want[8192];
    snprintf(want, sizeof want, "%s%s", p0, added);
    assert_string_equal(p1, want);
    free(p0);
    free(p1);
}

static void test_harmony(void **state) {
    (void)state;
    char *out = NULL, err[700];
    snprintf(err, sizeof err, "%s/err.txt", dir);
    /* off a terminal the reasoning is hidden by default: the answer only */
    assert_int_equal(chat(&out, err, "--chat-template " HARMONY_TPL " --verbose --regex " HARMONY_RE, "Hi\nAgain\n"), 0);
    assert_string_equal(out, "Yes.\nYes.\n");
    free(out);
    /* the earlier turn renders as its final message; its reasoning is dropped */
    assert_next_prompt(err, "<|channel|>final<|message|>Yes.<|end|><|start|>user<|message|>Again<|end|>"
                            "<|start|>assistant");
    /* shown, with labels (not a terminal: no colour) */
    assert_int_equal(chat(&out, NULL, "--chat-template " HARMONY_TPL " --reasoning show --regex " HARMONY_RE,
                          "Hi\nAgain\n"), 0);
    assert_string_equal(out, "[reasoning] Think first.\n[answer] Yes.\n[reasoning] Think first.\n[answer] Yes.\n");
    free(out);
    /* --json */
    assert_int_equal(chat(&out, NULL, "--chat-template " HARMONY_TPL " --json --regex " HARMONY_RE, "Hi\n"), 0);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "content")), "Yes.");
    assert_string_equal(json_string_value(json_object_get(j, "reasoning_content")), "Think first.");
    assert_string_equal(json_string_value(json_object_get(j, "finish_reason")), "stop");
    json_decref(j);
    free(out);
}

/* A message to functions.NAME is a call: shown with the reasoning, never
 * answer text, kept out of the conversation. */
static void test_harmony_call(void **state) {
    (void)state;
    char gbnf[700], *out = NULL, err[700];
    snprintf(gbnf, sizeof gbnf, "%s/call.gbnf", dir);
    snprintf(err, sizeof err, "%s/err.txt", dir);
    static const char g[] = "root ::= \"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                            "{\\\"city\\\":\\\"Paris\\\"}\"\n";
    assert_int_equal(th_write_file(gbnf, g, strlen(g)), 0);
    char args[1600];
    snprintf(args, sizeof args, "--chat-template " HARMONY_TPL " --grammar %s --reasoning show --verbose", gbnf);
    assert_int_equal(chat(&out, err, args, "Hi\nAgain\n"), 0);
    assert_string_equal(out, "[tool call get_weather] {\"city\":\"Paris\"}\n[tool call get_weather] "
                             "{\"city\":\"Paris\"}\n");
    free(out);
    assert_next_prompt(err, "<|channel|>final<|message|><|end|><|start|>user<|message|>Again<|end|>"
                            "<|start|>assistant");
    snprintf(args, sizeof args, "--chat-template " HARMONY_TPL " --grammar %s --json", gbnf);
    assert_int_equal(chat(&out, NULL, args, "Hi\n"), 0);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "content")), "");
    assert_null(json_object_get(j, "reasoning_content"));
    json_decref(j);
    free(out);
}

/* <|message|> (id 509) is a special token with no text of its own: made
 * certain by logit bias, the first opens a message (a header with no
 * channel: content) and the four after it are that message's text. */
static void test_special_markers(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "chat -m %s --threads 1 --temp 0 -n 5 --chat-template " HARMONY_TPL
                                       " --logit-bias 509:100 --json 2>/dev/null <<'EOF'\nHi\nEOF\n", model), 0);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "content")),
                        "<|message|><|message|><|message|><|message|>");
    assert_int_equal(json_integer_value(json_object_get(j, "completion_tokens")), 5);
    json_decref(j);
    free(out);
}

static void test_think(void **state) {
    (void)state;
    char *out = NULL, err[700];
    snprintf(err, sizeof err, "%s/err.txt", dir);
    assert_int_equal(chat(&out, err, "--chat-template " QWEN3_TPL " --verbose --regex " THINK_RE, "Hi\nAgain\n"), 0);
    assert_string_equal(out, "Yes.\nYes.\n");
    free(out);
    /* Qwen3 renders reasoning only after the last user message: dropped here */
    assert_next_prompt(err, "Yes.<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n");
    assert_int_equal(chat(&out, NULL, "--chat-template " QWEN3_TPL " --reasoning show --regex " THINK_RE, "Hi\n"), 0);
    assert_string_equal(out, "[reasoning] Think first.\n[answer] Yes.\n");
    free(out);
    /* the prompt opens <think>: the reply starts inside the reasoning */
    assert_int_equal(chat(&out, err, "--chat-template " THINK_TPL " --reasoning show --verbose --regex "
                                     "'Think first\\.</think>Yes\\.'", "Hi\nAgain\n"), 0);
    assert_string_equal(out, "[reasoning] Think first.\n[answer] Yes.\n[reasoning] Think first.\n[answer] Yes.\n");
    free(out);
    char *p = prompt_of(err, 1); /* the template shows what follows </think> of earlier answers */
    assert_string_equal(p, "user: Hi\nassistant: Yes.\nuser: Again\nassistant: <think>\n");
    free(p);
}

static void test_save_load(void **state) {
    (void)state;
    char *out = NULL, err[700], input[2400], path[700], jpath[700];
    snprintf(err, sizeof err, "%s/err.txt", dir);
    snprintf(path, sizeof path, "%s/chat.kvlm", dir);
    snprintf(jpath, sizeof jpath, "%s/chat.json", dir);
    snprintf(input, sizeof input, "Hi\n/save %s\n/save %s\n", path, jpath);
    assert_int_equal(chat(&out, NULL, "--chat-template " HARMONY_TPL " --regex " HARMONY_RE, input), 0);
    free(out);
    json_t *j = json_load_file(jpath, 0, NULL);
    assert_non_null(j);
    json_t *a = json_array_get(json_object_get(j, "messages"), 1);
    assert_int_equal(json_object_size(a), 4);
    assert_string_equal(json_string_value(json_object_get(a, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(a, "content")), "Yes.");
    assert_string_equal(json_string_value(json_object_get(a, "reasoning_content")), "Think first.");
    assert_string_equal(json_string_value(json_object_get(a, "thinking")), "Think first.");
    json_decref(j);
    /* loaded in another process: the next prompt renders the answer only */
    snprintf(input, sizeof input, "/load %s\nAgain\n", path);
    assert_int_equal(chat(&out, err, "--chat-template " HARMONY_TPL " --verbose --regex " HARMONY_RE, input), 0);
    assert_string_equal(out, "Yes.\n");
    free(out);
    char *p = prompt_of(err, 0);
    assert_non_null(strstr(p, "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Yes."
                              "<|end|><|start|>user<|message|>Again<|end|><|start|>assistant"));
    assert_null(strstr(p, "Think first."));
    free(p);
    /* a saved reasoning that is not a string is refused whole */
    size_t len = 0;
    char *file = th_read_file(path, &len);
    assert_non_null(file);
    char *at = memmem(file, len, "\"reasoning_content\": \"Think first.\"", 35);
    assert_non_null(at);
    memcpy(at + 21, "1234567890123 ", 14); /* a number in the place of the string */
    uint64_t text_bytes, sum;
    memcpy(&text_bytes, file + 16, 8);
    sum = XXH3_64bits(file + 32, (size_t)text_bytes); /* the header's checksum of the new text */
    memcpy(file + 24, &sum, 8);
    assert_int_equal(th_write_file(path, file, len), 0);
    free(file);
    assert_int_equal(th_run_kvlm(&out, "chat -m %s --threads 1 2>&1 <<'EOF'\n/load %s\nEOF\n", model, path), 0);
    if (!strstr(out, "message 1: \"reasoning_content\" is a string of an assistant message only"))
        fail_msg("the load said: %s", out);
    free(out);
}

/* On a terminal: dimmed reasoning after its label; NO_COLOR: plain with
 * labels; /reasoning hides it from the next reply on. */
static void test_terminal(void **state) {
    (void)state;
    for (int plain = 0; plain < 2; plain++) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%sexec %s chat -m %s " COMMON " --chat-template " HARMONY_TPL " --regex " HARMONY_RE
                 " 2>/dev/null", plain ? "NO_COLOR=1 " : "unset NO_COLOR; ", th_kvlm(), model);
        int fd;
        pid_t pid = forkpty(&fd, NULL, NULL, NULL);
        assert_true(pid >= 0);
        if (pid == 0) {
            execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
            _exit(127);
        }
        static const char keys[] = "Hi\n/reasoning hide\nAgain\n/reasoning show\nAgain\n/quit\n";
        assert_int_equal(write(fd, keys, sizeof keys - 1), (ssize_t)(sizeof keys - 1));
        char *buf = NULL;
        size_t n = 0;
        for (;;) { /* until the child closes the terminal */
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            if (poll(&pf, 1, 60000) <= 0) break;
            char b[4096];
            ssize_t k = read(fd, b, sizeof b);
            if (k <= 0) break;
            buf = realloc(buf, n + (size_t)k + 1);
            assert_non_null(buf);
            for (ssize_t i = 0; i < k; i++)
                if (b[i] != '\r') buf[n++] = b[i];
            buf[n] = 0;
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        close(fd);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        assert_non_null(buf);
        const char *shown = plain ? "[reasoning] Think first.\n[answer] Yes.\n"
                                  : "\x1b[2m[reasoning] Think first.\x1b[0m\nYes.\n";
        char *first = strstr(buf, shown);
        if (!first) fail_msg("the terminal showed:\n%s", buf);
        char *hidden = strstr(first, "reasoning hidden\n");
        assert_non_null(hidden);
        char *then = strstr(hidden, "Yes.\n"); /* the second reply: the answer alone */
        assert_non_null(then);
        assert_null(memmem(hidden, (size_t)(then - hidden), "Think first.", 12));
        char *again = strstr(then, "reasoning shown\n");
        assert_non_null(again);
        assert_non_null(strstr(again, shown));
        free(buf);
    }
}

/* Bad flags and commands. */
static void test_bad_input(void **state) {
    (void)state;
    char args[3][900];
    snprintf(args[0], sizeof args[0], "chat -m %s --reasoning sometimes", model);
    snprintf(args[1], sizeof args[1], "chat -m %s --regex 'a' --grammar x.gbnf", model);
    snprintf(args[2], sizeof args[2], "chat -m %s --regex '(' </dev/null", model);
    const th_cli_case cases[] = {
        {args[0], 2, "--reasoning: show or hide"},
        {args[1], 2, "--grammar and --regex exclude each other"},
        {args[2], 2, "kvlm chat: "},
    };
    th_expect_cli(cases, sizeof cases / sizeof cases[0]);
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "chat -m %s --threads 1 2>&1 <<'EOF'\n/reasoning maybe\n/reasoning\nEOF\n", model), 0);
    assert_non_null(strstr(out, "/reasoning: show or hide, not 'maybe'\nreasoning hidden\n"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_harmony), cmocka_unit_test(test_harmony_call), cmocka_unit_test(test_special_markers),
        cmocka_unit_test(test_think),   cmocka_unit_test(test_save_load),    cmocka_unit_test(test_terminal),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
