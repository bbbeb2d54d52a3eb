/*
 * SVG line and grouped bar charts (see svg_chart.h). The document is built
 * in a growable string: a fixed canvas (the plot keeps its size, the
 * canvas grows below it for slanted group labels), light grid lines at the
 * ticks, the series, then a legend to the right of the plot. Ticks are
 * "nice" steps of 1, 2 or 5 x 10^k on linear axes and powers of the base
 * on logarithmic ones (every few powers when the range spans many).
 */
#include "cli/svg_chart.h"
#include "kvlm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WIDTH = 760, PLOT_TOP = 48, PLOT_H = 328, LEFT = 84, MAX_TICKS = 64, LABEL_CHARS = 34 };
#define CHAR_W 6.6 /* mean advance of a 12 px sans-serif character */

static const char *palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_COLORS (int)(sizeof palette / sizeof palette[0])

/* --------------------------------------------------------------- strings */

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *p, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = 1;
            return;
        }
        b->s = s, b->cap = cap;
    }
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_put(b, big, (size_t)n);
    free(big);
}

/* Characters in s (an invalid byte counts as one). */
static int text_chars(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    int c = 0;
    for (size_t i = 0; i < n; c++) {
        size_t k = kvlm_utf8_char_len((const char *)p + i, n - i);
        i += k ? k : 1;
    }
    return c;
}

/* XML character data or attribute text; at most max_chars characters
 * (the last one an ellipsis when cut; 0 means no limit). */
static void sb_text(sbuf *b, const char *s, int max_chars) {
    if (!s) return;
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    int limit = max_chars > 0 && text_chars(s) > max_chars ? max_chars - 1 : -1;
    for (size_t i = 0, c = 0; i < n; c++) {
        if (limit >= 0 && c == (size_t)limit) {
            sb_put(b, "\xE2\x80\xA6", 3); /* U+2026 */
            return;
        }
        unsigned char ch = p[i];
        size_t k = kvlm_utf8_char_len((const char *)p + i, n - i);
        if (ch == '&') sb_put(b, "&amp;", 5);
        else if (ch == '<') sb_put(b, "&lt;", 4);
        else if (ch == '>') sb_put(b, "&gt;", 4);
        else if (ch == '"') sb_put(b, "&quot;", 6);
        else if (ch == '\'') sb_put(b, "&#39;", 5);
        else if (ch < 0x20 || ch == 0x7F) sb_put(b, " ", 1);
        else if (k) sb_put(b, (const char *)p + i, k);
        else sb_put(b, "\xEF\xBF\xBD", 3); /* U+FFFD */
        i += k ? k : 1;
    }
}

static double text_width(const char *s, int max_chars) {
    int n = s ? text_chars(s) : 0;
    return CHAR_W * (max_chars > 0 && n > max_chars ? max_chars : n);
}

/* ---------------------------------------------------------- formatting */

void svg_fmt_number(double v, char *buf, size_t cap) { snprintf(buf, cap, "%.4g", v == 0 ? 0.0 : v); }

void svg_fmt_bytes(double v, char *buf, size_t cap) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (fabs(v) >= 1024 && u < 6) v /= 1024, u++;
    snprintf(buf, cap, "%.3g %s", v, units[u]);
}

void svg_fmt_binary_count(double v, char *buf, size_t cap) {
    if (fabs(v) >= 1048576) snprintf(buf, cap, "%.4gM", v / 1048576);
    else if (fabs(v) >= 1024) snprintf(buf, cap, "%.4gk", v / 1024);
    else snprintf(buf, cap, "%.4g", v);
}

void svg_fmt_percent(double v, char *buf, size_t cap) { snprintf(buf, cap, "%.4g%%", 100 * v == 0 ? 0.0 : 100 * v); }

/* --------------------------------------------------------------- scales */

typedef struct scale {
    int log;
    double lo, hi;    /* data range after rounding to ticks */
    double p0, p1;    /* pixels of lo and hi */
    double ticks[MAX_TICKS];
    int n_ticks;
    svg_tick_fmt fmt;
} scale;

static int usable(const svg_axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }

static double nice_step(double raw) {
    double mag = pow(10, floor(log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

static void linear_ticks(scale *s, double lo, double hi) {
    if (!(hi > lo)) {
        double d = lo == 0 ? 1 : fabs(lo) * 0.1;
        lo -= d, hi += d;
    }
    double step = nice_step((hi - lo) / 5);
    s->lo = floor(lo / step + 1e-9) * step;
    s->hi = ceil(hi / step - 1e-9) * step;
    s->n_ticks = 0;
    for (int k = 0; s->n_ticks < MAX_TICKS; k++) {
        double v = s->lo + k * step;
        if (v > s->hi + step * 1e-6) break;
        s->ticks[s->n_ticks++] = fabs(v) < step * 1e-6 ? 0 : v;
    }
}

static void log_ticks(scale *s, double lo, double hi, int base) {
    double lb = log(base);
    int e0 = (int)floor(log(lo) / lb + 1e-9), e1 = (int)ceil(log(hi) / lb - 1e-9);
    if (e1 <= e0) e1 = e0 + 1;
    s->lo = pow(base, e0), s->hi = pow(base, e1);
    s->n_ticks = 0;
    int span = e1 - e0, stride = (span + 7) / 8;
    for (int e = e0; e <= e1 && s->n_ticks < MAX_TICKS; e += stride) {
        s->ticks[s->n_ticks++] = pow(base, e);
        if (base == 10 && span <= 2 && e < e1)
            for (int m = 2; m <= 5; m += 3) s->ticks[s->n_ticks++] = m * pow(base, e);
    }
}

/* The axis range from the values it shows (n of them, stride apart). */
static void scale_init(scale *s, const svg_axis *a, const double *const *vals, const int *ns, int n_arrays,
                       double p0, double p1) {
    memset(s, 0, sizeof *s);
    s->log = a->log, s->p0 = p0, s->p1 = p1, s->fmt = a->fmt ? a->fmt : svg_fmt_number;
    double lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < n_arrays; k++)
        for (int i = 0; i < ns[k]; i++)
            if (vals[k] && usable(a, vals[k][i])) {
                if (vals[k][i] < lo) lo = vals[k][i];
                if (vals[k][i] > hi) hi = vals[k][i];
            }
    if (a->fixed && usable(a, a->min) && usable(a, a->max) && a->max > a->min) lo = a->min, hi = a->max;
    else if (!(lo <= hi)) lo = 1, hi = a->log ? 10 : 2; /* no data: an empty frame */
    if (a->log) {
        log_ticks(s, lo, hi, a->log_base == 2 ? 2 : 10);
        return;
    }
    if (a->zero) {
        if (lo > 0) lo = 0;
        if (hi < 0) hi = 0;
    }
    linear_ticks(s, lo, hi);
}

static double scale_px(const scale *s, double v) {
    double t = s->log ? log(v) : v, a = s->log ? log(s->lo) : s->lo, b = s->log ? log(s->hi) : s->hi;
    return s->p0 + (t - a) / (b - a) * (s->p1 - s->p0);
}

/* -------------------------------------------------------------- drawing */

static void open_svg(sbuf *b, const char *title, int height) {
    sb_printf(b,
              "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
              "font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n<title>",
              WIDTH, height, WIDTH, height);
    sb_text(b, title, 0);
    sb_printf(b, "</title>\n<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n", WIDTH, height);
    sb_printf(b, "<text x=\"%d\" y=\"28\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">", WIDTH / 2);
    sb_text(b, title, 90);
    sb_printf(b, "</text>\n");
}

/* Grid lines and labels of the y axis, the frame, and the y axis title. */
static void draw_y_axis(sbuf *b, const scale *y, const char *label, double x0, double x1) {
    char t[64];
    sb_printf(b, "<g stroke=\"#e3e3e3\" stroke-width=\"1\">\n");
    for (int i = 0; i < y->n_ticks; i++)
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", x0, scale_px(y, y->ticks[i]), x1,
                  scale_px(y, y->ticks[i]));
    sb_printf(b, "</g>\n<g text-anchor=\"end\" fill=\"#333333\">\n");
    for (int i = 0; i < y->n_ticks; i++) {
        y->fmt(y->ticks[i], t, sizeof t);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">", x0 - 8, scale_px(y, y->ticks[i]) + 4);
        sb_text(b, t, 16);
        sb_printf(b, "</text>\n");
    }
    sb_printf(b, "</g>\n<path d=\"M%.1f %.1f V%.1f H%.1f\" fill=\"none\" stroke=\"#444444\"/>\n", x0, y->p1, y->p0,
              x1);
    sb_printf(b, "<text transform=\"translate(18 %.1f) rotate(-90)\" text-anchor=\"middle\">", (y->p0 + y->p1) / 2);
    sb_text(b, label, 60);
    sb_printf(b, "</text>\n");
}

static void draw_x_title(sbuf *b, const char *label, double x0, double x1, double y) {
    sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (x0 + x1) / 2, y);
    sb_text(b, label, 90);
    sb_printf(b, "</text>\n");
}

/* Legend rows to the right of the plot: a swatch (line or box) and the name. */
static void draw_legend(sbuf *b, const char *const *names, const int *dashed, int n, double x, int boxes) {
    sb_printf(b, "<g>\n");
    for (int i = 0; i < n; i++) {
        double y = PLOT_TOP + 10 + 20.0 * i;
        const char *col = palette[i % N_COLORS];
        if (boxes)
            sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", x, y - 5, col);
        else
            sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%s\"%s/>\n",
                      x, y, x + 22, y, col, dashed && dashed[i] ? "3" : "2",
                      dashed && dashed[i] ? " stroke-dasharray=\"6 3\"" : "");
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\">", x + 28, y + 4);
        sb_text(b, names[i], LABEL_CHARS);
        sb_printf(b, "</text>\n");
    }
    sb_printf(b, "</g>\n");
}

static double legend_width(const char *const *names, int n) {
    double w = 0;
    for (int i = 0; i < n; i++)
        if (text_width(names[i], LABEL_CHARS) > w) w = text_width(names[i], LABEL_CHARS);
    return 28 + w + 16;
}

static char *finish(sbuf *b) {
    sb_printf(b, "</svg>\n");
    if (b->oom) {
        free(b->s);
        return NULL;
    }
    return b->s;
}

/* ------------------------------------------------------------ line chart */

static void draw_series(sbuf *b, const svg_line_chart *c, int k, const scale *xs, const scale *ys) {
    const svg_series *s = &c->series[k];
    const char *col = palette[k % N_COLORS];
    char tx[64], ty[64];
    sb_printf(b, "<path d=\"");
    int pen = 0;
    for (int i = 0; i < s->n; i++) {
        if (!usable(&c->x, s->x[i]) || !usable(&c->y, s->y[i])) {
            pen = 0;
            continue;
        }
        sb_printf(b, "%s%.1f %.1f ", pen ? "L" : "M", scale_px(xs, s->x[i]), scale_px(ys, s->y[i]));
        pen = 1;
    }
    sb_printf(b, "\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s/>\n", col, s->dashed ? "3" : "2",
              s->dashed ? " stroke-dasharray=\"6 3\"" : "");
    for (int i = 0; i < s->n; i++) {
        if (!usable(&c->x, s->x[i]) || !usable(&c->y, s->y[i])) continue;
        xs->fmt(s->x[i], tx, sizeof tx);
        ys->fmt(s->y[i], ty, sizeof ty);
        sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>", scale_px(xs, s->x[i]),
                  scale_px(ys, s->y[i]), col);
        sb_text(b, s->name, LABEL_CHARS);
        sb_printf(b, ": ");
        sb_text(b, tx, 0);
        sb_printf(b, ", ");
        sb_text(b, ty, 0);
        sb_printf(b, "</title></circle>\n");
    }
}

char *svg_line_chart_render(const svg_line_chart *c) {
    if (!c || c->n_series <= 0 || !c->series) return NULL;
    int n = c->n_series;
    const double **xv = malloc((size_t)n * sizeof *xv), **yv = malloc((size_t)n * sizeof *yv);
    int *ns = malloc((size_t)n * sizeof *ns), *dashed = malloc((size_t)n * sizeof *dashed);
    const char **names = malloc((size_t)n * sizeof *names);
    sbuf b = {0};
    if (!xv || !yv || !ns || !dashed || !names) b.oom = 1;
    for (int k = 0; !b.oom && k < n; k++) {
        xv[k] = c->series[k].x, yv[k] = c->series[k].y, ns[k] = c->series[k].n;
        dashed[k] = c->series[k].dashed, names[k] = c->series[k].name;
    }
    char *out = NULL;
    if (!b.oom) {
        double x0 = LEFT, x1 = WIDTH - legend_width(names, n) - 12, y1 = PLOT_TOP + PLOT_H;
        scale xs, ys;
        scale_init(&xs, &c->x, xv, ns, n, x0, x1);
        scale_init(&ys, &c->y, yv, ns, n, y1, PLOT_TOP);
        open_svg(&b, c->title, (int)y1 + 64);
        draw_y_axis(&b, &ys, c->y.label, x0, x1);
        char t[64];
        sb_printf(&b, "<g stroke=\"#e3e3e3\">\n");
        for (int i = 0; i < xs.n_ticks; i++)
            sb_printf(&b, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/>\n", scale_px(&xs, xs.ticks[i]),
                      PLOT_TOP, scale_px(&xs, xs.ticks[i]), y1);
        sb_printf(&b, "</g>\n<g text-anchor=\"middle\" fill=\"#333333\">\n");
        for (int i = 0; i < xs.n_ticks; i++) {
            xs.fmt(xs.ticks[i], t, sizeof t);
            sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\">", scale_px(&xs, xs.ticks[i]), y1 + 18);
            sb_text(&b, t, 16);
            sb_printf(&b, "</text>\n");
        }
        sb_printf(&b, "</g>\n");
        draw_x_title(&b, c->x.label, x0, x1, y1 + 44);
        for (int k = 0; k < n; k++) draw_series(&b, c, k, &xs, &ys);
        draw_legend(&b, names, dashed, n, x1 + 16, 0);
        out = finish(&b);
    } else {
        free(b.s);
    }
    free(xv), free(yv), free(ns), free(dashed), free(names);
    return out;
}

/* ------------------------------------------------------------- bar chart */

char *svg_bar_chart_render(const svg_bar_chart *c) {
    if (!c || c->n_groups <= 0 || c->n_series <= 0 || !c->values || !c->groups || !c->series) return NULL;
    const int ng = c->n_groups, nsr = c->n_series, nv = ng * nsr;
    sbuf b = {0};
    double x0 = LEFT, x1 = WIDTH - legend_width(c->series, nsr) - 12, y1 = PLOT_TOP + PLOT_H;
    double gw = (x1 - x0) / ng, bw = gw * 0.8 / nsr, widest = 0;
    for (int g = 0; g < ng; g++)
        if (text_width(c->groups[g], LABEL_CHARS) > widest) widest = text_width(c->groups[g], LABEL_CHARS);
    /* labels wider than their slot are slanted; the canvas grows to fit them */
    int slant = widest > gw - 6;
    double label_h = slant ? widest * 0.5 + 22 : 20;
    scale ys;
    const double *vals[1] = {c->values};
    svg_axis ya = c->y;
    ya.zero |= !ya.log;
    scale_init(&ys, &ya, vals, &nv, 1, y1, PLOT_TOP);
    open_svg(&b, c->title, (int)(y1 + label_h + 40));
    draw_y_axis(&b, &ys, c->y.label, x0, x1);
    double base = ys.log ? y1 : scale_px(&ys, ys.lo > 0 ? ys.lo : ys.hi < 0 ? ys.hi : 0);
    char t[64];
    for (int g = 0; g < ng; g++) {
        for (int s = 0; s < nsr; s++) {
            double v = c->values[g * nsr + s];
            if (!usable(&c->y, v)) continue;
            double bx = x0 + g * gw + gw * 0.1 + s * bw, py = scale_px(&ys, v);
            double top = py < base ? py : base, h = fabs(base - py);
            ys.fmt(v, t, sizeof t);
            if (!c->y.fmt) snprintf(t, sizeof t, "%.3g", v); /* short labels do not collide */
            sb_printf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>", bx, top,
                      bw > 2 ? bw - 1 : bw, h, palette[s % N_COLORS]);
            sb_text(&b, c->groups[g], LABEL_CHARS);
            sb_printf(&b, ", ");
            sb_text(&b, c->series[s], LABEL_CHARS);
            sb_printf(&b, ": ");
            sb_text(&b, t, 0);
            sb_printf(&b, "</title></rect>\n");
            if (c->value_labels) {
                sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"10\">",
                          bx + bw / 2, top - 4);
                sb_text(&b, t, 12);
                sb_printf(&b, "</text>\n");
            }
        }
        double cx = x0 + (g + 0.5) * gw;
        if (slant)
            sb_printf(&b, "<text transform=\"translate(%.1f %.1f) rotate(-30)\" text-anchor=\"end\">", cx + 4, y1 + 14);
        else
            sb_printf(&b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", cx, y1 + 18);
        sb_text(&b, c->groups[g], LABEL_CHARS);
        sb_printf(&b, "</text>\n");
    }
    draw_x_title(&b, c->x_label, x0, x1, y1 + label_h + 24);
    draw_legend(&b, c->series, NULL, nsr, x1 + 16, 1);
    return finish(&b);
}
