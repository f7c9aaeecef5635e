/* kge-bench - trains DistMult or ComplEx on a link-prediction dataset in
 * memory with stages/link.h and prints, per epoch, the loss, the time and
 * the edges (training triples) per second, and the validation MRR; then
 * the test metrics. bench/kge.sh runs it beside PyTorch Geometric's KGE
 * models on the same files (docs/link.md).
 *
 *   kge-bench DATASET [--model distmult|complex] [--loss softmax|logistic|margin]
 *             [--dim D] [--lr LR] [--batch B] [--chunk C] [--negs K] [--degree-frac F]
 *             [--sides both|tail|pyg] [--init xavier|uniform] [--init-scale S]
 *             [--epochs E] [--seed S] [--threads T] [--eval-every N]
 *             [--eval raw|filtered] [--eval-heads] [--eval-sampled N]
 *
 * The last line is
 *   test_mrr=<f> test_hits@1=<f> test_hits@3=<f> test_hits@10=<f> test_mean_rank=<f> epochs=<n> seconds=<f>
 * Exit 0, 2 for bad arguments or data, 3 for a loss that is not finite,
 * 1 for other failures. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/linkdata.h"
#include "core/opt.h"
#include "core/util.h"
#include "ops/ops.h"
#include "stages/link.h"

static int pick(const char *v, const char *const *names, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) {
            *out = i;
            return 0;
        }
    return -EINVAL;
}

#define PICKER(fn, ...)                                                                                                \
    static int fn(const char *v, void *dst, char *err, size_t errlen)                                                  \
    {                                                                                                                  \
        static const char *const names[] = {__VA_ARGS__};                                                              \
        if (pick(v, names, (int)SL_ARRAY_LEN(names), dst) == 0)                                                        \
            return 0;                                                                                                  \
        return sl_errf(err, errlen, -EINVAL, "'%s' is not one of: " #__VA_ARGS__, v);                                  \
    }
PICKER(pick_model, "distmult", "complex")
PICKER(pick_loss, "softmax", "logistic", "margin")
PICKER(pick_sides, "both", "tail", "pyg")
PICKER(pick_init, "xavier", "uniform")
PICKER(pick_eval, "raw", "filtered")

static void usage(FILE *f)
{
    fprintf(f, "usage: kge-bench DATASET [--model distmult|complex] [--loss softmax|logistic|margin] [--dim D]\n"
               "                 [--lr LR] [--batch B] [--chunk C] [--negs K] [--degree-frac F]\n"
               "                 [--sides both|tail|pyg] [--init xavier|uniform] [--init-scale S] [--epochs E]\n"
               "                 [--seed S] [--threads T] [--eval-every N] [--eval raw|filtered] [--eval-heads]\n"
               "                 [--eval-sampled N]\n"
               "Trains in memory (stages/link.h) and prints epoch lines and the test metrics (docs/link.md).\n");
}

static void print_metrics(const char *split, const struct link_metrics *r)
{
    printf("%s_mrr=%.6f %s_hits@1=%.6f %s_hits@3=%.6f %s_hits@10=%.6f %s_mean_rank=%.3f", split, r->mrr, split, r->hits1,
           split, r->hits3, split, r->hits10, split, r->mean_rank);
}

int main(int argc, char **argv)
{
    int model = 0, loss = 0, sides = 0, init = 0, eval = 1;
    uint64_t dim = 100, batch = 1000, chunk = 100, negs = 100, epochs = 10, seed = 0, threads = 1, every = 1,
             sampled = 0;
    double lr = 0.1, degree_frac = 0, init_scale = 0.001;
    bool heads = false, help = false;
    const struct opt opts[] = {
        {.name = "--model", .kind = OPT_FN, .dst = &model, .fn = pick_model},
        {.name = "--loss", .kind = OPT_FN, .dst = &loss, .fn = pick_loss},
        {.name = "--sides", .kind = OPT_FN, .dst = &sides, .fn = pick_sides},
        {.name = "--init", .kind = OPT_FN, .dst = &init, .fn = pick_init},
        {.name = "--eval", .kind = OPT_FN, .dst = &eval, .fn = pick_eval},
        {.name = "--dim", .kind = OPT_UINT, .dst = &dim, .lo = 1, .hi = 65536},
        {.name = "--batch", .kind = OPT_UINT, .dst = &batch, .lo = 1, .hi = 1 << 24},
        {.name = "--chunk", .kind = OPT_UINT, .dst = &chunk, .lo = 1, .hi = 1 << 24},
        {.name = "--negs", .kind = OPT_UINT, .dst = &negs, .lo = 1, .hi = 1 << 20},
        {.name = "--epochs", .kind = OPT_UINT, .dst = &epochs, .lo = 1, .hi = 1 << 20},
        {.name = "--seed", .kind = OPT_UINT, .dst = &seed, .lo = 0, .hi = INT64_MAX},
        {.name = "--threads", .kind = OPT_UINT, .dst = &threads, .lo = 1, .hi = 64},
        {.name = "--eval-every", .kind = OPT_UINT, .dst = &every, .lo = 1, .hi = 1 << 20},
        {.name = "--eval-sampled", .kind = OPT_UINT, .dst = &sampled, .lo = 0, .hi = 1 << 24},
        {.name = "--lr", .kind = OPT_DOUBLE, .dst = &lr, .lo = 0, .hi = 1e6},
        {.name = "--degree-frac", .kind = OPT_DOUBLE, .dst = &degree_frac, .lo = -1, .hi = 1},
        {.name = "--init-scale", .kind = OPT_DOUBLE, .dst = &init_scale, .lo = 0, .hi = 1e6},
        {.name = "--eval-heads", .kind = OPT_FLAG, .dst = &heads},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc < 2 || argv[1][0] == '-') {
        usage(stderr);
        return 2;
    }
    const char *dir = argv[1];
    char err[4096];
    if (opt_parse("kge-bench", opts, (int)SL_ARRAY_LEN(opts), argc, argv, 2, NULL, "; see --help", err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (help) {
        usage(stdout);
        return 0;
    }
    if (degree_frac < 0) {
        fprintf(stderr, "kge-bench: --degree-frac=%g is not a share in [0, 1]\n", degree_frac);
        return 2;
    }
    struct link_meta meta;
    uint64_t *split[LINK_SPLITS] = {NULL};
    int rc = link_meta_read(dir, &meta, true, err, sizeof err);
    for (int s = 0; rc == 0 && s < LINK_SPLITS; s++)
        rc = link_load_split(dir, &meta, s, &split[s], err, sizeof err);
    if (rc) {
        fprintf(stderr, "kge-bench: %s\n", err);
        return rc == -ENOMEM ? 1 : 2;
    }
    ops_set_threads((int)threads);
    struct link_opts o = {.model = (enum kge_model)model, .loss = (enum kge_loss)loss, .margin = 1.0f,
                          .dim = (uint32_t)dim, .lr = (float)lr, .eps = 1e-10f, .batch = (uint32_t)batch,
                          .chunk = (uint32_t)chunk, .negs = (uint32_t)negs, .degree_frac = degree_frac,
                          .sides = (enum link_sides)sides, .init = (enum link_init)init, .init_scale = (float)init_scale,
                          .seed = seed};
    struct link_model m;
    struct link_trainer t;
    struct link_known k;
    memset(&t, 0, sizeof t);
    memset(&k, 0, sizeof k);
    if ((rc = link_model_init(&m, meta.nodes, meta.relations, &o, err, sizeof err)) ||
        (rc = link_trainer_init(&t, &m, &o, split[LINK_TRAIN], meta.split[LINK_TRAIN].rows, err, sizeof err))) {
        fprintf(stderr, "kge-bench: %s\n", err);
        return rc == -ENOMEM ? 1 : 2;
    }
    const uint64_t *arr[3] = {split[0], split[1], split[2]};
    uint64_t ns[3] = {meta.split[0].rows, meta.split[1].rows, meta.split[2].rows};
    if (eval && (rc = link_known_init(&k, arr, ns, 3, err, sizeof err))) {
        fprintf(stderr, "kge-bench: %s\n", err);
        return 1;
    }
    struct link_eval_opts e = {.filter = eval ? &k : NULL, .heads_too = heads, .sampled = (uint32_t)sampled,
                               .seed = seed};
    printf("kge-bench: %s: %" PRIu64 " nodes, %" PRIu64 " relations, %" PRIu64 " training triples; %s, %s loss, "
           "dim %u, %u threads\n",
           dir, meta.nodes, meta.relations, meta.split[LINK_TRAIN].rows, model ? "complex" : "distmult",
           loss == 0 ? "softmax" : loss == 1 ? "logistic" : "margin", o.dim, (unsigned)threads);
    double t0 = sl_now(), train_s = 0;
    for (uint32_t ep = 0; ep < epochs; ep++) {
        double t1 = sl_now(), l;
        if ((rc = link_train_epoch(&t, ep, &l, err, sizeof err))) {
            fprintf(stderr, "kge-bench: %s\n", err);
            return 3;
        }
        double s = sl_now() - t1;
        train_s += s;
        printf("epoch %u/%" PRIu64 " loss=%.6f seconds=%.3f edges_per_s=%.0f", ep + 1, epochs, l, s,
               (double)meta.split[LINK_TRAIN].rows / s);
        if (meta.split[LINK_VALID].rows && ((ep + 1) % every == 0 || ep + 1 == epochs)) {
            struct link_metrics r;
            if ((rc = link_evaluate(&m, &o, split[LINK_VALID], meta.split[LINK_VALID].rows, &e, &r, err, sizeof err))) {
                fprintf(stderr, "kge-bench: %s\n", err);
                return 1;
            }
            printf(" ");
            print_metrics("valid", &r);
        }
        printf("\n");
        fflush(stdout);
    }
    struct link_metrics r = {0};
    if (meta.split[LINK_TEST].rows &&
        (rc = link_evaluate(&m, &o, split[LINK_TEST], meta.split[LINK_TEST].rows, &e, &r, err, sizeof err))) {
        fprintf(stderr, "kge-bench: %s\n", err);
        return 1;
    }
    print_metrics("test", &r);
    printf(" epochs=%" PRIu64 " seconds=%.3f train_seconds=%.3f\n", epochs, sl_now() - t0, train_s);
    link_known_free(&k);
    link_trainer_free(&t);
    link_model_free(&m);
    for (int s = 0; s < LINK_SPLITS; s++)
        free(split[s]);
    return 0;
}
