/*
 * `kvlm serve`: an OpenAI-compatible HTTP server with continuous batching
 * (see docs/server.md). Parses the flags, loads the model and its
 * tokenizer, starts the server, prints where it listens (stderr, flushed:
 * scripts and tests read the port from that line when --port 0 asks for
 * any free one) and runs until SIGINT or SIGTERM, then drains and exits 0.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/session.h"
#include "server/server.h"

typedef struct serve_opts {
    model_flags mf;
    srv_config cfg;
} serve_opts;

static int parse_size(const char *flag, const char *v, void *dst) {
    uint64_t x;
    if (arg_u64(flag, v, &x)) return -1;
    *(size_t *)dst = (size_t)x;
    return 0;
}

static int parse_seconds(const char *flag, const char *v, void *dst) {
    float f;
    if (arg_float(flag, v, 0, 1e7, &f)) return -1;
    *(double *)dst = f;
    return 0;
}

static int parse(int argc, char **argv, serve_opts *o) {
    memset(o, 0, sizeof *o);
    model_flags_init(&o->mf);
    srv_config *c = &o->cfg;
    *c = (srv_config){.port = 8080, .max_seqs = 16, .max_batch_tokens = 128, .max_prefill_tokens = 64,
                      .max_waiting = 64, .timeout = 600, .max_body = 1 << 20};
    const cli_opt own[] = {
        CLI_STR("--host", "ADDR", "numeric address to listen on (default 127.0.0.1: this machine only)", &c->host),
        CLI_INT("--port", "N", "TCP port (default 8080; 0: any free port, printed at start)", &c->port, 0, 65535),
        CLI_INT("--max-seqs", "N", "sequences in the running batch (default 16)", &c->max_seqs, 1, 4096),
        CLI_INT("--max-batch-tokens", "N", "tokens per engine step, prefill chunks included (default 128)",
                &c->max_batch_tokens, 1, 1 << 20),
        CLI_INT("--max-prefill-tokens", "N",
                "prompt tokens per engine step, within --max-batch-tokens; running streams' decode tokens do not "
                "count (default 64; 0: no limit of its own)",
                &c->max_prefill_tokens, 0, 1 << 20),
        CLI_INT("--max-waiting", "N", "requests waiting for admission before 429 (default 64)", &c->max_waiting, 1,
                1 << 20),
        CLI_FN("--timeout", "S", "seconds a request may take, queueing included (default 600; 0: none)",
               parse_seconds, &c->timeout),
        CLI_FN("--max-body", "BYTES", "request body limit; beyond it 413 (default 1048576)", parse_size,
               &c->max_body),
        CLI_STR("--served-model-name", "S", "the model id clients send (default: the model directory's name)",
                &c->served_name),
        CLI_STR("--chat-template", "NAME|FILE",
                "auto (default: the model's own), plain, or a Jinja file (docs/chat-templates.md)", &c->chat_template),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "serve",
        .usage = "serve (-m MODEL | --synthetic PRESET) [options]",
        .about = "An OpenAI-compatible HTTP server with continuous batching (docs/server.md).\n",
        .groups = CLI_LOADS_MODEL | CLI_TOKENIZER | CLI_KV_POOL,
        .unused = "prompts and sampling settings come with each request",
        .opts = own,
        .notes = "The KV pool defaults to max-seqs x the context window.\n",
        .mf = &o->mf,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    if (c->max_body < 64) return cli_usage_error(&spec, "--max-body %zu is too small for any request", c->max_body);
    c->kv_blocks = (size_t)o->mf.kv_blocks;
    c->kv_mib = o->mf.kv_mib;
    c->block_size = o->mf.block_size;
    c->kv_dtype = o->mf.kv_dtype;
    c->engine = session_engine_options(&o->mf);
    if (o->mf.synthetic && !c->served_name) c->served_name = o->mf.synthetic;
    return 0;
}

int cli_serve(int argc, char **argv) {
    serve_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    /* SIGINT and SIGTERM go to the main thread only (sigwait below): this
     * mask is set before anything starts a thread (loading a model may
     * start OpenMP's), so every thread inherits it. SIGPIPE from a closed
     * socket is not fatal. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    cli_session ss;
    int rc = session_open(&ss, &o.mf, 0);
    if (rc) {
        session_close(&ss);
        return rc;
    }
    kvlm_error err;
    srv *s = srv_create(ss.m, ss.tok, &o.cfg, &err);
    if (!s || srv_start(s, &err)) {
        fprintf(stderr, "kvlm serve: %s\n", err.msg);
        srv_free(s);
        session_close(&ss);
        return err.code == KVLM_ERR_ARG ? EXIT_USAGE : 1;
    }
    srv_describe(s, stderr);
    const char *host = o.cfg.host ? o.cfg.host : "127.0.0.1";
    int v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "kvlm serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", host, v6 ? "]" : "", srv_port(s));
    fflush(stderr);
    int sig = 0;
    sigwait(&set, &sig);
    fprintf(stderr, "kvlm serve: %s, stopping\n", sig == SIGINT ? "interrupted" : "terminated");
    srv_stop(s);
    srv_free(s);
    session_close(&ss);
    return 0;
}
