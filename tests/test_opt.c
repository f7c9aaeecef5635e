/* test_opt.c - the long-option parser of the stage and bench command lines
 * (core/opt.h): every kind, both spellings, ranges, lists, flags, the
 * errors' words, and `seen`. */
#include <errno.h>
#include <string.h>

#include "core/opt.h"
#include "core/util.h"
#include "t_util.h"

struct vals {
    int64_t i;
    uint64_t u, size;
    char s[8];
    bool flag;
    struct opt_list list;
    int fn_calls;
    double secs;
};

static int take_even(const char *val, void *dst, char *err, size_t errlen)
{
    struct vals *v = dst;
    v->fn_calls++;
    if (strlen(val) % 2)
        return sl_errf(err, errlen, -EINVAL, "'%s' has an odd length", val);
    return 0;
}

#define NOPTS 8
static void table(struct opt *o, struct vals *v)
{
    const struct opt t[NOPTS] = {
        {.name = "--int", .kind = OPT_INT, .dst = &v->i, .lo = -5, .hi = 5},
        {.name = "--uint", .kind = OPT_UINT, .dst = &v->u, .lo = 1, .hi = 100, .what = "is not a count"},
        {.name = "--size", .kind = OPT_SIZE, .dst = &v->size, .lo = 0, .hi = INT64_MAX},
        {.name = "--str", .kind = OPT_STR, .dst = v->s, .len = sizeof v->s},
        {.name = "--flag", .kind = OPT_FLAG, .dst = &v->flag},
        {.name = "--list", .kind = OPT_LIST, .dst = &v->list, .lo = 1, .hi = 64},
        {.name = "--even", .kind = OPT_FN, .dst = v, .fn = take_even},
        {.name = "--secs", .kind = OPT_DOUBLE, .dst = &v->secs, .lo = 0, .hi = 60},
    };
    memcpy(o, t, sizeof t);
}

static int parse(struct vals *v, bool *seen, char *err, const char *const *args)
{
    struct opt o[NOPTS];
    table(o, v);
    int argc = 1;
    char *argv[32] = {"prog"};
    for (; args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    return opt_parse("prog", o, NOPTS, argc, argv, 1, seen, "; see --help", err, 256);
}

static void test_values(void **state)
{
    (void)state;
    struct vals v = {.i = 99};
    bool seen[NOPTS];
    char err[256] = "";
    const char *args[] = {"--int=-3", "--uint",        "7",         "--size=64K", "--str", "abc",
                          "--flag",   "--list=1,2,64", "--even=ab", "--secs=0.25", NULL};
    assert_int_equal(parse(&v, seen, err, args), 0);
    assert_int_equal(v.i, -3);
    assert_int_equal(v.u, 7);
    assert_int_equal(v.size, 65536);
    assert_string_equal(v.s, "abc");
    assert_true(v.flag);
    assert_int_equal(v.list.n, 3);
    assert_int_equal(v.list.v[0], 1);
    assert_int_equal(v.list.v[2], 64);
    assert_int_equal(v.fn_calls, 1);
    assert_true(v.secs == 0.25);
    for (int k = 0; k < NOPTS; k++)
        assert_true(seen[k]);

    /* Only what is given is seen; defaults stay; the last of two wins. */
    struct vals w = {.i = 4, .u = 9};
    const char *two[] = {"--int", "1", "--int=2", NULL};
    assert_int_equal(parse(&w, seen, err, two), 0);
    assert_int_equal(w.i, 2);
    assert_int_equal(w.u, 9);
    assert_true(seen[0]);
    assert_false(seen[1]);
    assert_false(seen[4]);
    struct opt o[NOPTS];
    table(o, &w);
    assert_int_equal(opt_index(o, NOPTS, "--flag"), 4);
    assert_int_equal(opt_index(o, NOPTS, "--nope"), -1);
}

static void test_errors(void **state)
{
    (void)state;
    const struct {
        const char *args[4];
        const char *msg;
    } cases[] = {
        {{"--int=6"}, "prog: --int=6 is not an integer in range"},
        {{"--int=1x"}, "--int=1x is not an integer in range"},
        {{"--int="}, "--int= is not an integer in range"},
        {{"--uint=0"}, "--uint=0 is not a count"},
        {{"--uint=-1"}, "--uint=-1 is not a count"},
        {{"--uint=5K"}, "--uint=5K is not a count"}, /* suffixes are for OPT_SIZE only */
        {{"--size=1Q"}, "--size=1Q is not an integer in range"},
        {{"--str=12345678"}, "--str needs a value of 1 to 7 bytes"},
        {{"--str="}, "--str needs a value of 1 to 7 bytes"},
        {{"--flag=1"}, "--flag takes no value"},
        {{"--list=1,,2"}, "--list=1,,2 wants 1 to 8 comma-separated integers in 1..64"},
        {{"--list=1,2,3,4,5,6,7,8,9"}, "wants 1 to 8"},
        {{"--list=65"}, "in 1..64"},
        {{"--even=abc"}, "prog: 'abc' has an odd length"},
        {{"--secs=0"}, "prog: --secs=0 is not a number in (0, 60]"}, /* lo is exclusive */
        {{"--secs=60.5"}, "--secs=60.5 is not a number in (0, 60]"},
        {{"--secs=1e999"}, "is not a number"},
        {{"--secs=nan"}, "is not a number"},
        {{"--secs=2s"}, "is not a number"},
        {{"--int"}, "prog: --int needs a value"},
        {{"--intx=1"}, "prog: unknown argument '--intx=1'; see --help"},
        {{"positional"}, "unknown argument 'positional'"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        struct vals v = {0};
        char err[256] = "";
        assert_int_equal(parse(&v, NULL, err, cases[i].args), -EINVAL);
        if (!strstr(err, cases[i].msg))
            fail_msg("case %zu: expected '%s' in '%s'", i, cases[i].msg, err);
    }
}

static int g_usage_calls;
static void count_usage(FILE *f)
{
    (void)f;
    g_usage_calls++;
}

/* opt_main: go on (-1), help (0, usage once), a bad argument (2, usage once). */
static void test_main(void **state)
{
    (void)state;
    bool help = false;
    uint64_t n = 0;
    const struct opt o[] = {
        {.name = "--n", .kind = OPT_UINT, .dst = &n, .lo = 1, .hi = 9},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    char *go[] = {"prog", "--n=3", NULL}, *hlp[] = {"prog", "--help", NULL}, *bad[] = {"prog", "--n=10", NULL};
    g_usage_calls = 0;
    assert_int_equal(opt_main("prog", o, 2, 2, go, NULL, &help, count_usage), -1);
    assert_int_equal(n, 3);
    assert_int_equal(g_usage_calls, 0);
    assert_int_equal(opt_main("prog", o, 2, 2, hlp, NULL, &help, count_usage), 0);
    assert_int_equal(g_usage_calls, 1);
    help = false;
    assert_int_equal(opt_main("prog", o, 2, 2, bad, NULL, &help, count_usage), 2);
    assert_int_equal(g_usage_calls, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_main),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
