/*
 * The models a command is given: -m (or --model) repeated, an --alias after
 * an -m naming it, and --models-dir DIR adding each model file (.gguf,
 * .safetensors, .bin) and each directory with a config.json in DIR, in
 * name order, after the -m models. The shared flag parser keeps one -m, so
 * these are read from argv before it runs. A model's name is its alias, or
 * its file or directory name without the model-file extension
 * (model_list_stem). Used by kvlm serve and kvlm chat; loads nothing.
 */
#ifndef KVLM_CLI_MODEL_LIST_H
#define KVLM_CLI_MODEL_LIST_H

#include <stddef.h>

#define MODEL_LIST_MAX 64

typedef struct model_list {
    const char *paths[MODEL_LIST_MAX], *aliases[MODEL_LIST_MAX]; /* alias NULL: the stem names it */
    char *owned[MODEL_LIST_MAX];  /* paths built from --models-dir */
    int n;
    const char *dir;              /* --models-dir, or NULL */
} model_list;

/* Reads the model flags of argv (argv[0] is the first flag, cli_parse's
 * convention) into l (zeroed first). Errors are printed as "kvlm CMD: ...";
 * returns 0 or -1. A flag without its value is left to cli_parse. */
int model_list_scan(model_list *l, int argc, char **argv, const char *cmd);
void model_list_free(model_list *l);
/* The file or directory name of path without a .gguf, .safetensors or
 * .bin extension. */
void model_list_stem(const char *path, char *out, size_t cap);
/* Model i's name: its alias or its stem. Returns out. */
const char *model_list_name(const model_list *l, int i, char *out, size_t cap);

#endif
