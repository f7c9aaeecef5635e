/* test_linkenc.c - link prediction with the GNN encoder (stages/linkenc.h,
 * model.encoder = "sage"): the gradients of the encoder path (the learnt
 * input rows and the SAGE weights, through DistMult and ComplEx's softmax
 * over shared negatives) match central finite differences on a tiny graph;
 * the graph holds both directions of every training triple; training is a
 * function of the seed (the same tables and weights bit for bit twice, and
 * for 1 and 3 threads); on the planted synthetic graph a one- and a
 * two-layer encoder reach an MRR far above chance; full-neighbourhood
 * encoding equals a sampled forward whose fanouts take every neighbour. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <unistd.h>

#include "t_util.h"
#include "t_link.h"
#include "core/linkdata.h"
#include "core/util.h"
#include "ops/kge.h"
#include "ops/ops.h"
#include "stages/link.h"
#include "stages/linkenc.h"

static char g_dir[4096], g_kg[4200];
static struct link_meta g_m;
static uint64_t *g_split[LINK_SPLITS];

/* ---- gradient check ------------------------------------------------------------------------ */

#define GN 14u  /* nodes */
#define GT 30u  /* triples */
#define GD 6u   /* width */
#define GB 4u   /* positives */
#define GK 5u   /* negatives (one chunk) */

struct gc {
    struct linkenc e;
    enum kge_model model;
    float table[GN * GD], rel[2 * GD];
    uint64_t ids[2 * GB + GK];
    uint32_t rid[GB];
    float rows[(2 * GB + GK) * GD], R[GB * GD];
    float grad[(2 * GB + GK) * GD], dr[GB * GD], scratch[4096];
};

/* The batch's loss with the current table and weights; with grads, also
 * the backward (weights not stepped). */
static double gc_loss(struct gc *g, bool grads)
{
    char err[512];
    const uint32_t k = 2 * GB + GK;
    if (linkenc_sample(&g->e, g->ids, k, 3, 9, err, sizeof err))
        fail_msg("%s", err);
    float *x = linkenc_input(&g->e);
    for (uint32_t i = 0; i < linkenc_count(&g->e); i++)
        memcpy(x + i * GD, g->table + linkenc_nodes(&g->e)[i] * GD, GD * sizeof(float));
    if (linkenc_forward(&g->e, g->rows, err, sizeof err))
        fail_msg("%s", err);
    for (uint32_t i = 0; i < GB; i++)
        memcpy(g->R + i * GD, g->rel + g->rid[i] * GD, GD * sizeof(float));
    struct kge_batch b = {.model = g->model, .loss = KGE_LOSS_SOFTMAX, .n = GB, .d = GD, .h = g->rows, .r = g->R,
                          .t = g->rows + GB * GD, .chunk = GB, .negs = GK, .neg = g->rows + 2 * GB * GD};
    assert_true(kge_step_scratch(&b) <= sizeof g->scratch / sizeof(float));
    float l = kge_step(&b, grads ? g->grad : NULL, g->dr, g->grad + GB * GD, g->grad + 2 * GB * GD, g->scratch, NULL);
    if (grads && linkenc_backward_step(&g->e, g->grad, false, err, sizeof err))
        fail_msg("%s", err);
    return l;
}

static void check(const char *what, double analytic, double numeric, int *bad)
{
    if (fabs(analytic - numeric) > 2e-3 + 0.05 * fabs(numeric)) {
        print_error("%s: analytic %.6g, finite difference %.6g\n", what, analytic, numeric);
        (*bad)++;
    }
}

static void gradcheck(enum kge_model model, uint32_t layers, int64_t f0, int64_t f1)
{
    struct gc *g = calloc(1, sizeof *g);
    assert_non_null(g);
    g->model = model;
    uint64_t st = 42, tr[GT * 3];
    for (uint32_t i = 0; i < GT; i++) {
        tr[i * 3] = sl_splitmix64(&st) % GN;
        tr[i * 3 + 1] = sl_splitmix64(&st) % 2;
        tr[i * 3 + 2] = sl_splitmix64(&st) % GN;
    }
    ops_uniform(g->table, GN * GD, 0.8, &st);
    ops_uniform(g->rel, 2 * GD, 0.8, &st);
    for (uint32_t i = 0; i < GB; i++) {
        g->ids[i] = tr[i * 3];
        g->rid[i] = (uint32_t)tr[i * 3 + 1];
        g->ids[GB + i] = tr[i * 3 + 2];
    }
    for (uint32_t j = 0; j < GK; j++)
        g->ids[2 * GB + j] = sl_splitmix64(&st) % GN;
    struct linkenc_opts o = {.layers = layers, .fanouts = {f0, f1}, .aggr = MODEL_AGGR_MEAN,
                             .activation = MODEL_ACT_ELU, .dim = GD, .lr = 0.01f, .seed = 11};
    char err[512];
    if (linkenc_init(&g->e, GN, tr, GT, 2 * GB + GK, &o, err, sizeof err))
        fail_msg("%s", err);
    gc_loss(g, true);
    /* the analytic gradients: every sampled node's input row, the weights */
    const uint32_t n = linkenc_count(&g->e);
    uint64_t nodes[GN];
    float dx[GN * GD];
    memcpy(nodes, linkenc_nodes(&g->e), n * sizeof *nodes);
    memcpy(dx, linkenc_input_grad(&g->e), n * GD * sizeof *dx);
    const size_t np = linkenc_nparams(&g->e);
    float *dw = malloc(np * sizeof *dw);
    memcpy(dw, model_grads(g->e.net), np * sizeof *dw);
    const float h = 1e-2f;
    int bad = 0;
    char what[128];
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < GD; j++) {
            float *p = g->table + nodes[i] * GD + j, keep = *p;
            *p = keep + h;
            double up = gc_loss(g, false);
            *p = keep - h;
            double down = gc_loss(g, false);
            *p = keep;
            snprintf(what, sizeof what, "node %llu [%u]", (unsigned long long)nodes[i], j);
            check(what, dx[i * GD + j], (up - down) / (2 * h), &bad);
        }
    float *w = linkenc_params(&g->e);
    for (size_t q = 0; q < np; q++) {
        float keep = w[q];
        w[q] = keep + h;
        double up = gc_loss(g, false);
        w[q] = keep - h;
        double down = gc_loss(g, false);
        w[q] = keep;
        snprintf(what, sizeof what, "weight %zu", q);
        check(what, dw[q], (up - down) / (2 * h), &bad);
    }
    if (bad)
        fail_msg("%s, %u layers: %d of %zu gradients off", model ? "complex" : "distmult", layers, bad,
                 (size_t)n * GD + np);
    free(dw);
    linkenc_free(&g->e);
    free(g);
}

static void test_gradients(void **state)
{
    (void)state;
    gradcheck(KGE_DISTMULT, 1, -1, 0);
    gradcheck(KGE_DISTMULT, 2, 3, 2);
    gradcheck(KGE_COMPLEX, 2, -1, -1);
}

/* ---- the graph ---------------------------------------------------------------------------- */

static void test_graph(void **state)
{
    (void)state;
    const uint64_t tr[] = {0, 0, 1, 2, 1, 1, 3, 0, 3, 1, 0, 2};
    struct linkenc e;
    struct linkenc_opts o = {.layers = 1, .fanouts = {-1}, .dim = 2, .lr = 0.01f, .seed = 1};
    char err[512];
    assert_int_equal(linkenc_init(&e, 5, tr, 4, 4, &o, err, sizeof err), 0);
    /* in triple order, each triple's head into its tail's list, then its
     * tail into its head's: node 1 is the tail of triples 0 and 1 (heads
     * 0, 2) and the head of triple 3 (tail 2) */
    const uint32_t *ix = e.topo.indices;
    assert_int_equal(e.topo.edges, 8);
    assert_int_equal(e.topo.indptr[1] - e.topo.indptr[0], 1); /* 0: 1 */
    assert_int_equal(e.topo.indptr[2] - e.topo.indptr[1], 3); /* 1: 0, 2, 2 */
    assert_int_equal(ix[e.topo.indptr[1]], 0);
    assert_int_equal(ix[e.topo.indptr[1] + 1], 2);
    assert_int_equal(ix[e.topo.indptr[1] + 2], 2);
    assert_int_equal(e.topo.indptr[3] - e.topo.indptr[2], 2); /* 2: 1, 1 */
    assert_int_equal(e.topo.indptr[4] - e.topo.indptr[3], 2); /* 3: itself, once per end */
    assert_int_equal(ix[e.topo.indptr[3]], 3);
    assert_int_equal(e.topo.indptr[5] - e.topo.indptr[4], 0); /* 4: alone */
    assert_int_equal(e.topo.max_in_degree, 3);
    linkenc_free(&e);
    /* ids past 32 bits are refused, naming the key */
    assert_int_equal(linkenc_init(&e, 1ull << 33, tr, 4, 4, &o, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "model.encoder"));
}

/* ---- training ----------------------------------------------------------------------------- */

static struct link_opts opts(enum kge_model model)
{
    return (struct link_opts){.model = model, .loss = KGE_LOSS_SOFTMAX, .dim = 32, .lr = 0.1f, .eps = 1e-10f,
                              .batch = 500, .chunk = 50, .negs = 64, .degree_frac = 0.5, .sides = LINK_SIDES_BOTH,
                              .init = LINK_INIT_XAVIER, .seed = 7};
}

static struct linkenc_opts enc_opts(uint32_t layers)
{
    return (struct linkenc_opts){.layers = layers, .fanouts = {10, 5}, .aggr = MODEL_AGGR_MEAN,
                                 .activation = MODEL_ACT_RELU, .dim = 32, .lr = 0.01f, .seed = 7};
}

static void train(struct link_model *m, struct linkenc *e, const struct link_opts *o, const struct linkenc_opts *eo,
                  int epochs)
{
    char err[1024];
    assert_int_equal(link_model_init(m, g_m.nodes, g_m.relations, o, err, sizeof err), 0);
    if (linkenc_init(e, g_m.nodes, g_split[LINK_TRAIN], g_m.split[LINK_TRAIN].rows, link_batch_rows(o), eo, err,
                     sizeof err))
        fail_msg("%s", err);
    struct link_trainer t;
    assert_int_equal(link_trainer_init(&t, m, o, g_split[LINK_TRAIN], g_m.split[LINK_TRAIN].rows, err, sizeof err), 0);
    t.enc = e;
    double first = 0, loss = 0;
    for (int ep = 0; ep < epochs; ep++) {
        if (link_train_epoch(&t, (uint32_t)ep, &loss, err, sizeof err))
            fail_msg("epoch %d: %s", ep, err);
        if (ep == 0)
            first = loss;
    }
    if (epochs > 1)
        assert_true(loss < first);
    link_trainer_free(&t);
}

/* Filtered test MRR of the encoded table. */
static double test_mrr(const struct link_model *m, struct linkenc *e, const struct link_opts *o)
{
    char err[1024];
    struct link_model enc = *m;
    enc.node = malloc(m->nodes * m->d * sizeof(float));
    assert_int_equal(linkenc_encode_all(e, m->node, enc.node, err, sizeof err), 0);
    struct link_known k;
    const uint64_t *arr[3] = {g_split[0], g_split[1], g_split[2]};
    uint64_t ns[3] = {g_m.split[0].rows, g_m.split[1].rows, g_m.split[2].rows};
    assert_int_equal(link_known_init(&k, arr, ns, 3, err, sizeof err), 0);
    struct link_eval_opts eo = {.filter = &k};
    struct link_metrics r;
    assert_int_equal(link_evaluate(&enc, o, g_split[LINK_TEST], g_m.split[LINK_TEST].rows, &eo, &r, err, sizeof err),
                     0);
    link_known_free(&k);
    free(enc.node);
    return r.mrr;
}

static void test_learns_planted(void **state)
{
    (void)state;
    double chance = 0;
    for (uint64_t i = 1; i <= g_m.nodes; i++)
        chance += 1.0 / (double)i;
    chance /= (double)g_m.nodes;
    for (int c = 0; c < 3; c++) {
        enum kge_model model = c == 2 ? KGE_COMPLEX : KGE_DISTMULT;
        uint32_t layers = c == 1 ? 2 : 1;
        struct link_opts o = opts(model);
        struct linkenc_opts eo = enc_opts(layers);
        struct link_model m;
        struct linkenc e;
        train(&m, &e, &o, &eo, 15);
        double mrr = test_mrr(&m, &e, &o);
        print_message("%s, %u-layer sage: filtered test MRR %.4f, planted %.4f, chance %.4f\n",
                      model ? "complex" : "distmult", layers, mrr, g_m.planted_mrr, chance);
        if (mrr < 0.8 * g_m.planted_mrr)
            fail_msg("%u layers reached MRR %.4f, under 0.8 of the planted %.4f", layers, mrr, g_m.planted_mrr);
        linkenc_free(&e);
        link_model_free(&m);
    }
}

static void test_deterministic(void **state)
{
    (void)state;
    struct link_opts o = opts(KGE_DISTMULT);
    struct linkenc_opts eo = enc_opts(2);
    struct link_model a, b;
    struct linkenc ea, eb;
    ops_set_threads(1);
    train(&a, &ea, &o, &eo, 2);
    ops_set_threads(3);
    train(&b, &eb, &o, &eo, 2);
    ops_set_threads(1);
    const size_t nd = g_m.nodes * o.dim;
    assert_memory_equal(a.node, b.node, 2 * nd * sizeof(float)); /* embeddings and Adagrad sums */
    assert_memory_equal(a.rel, b.rel, g_m.relations * o.dim * sizeof(float));
    assert_int_equal(linkenc_nparams(&ea), linkenc_nparams(&eb));
    assert_memory_equal(linkenc_params(&ea), linkenc_params(&eb), linkenc_nparams(&ea) * sizeof(float));
    assert_memory_equal(ea.adam.v, eb.adam.v, linkenc_nparams(&ea) * sizeof(float));
    /* another seed trains other tables */
    linkenc_free(&eb);
    link_model_free(&b);
    o.seed = 8;
    eo.seed = 8;
    train(&b, &eb, &o, &eo, 1);
    assert_true(memcmp(a.node, b.node, nd * sizeof(float)) != 0);
    linkenc_free(&ea), linkenc_free(&eb);
    link_model_free(&a), link_model_free(&b);
}

/* Rows of an in-memory table through link_eval_opts.rows's shape. */
static int table_rows(void *arg, uint64_t first, uint64_t count, float *dst, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    const struct link_model *m = arg;
    memcpy(dst, m->node + first * m->d, count * m->d * sizeof *dst);
    return 0;
}

/* Encoding every node at once (full neighbourhoods) is a sampled forward
 * whose fanouts take every neighbour: the same rows; and so is encoding
 * them streamed through a file (out of core). */
static void test_encode_all(void **state)
{
    (void)state;
    struct link_opts o = opts(KGE_DISTMULT);
    struct linkenc_opts eo = enc_opts(2);
    eo.fanouts[0] = eo.fanouts[1] = -1;
    struct link_model m;
    struct linkenc e;
    train(&m, &e, &o, &eo, 1);
    char err[1024];
    const uint32_t d = o.dim;
    float *all = malloc(m.nodes * d * sizeof *all);
    assert_int_equal(linkenc_encode_all(&e, m.node, all, err, sizeof err), 0);
    uint64_t ids[40];
    for (uint32_t i = 0; i < 40; i++)
        ids[i] = (i * 37) % m.nodes;
    float *rows = malloc(40 * d * sizeof *rows);
    assert_int_equal(linkenc_sample(&e, ids, 40, 0, 0, err, sizeof err), 0);
    for (uint32_t i = 0; i < linkenc_count(&e); i++)
        memcpy(linkenc_input(&e) + i * d, m.node + linkenc_nodes(&e)[i] * d, d * sizeof(float));
    assert_int_equal(linkenc_forward(&e, rows, err, sizeof err), 0);
    for (uint32_t i = 0; i < 40; i++)
        for (uint32_t j = 0; j < d; j++)
            if (fabsf(rows[i * d + j] - all[ids[i] * d + j]) > 1e-5f * (1 + fabsf(all[ids[i] * d + j])))
                fail_msg("node %llu [%u]: sampled %g, full %g", (unsigned long long)ids[i], j, rows[i * d + j],
                         all[ids[i] * d + j]);
    /* streamed through a file in chunks (out of core), 3 layers: the same rows */
    struct linkenc e3;
    struct linkenc_opts o3 = enc_opts(3);
    o3.fanouts[2] = 3;
    assert_int_equal(linkenc_init(&e3, g_m.nodes, g_split[LINK_TRAIN], g_m.split[LINK_TRAIN].rows, 8, &o3, err,
                                  sizeof err), 0);
    e3.stream_chunk = 100; /* ten chunks */
    assert_int_equal(linkenc_encode_all(&e3, m.node, all, err, sizeof err), 0);
    char path[4300];
    snprintf(path, sizeof path, "%s/encoded.bin", g_dir);
    struct link_model src = m;
    assert_int_equal(linkenc_encode_file(&e3, table_rows, &src, path, err, sizeof err), 0);
    struct linkenc_file f = {.fd = open(path, O_RDONLY), .d = d};
    assert_true(f.fd >= 0);
    float *back = malloc(m.nodes * d * sizeof *back);
    assert_int_equal(linkenc_file_rows(&f, 0, m.nodes, back, err, sizeof err), 0);
    close(f.fd);
    for (size_t i = 0; i < m.nodes * d; i++)
        if (fabsf(back[i] - all[i]) > 1e-5f * (1 + fabsf(all[i])))
            fail_msg("streamed row %zu [%zu]: %g, in memory %g", i / d, i % d, back[i], all[i]);
    char layer[4400];
    snprintf(layer, sizeof layer, "%s.layer0", path);
    assert_true(access(layer, F_OK) != 0); /* the layers in between are gone */
    unlink(path);
    free(back);
    linkenc_free(&e3);
    free(rows), free(all);
    linkenc_free(&e);
    link_model_free(&m);
}

static int setup(void **state)
{
    (void)state;
    if (t_link_kg_make("linkenc", g_dir, sizeof g_dir, g_kg, sizeof g_kg, &g_m, g_split))
        return -1;
    ops_set_threads(1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    t_link_kg_free(g_dir, g_split);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients),   cmocka_unit_test(test_graph),      cmocka_unit_test(test_learns_planted),
        cmocka_unit_test(test_deterministic), cmocka_unit_test(test_encode_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
