/* test_featbuf_dev.c - the device record of the feature buffer
 * (featbuf.h "rows on the device", featbuf_device.c) without a GPU: the
 * handle's fixed place in the shared header and that publishing touches
 * nothing else; every state transition and its refusals; and, across
 * processes with fake 64-byte handles, importers that sleep until the
 * rows are published and read the exporter's bytes, an exporter whose
 * wait for the importers returns only after the last one has closed,
 * refusals once closing, and an importer that dies with the handle open:
 * the exporter's wait times out instead of hanging, and ends with -EPIPE
 * when the run is marked broken. The CUDA side is test_featbuf_ipc. */
#include "tests/t_util.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#include "core/util.h"
#include "stages/featbuf.h"
#include "t_mp.h"

static char err[512];

#define NSLOTS 64u
#define ROW_BYTES 400u
#define STRIDE 448u

static void fake_handle(unsigned char *h, uint64_t seed)
{
    for (unsigned i = 0; i < FEATBUF_IPC_HANDLE_BYTES; i += 8) {
        uint64_t v = sl_mix64(seed + i);
        memcpy(h + i, &v, 8);
    }
}

static struct featbuf_params params(bool device)
{
    return (struct featbuf_params){.n_nodes = 1000, .nslots = NSLOTS, .row_bytes = ROW_BYTES, .rows_on_device = device};
}

static void *mk(struct featbuf *fb, bool device, size_t *len)
{
    struct featbuf_params p = params(device);
    *len = featbuf_mem_size(&p);
    void *mem = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(mem != MAP_FAILED);
    memset(fb, 0, sizeof *fb);
    if (featbuf_mem_format(mem, *len, &p, err, sizeof err) || featbuf_init(fb, mem, *len, err, sizeof err))
        fail_msg("format/init: %s", err);
    return mem;
}

static uint64_t ms_since(uint64_t t0)
{
    return (sl_now_ns() - t0) / 1000000u;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The record's place and contents in the raw memory; publish writes
 * nothing outside it. */
static void test_layout(void **state)
{
    (void)state;
    assert_int_equal(FEATBUF_DEV_OFFSET % 64, 0);
    assert_int_equal(FEATBUF_DEV_HANDLE_OFFSET % 64, 0);
    assert_int_equal(FEATBUF_DEV_HANDLE_OFFSET - FEATBUF_DEV_OFFSET, 64);
    assert_int_equal(FEATBUF_IPC_HANDLE_BYTES, 64);
    struct featbuf fb;
    size_t len;
    unsigned char *mem = mk(&fb, true, &len);
    assert_null(fb.rows);
    assert_int_equal(fb.stride, STRIDE);
    assert_true((unsigned char *)fb.slots - mem >= FEATBUF_DEV_OFFSET + 128); /* inside the header */
    unsigned char *before = malloc(len);
    assert_non_null(before);
    memcpy(before, mem, len);
    unsigned char h[FEATBUF_IPC_HANDLE_BYTES];
    fake_handle(h, 42);
    const char *bus = "0000:3b:00.0";
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 3, bus, (uint64_t)NSLOTS * STRIDE + 4096), 0);
    /* the handle's bytes, the ordinal, sizes and bus id at their offsets */
    assert_memory_equal(mem + FEATBUF_DEV_HANDLE_OFFSET, h, sizeof h);
    int32_t dev, pid;
    uint64_t bytes, stride;
    memcpy(&dev, mem + FEATBUF_DEV_OFFSET + 8, 4);
    memcpy(&pid, mem + FEATBUF_DEV_OFFSET + 12, 4);
    memcpy(&bytes, mem + FEATBUF_DEV_OFFSET + 16, 8);
    memcpy(&stride, mem + FEATBUF_DEV_OFFSET + 24, 8);
    assert_int_equal(dev, 3);
    assert_int_equal(pid, getpid());
    assert_int_equal(bytes, (uint64_t)NSLOTS * STRIDE + 4096);
    assert_int_equal(stride, STRIDE);
    assert_string_equal((const char *)mem + FEATBUF_DEV_OFFSET + 32, bus);
    uint32_t word;
    memcpy(&word, mem + FEATBUF_DEV_OFFSET, 4);
    assert_int_equal(word >> 28, FEATBUF_DEV_READY);
    /* nothing outside the record changed */
    for (size_t i = 0; i < len; i++)
        if (mem[i] != before[i] && (i < FEATBUF_DEV_OFFSET || i >= FEATBUF_DEV_OFFSET + 128))
            fail_msg("publishing changed byte %zu, outside the device record", i);
    char msg[256];
    if (featbuf_check(&fb, msg, sizeof msg))
        fail_msg("featbuf_check: %s", msg);
    /* what an importer gets back */
    struct featbuf_device d;
    assert_int_equal(featbuf_device_attach(&fb, &d), 0);
    assert_memory_equal(d.handle, h, sizeof h);
    assert_int_equal(d.device, 3);
    assert_string_equal(d.pci_bus_id, bus);
    assert_int_equal(d.bytes, (uint64_t)NSLOTS * STRIDE + 4096);
    assert_int_equal(d.stride, STRIDE);
    assert_int_equal(d.exporter_pid, getpid());
    free(before);
    munmap(mem, len);

    /* refusals: a CPU buffer, a short handle, too few bytes, bad device or bus id */
    mem = mk(&fb, false, &len);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 0, NULL, 1ull << 30), -EINVAL);
    munmap(mem, len);
    mem = mk(&fb, true, &len);
    assert_int_equal(featbuf_device_publish(&fb, h, 63, 0, NULL, 1ull << 30), -EINVAL);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 0, NULL, (uint64_t)NSLOTS * STRIDE - 1), -EINVAL);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, -1, NULL, 1ull << 30), -EINVAL);
    char longbus[FEATBUF_DEV_BUS_ID_BYTES + 1];
    memset(longbus, 'a', sizeof longbus - 1);
    longbus[sizeof longbus - 1] = '\0';
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 0, longbus, 1ull << 30), -EINVAL);
    assert_int_equal(featbuf_device_state(&fb, NULL), FEATBUF_DEV_NONE);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 0, NULL, (uint64_t)NSLOTS * STRIDE), 0);
    assert_int_equal(featbuf_device_attach(&fb, &d), 0);
    assert_string_equal(d.pci_bus_id, "");
    munmap(mem, len);
}

/* Every transition in one process. */
static void test_states(void **state)
{
    (void)state;
    struct featbuf fb;
    size_t len;
    void *mem = mk(&fb, true, &len);
    struct featbuf_device d;
    uint32_t n = 99;
    assert_int_equal(featbuf_device_state(&fb, &n), FEATBUF_DEV_NONE);
    assert_int_equal(n, 0);
    assert_int_equal(featbuf_device_attach(&fb, &d), -EAGAIN);
    uint64_t t0 = sl_now_ns();
    assert_int_equal(featbuf_device_wait_ready(&fb, 60), -ETIMEDOUT);
    assert_true(ms_since(t0) >= 55);
    assert_int_equal(featbuf_device_close(&fb), -EINVAL);
    assert_int_equal(featbuf_device_wait_closed(&fb, 0), -EINVAL);
    assert_int_equal(featbuf_device_detach(&fb), -EINVAL);
    unsigned char h[FEATBUF_IPC_HANDLE_BYTES];
    fake_handle(h, 7);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 0, NULL, (uint64_t)NSLOTS * STRIDE), 0);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 0, NULL, (uint64_t)NSLOTS * STRIDE), -EALREADY);
    assert_int_equal(featbuf_device_wait_ready(&fb, 0), 0);
    assert_int_equal(featbuf_device_attach(&fb, &d), 0);
    assert_int_equal(featbuf_device_attach(&fb, &d), 0);
    assert_int_equal(featbuf_device_state(&fb, &n), FEATBUF_DEV_READY);
    assert_int_equal(n, 2);
    assert_int_equal(featbuf_device_detach(&fb), 0);
    assert_int_equal(featbuf_device_close(&fb), 0);
    assert_int_equal(featbuf_device_close(&fb), 0);
    assert_int_equal(featbuf_device_state(&fb, &n), FEATBUF_DEV_CLOSING);
    assert_int_equal(n, 1);
    assert_int_equal(featbuf_device_attach(&fb, &d), -EPIPE);
    assert_int_equal(featbuf_device_wait_ready(&fb, 1000), -EPIPE);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 0, NULL, (uint64_t)NSLOTS * STRIDE), -EALREADY);
    t0 = sl_now_ns();
    assert_int_equal(featbuf_device_wait_closed(&fb, 60), -ETIMEDOUT);
    assert_true(ms_since(t0) >= 55);
    assert_int_equal(featbuf_device_detach(&fb), 0);
    assert_int_equal(featbuf_device_wait_closed(&fb, 0), 0);
    assert_int_equal(featbuf_device_state(&fb, &n), FEATBUF_DEV_CLOSED);
    assert_int_equal(n, 0);
    assert_int_equal(featbuf_device_wait_closed(&fb, 0), 0);
    assert_int_equal(featbuf_device_detach(&fb), -EINVAL);
    assert_int_equal(featbuf_device_attach(&fb, &d), -EPIPE);
    munmap(mem, len);

    /* broken: publish, attach and waits say so; detach still counts out */
    mem = mk(&fb, true, &len);
    featbuf_mark_broken(&fb);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 0, NULL, (uint64_t)NSLOTS * STRIDE), -EPIPE);
    assert_int_equal(featbuf_device_wait_ready(&fb, 1000), -EPIPE);
    munmap(mem, len);
    mem = mk(&fb, true, &len);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 0, NULL, (uint64_t)NSLOTS * STRIDE), 0);
    assert_int_equal(featbuf_device_attach(&fb, &d), 0);
    featbuf_mark_broken(&fb);
    assert_int_equal(featbuf_device_attach(&fb, &d), -EPIPE);
    assert_int_equal(featbuf_device_close(&fb), 0);
    assert_int_equal(featbuf_device_wait_closed(&fb, 1000), -EPIPE);
    assert_int_equal(featbuf_device_detach(&fb), 0);
    assert_int_equal(featbuf_device_wait_closed(&fb, 1000), 0); /* none left: safe to free, broken or not */
    munmap(mem, len);
}

/* ---- across processes ------------------------------------------------------------ */

struct shared {
    atomic_uint attached;
    atomic_ullong detached_ns[4]; /* when each importer counted itself out */
    atomic_int rc[4];
};

static struct shared *shared_map(void)
{
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    return sh;
}

/* Importer i: attach by name, sleep until published, check the record,
 * hold it for hold_ms, detach. Exit 0, or the step that failed. */
static int importer(const char *name, int i, int hold_ms, struct shared *sh)
{
    struct featbuf fb;
    char e[256];
    if (featbuf_attach(&fb, name, e, sizeof e))
        return 10;
    int rc = featbuf_device_wait_ready(&fb, 20000);
    sh->rc[i] = rc;
    if (rc)
        return 11;
    struct featbuf_device d;
    if (featbuf_device_attach(&fb, &d))
        return 12;
    atomic_fetch_add(&sh->attached, 1);
    unsigned char h[FEATBUF_IPC_HANDLE_BYTES];
    fake_handle(h, 1000);
    if (memcmp(h, d.handle, sizeof h) || d.device != 1 || strcmp(d.pci_bus_id, "0000:c1:00.0") ||
        d.stride != fb.stride || d.bytes != (uint64_t)fb.nslots * fb.stride)
        return 13;
    nap_ms(hold_ms);
    atomic_store(&sh->detached_ns[i], sl_now_ns()); /* the handle is "closed" here, then counted out */
    if (featbuf_device_detach(&fb))
        return 14;
    featbuf_free(&fb);
    return 0;
}

static pid_t spawn(void)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        t_mp_child_init();
    else
        t_mp_track(pid);
    return pid;
}

static int reap(pid_t pid)
{
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    for (int i = 0; i < t_mp_nchildren; i++)
        if (t_mp_children[i] == pid)
            t_mp_children[i] = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Three importers wait for the rows, the exporter publishes; the
 * exporter's wait for them ends only after the last one left. */
static void test_processes(void **state)
{
    (void)state;
    struct featbuf fb;
    struct featbuf_params p = params(true);
    if (featbuf_create(&fb, t_mp_run, "devfb", &p, err, sizeof err))
        fail_msg("featbuf_create: %s", err);
    struct shared *sh = shared_map();
    alarm(60);
    pid_t kids[3];
    for (int i = 0; i < 3; i++)
        if ((kids[i] = spawn()) == 0)
            _exit(importer(fb.seg.name, i, 150 + 100 * i, sh));
    nap_ms(100); /* they are asleep in featbuf_device_wait_ready by now, or soon */
    unsigned char h[FEATBUF_IPC_HANDLE_BYTES];
    fake_handle(h, 1000);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 1, "0000:c1:00.0", (uint64_t)NSLOTS * fb.stride), 0);
    uint64_t t0 = sl_now_ns();
    while (atomic_load(&sh->attached) < 3 && ms_since(t0) < 20000)
        nap_ms(1);
    assert_int_equal(atomic_load(&sh->attached), 3);
    assert_int_equal(featbuf_device_close(&fb), 0);
    struct featbuf_device d;
    assert_int_equal(featbuf_device_attach(&fb, &d), -EPIPE); /* a late importer is refused */
    int rc = featbuf_device_wait_closed(&fb, 20000);
    uint64_t done = sl_now_ns();
    assert_int_equal(rc, 0);
    for (int i = 0; i < 3; i++) {
        uint64_t at = atomic_load(&sh->detached_ns[i]);
        if (at == 0 || at > done)
            fail_msg("the exporter's wait ended before importer %d counted itself out", i);
    }
    assert_int_equal(featbuf_device_state(&fb, NULL), FEATBUF_DEV_CLOSED);
    for (int i = 0; i < 3; i++) {
        int st = reap(kids[i]);
        if (st)
            fail_msg("importer %d failed at step %d (wait rc %d)", i, st, sh->rc[i]);
    }
    alarm(0);
    featbuf_free(&fb);
    shm_run_unlink(t_mp_run);
    munmap(sh, sizeof *sh);
}

struct breaker {
    struct featbuf *fb;
    int delay_ms;
};

static void *break_later(void *arg)
{
    struct breaker *b = arg;
    nap_ms(b->delay_ms);
    featbuf_mark_broken(b->fb); /* what the supervisor's layout_close does */
    return NULL;
}

/* An importer dies with the handle open: the exporter's wait times out
 * (bounded) and ends with -EPIPE once the run is marked broken; an
 * importer waiting for rows that never come also ends with -EPIPE. */
static void test_dead_importer(void **state)
{
    (void)state;
    struct featbuf fb;
    struct featbuf_params p = params(true);
    if (featbuf_create(&fb, t_mp_run, "devfb", &p, err, sizeof err))
        fail_msg("featbuf_create: %s", err);
    alarm(60);
    unsigned char h[FEATBUF_IPC_HANDLE_BYTES];
    fake_handle(h, 1000);
    assert_int_equal(featbuf_device_publish(&fb, h, sizeof h, 1, NULL, (uint64_t)NSLOTS * fb.stride), 0);
    pid_t kid = spawn();
    if (kid == 0) {
        struct featbuf c;
        struct featbuf_device d;
        if (featbuf_attach(&c, fb.seg.name, NULL, 0) || featbuf_device_attach(&c, &d))
            _exit(1);
        raise(SIGKILL); /* dies holding the handle */
        _exit(2);
    }
    assert_int_equal(reap(kid), 128 + SIGKILL);
    uint32_t n;
    assert_int_equal(featbuf_device_state(&fb, &n), FEATBUF_DEV_READY);
    assert_int_equal(n, 1);
    assert_int_equal(featbuf_device_close(&fb), 0);
    uint64_t t0 = sl_now_ns();
    assert_int_equal(featbuf_device_wait_closed(&fb, 100), -ETIMEDOUT);
    uint64_t took = ms_since(t0);
    if (took < 90 || took > 5000)
        fail_msg("a 100 ms wait took %" PRIu64 " ms", took);
    /* the supervisor marks the buffer broken while the exporter sleeps */
    pthread_t th;
    struct breaker b = {&fb, 150};
    assert_int_equal(pthread_create(&th, NULL, break_later, &b), 0);
    t0 = sl_now_ns();
    assert_int_equal(featbuf_device_wait_closed(&fb, 30000), -EPIPE);
    took = ms_since(t0);
    pthread_join(th, NULL);
    if (took > 10000)
        fail_msg("the exporter woke %" PRIu64 " ms after the buffer broke", took);
    assert_int_equal(featbuf_device_state(&fb, &n), FEATBUF_DEV_CLOSING); /* not CLOSED: do not free */
    assert_int_equal(n, 1);
    featbuf_free(&fb);
    shm_run_unlink(t_mp_run);

    /* an importer asleep waiting for the rows wakes with -EPIPE */
    if (featbuf_create(&fb, t_mp_run, "devfb", &p, err, sizeof err))
        fail_msg("featbuf_create: %s", err);
    struct shared *sh = shared_map();
    kid = spawn();
    if (kid == 0)
        _exit(importer(fb.seg.name, 0, 0, sh));
    nap_ms(150);
    featbuf_mark_broken(&fb);
    assert_int_equal(reap(kid), 11);
    assert_int_equal(sh->rc[0], -EPIPE);
    alarm(0);
    featbuf_free(&fb);
    shm_run_unlink(t_mp_run);
    munmap(sh, sizeof *sh);
}

int main(void)
{
    t_mp_init("test_featbuf_dev");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_states),
        cmocka_unit_test_teardown(test_processes, t_mp_teardown),
        cmocka_unit_test_teardown(test_dead_importer, t_mp_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    shm_run_unlink(t_mp_run);
    return rc;
}
