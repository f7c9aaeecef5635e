/* test_verify.c - the verification record (core/dataset_verify.h) on a
 * small synthetic dataset: a first verification reads and records, a
 * second with unchanged files reads nothing, and any change to a file's
 * identity (written in place, touched, replaced, resized) or to
 * dataset.toml's recorded contents makes it read again, and find what is
 * wrong; a record that does not parse is as none; where the dataset
 * directory cannot take the record it goes to the user's cache; a file
 * modified in the current clock tick (here: in the future) is verified but
 * not recorded; the stamp survives its text form. */
#include "t_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include "core/dataset.h"
#include "core/dataset_verify.h"
#include "core/util.h"

static char g_dir[1024], g_ds[1200], g_cache[1200];
static char err[4096];

static void synth(const char *out)
{
    char prep[1200], log[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(log, sizeof log, "%s synth %s --nodes 3000 --avg-degree 6 --feat-dim 8 --classes 3 --seed 3", prep,
              out) != 0)
        fail_msg("gnnprep synth failed: %s", log);
}

/* Verifies g_ds; returns the result and fills *v. */
static int verify(struct dataset_verify *v)
{
    struct dataset_meta m;
    memset(v, 0, sizeof *v);
    int rc = dataset_meta_read(g_ds, &m, true, err, sizeof err);
    if (rc)
        return rc;
    return dataset_verify_run(v, g_ds, &m, err, sizeof err);
}

/* A fresh copy of the dataset, verified once (recorded beside it). */
static void fresh(void)
{
    char out[4096];
    assert_int_equal(t_run(out, sizeof out, "rm -rf '%s' && cp -r '%s/orig' '%s' && rm -f '%s/verified'", g_ds, g_dir,
                           g_ds, g_ds),
                     0);
    usleep(20000); /* past the coarse clock tick of the copy */
    struct dataset_verify v;
    assert_int_equal(verify(&v), 0);
    assert_true(v.checked);
    assert_true(v.recorded);
    char want[1300];
    snprintf(want, sizeof want, "%s/%s", g_ds, DATASET_VERIFY_RECORD);
    assert_string_equal(v.record, want);
}

static void write_at(const char *file, off_t off, const void *p, size_t n)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", g_ds, file);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, p, n, off), (ssize_t)n);
    close(fd);
}

static void test_once(void **state)
{
    (void)state;
    fresh();
    struct dataset_verify v;
    for (int i = 0; i < 3; i++) { /* unchanged: the record matches, nothing is read */
        assert_int_equal(verify(&v), 0);
        assert_false(v.checked);
    }
    /* the same bytes written again: times change, so it reads again (and passes) */
    char b;
    char path[1400];
    snprintf(path, sizeof path, "%s/labels.bin", g_ds);
    int fd = open(path, O_RDWR);
    assert_int_equal(pread(fd, &b, 1, 0), 1);
    assert_int_equal(pwrite(fd, &b, 1, 0), 1);
    close(fd);
    assert_int_equal(verify(&v), 0);
    assert_true(v.checked);
    usleep(20000);
    assert_int_equal(verify(&v), 0);
    assert_true(v.checked || v.note[0]); /* recorded at the latest by the pass before */
    assert_int_equal(verify(&v), 0);
    assert_false(v.checked);
}

/* Each change to a file's bytes is found on the next verification,
 * whatever the record said. */
static void test_changes_found(void **state)
{
    (void)state;
    struct dataset_verify v;
    char out[4096];
    static const unsigned char zeros[4096];
    const struct {
        const char *what, *file, *needle;
    } cases[] = {
        {"zeroed rows", "features.bin", "features.bin: checksum mismatch"},
        {"random neighbour ids", "indices.bin", "indices.bin: "},
        {"touched, same bytes", NULL, NULL},
        {"dataset.toml's xxh3 edited", "dataset.toml", "features.bin: checksum mismatch"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        fresh();
        if (i == 0) {
            write_at("features.bin", 4096, zeros, sizeof zeros);
        } else if (i == 1) {
            uint32_t ids[4] = {7, 2, 2999, 0}; /* in range, out of order and not the recorded ones */
            write_at("indices.bin", 400, ids, sizeof ids);
        } else if (i == 2) {
            assert_int_equal(t_run(out, sizeof out, "touch '%s/features.bin'", g_ds), 0);
        } else {
            struct dataset_meta m;
            assert_int_equal(dataset_meta_read(g_ds, &m, true, err, sizeof err), 0);
            m.f[DATASET_FEATURES].xxh3 ^= 0x10;
            assert_int_equal(dataset_meta_write(g_ds, &m, err, sizeof err), 0);
        }
        int rc = verify(&v);
        if (!v.checked)
            fail_msg("%s: not read again (rc %d: %s)", cases[i].what, rc, err);
        if (!cases[i].needle) {
            assert_int_equal(rc, 0);
            continue;
        }
        if (rc != -EBADMSG || !strstr(err, cases[i].needle))
            fail_msg("%s: rc %d, want -EBADMSG and '%s' in: %s", cases[i].what, rc, cases[i].needle, err);
        assert_int_equal(verify(&v), -EBADMSG); /* a failure is never recorded */
        assert_true(v.checked);
    }
}

static void test_record_damaged(void **state)
{
    (void)state;
    fresh();
    char path[1400], out[4096];
    snprintf(path, sizeof path, "%s/%s", g_ds, DATASET_VERIFY_RECORD);
    struct dataset_verify_stamp s;
    assert_int_equal(dataset_verify_stamp_read(path, &s, err, sizeof err), 0);
    const char *damage[] = {"sed -i 's/^indices /indptr /' '%s'", "sed -i '$d' '%s'", "echo 'extra 1 2 3 4 5' >> '%s'",
                            "sed -i 's/sluice-verified 1/sluice-verified 2/' '%s'", ": > '%s'"};
    for (size_t i = 0; i < SL_ARRAY_LEN(damage); i++) {
        fresh();
        assert_int_equal(t_run(out, sizeof out, damage[i], path), 0);
        assert_int_equal(dataset_verify_stamp_read(path, &s, err, sizeof err), -EINVAL);
        struct dataset_verify v;
        assert_int_equal(verify(&v), 0);
        assert_true(v.checked); /* as no record: read again, and recorded anew */
        assert_true(v.recorded);
        assert_int_equal(verify(&v), 0);
        assert_false(v.checked);
    }
}

/* The stamp's text form keeps every field; diff finds each one. */
static void test_stamp(void **state)
{
    (void)state;
    fresh();
    struct dataset_meta m;
    struct dataset_verify_stamp a, b;
    char path[1400], why[512];
    assert_int_equal(dataset_meta_read(g_ds, &m, true, err, sizeof err), 0);
    assert_int_equal(dataset_verify_stamp_take(g_ds, &m, &a, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/stamp", g_dir);
    assert_int_equal(dataset_verify_stamp_write(path, &a, 0644, err, sizeof err), 0);
    assert_int_equal(dataset_verify_stamp_read(path, &b, err, sizeof err), 0);
    assert_memory_equal(&a, &b, sizeof a);
    assert_int_equal(dataset_verify_stamp_diff(&a, &b), -1);
    for (int f = 0; f < DATASET_FILES; f++)
        for (int k = 0; k < 5; k++) {
            b = a;
            struct dataset_verify_ident *x = &b.f[f];
            uint64_t *u[] = {&x->dev, &x->ino, &x->size};
            if (k < 3)
                *u[k] += 1;
            else if (k == 3)
                x->mtime_ns += 1;
            else
                x->ctime_ns += 1;
            assert_int_equal(dataset_verify_stamp_diff(&a, &b), f);
            dataset_verify_stamp_explain(&a, &b, f, why, sizeof why);
            const char *want[] = {"replaced", "replaced", "size changed", "modification time", "change time"};
            if (!strstr(why, want[k]))
                fail_msg("file %d field %d: '%s' lacks '%s'", f, k, why, want[k]);
        }
    b = a;
    b.dataset ^= 1;
    assert_int_equal(dataset_verify_stamp_diff(&a, &b), DATASET_FILES);
    assert_int_equal(dataset_verify_stamp_read("/nonexistent/stamp", &b, err, sizeof err), -ENOENT);
}

/* A dataset directory that cannot take the record: the user's cache. */
static void test_cache(void **state)
{
    (void)state;
    fresh();
    char beside[1400], out[4096], want[1400];
    snprintf(beside, sizeof beside, "%s/%s", g_ds, DATASET_VERIFY_RECORD);
    unlink(beside);
    assert_int_equal(mkdir(beside, 0755), 0); /* in the way even for root, who may write a 0555 directory */
    assert_int_equal(chmod(g_ds, 0555), 0);
    setenv("XDG_CACHE_HOME", g_cache, 1);
    struct dataset_verify v;
    assert_int_equal(verify(&v), 0);
    assert_true(v.checked);
    assert_true(v.recorded);
    assert_int_equal(dataset_verify_cache_path(g_ds, want, sizeof want, err, sizeof err), 0);
    assert_string_equal(v.record, want);
    assert_non_null(strstr(want, g_cache));
    struct stat st;
    snprintf(out, sizeof out, "%s/sluice", g_cache);
    assert_int_equal(stat(out, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(verify(&v), 0);
    assert_false(v.checked);
    /* no cache either: verified every time, with a note */
    unsetenv("XDG_CACHE_HOME");
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    unsetenv("HOME");
    assert_int_equal(verify(&v), 0);
    assert_true(v.checked);
    assert_false(v.recorded);
    assert_non_null(strstr(v.note, "could not be recorded"));
    if (home)
        setenv("HOME", home, 1);
    free(home);
    assert_int_equal(chmod(g_ds, 0755), 0);
    rmdir(beside);
}

/* A file modified at or after the start of the verification (a time in
 * the future stands for "in the same tick"): valid, not recorded. */
static void test_racy(void **state)
{
    (void)state;
    fresh();
    char path[1400];
    snprintf(path, sizeof path, "%s/val.bin", g_ds);
    struct timespec ts[2];
    clock_gettime(CLOCK_REALTIME, &ts[0]);
    ts[0].tv_sec += 3600;
    ts[1] = ts[0];
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
    struct dataset_verify v;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(verify(&v), 0);
        assert_true(v.checked);
        assert_false(v.recorded);
        assert_non_null(strstr(v.note, "moments before"));
    }
}

static int setup(void **state)
{
    (void)state;
    t_scratch(g_dir, sizeof g_dir, "verify");
    char orig[1200];
    snprintf(orig, sizeof orig, "%s/orig", g_dir);
    snprintf(g_ds, sizeof g_ds, "%s/ds", g_dir);
    snprintf(g_cache, sizeof g_cache, "%s/cache", g_dir);
    synth(orig);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    chmod(g_ds, 0755);
    t_rmrf(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_once),   cmocka_unit_test(test_changes_found), cmocka_unit_test(test_record_damaged),
        cmocka_unit_test(test_stamp),  cmocka_unit_test(test_cache),         cmocka_unit_test(test_racy),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
