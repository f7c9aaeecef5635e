/* test_featbuf_ipc.c - the feature rows on a device across two processes
 * (stages/featbuf_cuda.c, sink_cuda.c, featbuf_device.c): a trainer-like
 * exporter cudaMallocs the rows and publishes the IPC handle in the
 * feature buffer's header; an extractor-like importer waits for it, opens
 * it, copies seeded rows (single rows and runs) from the node's staging
 * segment, registered once, with the CUDA row sink; the exporter reads
 * every row back bit for bit. Closing order: the exporter's wait for its
 * importers ends only after the importer has closed the handle, and while
 * it waits the state is CLOSING with the importer counted. An importer
 * that dies with the handle open: the exporter does not hang and does not
 * free; it ends with -EPIPE once the run is marked broken, as the
 * launcher does when a stage dies.
 *
 * The roles run in processes of their own that exec this program again
 * (--exporter / --importer RUN), so that no CUDA state crosses a fork.
 * Labelled gpu: without a device it prints what it would have checked and
 * exits 77 (skipped). The same protocol on fake handles, without a
 * device, is test_featbuf_dev. */
#include "tests/t_util.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include "core/util.h"
#include "ipc/futex.h"
#include "ipc/shm.h"
#include "ipc/staging.h"
#include "stages/featbuf.h"
#include "stages/featbuf_cuda.h"
#include "stages/sink.h"

#define NODES 5000u
#define NSLOTS 256u
#define ROWS 200u      /* nodes the importer loads: 0, 7, 14, ... */
#define ROW_BYTES 512u /* f32 x 128 */

/* The control page the roles meet on (a raw segment of the run). */
struct ctl {
    _Atomic uint32_t phase; /* futex word: PHASE_* */
    _Atomic int32_t importer_rc, exporter_rc;
};

enum {
    PHASE_START = 0,
    PHASE_COPIED = 1,  /* the importer copied and published every row, and still holds the handle */
    PHASE_CLOSING = 2, /* the importer is about to close the handle and count itself out */
    PHASE_DEAD = 3,    /* the parent saw the importer die */
};

static void row_of(unsigned char *dst, uint64_t node)
{
    for (unsigned i = 0; i < ROW_BYTES; i += 8) {
        uint64_t v = sl_mix64(node << 20 | i); /* every bit pattern: NaNs, denormals, -0 */
        memcpy(dst + i, &v, 8);
    }
}

static void set_phase(struct ctl *c, uint32_t p)
{
    atomic_store(&c->phase, p);
    futex_wake(&c->phase, 16);
}

static int wait_phase(struct ctl *c, uint32_t p, int timeout_ms)
{
    struct timespec deadline;
    futex_deadline(&deadline, timeout_ms);
    uint32_t v;
    while ((v = atomic_load(&c->phase)) < p)
        if (futex_wait_until(&c->phase, v, &deadline) == -ETIMEDOUT && atomic_load(&c->phase) < p)
            return -ETIMEDOUT;
    return 0;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- the roles (own processes; exit status: 0, or the step that failed) -------------- */

struct role {
    char run[SHM_RUN_ID_MAX];
    struct featbuf fb;
    struct shm_seg ctl_seg;
    struct ctl *ctl;
    char err[512];
};

static int role_open(struct role *r, const char *run)
{
    snprintf(r->run, sizeof r->run, "%s", run);
    char name[SHM_NAME_MAX];
    if (shm_name(name, sizeof name, run, "r0.featbuf", r->err, sizeof r->err) ||
        featbuf_attach(&r->fb, name, r->err, sizeof r->err))
        return 1;
    if (shm_name(name, sizeof name, run, "ctl", r->err, sizeof r->err) ||
        shm_seg_attach(&r->ctl_seg, name, SHM_KIND_RAW, 0, r->err, sizeof r->err))
        return 2;
    r->ctl = r->ctl_seg.data;
    return 0;
}

static int say(struct role *r, const char *who, int step)
{
    if (step)
        fprintf(stderr, "%s: step %d: %s\n", who, step, r->err);
    return step;
}

/* Trainer-like: export, wait for the rows, close, read them back, free. */
static int exporter(const char *run, bool orphaned)
{
    struct role r = {0};
    if (role_open(&r, run))
        return say(&r, "exporter", 10);
    struct featbuf_cuda cu;
    if (featbuf_cuda_export(&cu, &r.fb, 0, r.err, sizeof r.err))
        return say(&r, "exporter", 11);
    if (orphaned) {
        /* the importer opens the handle and dies; the run breaks */
        if (wait_phase(r.ctl, PHASE_DEAD, 60000))
            return say(&r, "exporter", 12);
        uint64_t t0 = sl_now_ns();
        int rc = featbuf_cuda_unexport(&cu, 60000, NULL, NULL, r.err, sizeof r.err);
        atomic_store(&r.ctl->exporter_rc, rc);
        if (rc != -EPIPE || cu.rows || (sl_now_ns() - t0) / 1000000u > 30000)
            return say(&r, "exporter", 13);
        return 0; /* the allocation goes with this process */
    }
    if (wait_phase(r.ctl, PHASE_COPIED, 60000))
        return say(&r, "exporter", 14);
    if (featbuf_device_close(&r.fb))
        return say(&r, "exporter", 15);
    int rc = featbuf_device_wait_closed(&r.fb, 60000);
    uint32_t phase = atomic_load(&r.ctl->phase);
    if (rc || phase != PHASE_CLOSING) {
        snprintf(r.err, sizeof r.err, "wait_closed %d with the importer at phase %u", rc, phase);
        return say(&r, "exporter", 16);
    }
    /* every row the importer loaded: VALID here, and its bytes on the device */
    unsigned char *h = malloc((size_t)NSLOTS * r.fb.stride), want[ROW_BYTES];
    if (!h || cudaMemcpy(h, r.fb.dev_rows, (size_t)NSLOTS * r.fb.stride, cudaMemcpyDeviceToHost) != cudaSuccess)
        return say(&r, "exporter", 17);
    for (uint32_t k = 0; k < ROWS; k++) {
        uint64_t node = (uint64_t)k * 7;
        uint32_t slot;
        int action;
        if (featbuf_acquire(&r.fb, node, &slot, &action) || action != FEATBUF_HIT) {
            snprintf(r.err, sizeof r.err, "node %" PRIu64 " is not valid in the buffer", node);
            return say(&r, "exporter", 18);
        }
        row_of(want, node);
        if (memcmp(h + (size_t)slot * r.fb.stride, want, ROW_BYTES)) {
            snprintf(r.err, sizeof r.err, "node %" PRIu64 " in slot %u: the device bytes differ", node, slot);
            return say(&r, "exporter", 19);
        }
        featbuf_release(&r.fb, slot);
    }
    free(h);
    if (featbuf_cuda_unexport(&cu, 0, NULL, NULL, r.err, sizeof r.err))
        return say(&r, "exporter", 20);
    atomic_store(&r.ctl->exporter_rc, 0);
    return 0;
}

/* Extractor-like: import, copy seeded rows from staging, hold, close. */
static int importer(const char *run, bool dies)
{
    struct role r = {0};
    if (role_open(&r, run))
        return say(&r, "importer", 30);
    struct staging stg;
    if (staging_attach(&stg, run, r.err, sizeof r.err))
        return say(&r, "importer", 31);
    struct featbuf_cuda cu;
    if (featbuf_cuda_import(&cu, &r.fb, -1, 60000, NULL, NULL, r.err, sizeof r.err))
        return say(&r, "importer", 32);
    if (dies)
        raise(SIGKILL); /* with the handle open and counted in */
    uint64_t nodes[ROWS];
    uint32_t slots[ROWS];
    uint8_t act[ROWS];
    for (uint32_t k = 0; k < ROWS; k++)
        nodes[k] = (uint64_t)k * 7;
    if (featbuf_acquire_many(&r.fb, nodes, ROWS, slots, act))
        return say(&r, "importer", 33);
    size_t slen;
    void *sdata = staging_data(&stg, &slen);
    struct row_sink s;
    if (row_sink_init(&s, row_sink_pick(&r.fb, r.err, sizeof r.err), &r.fb, sdata, slen, 8, r.err, sizeof r.err))
        return say(&r, "importer", 34);
    if (row_sink_cuda_registered() != 1)
        return say(&r, "importer", 35);
    /* runs of up to 4 adjacent slots share a block, rows 1024 bytes apart; the
     * block goes back to staging only once the sink reported its copy */
    struct row_sink_done done[8];
    uint32_t k = 0;
    while (k < ROWS || row_sink_pending(&s)) {
        uint32_t blk = STAGING_NONE;
        if (k < ROWS && row_sink_pending(&s) < 8 && staging_get(&stg, 0, 0, &blk) == 0) {
            uint32_t len = 1;
            while (len < 4 && k + len < ROWS && slots[k + len] == slots[k] + len && act[k + len] == FEATBUF_LOAD)
                len++;
            unsigned char *b = staging_block(&stg, blk);
            for (uint32_t i = 0; i < len; i++)
                row_of(b + i * 1024, nodes[k + i]);
            struct row_sink_copy c = {
                .slot = slots[k], .nrows = len, .src = b, .src_pitch = 1024, .row_bytes = ROW_BYTES, .tag = blk};
            if (act[k] != FEATBUF_LOAD || row_sink_put(&s, &c))
                return say(&r, "importer", 36);
            k += len;
            continue;
        }
        uint32_t n = row_sink_poll(&s, done, 8, true);
        for (uint32_t i = 0; i < n; i++) {
            if (done[i].copy_rc || done[i].fb_rc)
                return say(&r, "importer", 37);
            staging_put(&stg, 0, (uint32_t)done[i].tag);
        }
    }
    row_sink_free(&s);
    if (row_sink_cuda_registered() != 0)
        return say(&r, "importer", 38);
    featbuf_release_many(&r.fb, slots, ROWS);
    set_phase(r.ctl, PHASE_COPIED);
    /* the exporter closes and waits for us; we are still counted in */
    uint32_t n = 0;
    for (int i = 0; i < 200 && featbuf_device_state(&r.fb, &n) != FEATBUF_DEV_CLOSING; i++)
        nap_ms(10);
    nap_ms(200);
    if (featbuf_device_state(&r.fb, &n) != FEATBUF_DEV_CLOSING || n != 1)
        return say(&r, "importer", 39);
    struct featbuf_device d;
    if (featbuf_device_attach(&r.fb, &d) != -EPIPE) /* no new importer once closing */
        return say(&r, "importer", 40);
    set_phase(r.ctl, PHASE_CLOSING);
    featbuf_cuda_unimport(&cu); /* cudaIpcCloseMemHandle, then counted out */
    staging_free(&stg);
    atomic_store(&r.ctl->importer_rc, 0);
    return 0;
}

/* ---- the test (parent: launcher-like) ------------------------------------------------- */

static char g_run[SHM_RUN_ID_MAX];

static pid_t spawn_role(const char *role)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char *argv[] = {"test_featbuf_ipc", (char *)role, g_run, NULL};
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    return pid;
}

static int reap(pid_t pid, int timeout_s)
{
    for (int i = 0; i < timeout_s * 100; i++) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        nap_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

struct run {
    struct featbuf fb;
    struct staging stg;
    struct shm_seg ctl_seg;
    struct ctl *ctl;
};

static void run_make(struct run *r)
{
    char err[512];
    assert_int_equal(shm_run_id_new(g_run, sizeof g_run), 0);
    struct featbuf_params p = {.n_nodes = NODES, .nslots = NSLOTS, .row_bytes = ROW_BYTES, .rows_on_device = true};
    if (featbuf_create(&r->fb, g_run, "r0.featbuf", &p, err, sizeof err))
        fail_msg("featbuf_create: %s", err);
    struct staging_params sp = {.ranks = 1, .threads = 1, .blocks = 16, .block_bytes = 4096};
    if (staging_create(&r->stg, g_run, &sp, err, sizeof err))
        fail_msg("staging_create: %s", err);
    if (shm_seg_create(&r->ctl_seg, g_run, "ctl", SHM_KIND_RAW, sizeof *r->ctl, err, sizeof err))
        fail_msg("ctl: %s", err);
    r->ctl = r->ctl_seg.data;
    atomic_store(&r->ctl->importer_rc, -1);
    atomic_store(&r->ctl->exporter_rc, -1);
}

static void run_free(struct run *r)
{
    featbuf_free(&r->fb);
    staging_free(&r->stg);
    shm_seg_detach(&r->ctl_seg);
    shm_run_unlink(g_run);
}

static void test_copy_and_close(void **state)
{
    (void)state;
    struct run r = {0};
    run_make(&r);
    pid_t imp = spawn_role("--importer"); /* first: it waits for the handle */
    nap_ms(100);
    pid_t exp = spawn_role("--exporter");
    int ist = reap(imp, 120), est = reap(exp, 120);
    int phase = (int)atomic_load(&r.ctl->phase);
    uint32_t n = 99;
    int state_now = featbuf_device_state(&r.fb, &n);
    run_free(&r);
    if (ist || est)
        fail_msg("importer exit %d, exporter exit %d (phase %d)", ist, est, phase);
    assert_int_equal(phase, PHASE_CLOSING);
    assert_int_equal(state_now, FEATBUF_DEV_CLOSED);
    assert_int_equal(n, 0);
}

static void test_importer_dies(void **state)
{
    (void)state;
    struct run r = {0};
    run_make(&r);
    pid_t exp = spawn_role("--exporter-orphaned");
    pid_t imp = spawn_role("--importer-dies");
    int ist = reap(imp, 120);
    assert_int_equal(ist, 128 + SIGKILL);
    uint32_t n = 0;
    assert_int_equal(featbuf_device_state(&r.fb, &n), FEATBUF_DEV_READY);
    assert_int_equal(n, 1); /* the dead importer is still counted */
    set_phase(r.ctl, PHASE_DEAD);
    nap_ms(500);                /* the exporter now waits for it, in vain */
    featbuf_mark_broken(&r.fb); /* the launcher tearing the run down */
    int est = reap(exp, 60);
    int rc = atomic_load(&r.ctl->exporter_rc);
    run_free(&r);
    if (est)
        fail_msg("exporter exit %d (its wait returned %d, expected -EPIPE and no free)", est, rc);
    assert_int_equal(rc, -EPIPE);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--exporter"))
        return exporter(argv[2], false);
    if (argc == 3 && !strcmp(argv[1], "--exporter-orphaned"))
        return exporter(argv[2], true);
    if (argc == 3 && !strcmp(argv[1], "--importer"))
        return importer(argv[2], false);
    if (argc == 3 && !strcmp(argv[1], "--importer-dies"))
        return importer(argv[2], true);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("# SKIP test_featbuf_ipc: no CUDA device (%s)\n"
               "# with one it checks, across an exporter and an importer process: the IPC handle published in the "
               "feature buffer's header and opened by the importer; rows copied by the importer's CUDA row sink "
               "from the registered staging segment read back by the exporter bit for bit; the exporter's wait "
               "ending only after the importer closed the handle; an importer that dies with the handle open "
               "ending the exporter's wait with -EPIPE, without a free, once the run is marked broken\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_copy_and_close),
        cmocka_unit_test(test_importer_dies),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_run[0])
        shm_run_unlink(g_run);
    return rc;
}
