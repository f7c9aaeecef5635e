/* test_link.c - link prediction in memory (stages/link.h): DistMult and
 * ComplEx trained on a synthetic knowledge graph with planted structure
 * (gnnprep synth --task link) reach most of its planted MRR, far above
 * chance; training is a function of the seed (the same tables bit for bit
 * twice, and for 1 and 3 threads); the evaluation equals a brute-force
 * ranking in double (raw, filtered, heads too) and sampled candidates
 * rank no worse; degree-drawn negatives never touch a node without a
 * training triple; PyG's one-negative pattern trains too. */
#include <errno.h>
#include <math.h>

#include "t_util.h"
#include "t_link.h"
#include "core/linkdata.h"
#include "core/util.h"
#include "ops/ops.h"
#include "stages/link.h"

static char g_dir[4096], g_kg[4200];
static struct link_meta g_m;
static uint64_t *g_split[LINK_SPLITS];

static struct link_opts opts(enum kge_model model, enum kge_loss loss)
{
    return (struct link_opts){.model = model, .loss = loss, .margin = 1.0f, .dim = 32, .lr = 0.1f, .eps = 1e-10f,
                              .batch = 500, .chunk = 50, .negs = 64, .degree_frac = 0.5,
                              .sides = LINK_SIDES_BOTH, .init = LINK_INIT_XAVIER, .seed = 7};
}

static void train(struct link_model *m, const struct link_opts *o, int epochs, double *last_loss)
{
    char err[1024];
    assert_int_equal(link_model_init(m, g_m.nodes, g_m.relations, o, err, sizeof err), 0);
    struct link_trainer t;
    assert_int_equal(link_trainer_init(&t, m, o, g_split[LINK_TRAIN], g_m.split[LINK_TRAIN].rows, err, sizeof err), 0);
    double first = 0, loss = 0;
    for (int e = 0; e < epochs; e++) {
        if (link_train_epoch(&t, (uint32_t)e, &loss, err, sizeof err))
            fail_msg("epoch %d: %s", e, err);
        if (e == 0)
            first = loss;
    }
    if (epochs > 1)
        assert_true(loss < first); /* it learns */
    if (last_loss)
        *last_loss = loss;
    link_trainer_free(&t);
}

static double test_mrr(const struct link_model *m, const struct link_opts *o)
{
    struct link_known k;
    char err[1024];
    const uint64_t *arr[3] = {g_split[0], g_split[1], g_split[2]};
    uint64_t ns[3] = {g_m.split[0].rows, g_m.split[1].rows, g_m.split[2].rows};
    assert_int_equal(link_known_init(&k, arr, ns, 3, err, sizeof err), 0);
    struct link_eval_opts e = {.filter = &k};
    struct link_metrics r;
    assert_int_equal(link_evaluate(m, o, g_split[LINK_TEST], g_m.split[LINK_TEST].rows, &e, &r, err, sizeof err), 0);
    link_known_free(&k);
    return r.mrr;
}

static void test_learns_planted(void **state)
{
    (void)state;
    double chance = 0;
    for (uint64_t i = 1; i <= g_m.nodes; i++)
        chance += 1.0 / (double)i;
    chance /= (double)g_m.nodes;
    for (int model = 0; model < 2; model++) {
        struct link_opts o = opts((enum kge_model)model, KGE_LOSS_SOFTMAX);
        struct link_model m;
        train(&m, &o, 25, NULL);
        double mrr = test_mrr(&m, &o);
        print_message("%s: filtered test MRR %.4f, planted %.4f, chance %.4f\n", model ? "complex" : "distmult", mrr,
                      g_m.planted_mrr, chance);
        if (mrr < 0.8 * g_m.planted_mrr)
            fail_msg("%s reached MRR %.4f, under 0.8 of the planted %.4f", model ? "complex" : "distmult", mrr,
                     g_m.planted_mrr);
        assert_true(mrr < g_m.planted_mrr + 0.05); /* nothing beats the planted structure by much */
        link_model_free(&m);
    }
}

static void test_deterministic(void **state)
{
    (void)state;
    struct link_opts o = opts(KGE_COMPLEX, KGE_LOSS_LOGISTIC);
    struct link_model a, b;
    ops_set_threads(1);
    train(&a, &o, 3, NULL);
    ops_set_threads(3);
    train(&b, &o, 3, NULL);
    ops_set_threads(1);
    assert_memory_equal(a.node, b.node, g_m.nodes * o.dim * sizeof(float));
    assert_memory_equal(a.rel, b.rel, g_m.relations * o.dim * sizeof(float));
    assert_memory_equal(a.node_g2, b.node_g2, g_m.nodes * o.dim * sizeof(float));
    link_model_free(&b);
    o.seed = 8; /* another seed, other tables */
    train(&b, &o, 1, NULL);
    assert_true(memcmp(a.node, b.node, g_m.nodes * o.dim * sizeof(float)) != 0);
    link_model_free(&a);
    link_model_free(&b);
}

/* Brute force in double: the rank of the truth among all nodes. */
static double brute_rank(const struct link_model *m, enum kge_model model, const uint64_t *x, int side, bool filter)
{
    const uint32_t d = m->d, k = d / 2;
    double s[4096];
    assert_true(m->nodes <= 4096);
    for (uint64_t v = 0; v < m->nodes; v++) {
        const float *h = m->node + (side ? v : x[0]) * d, *r = m->rel + x[1] * d, *t = m->node + (side ? x[2] : v) * d;
        double sum = 0;
        if (model == KGE_DISTMULT)
            for (uint32_t j = 0; j < d; j++)
                sum += (double)h[j] * r[j] * t[j];
        else
            for (uint32_t j = 0; j < k; j++)
                sum += ((double)h[j] * r[j] - (double)h[j + k] * r[j + k]) * t[j] +
                       ((double)h[j] * r[j + k] + (double)h[j + k] * r[j]) * t[j + k];
        s[v] = sum;
    }
    uint64_t truth = side ? x[0] : x[2];
    static bool other[4096]; /* the other known answers of the query, for filtering */
    memset(other, 0, sizeof other);
    for (int sp = 0; filter && sp < LINK_SPLITS; sp++)
        for (uint64_t i = 0; i < g_m.split[sp].rows; i++) {
            const uint64_t *y = g_split[sp] + i * 3;
            if (y[1] == x[1] && (side ? y[2] == x[2] : y[0] == x[0]))
                other[side ? y[0] : y[2]] = true;
        }
    double rank = 1;
    for (uint64_t v = 0; v < m->nodes; v++) {
        if (v == truth || other[v])
            continue;
        rank += s[v] > s[truth] ? 1 : s[v] == s[truth] ? 0.5 : 0;
    }
    return rank;
}

static void test_evaluation(void **state)
{
    (void)state;
    for (int model = 0; model < 2; model++) {
        struct link_opts o = opts((enum kge_model)model, KGE_LOSS_SOFTMAX);
        struct link_model m;
        train(&m, &o, 3, NULL);
        struct link_known k;
        char err[1024];
        const uint64_t *arr[3] = {g_split[0], g_split[1], g_split[2]};
        uint64_t ns[3] = {g_m.split[0].rows, g_m.split[1].rows, g_m.split[2].rows};
        assert_int_equal(link_known_init(&k, arr, ns, 3, err, sizeof err), 0);
        const uint64_t n = SL_MIN(g_m.split[LINK_TEST].rows, (uint64_t)300);
        for (int filt = 0; filt < 2; filt++)
            for (int heads = 0; heads < 2; heads++) {
                struct link_eval_opts e = {.filter = filt ? &k : NULL, .heads_too = heads};
                struct link_metrics r;
                assert_int_equal(link_evaluate(&m, &o, g_split[LINK_TEST], n, &e, &r, err, sizeof err), 0);
                double mrr = 0, mr = 0, h10 = 0;
                for (int side = 0; side <= heads; side++)
                    for (uint64_t i = 0; i < n; i++) {
                        double rank = brute_rank(&m, o.model, g_split[LINK_TEST] + i * 3, side, filt);
                        mrr += 1 / rank, mr += rank, h10 += rank <= 10;
                    }
                double cnt = (double)n * (heads + 1);
                assert_int_equal(r.ranks, (uint64_t)cnt);
                if (fabs(r.mrr - mrr / cnt) > 1e-6 || fabs(r.mean_rank - mr / cnt) > 1e-3 ||
                    fabs(r.hits10 - h10 / cnt) > 1e-9)
                    fail_msg("model %d filter %d heads %d: MRR %.6f / %.6f, mean rank %.3f / %.3f (brute force)", model,
                             filt, heads, r.mrr, mrr / cnt, r.mean_rank, mr / cnt);
                /* against 50 sampled candidates a truth ranks no worse */
                struct link_eval_opts es = e;
                es.sampled = 50;
                struct link_metrics rs;
                assert_int_equal(link_evaluate(&m, &o, g_split[LINK_TEST], n, &es, &rs, err, sizeof err), 0);
                assert_true(rs.mrr >= r.mrr && rs.mean_rank <= 51);
            }
        link_known_free(&k);
        link_model_free(&m);
    }
}

static void test_degree_negatives(void **state)
{
    (void)state;
    /* nodes of no training triple: never a positive, and never a negative
     * when every negative is drawn by degree */
    bool *seen = calloc(g_m.nodes, 1);
    for (uint64_t i = 0; i < g_m.split[LINK_TRAIN].rows; i++)
        seen[g_split[LINK_TRAIN][i * 3]] = seen[g_split[LINK_TRAIN][i * 3 + 2]] = true;
    uint64_t *part = malloc(g_m.split[LINK_TRAIN].rows * 3 * sizeof *part), np = 0;
    for (uint64_t i = 0; i < g_m.split[LINK_TRAIN].rows; i++) /* drop the triples of nodes below 100 */
        if (g_split[LINK_TRAIN][i * 3] >= 100 && g_split[LINK_TRAIN][i * 3 + 2] >= 100)
            memcpy(part + 3 * np++, g_split[LINK_TRAIN] + i * 3, 24);
    struct link_opts o = opts(KGE_DISTMULT, KGE_LOSS_SOFTMAX);
    o.degree_frac = 1;
    struct link_model m;
    char err[1024];
    assert_int_equal(link_model_init(&m, g_m.nodes, g_m.relations, &o, err, sizeof err), 0);
    struct link_trainer t;
    assert_int_equal(link_trainer_init(&t, &m, &o, part, np, err, sizeof err), 0);
    double loss;
    assert_int_equal(link_train_epoch(&t, 0, &loss, err, sizeof err), 0);
    for (uint64_t v = 0; v < 100; v++)
        for (uint32_t j = 0; j < o.dim; j++)
            assert_true(m.node_g2[v * o.dim + j] == 0);
    uint64_t touched = 0;
    for (uint64_t v = 100; v < g_m.nodes; v++)
        touched += m.node_g2[v * o.dim] != 0;
    assert_true(touched > (g_m.nodes - 100) / 2);
    link_trainer_free(&t);
    link_model_free(&m);
    free(part);
    free(seen);
}

static void test_pyg_pattern(void **state)
{
    (void)state;
    struct link_opts o = opts(KGE_DISTMULT, KGE_LOSS_MARGIN);
    o.sides = LINK_SIDES_PYG;
    o.degree_frac = 0;
    struct link_model m;
    double loss;
    train(&m, &o, 10, &loss);
    assert_true(loss < 1.0); /* the margin is mostly met */
    link_model_free(&m);
    /* bad options are refused with a message */
    char err[1024];
    o.sides = LINK_SIDES_BOTH;
    o.negs = 0;
    struct link_trainer t;
    struct link_model m2;
    assert_int_equal(link_model_init(&m2, 10, 2, &o, err, sizeof err), 0);
    assert_int_equal(link_trainer_init(&t, &m2, &o, g_split[0], 5, err, sizeof err), -EINVAL);
    link_model_free(&m2);
    o = opts(KGE_COMPLEX, KGE_LOSS_SOFTMAX);
    o.dim = 7;
    assert_int_equal(link_model_init(&m2, 10, 2, &o, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "even"));
}

static int setup(void **state)
{
    (void)state;
    if (t_link_kg_make("link", g_dir, sizeof g_dir, g_kg, sizeof g_kg, &g_m, g_split))
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
        cmocka_unit_test(test_learns_planted), cmocka_unit_test(test_deterministic), cmocka_unit_test(test_evaluation),
        cmocka_unit_test(test_degree_negatives), cmocka_unit_test(test_pyg_pattern),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
