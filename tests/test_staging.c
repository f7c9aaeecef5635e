/* test_staging.c - the staging buffer shared by ranks (ipc/staging.h):
 * geometry and damaged headers; own blocks first, then borrowing in the
 * documented order (the rank's other threads, then the next ranks); the
 * `keep` rule (a thread holding none of its own blocks always gets one);
 * the owner's priority (a short owner's portion lends nothing until it is
 * idle, and what it lent comes home to it); double puts; waiting for a
 * block to come home and closing; and a stress over threads and over
 * processes in which every block carries its holder's tag, so a block
 * handed to two holders at once, a lost block or a refused own block
 * fails the test. */
#include "tests/t_util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#include "core/util.h"
#include "ipc/staging.h"
#include "t_mp.h"

static char err[512];

/* A staging buffer in this process's (shared anonymous) memory. */
static void *mk(struct staging *s, const struct staging_params *p, size_t *len)
{
    *len = staging_mem_size(p);
    assert_true(*len > 0);
    void *mem = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    if (staging_mem_format(mem, *len, p, err, sizeof err) || (memset(s, 0, sizeof *s), 0) ||
        staging_init(s, mem, *len, err, sizeof err))
        fail_msg("format/init: %s", err);
    return mem;
}

static struct staging_stats stats(struct staging *s, uint32_t q)
{
    struct staging_stats st;
    assert_int_equal(staging_stats(s, q, &st), 0);
    return st;
}

static uint32_t get(struct staging *s, uint32_t q, unsigned flags)
{
    uint32_t b = STAGING_NONE;
    int rc = staging_get(s, q, flags, &b);
    if (rc)
        fail_msg("staging_get(portion %u, flags %u): %d", q, flags, rc);
    return b;
}

static void test_params(void **state)
{
    (void)state;
    struct staging_params p = {.ranks = 2, .threads = 3, .blocks = 70, .block_bytes = 8192};
    size_t len = staging_mem_size(&p);
    assert_true(len >= 2 * 3 * 70 * 8192ull && len < 2 * 3 * 70 * 8192ull + 3 * 4096);
    struct staging_params bad[] = {
        {.ranks = 0, .threads = 1, .blocks = 1, .block_bytes = 4096},
        {.ranks = 1, .threads = 0, .blocks = 1, .block_bytes = 4096},
        {.ranks = 1, .threads = 1, .blocks = 0, .block_bytes = 4096},
        {.ranks = 1, .threads = 1, .blocks = 1, .block_bytes = 512},
        {.ranks = 1, .threads = 1, .blocks = 1, .block_bytes = 0},
        {.ranks = 1, .threads = 1, .blocks = 2, .block_bytes = 4096, .keep = 3},
        {.ranks = 1u << 12, .threads = 1u << 10, .blocks = 1, .block_bytes = 4096},
        {.ranks = 1, .threads = 1, .blocks = 1u << 30, .block_bytes = 1ull << 40},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++)
        if (staging_mem_size(&bad[i]) != 0)
            fail_msg("bad parameters %zu accepted", i);
    assert_int_equal(staging_mem_format(NULL, 0, &bad[3], err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "4096"));

    struct staging s;
    void *mem = mk(&s, &p, &len);
    assert_int_equal(s.portions, 6);
    assert_int_equal(s.blocks_per, 70);
    assert_int_equal(s.keep, 1);
    assert_int_equal((uintptr_t)s.blocks % 4096, 0);
    /* portions in rank order, blocks contiguous, each page aligned */
    assert_int_equal(staging_portion_of(&s, 0, 0), 0);
    assert_int_equal(staging_portion_of(&s, 1, 2), 5);
    assert_int_equal(staging_portion_of(&s, 2, 0), STAGING_NONE);
    assert_int_equal(staging_portion_of(&s, 0, 3), STAGING_NONE);
    assert_int_equal(staging_portion_of(&s, -1, 0), STAGING_NONE);
    size_t all;
    assert_ptr_equal(staging_data(&s, &all), s.blocks);
    assert_int_equal(all, 6 * 70 * 8192ull);
    for (uint32_t q = 0; q < 6; q++) {
        void *base;
        size_t n;
        assert_int_equal(staging_portion_span(&s, q, &base, &n), 0);
        assert_int_equal(n, 70 * 8192);
        assert_ptr_equal(base, s.blocks + (size_t)q * n);
        assert_ptr_equal(staging_block(&s, q * 70), base);
        assert_int_equal(staging_home(&s, q * 70 + 69), q);
        struct staging_stats st = stats(&s, q);
        assert_int_equal(st.free, 70);
        assert_false(st.want);
    }
    assert_null(staging_block(&s, 6 * 70));
    assert_int_equal(staging_home(&s, 6 * 70), STAGING_NONE);
    assert_int_equal(staging_portion_span(&s, 6, &(void *){NULL}, &all), -EINVAL);

    /* damaged headers and garbage are refused */
    struct staging t = {0};
    unsigned char *h = mem;
    uint32_t save;
    memcpy(&save, h + 12, 4); /* ranks */
    uint32_t three = 3;
    memcpy(h + 12, &three, 4);
    assert_int_equal(staging_init(&t, mem, len, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "damaged"));
    memcpy(h + 12, &save, 4);
    assert_int_equal(staging_init(&t, mem, len, err, sizeof err), 0);
    assert_int_equal(staging_init(&t, mem, len - 4096, err, sizeof err), -EINVAL);
    static _Alignas(4096) unsigned char junk[8192];
    memset(junk, 0x6b, sizeof junk);
    assert_int_equal(staging_init(&t, junk, sizeof junk, err, sizeof err), -EINVAL);
    munmap(mem, len);
}

/* Own first, then borrowing in order, the keep rule, the want rule. */
static void test_borrow_rules(void **state)
{
    (void)state;
    struct staging_params p = {.ranks = 2, .threads = 2, .blocks = 4, .block_bytes = 4096};
    struct staging s;
    size_t len;
    void *mem = mk(&s, &p, &len);
    uint32_t held[16], n = 0;
    /* portion 0 (rank 0, thread 0) takes its own four */
    for (int i = 0; i < 4; i++) {
        held[n] = get(&s, 0, STAGING_BORROW);
        assert_int_equal(staging_home(&s, held[n]), 0);
        for (uint32_t j = 0; j < n; j++)
            assert_int_not_equal(held[j], held[n]);
        n++;
    }
    /* own only: none left, and the owner is now short */
    uint32_t b;
    assert_false(stats(&s, 0).want);
    assert_int_equal(staging_get(&s, 0, 0, &b), -EAGAIN);
    assert_true(stats(&s, 0).want);
    /* borrowing: its sibling first, then rank 1's threads, each down to keep = 1 */
    static const uint32_t order[] = {1, 1, 1, 2, 2, 2, 3, 3, 3};
    for (size_t i = 0; i < SL_ARRAY_LEN(order); i++) {
        held[n] = get(&s, 0, STAGING_BORROW);
        if (staging_home(&s, held[n]) != order[i])
            fail_msg("borrow %zu came from portion %u, expected %u", i, staging_home(&s, held[n]), order[i]);
        n++;
    }
    assert_int_equal(staging_get(&s, 0, STAGING_BORROW, &b), -EAGAIN);
    assert_int_equal(stats(&s, 0).borrowed, 9);
    assert_int_equal(stats(&s, 1).lent, 3);
    assert_int_equal(stats(&s, 0).borrows, 9);
    assert_int_equal(stats(&s, 3).lends, 3);
    /* keep: the owners of 1, 2 and 3 hold nothing of their own and still get one */
    uint32_t own1 = get(&s, 1, 0), own3 = get(&s, 3, STAGING_BORROW);
    assert_int_equal(staging_home(&s, own1), 1);
    assert_int_equal(staging_home(&s, own3), 3);
    /* portion 1's owner wants another: it is short, so it lends nothing... */
    assert_int_equal(staging_get(&s, 1, 0, &b), -EAGAIN);
    assert_true(stats(&s, 1).want);
    /* ...and a block borrowed from it comes home to it, not to the borrower */
    uint32_t from1 = held[4];
    assert_int_equal(staging_home(&s, from1), 1);
    assert_int_equal(staging_put(&s, 0, from1), 0);
    held[4] = held[--n];
    assert_int_equal(stats(&s, 1).free, 1);
    assert_int_equal(stats(&s, 1).lent, 2);
    assert_int_equal(stats(&s, 0).borrowed, 8);
    assert_int_equal(staging_get(&s, 0, STAGING_BORROW, &b), -EAGAIN); /* owner 1 beats borrower 0 */
    uint32_t back = get(&s, 1, 0);
    assert_int_equal(back, from1);
    /* once owner 1 is idle and has room again, it lends */
    staging_idle(&s, 1);
    assert_false(stats(&s, 1).want);
    assert_int_equal(staging_put(&s, 1, back), 0);
    assert_int_equal(staging_put(&s, 1, own1), 0);
    held[n] = get(&s, 0, STAGING_BORROW);
    assert_int_equal(staging_home(&s, held[n]), 1);
    n++;
    assert_int_equal(staging_get(&s, 0, STAGING_BORROW, &b), -EAGAIN); /* keep: its last one stays */
    /* a double put changes nothing; out of range is refused */
    assert_int_equal(staging_put(&s, 3, own3), 0);
    assert_int_equal(staging_put(&s, 3, own3), -EINVAL);
    assert_int_equal(staging_put(&s, 0, 16), -EINVAL);
    assert_int_equal(staging_put(&s, 4, held[0]), -EINVAL);
    assert_int_equal(staging_get(&s, 4, 0, &b), -EINVAL);
    /* everything back: every portion full, nothing lent or borrowed */
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(staging_put(&s, 0, held[i]), 0);
    for (uint32_t q = 0; q < 4; q++) {
        struct staging_stats st = stats(&s, q);
        if (st.free != 4 || st.lent || st.borrowed)
            fail_msg("portion %u: free %u lent %u borrowed %u", q, st.free, st.lent, st.borrowed);
    }
    /* a single portion never borrows; one of one block never lends */
    struct staging_params one = {.ranks = 1, .threads = 1, .blocks = 1, .block_bytes = 4096};
    struct staging s1;
    size_t len1;
    void *mem1 = mk(&s1, &one, &len1);
    uint32_t b1 = get(&s1, 0, STAGING_BORROW);
    assert_int_equal(staging_get(&s1, 0, STAGING_BORROW, &b), -EAGAIN);
    assert_int_equal(staging_put(&s1, 0, b1), 0);
    munmap(mem1, len1);
    munmap(mem, len);
}

struct putter {
    struct staging *s;
    uint32_t portion, block;
    int delay_ms;
    int rc;
};

static void *put_later(void *arg)
{
    struct putter *t = arg;
    struct timespec ts = {t->delay_ms / 1000, (long)(t->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    t->rc = staging_put(t->s, t->portion, t->block);
    return NULL;
}

static void *close_later(void *arg)
{
    struct putter *t = arg;
    struct timespec ts = {0, (long)t->delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    staging_close(t->s);
    return NULL;
}

static uint64_t ms_since(uint64_t t0)
{
    return (sl_now_ns() - t0) / 1000000u;
}

/* A short owner sleeps until a block comes home (a borrower's put wakes
 * it); timeouts; a put before the sleep is not missed; close wakes. */
static void test_wait(void **state)
{
    (void)state;
    struct staging_params p = {.ranks = 1, .threads = 2, .blocks = 3, .block_bytes = 4096};
    struct staging s;
    size_t len;
    void *mem = mk(&s, &p, &len);
    uint32_t a = get(&s, 1, 0), b = get(&s, 0, STAGING_BORROW), c = get(&s, 0, STAGING_BORROW);
    uint32_t e = get(&s, 0, STAGING_BORROW); /* portion 0's last own block */
    uint32_t d = get(&s, 0, STAGING_BORROW); /* borrowed from 1, which keeps one */
    assert_int_equal(staging_home(&s, d), 1);
    uint32_t x;
    assert_int_equal(staging_get(&s, 1, 0, &x), 0); /* owner 1 takes its kept one */
    uint32_t seq = staging_seq(&s, 1);
    assert_int_equal(staging_get(&s, 1, 0, &x), -EAGAIN);
    uint64_t t0 = sl_now_ns();
    assert_int_equal(staging_wait(&s, 1, seq, 50), -ETIMEDOUT);
    assert_true(ms_since(t0) >= 45);
    struct putter pt = {.s = &s, .portion = 0, .block = d, .delay_ms = 100};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, put_later, &pt), 0);
    t0 = sl_now_ns();
    assert_int_equal(staging_wait(&s, 1, seq, 5000), 0);
    uint64_t took = ms_since(t0);
    pthread_join(th, NULL);
    assert_int_equal(pt.rc, 0);
    if (took < 80 || took > 4000)
        fail_msg("woke after %" PRIu64 " ms for a put at 100 ms", took);
    assert_int_equal(get(&s, 1, 0), d);
    /* a put between reading seq and sleeping: at once */
    seq = staging_seq(&s, 0);
    assert_int_equal(staging_put(&s, 0, b), 0);
    t0 = sl_now_ns();
    assert_int_equal(staging_wait(&s, 0, seq, 5000), 0);
    assert_true(ms_since(t0) < 1000);
    /* close wakes a sleeper and fails later gets */
    seq = staging_seq(&s, 0);
    struct putter cl = {.s = &s, .delay_ms = 100};
    assert_int_equal(pthread_create(&th, NULL, close_later, &cl), 0);
    t0 = sl_now_ns();
    assert_int_equal(staging_wait(&s, 0, seq, 5000), -EPIPE);
    pthread_join(th, NULL);
    assert_true(ms_since(t0) < 4000);
    assert_int_equal(staging_get(&s, 0, STAGING_BORROW, &x), -EPIPE);
    assert_int_equal(staging_put(&s, 0, c), 0); /* puts still count */
    assert_int_equal(staging_home(&s, e), 0);
    assert_int_equal(staging_home(&s, a), 1);
    munmap(mem, len);
}

/* ---- stress: threads and processes -------------------------------------------- */

#define STRESS_ITERS 4000
#define STRESS_HOLD 12 /* most blocks one thread holds: more than a portion */

struct stress_shared {
    atomic_uint failures;
    atomic_ullong gets, borrowed;
    char msg[256];
};

static uint64_t rnd(uint64_t *st)
{
    return sl_splitmix64(st);
}

static void stress_fail(struct stress_shared *sh, const char *fmt, ...) SL_PRINTF(2, 3);
static void stress_fail(struct stress_shared *sh, const char *fmt, ...)
{
    if (atomic_fetch_add(&sh->failures, 1) == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(sh->msg, sizeof sh->msg, fmt, ap);
        va_end(ap);
    }
}

/* One thread of portion q: holds 0..STRESS_HOLD blocks, each tagged with
 * (q, serial) at its first and last word; checks the tag before putting
 * it back and that a free block's words are zero. A greedy thread never
 * calls staging_idle. */
static void stress_thread(struct staging *s, uint32_t q, bool greedy, struct stress_shared *sh)
{
    uint32_t held[STRESS_HOLD];
    uint64_t tag[STRESS_HOLD];
    uint32_t n = 0, own = 0;
    uint64_t seed = 1234 + q, serial = 0;
    size_t words = (size_t)(s->block_bytes / 8);
    for (int it = 0; it < STRESS_ITERS && !atomic_load(&sh->failures); it++) {
        uint64_t r = rnd(&seed);
        bool take = n == 0 || (n < STRESS_HOLD && r % 5 < 3);
        if (take) {
            uint32_t b;
            int rc = staging_get(s, q, STAGING_BORROW, &b);
            if (rc == -EAGAIN && own == 0) {
                stress_fail(sh, "portion %u holds none of its own blocks but got none", q);
                return;
            }
            if (rc == -EAGAIN) {
                sched_yield();
                continue;
            }
            if (rc) {
                stress_fail(sh, "portion %u: staging_get: %d", q, rc);
                return;
            }
            uint64_t *w = staging_block(s, b);
            if (w[0] || w[words - 1]) {
                stress_fail(sh, "portion %u got block %u still tagged %" PRIx64, q, b, w[0]);
                return;
            }
            tag[n] = (uint64_t)q << 40 | ++serial;
            w[0] = w[words - 1] = tag[n];
            held[n++] = b;
            own += staging_home(s, b) == q;
            atomic_fetch_add(&sh->gets, 1);
            if (staging_home(s, b) != q)
                atomic_fetch_add(&sh->borrowed, 1);
        } else {
            uint32_t i = (uint32_t)(r >> 8) % n;
            uint64_t *w = staging_block(s, held[i]);
            if (w[0] != tag[i] || w[words - 1] != tag[i]) {
                stress_fail(sh, "block %u of portion %u: tag %" PRIx64 ", expected %" PRIx64 ": two holders at once",
                            held[i], q, w[0], tag[i]);
                return;
            }
            w[0] = w[words - 1] = 0;
            own -= staging_home(s, held[i]) == q;
            if (staging_put(s, q, held[i]) != 0) {
                stress_fail(sh, "portion %u: put of block %u refused", q, held[i]);
                return;
            }
            held[i] = held[n - 1];
            tag[i] = tag[n - 1];
            n--;
            if (n == 0 && !greedy)
                staging_idle(s, q);
        }
        if (r % 64 == 0)
            sched_yield();
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t *w = staging_block(s, held[i]);
        w[0] = w[words - 1] = 0;
        staging_put(s, q, held[i]);
    }
    staging_idle(s, q);
}

struct stress_arg {
    struct staging *s;
    uint32_t q;
    bool greedy;
    struct stress_shared *sh;
};

static void *stress_main(void *arg)
{
    struct stress_arg *a = arg;
    stress_thread(a->s, a->q, a->greedy, a->sh);
    return NULL;
}

/* Runs the threads of one rank (portions rank*threads ..), in a child. */
static void run_rank(struct staging *s, int rank, struct stress_shared *sh)
{
    pthread_t th[8];
    struct stress_arg a[8];
    uint32_t n = SL_MIN(s->threads, 8u);
    for (uint32_t t = 0; t < n; t++) {
        a[t] = (struct stress_arg){s, staging_portion_of(s, rank, (int)t), (t + (uint32_t)rank) % 2 == 0, sh};
        if (pthread_create(&th[t], NULL, stress_main, &a[t]) != 0)
            stress_fail(sh, "rank %d: pthread_create failed", rank);
    }
    for (uint32_t t = 0; t < n; t++)
        pthread_join(th[t], NULL);
}

static void stress_check(struct staging *s, struct stress_shared *sh, const char *combo)
{
    if (atomic_load(&sh->failures))
        fail_msg("%s: %u failures; first: %s", combo, atomic_load(&sh->failures), sh->msg);
    for (uint32_t q = 0; q < s->portions; q++) {
        struct staging_stats st = stats(s, q);
        if (st.free != s->blocks_per || st.lent || st.borrowed || st.want)
            fail_msg("%s: portion %u ends with %u free, %u lent, %u borrowed, want %d", combo, q, st.free, st.lent,
                     st.borrowed, st.want);
    }
    if (atomic_load(&sh->borrowed) == 0)
        fail_msg("%s: %llu gets and not one borrow", combo, (unsigned long long)atomic_load(&sh->gets));
    printf("# %s: %llu gets, %llu borrowed\n", combo, (unsigned long long)atomic_load(&sh->gets),
           (unsigned long long)atomic_load(&sh->borrowed));
}

static void test_stress_threads(void **state)
{
    (void)state;
    struct staging_params p = {.ranks = 2, .threads = 3, .blocks = 5, .block_bytes = 4096, .keep = 2};
    struct staging s;
    size_t len;
    void *mem = mk(&s, &p, &len);
    struct stress_shared sh = {0};
    alarm(120);
    pthread_t th[6];
    struct stress_arg a[6];
    for (uint32_t q = 0; q < 6; q++) {
        a[q] = (struct stress_arg){&s, q, q % 2 == 0, &sh};
        assert_int_equal(pthread_create(&th[q], NULL, stress_main, &a[q]), 0);
    }
    for (uint32_t q = 0; q < 6; q++)
        pthread_join(th[q], NULL);
    alarm(0);
    stress_check(&s, &sh, "2 ranks x 3 threads, one process");
    munmap(mem, len);
}

static void test_stress_processes(void **state)
{
    (void)state;
    struct staging_params p = {.ranks = 3, .threads = 2, .blocks = 4, .block_bytes = 8192};
    struct staging s;
    if (staging_create(&s, t_mp_run, &p, err, sizeof err))
        fail_msg("staging_create: %s", err);
    struct stress_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    alarm(120);
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < 3; r++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            t_mp_child_init();
            struct staging c;
            char e[256];
            if (staging_attach(&c, t_mp_run, e, sizeof e)) {
                stress_fail(sh, "rank %d: staging_attach: %s", r, e);
                _exit(1);
            }
            run_rank(&c, r, sh);
            staging_free(&c);
            _exit(0);
        }
        t_mp_track(pid);
    }
    for (int i = 0; i < t_mp_nchildren; i++) {
        int st;
        assert_int_equal(waitpid(t_mp_children[i], &st, 0), t_mp_children[i]);
        t_mp_children[i] = 0;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            stress_fail(sh, "rank process %d ended with status %#x", i, st);
    }
    t_mp_nchildren = 0;
    alarm(0);
    stress_check(&s, sh, "3 ranks x 2 threads, one process each");
    staging_free(&s);
    char name[SHM_NAME_MAX];
    assert_int_equal(staging_segname(name, sizeof name, t_mp_run, err, sizeof err), 0);
    assert_int_equal(shm_seg_unlink(name), 0);
    munmap(sh, sizeof *sh);
}

int main(void)
{
    t_mp_init("test_staging");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params),
        cmocka_unit_test(test_borrow_rules),
        cmocka_unit_test(test_wait),
        cmocka_unit_test(test_stress_threads),
        cmocka_unit_test_teardown(test_stress_processes, t_mp_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    shm_run_unlink(t_mp_run);
    return rc;
}
