/*
 * The Jinja interpreter (src/app/template/) against Python's jinja2.
 *
 * Group 1, the corpus: every real chat template of
 * tests/fixtures/templates/ (manifest.json, with provenance) rendered with
 * every conversation of conversations.json must give byte-identical text to
 * expected.json (made by tools/template_reference.py with jinja2 configured
 * as transformers configures it), or fail where jinja2 failed, with the
 * same message when the template called raise_exception. A conversation's
 * "variables" (enable_thinking, thinking) are passed as further template
 * variables, as the reference passes them.
 *
 * Group 2, the language and the limits, each against an exact expected
 * string: whitespace control, trim_blocks/lstrip_blocks, loops and loop
 * variables, break/continue, namespaces, macros, slicing, filters, tests,
 * Undefined, tojson, Python str() of values; parse errors naming line and
 * column; output, iteration, depth and memory limits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "helpers.h"
#include "app/template/template.h"

#define DIR "tests/fixtures/templates/"
#define NOW 1721997296LL /* 2024-07-26 12:34:56 UTC, as tools/template_reference.py */

static void show_diff(const char *name, const char *conv, const char *want, const char *got) {
    size_t i = 0;
    while (want[i] && want[i] == got[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    fprintf(stderr, "  %s x %s: first difference at byte %zu\n    want ...%.80s\n    got  ...%.80s\n", name, conv, i,
            want + from, got + from);
}

static void test_corpus(void **state) {
    (void)state;
    json_error_t je;
    json_t *manifest = json_load_file(DIR "manifest.json", 0, &je);
    json_t *convs = json_load_file(DIR "conversations.json", 0, &je);
    json_t *exp_root = json_load_file(DIR "expected.json", 0, &je);
    assert_non_null(manifest);
    assert_non_null(convs);
    assert_non_null(exp_root);
    json_t *expected = json_object_get(exp_root, "expected");
    size_t ti;
    json_t *t;
    int n_templates = 0, n_convs = (int)json_object_size(convs), same = 0, errors_matched = 0, bad = 0;
    json_array_foreach(manifest, ti, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        char path[512];
        snprintf(path, sizeof path, DIR "%s", json_string_value(json_object_get(t, "file")));
        size_t len;
        char *src = th_read_file(path, &len);
        assert_non_null(src);
        kvlm_error err = {0};
        tpl_template *tpl = tpl_parse(src, len, &err);
        if (!tpl) fprintf(stderr, "  %s: %s\n", name, err.msg);
        assert_non_null(tpl);
        n_templates++;
        const char *cname;
        json_t *conv;
        json_object_foreach(convs, cname, conv) {
            json_t *vars = json_object();
            json_object_set(vars, "messages", json_object_get(conv, "messages"));
            json_t *tools = json_object_get(conv, "tools");
            json_object_set_new(vars, "tools", tools ? json_incref(tools) : json_null());
            json_object_set_new(vars, "documents", json_null());
            json_object_set(vars, "add_generation_prompt", json_object_get(conv, "add_generation_prompt"));
            json_object_set(vars, "bos_token", json_object_get(t, "bos_token"));
            json_object_set(vars, "eos_token", json_object_get(t, "eos_token"));
            /* a conversation's own variables (enable_thinking...), as
             * template_reference.py passes them */
            json_t *extra = json_object_get(conv, "variables");
            if (extra) assert_int_equal(json_object_update(vars, extra), 0);
            tpl_render_opts o = {.now = NOW};
            tpl_result r;
            int rc = tpl_render(tpl, vars, &o, &r);
            json_t *want = json_object_get(json_object_get(expected, name), cname);
            const char *out = json_string_value(json_object_get(want, "output"));
            if (out) {
                if (rc) {
                    fprintf(stderr, "  %s x %s: kvlm failed: %s\n", name, cname, r.err.msg);
                    bad++;
                } else if (strlen(out) != r.len || memcmp(out, r.text, r.len)) {
                    show_diff(name, cname, out, r.text);
                    bad++;
                } else same++;
            } else {
                const char *msg = json_string_value(json_object_get(want, "error"));
                int raised = json_is_true(json_object_get(want, "raised"));
                if (!rc) {
                    fprintf(stderr, "  %s x %s: jinja2 failed (%s) but kvlm rendered\n", name, cname, msg);
                    bad++;
                } else if (raised && (!r.raised || strcmp(msg, r.err.msg))) {
                    fprintf(stderr, "  %s x %s: want raise_exception '%s', got '%s'\n", name, cname, msg, r.err.msg);
                    bad++;
                } else errors_matched++;
            }
            tpl_result_free(&r);
            json_decref(vars);
        }
        tpl_free(tpl);
        free(src);
    }
    fprintf(stderr, "  %d templates x %d conversations: %d identical, %d errors as jinja2's, %d different\n",
            n_templates, n_convs, same, errors_matched, bad);
    assert_int_equal(bad, 0);
    assert_int_equal(n_templates, 47);
    assert_int_equal(n_convs, 11);
    assert_int_equal(same + errors_matched, 47 * 11);
    json_decref(manifest);
    json_decref(convs);
    json_decref(exp_root);
}

/* ------------------------------------------------------------- language */

/* Renders src with vars (JSON text); returns the malloc'ed output or
 * "ERROR: message" / "RAISED: message". */
static char *render(const char *src, const char *vars_json, const tpl_limits *lim) {
    kvlm_error err = {0};
    tpl_template *t = tpl_parse(src, strlen(src), &err);
    char *out;
    if (!t) {
        out = malloc(strlen(err.msg) + 16);
        sprintf(out, "PARSE: %s", err.msg);
        return out;
    }
    json_error_t je;
    json_t *vars = json_loads(vars_json ? vars_json : "{}", 0, &je);
    assert_non_null(vars);
    tpl_render_opts o = {.limits = lim, .now = NOW};
    tpl_result r;
    if (tpl_render(t, vars, &o, &r)) {
        out = malloc(strlen(r.err.msg) + 16);
        sprintf(out, "%s: %s", r.raised ? "RAISED" : "ERROR", r.err.msg);
    } else out = r.text;
    json_decref(vars);
    tpl_free(t);
    return out;
}

static void expect(const char *src, const char *vars, const char *want) {
    char *got = render(src, vars, NULL);
    if (strcmp(got, want)) fprintf(stderr, "  template: %s\n  want: [%s]\n  got:  [%s]\n", src, want, got);
    assert_string_equal(got, want);
    free(got);
}

static void expect_prefix(const char *src, const char *vars, const tpl_limits *lim, const char *want) {
    char *got = render(src, vars, lim);
    if (strncmp(got, want, strlen(want))) fprintf(stderr, "  template: %s\n  want: [%s...]\n  got:  [%s]\n", src, want, got);
    assert_true(!strncmp(got, want, strlen(want)));
    free(got);
}

static void test_whitespace(void **state) {
    (void)state;
    expect("a  {{- 'b' -}}  \n c", NULL, "abc");
    expect("{% if true %}\nyes\n{% endif %}\nend", NULL, "yes\nend");          /* trim_blocks */
    expect("x\n    {% if true %}\n    y\n    {% endif %}\nz", NULL, "x\n    y\nz"); /* lstrip_blocks */
    expect("  {{ 'v' }}\n", NULL, "  v");                                          /* no lstrip for {{, trailing \n dropped */
    expect("a {#- comment -#} b", NULL, "ab");
    expect("a\n  {# c #}\nb", NULL, "a\nb");
    expect("{%+ if true %}k{% endif %}", NULL, "k");
    expect("line\r\nnext\r\n", NULL, "line\nnext");
}

static void test_statements(void **state) {
    (void)state;
    expect("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} "
           "{% endfor %}",
           NULL, "10TrueFalse3 21FalseFalse3 32FalseTrue3 ");
    expect("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", "{\"d\":{\"b\":1,\"a\":2}}", "b=1;a=2;");
    expect("{% for k in d %}{{ k }}{% endfor %}", "{\"d\":{\"b\":1,\"a\":2}}", "ba");
    expect("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}", "{\"xs\":[1,2,3]}", "2232");
    expect("{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", NULL, "empty");
    expect("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
           "{{ x }}{% endfor %}",
           NULL, "013");
    expect("{% set ns = namespace(n=0, s='') %}{% for x in 'abc' %}{% set ns.n = ns.n + 1 %}{% set ns.s = x ~ ns.s %}"
           "{% endfor %}{{ ns.n }} {{ ns.s }}",
           NULL, "3 cba");
    expect("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", NULL, "1");
    expect("{% set a, b = 1, 2 %}{{ a + b }}", NULL, "3");
    expect("{% set t %}in {{ 1 + 1 }}{% endset %}[{{ t }}]", NULL, "[in 2]");
    expect("{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(2, b='x') }}{{ m(3, 'y') }}", NULL,
           "<1B><2x><3y>");
    expect("{% filter upper %}abc{{ 'd' }}{% endfilter %}", NULL, "ABCD");
    expect("{% if a %}A{% elif b %}B{% else %}C{% endif %}", "{\"b\":1}", "B");
    expect("{% generation %}g{% endgeneration %}", NULL, "g");
    expect("{{ raise_exception('bad ' ~ 1) }}", NULL, "RAISED: bad 1");
}

static void test_expressions(void **state) {
    (void)state;
    expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2.5 }}", NULL,
           "3 -4 1 2 3.5 1024 3.5");
    expect("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' * 2 }} {{ [1] + [2] }}", NULL, "a1NoneTrue abab [1, 2]");
    expect("{{ 1 if false }}|{{ 'y' if 1 < 2 < 3 else 'n' }}|{{ not 1 in [1] }}|{{ 2 not in [1] }}", NULL,
           "|y|False|True");
    expect("{{ x or 'd' }} {{ 0 and 1 }} {{ 'b' in 'abc' }} {{ 'k' in {'k': 1} }}", NULL, "d 0 True True");
    expect("{{ 'héllo'[::-1] }} {{ [1,2,3,4][1:] }} {{ [1,2,3,4][-2:] }} {{ 'abcdef'[1:5:2] }} {{ [1,2,3][-1] }}",
           NULL, "olléh [2, 3, 4] [3, 4] bd 3");
    /* Steps and bounds near the 64-bit limits (a fuzzer finding: the index
     * loop used to overflow); the values follow Python's slicing. */
    expect("{{ 'abc'[1:66666666:9223372036854775807] }} {{ [1,2,3][::-9223372036854775807] }} "
           "{{ 'abc'[-9223372036854775807:9223372036854775807] }} {{ [1,2,3][::(-9223372036854775807 - 1)] }}",
           NULL, "b [3] abc [3]");
    expect_prefix("{{ 'abc'[1:2:99999999999999999999] }}", NULL, NULL,
                  "PARSE: template line 1, column 14: integer literal out of range");
    expect_prefix("{{ (-9223372036854775807 - 1) | abs }}", NULL, NULL,
                  "ERROR: template line 1: integer overflow in abs");
    /* A namespace holding itself prints as Python does (a fuzzer finding:
     * the printer recursed until the stack ran out); values nested deeper
     * than the printer goes are an error, not a crash. */
    expect("{% set ns = namespace(a=0) %}{% set ns.a = ns %}{{ ns.a }}|{{ [ns] }}|{% set ns.d = {'n': ns} %}{{ ns.d }}",
           NULL,
           "<Namespace {'a': <Namespace {...}>}>|[<Namespace {'a': <Namespace {...}>}>]|"
           "{'n': <Namespace {'a': <Namespace {...}>, 'd': {...}}>}");
    expect("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}"
           "{{ ns.l == ns.l }} {{ ns.l | length }}",
           NULL, "True 1");
    expect_prefix("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
                  NULL, NULL, "ERROR: template line 1: lists or dicts nested too deeply to print");
    /* Text that is not UTF-8 (a fuzzer finding: a string starting with a
     * continuation byte was cut into one piece more than its code points,
     * and written past its list): stray continuation bytes at the start
     * make one piece. */
    expect("{{ '\x80" "ab'[1:] | length }}|{% for c in '\x80\x80" "a' %}<{{ c }}>{% endfor %}", NULL,
           "2|<\x80\x80><a>");
    expect("{{ {'a': [1, 'x', none, true, 1.0, 1e20, 0.1]} }}", NULL, "{'a': [1, 'x', None, True, 1.0, 1e+20, 0.1]}");
    expect("{{ \"it's\" }} {{ ['it\\'s'] }} {{ 'tab\\there\\u00e9\\n' }}", NULL, "it's [\"it's\"] tab\there\u00e9\n");
    expect("{{ m.content }}|{{ m['role'] }}|{{ m.missing }}|{{ m.missing is defined }}", "{\"m\":{\"role\":\"r\"}}",
           "|r||False");
    expect("{{ u }}|{{ u is defined }}|{{ u | length }}|{% for x in u %}x{% endfor %}|{{ u is none }}", NULL,
           "|False|0||False");
    expect_prefix("{{ u.x }}", NULL, NULL, "ERROR: template line 1: 'u' is undefined");
    expect_prefix("{{ m.a.b }}", "{\"m\":{}}", NULL, "ERROR: template line 1: 'dict object' has no attribute 'a'");
    expect("{{ none.x }}|{{ 'abc'.x }}", NULL, "|");
    expect_prefix("{{ 1 + 'a' }}", NULL, NULL, "ERROR: template line 1: unsupported operand");
    expect("{{ strftime_now('%d %b %Y') }}", NULL, "26 Jul 2024");
}

static void test_filters(void **state) {
    (void)state;
    expect("{{ '  a b  ' | trim }}|{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ 'hello world' | capitalize }}|"
           "{{ 'hello world' | title }}",
           NULL, "a b|ABab|Hello world|Hello World");
    expect("{{ [1,2] | join(', ') }}|{{ ['a','b'] | first }}{{ ['a','b'] | last }}|{{ 'abc' | list }}|{{ 3 | string }}",
           NULL, "1, 2|ab|['a', 'b', 'c']|3");
    expect("{{ x | default('d') }}|{{ '' | default('e', true) }}|{{ none | default('f') }}", NULL, "d|e|None");
    /* Empty sequences through the copying filters (an empty list has no
     * storage; found by the template fuzzer). */
    expect("{{ [] | list }}|{{ x | list | length }}|{{ [] | reverse | list }}|{{ [] | sort }}|{{ (x | list)[1] }}|"
           "{{ [] + [] }}|{{ [] * 3 }}|{{ {} | list }}|{{ '' ~ '' }}|{{ '' + '' }}|",
           NULL, "[]|0|[]|[]||[]|[]|[]|||");
    expect("{{ {'a': 1} | items | list }}|{{ 'a-b' | replace('-', '+') }}|{{ [3,1,2] | sort }}|{{ [1,1,2] | unique | "
           "list }}|{{ ['a', 'A', 'b'] | unique | list }}{{ ['a', 'A'] | unique(case_sensitive=true) | list }}",
           NULL, "[('a', 1)]|a+b|[1, 2, 3]|[1, 2]|['a', 'b']['a', 'A']");
    expect("{{ ms | map(attribute='r') | join }}|{{ ms | selectattr('r', 'equalto', 'b') | list | length }}|"
           "{{ ms | rejectattr('r', 'equalto', 'b') | map(attribute='r') | list }}",
           "{\"ms\":[{\"r\":\"a\"},{\"r\":\"b\"}]}", "ab|1|['a']");
    expect("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'x\\ny' | indent(2, true) }}", NULL, "a\n  b\n\n  c|  x\n  y");
    expect("{{ v | tojson }}", "{\"v\":{\"s\":\"é\\\"\\n\",\"n\":[1,2.5,null,true]}}",
           "{\"s\": \"é\\\"\\n\", \"n\": [1, 2.5, null, true]}");
    expect("{{ v | tojson(indent=2) }}", "{\"v\":{\"a\":[1,{}],\"b\":[]}}",
           "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
    expect("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}", NULL, "{\"a\":2,\"b\":1}");
    expect("{{ 'é🦙\"' | tojson(ensure_ascii=true) }}|{{ '<{}|{}|{{x}}|{x}>'.format(1, 'a', x=none) }}", NULL,
           "\"\\u00e9\\ud83e\\udd99\\\"\"|<1|a|{x}|None>");
    expect_prefix("{{ '{}{0}'.format(1) }}", NULL, NULL, "ERROR: template line 1: format(): cannot switch");
    expect("{{ ' x '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'a b  c'.split() }}|{{ 'abc'.startswith('ab') }}"
           "{{ 'abc'.endswith(('x', 'c')) }}|{{ '--a--'.lstrip('-') }}{{ '--a--'.rstrip('-') }}|{{ d.get('k', 0) }}"
           "{{ d.get('z') }}|{{ d.keys() | list }}{{ d.values() | list }}",
           "{\"d\":{\"k\":1}}", "x|['a', 'b']|['a', 'b', 'c']|TrueTrue|a----a|1None|['k'][1]");
    expect("{{ 1 is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}"
           "{{ none is none }}{{ true is true }}{{ false is false }}{{ 3 is odd }}{{ 4 is divisibleby 2 }}",
           NULL, "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
}

static void test_parse_errors(void **state) {
    (void)state;
    expect("a\n{% if x %}\nb", NULL, "PARSE: template line 3, column 2: unexpected end of template: expected {% endif %}");
    expect("{{ 1 + }}", NULL, "PARSE: template line 1, column 8: unexpected end of print statement");
    expect("ok\n  {% frobnicate %}", NULL, "PARSE: template line 2, column 6: unknown or unsupported statement 'frobnicate'");
    expect("{{ 'abc }}", NULL, "PARSE: template line 1, column 4: unterminated string literal");
    expect("{% endfor %}", NULL, "PARSE: template line 1, column 4: unexpected 'endfor'");
    expect("{{ x", NULL, "PARSE: template line 1, column 1: unexpected end of template: '{{' is never closed by '}}'");
    expect("{% for x in y recursive %}{% endfor %}", NULL,
           "PARSE: template line 1, column 15: recursive loops are not supported");
}

static void test_limits(void **state) {
    (void)state;
    tpl_limits out = {.max_output = 100};
    expect_prefix("{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", NULL, &out,
                  "ERROR: template line 1: rendered text exceeds the 100 bytes allowed");
    tpl_limits it = {.max_iterations = 50};
    expect_prefix("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}", NULL, &it,
                  "ERROR: template line 1: more than 50 loop iterations");
    expect_prefix("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, NULL,
                  "ERROR: template line 1: nesting deeper than 200");
    tpl_limits mem = {.max_memory = 1 << 20};
    expect_prefix("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", NULL,
                  &mem, "ERROR: template line 1: ");
    expect_prefix("{{ 9223372036854775807 + 1 }}", NULL, NULL, "ERROR: template line 1: integer overflow in '+'");
    expect_prefix("{{ 'ab' * 9223372036854775807 }}", NULL, NULL, "ERROR: template line 1: repetition too large");
    expect_prefix("{{ range(-9223372036854775807, 9223372036854775807) | length }}", NULL, NULL,
                  "ERROR: template line 1: range() of more items than the loop limit");
    /* deep nesting in the source is a parse error, not a stack overflow */
    char deep[4000];
    strcpy(deep, "{{ ");
    for (int i = 0; i < 1000; i++) strcat(deep, "(");
    expect_prefix(deep, NULL, NULL, "PARSE: template line 1, column ");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus),     cmocka_unit_test(test_whitespace),   cmocka_unit_test(test_statements),
        cmocka_unit_test(test_expressions), cmocka_unit_test(test_filters),      cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
