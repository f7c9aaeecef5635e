/* test_cachesim.c - the lookahead policy (stages/featbuf_lookahead.c) and
 * the replay that measures it (stages/cachesim.h): a hand-made access
 * sequence whose optimal and LRU misses are known, the lookahead policy
 * with a window covering everything equal to Belady on random traces (and
 * never below it, LRU never below it either), the simulator's count equal
 * to the live policy's driven like the pipeline (a hinting thread W batches
 * ahead, acquire_batch, release), the row trace round trip, a static hot
 * set, bad parameters, and several processes of several threads hinting,
 * acquiring out of order and releasing on one lookahead buffer with
 * featbuf_check clean during and after (the TSan build runs it too). */
#include "tests/t_util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/shm.h"
#include "stages/cachesim.h"
#include "stages/featbuf.h"
#include "stages/featbuf_policy.h"

/* A trace built in memory: batches of nodes. */
static void trace_from(struct cachesim_trace *t, uint64_t n_nodes, const uint32_t *sizes, uint64_t nb,
                       const uint64_t *nodes)
{
    memset(t, 0, sizeof *t);
    t->n_nodes = n_nodes;
    t->batches = nb;
    t->batch = calloc(nb + 1, sizeof *t->batch);
    t->off = calloc(nb + 1, sizeof *t->off);
    uint64_t acc = 0;
    for (uint64_t i = 0; i < nb; i++) {
        t->batch[i] = i;
        acc += sizes[i];
        t->off[i + 1] = acc;
        if (sizes[i] > t->max_batch)
            t->max_batch = sizes[i];
    }
    t->accesses = acc;
    t->nodes = calloc(acc + 1, sizeof *t->nodes);
    memcpy(t->nodes, nodes, acc * sizeof *nodes);
}

static uint64_t replay(const struct cachesim_trace *t, enum cachesim_policy pol, uint32_t slots, uint32_t window)
{
    struct cachesim_run r = {.policy = pol, .slots = slots, .window = window};
    char err[256] = "";
    uint64_t m = 0;
    if (cachesim_replay(t, &r, &m, err, sizeof err))
        fail_msg("%s replay: %s", cachesim_policy_name(pol), err);
    return m;
}

/* The textbook sequence 1 2 3 4 1 2 5 1 2 3 4 5 (one node a batch) with
 * 3 slots: the optimum is 7 misses, LRU's 10. With 4 slots: 6 and 8. */
static void test_hand_sequence(void **state)
{
    (void)state;
    static const uint64_t seq[] = {1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5};
    uint32_t sizes[12];
    for (int i = 0; i < 12; i++)
        sizes[i] = 1;
    struct cachesim_trace t;
    trace_from(&t, 8, sizes, 12, seq);
    assert_int_equal(replay(&t, CACHESIM_BELADY, 3, 0), 7);
    assert_int_equal(replay(&t, CACHESIM_LOOKAHEAD, 3, 12), 7);
    assert_int_equal(replay(&t, CACHESIM_LRU, 3, 0), 10);
    assert_int_equal(replay(&t, CACHESIM_BELADY, 4, 0), 6);
    assert_int_equal(replay(&t, CACHESIM_LOOKAHEAD, 4, 12), 6);
    assert_int_equal(replay(&t, CACHESIM_LRU, 4, 0), 8);
    /* a window of one batch still sees the next use of 1 and 2 after 5 */
    assert_true(replay(&t, CACHESIM_LOOKAHEAD, 3, 1) <= 10);
    cachesim_trace_free(&t);

    /* batches of two: {0,1} {2,3} {0,2} {1,3} {0,1} with 3 slots. Every
     * batch needs both rows at once. The optimum: 0, 1 (2 misses); 2 fills
     * the free slot, 3 evicts 1 (next use batch 3, later than 0's batch 2)
     * (4); {0,2} hits; {1,3}: 3 hits, 1 evicts 2 (no next use) (5); {0,1}
     * hits: 5. LRU: 0, 1, 2 (free slot), 3 evicts 0 (4); 0 evicts 1 (5);
     * 1 evicts 3 and 3 evicts 0 (7); 0 evicts 2 (8). */
    static const uint64_t pairs[] = {0, 1, 2, 3, 0, 2, 1, 3, 0, 1};
    uint32_t two[5] = {2, 2, 2, 2, 2};
    trace_from(&t, 4, two, 5, pairs);
    assert_int_equal(replay(&t, CACHESIM_BELADY, 3, 0), 5);
    assert_int_equal(replay(&t, CACHESIM_LOOKAHEAD, 3, 5), 5);
    assert_int_equal(replay(&t, CACHESIM_LRU, 3, 0), 8);
    cachesim_trace_free(&t);
}

static uint64_t rng(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A random trace: nb batches of 1..maxb distinct nodes of n, skewed so
 * that reuse happens (half the draws from the first n/8 nodes). */
static void random_trace(struct cachesim_trace *t, uint64_t *seed, uint64_t n, uint64_t nb, uint32_t maxb)
{
    uint32_t *sizes = calloc(nb, sizeof *sizes);
    uint64_t *nodes = calloc(nb * maxb, sizeof *nodes), acc = 0;
    for (uint64_t b = 0; b < nb; b++) {
        sizes[b] = 1 + (uint32_t)(rng(seed) % maxb);
        for (uint32_t i = 0; i < sizes[b]; i++) {
            uint64_t v;
            bool dup;
            do {
                v = rng(seed) % 2 ? rng(seed) % (n / 8) : rng(seed) % n;
                dup = false;
                for (uint32_t j = 0; j < i; j++)
                    dup |= nodes[acc + j] == v;
            } while (dup);
            nodes[acc + i] = v;
        }
        acc += sizes[b];
    }
    trace_from(t, n, sizes, nb, nodes);
    free(sizes);
    free(nodes);
}

static void test_full_window_is_belady(void **state)
{
    (void)state;
    uint64_t seed = 42;
    for (int round = 0; round < 60; round++) {
        struct cachesim_trace t;
        uint32_t maxb = 1 + (uint32_t)(rng(&seed) % 12);
        uint64_t n = 16 + rng(&seed) % 200, nb = 20 + rng(&seed) % 200;
        random_trace(&t, &seed, n, nb, maxb);
        uint32_t slots = maxb + (uint32_t)(rng(&seed) % (2 * maxb + 20));
        uint64_t opt = replay(&t, CACHESIM_BELADY, slots, 0);
        uint64_t full = replay(&t, CACHESIM_LOOKAHEAD, slots, (uint32_t)nb);
        uint64_t lru = replay(&t, CACHESIM_LRU, slots, 0);
        uint64_t w4 = replay(&t, CACHESIM_LOOKAHEAD, slots, 4);
        if (full != opt)
            fail_msg("round %d (%" PRIu64 " batches of <= %u of %" PRIu64 " nodes, %u slots): lookahead over "
                     "everything %" PRIu64 " misses, Belady %" PRIu64,
                     round, nb, maxb, n, slots, full, opt);
        assert_true(lru >= opt);
        assert_true(w4 >= opt);
        cachesim_trace_free(&t);
    }
}

/* ---- the live policy, driven as the pipeline drives it -------------------- */

/* A shared buffer as the launcher makes it; the sampler's order (hint
 * b + W, then the extractor acquires b) in one thread, so the count is
 * deterministic: the buffer's own load counter equals the replay's. */
static void test_sim_matches_live(void **state)
{
    (void)state;
    uint64_t seed = 7;
    struct cachesim_trace t;
    random_trace(&t, &seed, 500, 300, 40);
    const uint32_t slots = 120, window = 6;
    uint64_t sim = replay(&t, CACHESIM_LOOKAHEAD, slots, window);

    struct featbuf_params p = {.n_nodes = t.n_nodes,
                               .nslots = slots,
                               .row_bytes = 16,
                               .policy = FEATBUF_POLICY_LOOKAHEAD,
                               .window = window,
                               .hint_entries = t.accesses};
    char run[SHM_RUN_ID_MAX], err[256];
    assert_int_equal(shm_run_id_new(run, sizeof run), 0);
    struct featbuf fb, ex;
    if (featbuf_create(&fb, run, "featbuf", &p, err, sizeof err))
        fail_msg("create: %s", err);
    if (featbuf_attach(&ex, fb.seg.name, err, sizeof err)) /* the extractor's own handle */
        fail_msg("attach: %s", err);
    uint32_t *sl = calloc(t.max_batch, sizeof *sl);
    uint8_t *act = calloc(t.max_batch, 1);
    uint64_t hinted = 0;
    for (uint64_t b = 0; b < t.batches; b++) {
        for (; hinted < t.batches && hinted <= b + window; hinted++) {
            uint64_t o = t.off[hinted];
            assert_int_equal(featbuf_hint(&fb, t.batch[hinted], t.nodes + o, (uint32_t)(t.off[hinted + 1] - o)), 0);
        }
        const uint64_t *nodes = t.nodes + t.off[b];
        uint32_t n = (uint32_t)(t.off[b + 1] - t.off[b]);
        assert_int_equal(featbuf_acquire_batch(&ex, t.batch[b], nodes, n, sl, act), 0);
        for (uint32_t i = 0; i < n; i++)
            if (act[i] == FEATBUF_LOAD)
                assert_int_equal(featbuf_loaded(&ex, sl[i]), 0);
        assert_int_equal(featbuf_release_many(&ex, sl, n), 0);
    }
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(&fb, &st), 0);
    if (featbuf_check(&fb, err, sizeof err))
        fail_msg("check: %s", err);
    assert_int_equal(st.loads, sim);
    assert_true(st.loads >= replay(&t, CACHESIM_BELADY, slots, 0));
    assert_true(st.loads <= replay(&t, CACHESIM_LRU, slots, 0));
    char name[SHM_NAME_MAX];
    memcpy(name, fb.seg.name, sizeof name);
    featbuf_free(&ex);
    featbuf_free(&fb);
    shm_seg_unlink(name);
    free(sl);
    free(act);
    cachesim_trace_free(&t);
}

/* ---- several processes on one lookahead buffer ------------------------------ */

#define MP_NODES 400u
#define MP_BATCHES 4000u
#define MP_WINDOW 8u
#define MP_MAXB 24u

struct mp_shared {
    _Atomic uint64_t hint_next, take_next, done;
    _Atomic uint32_t failures;
};

/* Batch b's nodes: a deterministic set of 1..MP_MAXB distinct ids. */
static uint32_t mp_batch(uint64_t b, uint64_t *out)
{
    uint64_t s = b * 7919u + 1;
    uint32_t n = 1 + (uint32_t)(rng(&s) % MP_MAXB);
    for (uint32_t i = 0; i < n; i++) {
        bool dup;
        do {
            out[i] = rng(&s) % 2 ? rng(&s) % (MP_NODES / 8) : rng(&s) % MP_NODES;
            dup = false;
            for (uint32_t j = 0; j < i; j++)
                dup |= out[j] == out[i];
        } while (dup);
    }
    return n;
}

struct mp_thread {
    struct featbuf fb;
    struct mp_shared *sh;
    bool hinter;
};

static void *mp_main(void *arg)
{
    struct mp_thread *t = arg;
    struct mp_shared *sh = t->sh;
    uint64_t nodes[MP_MAXB];
    uint32_t slots[MP_MAXB];
    uint8_t act[MP_MAXB];
    for (;;) {
        if (t->hinter) { /* a sampler: announce up to W batches past those taken */
            uint64_t b = atomic_load(&sh->hint_next);
            if (b >= MP_BATCHES)
                return NULL;
            if (b > atomic_load(&sh->take_next) + MP_WINDOW) {
                sched_yield();
                continue;
            }
            if (!atomic_compare_exchange_weak(&sh->hint_next, &b, b + 1))
                continue;
            uint32_t n = mp_batch(b, nodes);
            if (featbuf_hint(&t->fb, b, nodes, n))
                atomic_fetch_add(&sh->failures, 1);
            continue;
        }
        uint64_t b = atomic_fetch_add(&sh->take_next, 1); /* an extractor: out of order across threads */
        if (b >= MP_BATCHES)
            return NULL;
        uint32_t n = mp_batch(b, nodes);
        uint32_t seq = featbuf_standby_seq(&t->fb);
        int rc;
        while ((rc = featbuf_acquire_batch(&t->fb, b, nodes, n, slots, act)) == -EAGAIN) {
            featbuf_wait_standby(&t->fb, seq, 1000);
            seq = featbuf_standby_seq(&t->fb);
        }
        if (rc) {
            atomic_fetch_add(&sh->failures, 1);
            return NULL;
        }
        for (uint32_t i = 0; i < n; i++)
            if (act[i] == FEATBUF_LOAD && featbuf_loaded(&t->fb, slots[i]))
                atomic_fetch_add(&sh->failures, 1);
        for (uint32_t i = 0; i < n; i++)
            if (act[i] == FEATBUF_WAIT && featbuf_wait_valid(&t->fb, slots[i], 10000))
                atomic_fetch_add(&sh->failures, 1);
        if (featbuf_release_many(&t->fb, slots, n))
            atomic_fetch_add(&sh->failures, 1);
        atomic_fetch_add(&sh->done, 1);
    }
}

/* One process: a hinting thread and two extracting ones, each with its own
 * handle (as separate stage processes would have). */
static int mp_process(const char *name, struct mp_shared *sh)
{
    struct mp_thread t[3];
    pthread_t th[3];
    char err[256];
    for (int i = 0; i < 3; i++) {
        if (featbuf_attach(&t[i].fb, name, err, sizeof err)) {
            fprintf(stderr, "attach: %s\n", err);
            return 1;
        }
        t[i].sh = sh;
        t[i].hinter = i == 0;
        if (pthread_create(&th[i], NULL, mp_main, &t[i]))
            return 1;
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        featbuf_free(&t[i].fb);
    }
    return 0;
}

static void test_processes(void **state)
{
    (void)state;
    const int procs = 3;
    /* room for every extractor's batch, little more: evictions all the time;
     * a small hint log, so it fills and drops hints too */
    struct featbuf_params p = {.n_nodes = MP_NODES,
                               .nslots = 2 * 3 * MP_MAXB + 20,
                               .row_bytes = 16,
                               .policy = FEATBUF_POLICY_LOOKAHEAD,
                               .window = MP_WINDOW,
                               .hint_entries = 100};
    char run[SHM_RUN_ID_MAX], err[256];
    assert_int_equal(shm_run_id_new(run, sizeof run), 0);
    struct featbuf fb;
    if (featbuf_create(&fb, run, "featbuf", &p, err, sizeof err))
        fail_msg("create: %s", err);
    struct mp_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    alarm(240);
    fflush(stdout);
    fflush(stderr);
    pid_t pids[3];
    for (int i = 0; i < procs; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            _exit(mp_process(fb.seg.name, sh));
    }
    int live = procs, bad = 0, checks = 0;
    while (live > 0) {
        if (featbuf_check(&fb, err, sizeof err)) {
            fprintf(stderr, "check during the run: %s\n", err);
            bad++;
            break;
        }
        checks++;
        int st;
        pid_t w;
        while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
            live--;
            bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        }
        usleep(1000);
    }
    while (live > 0) {
        int st;
        if (waitpid(-1, &st, 0) > 0)
            live--;
    }
    alarm(0);
    assert_int_equal(bad, 0);
    assert_int_equal(atomic_load(&sh->failures), 0);
    assert_int_equal(atomic_load(&sh->done), MP_BATCHES);
    assert_true(checks > 0);
    if (featbuf_check(&fb, err, sizeof err))
        fail_msg("check after the run: %s", err);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(&fb, &st), 0);
    assert_int_equal(st.standby, p.nslots); /* every reference released */
    char name[SHM_NAME_MAX];
    memcpy(name, fb.seg.name, sizeof name);
    featbuf_free(&fb);
    shm_seg_unlink(name);
    munmap(sh, sizeof *sh);
}

/* ---- the trace file, the hot set, bad parameters ----------------------------- */

static void test_trace_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-trace-XXXXXX", base[64], path[96], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(base, sizeof base, "%s/rows", dir);
    struct rowtrace w;
    assert_int_equal(rowtrace_open(&w, base, 3, 50, err, sizeof err), 0);
    const uint64_t a[] = {4, 9, 49}, b[] = {7};
    assert_int_equal(rowtrace_add(&w, 12, a, 3), 0);
    assert_int_equal(rowtrace_add(&w, 10, b, 1), 0);
    assert_int_equal(rowtrace_add(&w, 11, NULL, 0), 0);
    assert_int_equal(rowtrace_close(&w, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s.rank3", base);
    struct cachesim_trace t;
    if (cachesim_trace_read(&t, path, err, sizeof err))
        fail_msg("read: %s", err);
    assert_int_equal(t.rank, 3);
    assert_int_equal(t.n_nodes, 50);
    assert_int_equal(t.batches, 3);
    assert_int_equal(t.accesses, 4);
    assert_int_equal(t.max_batch, 3);
    assert_int_equal(t.batch[0], 12);
    assert_int_equal(t.batch[1], 10);
    assert_int_equal(t.nodes[2], 49);
    assert_int_equal(t.nodes[3], 7);
    assert_false(t.truncated);
    cachesim_trace_free(&t);
    /* a record cut short is dropped and reported; a node out of range is refused */
    assert_int_equal(truncate(path, 32 + 16 + 3 * 8 + 16 + 4), 0);
    assert_int_equal(cachesim_trace_read(&t, path, err, sizeof err), 0);
    assert_true(t.truncated);
    assert_int_equal(t.batches, 1);
    cachesim_trace_free(&t);
    const uint64_t big[] = {50};
    assert_int_equal(rowtrace_open(&w, base, 3, 50, err, sizeof err), 0);
    assert_int_equal(rowtrace_add(&w, 0, big, 1), 0);
    assert_int_equal(rowtrace_close(&w, err, sizeof err), 0);
    assert_int_equal(cachesim_trace_read(&t, path, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "names node 50"));
    FILE *f = fopen(path, "wb");
    fputs("not a trace at all, no", f);
    fclose(f);
    assert_int_equal(cachesim_trace_read(&t, path, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not a version 1 row trace"));
    unlink(path);
    rmdir(dir);
}

static void test_bad_params(void **state)
{
    (void)state;
    struct featbuf_params p = {.n_nodes = 10,
                               .nslots = 4,
                               .row_bytes = 8,
                               .policy = FEATBUF_POLICY_LOOKAHEAD,
                               .window = 0,
                               .hint_entries = 10};
    assert_int_equal(featbuf_mem_size(&p), 0);
    p.window = FEATBUF_WINDOW_MAX + 1;
    assert_int_equal(featbuf_mem_size(&p), 0);
    p.window = 4;
    p.hint_entries = 0;
    assert_int_equal(featbuf_mem_size(&p), 0);
    p.hint_entries = 10;
    assert_true(featbuf_mem_size(&p) > 0);
    char run[SHM_RUN_ID_MAX], err[256];
    assert_int_equal(shm_run_id_new(run, sizeof run), 0);
    struct featbuf fb;
    p.window = 0;
    assert_int_equal(featbuf_create(&fb, run, "featbuf", &p, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "pipeline.lookahead"));
    /* the hint log's room: what announcements take, uses give back */
    struct featbuf_params q = {.n_nodes = 50,
                               .nslots = 8,
                               .row_bytes = 8,
                               .policy = FEATBUF_POLICY_LOOKAHEAD,
                               .window = 4,
                               .hint_entries = 10};
    if (featbuf_create(&fb, run, "featbuf", &q, err, sizeof err))
        fail_msg("create: %s", err);
    assert_int_equal(featbuf_lookahead_room(&fb), 10);
    const uint64_t six[] = {1, 2, 3, 4, 5, 6}, more[] = {7, 8, 9, 10, 11, 12};
    assert_int_equal(featbuf_hint(&fb, 0, six, 6), 0);
    assert_int_equal(featbuf_lookahead_room(&fb), 4);
    assert_int_equal(featbuf_hint(&fb, 1, more, 6), 0); /* 4 fit, 2 dropped */
    assert_int_equal(featbuf_lookahead_room(&fb), 0);
    assert_int_equal(featbuf_lookahead_dropped(&fb), 2);
    uint32_t sl[6];
    uint8_t act[6];
    assert_int_equal(featbuf_acquire_batch(&fb, 0, six, 6, sl, act), 0);
    for (int i = 0; i < 6; i++)
        assert_int_equal(featbuf_loaded(&fb, sl[i]), 0);
    assert_int_equal(featbuf_lookahead_room(&fb), 6); /* batch 0's records used */
    assert_int_equal(featbuf_release_many(&fb, sl, 6), 0);
    if (featbuf_check(&fb, err, sizeof err))
        fail_msg("check: %s", err);
    char name[SHM_NAME_MAX];
    memcpy(name, fb.seg.name, sizeof name);
    featbuf_free(&fb);
    shm_seg_unlink(name);
    struct featbuf_params l = {.n_nodes = 50, .nslots = 8, .row_bytes = 8};
    assert_int_equal(featbuf_create(&fb, run, "featbuf", &l, err, sizeof err), 0);
    assert_true(featbuf_lookahead_room(&fb) == UINT64_MAX); /* not a lookahead buffer */
    memcpy(name, fb.seg.name, sizeof name);
    featbuf_free(&fb);
    shm_seg_unlink(name);
    /* the replay refuses fewer slots than a batch */
    static const uint64_t seq[] = {1, 2, 3};
    uint32_t sizes[] = {3};
    struct cachesim_trace t;
    trace_from(&t, 8, sizes, 1, seq);
    struct cachesim_run r = {.policy = CACHESIM_LOOKAHEAD, .slots = 2, .window = 1};
    uint64_t m;
    assert_int_equal(cachesim_replay(&t, &r, &m, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "largest batch"));
    cachesim_trace_free(&t);
}

/* Hot set: the k nodes most often named in indices.bin, ties to lower ids. */
static void test_hot_set(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-hot-XXXXXX", path[96], err[256];
    assert_non_null(mkdtemp(dir));
    /* 6 nodes; sources 3 x4, 5 x3, 1 x2, 0 x2, 2 x1 */
    const uint32_t idx[] = {3, 5, 3, 1, 0, 3, 5, 2, 1, 0, 5, 3};
    snprintf(path, sizeof path, "%s/indices.bin", dir);
    FILE *f = fopen(path, "wb");
    assert_int_equal(fwrite(idx, sizeof idx, 1, f), 1);
    fclose(f);
    struct dataset_meta m = {.nodes = 6, .edges = 12};
    snprintf(m.f[DATASET_INDICES].file, sizeof m.f[DATASET_INDICES].file, "indices.bin");
    m.f[DATASET_INDICES].dtype = DTYPE_U32;
    m.f[DATASET_INDICES].present = true;
    uint64_t hot[4];
    assert_int_equal(cachesim_hot_set(dir, &m, 3, hot, err, sizeof err), 0);
    assert_int_equal(hot[0], 0); /* {3, 5} and the lower of the tied 0, 1 */
    assert_int_equal(hot[1], 3);
    assert_int_equal(hot[2], 5);
    assert_int_equal(cachesim_hot_set(dir, &m, 2, hot, err, sizeof err), 0);
    assert_int_equal(hot[0], 3);
    assert_int_equal(hot[1], 5);
    assert_int_equal(cachesim_hot_set(dir, &m, 4, hot, err, sizeof err), 0);
    assert_int_equal(hot[0], 0);
    assert_int_equal(hot[1], 1);
    assert_int_equal(hot[2], 3);
    assert_int_equal(hot[3], 5);
    unlink(path);
    rmdir(dir);
}

/* Hot set against a reference (sort by count, then id) on counts around
 * the selection's histogram top (65535): some nodes above it, one on it,
 * one below, many small and many tied; k from 1 to every node. */
static uint32_t *sort_counts; /* qsort has no argument: the counts cmp_ref orders by */
static int cmp_ref(const void *a, const void *b)
{
    const uint32_t *c = sort_counts;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (c[x] != c[y])
        return c[x] > c[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_hot_set_large_counts(void **state)
{
    (void)state;
    enum { N = 1000 };
    static uint32_t count[N], order[N];
    const uint32_t heavy[][2] = {{17, 70000}, {400, 70000}, {3, 66000}, {999, 65535}, {500, 65534}, {42, 65536}};
    uint64_t edges = 0, s = 11;
    for (uint32_t v = 0; v < N; v++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        count[v] = (uint32_t)((s >> 33) % 7); /* many ties, some zero */
    }
    for (size_t i = 0; i < sizeof heavy / sizeof heavy[0]; i++)
        count[heavy[i][0]] = heavy[i][1];
    for (uint32_t v = 0; v < N; v++)
        edges += count[v];
    uint32_t *idx = malloc(edges * sizeof *idx);
    assert_non_null(idx);
    uint64_t e = 0;
    for (uint32_t round = 0; e < edges; round++) /* interleaved, as a real indices.bin */
        for (uint32_t v = 0; v < N; v++)
            if (count[v] > round)
                idx[e++] = v;
    char dir[] = "/tmp/sluice-hot2-XXXXXX", path[96], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/indices.bin", dir);
    FILE *f = fopen(path, "wb");
    assert_int_equal(fwrite(idx, sizeof *idx, edges, f), edges);
    fclose(f);
    struct dataset_meta m = {.nodes = N, .edges = edges};
    snprintf(m.f[DATASET_INDICES].file, sizeof m.f[DATASET_INDICES].file, "indices.bin");
    m.f[DATASET_INDICES].dtype = DTYPE_U32;
    m.f[DATASET_INDICES].present = true;
    for (uint32_t v = 0; v < N; v++)
        order[v] = v;
    sort_counts = count;
    qsort(order, N, sizeof *order, cmp_ref);
    static uint64_t hot[N], want[N];
    for (uint64_t k = 1; k <= N; k += k < 10 ? 1 : k < 100 ? 7 : 97) {
        assert_int_equal(cachesim_hot_set(dir, &m, k, hot, err, sizeof err), 0);
        for (uint64_t i = 0; i < k; i++)
            want[i] = order[i];
        qsort(want, k, sizeof *want, cmp_u64);
        for (uint64_t i = 0; i < k; i++)
            if (hot[i] != want[i])
                fail_msg("k = %" PRIu64 ": entry %" PRIu64 " is node %" PRIu64 ", the reference has %" PRIu64, k, i,
                         hot[i], want[i]);
    }
    free(idx);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_sequence), cmocka_unit_test(test_hot_set_large_counts),    cmocka_unit_test(test_full_window_is_belady),
        cmocka_unit_test(test_sim_matches_live), cmocka_unit_test(test_processes),
        cmocka_unit_test(test_trace_file),       cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_hot_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
