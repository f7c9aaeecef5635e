/* test_util.c - number parsing, hex, path helpers, f16 conversion, row strides. */
#include <errno.h>
#include <math.h>

#include "t_util.h"

#include <sys/stat.h>
#include "core/dataset.h"
#include "core/util.h"

static void test_parse_u64(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(sl_parse_u64("20M", false, &v), 0);
    assert_int_equal(v, 20000000);
    assert_int_equal(sl_parse_u64("1GiB", true, &v), 0);
    assert_int_equal(v, 1ull << 30);
    assert_int_equal(sl_parse_u64("64k", true, &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(sl_parse_u64("123", false, &v), 0);
    assert_int_equal(v, 123);
    assert_int_equal(sl_parse_u64("-1", false, &v), -EINVAL);
    assert_int_equal(sl_parse_u64("1x", false, &v), -EINVAL);
    assert_int_equal(sl_parse_u64("", false, &v), -EINVAL);
    assert_int_equal(sl_parse_u64("99999999999999999999", false, &v), -ERANGE);
    assert_int_equal(sl_parse_u64("20000000T", false, &v), -ERANGE);
    double d;
    assert_int_equal(sl_parse_double("0.25", &d), 0);
    assert_true(d == 0.25);
    assert_int_equal(sl_parse_double("nan", &d), -ERANGE);
    assert_int_equal(sl_parse_double("1.5q", &d), -EINVAL);
}

/* Every byte value both ways, either case in, and the malformed inputs. */
static void test_hex(void **state)
{
    (void)state;
    uint8_t all[256], back[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)(255 - i);
    char text[513];
    sl_hex(all, sizeof all, text);
    assert_int_equal(strlen(text), 512);
    assert_memory_equal(text, "fffefdfc", 8);
    assert_int_equal(sl_unhex(text, back, sizeof back), 0);
    assert_memory_equal(back, all, sizeof all);
    uint8_t two[2];
    assert_int_equal(sl_unhex("A0fF", two, 2), 0);
    assert_int_equal(two[0], 0xa0);
    assert_int_equal(two[1], 0xff);
    assert_int_equal(sl_unhex("a0f", two, 2), -EINVAL);   /* too short */
    assert_int_equal(sl_unhex("a0ff0", two, 2), -EINVAL); /* too long */
    assert_int_equal(sl_unhex("a0fg", two, 2), -EINVAL);  /* not a digit */
    assert_int_equal(sl_unhex(" a0f", two, 2), -EINVAL);
    assert_int_equal(sl_unhex(NULL, two, 2), -EINVAL);
    sl_hex(two, 0, text);
    assert_string_equal(text, "");
}

static void test_f16(void **state)
{
    (void)state;
    /* exact values */
    const float exact[] = {0.0f, 1.0f, -2.0f, 0.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        assert_true(half_to_f32(half_from_f32(exact[i])) == exact[i]);
    assert_int_equal(half_from_f32(1.0f), 0x3c00);
    assert_int_equal(half_from_f32(-2.0f), 0xc000);
    assert_int_equal(half_from_f32(65520.0f), 0x7c00); /* rounds to inf */
    assert_int_equal(half_from_f32(INFINITY), 0x7c00);
    assert_true(isnan(half_to_f32(half_from_f32(NAN))));
    /* round to nearest even: 1 + 2^-11 is a tie between 1 and 1+2^-10 */
    assert_int_equal(half_from_f32(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(half_from_f32(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(half_from_f32(1.0f + 3 * 0x1p-11f), 0x3c02);
    /* every half value round-trips through float */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = half_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        if (half_from_f32(f) != h)
            fail_msg("half 0x%04x -> %g -> 0x%04x", h, (double)f, half_from_f32(f));
    }
    /* relative error bound for normal values */
    for (int i = 0; i < 100000; i++) {
        float f = (float)((i - 50000) * 0.0137);
        float g = half_to_f32(half_from_f32(f));
        assert_true(fabsf(f - g) <= fabsf(f) * 0x1p-11f + 1e-7f);
    }
}

static void test_row_stride(void **state)
{
    (void)state;
    /* (row bytes) -> stride: powers of two up to 512, multiples of 512 after */
    const uint64_t cases[][2] = {{12, 16}, {400, 512}, {512, 512}, {200, 256}, {6, 8},
                                 {3072, 3072}, {1536, 1536}, {513, 1024}, {1, 1}, {4, 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(dataset_row_stride(cases[i][0], 512), cases[i][1]);
    /* no row straddles a 512-byte block boundary unless it starts on one */
    for (uint64_t rb = 1; rb <= 4096; rb++) {
        uint64_t s = dataset_row_stride(rb, 512);
        assert_true(s >= rb);
        for (uint64_t r = 0; r < 64; r++) {
            uint64_t a = r * s, b = a + rb - 1;
            if (a / 512 != b / 512 && a % 512 != 0)
                fail_msg("row bytes %llu stride %llu: row %llu straddles", (unsigned long long)rb,
                         (unsigned long long)s, (unsigned long long)r);
        }
    }
}

static void test_path_rmtree(void **state)
{
    (void)state;
    char out[16];
    assert_int_equal(sl_path_join(out, sizeof out, "ab/", "c"), 0);
    assert_string_equal(out, "ab/c");
    assert_int_equal(sl_path_join(out, sizeof out, "abcdefgh", "ijklmnopq"), -ENAMETOOLONG);
    char dir[4096], cmd[8400];
    t_scratch(dir, sizeof dir, "rmtree");
    snprintf(cmd, sizeof cmd, "mkdir -p %s/x/y && touch %s/x/y/f %s/g && ln -s / %s/x/link", dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(sl_rmtree(dir), 0);
    assert_false(t_exists(dir));
    assert_int_equal(sl_rmtree(dir), 0);
    assert_true(t_exists("/usr")); /* the symlink was not followed */
}

/* A FIFO (or a directory) is refused at once, not waited on (issue 17). */
static void test_read_file_fifo(void **state)
{
    (void)state;
    char dir[4096], fifo[4200], err[512], *buf = NULL;
    t_scratch(dir, sizeof dir, "fifo");
    snprintf(fifo, sizeof fifo, "%s/cfg.toml", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    alarm(10); /* a blocking open fails the test by SIGALRM */
    assert_int_equal(sl_read_file(fifo, 1 << 20, &buf, NULL, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not a regular file (a FIFO)"));
    assert_int_equal(sl_read_file(dir, 1 << 20, &buf, NULL, err, sizeof err), -EINVAL);
    alarm(0);
    assert_null(buf);
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_u64),
        cmocka_unit_test(test_hex),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_row_stride),
        cmocka_unit_test(test_path_rmtree),
        cmocka_unit_test(test_read_file_fifo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
