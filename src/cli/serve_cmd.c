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
#include "cli/session.h"
#include "server/server.h"

static const char *usage =
    "usage: kvlm serve (-m MODEL | --synthetic PRESET) [options]\n"
    "  --host ADDR            numeric address to listen on (default 127.0.0.1: this machine only)\n"
    "  --port N               TCP port (default 8080; 0: any free port, printed at start)\n"
    "  --max-seqs N           sequences in the running batch (default 16)\n"
    "  --kv-blocks N          KV pool size in blocks (default: max-seqs x context)\n"
    "  --kv-mib N             KV pool size in MiB (instead of --kv-blocks)\n"
    "  --max-batch-tokens N   tokens per engine step, prefill chunks included (default 256)\n"
    "  --max-waiting N        requests waiting for admission before 429 (default 64)\n"
    "  --timeout S            seconds a request may take, queueing included (default 600; 0: none)\n"
    "  --max-body BYTES       request body limit; beyond it 413 (default 1048576)\n"
    "  --served-model-name S  the model id clients send (default: the model directory's name)\n"
    "  --chat-template NAME   auto (default), plain, chatml, llama3\n";

typedef struct serve_opts {
    model_flags mf;
    srv_config cfg;
} serve_opts;

static int parse_size(const char *flag, const char *v, size_t *out) {
    uint64_t x;
    if (arg_u64(flag, v, &x)) return -1;
    *out = (size_t)x;
    return 0;
}

static int parse_flag(serve_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    srv_config *c = &o->cfg;
    static const char *const valued[] = {"--host", "--port", "--max-seqs", "--kv-blocks", "--kv-mib",
                                         "--max-batch-tokens", "--max-waiting", "--timeout", "--max-body",
                                         "--served-model-name", "--chat-template"};
    int known = 0;
    for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++) known |= !strcmp(a, valued[k]);
    if (!known) {
        fprintf(stderr, "kvlm serve: unknown argument '%s' (see kvlm serve --help)\n", a);
        return -1;
    }
    if (!(v = arg_value(argc, argv, i))) return -1;
    float f;
    if (!strcmp(a, "--host")) c->host = v;
    else if (!strcmp(a, "--port")) return arg_int(a, v, 0, 65535, &c->port);
    else if (!strcmp(a, "--max-seqs")) return arg_int(a, v, 1, 4096, &c->max_seqs);
    else if (!strcmp(a, "--kv-blocks")) return parse_size(a, v, &c->kv_blocks);
    else if (!strcmp(a, "--kv-mib")) {
        if (arg_float(a, v, 0.001, 1 << 24, &f)) return -1;
        c->kv_mib = f;
    } else if (!strcmp(a, "--max-batch-tokens")) return arg_int(a, v, 1, 1 << 20, &c->max_batch_tokens);
    else if (!strcmp(a, "--max-waiting")) return arg_int(a, v, 1, 1 << 20, &c->max_waiting);
    else if (!strcmp(a, "--timeout")) {
        if (arg_float(a, v, 0, 1e7, &f)) return -1;
        c->timeout = f;
    } else if (!strcmp(a, "--max-body")) return parse_size(a, v, &c->max_body);
    else if (!strcmp(a, "--served-model-name")) c->served_name = v;
    else if (!strcmp(a, "--chat-template")) c->chat_template = v;
    return 0;
}

static int parse(int argc, char **argv, serve_opts *o) {
    memset(o, 0, sizeof *o);
    model_flags_init(&o->mf);
    o->cfg = (srv_config){.port = 8080, .max_seqs = 16, .max_batch_tokens = 256, .max_waiting = 64,
                          .timeout = 600, .max_body = 1 << 20};
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("%s%s", usage, model_flags_help);
            exit(0);
        }
        int r = model_flags_parse(&o->mf, argc, argv, &i);
        if (r < 0 || (r == 0 && parse_flag(o, argc, argv, &i))) return -1;
    }
    if (o->mf.prompt || o->mf.ids) {
        fprintf(stderr, "kvlm serve: -p and --ids do not apply; prompts come with each request\n");
        return -1;
    }
    if (o->cfg.kv_blocks && o->cfg.kv_mib > 0) {
        fprintf(stderr, "kvlm serve: give at most one of --kv-blocks and --kv-mib\n");
        return -1;
    }
    if (o->cfg.max_body < 64) {
        fprintf(stderr, "kvlm serve: --max-body %zu is too small for any request\n", o->cfg.max_body);
        return -1;
    }
    o->cfg.block_size = o->mf.block_size;
    o->cfg.kv_dtype = o->mf.kv_dtype;
    o->cfg.engine = session_engine_options(&o->mf, 0);
    if (o->mf.synthetic && !o->cfg.served_name) o->cfg.served_name = o->mf.synthetic;
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
