/*
 * A small writer of self-contained SVG charts for `kvlm report`: line
 * charts (several series, linear or logarithmic axes, ticks, labels and a
 * legend) and grouped bar charts. The output is one standalone <svg>
 * element (no scripts, no external fonts or styles) that a browser shows
 * as is; every piece of text is XML-escaped, invalid UTF-8 becomes U+FFFD
 * and control characters become spaces.
 *
 * Values that are not finite (and values <= 0 on a logarithmic axis) are
 * left out: a line breaks there, a bar is not drawn.
 */
#ifndef KVLM_CLI_SVG_CHART_H
#define KVLM_CLI_SVG_CHART_H

#include <stddef.h>

/* Formats a tick or value label into buf (cap bytes). */
typedef void (*svg_tick_fmt)(double v, char *buf, size_t cap);

/* Up to 4 significant digits: 0.25, 1.5, 120, 1e+06. */
void svg_fmt_number(double v, char *buf, size_t cap);
/* Bytes in binary units: 512 B, 64 KiB, 1.5 GiB. */
void svg_fmt_bytes(double v, char *buf, size_t cap);
/* Counts in binary thousands, the way context lengths are named: 512, 4k, 128k, 1M. */
void svg_fmt_binary_count(double v, char *buf, size_t cap);
/* A fraction as a percentage: 0.25 -> 25%. */
void svg_fmt_percent(double v, char *buf, size_t cap);

typedef struct svg_axis {
    const char *label;
    int log;           /* logarithmic scale */
    int log_base;      /* ticks at powers of this base on a log axis: 10 (0 means 10) or 2 */
    int zero;          /* linear: the range includes 0 */
    int fixed;         /* use [min, max] instead of the data's range */
    double min, max;
    svg_tick_fmt fmt;  /* NULL: svg_fmt_number */
} svg_axis;

typedef struct svg_series {
    const char *name;
    const double *x, *y;  /* n points, in drawing order */
    int n;
    int dashed;           /* drawn dashed and thicker (to set one series apart) */
} svg_series;

typedef struct svg_line_chart {
    const char *title;
    svg_axis x, y;
    const svg_series *series;
    int n_series;
} svg_line_chart;

typedef struct svg_bar_chart {
    const char *title;
    const char *x_label;
    svg_axis y;                  /* the value axis; bars start at 0 (linear) */
    const char *const *groups;   /* n_groups labels along x */
    int n_groups;
    const char *const *series;   /* n_series names, one bar per group each */
    int n_series;
    const double *values;        /* n_groups x n_series, row-major */
    int value_labels;            /* print each bar's value above it (3 significant
                                    digits unless y.fmt is set) */
} svg_bar_chart;

/* The chart as a NUL-terminated SVG document (malloc'ed; free() it), or
 * NULL when out of memory or the chart has no series or groups. */
char *svg_line_chart_render(const svg_line_chart *c);
char *svg_bar_chart_render(const svg_bar_chart *c);

#endif
