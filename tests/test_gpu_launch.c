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
 *     before anything starts;
 *   - gnnlaunch --gpus 1 with the real stages (build/bin): GraphSAGE, GCN
 *     and GAT each train on the GPU to the accuracy the same run reaches
 *     with --cpu (ordered runs: the same batches and dropout masks, only
 *     the GEMMs' rounding differs), the trainer reports the CUDA backend,
 *     and the GPU run's checkpoint has the CPU run's tensors, names and
 *     shapes, and a --cpu --resume continues it;
 *   - two ranks on the one GPU (--ranks-per-gpu 2) train in step (the
 *     trainers' digest comparison says so after epoch 1) and learn. */
#include "t_util.h"

#include <cuda_runtime_api.h>
#include <signal.h>
#if SLUICE_HAVE_NCCL
#include <nccl.h>
#endif

#include <math.h>

#include "core/util.h"
#include "gpu/device.h"
#include "ops/ckpt.h"
#include "ipc/run.h"
#include "t_launch.h"

#define CASE_ALARM_S 300

static struct device_probe g_probe;
static char g_ds[1200], g_cfg[1200], g_ds_train[1200], g_stages[1200];

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

/* Names, dtypes and shapes of every tensor of a are b's (values differ). */
static void same_layout(const char *a, const char *b)
{
    struct ckpt x, y;
    char err[512];
    if (ckpt_read(&x, a, err, sizeof err) != 0 || ckpt_read(&y, b, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(ckpt_count(&x), ckpt_count(&y));
    for (uint32_t i = 0; i < ckpt_count(&x); i++) {
        const struct ckpt_entry *e = ckpt_entry_at(&x, i);
        uint32_t nx, ny;
        uint64_t sx[CKPT_MAX_NDIM], sy[CKPT_MAX_NDIM];
        assert_non_null(ckpt_find(&x, ckpt_name(&x, i), e->dtype, &nx, sx));
        if (!ckpt_find(&y, ckpt_name(&x, i), e->dtype, &ny, sy))
            fail_msg("%s lacks %s (%s), which %s has", b, ckpt_name(&x, i), e->dtype, a);
        assert_int_equal(nx, ny);
        assert_memory_equal(sx, sy, nx * sizeof sx[0]);
    }
    ckpt_free(&x);
    ckpt_free(&y);
}

static void write_train_config(const char *path, const char *kind, const char *ck)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"%s\"\nhidden = 32\nfanouts = [8, 4]\ndropout = 0.2\n\n"
            "[train]\nbatch_size = 64\nepochs = 2\nlr = 0.01\nseed = 5\ncheckpoint_dir = \"%s\"\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 8\nstaging_mb = 4\nio_depth = 16\n"
            "ordered = true\n",
            g_ds_train, kind, ck);
    fclose(f);
}

static void test_train_one_gpu(void **state)
{
    (void)state;
    static const char *const kinds[] = {"sage", "gcn", "gat"};
    char cfg[2][1300], ck[2][1300], a[1400], b[1400];
    for (size_t k = 0; k < SL_ARRAY_LEN(kinds); k++) {
        double acc[2];
        for (int gpu = 0; gpu < 2; gpu++) {
            snprintf(cfg[gpu], sizeof cfg[gpu], "%s/train-%s-%s.toml", t_ldir, kinds[k], gpu ? "gpu" : "cpu");
            snprintf(ck[gpu], sizeof ck[gpu], "%s/ck-%s-%s", t_ldir, kinds[k], gpu ? "gpu" : "cpu");
            write_train_config(cfg[gpu], kinds[k], ck[gpu]);
            struct t_proc r;
            const char *const *args = gpu ? (const char *[]){"--gpus", "1", cfg[gpu], NULL}
                                          : (const char *[]){"--cpu", cfg[gpu], NULL};
            t_launch_run(&r, (const char *[]){g_stages, NULL}, args, 240);
            t_expect_code(&r, 0);
            t_expect_clean(&r);
            if (gpu) {
                t_expect_log(&r, "rank 0 on GPU 0");
                t_expect_log(&r, "parameters, cuda backend, on GPU 0");
            } else {
                t_expect_log(&r, "parameters, cpu backend, ");
            }
            acc[gpu] = t_final_test_acc(&r, 2);
        }
        printf("test_gpu_launch: %s: test_acc %.4f on the CPU, %.4f on the GPU\n", kinds[k], acc[0], acc[1]);
        if (fabs(acc[1] - acc[0]) > 0.02)
            fail_msg("%s: test_acc %.4f on the GPU, %.4f on the CPU: more than 2 points apart", kinds[k], acc[1],
                     acc[0]);
        if (acc[1] < 0.5) /* 4 classes */
            fail_msg("%s: the GPU run reached only test_acc=%.4f", kinds[k], acc[1]);
        assert_int_equal(ckpt_path(a, sizeof a, ck[0], 2), 0);
        assert_int_equal(ckpt_path(b, sizeof b, ck[1], 2), 0);
        same_layout(a, b);
        same_layout(b, a);
    }
    /* the CPU takes the last GPU run's checkpoint and goes on */
    struct t_proc r;
    t_launch_run(&r, (const char *[]){g_stages, NULL},
                 (const char *[]){"--cpu", cfg[1], "--epochs", "3", "--resume", NULL}, 240);
    t_expect_code(&r, 0);
    t_expect_log(&r, "gnnlaunch: resuming from ");
    t_expect_clean(&r);
}

/* Two ranks on the one GPU (--ranks-per-gpu 2, each trainer a host of
 * its own for NCCL): they train in step (the trainers compare their
 * parameters' digests after every epoch: docs/training.md, "Ranks in
 * step") and learn. */
static void test_two_ranks_one_gpu(void **state)
{
    (void)state;
    char cfg[1300], ck[1300];
    snprintf(cfg, sizeof cfg, "%s/train-two.toml", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-two", t_ldir);
    write_train_config(cfg, "sage", ck);
    struct t_proc r;
    t_launch_run(&r, (const char *[]){g_stages, NULL},
                 (const char *[]){"--gpus", "1", "--ranks-per-gpu", "2", cfg, "--set", "pipeline.ordered=false", NULL},
                 240);
    t_expect_code(&r, 0);
    t_expect_clean(&r);
    t_expect_log(&r, "rank 0 on GPU 0");
    t_expect_log(&r, "rank 1 on GPU 0");
    t_expect_log(&r, "gnn-trainer rank 0: the 2 ranks' parameters are identical after epoch 1 (XXH3 ");
    double acc = t_final_test_acc(&r, 2);
    printf("test_gpu_launch: two ranks on one GPU: test_acc %.4f\n", acc);
    if (acc < 0.5) /* 4 classes */
        fail_msg("two ranks on one GPU reached only test_acc=%.4f", acc);
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
    /* for the real stages: the graph test_train learns on */
    snprintf(g_ds_train, sizeof g_ds_train, "%s/ds-train", t_ldir);
    if (t_run(out, sizeof out,
              "%s synth %s --nodes 4000 --avg-degree 8 --feat-dim 16 --classes 4 --homophily 0.9 "
              "--feature-noise 1.0 --train-frac 0.4 --val-frac 0.2 --test-frac 0.2 --seed 11",
              prep, g_ds_train) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", out);
        return -1;
    }
    t_real_stages(g_stages, sizeof g_stages);
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
        cmocka_unit_test_setup_teardown(test_train_one_gpu, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_two_ranks_one_gpu, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
