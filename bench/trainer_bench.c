/* trainer_bench.c - the CPU trainer against the GEMM rate (issue 27,
 * item 2). Samples real batches of a dataset (stages/sampler.h; targets
 * drawn from train.bin), then trains GraphSAGE on them exactly as the CPU
 * trainer backend does (gather from the feature rows, model_forward,
 * model_loss, model_backward, adam_step) and reports, per layer, the
 * host time of forward and backward and the GFLOP/s they reach counting
 * only the dense products; beside them, the same products timed alone:
 * one plain cblas_sgemm per product with OpenBLAS on all threads, and
 * ops_gemm (the trainer's deterministic tiled GEMM on its pool).
 *
 *   trainer-bench DATASET [--fanouts 10,5] [--batch 1000] [--hidden 128]
 *                 [--batches 20] [--warmup 3] [--threads N] [--dropout 0.5]
 *                 [--reps 5] [--full-gather 0|1] [--huge 0|1]
 *
 * FLOPs of GraphSAGE layer i with n_dst destinations, widths in -> out:
 * forward 2 products of n_dst x in x out (self and neighbours), backward
 * 2 for the weight gradients and, except in layer 0, 2 for the input's.
 * A product of m x k x n counts 2mkn. Output: key=value lines. Features
 * are read from features.bin into memory before the first batch (as the
 * trainer's feature buffer holds them once warm). Asserts nothing. */
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ipc/batch.h"
#include "ops/model.h"
#include "ops/ops.h"
#include "stages/sampler.h"
#include "stages/trainer_backend.h"

static _Noreturn void die(const char *what, const char *detail)
{
    fprintf(stderr, "trainer-bench: %s%s\n", what, detail);
    exit(1);
}

struct shape { /* one product: C (m x n) = op(A) (m x k) op(B) (k x n) */
    bool ta, tb;
    size_t m, n, k;
};

/* CPU seconds of the whole process (every thread) so far */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static double time_sgemm(const struct shape *s, bool ours, int reps)
{
    size_t asz = s->m * s->k, bsz = s->k * s->n, csz = s->m * s->n;
    float *a = malloc(asz * sizeof *a), *b = malloc(bsz * sizeof *b), *c = malloc(csz * sizeof *c);
    if (!a || !b || !c)
        die("", "out of memory");
    for (size_t i = 0; i < asz; i++)
        a[i] = (float)(i % 17) * 0.01f;
    for (size_t i = 0; i < bsz; i++)
        b[i] = (float)(i % 13) * 0.01f;
    size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) {
        uint64_t t0 = sl_now_ns();
        if (ours)
            ops_gemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
        else
            cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, (int)s->m,
                        (int)s->n, (int)s->k, 1.0f, a, (int)lda, b, (int)ldb, 0.0f, c, (int)s->n);
        double t = (double)(sl_now_ns() - t0) / 1e9;
        if (r > 0 && t < best) /* the first call warms up */
            best = t;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        die("", "usage: trainer-bench DATASET [--fanouts 10,5] [--batch 1000] [--hidden 128] [--batches 20] "
                  "[--warmup 3] [--threads N] [--dropout 0.5] [--reps 5] [--full-gather 0|1] [--huge 0|1]");
    const char *dir = argv[1];
    int64_t fan[MODEL_LAYERS_MAX] = {10, 5};
    uint32_t layers = 2, batch = 1000, hidden = 128, nb = 20, warm = 3;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 5;
    float dropout = 0.5f;
    bool full_gather = false; /* --full-gather 1: copy every input row first, as before issue 27 */
    bool huge = false;        /* --huge 1: the rows in transparent huge pages (madvise) */
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--fanouts")) {
            layers = 0;
            for (char *p = (char *)v; *p && layers < MODEL_LAYERS_MAX;) {
                fan[layers++] = strtoll(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else if (!strcmp(k, "--batch")) {
            batch = (uint32_t)atoi(v);
        } else if (!strcmp(k, "--hidden")) {
            hidden = (uint32_t)atoi(v);
        } else if (!strcmp(k, "--batches")) {
            nb = (uint32_t)atoi(v);
        } else if (!strcmp(k, "--warmup")) {
            warm = (uint32_t)atoi(v);
        } else if (!strcmp(k, "--threads")) {
            threads = atoi(v);
        } else if (!strcmp(k, "--dropout")) {
            dropout = strtof(v, NULL);
        } else if (!strcmp(k, "--huge")) {
            huge = atoi(v) != 0;
        } else if (!strcmp(k, "--full-gather")) {
            full_gather = atoi(v) != 0;
        } else if (!strcmp(k, "--reps")) {
            reps = atoi(v);
        } else {
            die("unknown flag ", k);
        }
    }
    char err[1024];
    struct dataset_meta m;
    if (dataset_meta_read(dir, &m, true, err, sizeof err))
        die("", err);
    const struct dataset_file *ff = &m.f[DATASET_FEATURES];
    bool f16 = ff->dtype == DTYPE_F16;
    struct sampler_topo topo;
    if (sampler_topo_open(&topo, dir, &m, err, sizeof err))
        die("", err);
    uint64_t *train, ntrain;
    if (sampler_split_load(dir, &m, DATASET_TRAIN, &train, &ntrain, err, sizeof err))
        die("", err);
    struct batch_shape shape = {.batch_size = batch, .layers = layers, .nodes = m.nodes};
    for (uint32_t i = 0; i < layers; i++)
        shape.fanouts[i] = fan[i];
    struct sampler smp;
    if (sampler_init(&smp, &topo, &shape, err, sizeof err))
        die("", err);
    size_t slot_bytes = batch_max_bytes(sampler_shape(&smp), err, sizeof err);
    if (!slot_bytes)
        die("", err);
    uint32_t total = warm + nb;
    void **slots = calloc(total, sizeof *slots);
    uint64_t st = 12345, edges_all = 0;
    uint64_t t0 = sl_now_ns();
    for (uint32_t g = 0; g < total; g++) {
        uint64_t tg[1 << 16];
        uint32_t n = (uint32_t)SL_MIN((uint64_t)batch, SL_MIN(ntrain, (uint64_t)(1 << 16)));
        for (uint32_t i = 0; i < n; i++) { /* a partial Fisher-Yates over train */
            uint64_t j = i + sampler_rand_below(&st, ntrain - i), t = train[i];
            train[i] = train[j];
            train[j] = t;
            tg[i] = train[i];
        }
        slots[g] = aligned_alloc(4096, sl_round_up(slot_bytes, 4096));
        if (!slots[g])
            die("", "out of memory");
        struct batch_id id = {.batch = g};
        uint64_t e = 0;
        if (sampler_sample(&smp, slots[g], slot_bytes, tg, n, &id, sampler_batch_seed(1, 0, 0, g), &e, err,
                           sizeof err))
            die("", err);
        edges_all += e;
    }
    double sample_s = (double)(sl_now_ns() - t0) / 1e9;
    printf("sampled_batches=%u sampled_edges_per_s=%.0f\n", total, (double)edges_all / sample_s);

    char fpath[4200];
    snprintf(fpath, sizeof fpath, "%s/features.bin", dir);
    int fd = open(fpath, O_RDONLY);
    if (fd < 0)
        die("cannot open ", fpath);
    /* in anonymous memory, as the trainer's feature buffer (a file mapping loses its pages to anyone's
     * drop_caches) */
    size_t align = huge ? (size_t)2 << 20 : 4096;
    unsigned char *rows = aligned_alloc(align, sl_round_up((size_t)ff->bytes, align));
    if (rows && huge && madvise(rows, sl_round_up((size_t)ff->bytes, align), MADV_HUGEPAGE) != 0)
        die("madvise(MADV_HUGEPAGE) failed", "");
    size_t got = 0;
    if (!rows || sl_pread_full(fd, rows, (size_t)ff->bytes, 0, &got) != 0 || got != (size_t)ff->bytes)
        die("cannot read ", fpath);
    close(fd);
    FILE *sm = fopen("/proc/self/smaps_rollup", "r"); /* how much of the process is in huge pages */
    char line[256];
    while (sm && fgets(line, sizeof line, sm))
        if (!strncmp(line, "AnonHugePages:", 14))
            printf("huge=%d anon_huge_kib=%lld\n", huge, atoll(line + 14));
    if (sm)
        fclose(sm);

    ops_set_threads(threads);
    struct model_config mc = {.kind = MODEL_SAGE, .layers = layers, .in_dim = (uint32_t)m.feat_dim, .hidden = hidden,
                              .classes = (uint32_t)m.classes, .dropout = dropout, .seed = 1};
    struct model *mod;
    if (model_create(&mod, &mc, err, sizeof err))
        die("", err);
    struct adam adam;
    if (adam_init(&adam, model_nparams(mod), 0.003f))
        die("", "out of memory");
    float *x = NULL, *logits = NULL, *dlogits = NULL;
    double flop_fwd[MODEL_LAYERS_MAX] = {0}, flop_bwd[MODEL_LAYERS_MAX] = {0};
    double nd_sum[MODEL_LAYERS_MAX] = {0};
    uint64_t gather_ns = 0, loss_ns = 0, step_ns = 0, all_ns = 0;
    double cpu0 = 0;
    uint32_t in_w[MODEL_LAYERS_MAX], out_w[MODEL_LAYERS_MAX];
    for (uint32_t i = 0; i < layers; i++) {
        in_w[i] = i ? hidden : (uint32_t)m.feat_dim;
        out_w[i] = i + 1 == layers ? (uint32_t)m.classes : hidden;
    }
    for (uint32_t g = 0; g < total; g++) {
        if (g == warm) {
            model_timing_reset(mod);
            gather_ns = loss_ns = step_ns = all_ns = 0;
            cpu0 = cpu_s();
        }
        struct batch_view v;
        if (batch_view(slots[g], slot_bytes, 0, &v, err, sizeof err))
            die("", err);
        uint32_t n = batch_nodes(&v), B = batch_targets(&v);
        for (uint32_t i = 0; i < n; i++)
            v.alias[i] = (uint32_t)v.nodes[i]; /* the file is the "buffer": slot = node */
        if (!x) { /* once, for the largest batch, touched before timing: the trainer reuses its buffers */
            size_t nx = (size_t)sampler_shape(&smp)->batch_size, rows_max = 0;
            for (uint32_t h = 0; h < total; h++) {
                struct batch_view w;
                if (batch_view(slots[h], slot_bytes, 0, &w, err, sizeof err))
                    die("", err);
                rows_max = SL_MAX(rows_max, (size_t)batch_nodes(&w));
            }
            x = calloc(rows_max * m.feat_dim, sizeof *x);
            logits = calloc(nx * m.classes, sizeof *logits);
            dlogits = calloc(nx * m.classes, sizeof *dlogits);
            if (!x || !logits || !dlogits)
                die("", "out of memory");
        }
        /* as trainer_cpu.c: in place, the forward copies layer 0's destinations and reads the rest where they lie */
        bool in_place = !f16 && model_takes_rows(mod) && !full_gather;
        struct ops_block blocks[MODEL_LAYERS_MAX];
        uint32_t L = trainer_batch_blocks(&v, blocks);
        uint64_t a0 = sl_now_ns();
        if (!in_place) /* in place, the forward gathers layer 0's destinations itself */
            ops_gather_rows(x, rows, (size_t)ff->row_stride, v.alias, n, (uint32_t)m.feat_dim, f16);
        uint64_t a1 = sl_now_ns();
        struct model_rows src = {.rows = rows, .stride = (size_t)ff->row_stride, .alias = v.alias, .dst_rows = x};
        int frc = in_place ? model_forward_rows(mod, blocks, L, B, NULL, &src, true, g, logits, err, sizeof err)
                           : model_forward(mod, blocks, L, B, x, true, g, logits, err, sizeof err);
        if (frc)
            die("", err);
        uint64_t a2 = sl_now_ns();
        uint32_t lab, cor;
        model_loss(logits, v.labels, B, (uint32_t)m.classes, dlogits, &lab, &cor);
        uint64_t a3 = sl_now_ns();
        if (model_backward(mod, dlogits, err, sizeof err))
            die("", err);
        uint64_t a4 = sl_now_ns();
        adam_step(&adam, model_params(mod), model_grads(mod));
        uint64_t a5 = sl_now_ns();
        if (g >= warm) {
            gather_ns += a1 - a0;
            loss_ns += a3 - a2;
            step_ns += a5 - a4;
            all_ns += a5 - a0;
            for (uint32_t i = 0; i < L; i++) {
                double nd = blocks[i].n_dst, f = 2.0 * nd * in_w[i] * out_w[i];
                nd_sum[i] += nd;
                flop_fwd[i] += 2 * f;
                flop_bwd[i] += (i ? 4 : 2) * f;
            }
        }
    }
    double batch_flop = 0, batch_ms = (double)all_ns / 1e6 / nb, cpu_ms = (cpu_s() - cpu0) * 1e3 / nb;
    printf("cpu_ms=%.3f ", cpu_ms); /* CPU time of all threads per batch: the work, whatever else runs */
    printf("in_place=%d ", !f16 && model_takes_rows(mod) && !full_gather);
    printf("threads=%d batches=%u batch_ms=%.3f gather_ms=%.3f loss_ms=%.3f adam_ms=%.3f\n", threads, nb, batch_ms,
           (double)gather_ns / 1e6 / nb, (double)loss_ns / 1e6 / nb, (double)step_ns / 1e6 / nb);
    double sg_batch_s = 0; /* the whole batch's products at the plain sgemm rate */
    for (uint32_t i = 0; i < layers; i++) {
        uint64_t fns, bns;
        model_layer_ns(mod, i, &fns, &bns);
        size_t nd = (size_t)(nd_sum[i] / nb + 0.5);
        /* the layer's products: forward x W^T (nt), backward dy^T x (tn), dy W (nn) */
        struct shape fw = {false, true, nd, out_w[i], in_w[i]};
        struct shape bw = {true, false, out_w[i], in_w[i], nd};
        struct shape bx = {false, false, nd, in_w[i], out_w[i]};
        openblas_set_num_threads(threads);
        double sf = time_sgemm(&fw, false, reps), sw = time_sgemm(&bw, false, reps), sx = time_sgemm(&bx, false, reps);
        openblas_set_num_threads(1); /* as ops.c wants it */
        double of = time_sgemm(&fw, true, reps), ow = time_sgemm(&bw, true, reps), ox = time_sgemm(&bx, true, reps);
        double f1 = 2.0 * nd * in_w[i] * out_w[i];
        double ff_ = flop_fwd[i] / nb, fb = flop_bwd[i] / nb;
        double sg_f = 2 * sf, sg_b = 2 * sw + (i ? 2 * sx : 0);
        double og_f = 2 * of, og_b = 2 * ow + (i ? 2 * ox : 0);
        sg_batch_s += sg_f + sg_b;
        batch_flop += ff_ + fb;
        printf("layer=%u n_dst=%zu in=%u out=%u fwd_ms=%.3f bwd_ms=%.3f fwd_gflops=%.1f bwd_gflops=%.1f "
               "sgemm_fwd_gflops=%.1f sgemm_bwd_gflops=%.1f opsgemm_fwd_gflops=%.1f opsgemm_bwd_gflops=%.1f "
               "sgemm_nt_gflops=%.1f sgemm_tn_gflops=%.1f sgemm_nn_gflops=%.1f\n",
               i, nd, in_w[i], out_w[i], (double)fns / 1e6 / nb, (double)bns / 1e6 / nb, ff_ / ((double)fns / 1e9 / nb) / 1e9,
               fb / ((double)bns / 1e9 / nb) / 1e9, ff_ / sg_f / 1e9, fb / sg_b / 1e9, ff_ / og_f / 1e9, fb / og_b / 1e9,
               f1 / sf / 1e9, f1 / sw / 1e9, f1 / sx / 1e9);
    }
    printf("batch_gflop=%.3f batch_gflops=%.1f sgemm_floor_ms=%.3f\n", batch_flop / 1e9,
           batch_flop / (batch_ms / 1e3) / 1e9, sg_batch_s * 1e3);
    free(x);
    free(logits);
    free(dlogits);
    adam_free(&adam);
    model_destroy(mod);
    for (uint32_t g = 0; g < total; g++)
        free(slots[g]);
    free(slots);
    free(train);
    free(rows);
    sampler_free(&smp);
    sampler_topo_free(&topo);
    return 0;
}
