/* test_trainer_cuda_shim.c - the CUDA trainer backend (stages/trainer_cuda.c)
 * built against the host build of the kernels (sluice_gpu_shim: device
 * memory is host memory, gk_gemm is ops_gemm, every other kernel gives
 * its CPU twin's bits), against the CPU backend on the same model
 * configuration, batches and seeds. Everything must be bit for bit:
 *   - sage, gcn, gat (2 heads) and mlp, f32 and f16 rows, dropout on: the
 *     loss and counts of every training and evaluation batch, and after
 *     every step the parameters, both Adam moments and the step count;
 *   - the reduced step (reduce, then step(true, 1 / weight)) and padding
 *     steps, through a host reducer (what the shim build takes), and two
 *     ranks in two processes over the shm all-reduce, one of them padding;
 *   - state() / state_loaded(): what is written is what the device holds
 *     and what the next step computes with;
 *   - a checkpoint written from either backend loads in the other, and the
 *     two then train on to the same bits;
 *   - the errors: no device rows, a batch not gathered, a reducer of the
 *     other memory, state_loaded before state, a device table given host
 *     blocks.
 * The same comparisons on a device, within GEMM tolerance, are
 * test_trainer_cuda.c (label gpu). */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>

#include "gpu/kernels.h"
#include "ipc/allreduce.h"
#include "ipc/shm.h"
#include "ops/model.h"
#include "stages/reducer.h"
#include "stages/trainer_backend.h"
#include "t_trainer.h"

static const struct trainer_backend_ops *const CPU = &trainer_cpu_backend, *const DEV = &trainer_cuda_backend;

/* Both backends' state, bit for bit. */
static void same_state(struct trainer_backend *cpu, struct trainer_backend *dev, const struct model_config *mc,
                       const char *what)
{
    struct trainer_state a, b;
    t_tr_state(CPU, cpu, mc, &a);
    t_tr_state(DEV, dev, mc, &b);
    char msg[160];
    snprintf(msg, sizeof msg, "%s: parameters", what);
    t_tr_close(b.params, a.params, a.n, 0, 0, msg);
    snprintf(msg, sizeof msg, "%s: Adam m", what);
    t_tr_close(b.adam_m, a.adam_m, a.n, 0, 0, msg);
    snprintf(msg, sizeof msg, "%s: Adam v", what);
    t_tr_close(b.adam_v, a.adam_v, a.n, 0, 0, msg);
    if (*a.step != *b.step)
        fail_msg("%s: step %" PRIu64 " against %" PRIu64, what, *b.step, *a.step);
}

/* Trains both on batches first .. first + n - 1, comparing every loss and
 * the state after every step. */
static void train_both(struct trainer_backend *cpu, struct trainer_backend *dev, const struct t_tr_data *d,
                       const struct model_config *mc, uint32_t first, uint32_t n, const char *what)
{
    for (uint32_t k = first; k < first + n; k++) {
        struct trainer_loss a, b;
        uint64_t seed = 1000 + k;
        t_tr_batch(CPU, cpu, &d->v[k % T_TR_BATCHES], true, seed, &a);
        t_tr_batch(DEV, dev, &d->v[k % T_TR_BATCHES], true, seed, &b);
        char msg[160];
        snprintf(msg, sizeof msg, "%s: training batch %u", what, k);
        t_tr_loss_close(&b, &a, 0, msg);
        same_state(cpu, dev, mc, msg);
    }
}

/* ---- the same bits as the CPU --------------------------------------------------------------------- */

static void test_matches_cpu(void **state)
{
    (void)state;
    for (int f16 = 0; f16 < 2; f16++) {
        struct t_tr_data d;
        t_tr_data_make(&d, f16, 11 + (uint64_t)f16);
        for (int k = MODEL_SAGE; k <= MODEL_MLP; k++) {
            char what[64];
            snprintf(what, sizeof what, "%s, %s rows", model_kind_name((enum model_kind)k), f16 ? "f16" : "f32");
            struct trainer_backend_config c = t_tr_config(&d, (enum model_kind)k, 0.3f, 77 + (uint64_t)k);
            if (f16) { /* input dropout, elu, weight decay (Adam's and AdamW's in turn); gat: attention dropout, one output head */
                c.model.input_dropout = 0.2f;
                c.model.activation = MODEL_ACT_ELU;
                c.model.attention_dropout = 0.3f;
                c.model.out_heads = 1;
                if (k == MODEL_SAGE)
                    c.model.aggr = MODEL_AGGR_MAX;
                c.weight_decay = 5e-3f;
                c.decoupled = k % 2;
            }
            struct trainer_backend *cpu = t_tr_create(CPU, &c), *dev = t_tr_create(DEV, &c);
            same_state(cpu, dev, &c.model, what); /* the same initial parameters */
            struct trainer_state s0;
            t_tr_state(CPU, cpu, &c.model, &s0);
            float *p0 = malloc(s0.n * sizeof *p0);
            assert_non_null(p0);
            memcpy(p0, s0.params, s0.n * sizeof *p0);
            train_both(cpu, dev, &d, &c.model, 0, 5, what);
            /* evaluation batches: no dropout, nothing kept */
            for (uint32_t b = 0; b < 2; b++) {
                struct trainer_loss x, y;
                t_tr_batch(CPU, cpu, &d.v[5 - b], false, 0, &x);
                t_tr_batch(DEV, dev, &d.v[5 - b], false, 0, &y);
                t_tr_loss_close(&y, &x, 0, what);
                assert_true(x.labelled > 0);
            }
            /* training moved the parameters: the comparison above compared something */
            struct trainer_state s;
            t_tr_state(CPU, cpu, &c.model, &s);
            assert_int_equal(*s.step, 5);
            assert_true(memcmp(p0, s.params, s.n * sizeof *p0) != 0);
            free(p0);
            CPU->free(cpu);
            DEV->free(dev);
        }
        t_tr_data_free(&d);
    }
}

/* ---- reduced and padding steps ------------------------------------------------------------------ */

/* A host reducer standing for `copies` ranks that all hold this rank's
 * buffer: the rank-order sum buf + buf + ... (copies terms), or a fixed
 * error. */
struct t_red {
    struct reducer r;
    int copies;
    int fail; /* returned instead of summing when non-zero */
    int calls;
};

static int t_red_allreduce(struct reducer *r, float *buf, size_t n)
{
    struct t_red *t = (struct t_red *)r;
    t->calls++;
    if (t->fail)
        return t->fail;
    for (size_t i = 0; i < n; i++) {
        float one = buf[i], s = one;
        for (int k = 1; k < t->copies; k++)
            s += one;
        buf[i] = s;
    }
    return 0;
}

static void t_red_abort(struct reducer *r)
{
    ((struct t_red *)r)->fail = -EPIPE;
}

static void t_red_free(struct reducer *r)
{
    (void)r;
}

static const struct reducer_ops t_red_host = {
    .name = "test-host", .device = false, .allreduce = t_red_allreduce, .abort = t_red_abort, .free = t_red_free};
static const struct reducer_ops t_red_dev = {
    .name = "test-device", .device = true, .allreduce = t_red_allreduce, .abort = t_red_abort, .free = t_red_free};

/* One step as trainer_main.c's step() takes it with a reducer. */
static void reduced_step(const struct trainer_backend_ops *ops, struct trainer_backend *b, struct reducer *r, bool real,
                         float want_weight)
{
    float w = -1;
    assert_int_equal(ops->reduce(b, r, real, &w), 0);
    if (w != want_weight)
        fail_msg("%s backend: reduce gave weight %g, want %g", ops->name, (double)w, (double)want_weight);
    if (w > 0) { /* the sum is checked before the step, as the loop does */
        bool finite = false;
        char err[256];
        assert_int_equal(ops->grads_finite(b, true, &finite, err, sizeof err), 0);
        assert_true(finite);
        assert_int_equal(ops->step(b, true, 1.0f / w), 0);
    }
}

static void test_reduced_and_padding_steps(void **state)
{
    (void)state;
    struct t_tr_data d;
    t_tr_data_make(&d, false, 21);
    for (int k = MODEL_SAGE; k <= MODEL_MLP; k++) {
        struct trainer_backend_config c = t_tr_config(&d, (enum model_kind)k, 0.2f, 5 + (uint64_t)k);
        struct trainer_backend *cpu = t_tr_create(CPU, &c), *dev = t_tr_create(DEV, &c);
        struct t_red rc = {.r.ops = &t_red_host, .copies = 3}, rd = {.r.ops = &t_red_host, .copies = 3};
        char err[512] = "";
        for (uint32_t g = 0; g < 4; g++) {
            struct trainer_loss a, b;
            const struct batch_view *v = &d.v[g];
            /* forward and backward only: the step goes through the reducer */
            assert_int_equal(CPU->gather(cpu, v, err, sizeof err), 0);
            assert_int_equal(CPU->forward(cpu, v, true, 50 + g, &a, err, sizeof err), 0);
            assert_int_equal(DEV->gather(dev, v, err, sizeof err), 0);
            assert_int_equal(DEV->forward(dev, v, true, 50 + g, &b, err, sizeof err), 0);
            t_tr_loss_close(&b, &a, 0, model_kind_name((enum model_kind)k));
            assert_true(a.labelled > 0);
            assert_int_equal(CPU->backward(cpu, NULL, err, sizeof err), 0);
            assert_int_equal(DEV->backward(dev, NULL, err, sizeof err), 0);
            reduced_step(CPU, cpu, &rc.r, true, 3.0f);
            reduced_step(DEV, dev, &rd.r, true, 3.0f);
            same_state(cpu, dev, &c.model, "reduced step");
            /* a padding step: zero gradient, zero weight, no step */
            reduced_step(CPU, cpu, &rc.r, false, 0.0f);
            reduced_step(DEV, dev, &rd.r, false, 0.0f);
            same_state(cpu, dev, &c.model, "padding step");
        }
        assert_int_equal(rd.calls, 8);
        /* the reducer's error comes back as it is */
        float w = 1;
        rd.fail = -EPIPE;
        assert_int_equal(DEV->reduce(dev, &rd.r, true, &w), -EPIPE);
        /* a reducer over device pointers would read the shim's host buffer as device memory */
        struct t_red bad = {.r.ops = &t_red_dev, .copies = 1};
        assert_int_equal(DEV->reduce(dev, &bad.r, true, &w), -EINVAL);
        assert_int_equal(CPU->reduce(cpu, &bad.r, true, &w), -EINVAL);
        assert_int_equal(bad.calls, 0);
        CPU->free(cpu);
        DEV->free(dev);
    }
    t_tr_data_free(&d);
}

/* ---- gradient buckets started by backward ------------------------------------------------------ */

/* A reducer with start and finish (as NCCL's), host memory, standing for
 * `copies` ranks that hold this rank's buffer (sums at start, as a host
 * variant may), recording every start. */
#define T_ASYNC_MAX 32
struct t_async {
    struct reducer r;
    int copies;
    int fail;                   /* start returns it instead of summing when non-zero */
    uint32_t starts, finishes, allreduces;
    uint32_t pending;           /* started since the last finish */
    const float *buf[T_ASYNC_MAX];
    size_t n[T_ASYNC_MAX];
    bool after[T_ASYNC_MAX];    /* an event came with it */
};

static int t_async_start(struct reducer *r, float *buf, size_t n, void *after)
{
    struct t_async *t = (struct t_async *)r;
    assert_true(t->starts < T_ASYNC_MAX);
    t->buf[t->starts] = buf;
    t->n[t->starts] = n;
    t->after[t->starts] = after != NULL;
    t->starts++;
    t->pending++;
    if (t->fail)
        return t->fail;
    for (size_t i = 0; i < n; i++) {
        float one = buf[i], sum = one;
        for (int k = 1; k < t->copies; k++)
            sum += one;
        buf[i] = sum;
    }
    return 0;
}

static int t_async_finish(struct reducer *r)
{
    struct t_async *t = (struct t_async *)r;
    t->finishes++;
    t->pending = 0;
    return 0;
}

static int t_async_allreduce(struct reducer *r, float *buf, size_t n)
{
    ((struct t_async *)r)->allreduces++;
    return t_async_start(r, buf, n, NULL) ? -EIO : t_async_finish(r);
}

static const struct reducer_ops t_async_ops = {.name = "test-async",
                                               .device = false,
                                               .allreduce = t_async_allreduce,
                                               .start = t_async_start,
                                               .finish = t_async_finish,
                                               .abort = t_red_abort,
                                               .free = t_red_free};

/* Starts [first, first + k) are one pass over the reduce buffer in
 * buckets: contiguous, from the top down, covering nparams + 1 floats (the
 * gradients and the weight), each behind an event. */
static void check_buckets(const struct t_async *t, uint32_t first, uint32_t k, size_t nparams, const char *what)
{
    size_t total = 0;
    for (uint32_t i = first; i < first + k; i++) {
        total += t->n[i];
        if (!t->after[i])
            fail_msg("%s: bucket %u was started without an event", what, i - first);
        if (i > first && t->buf[i] + t->n[i] != t->buf[i - 1])
            fail_msg("%s: bucket %u does not end where bucket %u begins", what, i - first, i - first - 1);
    }
    if (total != nparams + 1)
        fail_msg("%s: the buckets cover %zu floats, want %zu", what, total, nparams + 1);
}

/* With a reducer that can start sums beside the pass, backward starts one
 * bucket per layer (bucket_floats 1) before reduce is called, reduce only
 * finishes, a padding step sums the same buckets, and the steps are the
 * CPU backend's bits through one plain all-reduce. Default buckets merge
 * the small layers into one. Misuse is refused, and a failed start comes
 * back from reduce. */
static void test_backward_starts_buckets(void **state)
{
    (void)state;
    struct t_tr_data d;
    t_tr_data_make(&d, false, 23);
    for (int k = MODEL_SAGE; k <= MODEL_MLP; k++) {
        const char *what = model_kind_name((enum model_kind)k);
        struct trainer_backend_config c = t_tr_config(&d, (enum model_kind)k, 0.2f, 15 + (uint64_t)k);
        size_t np = model_param_count(&c.model);
        uint32_t L = c.model.layers;
        c.bucket_floats = 1;
        struct trainer_backend *cpu = t_tr_create(CPU, &c), *dev = t_tr_create(DEV, &c);
        struct t_red rc = {.r.ops = &t_red_host, .copies = 3};
        struct t_async ra = {.r.ops = &t_async_ops, .copies = 3};
        char err[512] = "";
        for (uint32_t g = 0; g < 3; g++) {
            struct trainer_loss a, b;
            const struct batch_view *v = &d.v[g];
            assert_int_equal(CPU->gather(cpu, v, err, sizeof err), 0);
            assert_int_equal(CPU->forward(cpu, v, true, 60 + g, &a, err, sizeof err), 0);
            assert_int_equal(CPU->backward(cpu, &rc.r, err, sizeof err), 0);
            assert_int_equal(DEV->gather(dev, v, err, sizeof err), 0);
            assert_int_equal(DEV->forward(dev, v, true, 60 + g, &b, err, sizeof err), 0);
            uint32_t s0 = ra.starts;
            assert_int_equal(DEV->backward(dev, &ra.r, err, sizeof err), 0);
            assert_int_equal(ra.starts - s0, L); /* started before reduce */
            check_buckets(&ra, s0, L, np, what);
            reduced_step(CPU, cpu, &rc.r, true, 3.0f);
            reduced_step(DEV, dev, &ra.r, true, 3.0f);
            assert_int_equal(ra.starts - s0, L); /* reduce started nothing more */
            assert_int_equal(ra.pending, 0);
            same_state(cpu, dev, &c.model, what);
            /* padding: the same buckets, zeros, weight 0 */
            reduced_step(CPU, cpu, &rc.r, false, 0.0f);
            reduced_step(DEV, dev, &ra.r, false, 0.0f);
            assert_int_equal(ra.starts - s0, 2 * L);
            for (uint32_t i = 0; i < L; i++)
                assert_int_equal(ra.n[s0 + L + i], ra.n[s0 + i]);
            check_buckets(&ra, s0 + L, L, np, what);
            same_state(cpu, dev, &c.model, what);
        }
        assert_int_equal(ra.allreduces, 0);
        assert_int_equal(ra.finishes, 6);
        /* misuse: two backwards in a row, a reduce that is not that backward's */
        struct trainer_loss l;
        float w;
        assert_int_equal(DEV->gather(dev, &d.v[3], err, sizeof err), 0);
        assert_int_equal(DEV->forward(dev, &d.v[3], true, 9, &l, err, sizeof err), 0);
        assert_int_equal(DEV->backward(dev, &ra.r, err, sizeof err), 0);
        assert_int_equal(DEV->backward(dev, &ra.r, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "backward twice"));
        assert_int_equal(DEV->reduce(dev, &ra.r, false, &w), -EINVAL);
        assert_int_equal(ra.pending, 0); /* what was started was still waited for */
        assert_int_equal(DEV->step(dev, true, 1.0f), -EINVAL);
        /* a start that fails: backward goes on, reduce returns the code */
        ra.fail = -EPIPE;
        assert_int_equal(DEV->forward(dev, &d.v[3], true, 9, &l, err, sizeof err), 0);
        assert_int_equal(DEV->backward(dev, &ra.r, err, sizeof err), 0);
        assert_int_equal(DEV->reduce(dev, &ra.r, true, &w), -EPIPE);
        CPU->free(cpu);
        DEV->free(dev);
        /* default buckets: these layers are far below 64 Ki floats, so one bucket */
        c.bucket_floats = 0;
        dev = t_tr_create(DEV, &c);
        struct t_async one = {.r.ops = &t_async_ops, .copies = 2};
        assert_int_equal(DEV->gather(dev, &d.v[0], err, sizeof err), 0);
        assert_int_equal(DEV->forward(dev, &d.v[0], true, 9, &l, err, sizeof err), 0);
        assert_int_equal(DEV->backward(dev, &one.r, err, sizeof err), 0);
        assert_int_equal(one.starts, 1);
        check_buckets(&one, 0, 1, np, what);
        reduced_step(DEV, dev, &one.r, true, 2.0f);
        DEV->free(dev);
    }
    t_tr_data_free(&d);
}

/* ---- two ranks over the shm all-reduce ------------------------------------------------------------ */

#define RANKS 2

/* Rank r of RANKS in a child process: a CPU and a CUDA backend, each
 * reducing through its own shm all-reduce; rank r trains batches r, r +
 * RANKS, ... below nb[r] and pads to the most any rank has. Returns 0 when
 * the two backends hold the same bits after every step, with the CUDA
 * parameters written to out; else prints why and returns 1. No cmocka
 * here (a child). */
static int rank_child(uint32_t r, const struct t_tr_data *d, const struct trainer_backend_config *c,
                      const char *names[2], const char *out)
{
    char err[512] = "";
    struct trainer_backend *be[2] = {NULL, NULL};
    struct reducer *red[2] = {NULL, NULL};
    const struct trainer_backend_ops *ops[2] = {CPU, DEV};
    size_t n = model_param_count(&c->model);
    int rc = 1;
    for (int i = 0; i < 2; i++) {
        struct reducer_params p = {.allreduce_name = names[i], .floats = n + 1, .rank = r, .ranks = RANKS, .nodes = 1};
        if (reducer_shm_open(&red[i], &p, err, sizeof err) != 0 || ops[i]->create(&be[i], c, err, sizeof err) != 0) {
            fprintf(stderr, "rank %u: %s\n", r, err);
            goto out;
        }
    }
    const uint32_t nb[RANKS] = {3, 2}; /* rank 1 pads the last step */
    for (uint32_t s = 0; s < 3; s++) {
        bool real = s < nb[r];
        float w[2];
        for (int i = 0; i < 2; i++) {
            struct trainer_loss l;
            const struct batch_view *v = &d->v[s * RANKS + r];
            if (real && (ops[i]->gather(be[i], v, err, sizeof err) != 0 ||
                         ops[i]->forward(be[i], v, true, 300 + s * RANKS + r, &l, err, sizeof err) != 0 ||
                         ops[i]->backward(be[i], red[i], err, sizeof err) != 0)) {
                fprintf(stderr, "rank %u, %s backend: %s\n", r, ops[i]->name, err);
                goto out;
            }
            int e = ops[i]->reduce(be[i], red[i], real, &w[i]);
            if (e != 0 || w[i] != (s < 2 ? 2.0f : 1.0f) || ops[i]->step(be[i], true, 1.0f / w[i]) != 0) {
                fprintf(stderr, "rank %u, %s backend: reduce %d, weight %g\n", r, ops[i]->name, e, (double)w[i]);
                goto out;
            }
        }
        struct trainer_state a, b;
        if (CPU->state(be[0], &a, err, sizeof err) != 0 || DEV->state(be[1], &b, err, sizeof err) != 0) {
            fprintf(stderr, "rank %u: state: %s\n", r, err);
            goto out;
        }
        if (memcmp(a.params, b.params, n * sizeof(float)) || memcmp(a.adam_m, b.adam_m, n * sizeof(float)) ||
            memcmp(a.adam_v, b.adam_v, n * sizeof(float)) || *a.step != *b.step) {
            fprintf(stderr, "rank %u: the CPU and CUDA backends differ after step %u\n", r, s);
            goto out;
        }
        if (s == 2) {
            FILE *f = fopen(out, "wb");
            if (!f || fwrite(b.params, sizeof(float), n, f) != n || fclose(f) != 0) {
                fprintf(stderr, "rank %u: cannot write %s\n", r, out);
                goto out;
            }
        }
    }
    rc = 0;
out:
    for (int i = 0; i < 2; i++) {
        if (be[i])
            ops[i]->free(be[i]);
        reducer_free(red[i]);
    }
    return rc;
}

static void test_two_ranks_over_shm(void **state)
{
    (void)state;
    struct t_tr_data d;
    t_tr_data_make(&d, true, 31);
    struct trainer_backend_config c = t_tr_config(&d, MODEL_GAT, 0.25f, 9);
    c.bucket_floats = 1; /* the CUDA backend sums each layer's bucket from backward */
    size_t n = model_param_count(&c.model);
    char run[64], nm[2][128], err[256] = "", dir[512], out[RANKS][600];
    snprintf(run, sizeof run, "ttcs%d", (int)getpid());
    struct allreduce owner[2];
    const char *objs[2] = {"ar-cpu", "ar-cuda"}, *names[2] = {nm[0], nm[1]};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(allreduce_create(&owner[i], run, objs[i], RANKS, n + 1, err, sizeof err), 0);
        assert_int_equal(shm_name(nm[i], sizeof nm[i], run, objs[i], err, sizeof err), 0);
    }
    t_scratch(dir, sizeof dir, "trainer-cuda-shim");
    pid_t pid[RANKS];
    for (uint32_t r = 0; r < RANKS; r++) {
        snprintf(out[r], sizeof out[r], "%s/rank%u.f32", dir, r);
        fflush(NULL);
        pid[r] = fork();
        assert_true(pid[r] >= 0);
        if (pid[r] == 0)
            _exit(rank_child(r, &d, &c, names, out[r]));
    }
    for (uint32_t r = 0; r < RANKS; r++) {
        int st;
        assert_int_equal(waitpid(pid[r], &st, 0), pid[r]);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("rank %u failed (status 0x%x; its message is above)", r, st);
    }
    /* every rank took the same reduced steps: the same parameters */
    float *p[RANKS];
    for (uint32_t r = 0; r < RANKS; r++) {
        p[r] = malloc(n * sizeof(float));
        assert_non_null(p[r]);
        FILE *f = fopen(out[r], "rb");
        assert_non_null(f);
        assert_int_equal(fread(p[r], sizeof(float), n, f), n);
        fclose(f);
    }
    t_tr_close(p[1], p[0], n, 0, 0, "rank 1's parameters against rank 0's");
    for (uint32_t r = 0; r < RANKS; r++)
        free(p[r]);
    for (int i = 0; i < 2; i++) {
        allreduce_free(&owner[i]);
        shm_seg_unlink(nm[i]);
    }
    t_rmrf(dir);
    t_tr_data_free(&d);
}

/* ---- state and checkpoints ---------------------------------------------------------------------- */

static void test_state_round_trip(void **state)
{
    (void)state;
    struct t_tr_data d;
    t_tr_data_make(&d, false, 41);
    struct trainer_backend_config c = t_tr_config(&d, MODEL_SAGE, 0.1f, 3);
    struct trainer_backend *cpu = t_tr_create(CPU, &c), *dev = t_tr_create(DEV, &c);
    char err[512] = "";
    assert_int_equal(DEV->state_loaded(dev, err, sizeof err), -EINVAL); /* nothing to take yet */
    train_both(cpu, dev, &d, &c.model, 0, 2, "before the round trip");
    /* write new values through both backends' views */
    struct trainer_backend *be[2] = {cpu, dev};
    const struct trainer_backend_ops *ops[2] = {CPU, DEV};
    for (int i = 0; i < 2; i++) {
        struct trainer_state s;
        t_tr_state(ops[i], be[i], &c.model, &s);
        for (size_t j = 0; j < s.n; j++) {
            s.params[j] = s.params[j] * 0.5f + 0.01f * (float)(j % 7);
            s.adam_m[j] *= 2.0f;
            s.adam_v[j] = s.adam_v[j] * 3.0f + 1e-6f;
        }
        *s.step += 10;
        if (ops[i]->state_loaded(be[i], err, sizeof err) != 0)
            fail_msg("%s backend: state_loaded: %s", ops[i]->name, err);
    }
    /* state() reads back what the device now holds, and both compute with it */
    same_state(cpu, dev, &c.model, "after state_loaded");
    train_both(cpu, dev, &d, &c.model, 2, 2, "after the round trip");
    struct trainer_state s;
    t_tr_state(DEV, dev, &c.model, &s);
    assert_int_equal(*s.step, 14);
    CPU->free(cpu);
    DEV->free(dev);
    t_tr_data_free(&d);
}

static void test_checkpoint_cross_load(void **state)
{
    (void)state;
    struct t_tr_data d;
    t_tr_data_make(&d, true, 51);
    char dir[512], path[600];
    t_scratch(dir, sizeof dir, "trainer-cuda-ckpt");
    snprintf(path, sizeof path, "%s/epoch-000001.safetensors", dir);
    for (int k = MODEL_SAGE; k <= MODEL_MLP; k++)
        for (int from_dev = 0; from_dev < 2; from_dev++) {
            char what[96];
            snprintf(what, sizeof what, "%s, checkpoint from the %s backend", model_kind_name((enum model_kind)k),
                     from_dev ? "cuda" : "cpu");
            struct trainer_backend_config c = t_tr_config(&d, (enum model_kind)k, 0.2f, 13 + (uint64_t)k);
            const struct trainer_backend_ops *src = from_dev ? DEV : CPU, *dst = from_dev ? CPU : DEV;
            struct trainer_backend *a = t_tr_create(src, &c);
            for (uint32_t g = 0; g < 3; g++) {
                struct trainer_loss l;
                t_tr_batch(src, a, &d.v[g], true, 700 + g, &l);
            }
            t_tr_ckpt_save(src, a, &c.model, path);
            /* a fresh backend of the other kind, from a different seed, loads it */
            struct trainer_backend_config c2 = c;
            c2.model.seed += 1000;
            struct trainer_backend *b = t_tr_create(dst, &c2);
            t_tr_ckpt_load(dst, b, &c2.model, path);
            struct trainer_backend *cpu = from_dev ? b : a, *dev = from_dev ? a : b;
            same_state(cpu, dev, &c.model, what);
            train_both(cpu, dev, &d, &c.model, 3, 2, what);
            src->free(a);
            dst->free(b);
        }
    t_rmrf(dir);
    t_tr_data_free(&d);
}

/* ---- errors -------------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    struct t_tr_data d, e;
    t_tr_data_make(&d, false, 61);
    t_tr_data_make(&e, false, 62);
    char err[512] = "";
    struct trainer_backend *b = NULL;
    /* no rows where the kernels can read them */
    struct featbuf nofb = d.fb;
    nofb.rows = NULL;
    struct trainer_backend_config c = t_tr_config(&d, MODEL_GCN, 0.0f, 1);
    c.fb = &nofb;
    assert_int_equal(DEV->create(&b, &c, err, sizeof err), -EINVAL);
    assert_null(b);
    assert_non_null(strstr(err, "no rows on the device"));
    /* rows given as the device rows are taken (the shim's device memory is host memory) */
    c.rows_dev = d.fb.rows;
    b = t_tr_create(DEV, &c);
    DEV->free(b);
    /* a bad model is refused with the key named */
    c = t_tr_config(&d, MODEL_GAT, 0.0f, 1);
    c.model.heads = 3; /* hidden 8 is not a multiple */
    b = NULL;
    assert_int_equal(DEV->create(&b, &c, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "model.heads"));
    c.model.heads = 2;
    c.device = -1;
    assert_int_equal(DEV->create(&b, &c, err, sizeof err), -EINVAL);
    c.device = 0;
    /* forward of another batch than the one gathered, or none */
    b = t_tr_create(DEV, &c);
    struct trainer_loss l;
    assert_int_equal(DEV->forward(b, &d.v[0], true, 1, &l, err, sizeof err), -EINVAL);
    assert_int_equal(DEV->gather(b, &d.v[0], err, sizeof err), 0);
    assert_int_equal(DEV->forward(b, &e.v[0], true, 1, &l, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "gathered"));
    assert_int_equal(DEV->forward(b, &d.v[0], true, 1, &l, err, sizeof err), 0);
    /* a reduced step, or a check of the sum, without a reduce */
    assert_int_equal(DEV->step(b, true, 1.0f), -EINVAL);
    bool finite;
    assert_int_equal(DEV->grads_finite(b, true, &finite, err, sizeof err), -EINVAL);
    DEV->free(b);
    DEV->free(NULL);
    /* the device table takes its own blocks, never ops_block arrays */
    struct gk_ctx g;
    assert_int_equal(gk_ctx_init(&g, GK_MATH_PEDANTIC, err, sizeof err), 0);
    struct model *m;
    struct model_config mc = t_tr_config(&d, MODEL_SAGE, 0.0f, 1).model;
    assert_int_equal(model_create_on(&m, &mc, &trainer_cuda_model_ops, &g, err, sizeof err), 0);
    struct ops_block blocks[MODEL_LAYERS_MAX];
    uint32_t nb = trainer_batch_blocks(&d.v[0], blocks);
    float *x = calloc((size_t)batch_nodes(&d.v[0]) * T_TR_DIM, sizeof *x), logits[64 * T_TR_CLASSES];
    assert_non_null(x);
    assert_int_equal(model_forward(m, blocks, nb, batch_targets(&d.v[0]), x, false, 0, logits, err, sizeof err),
                     -EINVAL);
    assert_non_null(strstr(err, "model_forward_blocks"));
    /* a block with edges but no arrays */
    struct model_block mb[MODEL_LAYERS_MAX];
    for (uint32_t i = 0; i < nb; i++)
        mb[i] = (struct model_block){.n_dst = blocks[i].n_dst, .n_src = blocks[i].n_src, .n_edges = 1};
    assert_int_equal(model_forward_blocks(m, mb, nb, batch_targets(&d.v[0]), x, false, 0, logits, err, sizeof err),
                     -EINVAL);
    free(x);
    model_destroy(m);
    gk_ctx_free(&g);
    t_tr_data_free(&d);
    t_tr_data_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_cpu),           cmocka_unit_test(test_reduced_and_padding_steps),
        cmocka_unit_test(test_backward_starts_buckets),
        cmocka_unit_test(test_two_ranks_over_shm),    cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_checkpoint_cross_load), cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
