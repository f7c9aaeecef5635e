/* test_extract.c - the extraction engine (stages/extract.h): every row
 * extracted equals the row of features.bin read independently, for f32 and
 * f16 rows of 3, 100, 128 and 300 values, in every I/O mode (direct,
 * buffered, mmap) and with the pread fallback, at several depths; reads
 * cost exactly the aligned extent of each row (no amplification); repeats
 * within a batch, hits on later batches, eviction; several threads
 * sharing one buffer with overlapping batches and delays; waiting for room
 * and the idle hook; I/O errors (the file truncated under the engine, a
 * read that fails with an errno, a copy the row sink fails) naming node
 * and offset and leaving the buffer clean; bad arguments; and the --bench
 * driver's output and flags. */
#include "tests/t_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ipc/staging.h"
#include "stages/extract.h"
#include "stages/featbuf.h"
#include "stages/sink.h"

int extract_bench_main(int argc, char **argv); /* stages/extract_bench.c */

#define NODES 2000u

static char root[4096];
static char err[1024];

/* ---- datasets ------------------------------------------------------------- */

/* $SLUICE_TMP/test_extract-PID/<dtype>-<dim>, made once with gnnprep synth. */
static void dataset(char *out, size_t len, unsigned dim, const char *dtype)
{
    if (!root[0])
        t_scratch(root, sizeof root, "test_extract");
    snprintf(out, len, "%s/%s-%u", root, dtype, dim);
    if (t_exists(out))
        return;
    char gnnprep[4096], log[4096];
    t_bin(gnnprep, sizeof gnnprep, "gnnprep");
    if (!t_exists(gnnprep))
        fail_msg("%s is not built", gnnprep);
    if (t_run(log, sizeof log,
              "'%s' synth '%s' --nodes %u --avg-degree 2 --feat-dim %u --classes 4 --dtype %s --seed 7", gnnprep, out,
              NODES, dim, dtype) != 0)
        fail_msg("gnnprep synth failed:\n%s", log);
}

/* The dataset's features.bin, read whole with plain reads: the reference. */
struct ref {
    unsigned char *bytes;
    size_t len;
    uint64_t stride, row_bytes, rows;
};

static void ref_load(struct ref *r, const char *dir, const struct dataset_meta *m)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/features.bin", dir);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    r->len = (size_t)st.st_size;
    r->bytes = malloc(r->len);
    assert_non_null(r->bytes);
    size_t got = 0;
    assert_int_equal(sl_pread_full(fd, r->bytes, r->len, 0, &got), 0);
    assert_int_equal(got, r->len);
    close(fd);
    r->stride = m->f[DATASET_FEATURES].row_stride;
    r->row_bytes = m->feat_dim * dtype_size(m->f[DATASET_FEATURES].dtype);
    r->rows = m->nodes;
}

static int ref_ok(const struct ref *r, struct featbuf *fb, uint32_t slot, uint64_t node)
{
    return memcmp(featbuf_row(fb, slot), r->bytes + node * r->stride, (size_t)r->row_bytes) == 0;
}

/* ---- feature buffers ------------------------------------------------------- */

struct buf {
    struct featbuf fb;
    void *mem;
    size_t len;
};

static void buf_make(struct buf *b, uint64_t n_nodes, uint32_t nslots, size_t row_bytes)
{
    memset(b, 0, sizeof *b); /* featbuf_init keeps fb->seg: it must start zeroed */
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

/* The buffer is consistent and nobody holds a reference. */
static void buf_clean(struct buf *b, const char *combo)
{
    char msg[512] = "";
    if (featbuf_check(&b->fb, msg, sizeof msg))
        fail_msg("%s: featbuf_check: %s", combo, msg);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(&b->fb, &st), 0);
    if (st.standby != b->fb.nslots)
        fail_msg("%s: %u of %u slots on standby: references leaked", combo, st.standby, b->fb.nslots);
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Bytes the format says a read of node costs with alignment a. */
static uint64_t extent(const struct extract_source *s, uint64_t node)
{
    uint64_t off = node * s->row_stride, a = s->align;
    return sl_round_up(off + s->row_bytes, a) - (off & ~(a - 1));
}

/* Whether this build and kernel give the engine io_uring: built with
 * liburing, and io_uring_setup works here (seccomp profiles and
 * kernel.io_uring_disabled turn it off; the engine then falls back). */
static bool uring_expected(void)
{
#ifdef SLUICE_HAVE_URING
    static int known = -1;
    if (known < 0) {
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        long fd = syscall(__NR_io_uring_setup, 4, &p);
        if (fd < 0)
            printf("# io_uring_setup: %s: expecting the pread fallback\n", strerror(errno));
        else
            close((int)fd);
        known = fd >= 0;
    }
    return known;
#else
    return false;
#endif
}

/* ---- tests ------------------------------------------------------------------- */

static void test_io_parse(void **state)
{
    (void)state;
    assert_int_equal(extract_io_parse("direct"), EXTRACT_IO_DIRECT);
    assert_int_equal(extract_io_parse("buffered"), EXTRACT_IO_BUFFERED);
    assert_int_equal(extract_io_parse("mmap"), EXTRACT_IO_MMAP);
    assert_int_equal(extract_io_parse("Direct"), -1);
    assert_int_equal(extract_io_parse(""), -1);
    assert_int_equal(extract_io_parse("o_direct"), -1);
    assert_int_equal(extract_io_parse("direct "), -1);
    assert_int_equal(extract_io_parse(NULL), -1);
    for (int io = EXTRACT_IO_DIRECT; io <= EXTRACT_IO_MMAP; io++)
        assert_int_equal(extract_io_parse(extract_io_name((enum extract_io)io)), io);
}

enum { MODE_DIRECT, MODE_BUFFERED, MODE_MMAP, MODE_PREAD, MODE_COUNT };
static const char *const mode_name[] = {"direct", "buffered", "mmap", "direct+pread"};
static const enum extract_io mode_io[] = {EXTRACT_IO_DIRECT, EXTRACT_IO_BUFFERED, EXTRACT_IO_MMAP, EXTRACT_IO_DIRECT};

static void mode_env(int mode)
{
    if (mode == MODE_PREAD)
        setenv("SLUICE_NO_IO_URING", "1", 1);
    else
        unsetenv("SLUICE_NO_IO_URING");
}

/* Runs one batch, checks every row, the slots of repeated nodes and the
 * counters' growth; leaves the references held. */
static void run_checked(struct extractor *x, const struct ref *r, const uint64_t *nodes, uint32_t n, uint32_t *slots,
                        const char *combo)
{
    struct extract_stats before = x->st;
    int rc = extractor_run(x, nodes, n, slots, err, sizeof err);
    if (rc)
        fail_msg("%s: extractor_run: %d %s", combo, rc, err);
    for (uint32_t i = 0; i < n; i++) {
        if (!ref_ok(r, x->fb, slots[i], nodes[i]))
            fail_msg("%s: row of node %" PRIu64 " (batch position %u, slot %u) differs from features.bin", combo,
                     nodes[i], i, slots[i]);
        for (uint32_t j = 0; j < i; j++)
            if ((nodes[j] == nodes[i]) != (slots[j] == slots[i]))
                fail_msg("%s: nodes %" PRIu64 " and %" PRIu64 " in slots %u and %u", combo, nodes[j], nodes[i],
                         slots[j], slots[i]);
    }
    uint64_t loads = x->st.loads - before.loads, hits = x->st.hits - before.hits, waits = x->st.waits - before.waits;
    if (x->st.batches != before.batches + 1 || x->st.rows != before.rows + n || loads + hits + waits != n)
        fail_msg("%s: counters: batches %" PRIu64 " rows %" PRIu64 " loads %" PRIu64 " hits %" PRIu64 " waits %" PRIu64
                 " for %u nodes",
                 combo, x->st.batches - before.batches, x->st.rows - before.rows, loads, hits, waits, n);
}

/* Every dim x dtype x mode x depth: rows right, reads exactly the format's
 * extents, repeats share a slot, a second pass hits, eviction reloads. */
static void test_rows(void **state)
{
    (void)state;
    static const unsigned dims[] = {3, 100, 128, 300};
    static const char *const dtypes[] = {"f32", "f16"};
    static const unsigned depths[] = {1, 5, 64};
    enum { N = 300 };
    uint64_t nodes[N];
    uint32_t slots[N];
    for (unsigned di = 0; di < SL_ARRAY_LEN(dims); di++)
        for (unsigned ti = 0; ti < SL_ARRAY_LEN(dtypes); ti++)
            for (int mode = 0; mode < MODE_COUNT; mode++)
                for (unsigned qi = 0; qi < SL_ARRAY_LEN(depths); qi++) {
                    char dir[4200], combo[256];
                    snprintf(combo, sizeof combo, "dim=%u dtype=%s io=%s depth=%u", dims[di], dtypes[ti],
                             mode_name[mode], depths[qi]);
                    dataset(dir, sizeof dir, dims[di], dtypes[ti]);
                    struct dataset_meta m;
                    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
                    struct ref r;
                    ref_load(&r, dir, &m);
                    struct extract_source src;
                    if (extract_source_open(&src, dir, &m, mode_io[mode], "test_extract", err, sizeof err))
                        fail_msg("%s: extract_source_open: %s", combo, err);
                    assert_int_equal(src.rows, NODES);
                    assert_int_equal(src.row_bytes, r.row_bytes);
                    assert_int_equal(src.row_stride, r.stride);
                    if (src.io != mode_io[mode])
                        fail_msg("%s: opened as %s", combo, extract_io_name(src.io));
                    if (src.io == EXTRACT_IO_DIRECT) {
                        /* the format's promise: a row costs max(A, its blocks) */
                        uint64_t a = src.align, worst = 0;
                        assert_true(a >= 512 && (a & (a - 1)) == 0);
                        for (uint64_t v = 0; v < NODES; v++)
                            worst = SL_MAX(worst, extent(&src, v));
                        if (src.extent_max != worst ||
                            (a == 512 && worst != SL_MAX(512, sl_round_up(src.row_bytes, 512))))
                            fail_msg("%s: extent_max %" PRIu64 ", widest row extent %" PRIu64, combo, src.extent_max,
                                     worst);
                    } else {
                        assert_int_equal(src.align, 1);
                        assert_int_equal(src.extent_max, src.row_bytes);
                    }
                    mode_env(mode);
                    struct buf b;
                    buf_make(&b, NODES, 2 * N, (size_t)src.row_bytes);
                    struct extractor x;
                    if (extractor_init(&x, &src, &b.fb, depths[qi], NULL, 0, err, sizeof err))
                        fail_msg("%s: extractor_init: %s", combo, err);
                    unsetenv("SLUICE_NO_IO_URING");
                    if (x.use_uring != (uring_expected() && (mode == MODE_DIRECT || mode == MODE_BUFFERED)))
                        fail_msg("%s: use_uring=%d", combo, x.use_uring);

                    /* batch 1: random nodes with repeats (node 0, the last
                     * node and a run of one node included) */
                    uint64_t seed = di * 100 + ti * 10 + (uint64_t)mode + qi * 1000;
                    for (uint32_t i = 0; i < N; i++)
                        nodes[i] = rnd(&seed) % NODES;
                    nodes[0] = 0;
                    nodes[1] = NODES - 1;
                    nodes[2] = nodes[3] = nodes[4] = nodes[10];
                    nodes[N - 1] = nodes[1];
                    uint64_t expect_bytes = 0, distinct = 0;
                    for (uint32_t i = 0; i < N; i++) {
                        uint32_t j = 0;
                        while (j < i && nodes[j] != nodes[i])
                            j++;
                        if (j == i) {
                            distinct++;
                            expect_bytes += src.io == EXTRACT_IO_DIRECT ? extent(&src, nodes[i]) : src.row_bytes;
                        }
                    }
                    run_checked(&x, &r, nodes, N, slots, combo);
                    if (x.st.loads != distinct || x.st.waits != N - distinct || x.st.hits != 0)
                        fail_msg("%s: first batch: %" PRIu64 " loads %" PRIu64 " waits %" PRIu64 " hits, %" PRIu64
                                 " distinct nodes",
                                 combo, x.st.loads, x.st.waits, x.st.hits, distinct);
                    /* one copy per row read; with several reads in flight, copies start beside them */
                    if (x.st.copies != x.st.loads || x.st.copies_overlapped > x.st.copies ||
                        (x.use_uring && depths[qi] > 1 && x.st.copies_overlapped == 0))
                        fail_msg("%s: %" PRIu64 " row copies (%" PRIu64 " beside other reads) for %" PRIu64 " loads",
                                 combo, x.st.copies, x.st.copies_overlapped, x.st.loads);
                    if (x.st.io_bytes != expect_bytes || x.st.io_ops != distinct || x.st.retries != 0)
                        fail_msg("%s: read %" PRIu64 " bytes in %" PRIu64 " requests (%" PRIu64
                                 " retries); the format's extents are %" PRIu64 " bytes in %" PRIu64,
                                 combo, x.st.io_bytes, x.st.io_ops, x.st.retries, expect_bytes, distinct);
                    assert_int_equal(featbuf_release_many(&b.fb, slots, N), 0);

                    /* batch 2: the same nodes again: all hits, no reads */
                    struct extract_stats s1 = x.st;
                    run_checked(&x, &r, nodes, N, slots, combo);
                    if (x.st.hits - s1.hits != N || x.st.io_ops != s1.io_ops)
                        fail_msg("%s: second batch: %" PRIu64 " hits of %u, %" PRIu64 " new reads", combo,
                                 x.st.hits - s1.hits, N, x.st.io_ops - s1.io_ops);
                    assert_int_equal(featbuf_release_many(&b.fb, slots, N), 0);

                    /* batches 3..8: fresh nodes through a full buffer (evictions) */
                    for (int k = 0; k < 6; k++) {
                        for (uint32_t i = 0; i < N; i++)
                            nodes[i] = rnd(&seed) % NODES;
                        run_checked(&x, &r, nodes, N, slots, combo);
                        assert_int_equal(featbuf_release_many(&b.fb, slots, N), 0);
                    }
                    struct featbuf_stats fs;
                    assert_int_equal(featbuf_stats(&b.fb, &fs), 0);
                    if (fs.evictions == 0)
                        fail_msg("%s: no evictions after %" PRIu64 " loads into %u slots", combo, fs.loads,
                                 b.fb.nslots);
                    buf_clean(&b, combo);
                    extractor_free(&x);
                    extractor_free(&x); /* twice is harmless */
                    buf_free(&b);
                    extract_source_free(&src);
                    free(r.bytes);
                }
}

/* Caller-provided staging, and the argument checks of init and run. */
static void test_args(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 100, "f32");
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    struct ref r;
    ref_load(&r, dir, &m);
    struct extract_source src;
    assert_int_equal(extract_source_open(&src, dir, &m, EXTRACT_IO_DIRECT, "test_extract", err, sizeof err), 0);
    size_t need = extract_staging_bytes(&src, 8);
    assert_true(need >= 8 * src.extent_max && need % 4096 == 0);
    struct buf b;
    buf_make(&b, NODES, 64, (size_t)src.row_bytes);
    struct extractor x;
    assert_int_equal(extractor_init(&x, &src, &b.fb, 0, NULL, 0, err, sizeof err), -EINVAL);
    assert_int_equal(extractor_init(&x, &src, &b.fb, 4097, NULL, 0, err, sizeof err), -EINVAL);
    void *stage = aligned_alloc(4096, need + 4096);
    assert_non_null(stage);
    assert_int_equal(extractor_init(&x, &src, &b.fb, 8, stage, need - 1, err, sizeof err), -EINVAL);
    assert_int_equal(extractor_init(&x, &src, &b.fb, 8, (char *)stage + 512, need, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "staging"));
    /* the caller's staging is used, and not freed by extractor_free */
    assert_int_equal(extractor_init(&x, &src, &b.fb, 8, stage, need, err, sizeof err), 0);
    assert_ptr_equal(x.staging, stage);
    uint64_t nodes[3] = {5, NODES, 6};
    uint32_t slots[3];
    assert_int_equal(extractor_run(&x, nodes, 3, slots, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "2000"));
    buf_clean(&b, "out of range");
    assert_int_equal(extractor_run(&x, nodes, 0, slots, err, sizeof err), 0);
    nodes[1] = 7;
    run_checked(&x, &r, nodes, 3, slots, "caller staging");
    assert_int_equal(featbuf_release_many(&b.fb, slots, 3), 0);
    extractor_free(&x);
    memset(stage, 0x5a, need); /* still ours */
    free(stage);
    buf_free(&b);
    /* rows that do not fit the buffer, a buffer too small for the file, rows on a device */
    buf_make(&b, NODES, 8, (size_t)src.row_bytes - 1);
    assert_int_equal(extractor_init(&x, &src, &b.fb, 8, NULL, 0, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "rows"));
    buf_free(&b);
    buf_make(&b, NODES - 1, 8, (size_t)src.row_bytes);
    assert_int_equal(extractor_init(&x, &src, &b.fb, 8, NULL, 0, err, sizeof err), -EINVAL);
    buf_free(&b);
    struct featbuf_params p = {
        .n_nodes = NODES, .nslots = 8, .row_bytes = (size_t)src.row_bytes, .rows_on_device = true};
    size_t len = featbuf_mem_size(&p);
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    struct featbuf dev = {0};
    assert_int_equal(featbuf_mem_format(mem, len, &p, NULL, 0), 0);
    assert_int_equal(featbuf_init(&dev, mem, len, NULL, 0), 0);
    assert_int_equal(extractor_init(&x, &src, &dev, 8, NULL, 0, err, sizeof err), -EINVAL);
#ifdef SLUICE_HAVE_CUDA
    assert_non_null(strstr(err, "has not opened the device rows")); /* extractor_use_device first */
#else
    assert_non_null(strstr(err, "no CUDA row sink"));
#endif
    featbuf_free(&dev);
    munmap(mem, len);
    extract_source_free(&src);
    extract_source_free(&src);

    /* the source: no features, bad mode, a file whose size changed */
    struct dataset_meta m2 = m;
    m2.f[DATASET_FEATURES].present = false;
    assert_int_equal(extract_source_open(&src, dir, &m2, EXTRACT_IO_DIRECT, "test_extract", err, sizeof err), -ENOENT);
    assert_int_equal(extract_source_open(&src, dir, &m, (enum extract_io)7, "test_extract", err, sizeof err), -EINVAL);
    m2 = m;
    m2.f[DATASET_FEATURES].bytes += 4096;
    m2.f[DATASET_FEATURES].rows += 8;
    assert_int_equal(extract_source_open(&src, dir, &m2, EXTRACT_IO_BUFFERED, "test_extract", err, sizeof err),
                     -EINVAL);
    assert_non_null(strstr(err, "gnnprep check"));
    m2 = m;
    m2.f[DATASET_FEATURES].row_stride = 256; /* shorter than a row */
    assert_int_equal(extract_source_open(&src, dir, &m2, EXTRACT_IO_BUFFERED, "test_extract", err, sizeof err),
                     -EINVAL);
    free(r.bytes);
}

/* Several threads, one buffer, overlapping random batches with repeats
 * and delays; every row checked; at the end the buffer is consistent and
 * holds no reference. */
struct mt {
    const struct extract_source *src;
    const struct ref *r;
    struct featbuf *fb;
    struct staging *stg; /* shared staging (portion = id), or NULL for the engine's own */
    unsigned depth, id, batch;
    uint64_t hot;
    atomic_int *failures;
    struct extract_stats st;
    char msg[1024];
};

#define MT_BATCHES 60
#define MT_BATCH 48

static void pause_a_bit(uint64_t *seed)
{
    uint64_t v = rnd(seed) % 8;
    if (v < 5)
        return;
    if (v < 7) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, (long)(rnd(seed) % 200) * 1000L};
    nanosleep(&ts, NULL);
}

static void *mt_main(void *arg)
{
    struct mt *t = arg;
    struct extractor x;
    uint64_t nodes[MT_BATCH];
    uint32_t slots[MT_BATCH];
    uint64_t seed = 99 + t->id;
    if (t->stg ? extractor_init_shared(&x, t->src, t->fb, t->depth, t->stg, t->id, t->msg, sizeof t->msg)
               : extractor_init(&x, t->src, t->fb, t->depth, NULL, 0, t->msg, sizeof t->msg)) {
        atomic_fetch_add(t->failures, 1);
        return NULL;
    }
    for (int k = 0; k < MT_BATCHES; k++) {
        for (uint32_t i = 0; i < t->batch; i++) /* mostly a small hot set: threads share rows */
            nodes[i] = rnd(&seed) % 4 ? rnd(&seed) % t->hot : rnd(&seed) % t->src->rows;
        int rc = extractor_run(&x, nodes, t->batch, slots, t->msg, sizeof t->msg);
        if (rc) {
            atomic_fetch_add(t->failures, 1);
            break;
        }
        pause_a_bit(&seed);
        for (uint32_t i = 0; i < t->batch; i++)
            if (!ref_ok(t->r, t->fb, slots[i], nodes[i])) {
                snprintf(t->msg, sizeof t->msg, "thread %u batch %d: row of node %" PRIu64 " in slot %u is wrong",
                         t->id, k, nodes[i], slots[i]);
                atomic_fetch_add(t->failures, 1);
            }
        if (featbuf_release_many(t->fb, slots, t->batch) != 0) {
            snprintf(t->msg, sizeof t->msg, "thread %u: release failed", t->id);
            atomic_fetch_add(t->failures, 1);
            break;
        }
        pause_a_bit(&seed);
    }
    t->st = x.st;
    extractor_free(&x);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    enum { T = 4 };
    for (int mode = 0; mode < MODE_COUNT; mode++)
        for (int big = 0; big < 2; big++) {
            char dir[4200], combo[128];
            snprintf(combo, sizeof combo, "threads=%d io=%s buffer=%s", T, mode_name[mode],
                     big ? "every node" : "threads x batch");
            dataset(dir, sizeof dir, mode % 2 ? 100 : 128, mode % 2 ? "f16" : "f32");
            struct dataset_meta m;
            assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
            struct ref r;
            ref_load(&r, dir, &m);
            struct extract_source src;
            assert_int_equal(extract_source_open(&src, dir, &m, mode_io[mode], "test_extract", err, sizeof err), 0);
            struct buf b;
            uint32_t nslots = big ? NODES : T * MT_BATCH;
            buf_make(&b, NODES, nslots, (size_t)src.row_bytes);
            mode_env(mode);
            atomic_int failures = 0;
            struct mt t[T];
            pthread_t th[T];
            alarm(120); /* a deadlock fails instead of hanging */
            for (int i = 0; i < T; i++) {
                t[i] = (struct mt){.src = &src,
                                   .r = &r,
                                   .fb = &b.fb,
                                   .depth = 1u + 7u * (unsigned)i,
                                   .id = (unsigned)i,
                                   .batch = MT_BATCH,
                                   .hot = 150,
                                   .failures = &failures};
                assert_int_equal(pthread_create(&th[i], NULL, mt_main, &t[i]), 0);
            }
            uint64_t loads = 0, waits = 0, rows = 0;
            for (int i = 0; i < T; i++) {
                pthread_join(th[i], NULL);
                loads += t[i].st.loads;
                waits += t[i].st.waits;
                rows += t[i].st.rows;
            }
            alarm(0);
            unsetenv("SLUICE_NO_IO_URING");
            if (atomic_load(&failures)) {
                for (int i = 0; i < T; i++)
                    if (t[i].msg[0])
                        fprintf(stderr, "%s: %s\n", combo, t[i].msg);
                fail_msg("%s: %d failures", combo, atomic_load(&failures));
            }
            buf_clean(&b, combo);
            struct featbuf_stats fs;
            assert_int_equal(featbuf_stats(&b.fb, &fs), 0);
            if (rows != (uint64_t)T * MT_BATCHES * MT_BATCH || fs.loads != loads || fs.failed != 0)
                fail_msg("%s: %" PRIu64 " rows, buffer counted %" PRIu64 " loads, engines %" PRIu64 ", %" PRIu64
                         " failed",
                         combo, rows, fs.loads, loads, fs.failed);
            printf("# %s: loads=%" PRIu64 " waits=%" PRIu64 " hits=%" PRIu64 " evictions=%" PRIu64 "\n", combo, loads,
                   waits, fs.hits, fs.evictions);
            buf_free(&b);
            extract_source_free(&src);
            free(r.bytes);
        }
}

/* A full buffer: extractor_run sleeps until a release, calling the idle
 * hook every 200 ms; an idle hook that says stop aborts the batch with
 * nothing held. */
struct idle_count {
    atomic_int calls;
    int stop_after;
};

static int idle_hook(void *arg)
{
    struct idle_count *c = arg;
    int n = atomic_fetch_add(&c->calls, 1) + 1;
    return c->stop_after && n >= c->stop_after ? -ECANCELED : 0;
}

struct later {
    struct featbuf *fb;
    uint32_t *slots;
    uint32_t n;
    struct idle_count *ic;
    int rc;
};

/* Releases once the extractor has slept through two idle calls. */
static void *release_later(void *arg)
{
    struct later *l = arg;
    while (atomic_load(&l->ic->calls) < 2) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
    }
    l->rc = featbuf_release_many(l->fb, l->slots, l->n); /* checked by the main thread */
    return NULL;
}

/* A row sink whose copies finish late: a poll without waiting finishes
 * the oldest copy only every third call, one that waits finishes one; the
 * bytes are read from staging when the copy finishes, so an engine that
 * reused a staging entry before the sink handed it back would publish
 * another row's bytes. */
struct lazy {
    unsigned polls;
    uint64_t late; /* polls that found copies outstanding and finished none */
};

static int lazy_init(struct row_sink *s, char *e, size_t elen)
{
    (void)e;
    (void)elen;
    s->impl = calloc(1, sizeof(struct lazy));
    return s->impl ? 0 : -ENOMEM;
}

static int lazy_start(struct row_sink *s, uint32_t pos, const struct row_sink_copy *c)
{
    (void)s;
    (void)pos;
    (void)c;
    return 0;
}

static uint32_t lazy_finished(struct row_sink *s, uint32_t max, bool wait, int *rc)
{
    struct lazy *l = s->impl;
    if (!wait && ++l->polls % 3 != 0) {
        l->late++;
        return 0;
    }
    const struct row_sink_copy *c = &s->q[s->head];
    memcpy(featbuf_row(s->fb, c->slot), c->src, c->row_bytes);
    rc[0] = 0;
    (void)max;
    return 1;
}

static void lazy_free(struct row_sink *s)
{
    free(s->impl);
}

static const struct row_sink_ops lazy_sink = {"lazy", lazy_init, lazy_start, lazy_finished, lazy_free};

/* Every mode and several depths with the lazy sink: every row right, the
 * buffer clean after the release. */
static void test_slow_sink(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 100, "f32");
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    struct ref r;
    ref_load(&r, dir, &m);
    static const unsigned depths[] = {1, 3, 8};
    for (int mode = 0; mode < MODE_COUNT; mode++) {
        for (size_t di = 0; di < sizeof depths / sizeof *depths; di++) {
            char combo[96];
            snprintf(combo, sizeof combo, "lazy sink, %s, depth %u", mode_name[mode], depths[di]);
            struct extract_source src;
            assert_int_equal(extract_source_open(&src, dir, &m, mode_io[mode], "test_extract", err, sizeof err), 0);
            struct buf b;
            buf_make(&b, NODES, 128, (size_t)src.row_bytes);
            struct extractor x;
            mode_env(mode);
            assert_int_equal(extractor_init(&x, &src, &b.fb, depths[di], NULL, 0, err, sizeof err), 0);
            unsetenv("SLUICE_NO_IO_URING");
            if (extractor_set_sink(&x, &lazy_sink, err, sizeof err))
                fail_msg("%s: extractor_set_sink: %s", combo, err);
            uint64_t seed = 99 + (uint64_t)mode * 10 + di;
            uint64_t nodes[40];
            uint32_t slots[40];
            for (int batch = 0; batch < 4; batch++) {
                for (int i = 0; i < 40; i++)
                    nodes[i] = rnd(&seed) % (batch == 3 ? 50 : NODES);
                run_checked(&x, &r, nodes, 40, slots, combo);
                assert_int_equal(featbuf_release_many(&b.fb, slots, 40), 0);
            }
            if (x.st.loads < 100)
                fail_msg("%s: only %" PRIu64 " loads", combo, x.st.loads);
            buf_clean(&b, combo);
            extractor_free(&x);
            buf_free(&b);
            extract_source_free(&src);
        }
    }
    free(r.bytes);
}

/* ---- shared staging ------------------------------------------------------------ */

struct stg {
    struct staging s;
    void *mem;
    size_t len;
};

static void stg_make(struct stg *g, uint32_t ranks, uint32_t threads, uint32_t blocks,
                     const struct extract_source *src)
{
    struct staging_params p = {.ranks = ranks,
                               .threads = threads,
                               .blocks = blocks,
                               .block_bytes = sl_round_up(SL_MAX(src->entry_bytes, 1), STAGING_BLOCK_ALIGN)};
    memset(g, 0, sizeof *g);
    g->len = staging_mem_size(&p);
    assert_true(g->len > 0);
    g->mem = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(g->mem != MAP_FAILED);
    if (staging_mem_format(g->mem, g->len, &p, err, sizeof err) || staging_init(&g->s, g->mem, g->len, err, sizeof err))
        fail_msg("staging: %s", err);
}

/* Every block home, nothing lent or borrowed, no owner short; returns the
 * blocks borrowed in all. */
static uint64_t stg_clean(struct stg *g, const char *combo)
{
    uint64_t borrows = 0;
    for (uint32_t q = 0; q < g->s.portions; q++) {
        struct staging_stats st;
        assert_int_equal(staging_stats(&g->s, q, &st), 0);
        if (st.free != g->s.blocks_per || st.lent || st.borrowed || st.want)
            fail_msg("%s: staging portion %u: %u of %u free, %u lent, %u borrowed, want %d", combo, q, st.free,
                     g->s.blocks_per, st.lent, st.borrowed, st.want);
        borrows += st.borrows;
    }
    return borrows;
}

/* One engine on portion 0 of four, with two blocks of its own and eight
 * reads to keep in flight: it borrows from the idle portions; every row
 * right, with the host sink and with the lazy one (which reads staging
 * late, so a block given back before its copy was done would show). */
static void test_shared_staging(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 100, "f32");
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    struct ref r;
    ref_load(&r, dir, &m);
    for (int mode = 0; mode < MODE_COUNT; mode++)
        for (int lazy = 0; lazy < 2; lazy++) {
            char combo[128];
            snprintf(combo, sizeof combo, "shared staging, %s, %s sink", mode_name[mode], lazy ? "lazy" : "host");
            struct extract_source src;
            assert_int_equal(extract_source_open(&src, dir, &m, mode_io[mode], "test_extract", err, sizeof err), 0);
            struct stg g;
            stg_make(&g, 2, 2, 2, &src);
            struct buf b;
            buf_make(&b, NODES, 256, (size_t)src.row_bytes);
            struct extractor x;
            mode_env(mode);
            assert_int_equal(extractor_init_shared(&x, &src, &b.fb, 0, &g.s, 0, err, sizeof err), -EINVAL);
            assert_int_equal(extractor_init_shared(&x, &src, &b.fb, 8, &g.s, 4, err, sizeof err), -EINVAL);
            assert_int_equal(extractor_init_shared(&x, &src, &b.fb, 8, NULL, 0, err, sizeof err), -EINVAL);
            if (extractor_init_shared(&x, &src, &b.fb, 8, &g.s, 0, err, sizeof err))
                fail_msg("%s: extractor_init_shared: %s", combo, err);
            unsetenv("SLUICE_NO_IO_URING");
            if (mode != MODE_MMAP) {
                size_t all;
                assert_ptr_equal(x.staging, staging_data(&g.s, &all));
                assert_int_equal(x.staging_len, all);
            }
            if (lazy && extractor_set_sink(&x, &lazy_sink, err, sizeof err))
                fail_msg("%s: extractor_set_sink: %s", combo, err);
            uint64_t seed = 500 + (uint64_t)mode * 10 + (uint64_t)lazy;
            uint64_t nodes[60];
            uint32_t slots[60];
            for (int batch = 0; batch < 4; batch++) {
                for (int i = 0; i < 60; i++)
                    nodes[i] = rnd(&seed) % NODES;
                run_checked(&x, &r, nodes, 60, slots, combo);
                assert_int_equal(featbuf_release_many(&b.fb, slots, 60), 0);
                stg_clean(&g, combo); /* every block back after each batch */
            }
            /* more reads in flight than own blocks: borrowed (mmap reads no staging; pread
             * with the host sink needs one block at a time) */
            uint64_t borrows = stg_clean(&g, combo);
            bool must = mode != MODE_MMAP && (lazy || x.use_uring);
            if (must ? borrows == 0 : (mode == MODE_MMAP && borrows != 0))
                fail_msg("%s: %" PRIu64 " blocks borrowed", combo, borrows);
            printf("# %s: %" PRIu64 " loads, %" PRIu64 " blocks borrowed\n", combo, x.st.loads, borrows);
            buf_clean(&b, combo);
            extractor_free(&x);
            /* blocks smaller than one read's extent are refused */
            struct extract_source wide = src;
            wide.entry_bytes = g.s.block_bytes + 64;
            if (mode != MODE_MMAP) {
                assert_int_equal(extractor_init_shared(&x, &wide, &b.fb, 4, &g.s, 0, err, sizeof err), -EINVAL);
                assert_non_null(strstr(err, "blocks"));
            }
            buf_free(&b);
            munmap(g.mem, g.len);
            extract_source_free(&src);
        }
    free(r.bytes);
}

/* Two ranks of two threads, each rank its own buffer, over one staging
 * buffer with three blocks a portion and six reads a thread: overlapping
 * batches, borrowing across threads and ranks; rows and both buffers and
 * the staging buffer clean at the end. */
static void test_shared_staging_threads(void **state)
{
    (void)state;
    enum { T = 4 };
    for (int mode = 0; mode < MODE_COUNT; mode++) {
        if (mode == MODE_MMAP)
            continue;
        char dir[4200], combo[128];
        snprintf(combo, sizeof combo, "2 ranks x 2 threads, shared staging, io=%s", mode_name[mode]);
        dataset(dir, sizeof dir, 128, "f32");
        struct dataset_meta m;
        assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
        struct ref r;
        ref_load(&r, dir, &m);
        struct extract_source src;
        assert_int_equal(extract_source_open(&src, dir, &m, mode_io[mode], "test_extract", err, sizeof err), 0);
        struct stg g;
        stg_make(&g, 2, 2, 3, &src);
        struct buf b[2];
        for (int k = 0; k < 2; k++)
            buf_make(&b[k], NODES, 2 * MT_BATCH, (size_t)src.row_bytes);
        mode_env(mode);
        atomic_int failures = 0;
        struct mt t[T];
        pthread_t th[T];
        alarm(120);
        for (int i = 0; i < T; i++) {
            t[i] = (struct mt){.src = &src,
                               .r = &r,
                               .fb = &b[i / 2].fb,
                               .stg = &g.s,
                               .depth = 6,
                               .id = (unsigned)i,
                               .batch = MT_BATCH,
                               .hot = 150,
                               .failures = &failures};
            assert_int_equal(pthread_create(&th[i], NULL, mt_main, &t[i]), 0);
        }
        for (int i = 0; i < T; i++)
            pthread_join(th[i], NULL);
        alarm(0);
        unsetenv("SLUICE_NO_IO_URING");
        if (atomic_load(&failures)) {
            for (int i = 0; i < T; i++)
                if (t[i].msg[0])
                    fprintf(stderr, "%s: %s\n", combo, t[i].msg);
            fail_msg("%s: %d failures", combo, atomic_load(&failures));
        }
        for (int k = 0; k < 2; k++)
            buf_clean(&b[k], combo);
        uint64_t borrows = stg_clean(&g, combo);
        printf("# %s: %" PRIu64 " blocks borrowed\n", combo, borrows);
        for (int k = 0; k < 2; k++)
            buf_free(&b[k]);
        munmap(g.mem, g.len);
        extract_source_free(&src);
        free(r.bytes);
    }
}

static void test_wait_for_room(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 3, "f32");
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    struct ref r;
    ref_load(&r, dir, &m);
    struct extract_source src;
    assert_int_equal(extract_source_open(&src, dir, &m, EXTRACT_IO_DIRECT, "test_extract", err, sizeof err), 0);
    struct buf b;
    buf_make(&b, NODES, 8, (size_t)src.row_bytes);
    struct extractor x;
    assert_int_equal(extractor_init(&x, &src, &b.fb, 4, NULL, 0, err, sizeof err), 0);
    struct idle_count ic = {0};
    x.idle = idle_hook;
    x.idle_arg = &ic;
    uint64_t held[8] = {10, 11, 12, 13, 14, 15, 16, 17}, more[4] = {20, 21, 10, 22};
    uint32_t hslots[8], mslots[4];
    run_checked(&x, &r, held, 8, hslots, "fill");
    /* every slot is referenced: the next batch waits for the release */
    struct later l = {.fb = &b.fb, .slots = hslots, .n = 8, .ic = &ic};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, release_later, &l), 0);
    double t0 = sl_now();
    run_checked(&x, &r, more, 4, mslots, "after the release");
    double waited = sl_now() - t0;
    pthread_join(th, NULL);
    assert_int_equal(l.rc, 0);
    if (atomic_load(&ic.calls) < 2 || waited < 0.35)
        fail_msg("waited %.3f s with %d idle calls", waited, atomic_load(&ic.calls));
    assert_true(x.st.wait_ns > 0);
    assert_int_equal(featbuf_release_many(&b.fb, mslots, 4), 0);
    /* the idle hook stops a batch that cannot get room */
    run_checked(&x, &r, held, 8, hslots, "fill again");
    ic.stop_after = atomic_load(&ic.calls) + 2;
    int rc = extractor_run(&x, more, 4, mslots, err, sizeof err);
    assert_int_equal(rc, -ECANCELED);
    assert_non_null(strstr(err, "stopped"));
    assert_int_equal(featbuf_release_many(&b.fb, hslots, 8), 0);
    buf_clean(&b, "idle stop");
    extractor_free(&x);
    buf_free(&b);
    extract_source_free(&src);
    free(r.bytes);
}

/* The file shrinks under the engine: the batch fails naming the node and
 * offset, rows read before still arrive, nothing stays LOADING or held,
 * and the engine keeps working on the rows that remain. */
static void test_truncated(void **state)
{
    (void)state;
    char src_dir[4200], dir[4300], path[4400];
    dataset(src_dir, sizeof src_dir, 300, "f32");
    for (int mode = 0; mode < MODE_COUNT; mode++) {
        if (mode == MODE_MMAP)
            continue; /* a mapping of a shrunken file faults (SIGBUS); documented */
        for (int cut = 0; cut < 2; cut++) {
            char combo[128];
            snprintf(combo, sizeof combo, "io=%s cut=%s", mode_name[mode], cut ? "mid-row" : "at a row");
            snprintf(dir, sizeof dir, "%s/trunc-%d-%d", root, mode, cut);
            assert_int_equal(t_run(NULL, 0, "rm -rf '%s' && cp -r '%s' '%s'", dir, src_dir, dir), 0);
            snprintf(path, sizeof path, "%s/features.bin", dir);
            struct dataset_meta m;
            assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
            struct ref r;
            ref_load(&r, dir, &m);
            struct extract_source src;
            assert_int_equal(extract_source_open(&src, dir, &m, mode_io[mode], "test_extract", err, sizeof err), 0);
            mode_env(mode);
            struct buf b;
            buf_make(&b, NODES, 64, (size_t)src.row_bytes);
            struct extractor x;
            assert_int_equal(extractor_init(&x, &src, &b.fb, 4, NULL, 0, err, sizeof err), 0);
            unsetenv("SLUICE_NO_IO_URING");
            /* rows from 1000 on are gone; with cut, row 1000 keeps half its bytes */
            uint64_t keep = 1000 * src.row_stride + (cut ? src.row_bytes / 2 : 0);
            int fd = open(path, O_WRONLY);
            assert_true(fd >= 0);
            assert_int_equal(ftruncate(fd, (off_t)keep), 0);
            close(fd);
            uint64_t nodes[8] = {1, 2, 999, 3, 1000, 4, 1000, 5};
            uint32_t slots[40];
            int rc = extractor_run(&x, nodes, 8, slots, err, sizeof err);
            char want[128];
            snprintf(want, sizeof want, "node 1000 at offset %" PRIu64, 1000 * src.row_stride);
            if (rc != -EIO || !strstr(err, want) || !strstr(err, "shrank"))
                fail_msg("%s: rc %d, message '%s' (wanted -EIO and '%s')", combo, rc, err, want);
            printf("# %s: %s\n", combo, err);
            buf_clean(&b, combo);
            assert_int_equal(featbuf_lookup(&b.fb, 1000), FEATBUF_ABSENT);
            struct featbuf_stats fs;
            assert_int_equal(featbuf_stats(&b.fb, &fs), 0);
            assert_true(fs.failed >= 1);
            /* the rows before the cut still extract */
            uint64_t good[4] = {1, 999, 7, 999};
            run_checked(&x, &r, good, 4, slots, combo);
            assert_int_equal(featbuf_release_many(&b.fb, slots, 4), 0);
            /* a batch where the bad row is first and many loads follow */
            uint64_t many[40];
            for (int i = 0; i < 40; i++)
                many[i] = i == 0 ? 1500 : 100 + (uint64_t)i;
            rc = extractor_run(&x, many, 40, slots, err, sizeof err);
            if (rc != -EIO || !strstr(err, "node 1500"))
                fail_msg("%s: rc %d, message '%s'", combo, rc, err);
            buf_clean(&b, combo);
            extractor_free(&x);
            buf_free(&b);
            extract_source_free(&src);
            free(r.bytes);
            t_rmrf(dir);
        }
    }
}

/* A read failing with an errno: the file descriptor is swapped for a
 * directory's under the pread backend (io_uring's registered file would
 * keep the old one), so pread says EISDIR. */
static void test_read_error(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 128, "f16");
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    struct extract_source src;
    assert_int_equal(extract_source_open(&src, dir, &m, EXTRACT_IO_BUFFERED, "test_extract", err, sizeof err), 0);
    struct buf b;
    buf_make(&b, NODES, 32, (size_t)src.row_bytes);
    struct extractor x;
    mode_env(MODE_PREAD);
    assert_int_equal(extractor_init(&x, &src, &b.fb, 4, NULL, 0, err, sizeof err), 0);
    unsetenv("SLUICE_NO_IO_URING");
    assert_false(x.use_uring);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    int saved = dup(src.fd);
    assert_true(saved >= 0);
    assert_int_equal(dup2(dfd, src.fd), src.fd);
    uint64_t nodes[3] = {42, 43, 42};
    uint32_t slots[3];
    int rc = extractor_run(&x, nodes, 3, slots, err, sizeof err);
    char want[160];
    snprintf(want, sizeof want, "read of node 42 at offset %" PRIu64 " failed: %s", 42 * src.row_stride,
             strerror(EISDIR));
    if (rc != -EISDIR || !strstr(err, want))
        fail_msg("rc %d, message '%s' (wanted '%s')", rc, err, want);
    printf("# %s\n", err);
    buf_clean(&b, "EISDIR");
    assert_int_equal(featbuf_lookup(&b.fb, 42), FEATBUF_ABSENT);
    assert_int_equal(featbuf_lookup(&b.fb, 43), FEATBUF_ABSENT);
    /* the file back: the same batch succeeds */
    assert_int_equal(dup2(saved, src.fd), src.fd);
    struct ref r;
    ref_load(&r, dir, &m);
    run_checked(&x, &r, nodes, 3, slots, "after EISDIR");
    assert_int_equal(featbuf_release_many(&b.fb, slots, 3), 0);
    close(saved);
    close(dfd);
    extractor_free(&x);
    buf_free(&b);
    extract_source_free(&src);
    free(r.bytes);
}

/* A copy the row sink fails (SLUICE_FAULT_COPY_EIO=2: the second copy of
 * the engine's sink) fails the batch in every mode, naming the node, with
 * the buffer left clean and the node out of the map; the engine then
 * extracts the same batch. */
static void test_copy_error(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 100, "f32");
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    struct ref r;
    ref_load(&r, dir, &m);
    for (int mode = 0; mode < MODE_COUNT; mode++) {
        for (unsigned depth = 1; depth <= 4; depth += 3) {
            char combo[96];
            snprintf(combo, sizeof combo, "%s depth %u", mode_name[mode], depth);
            struct extract_source src;
            assert_int_equal(extract_source_open(&src, dir, &m, mode_io[mode], "test_extract", err, sizeof err), 0);
            struct buf b;
            buf_make(&b, NODES, 16, (size_t)src.row_bytes);
            struct extractor x;
            mode_env(mode);
            setenv("SLUICE_FAULT_COPY_EIO", "2", 1);
            int rc = extractor_init(&x, &src, &b.fb, depth, NULL, 0, err, sizeof err);
            unsetenv("SLUICE_FAULT_COPY_EIO");
            unsetenv("SLUICE_NO_IO_URING");
            if (rc)
                fail_msg("%s: extractor_init: %s", combo, err);
            uint64_t nodes[4] = {5, 6, 7, 6};
            uint32_t slots[4];
            rc = extractor_run(&x, nodes, 4, slots, err, sizeof err);
            if (rc != -EIO || !strstr(err, "copying node") || !strstr(err, "Input/output error"))
                fail_msg("%s: rc %d, message '%s'", combo, rc, err);
            uint64_t failed = strtoull(strstr(err, "copying node") + strlen("copying node"), NULL, 10);
            if (failed < 5 || failed > 7 || featbuf_lookup(&b.fb, failed) != FEATBUF_ABSENT)
                fail_msg("%s: '%s': node %" PRIu64 " is still mapped", combo, err, failed);
            buf_clean(&b, combo);
            run_checked(&x, &r, nodes, 4, slots, combo); /* the hook fired once: this batch succeeds */
            assert_int_equal(featbuf_release_many(&b.fb, slots, 4), 0);
            buf_clean(&b, combo);
            extractor_free(&x);
            buf_free(&b);
            extract_source_free(&src);
        }
    }
    free(r.bytes);
}

/* The read loop's tick (extract.h): with the clock set back it comes at
 * the first reap, while the batch is still reading, and sees the reads
 * counted so far; one that says stop fails the batch with its error, the
 * buffer left clean, and the same batch then extracts. Every mode. */
struct tick_count {
    int calls, stop;
    uint64_t io_ops, rows_done;
};

static int tick_hook(void *arg, const struct extractor *x)
{
    struct tick_count *c = arg;
    if (c->calls++ == 0)
        c->io_ops = x->st.io_ops;
    return c->stop ? -ECANCELED : 0;
}

static void test_tick(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 128, "f32");
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    struct ref r;
    ref_load(&r, dir, &m);
    enum { N = 40 };
    uint64_t nodes[N];
    uint32_t slots[N];
    for (uint32_t i = 0; i < N; i++)
        nodes[i] = 3 + 5 * i;
    for (int mode = 0; mode < MODE_COUNT; mode++) {
        char combo[96];
        snprintf(combo, sizeof combo, "%s", mode_name[mode]);
        struct extract_source src;
        assert_int_equal(extract_source_open(&src, dir, &m, mode_io[mode], "test_extract", err, sizeof err), 0);
        struct buf b;
        buf_make(&b, NODES, 64, (size_t)src.row_bytes);
        struct extractor x;
        mode_env(mode);
        int rc = extractor_init(&x, &src, &b.fb, 4, NULL, 0, err, sizeof err);
        unsetenv("SLUICE_NO_IO_URING");
        if (rc)
            fail_msg("%s: extractor_init: %s", combo, err);
        struct tick_count tc = {0};
        x.tick = tick_hook;
        x.tick_arg = &tc;
        x.tick_ns = 0; /* long ago: the first reap ticks */
        run_checked(&x, &r, nodes, N, slots, combo);
        if (tc.calls < 1 || (mode != MODE_MMAP && (tc.io_ops < 1 || tc.io_ops >= N)))
            fail_msg("%s: %d ticks, the first saw %" PRIu64 " of %d reads", combo, tc.calls, tc.io_ops, N);
        assert_int_equal(featbuf_release_many(&b.fb, slots, N), 0);
        /* a tick that says stop: the batch fails, nothing held, nothing LOADING */
        for (uint32_t i = 0; i < N; i++)
            nodes[i] += 1; /* rows not in the buffer yet */
        tc = (struct tick_count){.stop = 1};
        x.tick_ns = 0;
        rc = extractor_run(&x, nodes, N, slots, err, sizeof err);
        if (rc != -ECANCELED || !strstr(err, "stopped while reading"))
            fail_msg("%s: rc %d, message '%s'", combo, rc, err);
        buf_clean(&b, combo);
        tc.stop = 0;
        run_checked(&x, &r, nodes, N, slots, combo);
        assert_int_equal(featbuf_release_many(&b.fb, slots, N), 0);
        buf_clean(&b, combo);
        for (uint32_t i = 0; i < N; i++)
            nodes[i] -= 1;
        extractor_free(&x);
        buf_free(&b);
        extract_source_free(&src);
    }
    free(r.bytes);
}

/* A row another extractor fails to load fails the waiter's batch too. */
struct failer {
    struct featbuf *fb;
    uint32_t slot;
    int rc;
};

/* Fails the load once the extractor holds its WAIT reference, and some
 * time later, so that it is most likely asleep on the slot by then. */
static void *fail_later(void *arg)
{
    struct failer *f = arg;
    struct featbuf_stats st;
    do {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
        f->rc = featbuf_stats(f->fb, &st);
    } while (f->rc == 0 && st.waits == 0);
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    if (f->rc == 0)
        f->rc = featbuf_load_failed(f->fb, f->slot); /* checked by the main thread */
    return NULL;
}

static void test_wait_failed(void **state)
{
    (void)state;
    char dir[4200];
    dataset(dir, sizeof dir, 3, "f16");
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    struct extract_source src;
    assert_int_equal(extract_source_open(&src, dir, &m, EXTRACT_IO_DIRECT, "test_extract", err, sizeof err), 0);
    struct buf b;
    buf_make(&b, NODES, 16, (size_t)src.row_bytes);
    /* "another extractor" claims node 9 by hand and fails it later */
    uint32_t s9;
    int action;
    assert_int_equal(featbuf_acquire(&b.fb, 9, &s9, &action), 0);
    assert_int_equal(action, FEATBUF_LOAD);
    struct extractor x;
    assert_int_equal(extractor_init(&x, &src, &b.fb, 2, NULL, 0, err, sizeof err), 0);
    struct failer f = {&b.fb, s9, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fail_later, &f), 0);
    uint64_t nodes[3] = {8, 9, 10};
    uint32_t slots[3];
    int rc = extractor_run(&x, nodes, 3, slots, err, sizeof err);
    pthread_join(th, NULL);
    assert_int_equal(f.rc, 0);
    char want[96];
    snprintf(want, sizeof want, "node 9 at offset %" PRIu64, 9 * src.row_stride);
    if (rc != -EIO || !strstr(err, want))
        fail_msg("rc %d, message '%s' (wanted -EIO and '%s')", rc, err, want);
    assert_int_equal(x.st.waits, 1);
    assert_int_equal(featbuf_release(&b.fb, s9), 0);
    buf_clean(&b, "waited row failed");
    /* rows 8 and 10 were read all the same and stay on standby */
    assert_true(featbuf_lookup(&b.fb, 8) != FEATBUF_ABSENT);
    assert_true(featbuf_lookup(&b.fb, 10) != FEATBUF_ABSENT);
    assert_int_equal(featbuf_lookup(&b.fb, 9), FEATBUF_ABSENT);
    extractor_free(&x);
    buf_free(&b);
    extract_source_free(&src);
}

/* extract_bench_main in a child: its output keys, exit codes, usage. */
static int bench_child(char *out, size_t outlen, char **argv)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close(pfd[0]);
        int argc = 0;
        while (argv[argc])
            argc++;
        int rc = extract_bench_main(argc, argv);
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
    }
    close(pfd[1]);
    size_t n = 0;
    ssize_t k;
    while ((k = read(pfd[0], out + n, outlen - 1 - n)) > 0)
        n += (size_t)k;
    out[n] = '\0';
    close(pfd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static double key(const char *out, const char *k)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s=", k);
    const char *p = strstr(out, pat);
    if (!p)
        fail_msg("no %s= in:\n%s", k, out);
    return strtod(p + strlen(pat), NULL);
}

static void test_bench(void **state)
{
    (void)state;
    char dir[4200], out[16384];
    dataset(dir, sizeof dir, 128, "f32");
    static const char *const modes[] = {"direct", "buffered", "mmap"};
    for (unsigned i = 0; i < SL_ARRAY_LEN(modes); i++) {
        char *argv[] = {
            "gnn-extractor", "--bench", dir,    "--seconds",      "0.3",    "--io-depth", "8", "--threads", "2",
            "--batch-nodes", "64",      "--io", (char *)modes[i], "--seed", "3",          NULL};
        int rc = bench_child(out, sizeof out, argv);
        if (rc != 0)
            fail_msg("--io %s: exit %d:\n%s", modes[i], rc, out);
        double rows = key(out, "rows_per_s"), iops = key(out, "iops"), mbps = key(out, "MBps"),
               hit = key(out, "hit_rate");
        if (!(rows > 0 && iops > 0 && mbps > 0 && hit >= 0 && hit <= 1))
            fail_msg("--io %s: rows_per_s=%g iops=%g MBps=%g hit_rate=%g", modes[i], rows, iops, mbps, hit);
        assert_int_equal((int)key(out, "threads"), 2);
        assert_int_equal((int)key(out, "io_depth"), 8);
        assert_int_equal((int)key(out, "buffer_rows"), 128); /* N/16 = 125 < T x B */
        char want[64];
        snprintf(want, sizeof want, "\nio=%s\n", modes[i]);
        assert_non_null(strstr(out, want));
        /* a uniform draw over N rows with R slots hits about R/N of the time */
        if (hit > 0.5)
            fail_msg("--io %s: hit rate %g for 128 slots over %u rows", modes[i], hit, NODES);
    }
    /* the pread fallback reports itself */
    setenv("SLUICE_NO_IO_URING", "1", 1);
    char *argv_p[] = {"gnn-extractor", "--bench", dir, "--seconds", "0.2", NULL};
    int rc = bench_child(out, sizeof out, argv_p);
    unsetenv("SLUICE_NO_IO_URING");
    if (rc != 0 || !strstr(out, "io_backend=pread"))
        fail_msg("pread fallback: exit %d:\n%s", rc, out);
    char *argv_u[] = {"gnn-extractor", "--bench", dir, "--seconds", "0.2", NULL};
    rc = bench_child(out, sizeof out, argv_u);
    if (rc != 0 || !strstr(out, uring_expected() ? "io_backend=io_uring" : "io_backend=pread"))
        fail_msg("default backend: exit %d:\n%s", rc, out);
    /* flags */
    char *help[] = {"gnn-extractor", "--help", NULL};
    assert_int_equal(bench_child(out, sizeof out, help), 0);
    assert_non_null(strstr(out, "usage: gnn-extractor --bench DATASET"));
    char *bad[][6] = {
        {"gnn-extractor", "--bench", dir, "--io-depth", "0", NULL},
        {"gnn-extractor", "--bench", dir, "--io", "o_direct", NULL},
        {"gnn-extractor", "--bench", dir, "--threads", "x", NULL},
        {"gnn-extractor", "--bench", dir, "--seconds", "-1", NULL},
        {"gnn-extractor", "--bench", dir, "--frobnicate", NULL, NULL},
        {"gnn-extractor", "--bench", dir, "extra", NULL, NULL},
        {"gnn-extractor", "--io-depth", "4", NULL, NULL, NULL},
        {"gnn-extractor", "--bench", dir, "--buffer-rows", "10", NULL}, /* fewer than T x B */
    };
    for (unsigned i = 0; i < SL_ARRAY_LEN(bad); i++) {
        rc = bench_child(out, sizeof out, bad[i]);
        if (rc != 2)
            fail_msg("bad flags #%u: exit %d (wanted 2):\n%s", i, rc, out);
    }
    /* a run-time failure: a directory that is no dataset */
    char *missing[] = {"gnn-extractor", "--bench", root, "--seconds", "0.1", NULL};
    rc = bench_child(out, sizeof out, missing);
    if (rc != 1 || !strstr(out, "gnn-extractor: "))
        fail_msg("not a dataset: exit %d:\n%s", rc, out);
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
        cmocka_unit_test(test_io_parse),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_args),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_wait_for_room),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_read_error),
        cmocka_unit_test(test_copy_error),
        cmocka_unit_test(test_tick),
        cmocka_unit_test(test_slow_sink),
        cmocka_unit_test(test_shared_staging),
        cmocka_unit_test(test_shared_staging_threads),
        cmocka_unit_test(test_wait_failed),
        cmocka_unit_test(test_bench),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
