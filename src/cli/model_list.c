/* The models a command is given (see model_list.h). */
#include "cli/model_list.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int is_model_file(const char *name) {
    const char *dot = strrchr(name, '.');
    return dot && (!strcmp(dot, ".gguf") || !strcmp(dot, ".safetensors") || !strcmp(dot, ".bin"));
}

static int add_path(model_list *l, const char *path, const char *cmd) {
    if (l->n >= MODEL_LIST_MAX) {
        fprintf(stderr, "kvlm %s: at most %d models\n", cmd, MODEL_LIST_MAX);
        return -1;
    }
    l->paths[l->n++] = path;
    return 0;
}

static int model_entry(const struct dirent *d) {
    if (d->d_name[0] == '.') return 0;
    return d->d_type == DT_DIR || d->d_type == DT_LNK || d->d_type == DT_UNKNOWN || is_model_file(d->d_name);
}

/* --models-dir: each model file and each directory holding a config.json,
 * in name order. */
static int scan_dir(model_list *l, const char *dir, const char *cmd) {
    struct dirent **ents = NULL;
    const int n = scandir(dir, &ents, model_entry, alphasort);
    if (n < 0) {
        fprintf(stderr, "kvlm %s: --models-dir: cannot read '%s'\n", cmd, dir);
        return -1;
    }
    int rc = 0, found = 0;
    for (int i = 0; i < n; i++) {
        char path[4096], probe[4200];
        snprintf(path, sizeof path, "%s/%s", dir, ents[i]->d_name);
        int ok = is_model_file(ents[i]->d_name);
        if (!ok) {
            snprintf(probe, sizeof probe, "%s/config.json", path);
            ok = !access(probe, R_OK);
        }
        if (ok && !rc) {
            char *p = strdup(path);
            if (!p || add_path(l, p, cmd)) {
                free(p);
                rc = -1;
            } else {
                l->owned[l->n - 1] = p;
                found++;
            }
        }
        free(ents[i]);
    }
    free(ents);
    if (!rc && !found) {
        fprintf(stderr, "kvlm %s: --models-dir: '%s' holds no model (a .gguf, .safetensors or .bin file, or a "
                        "directory with a config.json)\n", cmd, dir);
        rc = -1;
    }
    return rc;
}

int model_list_scan(model_list *l, int argc, char **argv, const char *cmd) {
    memset(l, 0, sizeof *l);
    const char *dir = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int kind = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) kind = 1, v = i + 1 < argc ? argv[++i] : NULL;
        else if (!strncmp(a, "--model=", 8)) kind = 1, v = a + 8;
        else if (!strcmp(a, "--alias")) kind = 2, v = i + 1 < argc ? argv[++i] : NULL;
        else if (!strncmp(a, "--alias=", 8)) kind = 2, v = a + 8;
        else if (!strcmp(a, "--models-dir")) kind = 3, v = i + 1 < argc ? argv[++i] : NULL;
        else if (!strncmp(a, "--models-dir=", 13)) kind = 3, v = a + 13;
        if (!kind || !v) continue; /* a missing value: cli_parse says so */
        if (kind == 1 && add_path(l, v, cmd)) return -1;
        if (kind == 2) {
            if (!l->n || l->aliases[l->n - 1] || !*v) {
                fprintf(stderr, "kvlm %s: --alias %s: give one non-empty --alias after each -m it names\n", cmd, v);
                return -1;
            }
            l->aliases[l->n - 1] = v;
        }
        if (kind == 3) dir = v;
    }
    l->dir = dir;
    return dir ? scan_dir(l, dir, cmd) : 0;
}

void model_list_free(model_list *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->owned[i]);
        l->owned[i] = NULL;
    }
}

void model_list_stem(const char *path, char *out, size_t cap) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
    const char *base = strrchr(buf, '/');
    snprintf(out, cap, "%s", base ? base + 1 : buf);
    char *dot = strrchr(out, '.');
    if (dot && dot != out && is_model_file(dot)) *dot = 0;
}

const char *model_list_name(const model_list *l, int i, char *out, size_t cap) {
    if (l->aliases[i]) snprintf(out, cap, "%s", l->aliases[i]);
    else model_list_stem(l->paths[i], out, cap);
    return out;
}
