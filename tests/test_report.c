/*
 * `kvlm report` end to end on the reference fixture (small settings):
 * report.md holds every section and the numbers report.json holds (each
 * within half a unit of the last place it is printed to);
 * report.json carries each measurement's document, equal to what the
 * single commands print; every chart is one well-formed <svg> element.
 * The SVG writer itself (compiled in here from src/cli) is checked on
 * hostile text, gaps and log axes. Bad input: missing -o, an output path
 * that is not a directory, a model that does not exist, impossible timing
 * sizes; each with its exit status, a message naming the fault and no
 * files left behind.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"

/* The chart writer lives in the CLI, not in libkvlm.a. */
#include "cli/svg_chart.c"

#define TINY "tests/fixtures/gpt2/hf_f32"
#define PROMPT8 "199 17 42 103 0 150 88 3"
#define SMALL "-n 12 --pp 8 --tg 8 --repeats 2 --bw-mib 16 --temps 0.5,1,1.5"

static const char *charts[] = {"kv_bytes.svg", "timing.svg", "cache.svg", "entropy.svg", "top1.svg", "repetition.svg"};
#define N_CHARTS (sizeof charts / sizeof charts[0])

/* ------------------------------------------------------------- helpers */

static char *path_in(const char *dir, const char *name) {
    static char buf[4][1024];
    static int next;
    char *b = buf[next++ % 4];
    if (snprintf(b, sizeof buf[0], "%s/%s", dir, name) >= (int)sizeof buf[0]) fail_msg("path too long: %s", dir);
    return b;
}

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s", path, je.text);
    return j;
}

static json_t *get(json_t *o, const char *dotted) {
    char key[128];
    const char *p = dotted;
    while (o && *p) {
        size_t n = strcspn(p, ".");
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        o = json_is_array(o) ? json_array_get(o, (size_t)atoi(key)) : json_object_get(o, key);
        p += n + (p[n] == '.');
    }
    if (!o) fail_msg("no '%s' in the document", dotted);
    return o;
}

static void expect_in(const char *text, const char *needle) {
    if (!strstr(text, needle)) fail_msg("missing '%s' in:\n%s", needle, text);
}

/* report.md prints each measured figure once, rounded to `decimals`
 * places from the measured double; report.json holds the same double to 10
 * significant digits. A printed figure therefore lies within half a unit
 * of its last place of the JSON value, plus the JSON's own rounding
 * (relative 5e-10, allowed as 1e-9); anything further off is wrong. The
 * test never formats the JSON value a second time and compares strings,
 * which would round twice and fail at a tie. */
static void expect_close(double printed, double json, int decimals, const char *what) {
    double tol = 0.5 * pow(10, -decimals) + 1e-9 * fmax(1, fabs(json));
    if (fabs(printed - json) > tol)
        fail_msg("%s: report.md shows %.*f, report.json holds %.12g (allowed: %g)", what, decimals, printed, json, tol);
}

/* The numbers after `head` on the first line of md, at or after the text
 * `from`, that starts with head: up to max of them ('%' and 'x' after a
 * number are skipped). Returns how many were read; fails if no line. */
static int md_numbers(const char *md, const char *from, const char *head, double *v, int max) {
    const char *p = strstr(md, from);
    if (!p) fail_msg("no '%s' in report.md", from);
    size_t hl = strlen(head);
    while (p && strncmp(p, head, hl)) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (!p) fail_msg("no line starting with '%s' after '%s' in report.md", head, from);
    int n = 0;
    for (p += hl; *p && *p != '\n' && n < max;) {
        if ((*p >= '0' && *p <= '9') || (*p == '-' && p[1] >= '0' && p[1] <= '9')) {
            char *end;
            v[n++] = strtod(p, &end);
            p = end;
        } else {
            p++;
        }
    }
    return n;
}

/* Well-formed enough for a browser: one <svg> root, every tag closed in
 * order, no raw '<' or '&' in text or attributes. */
static void check_svg(const char *name, const char *s) {
    size_t len = strlen(s);
    if (strncmp(s, "<svg ", 5)) fail_msg("%s does not start with <svg", name);
    while (len && (s[len - 1] == '\n' || s[len - 1] == ' ')) len--;
    if (len < 6 || strncmp(s + len - 6, "</svg>", 6)) fail_msg("%s does not end with </svg>", name);
    char stack[32][32];
    int depth = 0, roots = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '&') {
            const char *ents[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"};
            int ok = 0;
            for (int k = 0; k < 5; k++) ok |= !strncmp(s + i, ents[k], strlen(ents[k]));
            if (!ok) fail_msg("%s: bare '&' at %zu", name, i);
            continue;
        }
        if (s[i] == '>') fail_msg("%s: stray '>' at %zu", name, i);
        if (s[i] != '<') continue;
        const char *end = strchr(s + i, '>');
        if (!end) fail_msg("%s: unterminated tag at %zu", name, i);
        for (const char *q = s + i + 1; q < end; q++)
            if (*q == '<') fail_msg("%s: '<' inside a tag at %zu", name, i);
        int closing = s[i + 1] == '/', self = end[-1] == '/';
        const char *nm = s + i + 1 + closing;
        size_t nl = strcspn(nm, " />\n");
        if (nl == 0 || nl >= 32) fail_msg("%s: bad tag name at %zu", name, i);
        if (closing) {
            if (!depth || strncmp(stack[depth - 1], nm, nl) || stack[depth - 1][nl])
                fail_msg("%s: </%.*s> does not close the open tag at %zu", name, (int)nl, nm, i);
            depth--;
        } else if (!self) {
            if (depth == 0) roots++;
            if (depth == 32) fail_msg("%s: nesting too deep", name);
            snprintf(stack[depth++], 32, "%.*s", (int)nl, nm);
        }
        i = (size_t)(end - s);
    }
    if (depth != 0 || roots != 1) fail_msg("%s: %d tags left open, %d roots", name, depth, roots);
}

/* ------------------------------------------------------------ end to end */

static void run_report(const char *dir, const char *extra, char **out) {
    int st = th_run_kvlm(out, "report -m " TINY " --ids '" PROMPT8 "' -o '%s' " SMALL " %s", dir, extra);
    if (st != 0) fail_msg("kvlm report: exit %d: %s", st, *out);
}

static void test_report_files(void **state) {
    (void)state;
    char *tmp = th_tempdir(), *out = NULL;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/nested/report", tmp); /* created with its parent */
    run_report(dir, "", &out);
    const char *progress[] = {"report: kv done", "report: bench done", "report: sample-stats done",
                              "report: gen-stats done"};
    for (size_t i = 0; i < 4; i++) expect_in(out, progress[i]);
    free(out);

    json_t *r = load_json(path_in(dir, "report.json"));
    char *md = th_read_file(path_in(dir, "report.md"), NULL);
    assert_non_null(md);
    const char *sections[] = {"# kvlm report", "## Machine and run", "## Model", "## KV cache size",
                              "## Prefill and decode", "## KV cache on vs off", "## Next-token distribution by temperature",
                              "## Repetition by decoding setting"};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) expect_in(md, sections[i]);
    expect_in(md, json_string_value(get(r, "command")));
    expect_in(md, "kvlm report -m " TINY " --ids '" PROMPT8 "'");
    char buf[256];

    /* machine facts */
    assert_true(json_integer_value(get(r, "machine.threads")) > 0);
    assert_true(json_number_value(get(r, "machine.bandwidth_gbs")) > 0);
    snprintf(buf, sizeof buf, "| kernels (ISA) | %s |", json_string_value(get(r, "machine.isa")));
    expect_in(md, buf);
    snprintf(buf, sizeof buf, "| date | %s |", json_string_value(get(r, "machine.date")));
    expect_in(md, buf);
    double v[4];
    assert_int_equal(md_numbers(md, "## Machine and run", "| measured read bandwidth | ", v, 1), 1);
    expect_close(v[0], json_number_value(get(r, "machine.bandwidth_gbs")), 1, "bandwidth");

    /* KV: 2 x 2 layers x 4 heads x 16 dims = 256 numbers per token */
    assert_int_equal(json_array_size(get(r, "kv_presets.models")), 8); /* the 6 of the article, Gemma 3 1B, Qwen3 30B-A3B */
    assert_int_equal(json_integer_value(get(r, "kv_model.models.0.bytes_per_token")), 512);
    /* the runs' KV cache: f16, the default of every command that loads a model */
    assert_string_equal(json_string_value(get(r, "kv_model_engine.kv_dtype")), "f16");
    assert_int_equal(json_integer_value(get(r, "kv_model_engine.models.0.bytes_per_token")), 512);
    assert_int_equal(json_integer_value(get(r, "kv_model_engine.models.0.max_context_bytes")), 32 * 512);
    expect_in(md, "| **hf\\_f32 (this model)** | 2 | 4 | 16 | 512 B |");
    expect_in(md, "| GPT-2 124M | 12 | 12 | 64 | 36 KiB | 144 MiB | 4.5 GiB | 1024 | 36 MiB |");
    expect_in(md, "keep K and V in f16: 512 bytes (512 B) per token, 16384 bytes (16 KiB)");

    /* timing */
    json_t *b = get(r, "bench");
    assert_int_equal(json_integer_value(get(b, "pp.tokens")), 8);
    assert_int_equal(json_integer_value(get(b, "tg.tokens")), 8);
    assert_true(json_number_value(get(b, "cache.speedup")) > 0);
    assert_int_equal(md_numbers(md, "## Prefill and decode", "| decode | 8 | ", v, 4), 4);
    expect_close(v[0], json_number_value(get(b, "tg.mean_tok_s")), 2, "decode mean tok/s");
    expect_close(v[1], json_number_value(get(b, "tg.sd_tok_s")), 2, "decode sd");
    expect_close(v[2], json_number_value(get(b, "tg.median_tok_s")), 2, "decode median tok/s");
    expect_close(v[3], json_number_value(get(b, "tg.median_ms_per_token")), 3, "decode ms/token");
    assert_int_equal(md_numbers(md, "## KV cache on vs off", "Speed-up with the cache: ", v, 1), 1);
    expect_close(v[0], json_number_value(get(b, "cache.speedup")), 2, "speed-up");

    /* next-token statistics: one row per temperature, the JSON's numbers */
    json_t *temps = get(r, "sample_stats.temperatures");
    assert_int_equal(json_array_size(temps), 3);
    const double temp_values[3] = {0.5, 1, 1.5}; /* exact in binary: one way to print each */
    for (size_t i = 0; i < 3; i++) {
        json_t *st = get(json_array_get(temps, i), "stats");
        assert_true(json_number_value(get(json_array_get(temps, i), "temperature")) == temp_values[i]);
        snprintf(buf, sizeof buf, "| %.2f | ", temp_values[i]);
        assert_int_equal(md_numbers(md, "## Next-token distribution by temperature", buf, v, 4), 4);
        expect_close(v[0], json_number_value(get(st, "entropy")), 3, "entropy");
        expect_close(v[1], 100 * json_number_value(get(st, "top1")), 2, "top-1 %");
        expect_close(v[2], 100 * json_number_value(get(st, "top5")), 2, "top-5 %");
        assert_true(v[3] == (double)json_integer_value(get(st, "n90")));
    }

    /* repetition: seven settings of 12 tokens */
    json_t *settings = get(r, "gen_stats.settings");
    assert_int_equal(json_array_size(settings), 7);
    for (size_t i = 0; i < 7; i++) {
        json_t *row = json_array_get(settings, i);
        assert_int_equal(json_integer_value(get(row, "tokens")), 12);
        snprintf(buf, sizeof buf, "| %s | ", json_string_value(get(row, "setting")));
        assert_int_equal(md_numbers(md, "## Repetition by decoding setting", buf, v, 3), 3);
        expect_close(v[0], json_number_value(get(row, "distinct_ratio")), 3, "distinct ratio");
        expect_close(v[1], json_number_value(get(row, "repeated_4gram_rate")), 3, "repeated 4-gram rate");
        assert_true(v[2] == 12);
    }

    /* charts: referenced, present, well formed */
    assert_int_equal(json_object_size(get(r, "charts")), N_CHARTS);
    for (size_t i = 0; i < N_CHARTS; i++) {
        snprintf(buf, sizeof buf, "](%s)", charts[i]);
        expect_in(md, buf);
        char *svg = th_read_file(path_in(dir, charts[i]), NULL);
        if (!svg) fail_msg("%s was not written", charts[i]);
        check_svg(charts[i], svg);
        free(svg);
    }
    char *kv = th_read_file(path_in(dir, "kv_bytes.svg"), NULL);
    expect_in(kv, "Llama 2 70B");
    expect_in(kv, "hf_f32 (this model)");
    expect_in(kv, "stroke-dasharray");
    free(kv);
    json_decref(r);
    free(md);
    th_rmtree(tmp);
    free(tmp);
}

/* Real numbers agree to the 6 significant digits the commands print. */
static void expect_same(json_t *a, json_t *b, const char *where) {
    if (json_is_real(a) || json_is_real(b)) {
        double x = json_number_value(a), y = json_number_value(b);
        if (fabs(x - y) > 1e-5 * fmax(1, fabs(x))) fail_msg("%s: %.10g vs %.10g", where, x, y);
        return;
    }
    if (json_is_object(a)) {
        const char *k;
        json_t *v;
        if (json_object_size(a) != json_object_size(b)) fail_msg("%s: different keys", where);
        json_object_foreach(a, k, v) expect_same(v, json_object_get(b, k), k);
        return;
    }
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) fail_msg("%s: different lengths", where);
        for (size_t i = 0; i < json_array_size(a); i++) expect_same(json_array_get(a, i), json_array_get(b, i), where);
        return;
    }
    if (!json_equal(a, b)) fail_msg("%s differs", where);
}

static json_t *command_json(const char *args) {
    char *out = NULL;
    int st = th_run_kvlm(&out, "%s 2>/dev/null", args);
    if (st != 0) fail_msg("kvlm %s: exit %d: %s", args, st, out);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("kvlm %s: not JSON: %s", args, je.text);
    free(out);
    return j;
}

/* The documents in the report are the ones the single commands print;
 * --json prints report.json on stdout. */
static void test_report_reuses_commands(void **state) {
    (void)state;
    char *tmp = th_tempdir(), *out = NULL;
    int st = th_run_kvlm(&out, "report -m " TINY " --ids '" PROMPT8 "' -o '%s' " SMALL " --seed 7 --json 2>/dev/null",
                         tmp);
    if (st != 0) fail_msg("exit %d: %s", st, out);
    json_error_t je;
    json_t *printed = json_loads(out, 0, &je), *r = load_json(path_in(tmp, "report.json"));
    if (!printed) fail_msg("--json did not print JSON: %s", je.text);
    assert_true(json_equal(printed, r));
    free(out);

    json_t *ss = command_json("sample-stats -m " TINY " --ids '" PROMPT8 "' --temps 0.5,1,1.5 --top 10 --json");
    expect_same(ss, get(r, "sample_stats"), "sample_stats");
    json_t *gs = command_json("gen-stats -m " TINY " --ids '" PROMPT8 "' -n 12 --seed 7 --json");
    expect_same(gs, get(r, "gen_stats"), "gen_stats");
    json_t *kv = command_json("kv --json");
    for (size_t i = 0; i < 7; i++) {
        json_t *a = json_array_get(json_object_get(kv, "models"), i);
        json_t *b = json_array_get(get(r, "kv_presets.models"), i);
        assert_int_equal(json_integer_value(get(a, "bytes_per_token")), json_integer_value(get(b, "bytes_per_token")));
        /* 4,096 = 16 x 2^8: the ninth of the report's contexts */
        assert_int_equal(json_integer_value(get(b, "totals.8.tokens")), 4096);
        assert_int_equal(json_integer_value(get(a, "totals.0.bytes")), json_integer_value(get(b, "totals.8.bytes")));
    }
    json_t *kvm = command_json("kv -m " TINY " --kv-dtype f16 --ctx 32 --json");
    assert_int_equal(json_integer_value(get(kvm, "models.0.totals.0.bytes")),
                     json_integer_value(get(r, "kv_model_engine.models.0.totals.0.bytes")));
    json_decref(kvm);
    json_decref(kv);
    json_decref(gs);
    json_decref(ss);
    json_decref(printed);
    json_decref(r);
    th_rmtree(tmp);
    free(tmp);
}

/* ------------------------------------------------------------ bad input */

typedef struct bad_case {
    const char *args; /* %s: the scratch directory */
    int status;
    const char *needle; /* %s: the scratch directory */
} bad_case;

static void test_bad_input(void **state) {
    (void)state;
    char *tmp = th_tempdir();
    char file[1024];
    snprintf(file, sizeof file, "%s/plain-file", tmp);
    assert_int_equal(th_write_file(file, "x", 1), 0);
    const bad_case cases[] = {
        {"report -m " TINY " --ids 1", 2, "give -o DIR"},
        {"report -m " TINY " --ids 1 -o %s/plain-file", 1, "cannot write to %s/plain-file: Not a directory"},
        {"report -m " TINY " --ids 1 -o %s/plain-file/sub", 1, "cannot write to %s/plain-file/sub"},
        {"report -m /nonexistent/model --ids 1 -o %s/a", 1, "/nonexistent/model"},
        {"report -m " TINY " -o %s/b", 1, "the default prompt needs a tokenizer"},
        {"report -m " TINY " -p x --ids 1 -o %s/h", 2, "exactly one of -p"},
        {"report -m " TINY " --ids 1 -o %s/i --pp 31", 2, "--pp 31 leaves 1 of the context window of 32 for --tg"},
        {"report -m " TINY " --ids 1 -o %s/c --temps 0", 2, "--temps"},
        {"report -m " TINY " --ids 1 -o %s/d --pp 30 --tg 8", 2, "exceed the context window of 32"},
        {"report -m " TINY " --ids 1 -o %s/e --repeats 0", 2, "--repeats"},
        {"report -m " TINY " --ids 1 -o %s/f --bogus", 2, "unknown argument"},
        {"report --synthetic gpt2-999m --ids 1 -o %s/g", 1, "unknown synthetic preset"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char args[2048], needle[1024], *out = NULL;
        snprintf(args, sizeof args, cases[i].args, tmp);
        snprintf(needle, sizeof needle, cases[i].needle, tmp);
        int st = th_run_kvlm(&out, "%s", args);
        if (st != cases[i].status || !strstr(out, needle))
            fail_msg("kvlm %s: exit %d (want %d), output: %s (want '%s')", args, st, cases[i].status, out, needle);
        free(out);
    }
    /* nothing measured, nothing written: no output directory was made */
    const char *never[] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
    struct stat sb;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (!stat(path_in(tmp, never[i]), &sb)) fail_msg("%s was created", path_in(tmp, never[i]));
    th_rmtree(tmp);
    free(tmp);
}

/* -------------------------------------------------------- the SVG writer */

static void test_svg_text_and_gaps(void **state) {
    (void)state;
    double x[5] = {1, 2, 3, 4, 5}, y[5] = {1, NAN, 3, -1, 5};
    svg_series s[2] = {{.name = "a<b & \"c\" 'd'", .x = x, .y = y, .n = 5},
                       {.name = "bad \xff\xfe utf8\x01 and a very long name that goes on and on", .x = x, .y = x,
                        .n = 5, .dashed = 1}};
    svg_line_chart c = {.title = "<script>alert(1)</script>", .x = {.label = "x & y"},
                        .y = {.label = "log y", .log = 1}, .series = s, .n_series = 2};
    char *svg = svg_line_chart_render(&c);
    assert_non_null(svg);
    check_svg("line", svg);
    assert_null(strstr(svg, "<script"));
    expect_in(svg, "&lt;script&gt;");
    expect_in(svg, "a&lt;b &amp; &quot;c&quot; &#39;d&#39;");
    expect_in(svg, "bad \xEF\xBF\xBD\xEF\xBF\xBD utf8 ");
    expect_in(svg, "\xE2\x80\xA6"); /* the long name is cut */
    /* NaN breaks the line and -1 is off a log axis: three pieces, 3 markers */
    char *p = strstr(svg, "<path d=\"M"); /* the axes */
    assert_non_null(p);
    p = strstr(p + 1, "<path d=\"M"); /* the first series */
    assert_non_null(p);
    int moves = 0;
    for (char *q = p + 9; *q != '"'; q++) moves += *q == 'M';
    assert_int_equal(moves, 3);
    int circles = 0;
    for (char *q = svg; (q = strstr(q, "<circle")); q++) circles++;
    assert_int_equal(circles, 3 + 5);
    free(svg);

    const char *groups[] = {"one", "a much longer group label that needs more room", "three"}, *series[] = {"s1", "s2"};
    double v[6] = {1, 2, NAN, 4, 0.5, INFINITY};
    svg_bar_chart bc = {.title = "bars", .x_label = "g", .y = {.label = "v"}, .groups = groups, .n_groups = 3,
                        .series = series, .n_series = 2, .values = v, .value_labels = 1};
    svg = svg_bar_chart_render(&bc);
    assert_non_null(svg);
    check_svg("bars", svg);
    int bars = 0;
    for (char *q = svg; (q = strstr(q, "<rect")); q++) bars++;
    assert_int_equal(bars, 1 + 4 + 2); /* background, finite values, legend swatches */
    expect_in(svg, "rotate(-30)");     /* the long label does not fit its slot */
    free(svg);
    assert_null(svg_bar_chart_render(&(svg_bar_chart){.n_groups = 0}));
    assert_null(svg_line_chart_render(&(svg_line_chart){.n_series = 0}));
}

static void test_svg_ticks(void **state) {
    (void)state;
    char b[32];
    svg_fmt_bytes(36864, b, sizeof b);
    assert_string_equal(b, "36 KiB");
    svg_fmt_bytes(4.5 * 1073741824.0, b, sizeof b);
    assert_string_equal(b, "4.5 GiB");
    svg_fmt_binary_count(131072, b, sizeof b);
    assert_string_equal(b, "128k");
    svg_fmt_binary_count(512, b, sizeof b);
    assert_string_equal(b, "512");
    svg_fmt_percent(0.25, b, sizeof b);
    assert_string_equal(b, "25%");
    scale s;
    linear_ticks(&s, 0.2, 2.0);
    assert_true(s.lo == 0 && fabs(s.hi - 2) < 1e-12);
    assert_int_equal(s.n_ticks, 5); /* 0, 0.5, 1, 1.5, 2 */
    log_ticks(&s, 16, 131072, 2);
    assert_true(s.lo == 16 && s.hi == 131072);
    assert_true(s.n_ticks >= 5 && s.n_ticks <= 9);
    for (int i = 1; i < s.n_ticks; i++) assert_true(s.ticks[i] > s.ticks[i - 1]);
    log_ticks(&s, 3, 70, 10);
    assert_true(s.lo == 1 && s.hi == 100);
    assert_int_equal(s.n_ticks, 7); /* 1 2 5 10 20 50 100 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_files),
        cmocka_unit_test(test_report_reuses_commands),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_svg_text_and_gaps),
        cmocka_unit_test(test_svg_ticks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
