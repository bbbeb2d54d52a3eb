/*
 * `kvlm chat`: an interactive conversation with a model in the terminal.
 * Each turn renders the whole conversation with the model's chat template
 * (cli/chat_conversation.h, the renderer of kvlm serve) and generates the
 * reply as `kvlm run` does (cli/generate.h: a one-request scheduler, the
 * same sampling flags), streaming it as it arrives. The KV cache lives for
 * the whole session with its prefix cache on, so each turn reuses the
 * whole blocks of the previous turns' KV whose tokens it starts with and
 * prefills only the rest; with --kv-cache-dir (and --kv-ram-bytes) its
 * tiers keep them past the pool and across runs, so a later chat that
 * starts with the same system prompt restores its KV from disk
 * (docs/kv-tiers.md). Ctrl-C (SIGINT) stops a reply; the input side
 * (terminal keys, continued lines, scripting) is cli/chat_input.h, the
 * slash commands cli/chat_commands.h.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/chat_color.h"
#include "cli/chat_commands.h"
#include "cli/chat_conversation.h"
#include "cli/chat_input.h"
#include "cli/chat_models.h"
#include "cli/chat_reply.h"
#include "cli/commands.h"
#include "cli/generate.h"
#include "app/json_text.h"
#include "cli/options.h"
#include "cli/session.h"

typedef struct chat_opts {
    model_flags mf;
    model_list ml;         /* -m repeated, --alias, --models-dir */
    sampling_flags smp;
    int n, color, verbose, json;
    const char *chat_template, *system;
    const char *reasoning;    /* --reasoning show|hide; NULL: shown on a terminal only */
    const char *grammar, *regex;
    const char *kv_cache_dir; /* the disk tier (docs/kv-tiers.md); NULL: none */
    uint64_t kv_disk_bytes, kv_ram_bytes;
} chat_opts;

static int no_value(const char *flag, const char *v, void *dst) {
    (void)flag, (void)v, (void)dst;
    return 0;
}

static int parse(int argc, char **argv, chat_opts *o) {
    *o = (chat_opts){.n = 256};
    model_flags_init(&o->mf);
    if (model_list_scan(&o->ml, argc, argv, "chat")) return -1;
    if (o->ml.n && !o->mf.model) o->mf.model = o->ml.paths[0];
    sampling_flags_init(&o->smp);
    const cli_opt own[] = {
        CLI_INT("-n", "N", "tokens per reply at most (default 256; the context window also ends one)", &o->n, 1,
                1 << 20),
        CLI_STR("--chat-template", "NAME|FILE",
                "auto (default: the model's own), plain, or a Jinja file (docs/chat-templates.md)",
                &o->chat_template),
        CLI_STR("--system", "TEXT", "the system message to start with (/system changes it)", &o->system),
        CLI_SWITCH("--color", "tint each token by its probability (a terminal only, not with NO_COLOR)", &o->color,
                   1),
        CLI_STR("--reasoning", "show|hide", "show a reasoning model's reasoning before its answer, or not\n"
                "(default: shown when the output is a terminal; /reasoning changes it)", &o->reasoning),
        CLI_STR("--grammar", "FILE", "constrain every reply to the GBNF grammar in FILE (start rule root)", &o->grammar),
        CLI_STR("--regex", "RE", "constrain every reply to the regular expression RE", &o->regex),
        CLI_SWITCH("--verbose", "print each rendered prompt on stderr before its reply", &o->verbose, 1),
        CLI_HEADING("several models (docs/chat.md): -m again for each; /model NAME switches, /models lists"),
        CLI_FN("--alias", "NAME", "the name /model uses for the -m before it (default: its file or directory\n"
               "name without .gguf, .safetensors or .bin)", no_value, NULL),
        CLI_FN("--models-dir", "DIR", "add each model file and each directory with a config.json in DIR", no_value,
               NULL),
        CLI_STR("--kv-cache-dir", "DIR", "reuse KV blocks from DIR and write full blocks there, so a later chat\n"
                "starting with the same system prompt restores it (docs/kv-tiers.md)", &o->kv_cache_dir),
        CLI_U64("--kv-disk-bytes", "BYTES", "bound of --kv-cache-dir (default 1073741824)", &o->kv_disk_bytes),
        CLI_U64("--kv-ram-bytes", "BYTES", "keep KV blocks the pool evicts in this much host memory (default 0)",
                &o->kv_ram_bytes),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "chat",
        .usage = "chat (-m MODEL [-m MODEL [--alias NAME]]... | --models-dir DIR | --synthetic PRESET --tokenizer PATH)\n"
                 "       [options]",
        .about = "Talks with the model: each message gets a reply rendered with the model's chat template,\n"
                 "streamed as it is generated. Commands: /help, /reset, /system TEXT, /stats, /save FILE,\n"
                 "/load FILE, /model NAME, /models, /reasoning, /quit (the first model given starts the chat).\n"
                 "A reasoning model's reasoning is shown apart from its answer (--reasoning). A line\n"
                 "ending in \\ continues the message. Ctrl-C stops a reply; Ctrl-D\n"
                 "or Ctrl-C at an empty prompt exits. When standard input is not a terminal each line is one message\n"
                 "and each reply is written to standard output followed by a newline; with --json each\n"
                 "reply is one line {\"content\", \"finish_reason\", \"prompt_tokens\", \"completion_tokens\"}\n"
                 "(and \"reasoning_content\" when the model reasoned; docs/chat.md).\n",
        .groups = CLI_LOADS_MODEL | CLI_TOKENIZER | CLI_SAMPLING | CLI_JSON,
        .opts = own,
        .mf = &o->mf,
        .smp = &o->smp,
        .json = &o->json,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    if (o->ml.n) o->mf.model = o->ml.paths[0]; /* the parser keeps the last -m */
    if (o->ml.n > 1 && o->mf.synthetic) return cli_usage_error(&spec, "--synthetic is one model: drop the -m models");
    if (o->reasoning && strcmp(o->reasoning, "show") && strcmp(o->reasoning, "hide"))
        return cli_usage_error(&spec, "--reasoning: show or hide");
    if (o->grammar && o->regex) return cli_usage_error(&spec, "--grammar and --regex exclude each other");
    if ((o->ml.n > 1 || o->ml.dir) && o->mf.tokenizer)
        return cli_usage_error(&spec, "--tokenizer works with one model only");
    return 0;
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

/* The reply's text as it arrives: split, shown, collected (chat_reply.h). */
static void on_text(void *user, const char *text, size_t n, float logprob) {
    chat_reply_feed(user, text, n, logprob);
}

/* A reply as one line of JSON (--json). */
static void print_json_reply(FILE *out, const gen_result *g, const chat_reply *cr, int n_prompt) {
    json_t *j = json_pack("{sosssisi}", "content", ts_json_string(cr->answer.data, cr->answer.len), "finish_reason",
                          gen_finish_name(g->finish), "prompt_tokens", n_prompt, "completion_tokens", g->n_ids);
    if (j && cr->reasoning.len)
        json_object_set_new(j, "reasoning_content", ts_json_string(cr->reasoning.data, cr->reasoning.len));
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    fprintf(out, "%s\n", s ? s : "{}");
    free(s);
    json_decref(j);
}

/* One reply to the conversation as it stands (its last message is the
 * user's). Returns 0, 1 when it could not run (the user message is taken
 * back), -1 on an engine error. */
static int reply(chat_state *st, const chat_engine *ce, const chat_opts *o, const kvlm_grammar *grammar, FILE *out,
                 int tty) {
    sbuf text = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    char msg[600];
    if (chat_conv_prompt(&st->conv, &text, &ids, &n, msg, sizeof msg)) {
        fprintf(stderr, "kvlm chat: %s\n", msg);
        chat_conv_pop(&st->conv);
        sbuf_free(&text);
        free(ids);
        return 1;
    }
    if (o->verbose)
        fprintf(stderr, "--- prompt, %zu tokens ---\n%s\n--- end of prompt ---\n", n, text.data ? text.data : "");
    const rc_format split = chat_reply_split(&ce->tpl);
    chat_reply cr;
    const int bad = chat_reply_begin(&cr, split, text.data, text.len, o->json ? NULL : out, st->reasoning, st->dim,
                                     st->color);
    sbuf_free(&text);
    if (bad) {
        fprintf(stderr, "kvlm chat: out of memory\n");
        chat_reply_free(&cr);
        chat_conv_pop(&st->conv);
        free(ids);
        return -1;
    }
    const int n_ctx = ce->c->n_ctx;
    if (n >= (size_t)n_ctx) {
        fprintf(stderr,
                "kvlm chat: the context window is full: the conversation is %zu tokens and the model holds %d, "
                "leaving no room for a reply; /reset starts a new conversation (the last message was not kept)\n",
                n, n_ctx);
        chat_conv_pop(&st->conv);
        chat_reply_free(&cr);
        free(ids);
        return 1;
    }
    const int max_new = o->n < n_ctx - (int)n ? o->n : n_ctx - (int)n;
    gen_request rq = {.prompt = ids, .n_prompt = (int)n, .max_new = max_new, .eos_ids = ce->ends,
                      .n_eos = ce->n_ends, .sampling = o->smp.o, .logprobs = st->color ? -1 : 0, .text = 1,
                      .tok = ce->tok, .stops = o->smp.stops, .n_stops = o->smp.n_stops,
                      .on_text = on_text, .user = &cr, .special_text = chat_reply_special_text(split),
                      .grammar = grammar, .interrupt = &interrupted};
    gen_result g;
    kvlm_error err;
    interrupted = 0;
    int rc = gen_run(ce->e, ce->kv, ce->c->vocab_size, &rq, &g, &err);
    interrupted = 0;
    chat_reply_end(&cr);
    if (rc || cr.failed) {
        if (!rc) snprintf(err.msg, sizeof err.msg, "out of memory");
        chat_reply_free(&cr);
        free(ids);
        fprintf(out, "\n");
        fprintf(stderr, "kvlm chat: %s\n", err.msg);
        gen_result_free(&g);
        chat_conv_pop(&st->conv);
        return -1;
    }
    const int stopped = g.finish == KVLM_FINISH_CANCELLED;
    if (o->json) print_json_reply(out, &g, &cr, (int)n);
    else fprintf(out, "%s\n", stopped && tty ? " [stopped]" : "");
    fflush(out);
    if (stopped && !tty) fprintf(stderr, "kvlm chat: the reply was stopped\n");
    if (g.finish == KVLM_FINISH_LENGTH && (int)n + g.n_ids >= n_ctx)
        fprintf(stderr, "kvlm chat: the context window of %d tokens is full; /reset starts a new conversation\n",
                n_ctx);
    chat_stats_record(&st->last, (int)n, &g);
    int32_t *all = realloc(ids, (n + (size_t)g.n_ids) * sizeof(int32_t)); /* what /save keeps the KV of */
    if (all) {
        memcpy(all + n, g.ids, (size_t)g.n_ids * sizeof(int32_t));
        chat_state_forget_ids(st);
        st->ids = all;
        st->n_ids = (int)n + g.n_ids;
        ids = NULL;
    }
    free(ids);
    /* the answer is the content; the reasoning goes where the template reads it */
    rc = chat_conv_add_reply(&st->conv, cr.answer.data ? cr.answer.data : "", cr.answer.len, cr.reasoning.data,
                             cr.reasoning.len);
    chat_reply_free(&cr);
    gen_result_free(&g);
    if (rc) fprintf(stderr, "kvlm chat: out of memory\n");
    return rc ? -1 : 0;
}

/* The grammar of --grammar or --regex into *g (NULL without one). Returns
 * 0, or the exit status after printing why it could not be built. */
static int load_grammar(const chat_opts *o, kvlm_grammar **g) {
    kvlm_error err = {0};
    *g = NULL;
    if (o->regex) {
        *g = kvlm_grammar_from_regex(o->regex, strlen(o->regex), &err);
    } else if (o->grammar) {
        size_t len = 0;
        char *text = arg_read_file("--grammar", o->grammar, &len);
        if (!text) return EXIT_USAGE;
        *g = kvlm_grammar_from_gbnf(text, len, &err);
        free(text);
    } else {
        return 0;
    }
    if (*g) return 0;
    fprintf(stderr, "kvlm chat: %s\n", err.msg);
    return EXIT_USAGE;
}

static void banner(const chat_engine *ce, const chat_opts *o) {
    const kvlm_config *c = ce->c;
    fprintf(stderr, "kvlm chat: model %s (%s, %d layers, context %d tokens), %s\n",
            o->mf.model ? o->mf.model : o->mf.synthetic, c->arch, c->n_layer, c->n_ctx, kvlm_tokenizer_source(ce->tok));
    if (o->ml.n > 1) {
        char name[256];
        fprintf(stderr, "kvlm chat: %d models (/models lists them, /model NAME switches); this one is %s\n", o->ml.n,
                model_list_name(&o->ml, 0, name, sizeof name));
    }
    fprintf(stderr, "kvlm chat: chat template %s\n", ce->tpl.origin);
    char why[160];
    fprintf(stderr, "kvlm chat: KV cache %s, %d tokens per block, reused across turns; %d threads (%s), %s kernels\n",
            kvlm_dtype_name(o->mf.kv_dtype), o->mf.block_size, kvlm_engine_threads(ce->e),
            session_threads_why(&o->mf, why, sizeof why), kvlm_isa_name(kvlm_engine_isa(ce->e)));
}

/* The conversation loop on the input; returns the exit status. */
static int converse(chat_state *st, chat_models *cm, const chat_opts *o, const kvlm_grammar *grammar,
                    chat_input *in) {
    if (in->tty) fputs("Type a message; /help lists the commands, Ctrl-D exits.\n", in->echo);
    st->info = in->tty ? in->echo : stderr;
    for (;;) {
        char *line;
        size_t len;
        chat_read r = chat_input_read(in, &line, &len);
        if (r == CHAT_READ_END) return 0;
        if (r == CHAT_READ_ERROR) {
            fprintf(stderr, "kvlm chat: cannot read the input\n");
            return 1;
        }
        if (line[0] == '/') {
            chat_command(st, line);
            free(line);
            if (st->quit) return 0;
            continue;
        }
        if (len == 0 && in->tty) {
            free(line);
            continue;
        }
        int rc = chat_conv_add(&st->conv, "user", line, len);
        free(line);
        if (rc) {
            fprintf(stderr, "kvlm chat: out of memory\n");
            return 1;
        }
        if (reply(st, chat_models_engine(cm), o, grammar, stdout, in->tty) < 0) return 1;
    }
}

int cli_chat(int argc, char **argv) {
    chat_opts o;
    if (parse(argc, argv, &o)) {
        model_list_free(&o.ml);
        return EXIT_USAGE;
    }
    chat_models cm = {.list = &o.ml, .mf = o.mf, .tpl_name = o.chat_template,
                      .tiers = {.dir = o.kv_cache_dir, .disk_bytes = (size_t)o.kv_disk_bytes,
                                .ram_bytes = (size_t)o.kv_ram_bytes}};
    chat_engine *ce = chat_models_engine(&cm);
    chat_state st = {.kv_dtype = o.mf.kv_dtype, .block_size = o.mf.block_size, .models = &cm};
    kvlm_grammar *grammar = NULL;
    int rc = load_grammar(&o, &grammar);
    if (!rc) rc = chat_engine_open(ce, &o.mf, o.chat_template, &cm.tiers);
    if (rc) goto out;
    rc = 1;
    st.m = ce->ss.m;
    st.kv = ce->kv;
    st.template_origin = ce->tpl.origin;
    if (chat_conv_init(&st.conv, &ce->tpl, ce->tok, o.system)) {
        fprintf(stderr, "kvlm chat: out of memory\n");
        goto out;
    }
    chat_engine_set_ends(ce, st.conv.turn_ends, st.conv.n_turn_ends);
    st.color = o.color && chat_color_usable(stdout);
    st.dim = chat_color_usable(stdout);
    st.reasoning = o.reasoning ? !strcmp(o.reasoning, "show") : isatty(fileno(stdout));
    banner(ce, &o);
    struct sigaction sa = {.sa_handler = on_sigint}; /* no SA_RESTART: a blocked read returns */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    chat_input in;
    chat_input_open(&in, stdin, isatty(fileno(stdout)) ? stdout : stderr); /* prompts never go to a file */
    rc = converse(&st, &cm, &o, grammar, &in);
    chat_input_close(&in);
out:
    kvlm_grammar_free(grammar);
    chat_conv_free(&st.conv);
    chat_state_forget_ids(&st);
    chat_engine_close(&cm.slot[0]);
    chat_engine_close(&cm.slot[1]);
    model_list_free(&o.ml);
    return rc;
}
