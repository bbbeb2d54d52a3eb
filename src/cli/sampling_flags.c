/* Parsing of the shared sampling flags (see sampling_flags.h). */
#include "cli/sampling_flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

const char *sampling_flags_help =
    "  --temp T              temperature, 0 = greedy (default 0.7)\n"
    "  --top-k K             keep the K most likely tokens, 0 = off (default 0)\n"
    "  --top-p P             keep the smallest set with mass >= P, 1 = off (default 0.9)\n"
    "  --min-p P             drop tokens below P x the top probability, 0 = off (default 0)\n"
    "  --repeat-penalty R    divide positive / multiply negative logits of seen tokens (default 1 = off)\n"
    "  --frequency-penalty F logit -= F x count of the token in the window (default 0)\n"
    "  --presence-penalty P  logit -= P if the token is in the window (default 0)\n"
    "  --penalty-window N    last N tokens of prompt + output the penalties see, 0 = all (default 0)\n"
    "  --logit-bias LIST     ID:BIAS,... added to logits; -100 bans a token\n"
    "  --sampler-order LIST  processor order (default penalties,bias,temperature,top_k,top_p,min_p)\n"
    "  --seed S              random seed (default 1)\n"
    "  --stop TEXT           stop when the output contains TEXT (repeatable, up to 16)\n";

void sampling_flags_init(sampling_flags *f) {
    memset(f, 0, sizeof *f);
    f->o = kvlm_sampler_options_default();
    f->o.temperature = 0.7f;
    f->o.top_p = 0.9f;
    f->o.seed = 1;
}

static int parse_bias(sampling_flags *f, const char *s) {
    const char *p = s;
    int n = 0;
    while (*p) {
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p || *end != ':' || id < 0 || id > INT32_MAX || errno) goto bad;
        p = end + 1;
        float b = strtof(p, &end);
        if (end == p || (*end && *end != ',') || n == MAX_BIAS) goto bad;
        f->bias[n++] = (kvlm_logit_bias){(int32_t)id, b};
        p = *end ? end + 1 : end;
    }
    f->o.logit_bias = f->bias;
    f->o.n_logit_bias = n;
    return 0;
bad:
    fprintf(stderr, "kvlm: --logit-bias: '%s' is not a list of ID:BIAS pairs (at most %d)\n", s, MAX_BIAS);
    return -1;
}

int sampling_flags_parse(sampling_flags *f, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    kvlm_sampler_options *o = &f->o;
    static const char *with_value[] = {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
                                       "--frequency-penalty", "--presence-penalty", "--penalty-window",
                                       "--logit-bias", "--sampler-order", "--seed", "--stop"};
    int known = 0;
    for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(a, with_value[k]);
    if (!known) return 0;
    if (!(v = arg_value(argc, argv, i))) return -1;
    int rc = 0;
    if (!strcmp(a, "--temp")) rc = arg_float(a, v, 0, 100, &o->temperature);
    else if (!strcmp(a, "--top-k")) rc = arg_int(a, v, 0, 1 << 22, &o->top_k);
    else if (!strcmp(a, "--top-p")) rc = arg_float(a, v, 1e-6, 1, &o->top_p);
    else if (!strcmp(a, "--min-p")) rc = arg_float(a, v, 0, 1, &o->min_p);
    else if (!strcmp(a, "--repeat-penalty")) rc = arg_float(a, v, 1e-3, 100, &o->repetition_penalty);
    else if (!strcmp(a, "--frequency-penalty")) rc = arg_float(a, v, -2, 2, &o->frequency_penalty);
    else if (!strcmp(a, "--presence-penalty")) rc = arg_float(a, v, -2, 2, &o->presence_penalty);
    else if (!strcmp(a, "--penalty-window")) rc = arg_int(a, v, 0, 1 << 24, &o->penalty_window);
    else if (!strcmp(a, "--logit-bias")) rc = parse_bias(f, v);
    else if (!strcmp(a, "--sampler-order")) o->order = v;
    else if (!strcmp(a, "--seed")) rc = arg_u64(a, v, &o->seed);
    else if (!strcmp(a, "--stop")) {
        if (f->n_stops == MAX_STOPS || !*v) {
            fprintf(stderr, "kvlm: --stop: at most %d non-empty stop strings\n", MAX_STOPS);
            return -1;
        }
        f->stops[f->n_stops++] = v;
    }
    return rc ? -1 : 1;
}
