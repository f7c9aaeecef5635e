/* test_check.c - `gnnprep check` and `gnnprep info` on a valid random
 * dataset, then on one corruption at a time. Corruptions are re-hashed into
 * dataset.toml (except where the checksum itself is under test) so each
 * content rule is shown to be enforced on its own. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>

#include "t_util.h"
#include "core/dataset.h"
#include "core/util.h"
#include "prep/prep.h"

#define N 1000
#define DIM 3
#define CLASSES 5

static char err[2048];
static char dir[4096], ds[4200];
static uint64_t indptr[N + 1];
static uint32_t *indices;
static uint64_t nedges;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void write_file(struct dataset_dir *d, struct dataset_meta *m, int idx, const char *name, enum dtype t,
                       const void *data, uint64_t n)
{
    char p[4096];
    struct file_writer w;
    uint64_t bytes, h;
    assert_int_equal(dataset_dir_path(d, name, p, sizeof p), 0);
    assert_int_equal(file_writer_open(&w, p, err, sizeof err), 0);
    assert_int_equal(file_writer_write(&w, data, n * dtype_size(t), err, sizeof err), 0);
    assert_int_equal(file_writer_close(&w, &bytes, &h, err, sizeof err), 0);
    dataset_file_set(&m->f[idx], name, t, n, 1, bytes, h);
}

/* A random graph: degrees 0..8, neighbours ascending and distinct. */
static void make_dataset(const char *out)
{
    struct dataset_dir d;
    assert_int_equal(dataset_dir_begin(&d, out, err, sizeof err), 0);
    struct dataset_meta m = {.nodes = N, .feat_dim = DIM, .classes = CLASSES, .feat_align = DATASET_FEAT_ALIGN};
    indices = malloc(N * 8 * sizeof *indices);
    nedges = 0;
    for (int v = 0; v < N; v++) {
        indptr[v] = nedges;
        int deg = (int)(next() % 9);
        uint32_t base = (uint32_t)(next() % (N - 100));
        for (int k = 0; k < deg; k++)
            indices[nedges++] = base + (uint32_t)k * 11;
    }
    indptr[N] = nedges;
    m.edges = nedges;
    int32_t labels[N];
    for (int v = 0; v < N; v++)
        labels[v] = v % 7 == 0 ? -1 : (int32_t)(next() % CLASSES);
    uint32_t tr[300], va[100], te[100];
    int nt = 0, nv = 0, ne = 0;
    for (uint32_t v = 0; v < N; v++) {
        if (labels[v] < 0)
            continue;
        if (nt < 300)
            tr[nt++] = v;
        else if (nv < 100)
            va[nv++] = v;
        else if (ne < 100)
            te[ne++] = v;
    }
    write_file(&d, &m, DATASET_INDPTR, "indptr.bin", DTYPE_U64, indptr, N + 1);
    write_file(&d, &m, DATASET_INDICES, "indices.bin", DTYPE_U32, indices, nedges);
    write_file(&d, &m, DATASET_LABELS, "labels.bin", DTYPE_I32, labels, N);
    write_file(&d, &m, DATASET_TRAIN, "train.bin", DTYPE_U32, tr, (uint64_t)nt);
    write_file(&d, &m, DATASET_VAL, "val.bin", DTYPE_U32, va, (uint64_t)nv);
    write_file(&d, &m, DATASET_TEST, "test.bin", DTYPE_U32, te, (uint64_t)ne);
    struct feat_writer fw;
    char p[4096];
    dataset_dir_path(&d, "features.bin", p, sizeof p);
    assert_int_equal(feat_writer_open(&fw, p, DTYPE_F32, DIM, err, sizeof err), 0);
    for (int v = 0; v < N; v++) {
        float x[DIM] = {(float)v, -1.0f, 0.5f};
        assert_int_equal(feat_writer_put(&fw, x, err, sizeof err), 0);
    }
    assert_int_equal(feat_writer_close(&fw, &m.f[DATASET_FEATURES], err, sizeof err), 0);
    assert_int_equal(dataset_dir_commit(&d, &m, err, sizeof err), 0);
}

/* Runs a prep main in-process with stdout+stderr captured into out. */
static int run_main(int (*fn)(int, char **), char *out, size_t outlen, int argc, char **argv)
{
    char cap[4300];
    snprintf(cap, sizeof cap, "%s/capture.txt", dir);
    fflush(stdout);
    fflush(stderr);
    int o1 = dup(1), o2 = dup(2);
    int fd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    int rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(o1, 1);
    dup2(o2, 2);
    close(o1);
    close(o2);
    fd = open(cap, O_RDONLY);
    ssize_t n = read(fd, out, outlen - 1);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    return rc;
}

static int check(char *out, size_t outlen)
{
    char *argv[] = {"check", ds, NULL};
    return run_main(prep_check_main, out, outlen, 2, argv);
}

/* Overwrites bytes of a dataset file at off; rehash updates dataset.toml. */
static void poke(const char *file, off_t off, const void *data, size_t n, bool rehash)
{
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", ds, file);
    int fd = open(p, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, data, n, off), (ssize_t)n);
    close(fd);
    if (!rehash)
        return;
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    for (int i = 0; i < DATASET_FILES; i++)
        if (!strcmp(m.f[i].file, file))
            assert_int_equal(file_xxh3(p, &m.f[i].xxh3, NULL, err, sizeof err), 0);
    assert_int_equal(dataset_meta_write(ds, &m, err, sizeof err), 0);
}

static int setup(void **state)
{
    (void)state;
    t_scratch(dir, sizeof dir, "check");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    t_rmrf(dir);
    free(indices);
    return 0;
}

static void fresh(void)
{
    t_rmrf(ds);
    free(indices);
    make_dataset(ds);
}

static void test_valid(void **state)
{
    (void)state;
    char out[16384];
    fresh();
    int rc = check(out, sizeof out);
    if (rc != 0)
        fail_msg("check failed on a valid dataset: %s", out);
    assert_non_null(strstr(out, "valid"));
    assert_non_null(strstr(out, "features.bin"));
    char *argv[] = {"info", ds, NULL};
    assert_int_equal(run_main(prep_info_main, out, sizeof out, 2, argv), 0);
    char want[128];
    snprintf(want, sizeof want, "edges        %llu ", (unsigned long long)nedges);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "nodes        1000\n"));
    assert_non_null(strstr(out, "max 8"));
    assert_non_null(strstr(out, "train 300  val 100  test 100"));
    assert_non_null(strstr(out, "row 12 B, stride 16 B (25.0% padding)"));
    assert_non_null(strstr(out, "143 unlabelled")); /* v % 7 == 0 for v < 1000 */
}

typedef struct corruption {
    const char *name;
    void (*apply)(void);
    const char *needle; /* expected in the message, with the file name */
} corruption;

static void c_checksum(void) { uint8_t b = 0x7f; poke("features.bin", 5, &b, 1, false); }
static void c_nan(void) { float x = NAN; poke("features.bin", 5 * 16 + 8, &x, 4, true); }
static void c_inf(void) { float x = -INFINITY; poke("features.bin", 7 * 16, &x, 4, true); }
static void c_pad(void) { uint8_t b = 1; poke("features.bin", 9 * 16 + 13, &b, 1, true); }
static void c_tailpad(void) { uint8_t b = 1; poke("features.bin", N * 16 + 3, &b, 1, true); }
static void c_id_range(void) { uint32_t x = N; poke("indices.bin", 4 * (nedges / 2), &x, 4, true); }
static void c_order(void)
{
    for (int v = 0; v < N; v++)
        if (indptr[v + 1] - indptr[v] >= 2) {
            uint32_t pair[2] = {indices[indptr[v] + 1], indices[indptr[v]]};
            poke("indices.bin", (off_t)(4 * indptr[v]), pair, 8, true);
            return;
        }
}
static void c_indptr(void)
{
    for (int v = 1; v < N; v++)
        if (indptr[v + 1] > indptr[v]) {
            uint64_t x = indptr[v + 1] + 1;
            poke("indptr.bin", 8 * v, &x, 8, true);
            return;
        }
}
static void c_indptr0(void) { uint64_t x = 1; poke("indptr.bin", 0, &x, 8, true); }
static void c_label(void) { int32_t x = CLASSES; poke("labels.bin", 4 * 3, &x, 4, true); }
static void c_label_neg(void) { int32_t x = -2; poke("labels.bin", 4 * 3, &x, 4, true); }
static void c_dup(void)
{
    uint32_t x;
    char p[4400];
    snprintf(p, sizeof p, "%s/train.bin", ds);
    int fd = open(p, O_RDONLY);
    assert_int_equal(pread(fd, &x, 4, 0), 4);
    close(fd);
    poke("train.bin", 4 * 10, &x, 4, true);
}
static void c_overlap(void)
{
    uint32_t x;
    char p[4400];
    snprintf(p, sizeof p, "%s/train.bin", ds);
    int fd = open(p, O_RDONLY);
    assert_int_equal(pread(fd, &x, 4, 4 * 20), 4);
    close(fd);
    poke("test.bin", 4 * 5, &x, 4, true);
}
static void c_split_range(void) { uint32_t x = N + 5; poke("val.bin", 0, &x, 4, true); }
static void c_unlabelled(void)
{
    uint32_t x;
    char p[4400];
    snprintf(p, sizeof p, "%s/val.bin", ds);
    int fd = open(p, O_RDONLY);
    assert_int_equal(pread(fd, &x, 4, 0), 4);
    close(fd);
    int32_t l = -1;
    poke("labels.bin", 4 * (off_t)x, &l, 4, true);
}
static void c_truncate(void)
{
    char o[512];
    assert_int_equal(t_run(o, sizeof o, "truncate -s -4 %s/labels.bin", ds), 0);
}
static void c_nometa(void)
{
    char o[512];
    assert_int_equal(t_run(o, sizeof o, "rm %s/dataset.toml", ds), 0);
}

/* Several labels at or above `classes`: the message lists the first few. */
static void c_labels_many(void)
{
    for (int v = 1; v <= 8; v++) {
        int32_t x = CLASSES + v;
        poke("labels.bin", 4 * (off_t)(10 * v + 1), &x, 4, v == 8);
    }
}
/* classes lowered in dataset.toml below labels in use (an edited classes). */
static void c_classes_edited(void)
{
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    m.classes = 2;
    assert_int_equal(dataset_meta_write(ds, &m, err, sizeof err), 0);
}
/* The validation split made of training nodes. */
static void c_val_is_train(void)
{
    uint32_t x[7];
    char p[4400];
    snprintf(p, sizeof p, "%s/train.bin", ds);
    int fd = open(p, O_RDONLY);
    assert_int_equal(pread(fd, x, sizeof x, 0), (ssize_t)sizeof x);
    close(fd);
    poke("val.bin", 0, x, sizeof x, true);
}
/* Two in-range neighbour ids and one out of range in several lists. */
static void c_ids_many(void)
{
    uint32_t big[3] = {N, N + 7, 0xffffffffu};
    for (int k = 0; k < 3; k++)
        poke("indices.bin", 4 * (off_t)(nedges / 4 * (uint64_t)(k + 1)), &big[k], 4, k == 2);
}

static const corruption cases[] = {
    {"checksum", c_checksum, "features.bin: checksum mismatch"},
    {"nan", c_nan, "features.bin: 1 rows hold NaN or infinite values: node 5 (feature 2)"},
    {"inf", c_inf, "features.bin: 1 rows hold NaN or infinite values: node 7 (feature 0)"},
    {"row padding", c_pad, "features.bin: 1 rows have non-zero padding bytes: row 9"},
    {"tail padding", c_tailpad, "features.bin: tail padding at byte 16003 is not zero"},
    {"id range", c_id_range, "indices.bin: 1 in-neighbour ids outside [0, 1000): edge"},
    {"ids many", c_ids_many, "indices.bin: 3 in-neighbour ids outside [0, 1000): edge"},
    {"order", c_order, "indices.bin: 1 in-neighbour lists not ascending: edge"},
    {"indptr", c_indptr, "indptr.bin: indptr decreases"},
    {"indptr0", c_indptr0, "indptr.bin: indptr[0] = 1"},
    {"label", c_label, "labels.bin: 1 labels outside [-1, 5): node 3 (label 5)"},
    {"label neg", c_label_neg, "labels.bin: 1 labels outside [-1, 5): node 3 (label -2)"},
    {"labels many", c_labels_many,
     "labels.bin: 8 labels outside [-1, 5): node 11 (label 6), node 21 (label 7), node 31 (label 8), node 41 (label "
     "9), node 51 (label 10) and 3 more"},
    {"classes edited", c_classes_edited, "labels outside [-1, 2): node "},
    {"dup", c_dup, "train.bin: 1 nodes appear more than once: node"},
    {"overlap", c_overlap, "test.bin: 1 nodes are also in train.bin (splits must be disjoint): node"},
    {"val is train", c_val_is_train, "val.bin: 7 nodes are also in train.bin (splits must be disjoint): node 1, node 2, "
                                     "node 3, node 4, node 5 and 2 more"},
    {"split range", c_split_range, "val.bin: 1 ids outside [0, 1000): entry 0 (node 1005)"},
    {"unlabelled", c_unlabelled, "nodes have no label (-1 in labels.bin): node"},
    {"truncated", c_truncate, "labels.bin: 3996 bytes but dataset.toml records 4000"},
    {"no dataset.toml", c_nometa, "no dataset.toml"},
};

static void test_corruptions(void **state)
{
    (void)state;
    char out[16384];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fresh();
        cases[i].apply();
        int rc = check(out, sizeof out);
        if (rc != 2 || !strstr(out, cases[i].needle))
            fail_msg("case '%s': exit %d, want 2 and '%s' in:\n%s", cases[i].name, rc, cases[i].needle, out);
    }
}

static void test_usage(void **state)
{
    (void)state;
    char out[4096];
    char *a1[] = {"check", NULL};
    assert_int_equal(run_main(prep_check_main, out, sizeof out, 1, a1), 2);
    char *a2[] = {"check", "--bogus", ds, NULL};
    assert_int_equal(run_main(prep_check_main, out, sizeof out, 3, a2), 2);
    assert_non_null(strstr(out, "--bogus"));
    char *a3[] = {"info", "/nonexistent/ds", NULL};
    assert_int_equal(run_main(prep_info_main, out, sizeof out, 2, a3), 2);
    assert_non_null(strstr(out, "/nonexistent/ds"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_corruptions),
        cmocka_unit_test(test_usage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
