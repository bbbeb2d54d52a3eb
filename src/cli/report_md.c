/*
 * `kvlm report`'s output (see report.h): the SVG charts and report.md,
 * made only from the collected JSON documents, so the markdown shows the
 * numbers report.json holds (the same formatting rules as the commands'
 * tables: percentages with two decimals, entropies and ratios with
 * three). Text that comes from the model or the user (the prompt,
 * generated text, paths) is escaped for markdown; the SVG writer escapes
 * its own.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/report.h"
#include "cli/svg_chart.h"
#include "app/kv_sizing.h"

static const json_t *jobj(const json_t *o, const char *k) { return json_object_get(o, k); }
static double jnum(const json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }
static long long jint(const json_t *o, const char *k) { return (long long)json_integer_value(json_object_get(o, k)); }
static const char *jstr(const json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

/* Markdown text for a table cell or a paragraph: punctuation markdown
 * would read is backslash-escaped, a newline shows as a return arrow,
 * other control characters as spaces; at most max_chars characters
 * (0: all), an ellipsis when cut. s is valid UTF-8 (it comes from JSON). */
static void md_text(FILE *f, const char *s, int max_chars) {
    int chars = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p & 0xC0) != 0x80 && max_chars && chars++ == max_chars) {
            fputs("\xE2\x80\xA6", f);
            return;
        }
        if (*p == '\n') fputs("\xE2\x86\xB5", f); /* U+21B5 */
        else if (*p < 0x20 || *p == 0x7F) fputc(' ', f);
        else if (strchr("\\`*_[]<>|#!{}~&", *p)) fprintf(f, "\\%c", *p);
        else fputc(*p, f);
    }
}

/* ------------------------------------------------------------- charts */

typedef struct chart_out {
    const char *name;
    char *svg;
} chart_out;

static char *chart_entropy(const json_t *ss) {
    double x[REPORT_MAX_TEMPS], y[REPORT_MAX_TEMPS];
    int n = 0;
    size_t i;
    const json_t *row;
    json_array_foreach(jobj(ss, "temperatures"), i, row) if (n < REPORT_MAX_TEMPS) {
        x[n] = jnum(row, "temperature");
        y[n++] = jnum(jobj(row, "stats"), "entropy");
    }
    svg_series s = {.name = "entropy", .x = x, .y = y, .n = n};
    svg_line_chart c = {.title = "Entropy of the next-token distribution by temperature",
                        .x = {.label = "temperature", .zero = 1},
                        .y = {.label = "entropy (nats)", .zero = 1},
                        .series = &s, .n_series = 1};
    return svg_line_chart_render(&c);
}

static char *chart_top1(const json_t *ss) {
    double x[REPORT_MAX_TEMPS], y1[REPORT_MAX_TEMPS], y5[REPORT_MAX_TEMPS];
    int n = 0;
    size_t i;
    const json_t *row;
    json_array_foreach(jobj(ss, "temperatures"), i, row) if (n < REPORT_MAX_TEMPS) {
        x[n] = jnum(row, "temperature");
        y1[n] = jnum(jobj(row, "stats"), "top1");
        y5[n++] = jnum(jobj(row, "stats"), "top5");
    }
    svg_series s[2] = {{.name = "top-1 probability", .x = x, .y = y1, .n = n},
                       {.name = "top-5 mass", .x = x, .y = y5, .n = n}};
    svg_line_chart c = {.title = "Probability of the most likely next tokens by temperature",
                        .x = {.label = "temperature", .zero = 1},
                        .y = {.label = "probability", .fixed = 1, .min = 0, .max = 1, .fmt = svg_fmt_percent},
                        .series = s, .n_series = 2};
    return svg_line_chart_render(&c);
}

#define KV_SERIES 12
#define KV_POINTS 16

/* One line per model, each stopping at the model's maximum context. */
static char *chart_kv(const json_t *presets, const json_t *model) {
    double x[KV_POINTS], y[KV_SERIES][KV_POINTS];
    svg_series s[KV_SERIES];
    int n = 0, np = 0;
    size_t i, k;
    const json_t *m, *t;
    json_array_foreach(jobj(presets, "contexts"), i, t) if (np < KV_POINTS) x[np++] = (double)json_integer_value(t);
    const json_t *docs[2] = {presets, model};
    for (int d = 0; d < 2; d++) json_array_foreach(jobj(docs[d], "models"), i, m) {
        if (n == KV_SERIES) break;
        json_array_foreach(jobj(m, "totals"), k, t) if ((int)k < np) {
            double tokens = (double)jint(t, "tokens");
            y[n][k] = tokens <= (double)jint(m, "max_context") ? (double)jint(t, "bytes") : NAN;
        }
        s[n] = (svg_series){.name = jstr(m, "label"), .x = x, .y = y[n], .n = np, .dashed = d == 1};
        n++;
    }
    char title[96];
    snprintf(title, sizeof title, "KV cache bytes by context length (%s)", jstr(presets, "kv_dtype"));
    svg_line_chart c = {.title = title,
                        .x = {.label = "context length (tokens)", .log = 1, .log_base = 2, .fmt = svg_fmt_binary_count},
                        .y = {.label = "KV cache bytes", .log = 1, .log_base = 2, .fmt = svg_fmt_bytes},
                        .series = s, .n_series = n};
    return svg_line_chart_render(&c);
}

static char *chart_timing(const json_t *bench) {
    char g0[64], g1[64];
    snprintf(g0, sizeof g0, "prefill (%lld-token prompt)", jint(jobj(bench, "pp"), "tokens"));
    snprintf(g1, sizeof g1, "decode (%lld new tokens)", jint(jobj(bench, "tg"), "tokens"));
    const char *groups[] = {g0, g1}, *series[] = {"measured (median)", "weights-read roofline"};
    double v[4] = {1e3 / jnum(jobj(bench, "pp"), "median_tok_s"), NAN, jnum(jobj(bench, "tg"), "median_ms_per_token"),
                   jnum(jobj(bench, "roofline"), "ms_per_token")};
    svg_bar_chart c = {.title = "Time per token: prefill vs decode", .x_label = "phase",
                       .y = {.label = "ms per token"}, .groups = groups, .n_groups = 2, .series = series,
                       .n_series = 2, .values = v, .value_labels = 1};
    return svg_bar_chart_render(&c);
}

static char *chart_cache(const json_t *bench) {
    const json_t *cache = jobj(bench, "cache");
    double tg = (double)jint(cache, "new_tokens");
    const char *groups[] = {"KV cache on", "KV cache off (recompute)"}, *series[] = {"ms per generated token"};
    double v[2] = {jnum(cache, "on_s") * 1e3 / tg, jnum(cache, "off_s") * 1e3 / tg};
    char title[128];
    snprintf(title, sizeof title, "Generation time per token, %lld tokens after a %lld-token prompt", jint(cache, "new_tokens"),
             jint(cache, "prompt_tokens"));
    svg_bar_chart c = {.title = title, .x_label = "KV cache", .y = {.label = "ms per generated token (prompt included)"},
                       .groups = groups, .n_groups = 2, .series = series, .n_series = 1, .values = v,
                       .value_labels = 1};
    return svg_bar_chart_render(&c);
}

#define MAX_SETTINGS 16

static char *chart_repetition(const json_t *gs) {
    const char *groups[MAX_SETTINGS], *series[] = {"distinct-token ratio", "repeated 4-gram rate"};
    double v[2 * MAX_SETTINGS];
    int n = 0;
    size_t i;
    const json_t *row;
    json_array_foreach(jobj(gs, "settings"), i, row) if (n < MAX_SETTINGS) {
        groups[n] = jstr(row, "setting");
        v[2 * n] = jnum(row, "distinct_ratio");
        v[2 * n + 1] = jnum(row, "repeated_4gram_rate");
        n++;
    }
    svg_bar_chart c = {.title = "Repetition in the generated text by decoding setting", .x_label = "setting",
                       .y = {.label = "share", .fixed = 1, .min = 0, .max = 1}, .groups = groups, .n_groups = n,
                       .series = series, .n_series = 2, .values = v, .value_labels = 1};
    return svg_bar_chart_render(&c);
}

/* ----------------------------------------------------------- markdown */

static void md_machine(FILE *f, const json_t *r) {
    const json_t *mc = jobj(r, "machine"), *st = jobj(r, "settings"), *m = jobj(r, "model");
    fprintf(f, "## Machine and run\n\n| | |\n| --- | --- |\n| date | %s |\n| CPU | ", jstr(mc, "date"));
    md_text(f, jstr(mc, "cpu"), 0);
    fprintf(f, " |\n| logical CPUs | %lld |\n| threads used | %lld |\n| kernels (ISA) | %s |\n", jint(mc, "logical_cpus"),
            jint(mc, "threads"), jstr(mc, "isa"));
    fprintf(f, "| measured read bandwidth | %.1f GB/s (%lld MiB buffer, best of 5 passes) |\n", jnum(mc, "bandwidth_gbs"),
            jint(mc, "bandwidth_buffer_mib"));
    fprintf(f, "| KV cache of the runs | %s, blocks of %lld tokens |\n\n", jstr(st, "kv_dtype"), jint(st, "block_size"));
    fprintf(f, "## Model\n\n| | |\n| --- | --- |\n| source | ");
    md_text(f, jstr(m, "source"), 0);
    fprintf(f, " |\n| architecture | %s |\n| layers, heads, KV heads | %lld, %lld, %lld |\n", jstr(m, "arch"),
            jint(m, "layers"), jint(m, "heads"), jint(m, "kv_heads"));
    fprintf(f, "| embedding, head dim | %lld, %lld |\n| context window | %lld tokens |\n| vocabulary | %lld |\n",
            jint(m, "embd"), jint(m, "head_dim"), jint(m, "context"), jint(m, "vocab"));
    fprintf(f, "| parameters | %.2f M (%lld) |\n| weights | %s |\n", jint(m, "params") / 1e6, jint(m, "params"),
            jstr(m, "weight_dtype"));
    const json_t *ids = jobj(m, "prompt_ids");
    fprintf(f, "| prompt | %zu tokens: ", json_array_size(ids));
    if (jobj(m, "prompt_text")) {
        md_text(f, jstr(m, "prompt_text"), 200);
    } else {
        size_t i;
        const json_t *id;
        json_array_foreach(ids, i, id) {
            if (i == 40) {
                fputs(" \xE2\x80\xA6", f);
                break;
            }
            fprintf(f, "%s%lld", i ? " " : "ids ", (long long)json_integer_value(id));
        }
    }
    fprintf(f, " |\n\n");
}

static const json_t *total_at(const json_t *m, long long tokens) {
    size_t i;
    const json_t *t;
    json_array_foreach(jobj(m, "totals"), i, t) if (jint(t, "tokens") == tokens) return t;
    return NULL;
}

static void md_kv_row(FILE *f, const json_t *m, int bold) {
    const char *b = bold ? "**" : "";
    char at_max[48];
    kvs_human_bytes((uint64_t)jint(m, "max_context_bytes"), at_max, sizeof at_max);
    fprintf(f, "| %s", b);
    md_text(f, jstr(m, "label"), 0);
    fprintf(f, "%s | %lld | %lld | %lld | %s | %s | %s | %lld | %s |\n", b, jint(m, "layers"), jint(m, "kv_heads"),
            jint(m, "head_dim"), jstr(m, "bytes_per_token_human"), jstr(total_at(m, 4096), "human"),
            jstr(total_at(m, 131072), "human"), jint(m, "max_context"), at_max);
}

static void md_kv(FILE *f, const json_t *r) {
    const json_t *pr = jobj(r, "kv_presets"), *md = jobj(r, "kv_model"), *en = jobj(r, "kv_model_engine");
    const json_t *mm = json_array_get(jobj(md, "models"), 0), *me = json_array_get(jobj(en, "models"), 0);
    fprintf(f, "## KV cache size\n\nBytes per token = 2 (K and V) x layers x KV heads x head dim x bytes per number, "
               "here in %s (%g bytes per number) as `kvlm kv` prints it; total = bytes per token x tokens (a model "
               "with sliding-window layers: those layers count only their last window's tokens).\n\n",
            jstr(pr, "kv_dtype"), json_number_value(json_object_get(pr, "bytes_per_number")));
    fprintf(f, "| model | layers | KV heads | head dim | bytes/token | 4,096 tokens | 131,072 tokens | max context | "
               "at max context |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    size_t i;
    const json_t *m;
    json_array_foreach(jobj(pr, "models"), i, m) md_kv_row(f, m, 0);
    md_kv_row(f, mm, 1);
    fprintf(f, "\nThis model's figures exactly: %lld bytes per token in %s; the timing runs below keep K and V in "
               "%s: %lld bytes (%s) per token, %lld bytes (%s) for its whole context of %lld tokens.\n\n",
            jint(mm, "bytes_per_token"), jstr(md, "kv_dtype"), jstr(en, "kv_dtype"), jint(me, "bytes_per_token"),
            jstr(me, "bytes_per_token_human"), jint(me, "max_context_bytes"),
            jstr(json_array_get(jobj(me, "totals"), 0), "human"), jint(me, "max_context"));
    fprintf(f, "![KV cache bytes by context length](kv_bytes.svg)\n\nBoth axes are logarithmic; each line stops at "
               "its model's maximum context; the dashed line is this model.\n\n");
}

static void md_bench(FILE *f, const json_t *b) {
    const json_t *pp = jobj(b, "pp"), *tg = jobj(b, "tg"), *rf = jobj(b, "roofline"), *c = jobj(b, "cache");
    fprintf(f, "## Prefill and decode\n\nThe prompt (%lld pseudo-random token ids) is processed in one batched "
               "step (prefill); each new token then takes one step (decode, greedy). %lld repeats each, after a "
               "warm-up; %lld threads, %s kernels.\n\n",
            jint(pp, "tokens"), jint(b, "repeats"), jint(b, "threads"), jstr(b, "isa"));
    fprintf(f, "| test | tokens | mean tok/s | sd | median tok/s | ms/token (median) |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: |\n");
    fprintf(f, "| prefill | %lld | %.1f | %.1f | %.1f | %.3f |\n", jint(pp, "tokens"), jnum(pp, "mean_tok_s"),
            jnum(pp, "sd_tok_s"), jnum(pp, "median_tok_s"), 1e3 / jnum(pp, "median_tok_s"));
    fprintf(f, "| decode | %lld | %.2f | %.2f | %.2f | %.3f |\n\n", jint(tg, "tokens"), jnum(tg, "mean_tok_s"),
            jnum(tg, "sd_tok_s"), jnum(tg, "median_tok_s"), jnum(tg, "median_ms_per_token"));
    fprintf(f, "Decode roofline: each step reads %.1f MB of weights; at the measured %.1f GB/s that takes at least "
               "%.3f ms. The median decode step took %.3f ms, %.1f%% of the roofline speed (%.1f GB/s effective).\n\n",
            jint(b, "decode_bytes_per_token") / 1e6, jnum(b, "bandwidth_gbs"), jnum(rf, "ms_per_token"),
            jnum(tg, "median_ms_per_token"), 100 * jnum(rf, "ratio"), jnum(rf, "effective_gbs"));
    fprintf(f, "![Time per token: prefill vs decode](timing.svg)\n\n");
    fprintf(f, "## KV cache on vs off\n\nGenerating %lld tokens after a %lld-token prompt, once with the KV cache "
               "and once recomputing the whole context at every step (no cache):\n\n",
            jint(c, "new_tokens"), jint(c, "prompt_tokens"));
    fprintf(f, "| KV cache | total (ms) | ms per generated token |\n| --- | ---: | ---: |\n");
    fprintf(f, "| on | %.2f | %.3f |\n| off | %.2f | %.3f |\n\nSpeed-up with the cache: %.2fx.\n\n",
            jnum(c, "on_s") * 1e3, jnum(c, "on_s") * 1e3 / jint(c, "new_tokens"), jnum(c, "off_s") * 1e3,
            jnum(c, "off_s") * 1e3 / jint(c, "new_tokens"), jnum(c, "speedup"));
    fprintf(f, "![Generation time per token, KV cache on vs off](cache.svg)\n\n");
}

static void md_sample_stats(FILE *f, const json_t *ss) {
    fprintf(f, "## Next-token distribution by temperature\n\nThe distribution of the token after the prompt (%lld "
               "tokens, vocabulary %lld) is softmax(logits / T). Entropy = -sum p ln p (nats); top-1 = the largest "
               "p; top-5 = the mass of the 5 largest; tokens for 90%% = the size of the smallest set of most likely "
               "tokens holding 90%% of the mass.\n\n",
            jint(ss, "prompt_tokens"), jint(ss, "vocab"));
    fprintf(f, "| temperature | entropy (nats) | top-1 | top-5 | tokens for 90%% |\n| ---: | ---: | ---: | ---: | ---: |\n");
    size_t i;
    const json_t *row;
    json_array_foreach(jobj(ss, "temperatures"), i, row) {
        const json_t *st = jobj(row, "stats");
        fprintf(f, "| %.2f | %.3f | %.2f%% | %.2f%% | %lld |\n", jnum(row, "temperature"), jnum(st, "entropy"),
                100 * jnum(st, "top1"), 100 * jnum(st, "top5"), jint(st, "n90"));
    }
    fprintf(f, "\n![Entropy by temperature](entropy.svg)\n\n![Top-1 and top-5 by temperature](top1.svg)\n\n");
    fprintf(f, "Most likely next tokens at temperature 1:\n\n| id | p | token |\n| ---: | ---: | --- |\n");
    json_array_foreach(jobj(ss, "top_tokens"), i, row) {
        fprintf(f, "| %lld | %.2f%% | ", jint(row, "id"), 100 * jnum(row, "p"));
        md_text(f, jstr(row, "piece"), 40);
        fprintf(f, " |\n");
    }
    fprintf(f, "\n");
}

static void md_gen_stats(FILE *f, const json_t *gs) {
    fprintf(f, "## Repetition by decoding setting\n\n%lld tokens per setting from the same prompt and seed %lld. "
               "Distinct-token ratio = distinct generated ids / generated ids; repeated 4-gram rate = the share of "
               "the generated 4-grams (runs of 4 consecutive generated ids) that already occurred earlier in the "
               "same generation.\n\n",
            jint(gs, "max_tokens"), jint(gs, "seed"));
    fprintf(f, "| setting | distinct | repeated 4-gram | tokens | text (start) |\n| --- | ---: | ---: | ---: | --- |\n");
    size_t i;
    const json_t *row;
    json_array_foreach(jobj(gs, "settings"), i, row) {
        fprintf(f, "| ");
        md_text(f, jstr(row, "setting"), 0);
        fprintf(f, " | %.3f | %.3f | %lld | ", jnum(row, "distinct_ratio"),
                jnum(row, "repeated_4gram_rate"), jint(row, "tokens"));
        md_text(f, jstr(row, "text"), 100);
        fprintf(f, " |\n");
    }
    fprintf(f, "\n![Repetition by decoding setting](repetition.svg)\n\n");
}

static char *markdown(const json_t *r) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "# kvlm report: ");
    md_text(f, jstr(jobj(r, "model"), "source"), 0);
    fprintf(f, "\n\nEvery figure below was measured by kvlm in one run of this command (from the repository "
               "root):\n\n    ");
    for (const char *c = jstr(r, "command"); *c; c++) {
        if (*c == '\n') fputs("\n    ", f);
        else fputc(*c, f);
    }
    fprintf(f, "\n\nThe raw figures are in [report.json](report.json): the documents `kvlm kv --json`, "
               "`kvlm bench --json`, `kvlm sample-stats --json` and `kvlm gen-stats --json` print, which compute "
               "them the same way. Timings come from a single run on a possibly busy machine; ratios measured side "
               "by side (cache on vs off, decode vs roofline) are the robust figures.\n\n");
    md_machine(f, r);
    md_kv(f, r);
    md_bench(f, jobj(r, "bench"));
    md_sample_stats(f, jobj(r, "sample_stats"));
    md_gen_stats(f, jobj(r, "gen_stats"));
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

int report_write(const char *dir, json_t *root) {
    chart_out charts[] = {
        {"kv_bytes.svg", chart_kv(jobj(root, "kv_presets"), jobj(root, "kv_model"))},
        {"timing.svg", chart_timing(jobj(root, "bench"))},
        {"cache.svg", chart_cache(jobj(root, "bench"))},
        {"entropy.svg", chart_entropy(jobj(root, "sample_stats"))},
        {"top1.svg", chart_top1(jobj(root, "sample_stats"))},
        {"repetition.svg", chart_repetition(jobj(root, "gen_stats"))},
    };
    const int n = (int)(sizeof charts / sizeof charts[0]);
    int rc = 0;
    json_t *names = json_object();
    for (int i = 0; i < n; i++) {
        if (!rc) rc = report_write_file(dir, charts[i].name, charts[i].svg);
        char key[32];
        snprintf(key, sizeof key, "%.*s", (int)(strlen(charts[i].name) - 4), charts[i].name);
        json_object_set_new(names, key, json_string(charts[i].name));
        free(charts[i].svg);
    }
    json_object_set_new(root, "charts", names);
    if (rc) return rc;
    char *md = markdown(root);
    rc = report_write_file(dir, "report.md", md);
    free(md);
    return rc;
}
