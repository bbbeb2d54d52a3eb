/*
 * `kvlm chat --color`: each generated token tinted by the probability the
 * model gave it when it was drawn (ANSI 256-colour foreground), from green
 * (almost certain) through yellow to red (unlikely), in six bands. Text
 * without a token of its own (held back and released at the end) is shown
 * untinted. Colour is used only on a terminal and never when NO_COLOR is
 * set to a non-empty value (no-color.org).
 */
#ifndef KVLM_CLI_CHAT_COLOR_H
#define KVLM_CLI_CHAT_COLOR_H

#include <stdio.h>

/* 1 when --color may tint the output written to f. */
int chat_color_usable(FILE *f);
/* Writes n bytes of text tinted for a token of log-probability logprob
 * (NaN: untinted). */
void chat_color_write(FILE *f, const char *text, size_t n, float logprob);
/* The legend: one line per band, each in its colour. */
void chat_color_legend(FILE *f);

#endif
