/* test_reducer.c - the reducer table (stages/reducer.h), shm variant, with
 * threads as ranks of one node: the sum is the rank-order float sum, bit
 * for bit, on every rank, whatever n; the open checks the segment's size
 * and the variant's shape; abort from one rank fails every other rank's
 * waiting call with -EPIPE and the reducer stays broken; a tick that says
 * stop cancels a wait. (The net variant, and both inside real runs, are
 * tested end to end by test_multinode and test_train.) */
#include "t_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "ipc/allreduce.h"
#include "ipc/shm.h"
#include "stages/reducer.h"

#define RANKS 3
#define FLOATS 1000

static char g_run[64], g_name[128];
static struct allreduce g_owner;

static void seg_create(void)
{
    char err[256] = "";
    snprintf(g_run, sizeof g_run, "tred%d", (int)getpid());
    assert_int_equal(allreduce_create(&g_owner, g_run, "allreduce", RANKS, FLOATS + 1, err, sizeof err), 0);
    assert_int_equal(shm_name(g_name, sizeof g_name, g_run, "allreduce", err, sizeof err), 0);
}

static void seg_remove(void)
{
    allreduce_free(&g_owner);
    shm_seg_unlink(g_name);
}

static float value(uint32_t rank, size_t i)
{
    return (float)((double)((i * 2654435761u + rank * 40503u) % 10007) / 977.0 - 5.0) * (rank == 1 ? 1e-3f : 1.0f);
}

struct rank_arg {
    uint32_t rank;
    struct reducer *r;
    float buf[FLOATS]; /* the first call's */
    float small[8];    /* the second's */
    int rc[3];
    int stop; /* tick: cancel when set */
};

static void *rank_sums(void *p)
{
    struct rank_arg *a = p;
    static const size_t ns[3] = {FLOATS, 7, 0}; /* n changes between calls; 0 is a barrier */
    for (int c = 0; c < 3; c++) {
        float *buf = c == 0 ? a->buf : a->small;
        for (size_t i = 0; i < ns[c]; i++)
            buf[i] = value(a->rank, i);
        a->rc[c] = reducer_allreduce(a->r, buf, ns[c]);
    }
    return NULL;
}

static void open_ranks(struct rank_arg *a, int (*tick)(void *))
{
    char err[256] = "";
    for (uint32_t r = 0; r < RANKS; r++) {
        a[r].rank = r;
        struct reducer_params p = {.allreduce_name = g_name,
                                   .floats = FLOATS + 1,
                                   .rank = r,
                                   .ranks = RANKS,
                                   .nodes = 1,
                                   .tick = tick,
                                   .tick_arg = &a[r]};
        if (reducer_shm_open(&a[r].r, &p, err, sizeof err) != 0)
            fail_msg("reducer_shm_open: %s", err);
        assert_string_equal(a[r].r->ops->name, "shm");
        assert_false(a[r].r->ops->device);
    }
}

static void test_shm_sum_bits(void **state)
{
    seg_create();
    static struct rank_arg a[RANKS];
    memset(a, 0, sizeof a);
    open_ranks(a, NULL);
    pthread_t th[RANKS];
    for (int r = 0; r < RANKS; r++)
        assert_int_equal(pthread_create(&th[r], NULL, rank_sums, &a[r]), 0);
    for (int r = 0; r < RANKS; r++)
        assert_int_equal(pthread_join(th[r], NULL), 0);
    for (size_t i = 0; i < FLOATS; i++) {
        volatile float want = value(0, i);
        for (uint32_t r = 1; r < RANKS; r++)
            want = want + value(r, i);
        for (int r = 0; r < RANKS; r++) {
            assert_true(memcmp(&a[r].buf[i], (const void *)&want, sizeof want) == 0);
            if (i < 7)
                assert_true(memcmp(&a[r].small[i], (const void *)&want, sizeof want) == 0);
        }
    }
    for (int r = 0; r < RANKS; r++)
        for (int c = 0; c < 3; c++)
            assert_int_equal(a[r].rc[c], 0);
    for (int r = 0; r < RANKS; r++)
        reducer_free(a[r].r);
    reducer_free(NULL);
    seg_remove();
}

static void test_shm_open_checks(void **state)
{
    seg_create();
    char err[256] = "";
    struct reducer *r = (struct reducer *)1;
    struct reducer_params p = {.allreduce_name = g_name, .floats = FLOATS + 2, .rank = 0, .ranks = RANKS, .nodes = 1};
    assert_int_equal(reducer_shm_open(&r, &p, err, sizeof err), -EINVAL); /* segment too small */
    assert_null(r);
    assert_non_null(strstr(err, "floats"));
    p.floats = FLOATS;
    p.nodes = 2;
    assert_int_equal(reducer_shm_open(&r, &p, err, sizeof err), -EINVAL); /* several nodes: the net variant's */
    p.nodes = 1;
    p.ranks = 1;
    assert_int_equal(reducer_shm_open(&r, &p, err, sizeof err), -EINVAL); /* one rank needs none */
    p.ranks = RANKS;
    assert_int_equal(reducer_shm_open(&r, &p, err, sizeof err), 0); /* the rank was given back by the failures */
    reducer_free(r);
    struct reducer_params q = {.floats = 4, .ranks = 2, .nodes = 1};
    assert_int_equal(reducer_net_open(&r, &q, err, sizeof err), -EINVAL); /* one node: the shm variant's */
    seg_remove();
}

static void *rank_one_call(void *p)
{
    struct rank_arg *a = p;
    for (size_t i = 0; i < 4; i++)
        a->buf[i] = 1.0f;
    a->rc[0] = reducer_allreduce(a->r, a->buf, 4);
    a->rc[1] = reducer_allreduce(a->r, a->buf, 4);
    return NULL;
}

static int stop_tick(void *p)
{
    return ((struct rank_arg *)p)->stop;
}

/* Ranks 0 and 1 wait for rank 2, which aborts instead of summing: both get
 * -EPIPE, then again on their next call. A tick returning non-zero cancels
 * a lone rank's wait. */
static void test_shm_abort_and_cancel(void **state)
{
    seg_create();
    static struct rank_arg a[RANKS];
    memset(a, 0, sizeof a);
    open_ranks(a, stop_tick);
    pthread_t th[2];
    for (int r = 0; r < 2; r++)
        assert_int_equal(pthread_create(&th[r], NULL, rank_one_call, &a[r]), 0);
    usleep(50000);
    reducer_abort(a[2].r);
    reducer_abort(a[2].r); /* idempotent */
    for (int r = 0; r < 2; r++) {
        assert_int_equal(pthread_join(th[r], NULL), 0);
        assert_int_equal(a[r].rc[0], -EPIPE);
        assert_int_equal(a[r].rc[1], -EPIPE);
    }
    for (int r = 0; r < RANKS; r++)
        reducer_free(a[r].r);
    seg_remove();

    seg_create();
    memset(a, 0, sizeof a);
    open_ranks(a, stop_tick);
    a[0].stop = 1; /* the first tick (after REDUCER_TICK_MS) cancels */
    a[0].buf[0] = 1.0f;
    assert_int_equal(reducer_allreduce(a[0].r, a[0].buf, 1), -ECANCELED);
    assert_int_equal(reducer_allreduce(a[0].r, a[0].buf, 1), -EPIPE); /* broken from then on */
    for (int r = 0; r < RANKS; r++)
        reducer_free(a[r].r);
    seg_remove();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shm_sum_bits),
        cmocka_unit_test(test_shm_open_checks),
        cmocka_unit_test(test_shm_abort_and_cancel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
