/* test_ring.c - ring queue semantics in one process: parameters and header
 * checks, FIFO order, full/empty with and without timeouts, entry sizes and
 * wrap-around, close (drain then -EPIPE, push fails fast, sleepers woken),
 * the zero-copy halves and the dropping of a claimed-but-unpublished slot
 * after close, producer counting, rings in named segments, -EINTR, and
 * exactly-once delivery between threads (the part ThreadSanitizer checks).
 * The multi-process stress is in test_ring_mp.c. */
#include "t_util.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "core/util.h"
#include "ipc/ring.h"
#include "ipc/shm.h"

static char g_run[SHM_RUN_ID_MAX];

/* Ring memory for in-process rings: page aligned, freed by the caller. */
static void *t_ring_mem(const struct ring_params *p, size_t *len)
{
    *len = ring_mem_size(p);
    assert_true(*len > 0);
    void *m = NULL;
    assert_int_equal(posix_memalign(&m, 4096, *len), 0);
    memset(m, 0xA5, *len); /* format must not rely on zeroed memory */
    return m;
}

static struct ring *t_ring_new(uint32_t entry, uint32_t cap, uint32_t producers, void **mem)
{
    struct ring_params p = {.entry_size = entry, .capacity = cap, .producers = producers};
    size_t len;
    *mem = t_ring_mem(&p, &len);
    char err[256];
    assert_int_equal(ring_mem_format(*mem, len, &p, err, sizeof err), 0);
    struct ring *r = calloc(1, sizeof *r);
    assert_non_null(r);
    assert_int_equal(ring_init(r, *mem, len, err, sizeof err), 0);
    return r;
}

static void t_ring_del(struct ring *r, void *mem)
{
    ring_free(r);
    free(r);
    free(mem);
}

static double t_ms_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Deterministic entry contents for (position, byte index). */
static unsigned char t_byte(uint64_t pos, size_t i)
{
    return (unsigned char)(pos * 131 + i * 7 + 1);
}

static void t_fill(unsigned char *buf, size_t n, uint64_t pos)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = t_byte(pos, i);
}

static bool t_check(const unsigned char *buf, size_t n, uint64_t pos)
{
    for (size_t i = 0; i < n; i++)
        if (buf[i] != t_byte(pos, i))
            return false;
    return true;
}

/* ---- parameters and headers ----------------------------------------------------------- */

static void test_params(void **state)
{
    struct ring_params bad[] = {
        {.entry_size = 0, .capacity = 8},  {.entry_size = RING_ENTRY_MAX + 1, .capacity = 8},
        {.entry_size = 8, .capacity = 0},  {.entry_size = 8, .capacity = 1},
        {.entry_size = 8, .capacity = 12}, {.entry_size = 8, .capacity = RING_CAPACITY_MAX * 2},
    };
    char err[256];
    static _Alignas(4096) unsigned char mem[1 << 16];
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        assert_int_equal(ring_mem_size(&bad[i]), 0);
        err[0] = '\0';
        assert_int_equal(ring_mem_format(mem, sizeof mem, &bad[i], err, sizeof err), -EINVAL);
        assert_true(strlen(err) > 0);
    }
    assert_int_equal(ring_mem_size(NULL), 0);

    struct ring_params p = {.entry_size = 16, .capacity = 64};
    size_t need = ring_mem_size(&p);
    assert_true(need > 64 * 16 && need <= sizeof mem);
    assert_int_equal(ring_mem_format(mem, need - 1, &p, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "needed"));
    assert_int_equal(ring_mem_format(mem + 64, need, &p, err, sizeof err), -EINVAL); /* misaligned */

    struct ring r;
    memset(mem, 0, sizeof mem);
    assert_int_equal(ring_init(&r, mem, sizeof mem, err, sizeof err), -EINVAL); /* never formatted */
    assert_non_null(strstr(err, "does not hold a formatted ring"));
    assert_int_equal(ring_mem_format(mem, need, &p, err, sizeof err), 0);
    assert_int_equal(ring_init(&r, mem, need - 1, err, sizeof err), -EINVAL); /* mapped too little */
    assert_int_equal(ring_init(&r, mem, need, err, sizeof err), 0);
    assert_int_equal(r.entry_size, 16);
    assert_int_equal(r.capacity, 64);
    ring_free(&r);
    ring_free(&r);
    ring_free(NULL);
    /* damaged header fields */
    uint32_t *words = (uint32_t *)mem;
    words[2]++; /* version */
    assert_int_equal(ring_init(&r, mem, need, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "version"));
    words[2]--;
    words[4] = 3; /* stride */
    assert_int_equal(ring_init(&r, mem, need, err, sizeof err), -EINVAL);
}

/* ---- single-threaded semantics --------------------------------------------------------- */

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond))                                                                                                   \
            fail_msg("entry=%u capacity=%u: %s (%s:%d)", entry, cap, #cond, __FILE__, __LINE__);                       \
    } while (0)

static void test_fifo_full_empty_sizes(void **state)
{
    const uint32_t entries[] = {1, 7, 8, 16, 63, 64, 100, 4096};
    const uint32_t caps[] = {2, 8, 64};
    unsigned char in[RING_ENTRY_MAX], out[RING_ENTRY_MAX];
    for (size_t ei = 0; ei < SL_ARRAY_LEN(entries); ei++) {
        for (size_t ci = 0; ci < SL_ARRAY_LEN(caps); ci++) {
            uint32_t entry = entries[ei], cap = caps[ci];
            void *mem;
            struct ring *r = t_ring_new(entry, cap, 0, &mem);
            uint64_t pushed = 0, popped = 0;
            for (int lap = 0; lap < 3; lap++) {
                for (uint32_t i = 0; i < cap; i++) {
                    t_fill(in, entry, pushed);
                    CHECK(ring_push(r, in, 0) == 0);
                    pushed++;
                }
                CHECK(ring_count(r) == cap);
                t_fill(in, entry, 999);
                CHECK(ring_push(r, in, 0) == -EAGAIN);
                /* a slot overwritten by the failed push would show below */
                for (uint32_t i = 0; i < cap; i++) {
                    memset(out, 0, entry);
                    CHECK(ring_pop(r, out, 0) == 0);
                    CHECK(t_check(out, entry, popped));
                    popped++;
                }
                CHECK(ring_pop(r, out, 0) == -EAGAIN);
                CHECK(ring_count(r) == 0);
                /* interleaved: push 1, pop 1 across the wrap */
                for (uint32_t i = 0; i < cap + 3; i++) {
                    t_fill(in, entry, pushed++);
                    CHECK(ring_push(r, in, RING_FOREVER) == 0);
                    CHECK(ring_pop(r, out, RING_FOREVER) == 0);
                    CHECK(t_check(out, entry, popped++));
                }
            }
            t_ring_del(r, mem);
        }
    }
}

static void test_timeouts(void **state)
{
    void *mem;
    struct ring *r = t_ring_new(16, 4, 0, &mem);
    unsigned char e[16] = {0};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(ring_pop(r, e, 50), -ETIMEDOUT);
    assert_true(t_ms_since(&t0) >= 45.0); /* waited (at least about) as long as asked */
    for (int i = 0; i < 4; i++)
        assert_int_equal(ring_push(r, e, 0), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(ring_push(r, e, 1200), -ETIMEDOUT); /* crosses a second boundary in the deadline */
    assert_true(t_ms_since(&t0) >= 1150.0);
    assert_int_equal(ring_count(r), 4);
    t_ring_del(r, mem);
}

static void test_close_semantics(void **state)
{
    void *mem;
    struct ring *r = t_ring_new(8, 8, 0, &mem);
    for (uint64_t i = 0; i < 5; i++)
        assert_int_equal(ring_push(r, &i, 0), 0);
    assert_false(ring_is_closed(r));
    ring_close(r);
    assert_true(ring_is_closed(r));
    uint64_t v = 77;
    assert_int_equal(ring_push(r, &v, 0), -EPIPE);
    assert_int_equal(ring_push(r, &v, RING_FOREVER), -EPIPE);
    assert_int_equal(ring_push(r, &v, 100), -EPIPE);
    ring_close(r); /* idempotent */
    for (uint64_t i = 0; i < 5; i++) {
        assert_int_equal(ring_pop(r, &v, RING_FOREVER), 0);
        assert_int_equal(v, i);
    }
    assert_int_equal(ring_pop(r, &v, 0), -EPIPE);
    assert_int_equal(ring_pop(r, &v, RING_FOREVER), -EPIPE);
    assert_int_equal(ring_pop(r, &v, 100), -EPIPE);
    assert_int_equal(ring_count(r), 0);
    t_ring_del(r, mem);

    /* closing an empty ring ends the stream at once */
    r = t_ring_new(8, 2, 0, &mem);
    ring_close(r);
    assert_int_equal(ring_pop(r, &v, RING_FOREVER), -EPIPE);
    t_ring_del(r, mem);
}

static void test_zero_copy_and_dropped_claim(void **state)
{
    void *mem;
    struct ring *r = t_ring_new(8, 4, 0, &mem);
    struct ring_ticket t0, t1, t;
    uint64_t v;
    /* a claimed slot that is never published holds consumers at its position */
    assert_int_equal(ring_push_start(r, &t0, 0), 0);
    assert_int_equal(t0.pos, 0);
    assert_int_equal(ring_push_start(r, &t1, 0), 0);
    *(uint64_t *)t1.entry = 42;
    assert_int_equal(ring_push_finish(r, &t1), 0);
    assert_int_equal(ring_pop(r, &v, 0), -EAGAIN);
    assert_int_equal(ring_pop(r, &v, 20), -ETIMEDOUT);
    assert_int_equal(ring_count(r), 2);
    /* close: the dead claim is dropped, what is behind it is delivered */
    ring_close(r);
    assert_int_equal(ring_pop(r, &v, 5000), 0); /* bounded: a broken drop would hang */
    assert_int_equal(v, 42);
    assert_int_equal(ring_pop(r, &v, 5000), -EPIPE);
    /* the late producer learns its entry was not delivered */
    *(uint64_t *)t0.entry = 41;
    assert_int_equal(ring_push_finish(r, &t0), -EPIPE);
    assert_int_equal(ring_pop(r, &v, 0), -EPIPE);
    t_ring_del(r, mem);

    /* a claim finished after close but before any consumer got there is delivered */
    r = t_ring_new(8, 4, 0, &mem);
    assert_int_equal(ring_push_start(r, &t0, 0), 0);
    ring_close(r);
    assert_int_equal(ring_push_start(r, &t1, 0), -EPIPE);
    *(uint64_t *)t0.entry = 7;
    assert_int_equal(ring_push_finish(r, &t0), 0);
    assert_int_equal(ring_pop(r, &v, 0), 0);
    assert_int_equal(v, 7);
    assert_int_equal(ring_pop(r, &v, 0), -EPIPE);
    t_ring_del(r, mem);

    /* an unfinished pop holds producers at its slot's next lap */
    r = t_ring_new(8, 2, 0, &mem);
    for (v = 1; v <= 2; v++)
        assert_int_equal(ring_push(r, &v, 0), 0);
    assert_int_equal(ring_pop_start(r, &t, 0), 0);
    assert_int_equal(*(uint64_t *)t.entry, 1);
    assert_int_equal(ring_push(r, &v, 0), -EAGAIN);
    ring_pop_finish(r, &t);
    assert_int_equal(ring_push(r, &v, 0), 0);
    assert_int_equal(ring_pop(r, &v, 0), 0);
    assert_int_equal(v, 2);
    assert_int_equal(ring_pop(r, &v, 0), 0);
    assert_int_equal(v, 3);
    t_ring_del(r, mem);
}

static void test_producer_done(void **state)
{
    void *mem;
    struct ring *r = t_ring_new(8, 4, 2, &mem);
    uint64_t v = 5;
    assert_int_equal(ring_push(r, &v, 0), 0);
    assert_int_equal(ring_producer_done(r), 0);
    assert_false(ring_is_closed(r));
    assert_int_equal(ring_push(r, &v, 0), 0);
    assert_int_equal(ring_producer_done(r), 0);
    assert_true(ring_is_closed(r));
    assert_int_equal(ring_producer_done(r), -EINVAL);
    assert_int_equal(ring_pop(r, &v, 0), 0);
    assert_int_equal(ring_pop(r, &v, 0), 0);
    assert_int_equal(ring_pop(r, &v, 0), -EPIPE);
    t_ring_del(r, mem);

    r = t_ring_new(8, 4, 0, &mem);
    assert_int_equal(ring_producer_done(r), -EINVAL); /* none declared */
    assert_false(ring_is_closed(r));
    t_ring_del(r, mem);
}

/* ---- rings in named segments ----------------------------------------------------------- */

static int seg_teardown(void **state)
{
    shm_run_unlink(g_run);
    char prefix[SHM_NAME_MAX];
    char ns[SHM_PREFIX_MAX];
    shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
    snprintf(prefix, sizeof prefix, SHM_DIR "/%s%s.", ns, g_run);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls %s* >/dev/null 2>&1", prefix);
    return system(cmd) == 0 ? -1 : 0; /* fails if anything of the run is left */
}

static void test_segment_ring(void **state)
{
    char err[512];
    struct ring a, b;
    struct ring_params p = {.entry_size = 24, .capacity = 16};
    assert_int_equal(ring_create(&a, g_run, "ring.q", &p, err, sizeof err), 0);
    assert_int_equal(ring_attach(&b, a.seg.name, err, sizeof err), 0);
    unsigned char e[24], o[24];
    for (uint64_t i = 0; i < 40; i++) {
        t_fill(e, sizeof e, i);
        assert_int_equal(ring_push(&a, e, 0), 0);
        assert_int_equal(ring_pop(&b, o, 0), 0);
        assert_true(t_check(o, sizeof o, i));
    }
    ring_close(&b);
    assert_true(ring_is_closed(&a));
    assert_int_equal(ring_push(&a, e, 0), -EPIPE);

    /* same name twice, wrong parameters, wrong kind, damaged ring */
    struct ring c;
    assert_int_equal(ring_create(&c, g_run, "ring.q", &p, err, sizeof err), -EEXIST);
    struct ring_params bad = {.entry_size = 24, .capacity = 15};
    assert_int_equal(ring_create(&c, g_run, "ring.bad", &bad, err, sizeof err), -EINVAL);
    char badname[SHM_NAME_MAX];
    assert_int_equal(shm_name(badname, sizeof badname, g_run, "ring.bad", NULL, 0), 0);
    assert_int_equal(shm_seg_unlink(badname), -ENOENT); /* nothing was left behind */
    struct shm_seg raw;
    assert_int_equal(shm_seg_create(&raw, g_run, "raw", SHM_KIND_RAW, 4096, err, sizeof err), 0);
    err[0] = '\0';
    assert_int_equal(ring_attach(&c, raw.name, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, raw.name));
    shm_seg_detach(&raw);
    *(uint64_t *)a.seg.data ^= 1; /* ring magic */
    err[0] = '\0';
    assert_int_equal(ring_attach(&c, a.seg.name, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, a.seg.name));
    assert_null(c.sh);
    assert_int_equal(ring_attach(&c, "/sluice.nosuchrun.q", err, sizeof err), -ENOENT);
    ring_free(&b);
    ring_free(&a);
    ring_free(&c);
}

/* ---- threads ------------------------------------------------------------------------ */

struct sleeper {
    struct ring *r;
    bool push;
    int timeout_ms;
    int rc;
    uint64_t value;
    _Atomic bool done;
};

static void *sleeper_main(void *arg)
{
    struct sleeper *s = arg;
    s->rc = s->push ? ring_push(s->r, &s->value, s->timeout_ms) : ring_pop(s->r, &s->value, s->timeout_ms);
    atomic_store(&s->done, true);
    return NULL;
}

static void t_pause_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Sleepers on an empty or full ring are woken by a push, a pop, or close.
 * The pauses only make it likely that the thread is asleep by then; the
 * outcome asserted holds either way. */
static void test_blocking_wakeups(void **state)
{
    void *mem;
    struct ring *r = t_ring_new(8, 2, 0, &mem);
    pthread_t th;
    struct sleeper s = {.r = r, .push = false, .timeout_ms = RING_FOREVER};
    assert_int_equal(pthread_create(&th, NULL, sleeper_main, &s), 0);
    t_pause_ms(30);
    uint64_t v = 99;
    assert_int_equal(ring_push(r, &v, 0), 0);
    pthread_join(th, NULL);
    assert_int_equal(s.rc, 0);
    assert_int_equal(s.value, 99);

    /* a producer asleep on a full ring is woken by a pop */
    for (v = 1; v <= 2; v++)
        assert_int_equal(ring_push(r, &v, 0), 0);
    s = (struct sleeper){.r = r, .push = true, .timeout_ms = 10000, .value = 3};
    assert_int_equal(pthread_create(&th, NULL, sleeper_main, &s), 0);
    t_pause_ms(30);
    assert_int_equal(ring_pop(r, &v, 0), 0);
    assert_int_equal(v, 1);
    pthread_join(th, NULL);
    assert_int_equal(s.rc, 0);

    /* sleepers on both sides are woken by close */
    struct sleeper ps = {.r = r, .push = true, .timeout_ms = RING_FOREVER, .value = 4};
    pthread_t pt;
    assert_int_equal(pthread_create(&pt, NULL, sleeper_main, &ps), 0);
    void *mem2;
    struct ring *empty = t_ring_new(8, 2, 0, &mem2);
    struct sleeper cs[3];
    pthread_t ct[3];
    for (int i = 0; i < 3; i++) {
        cs[i] = (struct sleeper){.r = empty, .push = false, .timeout_ms = RING_FOREVER};
        assert_int_equal(pthread_create(&ct[i], NULL, sleeper_main, &cs[i]), 0);
    }
    t_pause_ms(30);
    ring_close(r);
    ring_close(empty);
    pthread_join(pt, NULL);
    assert_int_equal(ps.rc, -EPIPE);
    for (int i = 0; i < 3; i++) {
        pthread_join(ct[i], NULL);
        assert_int_equal(cs[i].rc, -EPIPE);
    }
    t_ring_del(empty, mem2);
    t_ring_del(r, mem);
}

/* Joins n threads blocked on r, giving them 10 s (a wake-up bound, not a
 * speed test); on expiry closes r so they return, and fails. */
static void t_join_or_close(pthread_t *th, int n, struct ring *r, const char *who)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 10;
    bool stuck = false;
    for (int i = 0; i < n; i++) {
        if (pthread_timedjoin_np(th[i], NULL, &dl) != 0) {
            stuck = true;
            ring_close(r);
            pthread_join(th[i], NULL);
        }
    }
    if (stuck)
        fail_msg("a %s was never woken although its entry/slot was ready", who);
}

/* Entries published out of order must not sit in the ring while a consumer
 * sleeps: two consumers each pop once; the entry at position 1 is published
 * while position 0 is still claimed, so the wake-up it sends finds nothing
 * at the head; publishing position 0 wakes one consumer, which must pass
 * the wake-up on for position 1 (and the same for producers and slots
 * released out of order). Without the chained wake-up the second caller
 * sleeps on (it would only find its entry when its own timeout ran out). */
static void test_chained_wakeups(void **state)
{
    void *mem;
    struct ring *r = t_ring_new(8, 4, 0, &mem);
    struct sleeper s[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        s[i] = (struct sleeper){.r = r, .push = false, .timeout_ms = RING_FOREVER};
        assert_int_equal(pthread_create(&th[i], NULL, sleeper_main, &s[i]), 0);
    }
    t_pause_ms(50);
    struct ring_ticket t0;
    uint64_t v = 11;
    assert_int_equal(ring_push_start(r, &t0, 0), 0);
    assert_int_equal(ring_push(r, &v, 0), 0); /* position 1, behind the open claim */
    t_pause_ms(50);
    *(uint64_t *)t0.entry = 10;
    assert_int_equal(ring_push_finish(r, &t0), 0);
    t_join_or_close(th, 2, r, "consumer");
    for (int i = 0; i < 2; i++)
        assert_int_equal(s[i].rc, 0);
    assert_int_equal(s[0].value + s[1].value, 21);
    t_ring_del(r, mem);

    /* producers: a full ring whose slots are released out of order */
    r = t_ring_new(8, 2, 0, &mem);
    for (v = 1; v <= 2; v++)
        assert_int_equal(ring_push(r, &v, 0), 0);
    for (int i = 0; i < 2; i++) {
        s[i] = (struct sleeper){.r = r, .push = true, .timeout_ms = RING_FOREVER, .value = 3 + (uint64_t)i};
        assert_int_equal(pthread_create(&th[i], NULL, sleeper_main, &s[i]), 0);
    }
    t_pause_ms(50);
    struct ring_ticket p0;
    assert_int_equal(ring_pop_start(r, &p0, 0), 0); /* holds slot 0 */
    assert_int_equal(ring_pop(r, &v, 0), 0);        /* frees slot 1 first */
    t_pause_ms(50);
    ring_pop_finish(r, &p0);
    t_join_or_close(th, 2, r, "producer");
    for (int i = 0; i < 2; i++)
        assert_int_equal(s[i].rc, 0);
    uint64_t a, b;
    assert_int_equal(ring_pop(r, &a, 0), 0);
    assert_int_equal(ring_pop(r, &b, 0), 0);
    assert_int_equal(a + b, 7);
    t_ring_del(r, mem);
}

static void on_usr1(int sig)
{
    (void)sig;
}

static void test_eintr(void **state)
{
    struct sigaction sa = {.sa_handler = on_usr1}; /* no SA_RESTART */
    struct sigaction old;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    void *mem;
    struct ring *r = t_ring_new(8, 2, 0, &mem);
    struct sleeper s = {.r = r, .push = false, .timeout_ms = 20000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, sleeper_main, &s), 0);
    /* Signal until the pop returns: a signal that lands before the thread
     * sleeps is absorbed by the handler, the next one interrupts the wait. */
    while (!atomic_load(&s.done)) {
        t_pause_ms(20);
        pthread_kill(th, SIGUSR1);
    }
    pthread_join(th, NULL);
    assert_int_equal(s.rc, -EINTR);
    sigaction(SIGUSR1, &old, NULL);
    t_ring_del(r, mem);
}

/* Exactly-once MPMC between threads: every (producer, seq) arrives once,
 * each consumer sees each producer's entries in increasing order. */
struct mt {
    struct ring *r;
    uint32_t producers, consumers;
    uint64_t per_producer;
    bool zero_copy;
    _Atomic uint64_t *seen; /* bitmap: producers x per_producer */
    _Atomic uint64_t dups, misorders, corrupt, popped;
    _Atomic uint32_t next_producer, next_consumer;
    /* close mid-stream */
    uint64_t close_after; /* consumer 0 closes after this many pops (0: never) */
    uint64_t ok[16];      /* pushes that returned 0, per producer */
};

struct mt_item {
    uint32_t producer;
    uint32_t check;
    uint64_t seq;
};

static uint32_t mt_check(uint32_t p, uint64_t s)
{
    return (uint32_t)((p + 1) * 2654435761u ^ (uint32_t)(s * 40503u));
}

static void *mt_producer(void *arg)
{
    struct mt *m = arg;
    uint32_t id = atomic_fetch_add(&m->next_producer, 1);
    uint64_t s;
    for (s = 0; s < m->per_producer; s++) {
        struct mt_item it = {.producer = id, .check = mt_check(id, s), .seq = s};
        int rc;
        if (m->zero_copy) {
            struct ring_ticket t;
            rc = ring_push_start(m->r, &t, RING_FOREVER);
            if (rc == 0) {
                memcpy(t.entry, &it, sizeof it);
                rc = ring_push_finish(m->r, &t);
            }
        } else {
            rc = ring_push(m->r, &it, RING_FOREVER);
        }
        if (rc == -EPIPE)
            break;
        if (rc != 0)
            abort();
    }
    m->ok[id] = s;
    if (!m->close_after)
        ring_producer_done(m->r);
    return NULL;
}

static void *mt_consumer(void *arg)
{
    struct mt *m = arg;
    uint64_t next[16] = {0};
    uint64_t n = 0;
    struct mt_item it;
    bool closer = m->close_after && atomic_fetch_add(&m->next_consumer, 1) == 0;
    for (;;) {
        int rc;
        if (m->zero_copy) {
            struct ring_ticket t;
            rc = ring_pop_start(m->r, &t, RING_FOREVER);
            if (rc == 0) {
                memcpy(&it, t.entry, sizeof it);
                ring_pop_finish(m->r, &t);
            }
        } else {
            rc = ring_pop(m->r, &it, RING_FOREVER);
        }
        if (rc == -EPIPE)
            break;
        if (rc != 0)
            abort();
        n++;
        if (it.producer >= m->producers || it.seq >= m->per_producer || it.check != mt_check(it.producer, it.seq)) {
            atomic_fetch_add(&m->corrupt, 1);
            continue;
        }
        if (it.seq < next[it.producer])
            atomic_fetch_add(&m->misorders, 1);
        next[it.producer] = it.seq + 1;
        uint64_t bit = (uint64_t)it.producer * m->per_producer + it.seq;
        uint64_t old = atomic_fetch_or(&m->seen[bit / 64], UINT64_C(1) << (bit % 64));
        if (old & (UINT64_C(1) << (bit % 64)))
            atomic_fetch_add(&m->dups, 1);
        if (closer && n == m->close_after)
            ring_close(m->r);
    }
    atomic_fetch_add(&m->popped, n);
    return NULL;
}

static void mt_run(uint32_t producers, uint32_t consumers, uint32_t cap, uint64_t per_producer, bool zero_copy,
                   uint64_t close_after)
{
    void *mem;
    struct mt m = {.producers = producers,
                   .consumers = consumers,
                   .per_producer = per_producer,
                   .zero_copy = zero_copy,
                   .close_after = close_after};
    m.r = t_ring_new(sizeof(struct mt_item), cap, close_after ? 0 : producers, &mem);
    uint64_t bits = (uint64_t)producers * per_producer;
    m.seen = calloc((bits + 63) / 64, sizeof *m.seen);
    assert_non_null(m.seen);
    pthread_t th[32];
    uint32_t n = 0;
    for (uint32_t i = 0; i < producers; i++)
        assert_int_equal(pthread_create(&th[n++], NULL, mt_producer, &m), 0);
    for (uint32_t i = 0; i < consumers; i++)
        assert_int_equal(pthread_create(&th[n++], NULL, mt_consumer, &m), 0);
    for (uint32_t i = 0; i < n; i++)
        pthread_join(th[i], NULL);

    char what[128];
    snprintf(what, sizeof what, "%ux%u capacity=%u zero_copy=%d close_after=%llu", producers, consumers, cap, zero_copy,
             (unsigned long long)close_after);
    if (m.dups || m.misorders || m.corrupt)
        fail_msg("%s: %llu duplicates, %llu out of order, %llu corrupt", what, (unsigned long long)m.dups,
                 (unsigned long long)m.misorders, (unsigned long long)m.corrupt);
    /* delivered set == exactly the successful pushes */
    uint64_t expect = 0;
    for (uint32_t p = 0; p < producers; p++) {
        if (!close_after && m.ok[p] != per_producer)
            fail_msg("%s: producer %u pushed %llu of %llu", what, p, (unsigned long long)m.ok[p],
                     (unsigned long long)per_producer);
        for (uint64_t s = 0; s < per_producer; s++) {
            uint64_t bit = (uint64_t)p * per_producer + s;
            bool got = (atomic_load(&m.seen[bit / 64]) >> (bit % 64)) & 1;
            if (got != (s < m.ok[p]))
                fail_msg("%s: producer %u seq %llu: %s", what, p, (unsigned long long)s,
                         got ? "delivered but its push failed" : "pushed but never delivered");
        }
        expect += m.ok[p];
    }
    if (atomic_load(&m.popped) != expect)
        fail_msg("%s: popped %llu, expected %llu", what, (unsigned long long)m.popped, (unsigned long long)expect);
    if (close_after && expect >= (uint64_t)producers * per_producer)
        fail_msg("%s: the close came after everything was pushed; nothing was tested", what);
    free(m.seen);
    t_ring_del(m.r, mem);
}

static uint64_t t_scale(uint64_t n)
{
    const char *s = getenv("SLUICE_TEST_SCALE"); /* e.g. 0.1 under TSan if needed */
    double f = s ? atof(s) : 1.0;
    return f > 0 ? (uint64_t)((double)n * f) + 1 : n;
}

static void test_threads_exactly_once(void **state)
{
    const struct {
        uint32_t p, c, cap;
    } cfg[] = {
        {1, 1, 2}, {1, 1, 1024}, {4, 4, 2}, {4, 4, 64}, {1, 4, 16}, {4, 1, 16}, {3, 3, 4},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cfg); i++)
        for (int zc = 0; zc < 2; zc++)
            mt_run(cfg[i].p, cfg[i].c, cfg[i].cap, t_scale(20000), zc, 0);
}

static void test_threads_close_midstream(void **state)
{
    for (int zc = 0; zc < 2; zc++) {
        mt_run(3, 3, 8, 1000000, zc, t_scale(5000));
        mt_run(4, 1, 2, 1000000, zc, t_scale(3000));
    }
}

int main(void)
{
    assert_int_equal(shm_run_id_new(g_run, sizeof g_run), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_fifo_full_empty_sizes),
        cmocka_unit_test(test_timeouts),
        cmocka_unit_test(test_close_semantics),
        cmocka_unit_test(test_zero_copy_and_dropped_claim),
        cmocka_unit_test(test_producer_done),
        cmocka_unit_test_teardown(test_segment_ring, seg_teardown),
        cmocka_unit_test(test_blocking_wakeups),
        cmocka_unit_test(test_chained_wakeups),
        cmocka_unit_test(test_eintr),
        cmocka_unit_test(test_threads_exactly_once),
        cmocka_unit_test(test_threads_close_midstream),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    shm_run_unlink(g_run);
    return rc;
}
