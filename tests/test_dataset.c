/* test_dataset.c - the dataset format module: hashing writer, feature
 * layout, dataset.toml round trip and its validation, staged directories. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>

#include "t_util.h"
#include "core/dataset.h"
#include "core/util.h"

static char err[1024];

/* Builds a tiny valid dataset (3 nodes, 2 edges, dim 3) in a staging dir
 * and commits it to out. */
static void make_tiny(const char *out, enum dtype fdt)
{
    struct dataset_dir d;
    assert_int_equal(dataset_dir_begin(&d, out, err, sizeof err), 0);
    struct dataset_meta m = {.nodes = 3, .edges = 2, .feat_dim = 3, .classes = 2, .feat_align = DATASET_FEAT_ALIGN};
    snprintf(m.source, sizeof m.source, "test \"tiny\"");
    char p[4096];
    struct file_writer w;
    uint64_t bytes, h;
    const uint64_t indptr[] = {0, 0, 1, 2};
    const uint32_t indices[] = {0, 1};
    const int32_t labels[] = {0, 1, -1};
    const uint32_t tr[] = {0}, va[] = {1}, te[] = {2};
    const struct {
        int idx;
        const char *file;
        enum dtype t;
        const void *data;
        uint64_t n;
    } files[] = {
        {DATASET_INDPTR, "indptr.bin", DTYPE_U64, indptr, 4}, {DATASET_INDICES, "indices.bin", DTYPE_U32, indices, 2},
        {DATASET_LABELS, "labels.bin", DTYPE_I32, labels, 3}, {DATASET_TRAIN, "train.bin", DTYPE_U32, tr, 1},
        {DATASET_VAL, "val.bin", DTYPE_U32, va, 1},           {DATASET_TEST, "test.bin", DTYPE_U32, te, 1},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        assert_int_equal(dataset_dir_path(&d, files[i].file, p, sizeof p), 0);
        assert_int_equal(file_writer_open(&w, p, err, sizeof err), 0);
        assert_int_equal(file_writer_write(&w, files[i].data, files[i].n * dtype_size(files[i].t), err, sizeof err), 0);
        assert_int_equal(file_writer_close(&w, &bytes, &h, err, sizeof err), 0);
        dataset_file_set(&m.f[files[i].idx], files[i].file, files[i].t, files[i].n, 1, bytes, h);
    }
    struct feat_writer fw;
    assert_int_equal(dataset_dir_path(&d, "features.bin", p, sizeof p), 0);
    assert_int_equal(feat_writer_open(&fw, p, fdt, 3, err, sizeof err), 0);
    for (int r = 0; r < 3; r++) {
        float x[3] = {(float)r, (float)r + 0.5f, -1.0f};
        assert_int_equal(feat_writer_put(&fw, x, err, sizeof err), 0);
    }
    assert_int_equal(feat_writer_close(&fw, &m.f[DATASET_FEATURES], err, sizeof err), 0);
    assert_int_equal(dataset_dir_commit(&d, &m, err, sizeof err), 0);
}

static void test_writer_hash(void **state)
{
    (void)state;
    char dir[4096], p[4200];
    t_scratch(dir, sizeof dir, "writer");
    snprintf(p, sizeof p, "%s/f.bin", dir);
    struct file_writer w;
    assert_int_equal(file_writer_open(&w, p, err, sizeof err), 0);
    /* more than one internal buffer's worth, in odd-sized pieces */
    static unsigned char chunk[1000003];
    for (size_t i = 0; i < sizeof chunk; i++)
        chunk[i] = (unsigned char)(i * 7 + 3);
    for (int i = 0; i < 9; i++)
        assert_int_equal(file_writer_write(&w, chunk, sizeof chunk, err, sizeof err), 0);
    assert_int_equal(file_writer_zero(&w, 5, err, sizeof err), 0);
    uint64_t bytes, h, bytes2, h2;
    assert_int_equal(file_writer_close(&w, &bytes, &h, err, sizeof err), 0);
    assert_int_equal(bytes, 9 * sizeof chunk + 5);
    assert_int_equal(file_xxh3(p, &h2, &bytes2, err, sizeof err), 0);
    assert_int_equal(bytes2, bytes);
    assert_int_equal(h2, h);
    /* writing into a missing directory fails with the path in the message */
    snprintf(p, sizeof p, "%s/missing/f.bin", dir);
    assert_int_equal(file_writer_open(&w, p, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "missing/f.bin"));
    t_rmrf(dir);
}

static void test_roundtrip(void **state)
{
    (void)state;
    char dir[4096], out[4200];
    t_scratch(dir, sizeof dir, "roundtrip");
    for (int f16 = 0; f16 < 2; f16++) {
        snprintf(out, sizeof out, "%s/ds%d", dir, f16);
        make_tiny(out, f16 ? DTYPE_F16 : DTYPE_F32);
        struct dataset_meta m;
        if (dataset_meta_read(out, &m, true, err, sizeof err) != 0)
            fail_msg("%s", err);
        assert_int_equal(m.nodes, 3);
        assert_int_equal(m.edges, 2);
        assert_int_equal(m.classes, 2);
        assert_string_equal(m.source, "test \"tiny\"");
        const struct dataset_file *f = &m.f[DATASET_FEATURES];
        assert_int_equal(f->dtype, f16 ? DTYPE_F16 : DTYPE_F32);
        assert_int_equal(f->row_stride, f16 ? 8 : 16);
        assert_int_equal(f->bytes, 4096);
        /* the rows sit at their stride, the padding is zero */
        char p[4300];
        snprintf(p, sizeof p, "%s/features.bin", out);
        int fd = open(p, O_RDONLY);
        assert_true(fd >= 0);
        unsigned char buf[4096];
        assert_int_equal(read(fd, buf, sizeof buf), 4096);
        close(fd);
        float x;
        if (!f16) {
            memcpy(&x, buf + 2 * 16 + 4, 4);
            assert_true(x == 2.5f);
        } else {
            uint16_t h;
            memcpy(&h, buf + 2 * 8 + 2, 2);
            assert_true(half_to_f32(h) == 2.5f);
        }
        for (size_t i = 3 * f->row_stride; i < sizeof buf; i++)
            assert_int_equal(buf[i], 0);
        /* the hash recorded is the file's */
        uint64_t h;
        assert_int_equal(file_xxh3(p, &h, NULL, err, sizeof err), 0);
        assert_int_equal(h, f->xxh3);
    }
    /* no staging directories remain */
    char o[8192];
    assert_int_equal(t_run(o, sizeof o, "ls -A %s", dir), 0);
    assert_string_equal(o, "ds0\nds1\n");
    t_rmrf(dir);
}

/* Edits dataset.toml with sed and expects dataset_meta_read to fail naming `needle`. */
static void expect_bad(const char *out, const char *sed, const char *needle)
{
    char o[1024];
    assert_int_equal(t_run(o, sizeof o, "cp %s/dataset.toml %s/orig && sed -i '%s' %s/dataset.toml", out, out, sed, out), 0);
    struct dataset_meta m;
    int rc = dataset_meta_read(out, &m, true, err, sizeof err);
    if (rc == 0 || !strstr(err, needle))
        fail_msg("sed '%s': rc %d, want error with '%s', got '%s'", sed, rc, needle, err);
    assert_int_equal(t_run(o, sizeof o, "mv %s/orig %s/dataset.toml", out, out), 0);
}

static void test_meta_validation(void **state)
{
    (void)state;
    char dir[4096], out[4200], o[1024];
    t_scratch(dir, sizeof dir, "metaval");
    snprintf(out, sizeof out, "%s/ds", dir);
    make_tiny(out, DTYPE_F32);
    expect_bad(out, "s/^nodes = 3/nodes = 4/", "indptr must be u64");
    expect_bad(out, "s/^nodes = 3/nodes = 0/", "nodes = 0");
    expect_bad(out, "s/^version = 1/version = 9/", "version 9 is not supported");
    expect_bad(out, "s/^format = .*/format = \"x\"/", "format");
    expect_bad(out, "/^edges/d", "edges is missing");
    expect_bad(out, "s/^classes = 2/classes = \"2\"/", "classes must be a non-negative integer");
    expect_bad(out, "0,/^bytes = 32/s//bytes = 33/", "indptr.bytes = 33");
    expect_bad(out, "s/^xxh3 = \"\\(.*\\)\"$/xxh3 = \"zz\"/", "16 hex digits");
    expect_bad(out, "s/^dtype = \"f32\"/dtype = \"f64\"/", "dtype = \"f64\"");
    expect_bad(out, "s/^file = \"labels.bin\"/file = \"..\\/labels.bin\"/", "plain file name");
    expect_bad(out, "s/^file = \"labels.bin\"/file = \"train.bin\"/", "name the same file");
    expect_bad(out, "s/^row_stride = 16/row_stride = 32/", "");
    expect_bad(out, "s/^\\[val\\]/[valx]/", "[val] table is missing");
    expect_bad(out, "s/^nodes = 3/nodes = 3 3/", "dataset.toml:4:");
    /* files changed under us: size mismatch and missing file */
    assert_int_equal(t_run(o, sizeof o, "truncate -s 8 %s/labels.bin", out), 0);
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(out, &m, true, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "labels.bin: 8 bytes but dataset.toml records 12"));
    assert_int_equal(dataset_meta_read(out, &m, false, err, sizeof err), 0);
    assert_int_equal(t_run(o, sizeof o, "rm %s/labels.bin", out), 0);
    assert_int_equal(dataset_meta_read(out, &m, true, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "labels.bin"));
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "no dataset.toml"));
    t_rmrf(dir);
}

/* A dataset.toml of N nodes (no edges, empty splits) with features of
 * dim x f32 at the given stride and recorded size. */
static void meta_text(char *out, size_t len, uint64_t n, uint64_t dim, uint64_t stride, uint64_t feat_bytes)
{
    const char *id = n < (1ull << 32) ? "u32" : "u64";
    int k = snprintf(out, len,
                     "format = \"sluice-dataset\"\nversion = 1\nnodes = %" PRIu64 "\nedges = 0\nfeat_dim = %" PRIu64
                     "\nclasses = 2\nfeat_align = 512\n"
                     "[indptr]\nfile = \"indptr.bin\"\ndtype = \"u64\"\nshape = [%" PRIu64 "]\nbytes = %" PRIu64
                     "\nxxh3 = \"0000000000000000\"\n"
                     "[features]\nfile = \"features.bin\"\ndtype = \"f32\"\nshape = [%" PRIu64 ", %" PRIu64
                     "]\nrow_stride = %" PRIu64 "\nbytes = %" PRIu64 "\nxxh3 = \"0000000000000000\"\n"
                     "[labels]\nfile = \"labels.bin\"\ndtype = \"i32\"\nshape = [%" PRIu64 "]\nbytes = %" PRIu64
                     "\nxxh3 = \"0000000000000000\"\n",
                     n, dim, n + 1, (n + 1) * 8, n, dim, stride, feat_bytes, n, n * 4);
    const char *empty[] = {"indices", "train", "val", "test"};
    for (size_t i = 0; i < 4; i++)
        k += snprintf(out + k, len - (size_t)k,
                      "[%s]\nfile = \"%s.bin\"\ndtype = \"%s\"\nshape = [0]\nbytes = 0\nxxh3 = \"0000000000000000\"\n",
                      empty[i], empty[i], id);
    assert_true((size_t)k < len);
}

/* Sizes from disk near 2^64: N = (2^55 - 1) / 31 rows of stride 15872
 * (feat_dim 3968, f32) make N x stride = 2^64 - 512, which rounds up to
 * 4096 bytes as 0 when the rounding wraps: "bytes = 0" must not pass. A
 * size past INT64_MAX (no file can be that long) is refused too, and so is
 * a feat_dim the 32-bit model input would truncate. */
static void test_meta_size_wrap(void **state)
{
    (void)state;
    static const struct {
        uint64_t nodes, dim, stride;
    } cases[] = {
        {((1ull << 55) - 1) / 31, 3968, 15872}, /* 2^64 - 512 bytes: rounding up to 4096 wraps to 0 */
        {(1ull << 51) + 1, 1024, 4096},         /* 2^63 + 4096 bytes: no wrap, but past INT64_MAX */
    };
    char text[4096];
    struct dataset_meta m;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        meta_text(text, sizeof text, cases[i].nodes, cases[i].dim, cases[i].stride, 0);
        int rc = dataset_meta_parse(text, strlen(text), "dataset.toml", &m, err, sizeof err);
        if (rc != -EINVAL || !strstr(err, "features: shape times stride overflows"))
            fail_msg("case %zu: rc %d, err '%s'", i, rc, err);
    }
    /* a feat_dim past 32 bits with sizes that fit: refused, not truncated */
    meta_text(text, sizeof text, 1, (1ull << 32) + 8, ((1ull << 34) + 32 + 511) / 512 * 512, 0);
    int rc = dataset_meta_parse(text, strlen(text), "dataset.toml", &m, err, sizeof err);
    if (rc != -EINVAL || !strstr(err, "feat_dim = 4294967304 must be in 1..2147483647"))
        fail_msg("wide feat_dim: rc %d, err '%s'", rc, err);
    /* the same text with a small N is accepted: the cases above fail on the size alone */
    meta_text(text, sizeof text, 2, 3968, 15872, 32768);
    if (dataset_meta_parse(text, strlen(text), "dataset.toml", &m, err, sizeof err) != 0)
        fail_msg("small case: %s", err);
    assert_int_equal(m.f[DATASET_FEATURES].bytes, 32768);
}

static void test_staging(void **state)
{
    (void)state;
    char dir[4096], out[4200], o[8192];
    t_scratch(dir, sizeof dir, "staging");
    snprintf(out, sizeof out, "%s/ds", dir);
    struct dataset_dir d;
    /* a stale staging dir of a dead process is reaped; a live one kept */
    assert_int_equal(t_run(o, sizeof o, "mkdir %s/.ds.partial-999999999 %s/.ds.partial-1", dir, dir), 0);
    assert_int_equal(dataset_dir_begin(&d, out, err, sizeof err), 0);
    assert_false(t_exists(strcat(strcpy(o, dir), "/.ds.partial-999999999")));
    assert_true(t_exists(strcat(strcpy(o, dir), "/.ds.partial-1")));
    assert_true(t_exists(d.tmp));
    dataset_dir_abort(&d);
    assert_false(t_exists(d.tmp));
    assert_false(t_exists(out));
    dataset_dir_abort(&d);
    /* an existing OUT is refused */
    make_tiny(out, DTYPE_F32);
    assert_int_equal(dataset_dir_begin(&d, out, err, sizeof err), -EEXIST);
    assert_non_null(strstr(err, "already exists"));
    snprintf(o, sizeof o, "%s/nope/ds", dir);
    assert_int_equal(dataset_dir_begin(&d, o, err, sizeof err), -ENOENT);
    t_rmrf(dir);
}

/* Unknown keys of dataset.toml are refused, at the top and in a file's
 * table, naming the key and its line (issue 17, item 7). */
static void test_meta_unknown_keys(void **state)
{
    (void)state;
    char text[8192], bad[8400];
    struct dataset_meta m;
    meta_text(text, sizeof text, 2, 3968, 15872, 32768);
    assert_int_equal(dataset_meta_parse(text, strlen(text), "dataset.toml", &m, err, sizeof err), 0);
    snprintf(bad, sizeof bad, "colour = 3\n%s", text);
    assert_int_equal(dataset_meta_parse(bad, strlen(bad), "dataset.toml", &m, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "dataset.toml:1:10: unknown key colour"));
    snprintf(bad, sizeof bad, "%s\nrow_strid = 512\n", text); /* into the last table, which is not features */
    assert_int_equal(dataset_meta_parse(bad, strlen(bad), "dataset.toml", &m, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "unknown key "));
    assert_non_null(strstr(err, ".row_strid"));
}

/* A killed gnnprep's staging directory is removed by the next gnnprep
 * whatever its output name, also when its pid now names another process
 * (its .owner records another start time); a live writer's is kept. */
static void test_staging_reclaim(void **state)
{
    (void)state;
    char dir[4096], out[4200], o[8192];
    t_scratch(dir, sizeof dir, "reclaim");
    snprintf(out, sizeof out, "%s/new", dir);
    long me = (long)getpid();
    assert_int_equal(t_run(o, sizeof o,
                           "mkdir %s/.old.partial-999999999 %s/.reused.partial-%ld %s/.live.partial-%ld && "
                           "echo '%ld 1' > %s/.reused.partial-%ld/.owner",
                           dir, dir, me, dir, me, me, dir, me),
                     0);
    struct dataset_dir d;
    assert_int_equal(dataset_dir_begin(&d, out, err, sizeof err), 0);
    snprintf(o, sizeof o, "%s/.old.partial-999999999", dir);
    assert_false(t_exists(o));
    snprintf(o, sizeof o, "%s/.reused.partial-%ld", dir, me);
    assert_false(t_exists(o));
    snprintf(o, sizeof o, "%s/.live.partial-%ld", dir, me);
    assert_true(t_exists(o)); /* no .owner: a live pid is believed */
    snprintf(o, sizeof o, "%s/.owner", d.tmp);
    assert_true(t_exists(o));
    dataset_dir_abort(&d);
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_hash),     cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_meta_validation), cmocka_unit_test(test_meta_size_wrap),
        cmocka_unit_test(test_staging),         cmocka_unit_test(test_meta_unknown_keys),
        cmocka_unit_test(test_staging_reclaim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
