/* test_allreduce.c - the shared-memory all-reduce across processes (and
 * threads), judged bit for bit. Ranks are fork()ed children that attach the
 * all-reduce by name, as trainers do. Each fills its buffer for step s from
 * (seed, s, rank, i) and, since it can regenerate every other rank's data,
 * computes the expected sum itself, in rank order, and compares the bit
 * patterns (nccl-tests' verifiable data). The data spread over 25 binary
 * orders of magnitude, so another order of addition gives other bits (a
 * case checks that it does). Each rank also folds every result into a
 * checksum; the parent checks that all ranks agree.
 *
 * Cases: exact sums for R in {1,2,3,4,7} x n in {1, 7, 1000, 2^20+3};
 * hundreds of consecutive steps with n varying per step (0 and max_floats
 * included), with no pre-sleep spin and a long one (barrier reuse and fast
 * ranks racing into the next call); mismatched or invalid n on one rank
 * (-EINVAL everywhere, buffers untouched, the collective still usable);
 * timeout and resume; polling with timeout 0 through both barriers; close
 * while ranks wait (-EPIPE, buffers untouched); a rank SIGKILLed mid-run
 * (the parent closes, the others end cleanly); ranks as threads over one
 * mapping (what TSan can see); create/attach errors. An alarm bounds each
 * case: a hang fails the test, kills the children and removes the run's
 * segments. Nothing may be left in /dev/shm. */
#include "t_util.h"
#include "t_mp.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "core/util.h"
#include "ipc/allreduce.h"
#include "ipc/ring.h"
#include "ipc/shm.h"

#define MAX_RANKS 8
#define CASE_ALARM_S 120
#define BIG ((size_t)(1u << 20) + 3)
#define SPIN_LONG 2000u /* polls before sleeping in the "long spin" variants (~50 us) */

enum mode {
    M_STEPS,   /* cfg.steps steps, each checked */
    M_ENDLESS, /* steps until -EPIPE (the kill case), then exit cleanly */
    M_CLOSE,   /* `after` steps, then the last rank stops and the rest wait to be closed */
    M_POLL,    /* every call with timeout 0, repeated while -ETIMEDOUT */
};

struct cfg {
    enum mode mode;
    uint32_t ranks;
    size_t max_floats;
    const size_t *sizes; /* n of each block of steps_per_size steps; NULL: n varies per step */
    uint32_t nsizes, steps_per_size;
    uint64_t steps; /* when sizes is NULL */
    bool spin_set;  /* override the handle's spin */
    uint32_t spin;
    uint64_t after;       /* M_CLOSE: steps before the call that is closed */
    int rank0_timeout_ms; /* M_ENDLESS: rank 0 waits in slices of this, resuming */
};

/* What each rank reports; plain fields are read by the parent after it
 * reaped the child (or joined the thread). */
struct rank_res {
    _Atomic uint64_t steps;   /* steps completed and checked */
    _Atomic uint32_t entered; /* M_CLOSE: inside the call that is to be closed */
    uint64_t bad;             /* elements that differed from the expected sum */
    uint64_t bad_step, bad_i;
    uint32_t got, want;
    uint64_t checksum; /* over every result's bits, in order */
    uint64_t ret_ns;   /* M_CLOSE: when the closed call returned */
    uint32_t phases;   /* bit p: a call timed out waiting at barrier p */
    uint64_t timeouts;
    char msg[240]; /* why the rank failed */
};

struct results {
    struct rank_res r[MAX_RANKS];
};

static uint64_t g_seed;

/* ---- verifiable data ----------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
}

static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rank `rank`'s element i at step s: a random sign, 23 random mantissa bits
 * and a binary exponent in -12..12. */
static float val(uint64_t s, uint32_t rank, uint64_t i)
{
    uint64_t x = mix64(g_seed ^ mix64(s * 0x9E3779B97F4A7C15ull + (uint64_t)rank * 0xD1B54A32D192ED03ull + i));
    uint32_t bits =
        (uint32_t)(x >> 63) << 31 | (127u - 12u + (uint32_t)((x >> 32) % 25)) << 23 | ((uint32_t)x & 0x7FFFFFu);
    return u2f(bits);
}

static void fill(float *buf, uint64_t s, uint32_t rank, size_t n)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = val(s, rank, i);
}

/* The sum the all-reduce promises: ranks added in order 0..R-1. */
static void expected(float *want, uint64_t s, uint32_t ranks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float acc = val(s, 0, i);
        for (uint32_t k = 1; k < ranks; k++)
            acc += val(s, k, i);
        want[i] = acc;
    }
}

/* n of step s: from the size table, or varying with the seed (every 50th
 * step 0, the next max_floats). */
static size_t step_n(const struct cfg *c, uint64_t s)
{
    if (c->sizes)
        return c->sizes[(s / c->steps_per_size) % c->nsizes];
    if (s % 50 == 0)
        return 0;
    if (s % 50 == 1)
        return c->max_floats;
    return (size_t)(mix64(g_seed + s * 0x632BE59BD9B4E019ull) % (c->max_floats + 1));
}

static uint64_t total_steps(const struct cfg *c)
{
    if (c->mode == M_ENDLESS)
        return UINT64_MAX;
    if (c->mode == M_CLOSE)
        return c->after + 1;
    return c->sizes ? (uint64_t)c->nsizes * c->steps_per_size : c->steps;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pause_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- one rank's loop (a child process or a thread) ------------------------------------ */

/* Compares buf with want bit for bit, recording the first difference. */
static void check(struct rank_res *me, const float *buf, const float *want, size_t n, uint64_t s)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t g = f2u(buf[i]), w = f2u(want[i]);
        if (g != w && me->bad++ == 0) {
            me->bad_step = s;
            me->bad_i = i;
            me->got = g;
            me->want = w;
        }
        me->checksum = (me->checksum ^ g) * 0x100000001B3ull;
    }
}

/* One call as the mode makes it: plain, polling (timeout 0), or in
 * slices of rank0_timeout_ms on rank 0; timed-out calls are resumed. */
static int call(struct allreduce *a, const struct cfg *c, struct rank_res *me, float *buf, size_t n)
{
    int timeout = ALLREDUCE_FOREVER;
    if (c->mode == M_POLL)
        timeout = 0;
    else if (c->rank0_timeout_ms > 0 && a->rank == 0)
        timeout = c->rank0_timeout_ms;
    int rc;
    while ((rc = allreduce_sum(a, buf, n, timeout)) == -ETIMEDOUT && timeout != ALLREDUCE_FOREVER) {
        me->phases |= 1u << a->pend.phase;
        me->timeouts++;
        if (timeout == 0)
            sched_yield(); /* a trainer would do other work here */
    }
    return rc;
}

/* Returns 0 when the rank did everything its mode asks, else a code with
 * a message in me->msg. */
static int rank_loop(struct allreduce *a, const struct cfg *c, struct rank_res *me)
{
    uint32_t rank = (uint32_t)a->rank;
    if (c->spin_set)
        a->spin = c->spin;
    size_t cap = c->max_floats ? c->max_floats : 1;
    float *buf = malloc(cap * sizeof(float)), *want = malloc(cap * sizeof(float));
    int ret = 0;
    if (!buf || !want) {
        snprintf(me->msg, sizeof me->msg, "rank %u: out of memory", rank);
        ret = 30;
        goto out;
    }
    uint64_t steps = total_steps(c);
    for (uint64_t s = 0; s < steps; s++) {
        size_t n = step_n(c, s);
        fill(buf, s, rank, n);
        if (c->mode == M_CLOSE && s == c->after) {
            if (rank == c->ranks - 1)
                break; /* stops contributing: the others wait for it */
            atomic_store(&me->entered, 1);
            int rc = allreduce_sum(a, buf, n, ALLREDUCE_FOREVER);
            me->ret_ns = now_ns();
            fill(want, s, rank, n); /* -EPIPE leaves buf as it was */
            if (rc != -EPIPE || memcmp(buf, want, n * sizeof(float)) != 0) {
                snprintf(me->msg, sizeof me->msg, "rank %u: closed call returned %d (%s), buffer %s", rank, rc,
                         strerror(-rc), memcmp(buf, want, n * sizeof(float)) ? "changed" : "unchanged");
                ret = 31;
                goto out;
            }
            rc = allreduce_sum(a, buf, n, ALLREDUCE_FOREVER);
            if (rc != -EPIPE) {
                snprintf(me->msg, sizeof me->msg, "rank %u: a call after close returned %d", rank, rc);
                ret = 32;
            }
            goto out;
        }
        if (c->mode == M_POLL && rank == c->ranks - 1 && s % 2 == 0)
            pause_ms(2); /* late: the others time out at the first barrier */
        int rc = call(a, c, me, buf, n);
        if (rc == -EPIPE && c->mode == M_ENDLESS)
            goto out; /* the supervisor closed the collective: a clean end */
        if (rc != 0) {
            snprintf(me->msg, sizeof me->msg, "rank %u step %llu (n=%zu): allreduce_sum returned %d (%s)", rank,
                     (unsigned long long)s, n, rc, strerror(-rc));
            ret = 33;
            goto out;
        }
        expected(want, s, c->ranks, n);
        check(me, buf, want, n, s);
        atomic_fetch_add(&me->steps, 1);
    }
out:
    free(buf);
    free(want);
    return ret;
}

/* ---- processes ----------------------------------------------------------------------- */

typedef int (*rank_fn)(struct allreduce *a, const struct cfg *c, struct rank_res *me);

static int child_main(rank_fn fn, const char *name, const struct cfg *c, struct rank_res *me, uint32_t rank)
{
    struct allreduce a;
    int rc = allreduce_attach(&a, name, rank, me->msg, sizeof me->msg);
    if (rc)
        return 20;
    rc = fn(&a, c, me);
    allreduce_free(&a);
    if (rc)
        fprintf(stderr, "%s\n", me->msg);
    return rc;
}

/* A run of one case: the all-reduce, the results segment, the children. */
struct run {
    struct allreduce ar;
    struct shm_seg rseg;
    struct results *res;
    pid_t pids[MAX_RANKS];
    char what[200];
};

static void run_start(struct run *r, const struct cfg *c, rank_fn fn, uint32_t forked, const char *label)
{
    assert_true(c->ranks <= MAX_RANKS && forked <= c->ranks);
    snprintf(r->what, sizeof r->what, "%s R=%u max_floats=%zu seed=%#llx", label, c->ranks, c->max_floats,
             (unsigned long long)g_seed);
    char err[512];
    if (shm_seg_create(&r->rseg, t_mp_run, "results", SHM_KIND_RAW, sizeof(struct results), err, sizeof err) != 0)
        fail_msg("%s: %s", r->what, err);
    r->res = r->rseg.data;
    if (allreduce_create(&r->ar, t_mp_run, "grad", c->ranks, c->max_floats, err, sizeof err) != 0)
        fail_msg("%s: %s", r->what, err);
    alarm(CASE_ALARM_S);
    t_mp_nchildren = 0;
    for (uint32_t k = 0; k < forked; k++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            t_mp_child_init();
            _exit(child_main(fn, r->ar.seg.name, c, &r->res->r[k], k));
        }
        r->pids[k] = pid;
        t_mp_track(pid);
    }
}

/* Reaps every child but `skip` (pid, or 0) expecting exit status 0. */
static void run_reap(struct run *r, uint32_t forked, pid_t skip)
{
    for (uint32_t k = 0; k < forked; k++) {
        if (r->pids[k] == skip)
            continue;
        int st;
        assert_int_equal(waitpid(r->pids[k], &st, 0), r->pids[k]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("%s: rank %u (pid %d) ended with status %#x: %s", r->what, k, (int)r->pids[k], st,
                     r->res->r[k].msg);
    }
    alarm(0);
    t_mp_nchildren = 0;
}

/* Checks each rank's reports: no wrong element, `steps` steps each
 * (UINT64_MAX: equal among the ranks checked), same checksum. Ranks in
 * [0, nranks) except `skip` (a rank index, or -1). */
static uint64_t check_ranks(struct run *r, uint32_t nranks, int skip, uint64_t steps)
{
    uint64_t ref_steps = 0, ref_sum = 0;
    bool first = true;
    for (uint32_t k = 0; k < nranks; k++) {
        if ((int)k == skip)
            continue;
        const struct rank_res *m = &r->res->r[k];
        if (m->bad)
            fail_msg("%s: rank %u: %llu elements wrong; first at step %llu element %llu: got %#010x (%.9g), "
                     "want %#010x (%.9g)",
                     r->what, k, (unsigned long long)m->bad, (unsigned long long)m->bad_step,
                     (unsigned long long)m->bad_i, m->got, (double)u2f(m->got), m->want, (double)u2f(m->want));
        uint64_t got_steps = atomic_load(&m->steps);
        if (steps != UINT64_MAX && got_steps != steps)
            fail_msg("%s: rank %u completed %llu steps, not %llu", r->what, k, (unsigned long long)got_steps,
                     (unsigned long long)steps);
        if (first) {
            ref_steps = got_steps;
            ref_sum = m->checksum;
            first = false;
        } else if (got_steps != ref_steps || m->checksum != ref_sum) {
            fail_msg("%s: rank %u saw %llu steps (checksum %#llx), another rank %llu (%#llx)", r->what, k,
                     (unsigned long long)got_steps, (unsigned long long)m->checksum, (unsigned long long)ref_steps,
                     (unsigned long long)ref_sum);
        }
    }
    return ref_steps;
}

/* Frees the run the way the launcher does and checks nothing is left. */
static void run_end(struct run *r)
{
    char name[SHM_NAME_MAX];
    snprintf(name, sizeof name, "%s", r->ar.seg.name);
    allreduce_free(&r->ar);
    assert_int_equal(shm_seg_unlink(name), 0);
    snprintf(name, sizeof name, "%s", r->rseg.name);
    shm_seg_detach(&r->rseg);
    assert_int_equal(shm_seg_unlink(name), 0);
    assert_int_equal(shm_run_unlink(t_mp_run), 0); /* nothing else of the run in /dev/shm */
}

static void run_steps(const struct cfg *c, const char *label)
{
    struct run r;
    run_start(&r, c, rank_loop, c->ranks, label);
    run_reap(&r, c->ranks, 0);
    uint64_t steps = check_ranks(&r, c->ranks, -1, total_steps(c));
    print_message("%s: %llu steps exact on every rank\n", r.what, (unsigned long long)steps);
    run_end(&r);
}

/* ---- cases ----------------------------------------------------------------------------- */

static const uint32_t rank_counts[] = {1, 2, 3, 4, 7};

static void test_exact_sums(void **state)
{
    static const size_t sizes[] = {1, 7, 1000, BIG};
    for (size_t i = 0; i < SL_ARRAY_LEN(rank_counts); i++) {
        struct cfg c = {.mode = M_STEPS,
                        .ranks = rank_counts[i],
                        .max_floats = BIG,
                        .sizes = sizes,
                        .nsizes = SL_ARRAY_LEN(sizes),
                        .steps_per_size = 2};
        run_steps(&c, "exact n={1,7,1000,2^20+3}");
    }
}

static void test_order_matters(void **state)
{
    /* The data must make the order of addition visible, or the exactness
     * checks could not catch a rank summing out of order. */
    for (uint32_t ranks = 3; ranks <= 7; ranks += 4) {
        size_t differ = 0;
        for (size_t i = 0; i < 1000; i++) {
            float fwd = val(0, 0, i), rev = val(0, ranks - 1, i);
            for (uint32_t k = 1; k < ranks; k++) {
                fwd += val(0, k, i);
                rev += val(0, ranks - 1 - k, i);
            }
            differ += f2u(fwd) != f2u(rev);
        }
        print_message("R=%u: %zu of 1000 sums change bits when added in reverse order\n", ranks, differ);
        assert_true(differ > 10);
    }
}

static void test_many_steps(void **state)
{
    /* Hundreds of back-to-back calls with n changing every step: barrier
     * reuse, and ranks racing into the next call. spin 0 forces every wait
     * through the futex; SPIN_LONG polls long enough to skip it often. */
    for (size_t i = 1; i < SL_ARRAY_LEN(rank_counts); i++)
        for (int spin = 0; spin < 2; spin++) {
            struct cfg c = {.mode = M_STEPS,
                            .ranks = rank_counts[i],
                            .max_floats = 3000,
                            .steps = 400,
                            .spin_set = true,
                            .spin = spin ? SPIN_LONG : 0};
            run_steps(&c, spin ? "many-steps spin=long" : "many-steps spin=0");
        }
}

static void test_poll_timeout_zero(void **state)
{
    /* Every call with timeout 0, resumed while -ETIMEDOUT: the pending
     * state must carry a call through both barriers. */
    for (uint32_t ranks = 2; ranks <= 3; ranks++) {
        struct cfg c = {
            .mode = M_POLL, .ranks = ranks, .max_floats = 1u << 18, .steps = 40, .spin_set = true, .spin = 0};
        struct run r;
        run_start(&r, &c, rank_loop, c.ranks, "poll timeout=0");
        run_reap(&r, c.ranks, 0);
        check_ranks(&r, c.ranks, -1, c.steps);
        uint32_t phases = 0;
        uint64_t timeouts = 0;
        for (uint32_t k = 0; k < ranks; k++) {
            phases |= r.res->r[k].phases;
            timeouts += r.res->r[k].timeouts;
        }
        print_message("%s: %llu timed-out calls resumed (phases seen %#x)\n", r.what, (unsigned long long)timeouts,
                      phases);
        if (phases != 0x6)
            fail_msg("%s: timed-out calls were seen at barriers %#x, want both (0x6)", r.what, phases);
        run_end(&r);
    }
}

/* Mismatched or invalid calls: -EINVAL on every rank, buffers untouched,
 * and the next good call still right. */
static int mismatch_rank(struct allreduce *a, const struct cfg *c, struct rank_res *me)
{
    uint32_t rank = (uint32_t)a->rank, R = c->ranks;
    float buf[128], want[128];
    /* bad_rank: the rank whose call is wrong (`how`), -1 none, -2 all */
    struct {
        size_t n;
        int bad_rank;
        enum { BAD_PLUS1, BAD_TOO_BIG, BAD_NULL } how;
        int expect;
    } steps[] = {
        {100, -1, BAD_PLUS1, 0},     {100, 1, BAD_PLUS1, -EINVAL},    {100, (int)R - 1, BAD_TOO_BIG, -EINVAL},
        {100, 0, BAD_NULL, -EINVAL}, {100, -2, BAD_TOO_BIG, -EINVAL}, {0, -1, BAD_PLUS1, 0},
        {100, -1, BAD_PLUS1, 0},
    };
    for (uint64_t s = 0; s < SL_ARRAY_LEN(steps); s++) {
        size_t n = steps[s].n;
        float *b = buf;
        fill(buf, s, rank, n);
        if ((int)rank == steps[s].bad_rank || steps[s].bad_rank == -2) { /* -2: every rank */
            if (steps[s].how == BAD_PLUS1)
                n++;
            else if (steps[s].how == BAD_TOO_BIG)
                n = c->max_floats + 1;
            else
                b = NULL;
        }
        int rc = allreduce_sum(a, b, n, ALLREDUCE_FOREVER);
        if (rc != steps[s].expect) {
            snprintf(me->msg, sizeof me->msg, "rank %u step %llu: got %d, want %d", rank, (unsigned long long)s, rc,
                     steps[s].expect);
            return 40;
        }
        if (rc == 0) {
            expected(want, s, R, steps[s].n);
        } else {
            fill(want, s, rank, steps[s].n);
            if (!b)
                continue;
        }
        if (memcmp(buf, want, steps[s].n * sizeof(float)) != 0) {
            snprintf(me->msg, sizeof me->msg, "rank %u step %llu: buffer %s", rank, (unsigned long long)s,
                     rc ? "changed by a failed call" : "holds a wrong sum");
            return 41;
        }
        atomic_fetch_add(&me->steps, 1);
    }
    return 0;
}

static void test_mismatch(void **state)
{
    for (uint32_t ranks = 2; ranks <= 4; ranks++) {
        struct cfg c = {.ranks = ranks, .max_floats = 127};
        struct run r;
        run_start(&r, &c, mismatch_rank, ranks, "mismatch");
        run_reap(&r, ranks, 0);
        for (uint32_t k = 0; k < ranks; k++)
            if (atomic_load(&r.res->r[k].steps) + (k == 0 ? 1 : 0) != 7)
                fail_msg("%s: rank %u checked %llu steps", r.what, k, (unsigned long long)r.res->r[k].steps);
        run_end(&r);
    }
}

/* Rank 0 times out waiting for a late rank 1, tries another call (refused
 * while the first is pending), then resumes and gets the right sum. */
static int timeout_rank(struct allreduce *a, const struct cfg *c, struct rank_res *me)
{
    uint32_t rank = (uint32_t)a->rank;
    float buf[64], other[64], want[64];
    size_t n = 64;
    for (uint64_t s = 0; s < 2; s++) {
        fill(buf, s, rank, n);
        int rc;
        if (rank == 1 && s == 0)
            pause_ms(300);
        if (rank == 0 && s == 0) {
            rc = allreduce_sum(a, buf, n, 50);
            if (rc != -ETIMEDOUT || a->pend.phase != 1) {
                snprintf(me->msg, sizeof me->msg, "rank 0: got %d (phase %d), want -ETIMEDOUT at barrier 1", rc,
                         a->pend.phase);
                return 50;
            }
            if (allreduce_sum(a, buf, n - 1, 50) != -EINVAL || allreduce_sum(a, other, n, 50) != -EINVAL) {
                snprintf(me->msg, sizeof me->msg, "rank 0: a different call was accepted while one was pending");
                return 51;
            }
        }
        rc = allreduce_sum(a, buf, n, ALLREDUCE_FOREVER);
        expected(want, s, c->ranks, n);
        if (rc != 0 || memcmp(buf, want, sizeof want) != 0) {
            snprintf(me->msg, sizeof me->msg, "rank %u step %llu: rc %d, sum %s", rank, (unsigned long long)s, rc,
                     rc ? "-" : "wrong");
            return 52;
        }
        atomic_fetch_add(&me->steps, 1);
    }
    return 0;
}

static void test_timeout_resume(void **state)
{
    struct cfg c = {.ranks = 2, .max_floats = 64};
    struct run r;
    run_start(&r, &c, timeout_rank, 2, "timeout-resume");
    run_reap(&r, 2, 0);
    check_ranks(&r, 2, -1, 2);
    run_end(&r);
}

static void test_close_wakes_waiters(void **state)
{
    for (uint32_t ranks = 2; ranks <= 7; ranks += 5)
        for (int spin = 0; spin < 2; spin++) {
            struct cfg c = {.mode = M_CLOSE,
                            .ranks = ranks,
                            .max_floats = 5000,
                            .after = 30,
                            .spin_set = true,
                            .spin = spin ? SPIN_LONG : 0};
            struct run r;
            run_start(&r, &c, rank_loop, ranks, "close");
            for (uint32_t k = 0; k + 1 < ranks; k++)
                while (!atomic_load(&r.res->r[k].entered))
                    pause_ms(1);
            pause_ms(100); /* let them fall asleep */
            uint64_t t0 = now_ns();
            allreduce_close(&r.ar);
            run_reap(&r, ranks, 0);
            check_ranks(&r, ranks, -1, c.after);
            uint64_t worst = 0;
            for (uint32_t k = 0; k + 1 < ranks; k++)
                worst = SL_MAX(worst, r.res->r[k].ret_ns - t0);
            print_message("%s spin=%s: every waiter returned -EPIPE, the last %.1f us after close\n", r.what,
                          spin ? "long" : "0", (double)worst / 1e3);
            assert_true(allreduce_is_closed(&r.ar));
            run_end(&r);
        }
}

static void test_kill_rank(void **state)
{
    /* The kill lands wherever the scheduler puts it: a few rounds. Rank 0
     * waits in 20 ms slices (a supervisor-aware trainer), the rest forever. */
    for (int round = 0; round < 4; round++) {
        struct cfg c = {.mode = M_ENDLESS,
                        .ranks = 4,
                        .max_floats = 4000,
                        .rank0_timeout_ms = round % 2 ? 20 : 0,
                        .spin_set = round >= 2,
                        .spin = 0};
        struct run r;
        run_start(&r, &c, rank_loop, 4, "kill");
        uint32_t victim = 1 + (uint32_t)round % 3;
        uint64_t after = 50 + 40 * (uint64_t)round;
        while (atomic_load(&r.res->r[victim].steps) < after)
            pause_ms(1);
        kill(r.pids[victim], SIGKILL);
        int st;
        assert_int_equal(waitpid(r.pids[victim], &st, 0), r.pids[victim]);
        if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
            fail_msg("%s: rank %u was not killed by SIGKILL (status %#x)", r.what, victim, st);
        if (c.rank0_timeout_ms)
            pause_ms(5 * c.rank0_timeout_ms); /* a slow supervisor: rank 0 times out and resumes meanwhile */
        allreduce_close(&r.ar);               /* the supervisor's reaction */
        run_reap(&r, 4, r.pids[victim]);
        if (c.rank0_timeout_ms && r.res->r[0].timeouts == 0)
            fail_msg("%s: rank 0 never timed out waiting for the dead rank", r.what);
        uint64_t steps = check_ranks(&r, 4, (int)victim, UINT64_MAX);
        if (steps < after)
            fail_msg("%s: survivors completed only %llu steps", r.what, (unsigned long long)steps);
        print_message("%s: rank %u killed; the others stopped cleanly after %llu exact steps\n", r.what, victim,
                      (unsigned long long)steps);
        run_end(&r);
    }
}

/* ---- threads over one mapping ----------------------------------------------------------- */

struct thread_arg {
    void *mem;
    size_t len;
    const struct cfg *c;
    struct rank_res *me;
    uint32_t rank;
    int rc;
};

static void *thread_main(void *p)
{
    struct thread_arg *t = p;
    struct allreduce a;
    t->rc = allreduce_init(&a, t->mem, t->len, (int32_t)t->rank, t->me->msg, sizeof t->me->msg);
    if (t->rc == 0)
        t->rc = rank_loop(&a, t->c, t->me);
    allreduce_free(&a);
    return NULL;
}

static void test_threads(void **state)
{
    /* Ranks as threads sharing one mapping: the only form in which a race
     * detector sees the protocol's memory accesses. */
    for (uint32_t ranks = 2; ranks <= 4; ranks += 2)
        for (int spin = 0; spin < 2; spin++) {
            struct cfg c = {.mode = M_STEPS,
                            .ranks = ranks,
                            .max_floats = 5000,
                            .steps = 300,
                            .spin_set = true,
                            .spin = spin ? SPIN_LONG : 0};
            size_t len = allreduce_mem_size(ranks, c.max_floats);
            assert_true(len > 0);
            void *mem = aligned_alloc(4096, sl_round_up(len, 4096));
            assert_non_null(mem);
            char err[256];
            assert_int_equal(allreduce_mem_format(mem, len, ranks, c.max_floats, err, sizeof err), 0);
            struct results *res = calloc(1, sizeof *res);
            assert_non_null(res);
            struct thread_arg args[MAX_RANKS];
            pthread_t th[MAX_RANKS];
            alarm(CASE_ALARM_S);
            for (uint32_t k = 0; k < ranks; k++) {
                args[k] = (struct thread_arg){.mem = mem, .len = len, .c = &c, .me = &res->r[k], .rank = k};
                assert_int_equal(pthread_create(&th[k], NULL, thread_main, &args[k]), 0);
            }
            for (uint32_t k = 0; k < ranks; k++)
                assert_int_equal(pthread_join(th[k], NULL), 0);
            alarm(0);
            for (uint32_t k = 0; k < ranks; k++)
                if (args[k].rc)
                    fail_msg("threads R=%u: rank %u failed (%d): %s", ranks, k, args[k].rc, res->r[k].msg);
            struct run r = {.res = res};
            snprintf(r.what, sizeof r.what, "threads R=%u spin=%s seed=%#llx", ranks, spin ? "long" : "0",
                     (unsigned long long)g_seed);
            check_ranks(&r, ranks, -1, c.steps);
            free(res);
            free(mem);
        }
}

/* ---- errors ------------------------------------------------------------------------------ */

static void test_create_attach_errors(void **state)
{
    char err[512];
    struct allreduce ar, a, b;
    assert_int_equal(allreduce_create(&ar, t_mp_run, "grad", 0, 16, err, sizeof err), -EINVAL);
    assert_int_equal(allreduce_create(&ar, t_mp_run, "grad", ALLREDUCE_RANKS_MAX + 1, 16, err, sizeof err), -EINVAL);
    assert_int_equal(allreduce_create(&ar, t_mp_run, "grad", 2, 0, err, sizeof err), -EINVAL);
    assert_int_equal(allreduce_mem_size(0, 16), 0);
    assert_int_equal(shm_run_unlink(t_mp_run), 0); /* failed creates leave nothing */

    assert_int_equal(allreduce_create(&ar, t_mp_run, "grad", 2, 16, err, sizeof err), 0);
    assert_int_equal(allreduce_create(&b, t_mp_run, "grad", 2, 16, err, sizeof err), -EEXIST);
    assert_int_equal(allreduce_attach(&a, ar.seg.name, 2, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "rank 2"));
    assert_int_equal(allreduce_attach(&a, ar.seg.name, 0, err, sizeof err), 0);
    assert_int_equal(allreduce_attach(&b, ar.seg.name, 0, err, sizeof err), -EBUSY);
    assert_non_null(strstr(err, "already attached"));
    allreduce_free(&a);
    assert_int_equal(allreduce_attach(&a, ar.seg.name, 0, err, sizeof err), 0); /* free gave the rank back */
    float x[4] = {1, 2, 3, 4};
    assert_int_equal(allreduce_sum(&ar, x, 4, 0), -EINVAL); /* the creator's handle has no rank */
    allreduce_free(&a);

    char name[SHM_NAME_MAX];
    char ns[SHM_PREFIX_MAX];
    shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
    snprintf(name, sizeof name, "/%s%s.missing", ns, t_mp_run);
    assert_int_equal(allreduce_attach(&a, name, 0, err, sizeof err), -ENOENT);
    struct ring ring;
    struct ring_params rp = {.entry_size = 8, .capacity = 4};
    assert_int_equal(ring_create(&ring, t_mp_run, "q", &rp, err, sizeof err), 0);
    assert_int_equal(allreduce_attach(&a, ring.seg.name, 0, err, sizeof err), -EINVAL); /* not an all-reduce */
    ring_free(&ring);
    allreduce_free(&ar);
    allreduce_free(NULL);
    allreduce_free(&a); /* zeroed by the failed attach */
    assert_true(shm_run_unlink(t_mp_run) == 2);

    /* One rank: returns at once with the buffer as it was. */
    assert_int_equal(allreduce_create(&ar, t_mp_run, "one", 1, 4, err, sizeof err), 0);
    assert_int_equal(allreduce_attach(&a, ar.seg.name, 0, err, sizeof err), 0);
    assert_int_equal(allreduce_sum(&a, x, 4, ALLREDUCE_FOREVER), 0);
    assert_true(x[0] == 1 && x[1] == 2 && x[2] == 3 && x[3] == 4);
    assert_int_equal(allreduce_sum(&a, x, 5, ALLREDUCE_FOREVER), -EINVAL);
    assert_int_equal(allreduce_sum(&a, NULL, 0, ALLREDUCE_FOREVER), 0);
    allreduce_close(&ar);
    assert_int_equal(allreduce_sum(&a, x, 4, ALLREDUCE_FOREVER), -EPIPE);
    allreduce_free(&a);
    allreduce_free(&ar);
    assert_int_equal(shm_run_unlink(t_mp_run), 1);
}

int main(void)
{
    t_mp_init("test_allreduce");
    const char *seed = getenv("SLUICE_TEST_SEED");
    g_seed = seed ? strtoull(seed, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    print_message("seed %#llx (SLUICE_TEST_SEED=%#llx reproduces it)\n", (unsigned long long)g_seed,
                  (unsigned long long)g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_create_attach_errors, t_mp_teardown),
        cmocka_unit_test_teardown(test_order_matters, t_mp_teardown),
        cmocka_unit_test_teardown(test_exact_sums, t_mp_teardown),
        cmocka_unit_test_teardown(test_many_steps, t_mp_teardown),
        cmocka_unit_test_teardown(test_mismatch, t_mp_teardown),
        cmocka_unit_test_teardown(test_timeout_resume, t_mp_teardown),
        cmocka_unit_test_teardown(test_poll_timeout_zero, t_mp_teardown),
        cmocka_unit_test_teardown(test_close_wakes_waiters, t_mp_teardown),
        cmocka_unit_test_teardown(test_kill_rank, t_mp_teardown),
        cmocka_unit_test_teardown(test_threads, t_mp_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    shm_run_unlink(t_mp_run);
    return rc;
}
