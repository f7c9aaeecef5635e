/* test_featbuf.c - the feature buffer (stages/featbuf.h): single-thread
 * semantics (hit, miss, LRU reuse order, rows kept on standby, -EAGAIN,
 * all-or-nothing batches, failed loads, timeouts, broken buffers) and a
 * multi-thread, multi-process stress with random batches and delays that
 * checks every row read against f(node), every reference released, at most
 * one load per node per residency, and no deadlock at S = extractors x
 * batch nodes. */
#include "tests/t_util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#include "ipc/shm.h"
#include "stages/featbuf.h"

#define ROW_BYTES 48u
#define ROW_WORDS (ROW_BYTES / 4u)

static uint32_t row_word(uint64_t node, uint32_t i) { return (uint32_t)(node * 2654435761u) ^ (i * 40503u + 7u); }

static void row_fill(struct featbuf *fb, uint32_t slot, uint64_t node)
{
    uint32_t *r = featbuf_row(fb, slot);
    for (uint32_t i = 0; i < ROW_WORDS; i++)
        r[i] = row_word(node, i);
}

static int row_ok(struct featbuf *fb, uint32_t slot, uint64_t node)
{
    const uint32_t *r = featbuf_row(fb, slot);
    for (uint32_t i = 0; i < ROW_WORDS; i++)
        if (r[i] != row_word(node, i))
            return 0;
    return 1;
}

/* An anonymous buffer in this process's memory (page aligned). */
static void *mk(struct featbuf *fb, uint64_t n_nodes, uint32_t nslots, size_t *len)
{
    struct featbuf_params p = {.n_nodes = n_nodes, .nslots = nslots, .row_bytes = ROW_BYTES};
    *len = featbuf_mem_size(&p);
    assert_true(*len > 0);
    void *mem = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    char err[256];
    assert_int_equal(featbuf_mem_format(mem, *len, &p, err, sizeof err), 0);
    assert_int_equal(featbuf_init(fb, mem, *len, err, sizeof err), 0);
    return mem;
}

static void checked(struct featbuf *fb)
{
    char err[256] = "";
    int rc = featbuf_check(fb, err, sizeof err);
    if (rc)
        fail_msg("featbuf_check: %s", err);
}

static uint32_t load(struct featbuf *fb, uint64_t node)
{
    uint32_t s;
    int action;
    assert_int_equal(featbuf_acquire(fb, node, &s, &action), 0);
    assert_int_equal(action, FEATBUF_LOAD);
    row_fill(fb, s, node);
    assert_int_equal(featbuf_loaded(fb, s), 0);
    return s;
}

static void test_params(void **state)
{
    (void)state;
    struct featbuf_params p = {.n_nodes = 1000, .nslots = 8, .row_bytes = 100, .row_align = 512};
    assert_int_equal(featbuf_map_bytes(&p), 4000);
    size_t with_rows = featbuf_mem_size(&p);
    assert_true(with_rows >= 4000 + 8 * 512);
    p.rows_on_device = true;
    size_t meta = featbuf_mem_size(&p);
    assert_true(meta > 4000 && meta < with_rows);
    p.row_align = 100; /* not a power of two */
    assert_int_equal(featbuf_mem_size(&p), 0);
    p.row_align = 0;
    p.nslots = 0;
    assert_int_equal(featbuf_mem_size(&p), 0);
    p.nslots = 8;
    p.n_nodes = UINT64_MAX / 2;
    assert_int_equal(featbuf_mem_size(&p), 0);
    /* garbage is refused */
    struct featbuf fb = {0};
    static _Alignas(4096) unsigned char junk[8192];
    memset(junk, 0x5a, sizeof junk);
    assert_int_equal(featbuf_init(&fb, junk, sizeof junk, NULL, 0), -EINVAL);
    /* a GPU rank's buffer has no rows here */
    size_t len;
    p = (struct featbuf_params){.n_nodes = 10, .nslots = 2, .row_bytes = 64, .rows_on_device = true};
    len = featbuf_mem_size(&p);
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_int_equal(featbuf_mem_format(mem, len, &p, NULL, 0), 0);
    assert_int_equal(featbuf_init(&fb, mem, len, NULL, 0), 0);
    assert_null(featbuf_row(&fb, 0));
    munmap(mem, len);
}

static void test_hit_miss_lru(void **state)
{
    (void)state;
    struct featbuf fb;
    size_t len;
    void *mem = mk(&fb, 64, 4, &len);
    uint32_t s[4], t;
    int action;
    for (uint64_t v = 0; v < 4; v++)
        s[v] = load(&fb, v);
    checked(&fb);
    /* a second reference on a valid row is a hit on the same slot */
    assert_int_equal(featbuf_acquire(&fb, 1, &t, &action), 0);
    assert_int_equal(action, FEATBUF_HIT);
    assert_int_equal(t, s[1]);
    assert_int_equal(featbuf_release(&fb, t), 0);
    /* every slot referenced: a new node cannot get one, nothing changes */
    struct featbuf_stats st0, st1;
    assert_int_equal(featbuf_stats(&fb, &st0), 0);
    assert_int_equal(st0.standby, 0);
    assert_int_equal(featbuf_acquire(&fb, 9, &t, &action), -EAGAIN);
    assert_int_equal(featbuf_stats(&fb, &st1), 0);
    assert_true(st0.loads == st1.loads && st0.hits == st1.hits && st0.evictions == st1.evictions &&
                st0.waits == st1.waits && st0.standby == st1.standby);
    assert_int_equal(featbuf_lookup(&fb, 9), FEATBUF_ABSENT);
    checked(&fb);
    /* release in the order 2, 0, 3, 1: that is the LRU order of reuse */
    uint64_t order[4] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++)
        assert_int_equal(featbuf_release(&fb, s[order[i]]), 0);
    assert_int_equal(featbuf_release(&fb, s[0]), -EINVAL); /* no reference left */
    checked(&fb);
    assert_int_equal(featbuf_stats(&fb, &st0), 0);
    assert_int_equal(st0.standby, 4);
    /* node 0 is still valid on standby: reused without a reload */
    assert_int_equal(featbuf_acquire(&fb, 0, &t, &action), 0);
    assert_int_equal(action, FEATBUF_HIT);
    assert_int_equal(t, s[0]);
    assert_true(row_ok(&fb, t, 0));
    /* new nodes take the oldest standby slots: node 2's, then node 3's */
    uint32_t a = load(&fb, 10);
    assert_int_equal(a, s[2]);
    assert_int_equal(featbuf_lookup(&fb, 2), FEATBUF_ABSENT);
    uint32_t b = load(&fb, 11);
    assert_int_equal(b, s[3]);
    assert_int_equal(featbuf_lookup(&fb, 1), s[1]); /* not yet evicted */
    assert_int_equal(featbuf_stats(&fb, &st1), 0);
    assert_int_equal(st1.loads, 6);
    assert_int_equal(st1.evictions, 2);
    assert_int_equal(st1.standby, 1);
    checked(&fb);
    uint32_t rel[3] = {t, a, b};
    assert_int_equal(featbuf_release_many(&fb, rel, 3), 0);
    checked(&fb);
    munmap(mem, len);
}

static void test_many_all_or_nothing(void **state)
{
    (void)state;
    struct featbuf fb;
    size_t len;
    void *mem = mk(&fb, 64, 4, &len);
    uint32_t s0 = load(&fb, 0), s1 = load(&fb, 1), s2 = load(&fb, 2);
    (void)s0;
    (void)s1;
    uint32_t s3 = load(&fb, 3);
    assert_int_equal(featbuf_release(&fb, s3), 0); /* node 3 on standby */
    /* a batch of nodes {2 (hit), 5 (miss: takes node 3's slot), 5 (wait
     * on own load), 6 (miss: none left)} fails whole */
    uint64_t nodes[4] = {2, 5, 5, 6};
    uint32_t slots[4];
    uint8_t action[4];
    assert_int_equal(featbuf_acquire_many(&fb, nodes, 4, slots, action), -EAGAIN);
    checked(&fb);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(&fb, &st), 0);
    assert_int_equal(st.standby, 1);
    assert_int_equal(st.loads, 4);
    assert_int_equal(featbuf_lookup(&fb, 5), FEATBUF_ABSENT);
    assert_int_equal(featbuf_lookup(&fb, 3), FEATBUF_ABSENT); /* its row was evicted */
    /* the same batch without node 6 succeeds; the duplicate waits on itself */
    assert_int_equal(featbuf_acquire_many(&fb, nodes, 3, slots, action), 0);
    assert_int_equal(action[0], FEATBUF_HIT);
    assert_int_equal(action[1], FEATBUF_LOAD);
    assert_int_equal(action[2], FEATBUF_WAIT);
    assert_int_equal(slots[1], slots[2]);
    assert_int_equal(slots[0], s2);
    /* out-of-range nodes are refused, nothing held */
    uint64_t bad[2] = {2, 64};
    uint32_t bs[2];
    uint8_t bt[2];
    assert_int_equal(featbuf_acquire_many(&fb, bad, 2, bs, bt), -EINVAL);
    /* the last reference of a LOADING slot cannot be dropped before loaded */
    assert_int_equal(featbuf_release(&fb, slots[2]), 0);
    assert_int_equal(featbuf_release(&fb, slots[1]), -EINVAL);
    row_fill(&fb, slots[1], 5);
    assert_int_equal(featbuf_loaded(&fb, slots[1]), 0);
    assert_int_equal(featbuf_loaded(&fb, slots[1]), -EINVAL); /* not LOADING any more */
    assert_int_equal(featbuf_wait_valid(&fb, slots[1], 0), 0);
    assert_int_equal(featbuf_release_many(&fb, slots, 2), 0);
    checked(&fb);
    munmap(mem, len);
}

struct waiter {
    struct featbuf *fb;
    uint32_t slot;
    int timeout_ms;
    int rc;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    w->rc = featbuf_wait_valid(w->fb, w->slot, w->timeout_ms);
    return NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waiters wake with 0 on loaded, -EIO on a failed load, -EPIPE on a broken
 * buffer, -ETIMEDOUT when nothing happens; loop over the three outcomes. */
static void test_wait_outcomes(void **state)
{
    (void)state;
    for (int mode = 0; mode < 3; mode++) {
        struct featbuf fb;
        size_t len;
        void *mem = mk(&fb, 16, 2, &len);
        uint32_t s, t;
        int action;
        assert_int_equal(featbuf_acquire(&fb, 7, &s, &action), 0);
        assert_int_equal(action, FEATBUF_LOAD);
        assert_int_equal(featbuf_acquire(&fb, 7, &t, &action), 0);
        assert_int_equal(action, FEATBUF_WAIT);
        assert_int_equal(t, s);
        assert_int_equal(featbuf_wait_valid(&fb, s, 20), -ETIMEDOUT);
        struct waiter w[3];
        pthread_t th[3];
        for (int i = 0; i < 3; i++) {
            w[i] = (struct waiter){&fb, s, 30000, 1};
            assert_int_equal(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
        }
        sleep_ms(50); /* let them go to sleep (the outcome is the same if not) */
        int want;
        if (mode == 0) {
            row_fill(&fb, s, 7);
            assert_int_equal(featbuf_loaded(&fb, s), 0);
            want = 0;
        } else if (mode == 1) {
            assert_int_equal(featbuf_load_failed(&fb, s), 0);
            want = -EIO;
        } else {
            featbuf_mark_broken(&fb);
            want = -EPIPE;
        }
        for (int i = 0; i < 3; i++) {
            pthread_join(th[i], NULL);
            if (w[i].rc != want)
                fail_msg("mode %d waiter %d: got %d, want %d", mode, i, w[i].rc, want);
        }
        if (mode == 1) {
            assert_int_equal(featbuf_lookup(&fb, 7), FEATBUF_ABSENT);
            uint32_t both[2] = {s, t};
            assert_int_equal(featbuf_release_many(&fb, both, 2), 0);
            checked(&fb);
            /* the emptied slot is reused first */
            uint32_t u = load(&fb, 3);
            assert_int_equal(u, s);
            assert_int_equal(featbuf_release(&fb, u), 0);
            checked(&fb);
        }
        if (mode == 2) {
            assert_int_equal(featbuf_release(&fb, s), -EPIPE);
            assert_int_equal(featbuf_acquire(&fb, 1, &t, &action), -EPIPE);
            assert_int_equal(featbuf_loaded(&fb, s), -EPIPE);
        } else {
            checked(&fb);
        }
        munmap(mem, len);
    }
}

struct room_waiter {
    struct featbuf *fb;
    uint32_t slot;
    int rc, action, retries;
};

static void *room_main(void *arg)
{
    struct room_waiter *w = arg;
    uint32_t seq = featbuf_standby_seq(w->fb);
    uint64_t node = 5;
    uint8_t action = 0;
    while ((w->rc = featbuf_acquire_many(w->fb, &node, 1, &w->slot, &action)) == -EAGAIN &&
           (w->rc = featbuf_wait_standby(w->fb, seq, 30000)) == 0) {
        w->retries++;
        seq = featbuf_standby_seq(w->fb);
    }
    w->action = action;
    return NULL;
}

/* A full buffer whose references are held downstream: the extractor sleeps
 * in featbuf_wait_standby until the releaser drops one, then gets it. */
static void test_wait_standby(void **state)
{
    (void)state;
    struct featbuf fb;
    size_t len;
    void *mem = mk(&fb, 16, 2, &len);
    uint32_t s0 = load(&fb, 0), s1 = load(&fb, 1);
    uint32_t seq = featbuf_standby_seq(&fb);
    assert_int_equal(featbuf_wait_standby(&fb, seq, 20), -ETIMEDOUT);
    struct room_waiter w = {.fb = &fb};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, room_main, &w), 0);
    sleep_ms(50);
    assert_int_equal(featbuf_release(&fb, s0), 0);
    pthread_join(th, NULL);
    assert_int_equal(w.rc, 0);
    assert_int_equal(w.action, FEATBUF_LOAD);
    assert_int_equal(w.slot, s0); /* node 0's row evicted for node 5 */
    assert_true(w.retries <= 1);
    assert_int_equal(featbuf_lookup(&fb, 0), FEATBUF_ABSENT);
    /* a release before the wait is not lost */
    assert_int_equal(featbuf_release(&fb, s1), 0);
    assert_int_equal(featbuf_wait_standby(&fb, seq, 0), 0);
    row_fill(&fb, w.slot, 5);
    assert_int_equal(featbuf_loaded(&fb, w.slot), 0);
    assert_int_equal(featbuf_release(&fb, w.slot), 0);
    /* broken: sleepers and later calls get -EPIPE */
    seq = featbuf_standby_seq(&fb);
    featbuf_mark_broken(&fb);
    assert_int_equal(featbuf_wait_standby(&fb, seq, 1000), -EPIPE);
    munmap(mem, len);
}

/* A process killed while it holds the buffer's lock: the next caller gets
 * EOWNERDEAD inside, marks the buffer broken and returns -EPIPE, and so
 * does everyone after it. The victim holds the lock most of the time
 * (featbuf_check over a 1M-node map, back to back), so a kill lands inside
 * within a few tries. */
static void test_owner_dead(void **state)
{
    (void)state;
    struct featbuf fb;
    size_t len;
    void *mem = mk(&fb, 1u << 20, 4, &len);
    uint32_t s0 = load(&fb, 1);
    int tries, rc = 0;
    for (tries = 0; tries < 50; tries++) {
        fflush(stdout);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            for (;;)
                featbuf_check(&fb, NULL, 0);
        }
        sleep_ms(20 + tries);
        kill(pid, SIGKILL);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        uint32_t t;
        int action;
        rc = featbuf_acquire(&fb, 1, &t, &action);
        if (rc == -EPIPE)
            break;
        assert_int_equal(rc, 0); /* the kill missed the lock: all is well */
        assert_int_equal(action, FEATBUF_HIT);
        assert_int_equal(featbuf_release(&fb, t), 0);
    }
    printf("# owner died holding the lock after %d tries\n", tries + 1);
    assert_int_equal(rc, -EPIPE);
    assert_int_equal(featbuf_release(&fb, s0), -EPIPE);
    assert_int_equal(featbuf_check(&fb, NULL, 0), -EPIPE);
    assert_int_equal(featbuf_wait_valid(&fb, s0, 0), -EPIPE);
    munmap(mem, len);
}

/* ---- stress ------------------------------------------------------------- */

#define BATCH 12u
#define BATCHES 1000u

struct shared_counts {
    _Atomic uint32_t failures;
    _Atomic uint32_t loading[];
    /* then n_nodes x _Atomic uint32_t loads */
};

/* A per-process stand-in for the train queue and the releaser: extractors
 * push finished batches, one releaser thread re-checks their rows (as the
 * trainer would read them) and drops the references later. */
#define RELQ_CAP 3u
struct relq {
    pthread_mutex_t mu;
    pthread_cond_t nonempty, nonfull;
    struct {
        uint64_t nodes[BATCH];
        uint32_t slots[BATCH];
    } items[RELQ_CAP];
    uint32_t head, count, producers;
};

struct stress {
    struct featbuf fb;
    struct relq *q; /* NULL: the extractor releases its own batches */
    struct shared_counts *sc;
    _Atomic uint32_t *loads; /* (n_nodes) */
    uint64_t n_nodes;
    unsigned seed;
    int single; /* acquire node by node instead of a whole batch */
};

#define SCHK(cond, ...)                                                                                                 \
    do {                                                                                                                \
        if (!(cond)) {                                                                                                  \
            fprintf(stderr, "stress: %s failed: ", #cond);                                                              \
            fprintf(stderr, __VA_ARGS__);                                                                               \
            fprintf(stderr, "\n");                                                                                      \
            atomic_fetch_add(&x->sc->failures, 1);                                                                      \
            return NULL;                                                                                                \
        }                                                                                                               \
    } while (0)

static void jitter(unsigned *seed)
{
    unsigned r = (unsigned)rand_r(seed) % 8;
    if (r < 4)
        return;
    if (r < 7) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, (long)(rand_r(seed) % 50) * 1000L};
    nanosleep(&ts, NULL);
}

static void *extractor_main(void *arg)
{
    struct stress *x = arg;
    struct featbuf *fb = &x->fb;
    unsigned seed = x->seed;
    uint64_t nodes[BATCH];
    uint32_t slots[BATCH];
    uint8_t action[BATCH];
    for (uint32_t b = 0; b < BATCHES; b++) {
        /* distinct nodes, skewed towards a hot set so extractors share */
        for (uint32_t i = 0; i < BATCH; i++) {
            uint64_t v;
            int dup;
            do {
                v = (rand_r(&seed) % 4 == 0) ? (uint64_t)rand_r(&seed) % x->n_nodes
                                             : (uint64_t)rand_r(&seed) % (x->n_nodes / 8 + 1);
                dup = 0;
                for (uint32_t j = 0; j < i; j++)
                    dup |= nodes[j] == v;
            } while (dup);
            nodes[i] = v;
        }
        int rc = 0;
        if (x->single) {
            for (uint32_t i = 0; i < BATCH && rc == 0; i++) {
                int t = 0;
                uint32_t seq = featbuf_standby_seq(fb);
                while ((rc = featbuf_acquire(fb, nodes[i], &slots[i], &t)) == -EAGAIN && x->q &&
                       (rc = featbuf_wait_standby(fb, seq, 60000)) == 0)
                    seq = featbuf_standby_seq(fb);
                action[i] = (uint8_t)t;
                jitter(&seed);
            }
        } else {
            uint32_t seq = featbuf_standby_seq(fb);
            while ((rc = featbuf_acquire_many(fb, nodes, BATCH, slots, action)) == -EAGAIN && x->q &&
                   (rc = featbuf_wait_standby(fb, seq, 60000)) == 0)
                seq = featbuf_standby_seq(fb);
        }
        SCHK(rc == 0, "acquire: %d at the minimum buffer size", rc);
        for (uint32_t i = 0; i < BATCH; i++) {
            if (action[i] != FEATBUF_LOAD)
                continue;
            uint32_t was = 0;
            SCHK(atomic_compare_exchange_strong(&x->sc->loading[nodes[i]], &was, 1),
                 "node %llu loaded by two extractors at once", (unsigned long long)nodes[i]);
            atomic_fetch_add(&x->loads[nodes[i]], 1);
            uint32_t *r = featbuf_row(fb, slots[i]);
            for (uint32_t w = 0; w < ROW_WORDS; w++) { /* in pieces, to expose half-loaded reads */
                r[w] = row_word(nodes[i], w);
                if (w == ROW_WORDS / 2)
                    jitter(&seed);
            }
            atomic_store(&x->sc->loading[nodes[i]], 0);
            SCHK(featbuf_loaded(fb, slots[i]) == 0, "loaded");
        }
        for (uint32_t i = 0; i < BATCH; i++)
            if (action[i] == FEATBUF_WAIT)
                SCHK(featbuf_wait_valid(fb, slots[i], 60000) == 0, "wait_valid on node %llu",
                     (unsigned long long)nodes[i]);
        jitter(&seed);
        for (uint32_t i = 0; i < BATCH; i++)
            SCHK(row_ok(fb, slots[i], nodes[i]), "row of node %llu in slot %u is wrong (action %u)",
                 (unsigned long long)nodes[i], slots[i], action[i]);
        if (!x->q) {
            SCHK(featbuf_release_many(fb, slots, BATCH) == 0, "release");
            continue;
        }
        pthread_mutex_lock(&x->q->mu);
        while (x->q->count == RELQ_CAP)
            pthread_cond_wait(&x->q->nonfull, &x->q->mu);
        uint32_t k = (x->q->head + x->q->count++) % RELQ_CAP;
        memcpy(x->q->items[k].nodes, nodes, sizeof nodes);
        memcpy(x->q->items[k].slots, slots, sizeof slots);
        pthread_cond_signal(&x->q->nonempty);
        pthread_mutex_unlock(&x->q->mu);
    }
    return NULL;
}

static void *releaser_main(void *arg)
{
    struct stress *x = arg;
    unsigned seed = x->seed;
    uint64_t nodes[BATCH];
    uint32_t slots[BATCH];
    for (;;) {
        pthread_mutex_lock(&x->q->mu);
        while (x->q->count == 0 && x->q->producers > 0)
            pthread_cond_wait(&x->q->nonempty, &x->q->mu);
        if (x->q->count == 0) {
            pthread_mutex_unlock(&x->q->mu);
            return NULL;
        }
        memcpy(nodes, x->q->items[x->q->head].nodes, sizeof nodes);
        memcpy(slots, x->q->items[x->q->head].slots, sizeof slots);
        x->q->head = (x->q->head + 1) % RELQ_CAP;
        x->q->count--;
        pthread_cond_signal(&x->q->nonfull);
        pthread_mutex_unlock(&x->q->mu);
        jitter(&seed); /* "training" */
        for (uint32_t i = 0; i < BATCH; i++)
            SCHK(row_ok(&x->fb, slots[i], nodes[i]), "trainer read a wrong row of node %llu in slot %u",
                 (unsigned long long)nodes[i], slots[i]);
        SCHK(featbuf_release_many(&x->fb, slots, BATCH) == 0, "release");
    }
}

/* One process: threads extractors over the named buffer; returns failures. */
static int stress_process(const char *name, struct shared_counts *sc, _Atomic uint32_t *loads, uint64_t n_nodes,
                          int threads, unsigned seed, int single, int downstream)
{
    struct stress x[9];
    pthread_t th[9];
    char err[256];
    struct relq q = {.producers = (uint32_t)threads};
    pthread_mutex_init(&q.mu, NULL);
    pthread_cond_init(&q.nonempty, NULL);
    pthread_cond_init(&q.nonfull, NULL);
    for (int t = 0; t < threads + (downstream ? 1 : 0); t++) {
        if (featbuf_attach(&x[t].fb, name, err, sizeof err)) {
            fprintf(stderr, "attach: %s\n", err);
            return 1;
        }
        x[t].sc = sc;
        x[t].loads = loads;
        x[t].n_nodes = n_nodes;
        x[t].seed = seed * 131u + (unsigned)t;
        x[t].single = single && (t % 2 == 1);
        x[t].q = downstream ? &q : NULL;
        if (pthread_create(&th[t], NULL, t < threads ? extractor_main : releaser_main, &x[t]))
            return 1;
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        pthread_mutex_lock(&q.mu);
        q.producers--;
        pthread_cond_broadcast(&q.nonempty);
        pthread_mutex_unlock(&q.mu);
    }
    if (downstream)
        pthread_join(th[threads], NULL);
    for (int t = 0; t < threads + (downstream ? 1 : 0); t++)
        featbuf_free(&x[t].fb);
    return 0;
}

static void stress_run(int procs, int threads, int big, int single, int downstream)
{
    int extractors = procs * threads;
    uint64_t n_nodes = 600;
    uint32_t nslots = big ? (uint32_t)n_nodes : (uint32_t)extractors * BATCH;
    char run[SHM_RUN_ID_MAX], err[256];
    assert_int_equal(shm_run_id_new(run, sizeof run), 0);
    struct featbuf fb;
    struct featbuf_params p = {.n_nodes = n_nodes, .nslots = nslots, .row_bytes = ROW_BYTES};
    if (featbuf_create(&fb, run, "featbuf", &p, err, sizeof err))
        fail_msg("create: %s", err);
    size_t cnt_len = sizeof(struct shared_counts) + 2 * n_nodes * sizeof(_Atomic uint32_t);
    struct shared_counts *sc = mmap(NULL, cnt_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sc != MAP_FAILED);
    _Atomic uint32_t *loads = &sc->loading[n_nodes];

    alarm(240); /* a deadlock fails the test instead of hanging it */
    pid_t pids[8];
    fflush(stdout); /* children must not write the parent's buffered output again */
    fflush(stderr);
    for (int i = 0; i < procs; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            _exit(stress_process(fb.seg.name, sc, loads, n_nodes, threads, 1000u + (unsigned)i, single, downstream));
    }
    /* the parent checks every invariant, under the lock, while they run */
    int checks = 0, live = procs, bad = 0;
    while (live > 0) {
        int rc = featbuf_check(&fb, err, sizeof err);
        if (rc) {
            fprintf(stderr, "check during the run: %s\n", err);
            bad++;
            break;
        }
        checks++;
        int st;
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
            live--;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                bad++;
        }
        sched_yield();
    }
    while (live > 0) {
        int st;
        if (waitpid(-1, &st, 0) > 0)
            live--;
    }
    alarm(0);
    const char *combo = "";
    char combo_buf[128];
    snprintf(combo_buf, sizeof combo_buf, "procs=%d threads=%d %s buffer, %s, %s", procs, threads,
             big ? "big" : "minimum", single ? "mixed single/batch acquire" : "batch acquire",
             downstream ? "releaser thread" : "self release");
    combo = combo_buf;
    if (bad || atomic_load(&sc->failures))
        fail_msg("%s: %d bad exits, %u failures", combo, bad, atomic_load(&sc->failures));
    if (featbuf_check(&fb, err, sizeof err))
        fail_msg("%s: final check: %s", combo, err);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(&fb, &st), 0);
    /* every reference released: all slots on standby (check: refs 0 <=> standby) */
    if (st.standby != nslots)
        fail_msg("%s: %u of %u slots on standby", combo, st.standby, nslots);
    uint64_t total = 0, touched = 0;
    for (uint64_t v = 0; v < n_nodes; v++) {
        total += loads[v];
        touched += loads[v] > 0;
        if (big && loads[v] > 1)
            fail_msg("%s: node %llu loaded %u times though it never left the buffer", combo,
                     (unsigned long long)v, loads[v]);
    }
    uint64_t refs = (uint64_t)extractors * BATCHES * BATCH;
    if (st.loads != total || st.hits + st.waits + st.loads != refs)
        fail_msg("%s: loads %llu (counted %llu), hits %llu, waits %llu, references %llu", combo,
                 (unsigned long long)st.loads, (unsigned long long)total, (unsigned long long)st.hits,
                 (unsigned long long)st.waits, (unsigned long long)refs);
    /* a node is loaded again only after its row was evicted */
    if (st.loads > touched + st.evictions)
        fail_msg("%s: %llu loads > %llu nodes + %llu evictions", combo, (unsigned long long)st.loads,
                 (unsigned long long)touched, (unsigned long long)st.evictions);
    if (big && st.evictions != 0)
        fail_msg("%s: %llu evictions in a buffer that holds every node", combo, (unsigned long long)st.evictions);
    printf("# %s: %d checks, loads=%llu hits=%llu waits=%llu evictions=%llu\n", combo, checks,
           (unsigned long long)st.loads, (unsigned long long)st.hits, (unsigned long long)st.waits,
           (unsigned long long)st.evictions);
    char name[SHM_NAME_MAX];
    memcpy(name, fb.seg.name, sizeof name);
    featbuf_free(&fb);
    shm_seg_unlink(name);
    munmap(sc, cnt_len);
}

enum { OPT_PROCS = 1, OPT_BIG = 2, OPT_SINGLE = 4, OPT_DOWNSTREAM = 8, OPT_ALL = 16 };

static void test_stress(void **state)
{
    (void)state;
    for (int o = 0; o < OPT_ALL; o++) {
        int procs = (o & OPT_PROCS) ? 3 : 1;
        int threads = (o & OPT_PROCS) ? 2 : 4;
        stress_run(procs, threads, !!(o & OPT_BIG), !!(o & OPT_SINGLE), !!(o & OPT_DOWNSTREAM));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_hit_miss_lru),
        cmocka_unit_test(test_many_all_or_nothing),
        cmocka_unit_test(test_wait_outcomes),
        cmocka_unit_test(test_wait_standby),
        cmocka_unit_test(test_owner_dead),
        cmocka_unit_test(test_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
