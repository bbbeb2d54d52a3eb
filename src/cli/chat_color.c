/* Token probabilities as ANSI 256 colours (see chat_color.h). */
#include "cli/chat_color.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define RESET "\x1b[0m"

/* Bands from the most likely down: the lowest probability each holds and its colour. */
static const struct {
    double min_p;
    int color;
} bands[] = {{0.9, 46}, {0.7, 118}, {0.5, 226}, {0.3, 214}, {0.1, 202}, {0.0, 196}};
#define N_BANDS (sizeof bands / sizeof bands[0])

int chat_color_usable(FILE *f) {
    const char *no = getenv("NO_COLOR");
    return isatty(fileno(f)) && !(no && *no);
}

void chat_color_write(FILE *f, const char *text, size_t n, float logprob) {
    if (isnan(logprob)) {
        fwrite(text, 1, n, f);
        return;
    }
    const double p = exp((double)logprob);
    size_t b = 0;
    while (b + 1 < N_BANDS && p < bands[b].min_p) b++;
    fprintf(f, "\x1b[38;5;%dm", bands[b].color);
    fwrite(text, 1, n, f);
    fputs(RESET, f);
}

void chat_color_legend(FILE *f) {
    fputs("colours (--color): the probability of each token when it was drawn\n", f);
    for (size_t b = 0; b < N_BANDS; b++) {
        fprintf(f, "  \x1b[38;5;%dm", bands[b].color);
        if (b == 0) fprintf(f, "p >= %.1f", bands[b].min_p);
        else fprintf(f, "%.1f <= p < %.1f", bands[b].min_p, bands[b - 1].min_p);
        fputs(RESET "\n", f);
    }
}
