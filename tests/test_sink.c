/* test_sink.c - the row sink (stages/sink.h): the host sink copies the
 * right bytes into the right slots (single rows and runs of adjacent rows
 * with a source pitch) and publishes only when polled; staging is handed
 * back when the copy is done (for the host sink: put has copied, so the
 * staging may be overwritten before the poll); a variant whose copies
 * finish later (a test variant here) gets no tag reported and no row
 * published before its copy finishes, in put order, and free drains it;
 * refused puts leave the load to the caller, whose featbuf_load_failed
 * wakes a waiter with -EIO; a copy that fails (SLUICE_FAULT_COPY_EIO) is
 * failed by the sink itself and its waiter sees -EIO; many rows through a
 * small buffer; and the choice of sink by where the rows live. */
#include "tests/t_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "stages/featbuf.h"
#include "stages/sink.h"

#define ROW_BYTES 40u /* not a multiple of the stride: the padding must stay untouched */

static char err[512];

struct buf {
    struct featbuf fb;
    void *mem;
    size_t len;
};

static void buf_make(struct buf *b, uint64_t n_nodes, uint32_t nslots, bool on_device)
{
    memset(b, 0, sizeof *b);
    struct featbuf_params p = {
        .n_nodes = n_nodes, .nslots = nslots, .row_bytes = ROW_BYTES, .rows_on_device = on_device};
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

/* Consistent, and nobody holds a reference. */
static void buf_clean(struct buf *b)
{
    char msg[512] = "";
    if (featbuf_check(&b->fb, msg, sizeof msg))
        fail_msg("featbuf_check: %s", msg);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(&b->fb, &st), 0);
    assert_int_equal(st.standby, b->fb.nslots);
}

/* The row of node: bytes every test can recompute. */
static void pattern(unsigned char *dst, uint64_t node)
{
    for (unsigned i = 0; i < ROW_BYTES; i++)
        dst[i] = (unsigned char)(node * 131u + i * 7u + 1u);
}

static bool row_is(struct featbuf *fb, uint32_t slot, uint64_t node)
{
    unsigned char want[ROW_BYTES];
    pattern(want, node);
    return memcmp(featbuf_row(fb, slot), want, ROW_BYTES) == 0;
}

static uint32_t load(struct featbuf *fb, uint64_t node)
{
    uint32_t slot;
    int action;
    assert_int_equal(featbuf_acquire(fb, node, &slot, &action), 0);
    assert_int_equal(action, FEATBUF_LOAD);
    return slot;
}

static bool is_valid(struct featbuf *fb, uint32_t slot)
{
    int rc = featbuf_wait_valid(fb, slot, 0);
    assert_true(rc == 0 || rc == -ETIMEDOUT);
    return rc == 0;
}

/* ---- a waiter in another thread -------------------------------------------- */

struct waiter {
    struct featbuf *fb;
    uint64_t node;
    uint32_t slot;
    int rc;
    pthread_t th;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    w->rc = featbuf_wait_valid(w->fb, w->slot, 10000);
    return NULL;
}

/* Takes a WAIT reference on node (another extractor's) and sleeps on it. */
static void waiter_start(struct waiter *w, struct featbuf *fb, uint64_t node)
{
    int action;
    w->fb = fb;
    w->node = node;
    assert_int_equal(featbuf_acquire(fb, node, &w->slot, &action), 0);
    assert_int_equal(action, FEATBUF_WAIT);
    w->rc = 1;
    assert_int_equal(pthread_create(&w->th, NULL, waiter_main, w), 0);
}

static int waiter_join(struct waiter *w)
{
    pthread_join(w->th, NULL);
    assert_int_equal(featbuf_release(w->fb, w->slot), 0);
    return w->rc;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_pick(void **state)
{
    (void)state;
    struct buf b;
    buf_make(&b, 16, 4, false);
    assert_ptr_equal(row_sink_pick(&b.fb, err, sizeof err), &row_sink_host);
    buf_free(&b);
    buf_make(&b, 16, 4, true);
    err[0] = '\0';
    assert_null(row_sink_pick(&b.fb, err, sizeof err));
    assert_non_null(strstr(err, "device"));
    /* once the process has opened the device rows (a stand-in pointer: pick makes no CUDA call) */
    b.fb.dev_rows = &b;
#ifdef SLUICE_HAVE_CUDA
    assert_ptr_equal(row_sink_pick(&b.fb, err, sizeof err), &row_sink_cuda);
#else
    err[0] = '\0';
    assert_null(row_sink_pick(&b.fb, err, sizeof err));
    assert_non_null(strstr(err, "CUDA"));
#endif
    b.fb.dev_rows = NULL;
    struct row_sink s;
    assert_int_equal(row_sink_init(&s, &row_sink_host, &b.fb, NULL, 0, 4, err, sizeof err), -EINVAL);
    row_sink_free(&s);
    buf_free(&b);
}

static void test_host_copy(void **state)
{
    (void)state;
    struct buf b;
    buf_make(&b, 64, 8, false);
    struct row_sink s;
    unsigned char staging[4 * 64];
    assert_int_equal(row_sink_init(&s, &row_sink_host, &b.fb, staging, sizeof staging, 4, err, sizeof err), 0);
    uint32_t s3 = load(&b.fb, 3), s5 = load(&b.fb, 5);
    memset(featbuf_row(&b.fb, s3), 0xAB, b.fb.stride);
    pattern(staging + 64 + 8, 3);
    pattern(staging + 128, 5);
    struct row_sink_copy c = {.slot = s3, .nrows = 1, .src = staging + 64 + 8, .row_bytes = ROW_BYTES, .tag = 11};
    assert_int_equal(row_sink_put(&s, &c), 0);
    c = (struct row_sink_copy){.slot = s5, .nrows = 1, .src = staging + 128, .row_bytes = ROW_BYTES, .tag = 12};
    assert_int_equal(row_sink_put(&s, &c), 0);
    assert_int_equal(row_sink_pending(&s), 2);
    /* the host sink has copied already: its staging may be reused now */
    memset(staging, 0xEE, sizeof staging);
    assert_true(row_is(&b.fb, s3, 3));
    assert_true(row_is(&b.fb, s5, 5));
    unsigned char *pad = (unsigned char *)featbuf_row(&b.fb, s3) + ROW_BYTES;
    for (size_t i = ROW_BYTES; i < b.fb.stride; i++)
        assert_int_equal(pad[i - ROW_BYTES], 0xAB);
    /* but nothing is published before the poll, and then in put order */
    assert_false(is_valid(&b.fb, s3));
    assert_false(is_valid(&b.fb, s5));
    struct row_sink_done d[4];
    assert_int_equal(row_sink_poll(&s, d, 1, false), 1);
    assert_int_equal(d[0].tag, 11);
    assert_int_equal(d[0].slot, s3);
    assert_int_equal(d[0].nrows, 1);
    assert_int_equal(d[0].copy_rc, 0);
    assert_int_equal(d[0].fb_rc, 0);
    assert_true(is_valid(&b.fb, s3));
    assert_false(is_valid(&b.fb, s5));
    assert_int_equal(row_sink_poll(&s, d, 4, true), 1);
    assert_int_equal(d[0].tag, 12);
    assert_true(is_valid(&b.fb, s5));
    assert_int_equal(row_sink_poll(&s, d, 4, true), 0); /* nothing outstanding: no wait */
    assert_int_equal(featbuf_release(&b.fb, s3), 0);
    assert_int_equal(featbuf_release(&b.fb, s5), 0);

    /* a run of three adjacent slots from rows 48 bytes apart: take every
     * slot so that some three adjacent ones are ours */
    uint32_t slot_of[8];
    uint64_t node_in[8];
    for (uint64_t n = 20; n < 28; n++) {
        int action;
        assert_int_equal(featbuf_acquire(&b.fb, n, &slot_of[n - 20], &action), 0);
        assert_int_equal(action, FEATBUF_LOAD);
        node_in[slot_of[n - 20]] = n;
    }
    for (uint32_t r = 0; r < 3; r++)
        pattern(staging + r * 48, node_in[2 + r]);
    c = (struct row_sink_copy){
        .slot = 2, .nrows = 3, .src = staging, .src_pitch = 48, .row_bytes = ROW_BYTES, .tag = 7};
    assert_int_equal(row_sink_put(&s, &c), 0);
    for (uint32_t r = 0; r < 3; r++) {
        assert_true(row_is(&b.fb, 2 + r, node_in[2 + r]));
        assert_false(is_valid(&b.fb, 2 + r));
    }
    assert_int_equal(row_sink_poll(&s, d, 4, false), 1);
    assert_int_equal(d[0].tag, 7);
    assert_int_equal(d[0].slot, 2);
    assert_int_equal(d[0].nrows, 3);
    for (uint32_t r = 0; r < 8; r++) {
        if (r >= 2 && r < 5)
            assert_true(is_valid(&b.fb, r));
        else
            assert_int_equal(featbuf_load_failed(&b.fb, r), 0);
        assert_int_equal(featbuf_release(&b.fb, r), 0);
    }
    row_sink_free(&s);
    buf_clean(&b);
    buf_free(&b);
}

/* A refused put starts nothing: the load is the caller's, whose failing it
 * wakes a waiter with -EIO. */
static void test_put_refused(void **state)
{
    (void)state;
    struct buf b;
    buf_make(&b, 64, 8, false);
    struct row_sink s;
    unsigned char staging[256];
    pattern(staging, 1);
    assert_int_equal(row_sink_init(&s, &row_sink_host, &b.fb, staging, sizeof staging, 2, err, sizeof err), 0);
    uint32_t s1 = load(&b.fb, 1), s2 = load(&b.fb, 2), s4 = load(&b.fb, 4);
    memset(featbuf_row(&b.fb, s4), 0, ROW_BYTES);
    struct row_sink_copy ok = {.slot = s4, .nrows = 1, .src = staging, .row_bytes = ROW_BYTES, .tag = 1};
    struct row_sink_copy bad[] = {
        {.slot = 8, .nrows = 1, .src = staging, .row_bytes = ROW_BYTES},
        {.slot = 6, .nrows = 3, .src = staging, .row_bytes = ROW_BYTES},
        {.slot = s4, .nrows = 0, .src = staging, .row_bytes = ROW_BYTES},
        {.slot = s4, .nrows = 1, .src = staging, .row_bytes = 0},
        {.slot = s4, .nrows = 1, .src = staging, .row_bytes = b.fb.row_bytes + 1},
        {.slot = s4, .nrows = 1, .src = NULL, .row_bytes = ROW_BYTES},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (row_sink_put(&s, &bad[i]) != -EINVAL)
            fail_msg("bad copy %zu accepted", i);
    assert_int_equal(row_sink_pending(&s), 0);
    assert_false(row_is(&b.fb, s4, 1)); /* nothing was copied */
    /* full: cap 2 */
    ok.slot = s1;
    assert_int_equal(row_sink_put(&s, &ok), 0);
    ok.slot = s2;
    assert_int_equal(row_sink_put(&s, &ok), 0);
    ok.slot = s4;
    struct waiter w;
    waiter_start(&w, &b.fb, 4);
    assert_int_equal(row_sink_put(&s, &ok), -EBUSY);
    assert_false(row_is(&b.fb, s4, 1));
    assert_int_equal(featbuf_load_failed(&b.fb, s4), 0); /* the caller's to fail */
    assert_int_equal(waiter_join(&w), -EIO);
    assert_int_equal(featbuf_lookup(&b.fb, 4), FEATBUF_ABSENT);
    struct row_sink_done d[2];
    assert_int_equal(row_sink_poll(&s, d, 2, false), 2);
    assert_true(is_valid(&b.fb, s1) && is_valid(&b.fb, s2));
    assert_int_equal(featbuf_release(&b.fb, s1), 0);
    assert_int_equal(featbuf_release(&b.fb, s2), 0);
    assert_int_equal(featbuf_release(&b.fb, s4), 0);
    row_sink_free(&s);
    buf_clean(&b);
    buf_free(&b);
}

/* SLUICE_FAULT_COPY_EIO=2: the second copy fails; the sink fails its row
 * and the waiter on it sees -EIO; the others are published. */
static void test_copy_fails(void **state)
{
    (void)state;
    struct buf b;
    buf_make(&b, 64, 8, false);
    struct row_sink s;
    unsigned char staging[3 * 64];
    setenv("SLUICE_FAULT_COPY_EIO", "2", 1);
    int rc = row_sink_init(&s, &row_sink_host, &b.fb, staging, sizeof staging, 3, err, sizeof err);
    unsetenv("SLUICE_FAULT_COPY_EIO");
    assert_int_equal(rc, 0);
    uint32_t slot[3];
    for (uint32_t i = 0; i < 3; i++) {
        slot[i] = load(&b.fb, 10 + i);
        pattern(staging + i * 64, 10 + i);
        struct row_sink_copy c = {
            .slot = slot[i], .nrows = 1, .src = staging + i * 64, .row_bytes = ROW_BYTES, .tag = i};
        assert_int_equal(row_sink_put(&s, &c), 0);
    }
    struct waiter w;
    waiter_start(&w, &b.fb, 11);
    struct row_sink_done d[3];
    assert_int_equal(row_sink_poll(&s, d, 3, false), 3);
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(d[i].tag, i);
        assert_int_equal(d[i].copy_rc, i == 1 ? -EIO : 0);
        assert_int_equal(d[i].fb_rc, 0);
    }
    assert_int_equal(waiter_join(&w), -EIO);
    assert_int_equal(featbuf_lookup(&b.fb, 11), FEATBUF_ABSENT);
    assert_true(is_valid(&b.fb, slot[0]) && is_valid(&b.fb, slot[2]));
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(featbuf_release(&b.fb, slot[i]), 0);
    /* a publish the buffer refuses is reported as fb_rc */
    uint32_t s20 = load(&b.fb, 20);
    struct row_sink_copy c = {.slot = s20, .nrows = 1, .src = staging, .row_bytes = ROW_BYTES, .tag = 9};
    assert_int_equal(row_sink_put(&s, &c), 0);
    featbuf_mark_broken(&b.fb);
    assert_int_equal(row_sink_poll(&s, d, 3, false), 1);
    assert_int_equal(d[0].copy_rc, 0);
    assert_int_equal(d[0].fb_rc, -EPIPE);
    row_sink_free(&s);
    buf_free(&b);
}

/* ---- a variant whose copies finish only when the test says -------------- */

struct later {
    uint32_t allowed; /* copies that may finish now */
    uint32_t copied;  /* copies done (at finish time, reading staging then) */
};

static int later_init(struct row_sink *s, char *e, size_t elen)
{
    (void)e;
    (void)elen;
    s->impl = calloc(1, sizeof(struct later));
    return s->impl ? 0 : -ENOMEM;
}

static int later_start(struct row_sink *s, uint32_t pos, const struct row_sink_copy *c)
{
    (void)s;
    (void)pos;
    (void)c;
    return 0; /* the bytes are read when the copy finishes */
}

static uint32_t later_finished(struct row_sink *s, uint32_t max, bool wait, int *rc)
{
    struct later *l = s->impl;
    if (wait && l->allowed == 0)
        l->allowed = 1; /* "the device" finishes the oldest */
    uint32_t k = l->allowed < max ? l->allowed : max;
    for (uint32_t i = 0; i < k; i++) {
        const struct row_sink_copy *c = &s->q[(s->head + i) % s->cap];
        memcpy(featbuf_row(s->fb, c->slot), c->src, c->row_bytes);
        rc[i] = 0;
    }
    l->allowed -= k;
    l->copied += k;
    return k;
}

static void later_free(struct row_sink *s)
{
    free(s->impl);
}

static const struct row_sink_ops later_ops = {"later", later_init, later_start, later_finished, later_free};

/* No tag comes back, and no row is published, before its copy finishes. */
static void test_handback(void **state)
{
    (void)state;
    struct buf b;
    buf_make(&b, 64, 8, false);
    struct row_sink s;
    unsigned char staging[4 * 64];
    assert_int_equal(row_sink_init(&s, &later_ops, &b.fb, staging, sizeof staging, 4, err, sizeof err), 0);
    struct later *l = s.impl;
    uint32_t slot[4];
    for (uint32_t i = 0; i < 4; i++) {
        slot[i] = load(&b.fb, 30 + i);
        pattern(staging + i * 64, 30 + i);
        struct row_sink_copy c = {
            .slot = slot[i], .nrows = 1, .src = staging + i * 64, .row_bytes = ROW_BYTES, .tag = 100 + i};
        assert_int_equal(row_sink_put(&s, &c), 0);
    }
    struct row_sink_done d[4];
    assert_int_equal(row_sink_poll(&s, d, 4, false), 0); /* nothing finished: no entry free */
    for (uint32_t i = 0; i < 4; i++)
        assert_false(is_valid(&b.fb, slot[i]));
    l->allowed = 2;
    assert_int_equal(row_sink_poll(&s, d, 4, false), 2);
    assert_int_equal(d[0].tag, 100);
    assert_int_equal(d[1].tag, 101);
    assert_true(is_valid(&b.fb, slot[0]) && row_is(&b.fb, slot[0], 30));
    assert_true(is_valid(&b.fb, slot[1]) && row_is(&b.fb, slot[1], 31));
    assert_false(is_valid(&b.fb, slot[2]));
    assert_int_equal(row_sink_pending(&s), 2);
    assert_int_equal(row_sink_poll(&s, d, 4, true), 1); /* waits for the oldest */
    assert_int_equal(d[0].tag, 102);
    assert_true(is_valid(&b.fb, slot[2]) && row_is(&b.fb, slot[2], 32));
    assert_false(is_valid(&b.fb, slot[3]));
    row_sink_free(&s); /* drains the last one: published, not left LOADING */
    assert_true(is_valid(&b.fb, slot[3]) && row_is(&b.fb, slot[3], 33));
    for (uint32_t i = 0; i < 4; i++)
        assert_int_equal(featbuf_release(&b.fb, slot[i]), 0);
    buf_clean(&b);
    buf_free(&b);
}

/* Many rows through a 4-slot buffer and a 3-copy sink, with repeats:
 * every row read back is its node's, and nothing leaks. */
#define CAP 3u

struct many {
    struct featbuf *fb;
    struct row_sink s;
    unsigned char staging[CAP * 64];
    uint32_t free_e[CAP], nfree, slot_of_e[CAP];
    uint64_t node_of_e[CAP];
    uint64_t published;
};

/* Polls; checks and releases what finished (the loader's reference) and
 * takes its staging entry back. */
static uint32_t many_reap(struct many *m, bool wait)
{
    struct row_sink_done d[CAP];
    uint32_t n = row_sink_poll(&m->s, d, CAP, wait);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t e = (uint32_t)d[i].tag;
        assert_true(e < CAP);
        assert_int_equal(d[i].slot, m->slot_of_e[e]);
        assert_int_equal(d[i].copy_rc, 0);
        assert_int_equal(d[i].fb_rc, 0);
        assert_true(is_valid(m->fb, d[i].slot));
        assert_true(row_is(m->fb, d[i].slot, m->node_of_e[e]));
        assert_int_equal(featbuf_release(m->fb, d[i].slot), 0);
        m->free_e[m->nfree++] = e;
        m->published++;
    }
    return n;
}

static void test_many_rows(void **state)
{
    (void)state;
    enum { NODES = 500, ROWS = 5000 };
    struct buf b;
    buf_make(&b, NODES, 4, false);
    static struct many m;
    memset(&m, 0, sizeof m);
    m.fb = &b.fb;
    assert_int_equal(row_sink_init(&m.s, &row_sink_host, &b.fb, m.staging, sizeof m.staging, CAP, err, sizeof err), 0);
    for (uint32_t e = 0; e < CAP; e++)
        m.free_e[m.nfree++] = e;
    uint64_t seed = 12345, hits = 0, loads = 0, waits = 0;
    for (uint32_t k = 0; k < ROWS; k++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t node = (seed >> 33) % (k % 7 == 0 ? 4 : NODES); /* a few hot nodes */
        if (!m.nfree)                                            /* every entry is the sink's: wait for one back */
            assert_true(many_reap(&m, true) > 0);
        else if (k % 5 == 0)
            many_reap(&m, false);
        uint32_t slot;
        int action;
        assert_int_equal(featbuf_acquire(&b.fb, node, &slot, &action), 0);
        if (action == FEATBUF_LOAD) {
            uint32_t e = m.free_e[--m.nfree];
            pattern(m.staging + e * 64, node);
            m.slot_of_e[e] = slot;
            m.node_of_e[e] = node;
            struct row_sink_copy c = {
                .slot = slot, .nrows = 1, .src = m.staging + e * 64, .row_bytes = ROW_BYTES, .tag = e};
            assert_int_equal(row_sink_put(&m.s, &c), 0);
            loads++;
            continue;
        }
        if (action == FEATBUF_WAIT) { /* our own copy, not polled yet */
            waits++;
            while (!is_valid(&b.fb, slot))
                assert_true(many_reap(&m, true) > 0);
        } else {
            hits++;
        }
        assert_true(row_is(&b.fb, slot, node));
        assert_int_equal(featbuf_release(&b.fb, slot), 0);
    }
    while (row_sink_pending(&m.s))
        assert_true(many_reap(&m, true) > 0);
    assert_int_equal(m.published, loads);
    assert_true(hits > 0 && waits > 0 && loads > ROWS / 2);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(&b.fb, &st), 0);
    assert_int_equal(st.loads, loads);
    assert_int_equal(st.failed, 0);
    row_sink_free(&m.s);
    buf_clean(&b);
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pick),       cmocka_unit_test(test_host_copy), cmocka_unit_test(test_put_refused),
        cmocka_unit_test(test_copy_fails), cmocka_unit_test(test_handback),  cmocka_unit_test(test_many_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
