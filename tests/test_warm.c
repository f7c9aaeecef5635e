/* test_warm.c - the warm start (stages/warm.h): after the pass every row
 * of features.bin is VALID in the buffer and equal, byte for byte, to the
 * file read independently, for f32 rows of 3, 100 and 128 values and f16
 * rows of 128, in every I/O mode (direct, buffered, mmap) and with the
 * pread fallback, at several chunk sizes and depths (chunks read straight
 * into the slots when the strides agree, copied otherwise); nothing stays
 * referenced; rows batches held or loaded first are left to them (and the
 * chunk around them copied); extractor threads running batches beside the
 * pass get the file's rows; a buffer that cannot hold every row is
 * refused; a read that fails leaves the buffer with nothing LOADING and
 * nothing referenced, and the error names the offset. A full buffer can
 * be declared resident (featbuf_set_resident; not before it is full):
 * lookups then take no references, the extractor serves batches from it
 * (x.unreferenced) with the file's rows, and they count as hits. Huge
 * pages offered ahead of the reads leave every row equal to the file. */
#include "tests/t_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sys/mman.h>

#include "core/dataset.h"
#include "core/util.h"
#include "stages/extract.h"
#include "stages/extract_int.h" /* the fault hook's read counter, reset between cases */
#include "stages/featbuf.h"
#include "stages/warm.h"
#include "ipc/shm.h" /* SHM_HUGE_BYTES */

#define NODES 3000u

static char root[4096];
static char err[1024];

static void dataset_n(char *out, size_t len, unsigned nodes, unsigned dim, const char *dtype)
{
    if (!root[0])
        t_scratch(root, sizeof root, "test_warm");
    snprintf(out, len, "%s/%s-%u-%u", root, dtype, dim, nodes);
    if (t_exists(out))
        return;
    char gnnprep[4096], log[4096];
    t_bin(gnnprep, sizeof gnnprep, "gnnprep");
    if (!t_exists(gnnprep))
        fail_msg("%s is not built", gnnprep);
    if (t_run(log, sizeof log,
              "'%s' synth '%s' --nodes %u --avg-degree 2 --feat-dim %u --classes 4 --dtype %s --seed 9", gnnprep, out,
              nodes, dim, dtype) != 0)
        fail_msg("gnnprep synth failed:\n%s", log);
}

static void dataset(char *out, size_t len, unsigned dim, const char *dtype)
{
    dataset_n(out, len, NODES, dim, dtype);
}

/* features.bin read whole with plain reads: the reference */
static unsigned char *file_bytes(const char *dir, size_t *len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/features.bin", dir);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    *len = (size_t)st.st_size;
    unsigned char *b = malloc(*len);
    assert_non_null(b);
    size_t got = 0;
    assert_int_equal(sl_pread_full(fd, b, *len, 0, &got), 0);
    assert_int_equal(got, *len);
    close(fd);
    return b;
}

struct buf {
    struct featbuf fb;
    void *mem;
    size_t len;
};

static void buf_make(struct buf *b, uint64_t n_nodes, uint32_t nslots, size_t row_bytes)
{
    memset(b, 0, sizeof *b);
    struct featbuf_params p = {.n_nodes = n_nodes, .nslots = nslots, .row_bytes = row_bytes};
    b->len = featbuf_mem_size(&p);
    assert_true(b->len > 0);
    b->mem = mmap(NULL, b->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(b->mem != MAP_FAILED);
    assert_int_equal(featbuf_mem_format(b->mem, b->len, &p, err, sizeof err), 0);
    assert_int_equal(featbuf_init(&b->fb, b->mem, b->len, err, sizeof err), 0);
}

static void buf_free(struct buf *b)
{
    featbuf_free(&b->fb);
    munmap(b->mem, b->len);
}

/* Consistent, nothing referenced, and (when want_all) every row VALID and
 * equal to the file. */
static void expect_rows(struct buf *b, const struct extract_source *src, const unsigned char *file, bool want_all,
                        const char *combo)
{
    char msg[512] = "";
    if (featbuf_check(&b->fb, msg, sizeof msg))
        fail_msg("%s: featbuf_check: %s", combo, msg);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(&b->fb, &st), 0);
    if (st.standby != b->fb.nslots)
        fail_msg("%s: %u of %u slots on standby: references left", combo, st.standby, b->fb.nslots);
    if (!want_all)
        return;
    for (uint64_t n = 0; n < src->rows; n++) {
        uint32_t slot = featbuf_lookup(&b->fb, n);
        if (slot == FEATBUF_ABSENT)
            fail_msg("%s: node %" PRIu64 " has no slot after the pass", combo, n);
        if (memcmp(featbuf_row(&b->fb, slot), file + n * src->row_stride, (size_t)src->row_bytes))
            fail_msg("%s: row of node %" PRIu64 " (slot %u) differs from features.bin", combo, n, slot);
    }
}

static void open_src(struct extract_source *src, const char *dir, enum extract_io io)
{
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    if (extract_source_open(src, dir, &m, io, "test_warm", err, sizeof err))
        fail_msg("extract_source_open: %s", err);
}

/* Every mode, dtype and width; chunk sizes from one row to many; depths. */
static void test_rows_equal_file(void **state)
{
    (void)state;
    static const struct {
        unsigned dim;
        const char *dtype;
    } shapes[] = {{3, "f32"}, {100, "f32"}, {128, "f32"}, {128, "f16"}};
    static const enum extract_io ios[] = {EXTRACT_IO_DIRECT, EXTRACT_IO_BUFFERED, EXTRACT_IO_MMAP};
    static const struct warm_params ps[] = {{0, 0, false, NULL, 0}, {4096, 1, false, NULL, 0}, {1, 3, false, NULL, 0}, {65536, 16, true, NULL, 0}};
    for (int nouring = 0; nouring < 2; nouring++) {
        if (nouring)
            setenv("SLUICE_NO_IO_URING", "1", 1); /* pread(2), one chunk at a time */
        for (size_t d = 0; d < sizeof shapes / sizeof shapes[0]; d++) {
            char dir[4200];
            dataset(dir, sizeof dir, shapes[d].dim, shapes[d].dtype);
            size_t flen;
            unsigned char *file = file_bytes(dir, &flen);
            for (size_t i = 0; i < sizeof ios / sizeof ios[0]; i++)
                for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
                    char combo[256];
                    snprintf(combo, sizeof combo, "%s-%u io=%s chunk=%zu depth=%u nouring=%d", shapes[d].dtype,
                             shapes[d].dim, extract_io_name(ios[i]), ps[k].chunk_bytes, ps[k].depth, nouring);
                    struct extract_source src;
                    open_src(&src, dir, ios[i]);
                    struct buf b;
                    buf_make(&b, NODES, NODES + 7, (size_t)src.row_bytes);
                    assert_true(warm_fits(&b.fb, &src));
                    struct warm_stats st;
                    int rc = warm_fill(&src, &b.fb, &ps[k], NULL, NULL, &st, err, sizeof err);
                    if (rc)
                        fail_msg("%s: warm_fill: %d %s", combo, rc, err);
                    expect_rows(&b, &src, file, true, combo);
                    if (st.loaded != NODES || st.skipped != 0 || st.rows != NODES)
                        fail_msg("%s: loaded %" PRIu64 " skipped %" PRIu64 " of %" PRIu64, combo, st.loaded,
                                 st.skipped, st.rows);
                    /* a fresh buffer hands out consecutive slots: when the strides agree and the
                     * alignment allows, every chunk lands straight in its slots */
                    bool same = b.fb.stride == src.row_stride && src.row_stride % src.align == 0;
                    if (same && st.chunks_copied)
                        fail_msg("%s: %" PRIu64 " chunks copied though the strides agree", combo, st.chunks_copied);
                    if (!same && st.chunks_direct)
                        fail_msg("%s: %" PRIu64 " chunks read into slots of another stride", combo,
                                 st.chunks_direct);
                    if (st.bytes < (uint64_t)NODES * src.row_bytes)
                        fail_msg("%s: read %" PRIu64 " bytes, fewer than the rows", combo, st.bytes);
                    /* the most reads in flight: at least one, at most the depth asked for (1
                     * with pread), at most 16 when every chunk goes through staging */
                    unsigned depth = nouring ? 1 : ps[k].depth ? ps[k].depth : WARM_DEPTH_DEFAULT;
                    if (st.depth < 1 || st.depth > depth || (!same && st.depth > 16))
                        fail_msg("%s: %u reads in flight at most (depth %u)", combo, st.depth, depth);
                    buf_free(&b);
                    extract_source_free(&src);
                }
            free(file);
        }
        unsetenv("SLUICE_NO_IO_URING");
    }
}

/* A batch loads these nodes' rows (an extractor's random reads) and lets
 * them go, before a pass. */
static void load_by_batch(struct buf *b, const struct extract_source *src, const uint64_t *nodes, uint32_t n)
{
    struct extractor x;
    uint32_t slots[8];
    assert_true(n <= 8);
    assert_int_equal(extractor_init(&x, src, &b->fb, 8, NULL, 0, err, sizeof err), 0);
    assert_int_equal(extractor_run(&x, nodes, n, slots, err, sizeof err), 0);
    assert_int_equal(featbuf_release_many(&b->fb, slots, n), 0);
    extractor_free(&x);
}

/* Rows a batch loaded first are left to it: HIT at the claim, and the
 * chunk around them copied (its slots are not consecutive). */
static void test_rows_loaded_first(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 128, "f32");
    size_t flen;
    unsigned char *file = file_bytes(dir, &flen);
    struct extract_source src;
    open_src(&src, dir, EXTRACT_IO_DIRECT);
    struct buf b;
    buf_make(&b, NODES, NODES, (size_t)src.row_bytes);
    static const uint64_t nodes[] = {5, 900, 901, 2999};
    load_by_batch(&b, &src, nodes, 4);
    struct warm_stats st;
    struct warm_params p = {.chunk_bytes = 64 * 512, .depth = 4};
    assert_int_equal(warm_fill(&src, &b.fb, &p, NULL, NULL, &st, err, sizeof err), 0);
    expect_rows(&b, &src, file, true, "loaded first");
    assert_int_equal(st.skipped, 4);
    assert_int_equal(st.loaded, NODES - 4);
    assert_true(st.chunks_copied >= 3); /* the chunks of 5, 900/901 and 2999 */
    buf_free(&b);
    extract_source_free(&src);
    free(file);
}

/* A hot set (warm_params.nodes) in a buffer smaller than the file: its
 * rows, and only they, end in the buffer equal to the file, nothing
 * referenced; a set node a batch loaded first is left to it; chunks with
 * no set node are not read; io_uring and pread; a set that is not rising,
 * or larger than the buffer, is refused. */
static void test_hot_set(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 128, "f32");
    size_t flen;
    unsigned char *file = file_bytes(dir, &flen);
    /* every third node of the first 2000 (667), the whole chunk of rows
     * 2048..2111 (read straight into its slots), none of the rest */
    uint64_t hot[NODES];
    uint64_t nhot = 0;
    for (uint64_t n = 0; n < 2000; n += 3)
        hot[nhot++] = n;
    for (uint64_t n = 2048; n < 2112; n++)
        hot[nhot++] = n;
    for (int nouring = 0; nouring < 2; nouring++) {
        if (nouring)
            setenv("SLUICE_NO_IO_URING", "1", 1);
        struct extract_source src;
        open_src(&src, dir, EXTRACT_IO_DIRECT);
        struct buf b;
        buf_make(&b, NODES, 1000, (size_t)src.row_bytes);
        static const uint64_t first = 3; /* in the buffer first, by a batch */
        load_by_batch(&b, &src, &first, 1);
        assert_true(warm_fits_set(&b.fb, &src, nhot));
        struct warm_params p = {.chunk_bytes = 64 * 512, .depth = 4, .nodes = hot, .nnodes = nhot};
        struct warm_stats st;
        if (warm_fill(&src, &b.fb, &p, NULL, NULL, &st, err, sizeof err))
            fail_msg("nouring=%d: warm_fill: %s", nouring, err);
        expect_rows(&b, &src, file, false, "hot set");
        assert_int_equal(st.rows, nhot);
        assert_int_equal(st.skipped, 1);
        assert_int_equal(st.loaded, nhot - 1);
        for (uint64_t n = 0, h = 0; n < NODES; n++) {
            bool in = h < nhot && hot[h] == n;
            h += in;
            uint32_t s = featbuf_lookup(&b.fb, n);
            if (!in && n != 3) {
                if (s != FEATBUF_ABSENT)
                    fail_msg("nouring=%d: node %" PRIu64 " is not in the hot set but has slot %u", nouring, n, s);
                continue;
            }
            if (s == FEATBUF_ABSENT)
                fail_msg("nouring=%d: hot node %" PRIu64 " has no slot after the pass", nouring, n);
            if (memcmp(featbuf_row(&b.fb, s), file + n * src.row_stride, (size_t)src.row_bytes))
                fail_msg("nouring=%d: row of node %" PRIu64 " differs from features.bin", nouring, n);
        }
        /* 2000 rows in chunks of 64 rows: 32 chunks read, and chunk 32;
         * the 14 past them not */
        if (st.bytes > (uint64_t)33 * 64 * 512)
            fail_msg("nouring=%d: read %" PRIu64 " bytes, more than the 33 chunks that hold the set", nouring, st.bytes);
        assert_int_equal(st.chunks_direct + st.chunks_copied, 33);
        assert_int_equal(st.chunks_direct, 1);
        /* refused: not rising; more nodes than slots */
        uint64_t bad[2] = {7, 7};
        struct warm_params q = {.nodes = bad, .nnodes = 2};
        assert_int_equal(warm_fill(&src, &b.fb, &q, NULL, NULL, &st, err, sizeof err), -EINVAL);
        assert_false(warm_fits_set(&b.fb, &src, 1001));
        buf_free(&b);
        extract_source_free(&src);
    }
    unsetenv("SLUICE_NO_IO_URING");
    free(file);
}

/* Extractor threads run random batches while the pass runs: every row
 * they get equals the file, and the buffer ends full and clean. */
struct runner {
    const struct extract_source *src;
    struct featbuf *fb;
    const unsigned char *file;
    uint64_t seed;
    int bad;
};

static void *runner_main(void *arg)
{
    struct runner *r = arg;
    struct extractor x;
    char e[512];
    if (extractor_init(&x, r->src, r->fb, 16, NULL, 0, e, sizeof e)) {
        r->bad = -1;
        return NULL;
    }
    uint64_t s = r->seed, nodes[200];
    uint32_t slots[200];
    for (int batch = 0; batch < 40 && !r->bad; batch++) {
        for (int i = 0; i < 200; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            nodes[i] = (s >> 33) % NODES;
        }
        if (extractor_run(&x, nodes, 200, slots, e, sizeof e)) {
            r->bad = -2;
            break;
        }
        for (int i = 0; i < 200; i++)
            if (memcmp(featbuf_row(r->fb, slots[i]), r->file + nodes[i] * r->src->row_stride,
                       (size_t)r->src->row_bytes))
                r->bad = 1;
        featbuf_release_many(r->fb, slots, 200);
    }
    extractor_free(&x);
    return NULL;
}

static void test_beside_batches(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 100, "f32");
    size_t flen;
    unsigned char *file = file_bytes(dir, &flen);
    for (int round = 0; round < 4; round++) {
        struct extract_source src;
        open_src(&src, dir, round % 2 ? EXTRACT_IO_BUFFERED : EXTRACT_IO_DIRECT);
        struct buf b;
        buf_make(&b, NODES, NODES + 400, (size_t)src.row_bytes);
        struct runner r[2];
        pthread_t tid[2];
        for (int i = 0; i < 2; i++) {
            r[i] = (struct runner){.src = &src, .fb = &b.fb, .file = file, .seed = 17u + (uint64_t)round * 2 + i};
            assert_int_equal(pthread_create(&tid[i], NULL, runner_main, &r[i]), 0);
        }
        struct warm_stats st;
        struct warm_params p = {.chunk_bytes = 8192, .depth = 4};
        int rc = warm_fill(&src, &b.fb, &p, NULL, NULL, &st, err, sizeof err);
        for (int i = 0; i < 2; i++)
            pthread_join(tid[i], NULL);
        if (rc)
            fail_msg("round %d: warm_fill: %s", round, err);
        for (int i = 0; i < 2; i++)
            if (r[i].bad)
                fail_msg("round %d: a batch beside the pass got a wrong row or failed (%d)", round, r[i].bad);
        expect_rows(&b, &src, file, true, "beside batches");
        assert_int_equal(st.loaded + st.skipped, NODES);
        buf_free(&b);
        extract_source_free(&src);
    }
    free(file);
}

/* Too small a buffer, rows on a device: refused, nothing touched. */
static void test_refused(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 128, "f32");
    struct extract_source src;
    open_src(&src, dir, EXTRACT_IO_DIRECT);
    struct buf b;
    buf_make(&b, NODES, NODES - 1, (size_t)src.row_bytes);
    assert_false(warm_fits(&b.fb, &src));
    struct warm_stats st;
    assert_int_equal(warm_fill(&src, &b.fb, NULL, NULL, NULL, &st, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "do not all fit"));
    expect_rows(&b, &src, NULL, false, "refused");
    assert_int_equal(featbuf_lookup(&b.fb, 0), FEATBUF_ABSENT);
    buf_free(&b);
    struct featbuf_params p = {.n_nodes = NODES, .nslots = NODES, .row_bytes = (size_t)src.row_bytes,
                               .rows_on_device = true};
    size_t len = featbuf_mem_size(&p);
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    struct featbuf dev = {0};
    assert_int_equal(featbuf_mem_format(mem, len, &p, NULL, 0), 0);
    assert_int_equal(featbuf_init(&dev, mem, len, NULL, 0), 0);
    assert_false(warm_fits(&dev, &src));
    assert_int_equal(warm_fill(&src, &dev, NULL, NULL, NULL, &st, err, sizeof err), -ENODEV);
    assert_non_null(strstr(err, "GPU that this process has not opened"));
    featbuf_free(&dev);
    munmap(mem, len);
    extract_source_free(&src);
}

/* The Nth read fails (SLUICE_FAULT_READ_EIO): -EIO naming the offset;
 * nothing LOADING or referenced is left; rows of chunks that landed
 * before stay valid and equal the file. */
static void test_read_error(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 128, "f32");
    size_t flen;
    unsigned char *file = file_bytes(dir, &flen);
    static const unsigned fail_at[] = {1, 3, 10};
    for (size_t f = 0; f < sizeof fail_at / sizeof fail_at[0]; f++) {
        char n[16];
        snprintf(n, sizeof n, "%u", fail_at[f]);
        setenv("SLUICE_FAULT_READ_EIO", n, 1);
        atomic_store(&extract_fault_reads, 0);
        struct extract_source src;
        open_src(&src, dir, EXTRACT_IO_DIRECT);
        unsetenv("SLUICE_FAULT_READ_EIO");
        struct buf b;
        buf_make(&b, NODES, NODES, (size_t)src.row_bytes);
        struct warm_stats st;
        struct warm_params p = {.chunk_bytes = 64 * 512, .depth = 4};
        int rc = warm_fill(&src, &b.fb, &p, NULL, NULL, &st, err, sizeof err);
        if (rc != -EIO || !strstr(err, "offset"))
            fail_msg("read %u failing: rc %d, '%s'", fail_at[f], rc, err);
        expect_rows(&b, &src, file, false, "read error");
        for (uint64_t node = 0; node < NODES; node++) {
            uint32_t slot = featbuf_lookup(&b.fb, node);
            if (slot != FEATBUF_ABSENT &&
                memcmp(featbuf_row(&b.fb, slot), file + node * src.row_stride, (size_t)src.row_bytes))
                fail_msg("read %u failing: node %" PRIu64 " kept a wrong row", fail_at[f], node);
        }
        assert_true(st.loaded < NODES);
        buf_free(&b);
        extract_source_free(&src);
    }
    free(file);
}

/* features.bin shrinks under the pass (after the source was opened), to
 * a 512-byte boundary or off one: the pass fails with -EIO, "the file
 * ended early", nothing LOADING or referenced - it once read the same
 * tail again for ever when the file ended off a block boundary (direct
 * reads ask again from the block before the end), until idle() said stop. */
static int idle_count(void *arg)
{
    int *calls = arg;
    return ++*calls > 200; /* 40 s of slices: far past any honest pass of this file */
}

static void test_file_shrank(void **state)
{
    (void)state;
    char dir[4200], path[4300];
    dataset_n(dir, sizeof dir, 2500, 128, "f32"); /* its own: this test cuts its file */
    snprintf(path, sizeof path, "%s/features.bin", dir);
    size_t flen;
    unsigned char *file = file_bytes(dir, &flen);
    static const enum extract_io ios[] = {EXTRACT_IO_DIRECT, EXTRACT_IO_BUFFERED};
    static const off_t cut[] = {1000 * 512, 1000 * 512 + 300};
    for (int pread_only = 0; pread_only < 2; pread_only++)
        for (size_t i = 0; i < 2; i++)
            for (size_t c = 0; c < 2; c++) {
                char combo[96];
                snprintf(combo, sizeof combo, "%s%s, cut to %jd bytes", ios[i] == EXTRACT_IO_DIRECT ? "direct" : "buffered",
                         pread_only ? " (pread)" : "", (intmax_t)cut[c]);
                if (pread_only)
                    setenv("SLUICE_NO_IO_URING", "1", 1);
                struct extract_source src;
                open_src(&src, dir, ios[i]);
                assert_int_equal(truncate(path, cut[c]), 0);
                struct buf b;
                buf_make(&b, 2500, 2500, (size_t)src.row_bytes);
                struct warm_stats st;
                struct warm_params p = {.chunk_bytes = 64 * 512, .depth = 4, .no_huge = true};
                int calls = 0;
                int rc = warm_fill(&src, &b.fb, &p, idle_count, &calls, &st, err, sizeof err);
                unsetenv("SLUICE_NO_IO_URING");
                if (rc != -EIO || !strstr(err, "ended early"))
                    fail_msg("%s: rc %d after %d idle calls, '%s'", combo, rc, calls, err);
                expect_rows(&b, &src, file, false, combo);
                buf_free(&b);
                extract_source_free(&src);
                int fd = open(path, O_WRONLY | O_TRUNC); /* the file back */
                assert_true(fd >= 0);
                assert_int_equal(sl_pwrite_all(fd, file, flen, 0), 0);
                close(fd);
            }
    free(file);
}

static void test_resident(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 128, "f32");
    size_t flen;
    unsigned char *file = file_bytes(dir, &flen);
    struct extract_source src;
    open_src(&src, dir, EXTRACT_IO_DIRECT);
    struct buf b;
    buf_make(&b, NODES, NODES, (size_t)src.row_bytes);
    uint64_t nodes[300];
    uint32_t slots[300];
    for (int i = 0; i < 300; i++)
        nodes[i] = (uint64_t)(i * 7) % NODES;
    /* not full: refused, and lookups say "acquire as usual" */
    assert_int_equal(featbuf_set_resident(&b.fb), -EAGAIN);
    assert_false(featbuf_is_resident(&b.fb));
    assert_int_equal(featbuf_lookup_resident(&b.fb, nodes, 300, slots), 0);
    struct extractor x;
    assert_int_equal(extractor_init(&x, &src, &b.fb, 8, NULL, 0, err, sizeof err), 0);
    assert_int_equal(extractor_run(&x, nodes, 300, slots, err, sizeof err), 0);
    assert_false(x.unreferenced);
    /* a held reference does not stop it, once every row is in */
    struct warm_stats ws;
    assert_int_equal(warm_fill(&src, &b.fb, NULL, NULL, NULL, &ws, err, sizeof err), 0);
    assert_int_equal(featbuf_set_resident(&b.fb), 0);
    assert_true(featbuf_is_resident(&b.fb));
    assert_int_equal(featbuf_release_many(&b.fb, slots, 300), 0);
    struct featbuf_stats st0, st1;
    assert_int_equal(featbuf_stats(&b.fb, &st0), 0);
    for (int round = 0; round < 3; round++) {
        memset(slots, 0xff, sizeof slots);
        assert_int_equal(extractor_run(&x, nodes, 300, slots, err, sizeof err), 0);
        assert_true(x.unreferenced);
        for (int i = 0; i < 300; i++) {
            assert_int_equal(slots[i], featbuf_lookup(&b.fb, nodes[i]));
            if (memcmp(featbuf_row(&b.fb, slots[i]), file + nodes[i] * src.row_stride, (size_t)src.row_bytes))
                fail_msg("resident: row of node %" PRIu64 " differs from the file", nodes[i]);
        }
    }
    assert_int_equal(featbuf_stats(&b.fb, &st1), 0);
    assert_int_equal(st1.hits - st0.hits, 900);
    assert_int_equal(st1.loads, st0.loads);
    expect_rows(&b, &src, file, true, "resident"); /* nothing referenced: every slot on standby */
    uint64_t bad = NODES;
    assert_int_equal(featbuf_lookup_resident(&b.fb, &bad, 1, slots), -EINVAL);
    featbuf_mark_broken(&b.fb);
    assert_int_equal(featbuf_lookup_resident(&b.fb, nodes, 1, slots), -EPIPE);
    extractor_free(&x);
    buf_free(&b);
    extract_source_free(&src);
    free(file);
}

/* Huge pages (warm.h): on a buffer of several huge pages, mapped at a
 * huge-page-aligned address as shm.c maps segments, the pass offers the
 * slot memory to shm_huge ahead of the reads; every row still equals the
 * file, whether the kernel made huge pages (then it says how many bytes:
 * every whole huge page of the rows) or refused (then it says why), and
 * with SLUICE_NO_HUGE_PAGES=1 it offers nothing; a buffer with more
 * slots than rows gets huge pages for the rows' slots only. Small chunks
 * and one read in flight make the reads and the offers interleave. */
static void test_huge_pages(void **state)
{
    (void)state;
    const unsigned n = 24000; /* 24000 rows of 512 bytes: 11.7 MiB */
    char dir[4200];
    dataset_n(dir, sizeof dir, n, 128, "f32");
    size_t flen;
    unsigned char *file = file_bytes(dir, &flen);
    /* the third: pipeline.huge_pages = false, through the parameters */
    static const struct warm_params ps[] = {{0, 0, false, NULL, 0}, {65536, 1, false, NULL, 0}, {0, 0, true, NULL, 0}};
    for (int off = 0; off < 3; off++) {
        if (off == 1)
            setenv("SLUICE_NO_HUGE_PAGES", "1", 1);
        if (off == 2)
            unsetenv("SLUICE_NO_HUGE_PAGES");
        uint32_t extra = off == 2 ? 9000 : 0; /* slots beyond the rows: not offered */
        for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
            bool turned_off = off == 1 || ps[k].no_huge;
            char combo[160];
            snprintf(combo, sizeof combo, "huge pages %s, %u spare slots, chunk %zu depth %u",
                     off == 1 ? "off (environment)" : ps[k].no_huge ? "off (parameters)" : "on", extra,
                     ps[k].chunk_bytes, ps[k].depth);
            struct extract_source src;
            open_src(&src, dir, EXTRACT_IO_DIRECT);
            struct featbuf_params p = {.n_nodes = n, .nslots = n + extra, .row_bytes = (size_t)src.row_bytes};
            struct buf b = {.len = featbuf_mem_size(&p)};
            assert_true(b.len > 0);
            size_t span = b.len + SHM_HUGE_BYTES; /* aligned, as shm.c maps segments */
            unsigned char *res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            assert_true(res != MAP_FAILED);
            unsigned char *at = (unsigned char *)sl_round_up((uintptr_t)res, SHM_HUGE_BYTES);
            b.mem = mmap(at, b.len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
            assert_true(b.mem == at);
            assert_int_equal(featbuf_mem_format(b.mem, b.len, &p, err, sizeof err), 0);
            assert_int_equal(featbuf_init(&b.fb, b.mem, b.len, err, sizeof err), 0);
            struct warm_stats st;
            if (warm_fill(&src, &b.fb, &ps[k], NULL, NULL, &st, err, sizeof err))
                fail_msg("%s: warm_fill: %s", combo, err);
            expect_rows(&b, &src, file, true, combo);
            uintptr_t lo = sl_round_up((uintptr_t)featbuf_row(&b.fb, 0), SHM_HUGE_BYTES);
            uintptr_t hi = ((uintptr_t)featbuf_row(&b.fb, 0) + (size_t)n * b.fb.stride) & ~(SHM_HUGE_BYTES - 1);
            if (turned_off) {
                assert_int_equal(st.huge_rc, -ECANCELED);
                assert_int_equal(st.huge_bytes, 0);
            } else if (st.huge_rc == 0) {
                if (st.huge_bytes != hi - lo)
                    fail_msg("%s: %" PRIu64 " bytes in huge pages, the rows hold %zu", combo, st.huge_bytes,
                             (size_t)(hi - lo));
            } else {
                print_message("%s: the kernel keeps small pages: %s\n", combo, strerror(-st.huge_rc));
                assert_true(st.huge_rc != -ECANCELED);
            }
            featbuf_free(&b.fb);
            munmap(res, span);
            extract_source_free(&src);
        }
        unsetenv("SLUICE_NO_HUGE_PAGES");
    }
    free(file);
}

static int teardown(void **state)
{
    (void)state;
    if (root[0])
        t_rmrf(root);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_equal_file), cmocka_unit_test(test_rows_loaded_first), cmocka_unit_test(test_hot_set),
        cmocka_unit_test(test_beside_batches),  cmocka_unit_test(test_refused),
        cmocka_unit_test(test_read_error),      cmocka_unit_test(test_resident),
        cmocka_unit_test(test_huge_pages),      cmocka_unit_test(test_file_shrank),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
