/* test_tboard.c - TensorBoard event files (launcher/tboard.h): the
 * masked CRC-32C against the standard check value, and a file read back
 * record by record (lengths, both CRCs, the Event decoded by protobuf-c)
 * holding the version record and then the scalars as written. */
#include "t_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>

#include "launcher/tboard.h"
#include "launcher/tensorboard.pb-c.h"

static uint32_t mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static uint64_t le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void test_crc(void **state)
{
    (void)state;
    /* CRC-32C("123456789") = 0xe3069283 (the Castagnoli polynomial's check value) */
    assert_int_equal(tboard_masked_crc("123456789", 9), mask(0xe3069283u));
    assert_int_equal(tboard_masked_crc("", 0), mask(0));
}

static void test_file(void **state)
{
    (void)state;
    char dir[1024], err[512];
    t_scratch(dir, sizeof dir, "tboard");
    char sub[1100];
    snprintf(sub, sizeof sub, "%s/logs", dir); /* created by tboard_open */
    struct tboard tb;
    assert_int_equal(tboard_open(&tb, sub, err, sizeof err), 0);
    const char *tags[] = {"train/loss", "val/acc"};
    for (int step = 1; step <= 3; step++) {
        float v[] = {1.0f / (float)step, 0.5f + 0.1f * (float)step};
        assert_int_equal(tboard_scalars(&tb, step, 1000.0 + step, tags, v, 2, err, sizeof err), 0);
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", tb.path);
    assert_int_equal(tboard_close(&tb, err, sizeof err), 0);
    assert_int_equal(tboard_close(&tb, err, sizeof err), 0); /* closing twice is fine */
    assert_non_null(strstr(path, "/logs/events.out.tfevents."));
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t off = 0;
    int records = 0;
    while (off < n) {
        assert_true(off + 12 <= n);
        uint64_t len = le(buf + off, 8);
        assert_int_equal(le(buf + off + 8, 4), tboard_masked_crc(buf + off, 8));
        assert_true(off + 12 + len + 4 <= n);
        assert_int_equal(le(buf + off + 12 + len, 4), tboard_masked_crc(buf + off + 12, (size_t)len));
        SluiceTb__Event *ev = sluice_tb__event__unpack(NULL, (size_t)len, buf + off + 12);
        assert_non_null(ev);
        if (records == 0) {
            assert_int_equal(ev->what_case, SLUICE_TB__EVENT__WHAT_FILE_VERSION);
            assert_string_equal(ev->file_version, "brain.Event:2");
        } else {
            assert_int_equal(ev->what_case, SLUICE_TB__EVENT__WHAT_SUMMARY);
            assert_int_equal(ev->step, records);
            assert_true(ev->wall_time == 1000.0 + records);
            assert_int_equal(ev->summary->n_value, 2);
            assert_string_equal(ev->summary->value[0]->tag, "train/loss");
            assert_true(ev->summary->value[0]->simple_value == 1.0f / (float)records);
            assert_string_equal(ev->summary->value[1]->tag, "val/acc");
            assert_true(ev->summary->value[1]->simple_value == 0.5f + 0.1f * (float)records);
        }
        sluice_tb__event__free_unpacked(ev, NULL);
        off += 12 + len + 4;
        records++;
    }
    assert_int_equal(records, 4);
    /* refusals: a file where the directory should be */
    snprintf(sub, sizeof sub, "%s/file", dir);
    int fd = open(sub, O_CREAT | O_WRONLY, 0644);
    close(fd);
    assert_int_equal(tboard_open(&tb, sub, err, sizeof err), -ENOTDIR);
    assert_non_null(strstr(err, "not a directory"));
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_crc), cmocka_unit_test(test_file)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
