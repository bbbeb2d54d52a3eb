/*
 * /metrics of a server with several models (models.h): the server-wide
 * families (replica, state, HTTP responses and connections) come from the
 * front's own metrics; every other family is each model's, its samples
 * labelled model="ID", grouped under one HELP and TYPE as Prometheus'
 * text format requires; then which models are loaded and the bytes they
 * hold. Works on the rendered text of metrics.c, so a family added there
 * is labelled here without change. Does not render a single model's
 * server (routes.c renders metrics.c's text as it is).
 */
#include "server/metrics_models.h"

#include <stdlib.h>
#include <string.h>

#include "server/models.h"

static const char *const server_wide[] = {"kvlm_replica_info", "kvlm_loading", "kvlm_ready",
                                          "kvlm_http_responses_total", "kvlm_http_connections_open",
                                          "kvlm_http_connections_refused_total",
                                          "kvlm_http_connections_timed_out_total", NULL};

static int is_server_wide(const char *name, size_t n) {
    for (int i = 0; server_wide[i]; i++)
        if (strlen(server_wide[i]) == n && !strncmp(server_wide[i], name, n)) return 1;
    return 0;
}

/* A family of rendered text: from its "# HELP" line to the next one. */
typedef struct family {
    const char *name, *start, *end; /* name: in the HELP line, up to a space */
    size_t name_len;
} family;

/* Splits text into families; returns how many (at most cap). */
static int families(const char *text, family *f, int cap) {
    int n = 0;
    const char *p = text;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        const char *next = nl ? nl + 1 : p + strlen(p);
        if (!strncmp(p, "# HELP ", 7) && n < cap) {
            if (n) f[n - 1].end = p;
            f[n].name = p + 7;
            f[n].name_len = strcspn(p + 7, " \n");
            f[n].start = p;
            f[n].end = NULL;
            n++;
        }
        p = next;
    }
    if (n) f[n - 1].end = text + strlen(text);
    return n;
}

/* The lines of one family; headers only when `headers`, samples only when
 * `samples`, each sample labelled model="label" when label is not NULL. */
static void copy_family(sbuf *o, const family *f, int headers, int samples, const char *label) {
    for (const char *p = f->start; p < f->end;) {
        const char *nl = memchr(p, '\n', (size_t)(f->end - p));
        const char *next = nl ? nl + 1 : f->end;
        const size_t len = (size_t)(next - p);
        if (*p == '#') {
            if (headers) sbuf_add(o, p, len);
        } else if (samples && !label) {
            sbuf_add(o, p, len);
        } else if (samples) {
            const size_t name = strcspn(p, "{ ");
            sbuf_add(o, p, name);
            if (p[name] == '{') {
                sbuf_printf(o, "{model=\"%s\",", label);
                sbuf_add(o, p + name + 1, len - name - 1);
            } else {
                sbuf_printf(o, "{model=\"%s\"}", label);
                sbuf_add(o, p + name, len - name);
            }
        }
        p = next;
    }
}

#define MAX_FAMILIES 128

void metrics_models_render(srv *s, srv_metrics *front, sbuf *o) {
    sbuf ft = {0};
    metrics_render(front, &ft);
    family *ff = calloc(MAX_FAMILIES, sizeof *ff);
    sbuf *mt = calloc((size_t)s->n_models, sizeof *mt);
    family *mf = calloc((size_t)s->n_models * MAX_FAMILIES, sizeof *mf);
    int *mn = calloc((size_t)s->n_models, sizeof *mn);
    if (!ff || !mt || !mf || !mn || !ft.data) {
        o->failed = 1;
        goto done;
    }
    const int nf = families(ft.data, ff, MAX_FAMILIES);
    for (int i = 0; i < nf; i++)
        if (is_server_wide(ff[i].name, ff[i].name_len)) copy_family(o, &ff[i], 1, 1, NULL);
    for (int m = 0; m < s->n_models; m++) {
        metrics_render(s->models[m]->metrics, &mt[m]);
        mn[m] = mt[m].data ? families(mt[m].data, mf + (size_t)m * MAX_FAMILIES, MAX_FAMILIES) : 0;
    }
    /* every model renders the same families in the same order (metrics.c) */
    for (int i = 0; i < mn[0]; i++) {
        const family *f0 = &mf[i];
        if (is_server_wide(f0->name, f0->name_len)) continue;
        copy_family(o, f0, 1, 0, NULL);
        for (int m = 0; m < s->n_models; m++)
            if (i < mn[m]) copy_family(o, &mf[(size_t)m * MAX_FAMILIES + i], 0, 1, s->models[m]->model_name);
    }
    sbuf_printf(o, "# HELP kvlm_model_loaded 1 while the model is loaded (it loads on its first request).\n"
                   "# TYPE kvlm_model_loaded gauge\n");
    for (int m = 0; m < s->n_models; m++)
        sbuf_printf(o, "kvlm_model_loaded{model=\"%s\"} %d\n", s->models[m]->model_name,
                    models_is_loaded(s->models[m]));
    sbuf_printf(o, "# HELP kvlm_model_loads_total Times the model was loaded.\n# TYPE kvlm_model_loads_total counter\n");
    for (int m = 0; m < s->n_models; m++) {
        pthread_mutex_lock(&s->models[m]->mu); /* its loader thread counts loads */
        const unsigned long long loads = s->models[m]->loads;
        pthread_mutex_unlock(&s->models[m]->mu);
        sbuf_printf(o, "kvlm_model_loads_total{model=\"%s\"} %llu\n", s->models[m]->model_name, loads);
    }
    sbuf_printf(o, "# HELP kvlm_model_unloads_total Times the model was unloaded to stay within --max-loaded-bytes.\n"
                   "# TYPE kvlm_model_unloads_total counter\n");
    for (int m = 0; m < s->n_models; m++)
        sbuf_printf(o, "kvlm_model_unloads_total{model=\"%s\"} %llu\n", s->models[m]->model_name,
                    s->models[m]->unloads);
    sbuf_printf(o, "# HELP kvlm_models_loaded_bytes Weights and KV pools of the loaded models.\n"
                   "# TYPE kvlm_models_loaded_bytes gauge\nkvlm_models_loaded_bytes %zu\n", models_loaded_bytes(s));
    sbuf_printf(o, "# HELP kvlm_models_max_loaded_bytes The budget of --max-loaded-bytes (0: none).\n"
                   "# TYPE kvlm_models_max_loaded_bytes gauge\nkvlm_models_max_loaded_bytes %zu\n",
                s->cfg.max_loaded_bytes);
done:
    if (mt)
        for (int m = 0; m < s->n_models; m++) sbuf_free(&mt[m]);
    free(mt);
    free(mf);
    free(mn);
    free(ff);
    sbuf_free(&ft);
}
