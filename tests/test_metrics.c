/* test_metrics.c - the metrics page: layout and header checks, claiming
 * blocks (also from another process), counters added from many threads,
 * heartbeats, and snapshots through a read-only mapping. */
#include "t_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "core/util.h"
#include "ipc/metrics.h"
#include "ipc/shm.h"

static char g_run[SHM_RUN_ID_MAX];

static int teardown(void **state)
{
    shm_run_unlink(g_run);
    return 0;
}

static void test_layout(void **state)
{
    assert_int_equal(metrics_mem_size(0), 0);
    assert_int_equal(metrics_mem_size(METRICS_BLOCKS_MAX + 1), 0);
    assert_int_equal(metrics_mem_size(3), 64 + 3 * 128);
    static _Alignas(4096) unsigned char mem[4096];
    char err[256];
    assert_int_equal(metrics_mem_format(mem, sizeof mem, 0, err, sizeof err), -EINVAL);
    assert_int_equal(metrics_mem_format(mem + 8, sizeof mem - 8, 2, err, sizeof err), -EINVAL);
    assert_int_equal(metrics_mem_format(mem, 64 + 2 * 128 - 1, 2, err, sizeof err), -EINVAL);
    struct metrics_page p;
    memset(mem, 0, sizeof mem);
    assert_int_equal(metrics_init(&p, mem, sizeof mem, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "does not hold a metrics page"));
    memset(mem, 0xFF, sizeof mem); /* formatting must clear old contents */
    assert_int_equal(metrics_mem_format(mem, sizeof mem, 5, err, sizeof err), 0);
    assert_int_equal(metrics_init(&p, mem, sizeof mem, err, sizeof err), 0);
    assert_int_equal(p.nblocks, 5);
    for (uint32_t i = 0; i < 5; i++) {
        struct metrics_block *b = metrics_block(&p, i);
        assert_non_null(b);
        assert_int_equal((uintptr_t)b % 64, 0);
        assert_int_equal(atomic_load(&b->items), 0);
        assert_int_equal(atomic_load(&b->pid), 0);
    }
    assert_null(metrics_block(&p, 5));
    assert_null(metrics_block(NULL, 0));
    assert_int_equal(metrics_init(&p, mem, 64 + 4 * 128, err, sizeof err), -EINVAL); /* mapped too little */
    ((uint32_t *)mem)[2] = 99;                                                       /* version */
    assert_int_equal(metrics_init(&p, mem, sizeof mem, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "version"));
    metrics_free(&p);
    metrics_free(NULL);
}

static void test_claim_count_snapshot(void **state)
{
    char err[512];
    struct metrics_page w, r;
    assert_int_equal(metrics_create(&w, g_run, "metrics", 4, err, sizeof err), 0);
    assert_int_equal(metrics_attach(&r, w.seg.name, SHM_RDONLY, err, sizeof err), 0);
    assert_int_equal(r.nblocks, 4);

    struct metrics_block *b = metrics_block(&w, 1);
    uint64_t before = sl_now_ns();
    assert_int_equal(metrics_claim(b, "sampler-with-a-rather-long-name-that-will-be-cut-short", 2, err, sizeof err), 0);
    metrics_add(&b->busy_ns, 1500);
    metrics_add(&b->wait_ns, 700);
    metrics_add(&b->items, 3);
    metrics_add(&b->bytes, 4096);
    metrics_add(&b->io_ops, 2);
    metrics_add(&b->errors, 1);
    metrics_add(&b->items, 4);

    struct metrics_snapshot s[8];
    assert_int_equal(metrics_snapshot(&r, s, 8), 4);
    assert_int_equal(s[1].pid, getpid());
    assert_int_equal(s[1].state, METRICS_RUNNING);
    assert_int_equal(s[1].rank, 2);
    assert_int_equal(strlen(s[1].name), METRICS_NAME_MAX - 1);
    assert_int_equal(strncmp(s[1].name, "sampler-with", 12), 0);
    assert_int_equal(s[1].busy_ns, 1500);
    assert_int_equal(s[1].wait_ns, 700);
    assert_int_equal(s[1].items, 7);
    assert_int_equal(s[1].bytes, 4096);
    assert_int_equal(s[1].io_ops, 2);
    assert_int_equal(s[1].errors, 1);
    assert_true(s[1].heartbeat_ns >= before);
    assert_int_equal(s[0].state, METRICS_FREE);
    assert_int_equal(s[0].pid, 0);
    assert_string_equal(s[0].name, "");
    assert_int_equal(metrics_snapshot(&r, s, 2), 2); /* bounded by max */

    uint64_t hb = s[1].heartbeat_ns;
    char name1[METRICS_NAME_MAX];
    memcpy(name1, s[1].name, sizeof name1);
    metrics_heartbeat(b);
    metrics_snapshot(&r, s, 4);
    assert_true(s[1].heartbeat_ns >= hb);

    /* another process: cannot take block 1, takes block 2, counts, finishes */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        if (metrics_claim(metrics_block(&w, 1), "thief", 0, NULL, 0) != -EBUSY)
            _exit(1);
        struct metrics_block *mine = metrics_block(&w, 2);
        if (metrics_claim(mine, "extractor", 5, NULL, 0) != 0)
            _exit(2);
        for (int i = 0; i < 1000; i++)
            metrics_add(&mine->items, 1);
        metrics_set_state(mine, METRICS_DONE);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    metrics_snapshot(&r, s, 4);
    assert_int_equal(s[2].pid, pid);
    assert_string_equal(s[2].name, "extractor");
    assert_int_equal(s[2].rank, 5);
    assert_int_equal(s[2].items, 1000);
    assert_int_equal(s[2].state, METRICS_DONE);
    assert_string_equal(s[1].name, name1); /* block 1 unchanged by the failed claim */
    assert_int_equal(s[1].pid, getpid());
    assert_int_equal(s[1].rank, 2);

    /* claiming again from the owner is allowed (e.g. after exec) */
    assert_int_equal(metrics_claim(b, "sampler", 2, err, sizeof err), 0);
    err[0] = '\0';
    assert_int_equal(metrics_claim(metrics_block(&w, 2), "x", 0, err, sizeof err), -EBUSY);
    assert_non_null(strstr(err, "claimed"));

    /* wrong kind */
    struct metrics_page bad;
    struct shm_seg raw;
    assert_int_equal(shm_seg_create(&raw, g_run, "raw", SHM_KIND_RAW, 4096, err, sizeof err), 0);
    assert_int_equal(metrics_attach(&bad, raw.name, 0, err, sizeof err), -EINVAL);
    assert_null(bad.blocks);
    shm_seg_detach(&raw);
    assert_int_equal(metrics_create(&bad, g_run, "m0", 0, err, sizeof err), -EINVAL);
    metrics_free(&r);
    metrics_free(&w);
}

struct adder {
    struct metrics_block *b;
    int n;
};

static void *adder_main(void *arg)
{
    struct adder *a = arg;
    for (int i = 0; i < a->n; i++) {
        metrics_add(&a->b->items, 1);
        metrics_add(&a->b->bytes, 3);
        if (i % 1000 == 0)
            metrics_heartbeat(a->b);
    }
    return NULL;
}

static struct metrics_page *g_reader_page;
static _Atomic bool g_stop;

static void *reader_main(void *arg)
{
    struct metrics_snapshot s[2];
    uint64_t last = 0;
    bool ok = true;
    while (!atomic_load(&g_stop)) {
        metrics_snapshot(g_reader_page, s, 2);
        if (s[0].items < last)
            ok = false; /* counters never go backwards */
        last = s[0].items;
    }
    return ok ? (void *)1 : NULL;
}

/* Threads of one process add to one block; a reader snapshots meanwhile. */
static void test_threads(void **state)
{
    static _Alignas(4096) unsigned char mem[4096];
    char err[256];
    struct metrics_page p;
    assert_int_equal(metrics_mem_format(mem, sizeof mem, 2, err, sizeof err), 0);
    assert_int_equal(metrics_init(&p, mem, sizeof mem, err, sizeof err), 0);
    struct metrics_block *b = metrics_block(&p, 0);
    assert_int_equal(metrics_claim(b, "trainer", 0, err, sizeof err), 0);
    g_reader_page = &p;
    atomic_store(&g_stop, false);
    pthread_t rd, th[4];
    assert_int_equal(pthread_create(&rd, NULL, reader_main, NULL), 0);
    struct adder a = {.b = b, .n = 50000};
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, adder_main, &a), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    atomic_store(&g_stop, true);
    void *ok;
    pthread_join(rd, &ok);
    assert_non_null(ok);
    struct metrics_snapshot s[2];
    metrics_snapshot(&p, s, 2);
    assert_int_equal(s[0].items, 200000);
    assert_int_equal(s[0].bytes, 600000);
    metrics_free(&p);
}

/* Busy periods under way count as they pass: a reading in the middle of
 * a long period holds the part spent, readings never go back, and once
 * the periods end the counter holds exactly their busy time. */
static void test_busy_open(void **state)
{
    (void)state;
    static _Alignas(4096) unsigned char mem[4096];
    char err[256];
    struct metrics_page p;
    assert_int_equal(metrics_mem_format(mem, sizeof mem, 1, err, sizeof err), 0);
    assert_int_equal(metrics_init(&p, mem, sizeof mem, err, sizeof err), 0);
    struct metrics_block *b = metrics_block(&p, 0);
    assert_int_equal(metrics_claim(b, "trainer", 0, err, sizeof err), 0);
    uint64_t t0 = 5000000000ull; /* 5 s, as CLOCK_MONOTONIC would say */
    assert_int_equal(metrics_busy_now(b, t0), 0);
    metrics_busy_begin(b, t0);
    assert_int_equal(metrics_busy_now(b, t0 + 300000000ull), 300000000ull); /* 0.3 s into it */
    metrics_busy_begin(b, t0 + 100000000ull);                              /* a second thread */
    assert_int_equal(metrics_busy_now(b, t0 + 400000000ull), 700000000ull); /* 0.4 + 0.3 */
    metrics_busy_end(b, t0 + 100000000ull, 250000000ull); /* the second ends, busy 0.25 s */
    uint64_t mid = metrics_busy_now(b, t0 + 500000000ull);
    assert_int_equal(mid, 250000000ull + 500000000ull);
    metrics_busy_end(b, t0, 1740000000ull); /* the first ends after 1.74 s */
    assert_int_equal(metrics_busy_now(b, t0 + 9000000000ull), 1990000000ull);
    assert_int_equal(atomic_load(&b->busy_open), 0);
    struct metrics_snapshot snap;
    metrics_snapshot(&p, &snap, 1);
    assert_int_equal(snap.busy_ns, 1990000000ull);
    metrics_free(&p);
}

int main(void)
{
    assert_int_equal(shm_run_id_new(g_run, sizeof g_run), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test_teardown(test_claim_count_snapshot, teardown),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_busy_open),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    shm_run_unlink(g_run);
    return rc;
}
