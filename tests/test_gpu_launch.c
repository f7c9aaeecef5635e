/* test_gpu_launch.c - the launcher's GPU side on a machine with a GPU
 * (ctest label gpu; exits 77, which ctest reports as skipped, when the
 * probe finds none):
 *   - the NCCL unique id from the root's helper is one a rank can join
 *     with: this process, on device 0, creates a communicator of one rank
 *     from it while the helper serves the bootstrap root, and an
 *     all-reduce of a seeded buffer gives the buffer back bit for bit;
 *   - gnnlaunch --gpus 1 with the test stages: the launcher names the
 *     GPU the probe named, every stage of rank 0 runs with --device=0,
 *     exit 0, nothing left behind;
 *   - gnnlaunch --gpus <count + 1>: exit 2 naming how many there are,
 *     before anything starts. */
#include "t_util.h"

#include <cuda_runtime_api.h>
#include <signal.h>
#if SLUICE_HAVE_NCCL
#include <nccl.h>
#endif

#include "core/util.h"
#include "gpu/device.h"
#include "ipc/run.h"
#include "t_launch.h"

#define CASE_ALARM_S 120

static struct device_probe g_probe;
static char g_ds[1200], g_cfg[1200];

#define CUDA_OK(call)                                                                                                  \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            fail_msg("%s: %s", #call, cudaGetErrorString(e_));                                                         \
    } while (0)

static void test_nccl_id_joins(void **state)
{
#if SLUICE_HAVE_NCCL
    struct device_nccl_root root;
    char err[1024];
    if (device_nccl_root_start(&root, err, sizeof err) != 0)
        fail_msg("%s", err);
    ncclUniqueId id;
    memcpy(id.internal, root.id, sizeof id.internal);
    CUDA_OK(cudaSetDevice(0));
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, 1, id, 0);
    if (r != ncclSuccess)
        fail_msg("ncclCommInitRank with the helper's id: %s (%s)", ncclGetErrorString(r), ncclGetLastError(NULL));
    enum { N = 4099 };
    static float host[N], back[N];
    uint64_t s = 42;
    for (int i = 0; i < N; i++)
        host[i] = (float)((double)(sl_splitmix64(&s) >> 11) / 9007199254740992.0 - 0.5);
    float *dev;
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMalloc((void **)&dev, sizeof host));
    CUDA_OK(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice));
    r = ncclAllReduce(dev, dev, N, ncclFloat, ncclSum, comm, stream);
    if (r != ncclSuccess)
        fail_msg("ncclAllReduce: %s", ncclGetErrorString(r));
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(back, dev, sizeof back, cudaMemcpyDeviceToHost));
    assert_memory_equal(back, host, sizeof host); /* one rank: the sum is its own buffer */
    CUDA_OK(cudaFree(dev));
    CUDA_OK(cudaStreamDestroy(stream));
    ncclCommDestroy(comm);
    pid_t helper = root.pid;
    device_nccl_root_stop(&root);
    assert_int_equal(kill(helper, 0), -1);
#else
    (void)state;
    skip(); /* built without NCCL */
#endif
}

static void test_launch_one_gpu(void **state)
{
    struct t_proc r;
    const char *env[] = {"SLUICE_TEST_ITEMS=200", NULL};
    t_launch_run(&r, env, (const char *[]){"--gpus", "1", g_cfg, NULL}, 90);
    t_expect_code(&r, 0);
    char want[256];
    snprintf(want, sizeof want, "gnnlaunch: --gpus 1: rank 0 on GPU 0 (%s", g_probe.names[0]);
    t_expect_log(&r, want);
    t_expect_no_log(&r, "SLUICE_FAKE_GPUS");
    for (int s = 0; s < RUN_STAGES; s++) {
        char path[1400], buf[1024];
        snprintf(path, sizeof path, "%s/%s.0", r.report, run_stage_name((enum run_stage)s));
        t_slurp(path, buf, sizeof buf);
        if (!strstr(buf, " device=0 "))
            fail_msg("%s: '%s' (expected device=0)", path, buf);
    }
    t_expect_clean(&r);
}

static void test_launch_too_many(void **state)
{
    struct t_proc r;
    char n[16], want[160];
    snprintf(n, sizeof n, "%d", g_probe.count + 1);
    t_launch_run(&r, NULL, (const char *[]){"--gpus", n, g_cfg, NULL}, 90);
    t_expect_code(&r, 2);
    snprintf(want, sizeof want, "gnnlaunch: --gpus %d: only %d GPU", g_probe.count + 1, g_probe.count);
    t_expect_log(&r, want);
    t_expect_no_log(&r, "batch arena per rank");
    t_expect_clean(&r);
}

static int group_setup(void **state)
{
    if (t_launch_setup("gpu-launch") != 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
    char prep[1200], out[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out, "%s synth %s --nodes 300 --avg-degree 4 --feat-dim 8 --classes 3", prep, g_ds) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", out);
        return -1;
    }
    FILE *f = fopen(g_cfg, "w");
    if (!f)
        return -1;
    fprintf(f, "[dataset]\npath = \"%s\"\n\n[model]\nfanouts = [5, 5]\n\n[train]\nbatch_size = 16\n", g_ds);
    fclose(f);
    return 0;
}

int main(void)
{
    unsetenv("SLUICE_FAKE_GPUS");
    char err[512];
    if (device_probe_run(&g_probe, err, sizeof err) != 0) {
        fprintf(stderr, "test_gpu_launch: the GPU probe failed: %s\n", err);
        return 1;
    }
    if (g_probe.count < 1) {
        printf("test_gpu_launch: skipped: no GPU (%s)\n", g_probe.error[0] ? g_probe.error : "CUDA sees none");
        return 77;
    }
    printf("test_gpu_launch: %d GPU(s), the first %s; driver %d, runtime %d\n", g_probe.count, g_probe.names[0],
           g_probe.driver, g_probe.runtime);
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nccl_id_joins, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_launch_one_gpu, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_launch_too_many, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
