/* test_ring_mp.c - the ring queue across processes, under stress and under
 * failure. Producers and consumers are fork()ed children that attach the
 * ring by name, as stages do. Entries are 16 bytes {producer, check, seq}
 * where check is a function of a per-run seed, so every consumer verifies
 * what it gets on its own (nccl-tests' verifiable data). Consumers record
 * each entry in a bitmap in a shared results segment with an atomic
 * fetch_or, which also catches duplicates; the parent then checks the
 * delivered set against what the producers report as pushed.
 *
 * Cases: N x M exactly-once (3x3, 1x4, 4x1), close in mid-stream, a
 * producer SIGKILLed at a random moment, a producer SIGKILLed holding a
 * claimed-but-unpublished slot, and a consumer SIGKILLed mid-run. In every
 * failure case the parent notices the death (waitpid), closes the ring and
 * expects every other child to exit cleanly; an alarm bounds each case so a
 * hang fails the test instead of stalling the suite, and kills the children
 * and removes the run's segments when it fires. */
#include "t_util.h"
#include "t_mp.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "core/util.h"
#include "ipc/ring.h"
#include "ipc/shm.h"

#define MAX_PROD 8
#define MAX_CONS 8
#define CASE_ALARM_S 60

enum mp_mode {
    MP_NORMAL,        /* every producer pushes everything; the last one closes */
    MP_CLOSE_MID,     /* consumer 0 closes after close_after pops */
    MP_KILL_PRODUCER, /* the parent SIGKILLs producer 0 after kill_after pops */
    MP_KILL_CLAIM,    /* producer 0 dies by SIGKILL between claiming and publishing */
    MP_KILL_CONSUMER, /* the parent SIGKILLs consumer 0 after kill_after pops */
};

static const char *mode_name[] = {"normal", "close-mid", "kill-producer", "kill-claim", "kill-consumer"};

struct mp_cfg {
    uint32_t producers, consumers, capacity;
    uint64_t per_producer; /* entries each producer tries to push */
    enum mp_mode mode;
    uint64_t after; /* pops before the close/kill */
};

struct mp_item {
    uint32_t producer;
    uint32_t check;
    uint64_t seq;
};
_Static_assert(sizeof(struct mp_item) == 16, "16-byte entries");

/* Results segment: counters, then the bitmap (producers x per_producer). */
struct mp_results {
    _Atomic uint64_t popped; /* by all consumers */
    _Atomic uint64_t dups, misorders, corrupt;
    _Atomic uint64_t pushed_ok[MAX_PROD]; /* successful pushes, reported at exit */
    _Atomic uint32_t producer_done[MAX_PROD];
    _Atomic uint64_t bitmap[];
};

static uint32_t g_seed;

static uint32_t item_check(uint32_t p, uint64_t s)
{
    uint64_t x = ((uint64_t)g_seed << 32 | p) ^ (s * 0x9E3779B97F4A7C15ull);
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 32;
    return (uint32_t)x;
}

/* ---- hang guard ------------------------------------------------------------------------- */

/* ---- children --------------------------------------------------------------------------- */

static int producer_main(const char *ring_name, struct mp_results *res, const struct mp_cfg *c, uint32_t id)
{
    struct ring r;
    char err[256];
    if (ring_attach(&r, ring_name, err, sizeof err) != 0) {
        fprintf(stderr, "producer %u: %s\n", id, err);
        return 10;
    }
    uint64_t s;
    int rc = 0;
    for (s = 0; s < c->per_producer; s++) {
        struct mp_item it = {.producer = id, .check = item_check(id, s), .seq = s};
        if (c->mode == MP_KILL_CLAIM && id == 0 && s == c->after) {
            struct ring_ticket t;
            if (ring_push_start(&r, &t, RING_FOREVER) == 0) {
                memcpy(t.entry, &it, sizeof it / 2); /* half-written, never published */
                raise(SIGKILL);
            }
            return 11;
        }
        rc = ring_push(&r, &it, RING_FOREVER);
        if (rc)
            break;
    }
    atomic_store(&res->pushed_ok[id], s);
    atomic_store(&res->producer_done[id], 1);
    if (rc != 0 && rc != -EPIPE) {
        fprintf(stderr, "producer %u: push: %s\n", id, strerror(-rc));
        return 12;
    }
    if (c->mode == MP_NORMAL)
        ring_producer_done(&r);
    ring_free(&r);
    return 0;
}

static int consumer_main(const char *ring_name, struct mp_results *res, const struct mp_cfg *c, uint32_t id)
{
    struct ring r;
    char err[256];
    if (ring_attach(&r, ring_name, err, sizeof err) != 0) {
        fprintf(stderr, "consumer %u: %s\n", id, err);
        return 20;
    }
    uint64_t next[MAX_PROD] = {0};
    uint64_t n = 0;
    int rc;
    struct mp_item it;
    while ((rc = ring_pop(&r, &it, RING_FOREVER)) == 0) {
        n++;
        if (it.producer >= c->producers || it.seq >= c->per_producer || it.check != item_check(it.producer, it.seq)) {
            atomic_fetch_add(&res->corrupt, 1);
        } else {
            if (it.seq < next[it.producer])
                atomic_fetch_add(&res->misorders, 1);
            next[it.producer] = it.seq + 1;
            uint64_t bit = (uint64_t)it.producer * c->per_producer + it.seq;
            uint64_t mask = UINT64_C(1) << (bit % 64);
            if (atomic_fetch_or(&res->bitmap[bit / 64], mask) & mask)
                atomic_fetch_add(&res->dups, 1);
        }
        atomic_fetch_add_explicit(&res->popped, 1, memory_order_relaxed);
        if (c->mode == MP_CLOSE_MID && id == 0 && n == c->after)
            ring_close(&r);
    }
    ring_free(&r);
    if (rc != -EPIPE) {
        fprintf(stderr, "consumer %u: pop: %s\n", id, strerror(-rc));
        return 21;
    }
    return 0;
}

/* ---- parent ----------------------------------------------------------------------------- */

static void pause_ms(int ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void run_case(const struct mp_cfg *c)
{
    char what[160];
    snprintf(what, sizeof what, "%s %ux%u capacity=%u per_producer=%llu after=%llu seed=%#x", mode_name[c->mode],
             c->producers, c->consumers, c->capacity, (unsigned long long)c->per_producer, (unsigned long long)c->after,
             g_seed);
    assert_true(c->producers <= MAX_PROD && c->consumers <= MAX_CONS);
    char err[512];
    uint64_t bits = (uint64_t)c->producers * c->per_producer;
    struct shm_seg rseg;
    assert_int_equal(shm_seg_create(&rseg, t_mp_run, "results", SHM_KIND_RAW,
                                    sizeof(struct mp_results) + (bits + 63) / 64 * 8, err, sizeof err),
                     0);
    struct mp_results *res = rseg.data;
    struct ring r;
    struct ring_params rp = {.entry_size = sizeof(struct mp_item),
                             .capacity = c->capacity,
                             .producers = c->mode == MP_NORMAL ? c->producers : 0};
    if (ring_create(&r, t_mp_run, "ring", &rp, err, sizeof err) != 0)
        fail_msg("%s: %s", what, err);

    alarm(CASE_ALARM_S);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    t_mp_nchildren = 0;
    pid_t cons[MAX_CONS], prod[MAX_PROD];
    for (uint32_t i = 0; i < c->consumers + c->producers; i++) {
        bool is_cons = i < c->consumers;
        uint32_t id = is_cons ? i : i - c->consumers;
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            t_mp_child_init();
            _exit(is_cons ? consumer_main(r.seg.name, res, c, id) : producer_main(r.seg.name, res, c, id));
        }
        (is_cons ? cons : prod)[id] = pid;
        t_mp_track(pid);
    }

    /* Failure injection, then the supervisor's reaction: notice, close. */
    pid_t victim = 0;
    if (c->mode == MP_KILL_PRODUCER || c->mode == MP_KILL_CONSUMER) {
        while (atomic_load(&res->popped) < c->after)
            pause_ms(1);
        victim = c->mode == MP_KILL_PRODUCER ? prod[0] : cons[0];
        kill(victim, SIGKILL);
    } else if (c->mode == MP_KILL_CLAIM) {
        victim = prod[0];
    }
    if (victim) {
        int st;
        assert_int_equal(waitpid(victim, &st, 0), victim);
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
            fail_msg("%s: the victim was not killed by SIGKILL (status %#x)", what, st);
        if (c->mode == MP_KILL_PRODUCER && atomic_load(&res->producer_done[0]))
            fail_msg("%s: producer 0 finished before it was killed; nothing was tested", what);
        ring_close(&r);
    }
    for (uint32_t i = 0; i < c->consumers + c->producers; i++) {
        pid_t pid = t_mp_children[i];
        if (pid == victim)
            continue;
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("%s: child %u (pid %d) ended with status %#x", what, i, (int)pid, st);
    }
    alarm(0);
    t_mp_nchildren = 0;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;

    /* Verification. */
    if (res->dups || res->misorders || res->corrupt)
        fail_msg("%s: %llu duplicates, %llu out of producer order, %llu corrupt", what, (unsigned long long)res->dups,
                 (unsigned long long)res->misorders, (unsigned long long)res->corrupt);
    uint64_t delivered = 0, missing = 0, attempted = 0;
    for (uint32_t p = 0; p < c->producers; p++) {
        bool known = !(victim && p == 0 && c->mode != MP_KILL_CONSUMER);
        uint64_t ok = known ? res->pushed_ok[p] : 0;
        if (c->mode == MP_KILL_CLAIM && p == 0)
            ok = c->after; /* everything before the dead claim was pushed */
        if (!known && c->mode == MP_KILL_PRODUCER) {
            /* killed at a random point: what arrived must be a prefix */
            uint64_t s = 0;
            for (; s < c->per_producer; s++) {
                uint64_t bit = (uint64_t)p * c->per_producer + s;
                if (!((res->bitmap[bit / 64] >> (bit % 64)) & 1))
                    break;
            }
            ok = s;
        }
        attempted += ok;
        for (uint64_t s = 0; s < c->per_producer; s++) {
            uint64_t bit = (uint64_t)p * c->per_producer + s;
            bool got = (res->bitmap[bit / 64] >> (bit % 64)) & 1;
            delivered += got;
            if (got && s >= ok)
                fail_msg("%s: producer %u seq %llu delivered, but its push did not succeed (pushed %llu)", what, p,
                         (unsigned long long)s, (unsigned long long)ok);
            if (!got && s < ok)
                missing++;
        }
    }
    /* a consumer killed between recording an entry and counting it */
    uint64_t popped = atomic_load(&res->popped);
    if (popped != delivered && !(c->mode == MP_KILL_CONSUMER && popped + 1 == delivered))
        fail_msg("%s: consumers popped %llu entries but %llu distinct ones were recorded", what,
                 (unsigned long long)popped, (unsigned long long)delivered);
    /* Only a consumer that died can lose what it had popped: at most one. */
    uint64_t may_lose = c->mode == MP_KILL_CONSUMER ? 1 : 0;
    if (missing > may_lose)
        fail_msg("%s: %llu pushed entries never delivered", what, (unsigned long long)missing);
    if (c->mode == MP_NORMAL && delivered != bits)
        fail_msg("%s: delivered %llu of %llu", what, (unsigned long long)delivered, (unsigned long long)bits);
    if (c->mode != MP_NORMAL && attempted >= bits)
        fail_msg("%s: the stream ended before the close/kill; nothing was tested", what);
    if (c->mode == MP_CLOSE_MID && delivered < c->after)
        fail_msg("%s: only %llu delivered", what, (unsigned long long)delivered);
    print_message("%s: delivered %llu in %.2f s\n", what, (unsigned long long)delivered, secs);

    ring_free(&r);
    shm_seg_detach(&rseg);
    shm_run_unlink(t_mp_run);
}

static uint64_t scaled(uint64_t n)
{
    const char *s = getenv("SLUICE_TEST_SCALE");
    double f = s ? atof(s) : 1.0;
    return f > 0 ? (uint64_t)((double)n * f) + 16 : n;
}

static void test_exactly_once_3x3(void **state)
{
    run_case(&(struct mp_cfg){.producers = 3, .consumers = 3, .capacity = 1024, .per_producer = scaled(400000)});
}

static void test_exactly_once_1x4(void **state)
{
    run_case(&(struct mp_cfg){.producers = 1, .consumers = 4, .capacity = 256, .per_producer = scaled(600000)});
}

static void test_exactly_once_4x1(void **state)
{
    run_case(&(struct mp_cfg){.producers = 4, .consumers = 1, .capacity = 64, .per_producer = scaled(150000)});
}

static void test_exactly_once_small_ring(void **state)
{
    /* capacity 2: every push and pop contends and wraps */
    run_case(&(struct mp_cfg){.producers = 2, .consumers = 2, .capacity = 2, .per_producer = scaled(50000)});
}

static void test_close_midstream(void **state)
{
    run_case(&(struct mp_cfg){.producers = 3,
                              .consumers = 3,
                              .capacity = 128,
                              .per_producer = 4000000,
                              .mode = MP_CLOSE_MID,
                              .after = scaled(200000)});
}

static void test_kill_producer(void **state)
{
    /* the kill lands at a moment decided by the scheduler: a few rounds */
    for (int round = 0; round < 3; round++)
        run_case(&(struct mp_cfg){.producers = 3,
                                  .consumers = 2,
                                  .capacity = 64,
                                  .per_producer = 4000000,
                                  .mode = MP_KILL_PRODUCER,
                                  .after = scaled(50000) * (uint64_t)(round + 1)});
}

static void test_kill_holding_claim(void **state)
{
    run_case(&(struct mp_cfg){.producers = 3,
                              .consumers = 3,
                              .capacity = 64,
                              .per_producer = 4000000,
                              .mode = MP_KILL_CLAIM,
                              .after = scaled(30000)});
}

static void test_kill_consumer(void **state)
{
    run_case(&(struct mp_cfg){.producers = 2,
                              .consumers = 3,
                              .capacity = 64,
                              .per_producer = 4000000,
                              .mode = MP_KILL_CONSUMER,
                              .after = scaled(100000)});
}

int main(void)
{
    t_mp_init("test_ring_mp");
    const char *seed = getenv("SLUICE_TEST_SEED");
    g_seed = seed ? (uint32_t)strtoul(seed, NULL, 0) : (uint32_t)time(NULL) ^ (uint32_t)getpid();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_exactly_once_3x3, t_mp_teardown),
        cmocka_unit_test_teardown(test_exactly_once_1x4, t_mp_teardown),
        cmocka_unit_test_teardown(test_exactly_once_4x1, t_mp_teardown),
        cmocka_unit_test_teardown(test_exactly_once_small_ring, t_mp_teardown),
        cmocka_unit_test_teardown(test_close_midstream, t_mp_teardown),
        cmocka_unit_test_teardown(test_kill_producer, t_mp_teardown),
        cmocka_unit_test_teardown(test_kill_holding_claim, t_mp_teardown),
        cmocka_unit_test_teardown(test_kill_consumer, t_mp_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    shm_run_unlink(t_mp_run);
    return rc;
}
