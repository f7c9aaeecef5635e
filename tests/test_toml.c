/* test_toml.c - the strict TOML parser: values, tables, and that every
 * malformed input is rejected with the right line and column. */
#include <math.h>

#include "t_util.h"
#include "core/toml.h"

static struct toml_value *parse_ok(const char *text)
{
    char err[512];
    struct toml_value *v = toml_parse(text, strlen(text), "t.toml", err, sizeof err);
    if (!v)
        fail_msg("unexpected parse error for [%s]: %s", text, err);
    return v;
}

static void test_scalars(void **state)
{
    (void)state;
    struct toml_value *r = parse_ok("# comment\n"
                                    "a = 1\nb = -42\nc = +7\nd = 1_000_000\n"
                                    "e = 0x1F\nf = 0o17\ng = 0b101\n"
                                    "h = 3.5\ni = -1e-3\nj = 6.02E23\nk = inf\nl = -inf\nm = nan\n"
                                    "n = true\no = false\n"
                                    "p = \"tab\\there \\\"q\\\" \\u00e9\\U0001F600\"\nq = 'C:\\raw'\n"
                                    "\"quoted key\" = 1   # trailing comment\r\n");
    assert_int_equal(toml_get(r, "a")->u.i, 1);
    assert_int_equal(toml_get(r, "b")->u.i, -42);
    assert_int_equal(toml_get(r, "c")->u.i, 7);
    assert_int_equal(toml_get(r, "d")->u.i, 1000000);
    assert_int_equal(toml_get(r, "e")->u.i, 31);
    assert_int_equal(toml_get(r, "f")->u.i, 15);
    assert_int_equal(toml_get(r, "g")->u.i, 5);
    assert_true(toml_get(r, "h")->type == TOML_FLOAT && toml_get(r, "h")->u.f == 3.5);
    assert_true(fabs(toml_get(r, "i")->u.f + 1e-3) < 1e-15);
    assert_true(toml_get(r, "j")->u.f == 6.02e23);
    assert_true(isinf(toml_get(r, "k")->u.f) && toml_get(r, "k")->u.f > 0);
    assert_true(isinf(toml_get(r, "l")->u.f) && toml_get(r, "l")->u.f < 0);
    assert_true(isnan(toml_get(r, "m")->u.f));
    assert_true(toml_get(r, "n")->u.b);
    assert_false(toml_get(r, "o")->u.b);
    assert_string_equal(toml_get(r, "p")->u.s, "tab\there \"q\" \xc3\xa9\xf0\x9f\x98\x80");
    assert_string_equal(toml_get(r, "q")->u.s, "C:\\raw");
    assert_int_equal(toml_get(r, "quoted key")->u.i, 1);
    assert_int_equal(toml_get(r, "a")->line, 2);
    assert_int_equal(toml_get(r, "a")->col, 5);
    toml_free(r);
}

static void test_tables_arrays(void **state)
{
    (void)state;
    struct toml_value *r = parse_ok("[model]\nkind = \"sage\"\nfanouts = [10, 10,\n  # c\n  5, ]\n"
                                    "[train.opt]\nlr = 0.01\n"
                                    "[pipeline]\nio.depth = 64\nio.mode = \"direct\"\n"
                                    "inl = { a = 1, b.c = [1, [2, 3]] }\n"
                                    "[train]\nepochs = 3\n");
    const struct toml_value *f = toml_get_path(r, "model.fanouts");
    assert_non_null(f);
    assert_int_equal(f->type, TOML_ARRAY);
    assert_int_equal(f->u.arr.n, 3);
    assert_int_equal(f->u.arr.v[2]->u.i, 5);
    assert_true(toml_get_path(r, "train.opt.lr")->u.f == 0.01);
    assert_int_equal(toml_get_path(r, "train.epochs")->u.i, 3);
    assert_int_equal(toml_get_path(r, "pipeline.io.depth")->u.i, 64);
    assert_string_equal(toml_get_path(r, "pipeline.io.mode")->u.s, "direct");
    const struct toml_value *bc = toml_get_path(r, "pipeline.inl.b.c");
    assert_int_equal(bc->u.arr.v[1]->u.arr.v[1]->u.i, 3);
    assert_null(toml_get_path(r, "model.nope"));
    assert_null(toml_get_path(r, "model.kind.x"));
    toml_free(r);
}

/* Each bad document and the line:col its error must point at. */
static const struct {
    const char *text;
    int line, col;
    const char *needle;
} bad[] = {
    {"a = 1\na = 2\n", 2, 1, "duplicate key"},
    {"[t]\nx=1\n[t]\n", 3, 1, "defined twice"},
    {"a = \n", 1, 5, "expected a value"},
    {"a = 1 2\n", 1, 7, "end of the line"},
    {"a = \"abc\n", 1, 9, "unterminated string"},
    {"a = \"\\q\"\n", 1, 6, "invalid escape"},
    {"a = \"\"\"x\"\"\"\n", 1, 5, "multi-line"},
    {"a = 1979-05-27\n", 1, 5, "dates"},
    {"a = 007\n", 1, 5, "leading zeros"},
    {"a = 1__0\n", 1, 5, "malformed"},
    {"a = 1.\n", 1, 5, "malformed float"},
    {"a = 99999999999999999999\n", 1, 5, "64 bits"},
    {"a = yes\n", 1, 5, "unknown value"},
    {"a = [1, 2\n", 2, 1, "unterminated array"},
    {"a = { x = 1, }\n", 1, 14, "trailing comma"},
    {"[[arr]]\n", 1, 2, "arrays of tables"},
    {"a = 1\n[a]\n", 2, 2, "already a integer"},
    {"a.b = 1\n[a]\n", 2, 1, "defined twice"},
    {"t = {x = 1}\nt.y = 2\n", 2, 1, "sealed inline table"},
    {"= 1\n", 1, 1, "unexpected character"},
    {"a\n", 1, 2, "expected '='"},
    {"a = 1\n\xff\n", 2, 1, "invalid UTF-8"},
    {"a = 1\rb = 2\n", 1, 6, "carriage return"},
    {"a = 0x\n", 1, 5, "hexadecimal"},
    {"a = -0x10\n", 1, 5, "hexadecimal"},
    {"a = \"\\ud800\"\n", 1, 6, "Unicode scalar"},
    {"a = \"\\u12\"\n", 1, 6, "hex digits"},
};

static void test_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[512] = "";
        struct toml_value *v = toml_parse(bad[i].text, strlen(bad[i].text), "bad.toml", err, sizeof err);
        char want[64];
        snprintf(want, sizeof want, "bad.toml:%d:%d: ", bad[i].line, bad[i].col);
        if (v || strncmp(err, want, strlen(want)) || !strstr(err, bad[i].needle)) {
            toml_free(v);
            fail_msg("case %zu [%s]: want '%s...%s', got '%s'", i, bad[i].text, want, bad[i].needle, err);
        }
    }
}

static void test_deep_nesting(void **state)
{
    (void)state;
    char buf[1024] = "a = ";
    for (int i = 0; i < 200; i++)
        strcat(buf, "[");
    char err[256];
    struct toml_value *v = toml_parse(buf, strlen(buf), "deep.toml", err, sizeof err);
    assert_null(v);
    assert_non_null(strstr(err, "nest deeper"));
    /* NUL inside the buffer is rejected, not silently truncated */
    const char withnul[] = "a = 1\0b = 2\n";
    v = toml_parse(withnul, sizeof withnul - 1, "nul.toml", err, sizeof err);
    assert_null(v);
    assert_non_null(strstr(err, "NUL"));
}

static void test_parse_value(void **state)
{
    (void)state;
    char err[256];
    struct toml_value *v = toml_parse_value("[10,10]", err, sizeof err);
    assert_non_null(v);
    assert_int_equal(v->u.arr.n, 2);
    toml_free(v);
    v = toml_parse_value("0.01", err, sizeof err);
    assert_true(v && v->type == TOML_FLOAT && v->u.f == 0.01);
    toml_free(v);
    v = toml_parse_value("gat", err, sizeof err);
    assert_true(v && v->type == TOML_STRING && !strcmp(v->u.s, "gat"));
    toml_free(v);
    v = toml_parse_value("\"x y\"", err, sizeof err);
    assert_true(v && v->type == TOML_STRING && !strcmp(v->u.s, "x y"));
    toml_free(v);
    v = toml_parse_value("[10,10", err, sizeof err);
    assert_null(v);
    assert_non_null(strstr(err, "array"));
    v = toml_parse_value("true", err, sizeof err);
    assert_true(v && v->type == TOML_BOOL && v->u.b);
    toml_free(v);
}

/* A UTF-8 byte order mark is accepted; a number out of range is "too
 * large", also where a bare word would become a string (issue 17). */
static void test_bom_and_overflow(void **state)
{
    (void)state;
    char err[512];
    const char doc[] = "\xef\xbb\xbf[train]\nseed = 5\n";
    struct toml_value *root = toml_parse(doc, sizeof doc - 1, "bom.toml", err, sizeof err);
    if (!root)
        fail_msg("a BOM: %s", err);
    const struct toml_value *t = toml_get(root, "train");
    assert_non_null(t);
    assert_int_equal(toml_get(t, "seed")->u.i, 5);
    toml_free(root);
    const char big[] = "seed = 99999999999999999999\n";
    assert_null(toml_parse(big, sizeof big - 1, "big.toml", err, sizeof err));
    assert_non_null(strstr(err, "big.toml:1:8: integer '99999999999999999999' is too large"));
    assert_null(toml_parse_value("99999999999999999999", err, sizeof err));
    assert_non_null(strstr(err, "is too large"));
    assert_null(toml_parse_value("-99999999999999999999", err, sizeof err));
    assert_non_null(strstr(err, "is too large in magnitude"));
    assert_null(toml_parse_value("1e999", err, sizeof err));
    assert_non_null(strstr(err, "is too large"));
    struct toml_value *v = toml_parse_value("2runs", err, sizeof err); /* still a bare word */
    assert_non_null(v);
    assert_int_equal(v->type, TOML_STRING);
    toml_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),     cmocka_unit_test(test_tables_arrays), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_deep_nesting), cmocka_unit_test(test_parse_value),
        cmocka_unit_test(test_bom_and_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
