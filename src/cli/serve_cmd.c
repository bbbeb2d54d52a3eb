/*
 * `kvlm serve`: an OpenAI-compatible HTTP server with continuous batching
 * (see docs/server.md). Parses the flags, starts the server, prints where
 * it listens (stderr, flushed: scripts and tests read the port from that
 * line when --port 0 asks for any free one), loads the model and its
 * tokenizer on a loader thread while /health answers 503 "loading",
 * attaches the model (a load failure exits non-zero; SIGINT or SIGTERM
 * while loading closes the port and exits 0 at once), prints "ready" and
 * runs until SIGINT or SIGTERM: it then stops accepting,
 * lets the requests in flight finish for up to --drain-timeout seconds,
 * ends the rest and exits 0. With several models (-m repeated, --alias,
 * --models-dir) the server is ready at once and loads each model on its
 * first request through load_model below (server/models.h). SIGHUP
 * reopens the access log file. The
 * descriptor limit is raised to its hard limit at start (connections are
 * kept under it, see docs/server.md).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/draft.h"
#include "cli/model_list.h"
#include "cli/options.h"
#include "cli/session.h"
#include "server/server.h"

typedef struct serve_opts {
    model_flags mf;
    model_list ml;             /* several models: -m, --alias, --models-dir */
    char id[256];              /* one model file's id: its name without .gguf or .bin */
    srv_config cfg;
    double drain_timeout;
    const char *key_file, *log_format, *pooling;
    draft_flags draft;
    char key[512];             /* from --api-key-file or KVLM_API_KEY */
} serve_opts;

static int add_origin(const char *flag, const char *v, void *dst) {
    srv_config *c = dst;
    if (c->n_cors >= SRV_MAX_CORS) {
        fprintf(stderr, "kvlm serve: %s: at most %d origins\n", flag, SRV_MAX_CORS);
        return -1;
    }
    if (!*v) {
        fprintf(stderr, "kvlm serve: %s: an empty origin\n", flag);
        return -1;
    }
    c->cors[c->n_cors++] = v;
    return 0;
}

/* The key from a file: its first line, trailing white space removed. */
static int read_key_file(const char *path, char *key, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kvlm serve: --api-key-file: cannot open '%s'\n", path);
        return -1;
    }
    key[0] = 0;
    char *ok = fgets(key, (int)cap, f);
    fclose(f);
    size_t n = ok ? strlen(key) : 0;
    while (n && (key[n - 1] == '\n' || key[n - 1] == '\r' || key[n - 1] == ' ' || key[n - 1] == '\t')) key[--n] = 0;
    if (!n) {
        fprintf(stderr, "kvlm serve: --api-key-file: '%s' holds no key on its first line\n", path);
        return -1;
    }
    return 0;
}

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

/* One model given as a .gguf or llm.c .bin file is named as it would be
 * among several (its file name without the extension), not after the
 * directory holding it; a model directory, config.json or .safetensors file
 * keeps its directory's name. Returns 1 and fills id, or 0. */
static int single_file_id(const char *path, char *id, size_t cap) {
    const size_t n = path ? strlen(path) : 0;
    if (!(n > 5 && !strcmp(path + n - 5, ".gguf")) && !(n > 4 && !strcmp(path + n - 4, ".bin"))) return 0;
    model_list_stem(path, id, cap);
    return *id != 0;
}

/* The API key: --api-key, else --api-key-file, else $KVLM_API_KEY. */
static int api_key(serve_opts *o) {
    srv_config *c = &o->cfg;
    if (c->api_key && o->key_file) {
        fprintf(stderr, "kvlm serve: give --api-key or --api-key-file, not both\n");
        return -1;
    }
    if (!c->api_key && o->key_file) {
        if (read_key_file(o->key_file, o->key, sizeof o->key)) return -1;
        c->api_key = o->key;
    }
    const char *env = getenv("KVLM_API_KEY");
    if (!c->api_key && env && *env) c->api_key = env;
    if (c->api_key && !*c->api_key) {
        fprintf(stderr, "kvlm serve: --api-key: the key is empty\n");
        return -1;
    }
    if ((c->protect_health || c->protect_metrics) && !c->api_key) {
        fprintf(stderr, "kvlm serve: --protect-health and --protect-metrics need an API key\n");
        return -1;
    }
    return 0;
}

static int no_value(const char *flag, const char *v, void *dst) {
    (void)flag, (void)v, (void)dst;
    return 0;
}

static int parse(int argc, char **argv, serve_opts *o) {
    memset(o, 0, sizeof *o);
    model_flags_init(&o->mf);
    draft_flags_init(&o->draft);
    if (model_list_scan(&o->ml, argc, argv, "serve")) return -1;
    /* the shared parser's check wants a model: the first one */
    if (o->ml.n && !o->mf.model) o->mf.model = o->ml.paths[0];
    srv_config *c = &o->cfg;
    *c = (srv_config){.port = 8080, .max_seqs = 16, .max_batch_tokens = 128, .max_prefill_tokens = 64,
                      .max_waiting = 64, .timeout = 600, .max_body = 1 << 20, .max_connections = 512,
                      .read_timeout = 10, .idle_timeout = 30, .agent_port = -1};
    o->drain_timeout = 30;
    const cli_opt own[] = {
        CLI_STR("--host", "ADDR", "address or host name to listen on (default 127.0.0.1: this machine only)",
                &c->host),
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
        CLI_FN("--kv-ram-bytes", "BYTES", "keep KV blocks the pool evicts in this much host memory (default 0:\n"
               "none; docs/kv-tiers.md)", parse_size, &c->kv_ram_bytes),
        CLI_STR("--kv-cache-dir", "DIR", "write every full KV block to DIR and reuse it across restarts and\n"
                "replicas sharing DIR (default: none; docs/kv-tiers.md)", &c->kv_cache_dir),
        CLI_FN("--kv-disk-bytes", "BYTES", "bound of --kv-cache-dir, least recently used files removed first\n"
               "(default 1073741824)", parse_size, &c->kv_disk_bytes),
        CLI_STR("--served-model-name", "S", "the model id clients send (default: the model directory's name)",
                &c->served_name),
        CLI_HEADING("several models (docs/server.md): -m again for each model; requests pick one by \"model\";\n"
                    "without \"model\" the first one serves"),
        CLI_FN("--alias", "NAME", "the id clients send for the -m before it (default: its file or directory\n"
               "name without extension; that name is still accepted)", no_value, NULL),
        CLI_FN("--models-dir", "DIR", "serve each model file (.gguf, .safetensors, .bin) and each directory with\n"
               "a config.json in DIR, after the -m models", no_value, NULL),
        CLI_FN("--max-loaded-bytes", "BYTES", "with several models: weights and KV pools loaded at once; models load\n"
               "on first use and the least recently used idle one unloads to make room\n"
               "(default 0: no limit)", parse_size, &c->max_loaded_bytes),
        CLI_STR("--chat-template", "NAME|FILE",
                "auto (default: the model's own), plain, or a Jinja file (docs/chat-templates.md)", &c->chat_template),
        CLI_STR("--pooling", "P",
                "/v1/embeddings pooling: mean, cls or last (default: the model's files', GGUF\n"
                "pooling_type or 1_Pooling/config.json, else last)", &o->pooling),
        CLI_HEADING("speculative decoding, the default of requests without \"kvlm_speculation\" (without\n"
                    "flags: prompt lookup, --draft-ngram 3 --draft-k 4, where it pays; docs/speculative.md):"),
        DRAFT_OPTS(&o->draft),
        DRAFT_FIXED_OPT(&o->draft),
        CLI_SWITCH("--no-draft", "no speculation by default", &o->draft.off, 1),
        CLI_HEADING("connections:"),
        CLI_INT("--max-connections", "N",
                "connections open at once; beyond it new ones are closed at once (default 512,\n"
                "at most the descriptor limit - 80)",
                &c->max_connections, 1, 1 << 20),
        CLI_INT("--max-connections-per-ip", "N", "connections per client address (default 0: no such limit)",
                &c->max_per_ip, 0, 1 << 20),
        CLI_FN("--read-timeout", "S", "seconds a client has to send a request, headers and body (default 10; 0: none)",
               parse_seconds, &c->read_timeout),
        CLI_FN("--idle-timeout", "S",
               "seconds a connection may make no progress: idle keep-alive, a client that stops\n"
               "reading (default 30; 0: none); requests waiting for the engine are exempt",
               parse_seconds, &c->idle_timeout),
        CLI_FN("--drain-timeout", "S", "on SIGTERM, seconds requests in flight may take to finish (default 30)",
               parse_seconds, &o->drain_timeout),
        CLI_HEADING("behind a load balancer (docs/deploy.md):"),
        CLI_STR("--replica-id", "ID",
                "this replica's name in the X-Kvlm-Replica header and kvlm_replica_info\n"
                "(default: host name:port; letters, digits and . _ : -, at most 63)",
                &c->replica_id),
        CLI_INT("--agent-port", "N",
                "answer HAProxy's agent check on this TCP port (0: any free port, printed at\n"
                "start): \"ready up W%\" from the free KV and queue share, \"drain\" on SIGTERM",
                &c->agent_port, 0, 65535),
        CLI_HEADING("security and logging:"),
        CLI_STR("--api-key", "KEY", "require 'Authorization: Bearer KEY' (also --api-key-file FILE, $KVLM_API_KEY)",
                &c->api_key),
        CLI_STR("--api-key-file", "FILE", "the API key: the first line of FILE", &o->key_file),
        CLI_SWITCH("--protect-metrics", "/metrics needs the key too (default: open)", &c->protect_metrics, 1),
        CLI_SWITCH("--protect-health", "/health needs the key too (default: open)", &c->protect_health, 1),
        CLI_FN("--cors-origin", "ORIGIN", "allow browser pages from ORIGIN (repeatable; * for any)", add_origin, c),
        CLI_STR("--access-log", "FILE", "access log file (default: stderr; off: none); SIGHUP reopens it",
                &c->access_log),
        CLI_STR("--log-format", "F", "access log lines: text (default) or json", &o->log_format),
        CLI_HEADING("web page:"),
        CLI_SWITCH("--no-web", "serve no page at / (default: the playground, token, engine and measure views,\n"
                   "docs/web.md)", &c->no_web, 1),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "serve",
        .usage = "serve (-m MODEL [-m MODEL [--alias NAME]]... | --models-dir DIR | --synthetic PRESET) [options]",
        .about = "An OpenAI-compatible HTTP server with continuous batching (docs/server.md).\n",
        .groups = CLI_LOADS_MODEL | CLI_TOKENIZER | CLI_KV_POOL,
        .unused = "prompts and sampling settings come with each request",
        .opts = own,
        .notes = "The KV pool defaults to max-seqs x the context window.\n",
        .mf = &o->mf,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    if (c->max_body < 64) return cli_usage_error(&spec, "--max-body %zu is too small for any request", c->max_body);
    if (o->log_format && strcmp(o->log_format, "text") && strcmp(o->log_format, "json"))
        return cli_usage_error(&spec, "--log-format: '%s' is not text or json", o->log_format);
    c->log_json = o->log_format && !strcmp(o->log_format, "json");
    if (c->replica_id) {
        size_t n = strlen(c->replica_id), bad = strspn(c->replica_id, REPLICA_CHARS);
        if (!n || n > 63 || bad != n)
            return cli_usage_error(&spec, "--replica-id '%s': give 1 to 63 letters, digits or . _ : -",
                                   c->replica_id);
    }
    if (o->pooling) {
        kvlm_pooling pool;
        kvlm_error err;
        if (kvlm_pooling_parse(o->pooling, &pool, &err) || pool == KVLM_POOLING_NONE)
            return cli_usage_error(&spec, "--pooling '%s': give mean, cls or last", o->pooling);
        c->pooling = pool;
    }
    if (api_key(o)) return -1;
    if (draft_flags_check(&o->draft, "serve", 1)) return -1;
    c->speculation = draft_speculation(&o->draft, 1);
    c->kv_blocks = (size_t)o->mf.kv_blocks;
    c->kv_mib = o->mf.kv_mib;
    c->block_size = o->mf.block_size;
    c->kv_dtype = o->mf.kv_dtype;
    c->engine = session_engine_options(&o->mf);
    if (o->mf.synthetic && !c->served_name) c->served_name = o->mf.synthetic;
    if (o->ml.n == 1 && o->ml.aliases[0] && !c->served_name) c->served_name = o->ml.aliases[0];
    if (o->ml.n == 1 && !o->ml.dir && !c->served_name && single_file_id(o->ml.paths[0], o->id, sizeof o->id))
        c->served_name = o->id;
    if (o->ml.n > 1 || o->ml.dir) {
        if (o->mf.synthetic) return cli_usage_error(&spec, "--synthetic serves one model: drop the -m models");
        if (c->served_name) return cli_usage_error(&spec, "--served-model-name names one model: give --alias after each -m");
        if (o->draft.model) return cli_usage_error(&spec, "--draft works with one model only");
        if (o->mf.tokenizer) return cli_usage_error(&spec, "--tokenizer works with one model only");
    }
    return 0;
}

/* The model loads on a thread of its own while the main thread answers
 * signals; it tells the main thread it is done with SIGUSR1. */
typedef struct loader {
    const model_flags *mf;
    const char *draft_path;    /* --draft */
    kvlm_model *draft;
    pthread_t main;
    cli_session ss;
    int rc;
    double seconds;
    pthread_mutex_t mu;
    int done;
} loader;

static void *load_main(void *arg) {
    loader *l = arg;
    /* Test hook (tests/test_server_ops.c, tests/test_server_replica.c):
     * wait until this file exists before loading, so a test sees the
     * loading state as long as it needs. */
    const char *gate = getenv("KVLM_TEST_LOAD_GATE");
    while (gate && *gate && access(gate, F_OK)) usleep(10000);
    const double t0 = kvlm_now();
    int rc = session_open(&l->ss, l->mf, 0);
    if (!rc && l->draft_path && !(l->draft = cli_load_model(l->draft_path, NULL, KVLM_F32, l->mf))) rc = 1;
    pthread_mutex_lock(&l->mu);
    l->rc = rc;
    l->seconds = kvlm_now() - t0;
    l->done = 1;
    pthread_mutex_unlock(&l->mu);
    pthread_kill(l->main, SIGUSR1);
    return NULL;
}

static int load_done(loader *l) {
    pthread_mutex_lock(&l->mu);
    const int d = l->done;
    pthread_mutex_unlock(&l->mu);
    return d;
}

/* Waits for SIGINT or SIGTERM (returned), reopening the log on SIGHUP;
 * with `l`, returns 0 as soon as the model is loaded. */
static int wait_signal(srv *s, const sigset_t *set, loader *l) {
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig)) continue;
        if (sig == SIGINT || sig == SIGTERM) return sig;
        if (sig == SIGHUP) srv_reopen_log(s);
        if (l && load_done(l)) return 0;
    }
}

/* A model's default id: its file or directory name, without a model
 * file's extension. */
/* The server's loader of several models (on a thread of the server's): a
 * session per model, with the flags every model shares. */
static int load_model(void *ctx, const char *path, kvlm_model **m, const kvlm_tokenizer **tok, void **handle,
                      kvlm_error *err) {
    const model_flags *shared = ctx;
    /* Test hook, as in load_main below (tests/test_server_models.c): each
     * load waits until this file exists. */
    const char *gate = getenv("KVLM_TEST_LOAD_GATE");
    while (gate && *gate && access(gate, F_OK)) usleep(10000);
    model_flags mf = *shared;
    mf.model = path;
    mf.synthetic = NULL;
    cli_session *ss = calloc(1, sizeof *ss);
    if (!ss) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    if (session_open(ss, &mf, 0)) {
        session_close(ss);
        free(ss);
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "'%s' did not open (the server's log says why)", path);
    }
    *m = ss->m;
    *tok = ss->tok;
    *handle = ss;
    return 0;
}

static void unload_model(void *ctx, void *handle) {
    (void)ctx;
    cli_session *ss = handle;
    if (!ss) return;
    session_close(ss);
    free(ss);
}

/* Serves several models until SIGINT or SIGTERM: the server is ready at
 * once and loads each model on its first request. */
static int serve_models(serve_opts *o, srv *s, const sigset_t *set) {
    kvlm_error err;
    for (int i = 0; i < o->ml.n; i++) {
        char name[256];
        model_list_stem(o->ml.paths[i], name, sizeof name);
        const char *id = o->ml.aliases[i] ? o->ml.aliases[i] : name;
        if (srv_add_model(s, id, o->ml.aliases[i] ? name : NULL, o->ml.paths[i], &err)) {
            fprintf(stderr, "kvlm serve: %s\n", err.msg);
            return err.code == KVLM_ERR_ARG ? EXIT_USAGE : 1;
        }
    }
    srv_set_loader(s, load_model, unload_model, &o->mf);
    if (srv_start(s, &err)) {
        fprintf(stderr, "kvlm serve: %s\n", err.msg);
        return err.code == KVLM_ERR_ARG ? EXIT_USAGE : 1;
    }
    if (srv_attach_models(s, &err)) {
        fprintf(stderr, "kvlm serve: %s\n", err.msg);
        srv_stop(s);
        return 1;
    }
    const char *addr = srv_address(s);
    int v6 = strchr(addr, ':') != NULL;
    fprintf(stderr, "kvlm serve: listening on http://%s%s%s:%d, %d models, each loaded on its first request\n",
            v6 ? "[" : "", addr, v6 ? "]" : "", srv_port(s), o->ml.n);
    if (srv_agent_port(s) >= 0)
        fprintf(stderr, "kvlm serve: agent check on %s%s%s:%d, replica '%s'\n", v6 ? "[" : "", addr, v6 ? "]" : "",
                srv_agent_port(s), srv_replica(s));
    for (int i = 0; i < o->ml.n; i++) {
        char name[256];
        model_list_stem(o->ml.paths[i], name, sizeof name);
        fprintf(stderr, "kvlm serve: model '%s'%s%s%s: %s%s\n", o->ml.aliases[i] ? o->ml.aliases[i] : name,
                o->ml.aliases[i] ? " (also '" : "", o->ml.aliases[i] ? name : "", o->ml.aliases[i] ? "')" : "", o->ml.paths[i],
                i ? "" : " (the default: requests without \"model\")");
    }
    if (o->cfg.max_loaded_bytes)
        fprintf(stderr, "kvlm serve: up to %.1f MB of weights and KV pools loaded at once (--max-loaded-bytes)\n",
                (double)o->cfg.max_loaded_bytes / 1e6);
    fprintf(stderr, "kvlm serve: ready\n");
    fflush(stderr);
    const int sig = wait_signal(s, set, NULL);
    fprintf(stderr, "kvlm serve: %s, draining (up to %gs)\n", sig == SIGINT ? "interrupted" : "terminated",
            o->drain_timeout);
    fflush(stderr);
    if (srv_drain(s, o->drain_timeout))
        fprintf(stderr, "kvlm serve: requests still running after %gs are ended\n", o->drain_timeout);
    srv_stop(s);
    return 0;
}

int cli_serve(int argc, char **argv) {
    serve_opts o;
    if (parse(argc, argv, &o)) {
        model_list_free(&o.ml);
        return EXIT_USAGE;
    }
    /* SIGINT, SIGTERM, SIGHUP and the loader's SIGUSR1 go to the main
     * thread only (sigwait): this mask is set before any thread starts
     * (the HTTP thread, the loader, OpenMP's), so every thread inherits
     * it. SIGPIPE from a closed socket is not fatal. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    /* Every connection is a descriptor: take all the process may have. */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    signal(SIGPIPE, SIG_IGN);
    kvlm_error err;
    if (o.ml.n > 1 || o.ml.dir) {
        srv *s = srv_create(&o.cfg, &err);
        int rc = s ? serve_models(&o, s, &set) : 1;
        if (!s) fprintf(stderr, "kvlm serve: %s\n", err.msg);
        srv_free(s);
        model_list_free(&o.ml);
        return rc;
    }
    /* Listen first: /health says "loading" while the model loads. */
    srv *s = srv_create(&o.cfg, &err);
    if (!s || srv_start(s, &err)) {
        fprintf(stderr, "kvlm serve: %s\n", err.msg);
        srv_free(s);
        return err.code == KVLM_ERR_ARG ? EXIT_USAGE : 1;
    }
    const char *addr = srv_address(s);
    int v6 = strchr(addr, ':') != NULL;
    fprintf(stderr, "kvlm serve: listening on http://%s%s%s:%d, loading the model\n", v6 ? "[" : "", addr,
            v6 ? "]" : "", srv_port(s));
    if (srv_agent_port(s) >= 0)
        fprintf(stderr, "kvlm serve: agent check on %s%s%s:%d, replica '%s'\n", v6 ? "[" : "", addr, v6 ? "]" : "",
                srv_agent_port(s), srv_replica(s));
    fflush(stderr);
    loader l = {.mf = &o.mf, .main = pthread_self(), .draft_path = o.draft.model};
    pthread_mutex_init(&l.mu, NULL);
    pthread_t lt;
    int rc = pthread_create(&lt, NULL, load_main, &l);
    if (rc) {
        fprintf(stderr, "kvlm serve: cannot start the loading thread: %s\n", strerror(rc));
        srv_stop(s);
        srv_free(s);
        return 1;
    }
    int sig = wait_signal(s, &set, &l);
    if (sig) {
        /* Nothing was served: close the port and exit without waiting for
         * the load (it may take minutes). */
        fprintf(stderr, "kvlm serve: %s while loading the model, exiting\n", sig == SIGINT ? "interrupted" : "terminated");
        srv_stop(s);
        srv_free(s);
        fflush(stderr);
        _exit(0);
    }
    pthread_join(lt, NULL);
    pthread_mutex_destroy(&l.mu);
    cli_session *ss = &l.ss;
    srv_set_draft(s, l.draft);
    if (l.rc || srv_attach(s, ss->m, ss->tok, &err)) {
        if (!l.rc) fprintf(stderr, "kvlm serve: %s\n", err.msg);
        fprintf(stderr, "kvlm serve: the model did not load, exiting\n");
        srv_stop(s);
        srv_free(s);
        session_close(ss);
        kvlm_model_free(l.draft);
        return l.rc ? l.rc : err.code == KVLM_ERR_ARG ? EXIT_USAGE : 1;
    }
    srv_describe(s, stderr);
    if (!o.cfg.no_web)
        fprintf(stderr, "kvlm serve: web page at http://%s%s%s:%d/ (docs/web.md)\n", v6 ? "[" : "", addr, v6 ? "]" : "",
                srv_port(s));
    fprintf(stderr, "kvlm serve: ready (the model loaded in %.2fs)\n", l.seconds);
    fflush(stderr);
    sig = wait_signal(s, &set, NULL);
    fprintf(stderr, "kvlm serve: %s, draining (up to %gs)\n", sig == SIGINT ? "interrupted" : "terminated",
            o.drain_timeout);
    fflush(stderr);
    if (srv_drain(s, o.drain_timeout))
        fprintf(stderr, "kvlm serve: requests still running after %gs are ended\n", o.drain_timeout);
    srv_stop(s);
    srv_free(s);
    session_close(ss);
    kvlm_model_free(l.draft);
    return 0;
}
