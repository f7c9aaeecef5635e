/* test_trainer_cuda.c - the CUDA trainer backend (stages/trainer_cuda.c)
 * on a device (sluice_gpu: cuBLAS in pedantic float math) against the CPU
 * backend on the same configuration, batches and seeds (tests/t_trainer.c),
 * label gpu. Without a usable device it prints what it would have checked
 * and exits 77 (skipped). The host build of the same backend is checked bit
 * for bit in test_trainer_cuda_shim.c; here the GEMMs are cuBLAS, so:
 *   - one step from the same initial parameters (sage, gcn, gat, mlp; f32
 *     and f16 rows read from device memory; dropout on): the loss within
 *     1e-5 relative and the counts equal; Adam's first moment after the
 *     step (0.1 x the gradient) within 1e-7 + 1e-4 |ref|, the second within
 *     1e-12 + 2e-4 |ref|; the parameters within 1e-6 + 1e-5 |ref| wherever
 *     the gradient is clearly non-zero, and within 2 lr + 1e-6 where it is
 *     so small that its sign may differ (Adam's first step is lr times the
 *     gradient's sign);
 *   - five steps on from there, each loss within 2e-3 relative, and
 *     evaluation batches within 2e-3;
 *   - a reduced step through a device reducer (two identical ranks: the
 *     sum is 2x, the weight 2), and a host reducer refused with -EINVAL;
 *   - state() and state_loaded() are copies: exact; a checkpoint written
 *     from either backend loads in the other with exactly the saved bits,
 *     and the next step's loss agrees within 1e-5;
 *   - no device rows: -EINVAL. */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>

#include "gpu/kernels.h"
#include "ops/model.h"
#include "stages/reducer.h"
#include "stages/trainer_backend.h"
#include "t_trainer.h"

static const struct trainer_backend_ops *const CPU = &trainer_cpu_backend, *const DEV = &trainer_cuda_backend;
static struct gk_ctx g_ctx; /* the test's own: device rows, the device reducer */

/* d's rows copied to the device, as the featbuf's device rows would be. */
static void *rows_to_device(const struct t_tr_data *d)
{
    void *p = NULL;
    size_t bytes = d->fb.stride * d->fb.nslots;
    assert_int_equal(gk_malloc(&g_ctx, &p, bytes), 0);
    assert_int_equal(gk_upload(&g_ctx, p, d->fb.rows, bytes), 0);
    return p;
}

/* Copies a's state (host views) into backend b, exactly. */
static void copy_state(struct trainer_backend *a, const struct trainer_backend_ops *aops, struct trainer_backend *b,
                       const struct trainer_backend_ops *bops, const struct model_config *mc)
{
    struct trainer_state x, y;
    t_tr_state(aops, a, mc, &x);
    t_tr_state(bops, b, mc, &y);
    memcpy(y.params, x.params, x.n * sizeof(float));
    memcpy(y.adam_m, x.adam_m, x.n * sizeof(float));
    memcpy(y.adam_v, x.adam_v, x.n * sizeof(float));
    *y.step = *x.step;
    char err[512] = "";
    if (bops->state_loaded(b, err, sizeof err) != 0)
        fail_msg("%s backend: state_loaded: %s", bops->name, err);
    t_tr_state(bops, b, mc, &y);
    t_tr_close(y.params, x.params, x.n, 0, 0, "parameters after state_loaded");
}

/* After one step from the same state: moments and parameters within the
 * bounds above. */
static void check_one_step(struct trainer_backend *cpu, struct trainer_backend *dev, const struct model_config *mc,
                           float lr, const char *what)
{
    struct trainer_state a, b;
    t_tr_state(CPU, cpu, mc, &a);
    t_tr_state(DEV, dev, mc, &b);
    char msg[160];
    snprintf(msg, sizeof msg, "%s: Adam m (0.1 x gradient)", what);
    double worst_m = t_tr_close(b.adam_m, a.adam_m, a.n, 1e-7, 1e-4, msg);
    snprintf(msg, sizeof msg, "%s: Adam v", what);
    t_tr_close(b.adam_v, a.adam_v, a.n, 1e-12, 2e-4, msg);
    size_t loose = 0;
    for (size_t i = 0; i < a.n; i++) {
        double gtol = 10 * (1e-7 + 1e-4 * fabs((double)a.adam_m[i])); /* 10x the moment's tolerance */
        bool clear = fabs((double)a.adam_m[i]) > gtol;
        double tol = clear ? 1e-6 + 1e-5 * fabs((double)a.params[i]) : 2.0 * lr + 1e-6;
        loose += !clear;
        if (fabs((double)b.params[i] - (double)a.params[i]) > tol)
            fail_msg("%s: parameter %zu: %.9g against %.9g (gradient x 0.1: %.3g)", what, i, (double)b.params[i],
                     (double)a.params[i], (double)a.adam_m[i]);
    }
    print_message("%s: worst |dm| %.3g, %zu of %zu parameters with a gradient too small for its sign\n", what, worst_m,
                  loose, a.n);
}

static void test_matches_cpu(void **state)
{
    (void)state;
    for (int f16 = 0; f16 < 2; f16++) {
        struct t_tr_data d;
        t_tr_data_make(&d, f16, 11 + (uint64_t)f16);
        void *rows = rows_to_device(&d);
        for (int k = MODEL_SAGE; k <= MODEL_MLP; k++) {
            char what[64];
            snprintf(what, sizeof what, "%s, %s rows", model_kind_name((enum model_kind)k), f16 ? "f16" : "f32");
            struct trainer_backend_config c = t_tr_config(&d, (enum model_kind)k, 0.3f, 77 + (uint64_t)k);
            c.rows_dev = rows;
            struct trainer_backend *cpu = t_tr_create(CPU, &c), *dev = t_tr_create(DEV, &c);
            struct trainer_state a, b;
            t_tr_state(CPU, cpu, &c.model, &a);
            t_tr_state(DEV, dev, &c.model, &b);
            t_tr_close(b.params, a.params, a.n, 0, 0, "initial parameters"); /* drawn on the host */
            for (uint32_t g = 0; g < 6; g++) {
                struct trainer_loss x, y;
                t_tr_batch(CPU, cpu, &d.v[g % T_TR_BATCHES], true, 1000 + g, &x);
                t_tr_batch(DEV, dev, &d.v[g % T_TR_BATCHES], true, 1000 + g, &y);
                t_tr_loss_close(&y, &x, g == 0 ? 1e-5 : 2e-3, what);
                if (g == 0)
                    check_one_step(cpu, dev, &c.model, c.lr, what);
            }
            for (uint32_t g = 0; g < 2; g++) {
                struct trainer_loss x, y;
                t_tr_batch(CPU, cpu, &d.v[5 - g], false, 0, &x);
                t_tr_batch(DEV, dev, &d.v[5 - g], false, 0, &y);
                t_tr_loss_close(&y, &x, 2e-3, what);
            }
            CPU->free(cpu);
            DEV->free(dev);
        }
        gk_free(rows);
        t_tr_data_free(&d);
    }
}

/* A reducer over device buffers standing for two ranks holding the same
 * buffer: buf + buf (= 2 buf, exactly), on the test's own stream. */
static int dev2_allreduce(struct reducer *r, float *buf, size_t n)
{
    (void)r;
    int rc = gk_scale(&g_ctx, buf, n, 2.0f);
    return rc ? rc : gk_sync(&g_ctx);
}

static void dev2_abort(struct reducer *r)
{
    (void)r;
}

static void dev2_free(struct reducer *r)
{
    (void)r;
}

static int host_allreduce(struct reducer *r, float *buf, size_t n)
{
    (void)r, (void)buf, (void)n;
    return 0;
}

static const struct reducer_ops dev2_ops = {
    .name = "test-device-2", .device = true, .allreduce = dev2_allreduce, .abort = dev2_abort, .free = dev2_free};
static const struct reducer_ops host_ops = {
    .name = "test-host", .device = false, .allreduce = host_allreduce, .abort = dev2_abort, .free = dev2_free};

static void test_reduced_step(void **state)
{
    (void)state;
    struct t_tr_data d;
    t_tr_data_make(&d, false, 21);
    void *rows = rows_to_device(&d);
    struct trainer_backend_config c = t_tr_config(&d, MODEL_GCN, 0.0f, 5);
    c.rows_dev = rows;
    struct trainer_backend *cpu = t_tr_create(CPU, &c), *dev = t_tr_create(DEV, &c);
    struct reducer r2 = {.ops = &dev2_ops}, rh = {.ops = &host_ops};
    char err[512] = "";
    struct trainer_loss x, y;
    assert_int_equal(DEV->gather(dev, &d.v[0], err, sizeof err), 0);
    assert_int_equal(DEV->forward(dev, &d.v[0], true, 3, &y, err, sizeof err), 0);
    assert_int_equal(DEV->backward(dev, NULL, err, sizeof err), 0);
    float w = 0;
    assert_int_equal(DEV->reduce(dev, &rh, true, &w), -EINVAL);
    assert_int_equal(DEV->reduce(dev, &r2, true, &w), 0);
    assert_true(w == 2.0f);
    assert_int_equal(DEV->step(dev, true, 0.5f), 0);
    assert_int_equal(DEV->reduce(dev, &r2, false, &w), 0); /* padding */
    assert_true(w == 0.0f);
    /* 2g x 0.5 = g exactly: the CPU's plain step */
    t_tr_batch(CPU, cpu, &d.v[0], true, 3, &x);
    t_tr_loss_close(&y, &x, 1e-5, "gcn, reduced");
    check_one_step(cpu, dev, &c.model, c.lr, "gcn, reduced step");
    /* the same with the sums started by backward, one bucket per layer:
     * the same bits as summing after it */
    c.bucket_floats = 1;
    struct trainer_backend *bk = t_tr_create(DEV, &c);
    assert_int_equal(DEV->gather(bk, &d.v[0], err, sizeof err), 0);
    assert_int_equal(DEV->forward(bk, &d.v[0], true, 3, &y, err, sizeof err), 0);
    assert_int_equal(DEV->backward(bk, &r2, err, sizeof err), 0);
    assert_int_equal(DEV->reduce(bk, &r2, true, &w), 0);
    assert_true(w == 2.0f);
    assert_int_equal(DEV->step(bk, true, 0.5f), 0);
    struct trainer_state s1, s2;
    t_tr_state(DEV, dev, &c.model, &s1);
    size_t n = s1.n;
    float *p1 = malloc(n * sizeof *p1);
    assert_non_null(p1);
    memcpy(p1, s1.params, n * sizeof *p1);
    t_tr_state(DEV, bk, &c.model, &s2);
    assert_memory_equal(p1, s2.params, n * sizeof *p1);
    free(p1);
    DEV->free(bk);
    CPU->free(cpu);
    DEV->free(dev);
    gk_free(rows);
    t_tr_data_free(&d);
}

static void test_state_and_checkpoints(void **state)
{
    (void)state;
    struct t_tr_data d;
    t_tr_data_make(&d, true, 51);
    void *rows = rows_to_device(&d);
    char dir[512], path[600], err[512] = "";
    t_scratch(dir, sizeof dir, "trainer-cuda-dev-ckpt");
    snprintf(path, sizeof path, "%s/epoch-000001.safetensors", dir);
    for (int k = MODEL_SAGE; k <= MODEL_MLP; k++)
        for (int from_dev = 0; from_dev < 2; from_dev++) {
            char what[96];
            snprintf(what, sizeof what, "%s, checkpoint from the %s backend", model_kind_name((enum model_kind)k),
                     from_dev ? "cuda" : "cpu");
            struct trainer_backend_config c = t_tr_config(&d, (enum model_kind)k, 0.2f, 13 + (uint64_t)k);
            c.rows_dev = rows;
            const struct trainer_backend_ops *src = from_dev ? DEV : CPU, *dst = from_dev ? CPU : DEV;
            struct trainer_backend *a = t_tr_create(src, &c);
            for (uint32_t g = 0; g < 3; g++) {
                struct trainer_loss l;
                t_tr_batch(src, a, &d.v[g], true, 700 + g, &l);
            }
            t_tr_ckpt_save(src, a, &c.model, path);
            struct trainer_backend_config c2 = c;
            c2.model.seed += 1000;
            struct trainer_backend *b = t_tr_create(dst, &c2);
            t_tr_ckpt_load(dst, b, &c2.model, path);
            struct trainer_state x, y;
            t_tr_state(src, a, &c.model, &x);
            t_tr_state(dst, b, &c.model, &y);
            t_tr_close(y.params, x.params, x.n, 0, 0, what);
            t_tr_close(y.adam_m, x.adam_m, x.n, 0, 0, what);
            t_tr_close(y.adam_v, x.adam_v, x.n, 0, 0, what);
            assert_int_equal(*y.step, 3);
            struct trainer_loss la, lb;
            t_tr_batch(src, a, &d.v[3], true, 703, &la);
            t_tr_batch(dst, b, &d.v[3], true, 703, &lb);
            t_tr_loss_close(&lb, &la, 1e-5, what);
            src->free(a);
            dst->free(b);
        }
    /* the real build reads device rows only */
    struct trainer_backend_config c = t_tr_config(&d, MODEL_SAGE, 0.0f, 1);
    struct trainer_backend *b = NULL;
    assert_int_equal(DEV->create(&b, &c, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "no rows on the device"));
    /* copy_state both ways is exact */
    c.rows_dev = rows;
    struct trainer_backend *cpu = t_tr_create(CPU, &c), *dev = t_tr_create(DEV, &c);
    struct trainer_loss l;
    t_tr_batch(CPU, cpu, &d.v[0], true, 1, &l);
    copy_state(cpu, CPU, dev, DEV, &c.model);
    t_tr_batch(DEV, dev, &d.v[1], true, 2, &l);
    copy_state(dev, DEV, cpu, CPU, &c.model);
    CPU->free(cpu);
    DEV->free(dev);
    t_rmrf(dir);
    gk_free(rows);
    t_tr_data_free(&d);
}

int main(void)
{
    int n = 0;
    char err[512] = "";
    if (gk_device_count(&n, err, sizeof err) != 0 || n < 1 ||
        gk_ctx_init(&g_ctx, GK_MATH_PEDANTIC, err, sizeof err) != 0) {
        printf("test_trainer_cuda: no usable CUDA device (%s); skipped. On a device it checks the CUDA trainer "
               "backend against the CPU backend (sage, gcn, gat, mlp; f32 and f16 rows on the device; dropout): one "
               "step's loss within 1e-5, Adam's moments within 1e-4 relative and the parameters within 1e-5 "
               "(2 lr where a gradient's sign is in doubt), five more steps' losses within 2e-3; a reduced and a "
               "padding step through a device reducer, a host reducer refused; state() and state_loaded() exact; "
               "checkpoints from either backend loading in the other with the same bits.\n",
               err[0] ? err : "the runtime reports no device");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_cpu),
        cmocka_unit_test(test_reduced_step),
        cmocka_unit_test(test_state_and_checkpoints),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    gk_ctx_free(&g_ctx);
    return rc;
}
