/* test_sink_cuda.c - the CUDA row sink (stages/sink_cuda.c) and the
 * exporter side of featbuf_cuda.c on a real device, in one process: rows
 * copied from registered staging land bit for bit in their slots of the
 * device rows (single rows and runs of adjacent rows with a staging pitch),
 * the stride's padding untouched; rows are VALID only after their copy's
 * event; copies are reported in put order; -EBUSY at the cap; the staging
 * region is registered once however many sinks use it and unregistered
 * with the last; SLUICE_FAULT_COPY_EIO fails a copy's rows; and the
 * extraction engine over shared staging puts features.bin's rows on the
 * device; the warm start fills device rows with every row of the file
 * through its own CUDA sink. Labelled gpu: without a device (cudaGetDeviceCount fails or
 * finds none) it prints what it would have checked and exits 77, which
 * ctest reports as skipped. The two-process IPC path is test_featbuf_ipc. */
#include "tests/t_util.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <inttypes.h>
#include <sys/mman.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ipc/staging.h"
#include "stages/extract.h"
#include "stages/featbuf.h"
#include "stages/featbuf_cuda.h"
#include "stages/sink.h"
#include "stages/warm.h"

#define ROW_BYTES 400u /* stride 448: 48 bytes of padding per slot must stay as they were */
#define NSLOTS 64u
#define PAD 0xabu

static char err[512];

#define CK(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            fail_msg("%s: %s", #call, cudaGetErrorString(e_));                                                         \
    } while (0)

struct dev {
    struct featbuf fb;
    struct featbuf_cuda cu;
    void *mem;
    size_t len;
};

/* A buffer with its rows on device 0, exported by this process (which sets
 * fb.dev_rows), the device bytes set to PAD. */
static void dev_make(struct dev *d, uint64_t n_nodes, uint32_t nslots, size_t row_bytes)
{
    memset(d, 0, sizeof *d);
    struct featbuf_params p = {.n_nodes = n_nodes, .nslots = nslots, .row_bytes = row_bytes, .rows_on_device = true};
    d->len = featbuf_mem_size(&p);
    d->mem = mmap(NULL, d->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(d->mem != MAP_FAILED);
    if (featbuf_mem_format(d->mem, d->len, &p, err, sizeof err) ||
        featbuf_init(&d->fb, d->mem, d->len, err, sizeof err))
        fail_msg("featbuf: %s", err);
    if (featbuf_cuda_export(&d->cu, &d->fb, 0, err, sizeof err))
        fail_msg("featbuf_cuda_export: %s", err);
    assert_non_null(d->fb.dev_rows);
    assert_int_equal(featbuf_device_state(&d->fb, NULL), FEATBUF_DEV_READY);
    CK(cudaMemset(d->fb.dev_rows, PAD, (size_t)nslots * d->fb.stride));
    CK(cudaDeviceSynchronize()); /* the test's own set-up; the sink never does this */
}

static void dev_free(struct dev *d)
{
    if (featbuf_cuda_unexport(&d->cu, 1000, NULL, NULL, err, sizeof err))
        fail_msg("featbuf_cuda_unexport: %s", err);
    assert_int_equal(featbuf_device_state(&d->fb, NULL), FEATBUF_DEV_CLOSED);
    assert_null(d->fb.dev_rows);
    featbuf_free(&d->fb);
    munmap(d->mem, d->len);
}

static void pattern(unsigned char *dst, uint64_t node, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = sl_mix64(node * 7919u + i); /* any bits: NaN payloads, denormals */
        memcpy(dst + i, &v, SL_MIN((size_t)8, n - i));
    }
}

/* The device rows, copied back. */
static unsigned char *readback(struct dev *d)
{
    size_t n = (size_t)d->fb.nslots * d->fb.stride;
    unsigned char *h = malloc(n);
    assert_non_null(h);
    CK(cudaMemcpy(h, d->fb.dev_rows, n, cudaMemcpyDeviceToHost));
    return h;
}

static void expect_row(struct dev *d, const unsigned char *h, uint32_t slot, uint64_t node)
{
    unsigned char want[ROW_BYTES];
    pattern(want, node, ROW_BYTES);
    const unsigned char *row = h + (size_t)slot * d->fb.stride;
    if (memcmp(row, want, ROW_BYTES))
        fail_msg("slot %u: the device row differs from node %" PRIu64 "'s bytes", slot, node);
    for (size_t i = ROW_BYTES; i < d->fb.stride; i++)
        if (row[i] != PAD)
            fail_msg("slot %u: padding byte %zu was written", slot, i);
}

static void acquire_loads(struct dev *d, const uint64_t *nodes, uint32_t n, uint32_t *slots)
{
    uint8_t act[NSLOTS];
    assert_int_equal(featbuf_acquire_many(&d->fb, nodes, n, slots, act), 0);
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(act[i], FEATBUF_LOAD);
}

/* Single rows and runs, put order, VALID after the copy, bits on the device. */
static void test_rows(void **state)
{
    (void)state;
    struct dev d;
    dev_make(&d, 1000, NSLOTS, ROW_BYTES);
    enum { N = 40 };
    uint64_t nodes[N];
    uint32_t slots[N];
    for (uint32_t i = 0; i < N; i++)
        nodes[i] = 17 + 3 * i;
    acquire_loads(&d, nodes, N, slots);
    for (uint32_t i = 1; i < N; i++) /* a fresh LRU buffer hands out slots in order */
        assert_int_equal(slots[i], slots[0] + i);
    /* staging: one 4 KiB block per copy; a run's rows 1024 bytes apart in its block */
    size_t blk = 4096, slen = N * blk;
    unsigned char *stg = aligned_alloc(4096, slen);
    assert_non_null(stg);
    struct row_sink s;
    if (row_sink_init(&s, row_sink_pick(&d.fb, err, sizeof err), &d.fb, stg, slen, 8, err, sizeof err))
        fail_msg("row_sink_init: %s", err);
    assert_string_equal(s.ops->name, "cuda");
    assert_int_equal(row_sink_cuda_registered(), 1);
    uint32_t i = 0, put = 0, reported = 0;
    uint64_t expect_tag = 0;
    struct row_sink_done done[8];
    while (i < N || row_sink_pending(&s)) {
        if (i < N) {
            uint32_t run = (i % 10 == 5) ? SL_MIN(4u, N - i) : 1;        /* runs of 4 among single rows */
            unsigned char *src = stg + (size_t)put * blk + 64 * (i % 3); /* not always block aligned */
            for (uint32_t r = 0; r < run; r++)
                pattern(src + r * 1024, nodes[i + r], ROW_BYTES);
            struct row_sink_copy c = {
                .slot = slots[i], .nrows = run, .src = src, .src_pitch = 1024, .row_bytes = ROW_BYTES, .tag = put};
            int rc = row_sink_put(&s, &c);
            if (rc == 0) {
                i += run;
                put++;
                continue;
            }
            assert_int_equal(rc, -EBUSY);
            assert_int_equal(row_sink_pending(&s), 8);
        }
        uint32_t k = row_sink_poll(&s, done, 8, true);
        assert_true(k >= 1);
        for (uint32_t j = 0; j < k; j++) {
            assert_int_equal(done[j].tag, expect_tag++); /* oldest first */
            assert_int_equal(done[j].copy_rc, 0);
            assert_int_equal(done[j].fb_rc, 0);
            for (uint32_t r = 0; r < done[j].nrows; r++)
                assert_int_equal(featbuf_wait_valid(&d.fb, done[j].slot + r, 0), 0);
            reported++;
        }
    }
    assert_int_equal(reported, put);
    row_sink_free(&s);
    assert_int_equal(row_sink_cuda_registered(), 0);
    unsigned char *h = readback(&d);
    for (i = 0; i < N; i++)
        expect_row(&d, h, slots[i], nodes[i]);
    free(h);
    assert_int_equal(featbuf_release_many(&d.fb, slots, N), 0);
    free(stg);
    dev_free(&d);
}

/* Registered once per process; a failing copy fails its rows. */
static void test_register_and_fault(void **state)
{
    (void)state;
    struct dev d;
    dev_make(&d, 1000, NSLOTS, ROW_BYTES);
    size_t slen = 16 * 4096;
    unsigned char *stg = aligned_alloc(4096, slen);
    assert_non_null(stg);
    struct row_sink a, b;
    assert_int_equal(row_sink_init(&a, &row_sink_cuda, &d.fb, stg, slen, 4, err, sizeof err), 0);
    assert_int_equal(row_sink_init(&b, &row_sink_cuda, &d.fb, stg + 4096, 4096, 4, err, sizeof err), 0);
    assert_int_equal(row_sink_cuda_registered(), 1); /* b's region lies inside a's */
    row_sink_free(&a);
    assert_int_equal(row_sink_cuda_registered(), 1);
    row_sink_free(&b);
    assert_int_equal(row_sink_cuda_registered(), 0);

    setenv("SLUICE_FAULT_COPY_EIO", "2", 1);
    struct row_sink s;
    assert_int_equal(row_sink_init(&s, &row_sink_cuda, &d.fb, stg, slen, 4, err, sizeof err), 0);
    unsetenv("SLUICE_FAULT_COPY_EIO");
    uint64_t nodes[3] = {1, 2, 3};
    uint32_t slots[3];
    acquire_loads(&d, nodes, 3, slots);
    for (uint32_t i = 0; i < 3; i++) {
        pattern(stg + i * 4096, nodes[i], ROW_BYTES);
        struct row_sink_copy c = {
            .slot = slots[i], .nrows = 1, .src = stg + i * 4096, .row_bytes = ROW_BYTES, .tag = i};
        assert_int_equal(row_sink_put(&s, &c), 0);
    }
    struct row_sink_done done[3];
    uint32_t n = 0;
    while (n < 3)
        n += row_sink_poll(&s, done + n, 3 - n, true);
    assert_int_equal(done[0].copy_rc, 0);
    assert_int_equal(done[1].copy_rc, -EIO);
    assert_int_equal(done[2].copy_rc, 0);
    assert_int_equal(featbuf_wait_valid(&d.fb, slots[0], 0), 0);
    assert_int_equal(featbuf_wait_valid(&d.fb, slots[1], 0), -EIO);
    assert_int_equal(featbuf_wait_valid(&d.fb, slots[2], 0), 0);
    row_sink_free(&s);
    assert_int_equal(featbuf_release_many(&d.fb, slots, 3), 0);
    /* a put the device refuses starts nothing: the load is still the caller's */
    struct row_sink_copy bad = {.slot = 0, .nrows = 2, .src = stg, .src_pitch = 8, .row_bytes = ROW_BYTES};
    assert_int_equal(row_sink_init(&s, &row_sink_cuda, &d.fb, stg, slen, 4, err, sizeof err), 0);
    assert_int_equal(row_sink_put(&s, &bad), -EINVAL); /* pitch below a row */
    assert_int_equal(row_sink_pending(&s), 0);
    row_sink_free(&s);
    free(stg);
    dev_free(&d);
}

/* The extraction engine over shared staging, rows on the device. */
static void test_engine(void **state)
{
    (void)state;
    char root[4096], dir[4200], gnnprep[4096], log[4096];
    t_scratch(root, sizeof root, "test_sink_cuda");
    snprintf(dir, sizeof dir, "%s/f32-100", root);
    t_bin(gnnprep, sizeof gnnprep, "gnnprep");
    if (t_run(log, sizeof log, "'%s' synth '%s' --nodes 3000 --avg-degree 2 --feat-dim 100 --classes 4 --seed 3",
              gnnprep, dir) != 0)
        fail_msg("gnnprep synth: %s", log);
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    char path[4300];
    snprintf(path, sizeof path, "%s/features.bin", dir);
    size_t flen = (size_t)m.f[DATASET_FEATURES].bytes, got = 0;
    unsigned char *ref = malloc(flen);
    assert_non_null(ref);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    got = fread(ref, 1, flen, f);
    fclose(f);
    assert_int_equal(got, flen);
    static const enum extract_io modes[] = {EXTRACT_IO_DIRECT, EXTRACT_IO_BUFFERED, EXTRACT_IO_MMAP};
    for (size_t mi = 0; mi < SL_ARRAY_LEN(modes); mi++) {
        struct extract_source src;
        assert_int_equal(extract_source_open(&src, dir, &m, modes[mi], "test_sink_cuda", err, sizeof err), 0);
        struct dev d;
        dev_make(&d, m.nodes, 512, (size_t)src.row_bytes);
        struct staging_params sp = {.ranks = 1, .threads = 2, .blocks = 4, .block_bytes = 4096};
        size_t slen = staging_mem_size(&sp);
        void *smem = mmap(NULL, slen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        struct staging stg = {0};
        assert_int_equal(staging_mem_format(smem, slen, &sp, err, sizeof err), 0);
        assert_int_equal(staging_init(&stg, smem, slen, err, sizeof err), 0);
        struct extractor x;
        if (extractor_init_shared(&x, &src, &d.fb, 8, &stg, 0, err, sizeof err))
            fail_msg("extractor_init_shared: %s", err);
        uint64_t nodes[300], seed = 11;
        uint32_t slots[300];
        for (int batch = 0; batch < 3; batch++) {
            for (int i = 0; i < 300; i++)
                nodes[i] = sl_splitmix64(&seed) % m.nodes;
            if (extractor_run(&x, nodes, 300, slots, err, sizeof err))
                fail_msg("%s: extractor_run: %s", extract_io_name(modes[mi]), err);
            unsigned char *h = readback(&d);
            for (int i = 0; i < 300; i++)
                if (memcmp(h + (size_t)slots[i] * d.fb.stride, ref + nodes[i] * m.f[DATASET_FEATURES].row_stride,
                           (size_t)src.row_bytes))
                    fail_msg("%s: node %" PRIu64 " in slot %u differs from features.bin", extract_io_name(modes[mi]),
                             nodes[i], slots[i]);
            free(h);
            assert_int_equal(featbuf_release_many(&d.fb, slots, 300), 0);
        }
        bool uring = x.use_uring;
        extractor_free(&x);
        assert_int_equal(row_sink_cuda_registered(), 0);
        struct staging_stats st;
        assert_int_equal(staging_stats(&stg, 0, &st), 0);
        assert_int_equal(st.free, 4);
        assert_int_equal(st.borrowed, 0);
        if (uring && st.borrows == 0) /* 8 reads submitted at once, 4 blocks of its own */
            fail_msg("%s: no block borrowed", extract_io_name(modes[mi]));
        munmap(smem, slen);
        dev_free(&d);
        extract_source_free(&src);
    }
    free(ref);
    t_rmrf(root);
}

/* The warm start (stages/warm.h) into rows on the device: every row of
 * features.bin lands bit for bit in its device slot through the pass's
 * CUDA sink, every chunk copied (none read straight into device memory),
 * nothing referenced afterwards, its staging unregistered. */
static void test_warm_start(void **state)
{
    (void)state;
    char root[4096], dir[4200], gnnprep[4096], log[4096];
    t_scratch(root, sizeof root, "test_sink_cuda_warm");
    snprintf(dir, sizeof dir, "%s/f32-100", root);
    t_bin(gnnprep, sizeof gnnprep, "gnnprep");
    if (t_run(log, sizeof log, "'%s' synth '%s' --nodes 3000 --avg-degree 2 --feat-dim 100 --classes 4 --seed 4",
              gnnprep, dir) != 0)
        fail_msg("gnnprep synth: %s", log);
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(dir, &m, true, err, sizeof err), 0);
    char path[4300];
    snprintf(path, sizeof path, "%s/features.bin", dir);
    size_t flen = (size_t)m.f[DATASET_FEATURES].bytes;
    unsigned char *ref = malloc(flen);
    assert_non_null(ref);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(ref, 1, flen, f), flen);
    fclose(f);
    static const struct warm_params ps[] = {{0, 0, false, NULL, 0}, {4096, 3, false, NULL, 0}};
    for (size_t k = 0; k < SL_ARRAY_LEN(ps); k++) {
        struct extract_source src;
        assert_int_equal(extract_source_open(&src, dir, &m, EXTRACT_IO_DIRECT, "test_sink_cuda", err, sizeof err), 0);
        struct dev d;
        dev_make(&d, m.nodes, (uint32_t)m.nodes + 5, (size_t)src.row_bytes);
        assert_true(warm_fits(&d.fb, &src));
        struct warm_stats ws;
        if (warm_fill(&src, &d.fb, &ps[k], NULL, NULL, &ws, err, sizeof err))
            fail_msg("warm_fill (chunk %zu, depth %u): %s", ps[k].chunk_bytes, ps[k].depth, err);
        if (ws.loaded != m.nodes || ws.chunks_direct != 0 || ws.chunks_copied == 0)
            fail_msg("loaded %" PRIu64 " of %" PRIu64 ", %" PRIu64 " chunks direct, %" PRIu64 " copied", ws.loaded,
                     m.nodes, ws.chunks_direct, ws.chunks_copied);
        assert_int_equal(row_sink_cuda_registered(), 0);
        unsigned char *h = readback(&d);
        for (uint64_t node = 0; node < m.nodes; node++) {
            uint32_t slot = featbuf_lookup(&d.fb, node);
            if (slot == FEATBUF_ABSENT)
                fail_msg("node %" PRIu64 " has no slot after the warm start", node);
            if (memcmp(h + (size_t)slot * d.fb.stride, ref + node * m.f[DATASET_FEATURES].row_stride,
                       (size_t)src.row_bytes))
                fail_msg("node %" PRIu64 " in slot %u differs from features.bin", node, slot);
        }
        free(h);
        struct featbuf_stats st;
        assert_int_equal(featbuf_stats(&d.fb, &st), 0);
        if (st.standby != d.fb.nslots)
            fail_msg("%u of %u slots on standby after the warm start: references left", st.standby, d.fb.nslots);
        dev_free(&d);
        extract_source_free(&src);
    }
    free(ref);
    t_rmrf(root);
}

int main(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("# SKIP test_sink_cuda: no CUDA device (%s)\n"
               "# with one it checks: rows copied by the CUDA row sink from registered staging land bit for bit in "
               "their device slots (single rows, runs of rows with a pitch), padding untouched, VALID only after the "
               "copy, reported in put order, -EBUSY at the cap, staging registered once per process, "
               "SLUICE_FAULT_COPY_EIO failing a copy's rows, the extraction engine over shared staging, and the "
               "warm start into device rows\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_register_and_fault),
        cmocka_unit_test(test_engine),
        cmocka_unit_test(test_warm_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
