/*
 * `kvlm chat` end to end, driven through a pseudo-terminal as a person
 * would use it, on the shipped Llama (Q8_0 GGUF, no chat template of its
 * own: the plain "role: content" template) with fixed seeds:
 *   - a reply is exactly the text `kvlm run` generates from the same
 *     rendered prompt with the same sampling flags, and /stats reports its
 *     tokens and KV figures exactly;
 *   - the second turn reuses the whole KV blocks the first turn left that
 *     its prompt starts with (the count computed here from the tokens);
 *   - /system and /reset change the rendered prompt (--verbose) as they
 *     should; a continued line (ending in \) is one message; /save writes
 *     the messages as JSON; --chat-template FILE is used; --color tints
 *     tokens on a terminal and never with NO_COLOR;
 *   - Ctrl-C during a long reply (synthetic GPT-2 124M shapes, slow enough
 *     to interrupt) stops it, keeps it in the conversation and returns to
 *     the prompt; Ctrl-C at an empty prompt exits 0;
 *   - with standard input not a terminal, each input line gets exactly its
 *     reply and a newline on stdout and nothing else;
 *   - bad input: unknown commands, a full context window, a bad template;
 *   - /save then /load in another process: the next reply and the tokens it
 *     reuses equal a session that never stopped; damaged KV loads the text
 *     only, damaged text is refused, another KV dtype's cache is not served;
 *   - --kv-cache-dir: a second chat with the same system prompt restores
 *     its whole blocks from the first chat's files (/stats: reused tokens
 *     and disk hits) and replies the same text.
 */
#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvlm_tokenizer.h"
#include "helpers.h"

#define LLAMA_GGUF "models/shakespeare-llama/shakespeare-llama-q8_0.gguf"
#define PROMPT ">>> "

/* ------------------------------------------------ a chat on a terminal */

typedef struct pty_chat {
    pid_t pid;
    int fd;
    char *buf;      /* everything the terminal showed, '\r' removed */
    size_t len, cap;
    size_t seen;    /* where the next expectation starts looking */
} pty_chat;

/* Starts `$KVLM chat ARGS` on a new terminal (env: "NAME=VALUE" or NULL). */
static void pc_start(pty_chat *p, const char *env, const char *args) {
    memset(p, 0, sizeof *p);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "exec %s chat %s", th_kvlm(), args);
    p->pid = forkpty(&p->fd, NULL, NULL, NULL);
    if (p->pid < 0) fail_msg("forkpty: %s", strerror(errno));
    if (p->pid == 0) {
        unsetenv("NO_COLOR");
        if (env) putenv((char *)env);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
}

/* Reads what the terminal shows for up to ms milliseconds; 0 at its end. */
static int pc_read(pty_chat *p, int ms) {
    struct pollfd pf = {.fd = p->fd, .events = POLLIN};
    if (poll(&pf, 1, ms) <= 0) return 1;
    char b[4096];
    ssize_t n = read(p->fd, b, sizeof b);
    if (n <= 0) return 0; /* EIO: the child closed the terminal */
    for (ssize_t i = 0; i < n; i++) {
        if (b[i] == '\r') continue;
        if (p->len + 2 > p->cap) {
            p->cap = p->cap ? 2 * p->cap : 8192;
            p->buf = realloc(p->buf, p->cap);
            assert_non_null(p->buf);
        }
        p->buf[p->len++] = b[i];
    }
    p->buf[p->len] = 0;
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Waits (at most 30 s) until the text shown since the last expectation
 * contains needle; returns where it starts and moves past it. */
static char *pc_expect(pty_chat *p, const char *needle) {
    const double end = now_s() + 30;
    for (;;) {
        char *at = p->buf ? strstr(p->buf + p->seen, needle) : NULL;
        if (at) {
            p->seen = (size_t)(at - p->buf) + strlen(needle);
            return at;
        }
        if (now_s() > end || !pc_read(p, 100))
            fail_msg("the terminal never showed \"%s\"; it showed:\n%s", needle, p->buf ? p->buf + p->seen : "");
    }
}

static void pc_send(pty_chat *p, const char *keys) {
    size_t n = strlen(keys);
    assert_int_equal(write(p->fd, keys, n), (ssize_t)n);
}

/* Types keys and waits for what they must bring up. */
static void pc_exchange(pty_chat *p, const char *keys, const char *shown) {
    pc_send(p, keys);
    pc_expect(p, shown);
}

/* The exit status of the chat (it must end within 30 s). */
static int pc_wait(pty_chat *p) {
    int st = 0;
    const double end = now_s() + 30;
    while (waitpid(p->pid, &st, WNOHANG) == 0) {
        if (now_s() > end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            fail_msg("kvlm chat did not exit; it showed:\n%s", p->buf);
        }
        pc_read(p, 50);
    }
    close(p->fd);
    free(p->buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ------------------------------------------------------ references */

/* What `kvlm run` generates from the text in prompt with flags: its text,
 * ids and prompt ids. */
typedef struct run_ref {
    char *text;
    int n_ids, n_prompt;
    int32_t ids[512], prompt[512];
    json_int_t kv_tokens, kv_blocks;
} run_ref;

static void run_reference(run_ref *r, const char *prompt, const char *flags) {
    char *dir = th_tempdir(), path[600], *out = NULL;
    snprintf(path, sizeof path, "%s/prompt.txt", dir);
    assert_int_equal(th_write_file(path, prompt, strlen(prompt)), 0);
    int st = th_run_kvlm(&out, "run -m %s -f %s %s --json 2>/dev/null", LLAMA_GGUF, path, flags);
    if (st) fail_msg("kvlm run: exit %d: %s", st, out);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    r->text = strdup(json_string_value(json_object_get(j, "text")));
    json_t *ids = json_object_get(j, "ids"), *pids = json_object_get(j, "prompt_ids");
    r->n_ids = (int)json_array_size(ids);
    r->n_prompt = (int)json_array_size(pids);
    assert_true(r->n_ids < 512 && r->n_prompt < 512);
    for (int i = 0; i < r->n_ids; i++) r->ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
    for (int i = 0; i < r->n_prompt; i++) r->prompt[i] = (int32_t)json_integer_value(json_array_get(pids, (size_t)i));
    json_t *stats = json_object_get(j, "stats");
    r->kv_tokens = json_integer_value(json_object_get(stats, "kv_tokens"));
    r->kv_blocks = json_integer_value(json_object_get(stats, "kv_blocks_used"));
    json_decref(j);
    free(out);
    th_rmtree(dir);
    free(dir);
}

/* The sampling flags every test gives both chat and run. */
#define FLAGS "--seed 7 -n 24"

/* A message gets the reply `kvlm run` gives to its rendered prompt; /stats
 * reports it; the second turn reuses the first turn's KV blocks. */
static void test_reply_matches_run(void **state) {
    (void)state;
    run_ref r1;
    run_reference(&r1, "user: Hello\nassistant:", FLAGS);
    assert_true(r1.n_ids > 0 && strlen(r1.text) > 0);

    pty_chat p;
    pc_start(&p, NULL, "-m " LLAMA_GGUF " " FLAGS " --block-size 4");
    pc_expect(&p, "chat template plain");
    pc_expect(&p, "Type a message");
    pc_expect(&p, PROMPT);
    pc_send(&p, "Hello\r");
    char want[2048];
    snprintf(want, sizeof want, "Hello\n%s\n" PROMPT, r1.text);
    pc_expect(&p, want);

    pc_send(&p, "/stats\r");
    snprintf(want, sizeof want, "prompt tokens        %d (0 reused from the KV cache, %d prefilled)", r1.n_prompt,
             r1.n_prompt);
    pc_expect(&p, want);
    snprintf(want, sizeof want, "generated tokens     %d (", r1.n_ids);
    pc_expect(&p, want);
    pc_expect(&p, "time to first token");
    /* the KV holds every token but the last drawn: kvlm run's figures, in
     * the default f16 cache (2 x 8 layers x 2 KV heads x 8 dims x 2 B) */
    snprintf(want, sizeof want, "KV conversation      %d tokens x 512 bytes (f16) = %d bytes\n", (int)r1.kv_tokens,
             (int)r1.kv_tokens * 512);
    pc_expect(&p, want);
    assert_int_equal(r1.kv_tokens, r1.n_prompt + r1.n_ids - 1);
    snprintf(want, sizeof want, "KV blocks            %d of 4 tokens = %d bytes reserved", (int)(r1.kv_tokens + 3) / 4,
             (int)(r1.kv_tokens + 3) / 4 * 4 * 512);
    pc_expect(&p, want);
    pc_expect(&p, PROMPT);

    /* turn 2: whole 4-token blocks of turn 1's tokens that its prompt starts with */
    char turn2[2048];
    snprintf(turn2, sizeof turn2, "user: Hello\nassistant: %s\nuser: What news?\nassistant:", r1.text);
    kvlm_error err;
    kvlm_tokenizer *tok = kvlm_tokenizer_load(LLAMA_GGUF, &err);
    assert_non_null(tok);
    int32_t *ids2 = NULL;
    size_t n2 = 0;
    assert_int_equal(kvlm_tokenizer_encode_prompt(tok, turn2, strlen(turn2), 0, &ids2, &n2, &err), 0);
    int32_t turn1[1024];
    memcpy(turn1, r1.prompt, (size_t)r1.n_prompt * sizeof *turn1);
    memcpy(turn1 + r1.n_prompt, r1.ids, (size_t)r1.n_ids * sizeof *turn1);
    int common = 0;
    while (common < r1.kv_tokens && (size_t)common < n2 - 1 && turn1[common] == ids2[common]) common++;
    const int reused = common / 4 * 4;
    assert_true(reused >= 4); /* "user: Hello\n" at least */
    pc_send(&p, "What news?\r");
    pc_expect(&p, "\n" PROMPT);
    pc_send(&p, "/stats\r");
    snprintf(want, sizeof want, "prompt tokens        %zu (%d reused from the KV cache, %zu prefilled)", n2, reused,
             n2 - (size_t)reused);
    pc_expect(&p, want);
    pc_expect(&p, PROMPT);
    free(ids2);
    kvlm_tokenizer_free(tok);
    free(r1.text);

    pc_send(&p, "/quit\r");
    assert_int_equal(pc_wait(&p), 0);
}

/* /system and /reset as the rendered prompt shows them (--verbose);
 * unknown commands; Ctrl-D exits. */
static void test_system_and_reset(void **state) {
    (void)state;
    pty_chat p;
    pc_start(&p, NULL, "-m " LLAMA_GGUF " --seed 3 -n 2 --verbose --system 'Speak verse.'");
    pc_expect(&p, PROMPT);
    /* each message's rendered prompt ("user: Yo\nassistant:" is 7 tokens of the GPT-2 vocabulary) */
    static const char *const script[][2] = {
        {"Hail\r", " tokens ---\nsystem: Speak verse.\nuser: Hail\nassistant:\n--- end of prompt ---\n"},
        {"", PROMPT},
        {"/system Be brief.\r", "system message set\n" PROMPT},
        {"/reset\r", "new conversation (the system message stays)\n" PROMPT},
        {"Hi\r", " tokens ---\nsystem: Be brief.\nuser: Hi\nassistant:\n--- end of prompt ---\n"},
        {"", PROMPT},
        {"/system\r", "system message removed\n" PROMPT},
        {"/reset\r", "new conversation\n" PROMPT},
        {"Yo\r", "--- prompt, 7 tokens ---\nuser: Yo\nassistant:\n--- end of prompt ---\n"},
        {"", PROMPT},
        {"/bogus x\r", "unknown command '/bogus' (/help lists the commands)\n" PROMPT},
        {"/help\r", "/save FILE"},
        {"", PROMPT},
    };
    for (size_t i = 0; i < sizeof script / sizeof script[0]; i++) pc_exchange(&p, script[i][0], script[i][1]);
    pc_send(&p, "\x04");
    assert_int_equal(pc_wait(&p), 0);
}

/* A line ending in \ continues the message; /save writes the messages;
 * a half-typed message dropped with Ctrl-C is not sent. */
static void test_multiline_and_save(void **state) {
    (void)state;
    run_ref r;
    run_reference(&r, "user: To be\nor not\nassistant:", FLAGS);
    char *dir = th_tempdir(), path[600], cmd[700], want[2048];
    snprintf(path, sizeof path, "%s/chat.json", dir);
    pty_chat p;
    pc_start(&p, NULL, "-m " LLAMA_GGUF " " FLAGS);
    pc_expect(&p, PROMPT);
    pc_send(&p, "never sent\x03");
    pc_expect(&p, "never sent^C\n" PROMPT);
    pc_send(&p, "To be\\\r");
    pc_expect(&p, "\n... ");
    pc_send(&p, "or not\r");
    snprintf(want, sizeof want, "or not\n%s\n" PROMPT, r.text);
    pc_expect(&p, want);
    snprintf(cmd, sizeof cmd, "/save %s\r", path);
    pc_send(&p, cmd);
    pc_expect(&p, "saved 2 messages to ");
    pc_expect(&p, PROMPT);
    pc_send(&p, "/save /nonexistent-dir/x.json\r");
    pc_expect(&p, "/save: cannot write /nonexistent-dir/x.json: No such file or directory\n" PROMPT);
    pc_send(&p, "\x03"); /* Ctrl-C at an empty prompt */
    assert_int_equal(pc_wait(&p), 0);

    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) fail_msg("%s: %s", path, je.text);
    json_t *m = json_object_get(doc, "messages");
    assert_int_equal(json_array_size(m), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 0), "role")), "user");
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 0), "content")), "To be\nor not");
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 1), "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(json_array_get(m, 1), "content")), r.text);
    json_decref(doc);
    free(r.text);
    th_rmtree(dir);
    free(dir);
}

/* Ctrl-C while a long reply streams stops it and returns to the prompt;
 * the stopped reply stays in the conversation. */
static void test_ctrl_c_stops_reply(void **state) {
    (void)state;
    char *dir = th_tempdir(), path[600], cmd[700];
    snprintf(path, sizeof path, "%s/chat.json", dir);
    pty_chat p;
    /* random GPT-2 124M shapes: about 10 ms per token, 1000 tokens would take seconds */
    pc_start(&p, NULL, "--synthetic gpt2-124m --dtype q8_0 --tokenizer models/gpt2-tokenizer --temp 0 -n 1000");
    pc_expect(&p, PROMPT);
    pc_send(&p, "Go on\r");
    pc_expect(&p, "Go on\n");
    const size_t start = p.len;
    while (p.len < start + 8) /* some of the reply has streamed */
        if (!pc_read(&p, 1000)) fail_msg("kvlm chat ended: %s", p.buf);
    pc_send(&p, "\x03");
    pc_expect(&p, " [stopped]\n" PROMPT);
    assert_int_equal(kill(p.pid, 0), 0); /* still alive */
    pc_send(&p, "/stats\r");
    char *at = pc_expect(&p, "generated tokens     ");
    const int generated = atoi(at + strlen("generated tokens     "));
    pc_expect(&p, "(stopped)");
    assert_true(generated >= 1 && generated < 1000);
    snprintf(cmd, sizeof cmd, "/save %s\r", path);
    pc_send(&p, cmd);
    pc_expect(&p, "saved 2 messages");
    pc_expect(&p, PROMPT);
    pc_send(&p, "/quit\r");
    assert_int_equal(pc_wait(&p), 0);
    json_t *doc = json_load_file(path, 0, NULL);
    assert_non_null(doc);
    json_t *reply = json_array_get(json_object_get(doc, "messages"), 1);
    assert_string_equal(json_string_value(json_object_get(reply, "role")), "assistant");
    assert_true(json_string_length(json_object_get(reply, "content")) > 0);
    json_decref(doc);
    th_rmtree(dir);
    free(dir);
}

/* --color tints tokens with 256-colour escapes on a terminal, and the
 * text without them is the plain reply; NO_COLOR turns it off. */
static void test_color(void **state) {
    (void)state;
    run_ref r;
    run_reference(&r, "user: Hello\nassistant:", FLAGS);
    pty_chat p;
    pc_start(&p, NULL, "-m " LLAMA_GGUF " " FLAGS " --color");
    pc_expect(&p, PROMPT);
    pc_send(&p, "Hello\r");
    char *from = pc_expect(&p, "Hello\n") + strlen("Hello\n");
    char *to = pc_expect(&p, "\n" PROMPT);
    size_t n = 0, tints = 0;
    char plain[4096];
    for (char *c = from; c < to && n + 1 < sizeof plain;) {
        if (*c == '\x1b') {
            if (!strncmp(c, "\x1b[38;5;", 7)) tints++;
            c = strchr(c, 'm') + 1;
        } else {
            plain[n++] = *c++;
        }
    }
    plain[n] = 0;
    assert_string_equal(plain, r.text);
    assert_true(tints >= 1 && tints <= (size_t)r.n_ids);
    pc_send(&p, "/help\r");
    pc_expect(&p, "colours (--color)");
    pc_expect(&p, PROMPT);
    pc_send(&p, "/quit\r");
    assert_int_equal(pc_wait(&p), 0);

    pc_start(&p, "NO_COLOR=1", "-m " LLAMA_GGUF " " FLAGS " --color");
    pc_expect(&p, PROMPT);
    pc_send(&p, "Hello\r");
    char want[2048];
    snprintf(want, sizeof want, "Hello\n%s\n" PROMPT, r.text); /* exact: no escape */
    pc_expect(&p, want);
    pc_send(&p, "/quit\r");
    assert_int_equal(pc_wait(&p), 0);
    free(r.text);
}

/* --chat-template FILE renders the conversation; a bad one is refused. */
static void test_template_file(void **state) {
    (void)state;
    char *dir = th_tempdir(), path[600], args[800];
    snprintf(path, sizeof path, "%s/t.jinja", dir);
    const char *tpl = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                      "{% if add_generation_prompt %}[assistant]{% endif %}";
    assert_int_equal(th_write_file(path, tpl, strlen(tpl)), 0);
    snprintf(args, sizeof args, "-m " LLAMA_GGUF " -n 2 --verbose --chat-template %s", path);
    pty_chat p;
    pc_start(&p, NULL, args);
    pc_expect(&p, "chat template --chat-template ");
    pc_expect(&p, PROMPT);
    pc_send(&p, "Hi\r");
    pc_expect(&p, " tokens ---\n[user] Hi\n[assistant]\n--- end of prompt ---\n");
    pc_expect(&p, PROMPT);
    pc_send(&p, "/quit\r");
    assert_int_equal(pc_wait(&p), 0);
    /* one that does not parse ends the chat, naming where */
    const char *bad = "{% for m in messages %}{{ m.role";
    assert_int_equal(th_write_file(path, bad, strlen(bad)), 0);
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "chat -m %s --chat-template %s </dev/null", LLAMA_GGUF, path), 1);
    assert_non_null(strstr(out, "t.jinja: template line 1, column 24: "));
    free(out);
    th_rmtree(dir);
    free(dir);
}

/* Standard input not a terminal: one reply and a newline per line, on
 * stdout only, each what `kvlm run` gives to the conversation so far. */
static void test_scripted(void **state) {
    (void)state;
    run_ref r1, r2;
    run_reference(&r1, "user: Hello\nassistant:", FLAGS);
    char turn2[2048];
    snprintf(turn2, sizeof turn2, "user: Hello\nassistant: %s\nuser: What news?\nassistant:", r1.text);
    run_reference(&r2, turn2, FLAGS);
    char *out = NULL, want[4096];
    int st = th_run_kvlm(&out, "chat -m %s %s 2>/dev/null <<'EOF'\nHello\n/stats\nWhat news?\nEOF\n", LLAMA_GGUF,
                         FLAGS);
    assert_int_equal(st, 0);
    snprintf(want, sizeof want, "%s\n%s\n", r1.text, r2.text);
    assert_string_equal(out, want);
    free(out);
    /* --json: one line per reply */
    st = th_run_kvlm(&out, "chat -m %s %s --json 2>/dev/null <<'EOF'\nHello\nWhat news?\nEOF\n", LLAMA_GGUF, FLAGS);
    assert_int_equal(st, 0);
    const run_ref *refs[2] = {&r1, &r2};
    char *line = out;
    for (int i = 0; i < 2; i++) {
        char *nl = strchr(line, '\n');
        assert_non_null(nl);
        *nl = 0;
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "content")), refs[i]->text);
        assert_int_equal(json_integer_value(json_object_get(j, "completion_tokens")), refs[i]->n_ids);
        assert_int_equal(json_integer_value(json_object_get(j, "prompt_tokens")), refs[i]->n_prompt);
        assert_string_equal(json_string_value(json_object_get(j, "finish_reason")),
                            refs[i]->n_ids == 24 ? "length" : "stop");
        json_decref(j);
        line = nl + 1;
    }
    assert_string_equal(line, "");
    free(out);
    /* what went to stderr: the banner and /stats */
    st = th_run_kvlm(&out, "chat -m %s %s <<'EOF' >/dev/null\nHello\n/stats\n/nope\nEOF\n", LLAMA_GGUF, FLAGS);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "kvlm chat: chat template plain"));
    assert_non_null(strstr(out, "generated tokens"));
    assert_non_null(strstr(out, "unknown command '/nope'"));
    free(out);
    free(r1.text);
    free(r2.text);
}

/* A message beyond the context window is refused with advice, the chat
 * goes on; bad templates and missing tokenizers end it at once. */
static void test_errors(void **state) {
    (void)state;
    char *out = NULL;
    /* 150 words are more than the 128-token context */
    char script[2048] = "chat -m " LLAMA_GGUF " -n 4 <<'EOF'\n";
    for (int i = 0; i < 150; i++) strcat(script, "word ");
    strcat(script, "\nHello\nEOF\n");
    int st = th_run_kvlm(&out, "%s", script);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "kvlm chat: the context window is full: the conversation is "));
    assert_non_null(strstr(out, "/reset starts a new conversation"));
    free(out);
    /* and the short message after it got a reply alone: its prompt is 7 tokens */
    st = th_run_kvlm(&out, "%s", "chat -m " LLAMA_GGUF " -n 4 --verbose <<'EOF'\nHello\nEOF\n");
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "--- prompt, 7 tokens ---"));
    free(out);
    const th_cli_case bad[] = {
        {"chat -m " LLAMA_GGUF " --chat-template /nonexistent.jinja </dev/null", 2, "--chat-template"},
        {"chat --synthetic llama-tiny </dev/null", 1, "needs a tokenizer"},
        {"chat -m " LLAMA_GGUF " -n 0 </dev/null", 2, "-n"},
        {"chat </dev/null", 2, "no model"},
    };
    th_expect_cli(bad, sizeof bad / sizeof bad[0]);
}


/* /save then /load in a new process: the reply to the next message and
 * the tokens it reuses from the KV cache equal those of the session that
 * never stopped; a damaged KV record restores the text only (same reply,
 * recomputed), damaged text is refused, another KV dtype is not served. */
#define SAVE_FLAGS "--temp 0 -n 24 --system 'You are a player in a company of actors; answer in the words of the old plays.'"

/* The value after `key` in s (-1 when absent). */
static int int_after(const char *s, const char *key) {
    const char *p = strstr(s, key);
    return p ? atoi(p + strlen(key)) : -1;
}

/* The tokens /stats says were reused from the KV cache (-1 when absent). */
static int reused(const char *s) {
    const char *p = strstr(s, "prompt tokens ");
    p = p ? strchr(p, '(') : NULL;
    return p ? atoi(p + 1) : -1;
}

static void test_kv_cache_dir(void **state) {
    (void)state;
    char *dir = th_tempdir(), *a = NULL, *b = NULL;
    static const char sys[] = "You are the keeper of the royal archive, who answers in the manner of the old plays "
                              "with courtesy and care.";
    int st = th_run_kvlm(&a, "chat -m %s %s --kv-cache-dir %s --system '%s' 2>&1 <<'EOF'\nHello\n/stats\nEOF\n",
                         LLAMA_GGUF, FLAGS, dir, sys);
    assert_int_equal(st, 0);
    assert_int_equal(reused(a), 0);
    const int n_prompt = int_after(a, "prompt tokens");
    assert_true(n_prompt > 32);
    st = th_run_kvlm(&b, "chat -m %s %s --kv-cache-dir %s --system '%s' 2>&1 <<'EOF'\nHello\n/stats\nEOF\n",
                     LLAMA_GGUF, FLAGS, dir, sys);
    assert_int_equal(st, 0);
    /* every whole block but what the lookup leaves to compute, from disk */
    const int want = (n_prompt - 1) / 16 * 16;
    assert_int_equal(reused(b), want);
    char line[120];
    snprintf(line, sizeof line, "0 blocks restored from memory, %d from disk", want / 16);
    assert_non_null(strstr(b, line));
    /* the same reply: the text before the /stats lines */
    const char *ea = strstr(a, "prompt tokens"), *eb = strstr(b, "prompt tokens");
    assert_non_null(ea), assert_non_null(eb);
    assert_int_equal(ea - a, eb - b);
    assert_memory_equal(a, b, (size_t)(ea - a));
    free(a), free(b);
    th_rmtree(dir), free(dir);
}

static void test_save_load_kv(void **state) {
    (void)state;
    char *dir = th_tempdir(), path[600], bad[700];
    snprintf(path, sizeof path, "%s/talk.kvc", dir);
    char *whole = NULL, *loaded = NULL, *out = NULL;
    int st = th_run_kvlm(&whole, "chat -m %s %s 2>&1 <<'EOF'\nHello\n/save %s\nWhat news?\n/stats\nEOF\n",
                         LLAMA_GGUF, SAVE_FLAGS, path);
    assert_int_equal(st, 0);
    const int saved = int_after(whole, "saved 3 messages and the KV of ");
    assert_true(saved >= 16 && saved % 16 == 0);
    st = th_run_kvlm(&loaded, "chat -m %s %s 2>&1 <<'EOF'\n/load %s\nWhat news?\n/stats\nEOF\n", LLAMA_GGUF,
                     SAVE_FLAGS, path);
    assert_int_equal(st, 0);
    char want[200];
    snprintf(want, sizeof want, "loaded 3 messages and the KV of %d tokens from ", saved);
    assert_non_null(strstr(loaded, want));
    assert_non_null(strstr(loaded, "(no prefill)"));
    /* /stats of the second reply: the same prompt, the same tokens reused */
    const int prompt_whole = int_after(whole, "prompt tokens        "), cached_whole = reused(whole);
    assert_true(cached_whole > 0);
    assert_int_equal(int_after(loaded, "prompt tokens        "), prompt_whole);
    assert_int_equal(reused(loaded), cached_whole);
    /* the second reply: from the line after /save's (or /load's) to /stats */
    char *a = strchr(strstr(whole, "saved 3 messages"), '\n'), *b = strchr(strstr(loaded, "(no prefill)"), '\n');
    char *ae = strstr(whole, "\nprompt tokens"), *be = strstr(loaded, "\nprompt tokens");
    assert_true(a && b && ae > a && be > b);
    *ae = 0, *be = 0;
    assert_true(strlen(a) > 10);
    assert_string_equal(a, b);
    size_t len;
    unsigned char *file = (unsigned char *)th_read_file(path, &len);
    assert_non_null(file);
    snprintf(bad, sizeof bad, "%s/bad.kvc", dir);
    /* a bit flip in the KV record: the text loads, the KV is recomputed */
    file[len - 100] ^= 1;
    assert_int_equal(th_write_file(bad, file, len), 0);
    st = th_run_kvlm(&out, "chat -m %s %s 2>&1 <<'EOF'\n/load %s\nWhat news?\n/stats\nEOF\n", LLAMA_GGUF, SAVE_FLAGS,
                     bad);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "loaded 3 messages from "));
    assert_non_null(strstr(out, "KV not restored (restore: checksum mismatch (the record is corrupted))"));
    assert_int_equal(reused(out), 0);
    free(out);
    file[len - 100] ^= 1;
    /* truncated inside the KV record */
    assert_int_equal(th_write_file(bad, file, len - 9), 0);
    st = th_run_kvlm(&out, "chat -m %s %s 2>&1 <<'EOF'\n/load %s\nEOF\n", LLAMA_GGUF, SAVE_FLAGS, bad);
    assert_non_null(strstr(out, "KV not restored (restore: the record ends inside its KV rows (truncated))"));
    free(out);
    /* a bit flip in the text, and a file cut inside it: refused, the conversation stays */
    file[40] ^= 4;
    assert_int_equal(th_write_file(bad, file, len), 0);
    file[40] ^= 4;
    st = th_run_kvlm(&out, "chat -m %s %s 2>&1 <<'EOF'\n/load %s\nEOF\n", LLAMA_GGUF, SAVE_FLAGS, bad);
    assert_non_null(strstr(out, "its text does not match its checksum (corrupted)"));
    free(out);
    assert_int_equal(th_write_file(bad, file, 50), 0);
    st = th_run_kvlm(&out, "chat -m %s %s 2>&1 <<'EOF'\n/load %s\n/load %s/none\nEOF\n", LLAMA_GGUF, SAVE_FLAGS, bad,
                     dir);
    assert_non_null(strstr(out, "the file ends inside its text (truncated)"));
    assert_non_null(strstr(out, "/none: No such file or directory"));
    free(out);
    /* another KV dtype: the KV is not served */
    st = th_run_kvlm(&out, "chat -m %s %s --kv-dtype f32 2>&1 <<'EOF'\n/load %s\nEOF\n", LLAMA_GGUF, SAVE_FLAGS,
                     path);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "KV not restored (restore: the KV was saved as f16, the cache holds f32)"));
    free(out);
    free(file);
    free(whole);
    free(loaded);
    th_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reply_matches_run), cmocka_unit_test(test_system_and_reset),
        cmocka_unit_test(test_multiline_and_save), cmocka_unit_test(test_ctrl_c_stops_reply),
        cmocka_unit_test(test_color), cmocka_unit_test(test_template_file),
        cmocka_unit_test(test_scripted), cmocka_unit_test(test_errors), cmocka_unit_test(test_save_load_kv),
        cmocka_unit_test(test_kv_cache_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
