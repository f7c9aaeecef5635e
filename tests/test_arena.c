/* test_arena.c - the batch arena: layout, allocation until empty (with and
 * without timeouts), release checks (double release, range), slot contents
 * across mappings, close, and exclusive ownership under contention between
 * threads (TSan) and between processes. */
#include "t_util.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/prctl.h>

#include "core/util.h"
#include "ipc/arena.h"
#include "ipc/shm.h"

static char g_run[SHM_RUN_ID_MAX];

static int teardown(void **state)
{
    shm_run_unlink(g_run);
    return 0;
}

static void test_layout(void **state)
{
    struct arena_params bad[] = {{.slot_size = 0, .nslots = 4},
                                 {.slot_size = 8, .nslots = 0},
                                 {.slot_size = 8, .nslots = ARENA_SLOTS_MAX + 1},
                                 {.slot_size = SIZE_MAX / 2, .nslots = 8}};
    char err[512];
    struct arena a;
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        assert_int_equal(arena_mem_size(&bad[i]), 0);
        err[0] = '\0';
        assert_int_equal(arena_create(&a, g_run, "bad", &bad[i], err, sizeof err), -EINVAL);
        assert_true(strlen(err) > 0);
    }
    struct arena_params p = {.slot_size = 1000, .nslots = 5};
    size_t need = arena_mem_size(&p);
    assert_true(need >= 5 * 1024);
    void *mem;
    assert_int_equal(posix_memalign(&mem, 4096, need), 0);
    assert_int_equal(arena_mem_format(mem, need - 1, &p, err, sizeof err), -EINVAL);
    memset(mem, 0, need);
    assert_int_equal(arena_init(&a, mem, need, err, sizeof err), -EINVAL);
    assert_int_equal(arena_mem_format(mem, need, &p, err, sizeof err), 0);
    assert_int_equal(arena_init(&a, mem, need, err, sizeof err), 0);
    assert_int_equal(a.nslots, 5);
    assert_int_equal(a.slot_size, 1000);
    assert_int_equal(a.stride, 1024);
    assert_int_equal(arena_available(&a), 5);
    assert_int_equal((uintptr_t)arena_slot(&a, 0) % 4096, 0);
    for (uint32_t i = 0; i < 5; i++)
        assert_int_equal((uintptr_t)arena_slot(&a, i) % ARENA_SLOT_ALIGN, 0);
    assert_null(arena_slot(&a, 5));
    ((uint32_t *)mem)[2] = 77; /* version */
    assert_int_equal(arena_init(&a, mem, need, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "version"));
    arena_free(&a);
    arena_free(NULL);
    free(mem);
}

static void test_alloc_release(void **state)
{
    char err[512];
    struct arena a, b;
    struct arena_params p = {.slot_size = 256, .nslots = 6};
    assert_int_equal(arena_create(&a, g_run, "arena", &p, err, sizeof err), 0);
    assert_int_equal(arena_attach(&b, a.seg.name, err, sizeof err), 0);
    uint32_t got[6];
    bool seen[6] = {false};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(arena_alloc(&a, &got[i], 0), 0);
        assert_true(got[i] < 6);
        assert_false(seen[got[i]]);
        seen[got[i]] = true;
        memset(arena_slot(&a, got[i]), 'a' + got[i], 256);
    }
    uint32_t x;
    assert_int_equal(arena_alloc(&a, &x, 0), -EAGAIN);
    assert_int_equal(arena_alloc(&b, &x, 20), -ETIMEDOUT);
    assert_int_equal(arena_available(&b), 0);
    /* contents are shared between mappings */
    for (int i = 0; i < 6; i++) {
        unsigned char *s = arena_slot(&b, got[i]);
        assert_int_equal(s[0], 'a' + got[i]);
        assert_int_equal(s[255], 'a' + got[i]);
    }
    assert_int_equal(arena_release(&b, got[3]), 0);
    assert_int_equal(arena_release(&b, got[3]), -EINVAL); /* double release */
    assert_int_equal(arena_release(&a, 6), -EINVAL);      /* out of range */
    assert_int_equal(arena_available(&a), 1);
    assert_int_equal(arena_alloc(&a, &x, 0), 0);
    assert_int_equal(x, got[3]);
    for (int i = 0; i < 6; i++)
        assert_int_equal(arena_release(&a, got[i]), 0);
    assert_int_equal(arena_release(&a, got[0]), -EINVAL); /* free already */
    assert_int_equal(arena_available(&a), 6);

    /* wrong kind */
    struct arena c;
    struct shm_seg raw;
    assert_int_equal(shm_seg_create(&raw, g_run, "raw", SHM_KIND_RAW, 8192, err, sizeof err), 0);
    err[0] = '\0';
    assert_int_equal(arena_attach(&c, raw.name, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, raw.name));
    shm_seg_detach(&raw);
    arena_free(&b);
    arena_free(&a);
}

struct waiter_arg {
    struct arena *a;
    int rc;
};

static void *alloc_forever(void *arg)
{
    struct waiter_arg *w = arg;
    uint32_t x;
    w->rc = arena_alloc(w->a, &x, RING_FOREVER);
    return NULL;
}

static void test_close_wakes_allocators(void **state)
{
    char err[512];
    struct arena a;
    struct arena_params p = {.slot_size = 64, .nslots = 1};
    assert_int_equal(arena_create(&a, g_run, "arena1", &p, err, sizeof err), 0);
    uint32_t x;
    assert_int_equal(arena_alloc(&a, &x, 0), 0);
    struct waiter_arg w = {.a = &a, .rc = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, alloc_forever, &w), 0);
    struct timespec ts = {.tv_nsec = 30 * 1000 * 1000};
    nanosleep(&ts, NULL); /* likely asleep by now; the outcome is the same either way */
    arena_close(&a);
    pthread_join(th, NULL);
    assert_int_equal(w.rc, -EPIPE);
    assert_int_equal(arena_release(&a, x), -EPIPE);
    arena_free(&a);
}

/* Many users, few slots: each fills its slot with its own tag, checks it
 * is still intact, and releases it. Two owners of one slot at once would
 * show up as a foreign tag (or as -EIO from the state check). */
struct user {
    struct arena *a;
    uint32_t tag;
    int rounds;
    int bad;
};

static int use_arena(struct arena *a, uint32_t tag, int rounds)
{
    int bad = 0;
    for (int i = 0; i < rounds; i++) {
        uint32_t s;
        int rc = arena_alloc(a, &s, 10000);
        if (rc)
            return 1000 + -rc;
        uint32_t *w = arena_slot(a, s);
        size_t n = a->slot_size / sizeof *w;
        for (size_t k = 0; k < n; k++)
            w[k] = tag ^ (uint32_t)i;
        for (size_t k = 0; k < n; k++)
            if (w[k] != (tag ^ (uint32_t)i))
                bad++;
        if (arena_release(a, s) != 0)
            bad++;
    }
    return bad;
}

static void *user_main(void *arg)
{
    struct user *u = arg;
    u->bad = use_arena(u->a, u->tag, u->rounds);
    return NULL;
}

static void test_exclusive_threads(void **state)
{
    char err[512];
    struct arena a;
    struct arena_params p = {.slot_size = 512, .nslots = 3};
    assert_int_equal(arena_create(&a, g_run, "arena-t", &p, err, sizeof err), 0);
    struct user u[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        u[i] = (struct user){.a = &a, .tag = 0x1000u * (uint32_t)(i + 1), .rounds = 20000};
        assert_int_equal(pthread_create(&th[i], NULL, user_main, &u[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(u[i].bad, 0);
    }
    assert_int_equal(arena_available(&a), 3);
    arena_free(&a);
}

static void test_exclusive_processes(void **state)
{
    char err[512];
    struct arena a;
    struct arena_params p = {.slot_size = 512, .nslots = 3};
    assert_int_equal(arena_create(&a, g_run, "arena-p", &p, err, sizeof err), 0);
    pid_t pids[4];
    for (int i = 0; i < 4; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            signal(SIGSEGV, SIG_DFL);
            struct arena mine;
            if (arena_attach(&mine, a.seg.name, NULL, 0) != 0)
                _exit(200);
            int bad = use_arena(&mine, 0x10000u * (uint32_t)(i + 1), 20000);
            arena_free(&mine);
            _exit(bad > 199 ? 199 : bad);
        }
    }
    for (int i = 0; i < 4; i++) {
        int st;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(arena_available(&a), 3);
    arena_free(&a);
}

int main(void)
{
    assert_int_equal(shm_run_id_new(g_run, sizeof g_run), 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_layout, teardown),
        cmocka_unit_test_teardown(test_alloc_release, teardown),
        cmocka_unit_test_teardown(test_close_wakes_allocators, teardown),
        cmocka_unit_test_teardown(test_exclusive_threads, teardown),
        cmocka_unit_test_teardown(test_exclusive_processes, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    shm_run_unlink(g_run);
    return rc;
}
