/* test_kge.c - the link-prediction operators (ops/kge.h) against a
 * reference written here in double from the scores' definitions (DistMult
 * sum h r t; ComplEx Re(sum h r conj(t))): the loss of every model, loss
 * and side pattern (PyG's one negative per positive, half heads, half
 * tails, among them), its gradient w.r.t. every gathered row by central
 * differences of the reference, the queries' identity with the scores,
 * bit-identical results for 1 and 3 threads, the coalescing of repeated
 * rows, Adagrad as torch's, and the ranks (ties, filtering, NaN). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "t_util.h"
#include "ops/kge.h"
#include "ops/ops.h"

#define N 7
#define D 6
#define CHUNK 3
#define NEGS 4
#define CHUNKS ((N + CHUNK - 1) / CHUNK)

static uint64_t g_rng = 12345;
static double urand(void)
{
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1.0p-53;
}

/* The score of one triple in double, from the definitions. */
static double ref_score(enum kge_model m, const double *h, const double *r, const double *t)
{
    double s = 0;
    if (m == KGE_DISTMULT) {
        for (int j = 0; j < D; j++)
            s += h[j] * r[j] * t[j];
        return s;
    }
    int k = D / 2;
    for (int j = 0; j < k; j++) { /* Re(h r conj(t)) */
        double hr = h[j], hi = h[j + k], rr = r[j], ri = r[j + k], tr = t[j], ti = t[j + k];
        double pr = hr * rr - hi * ri, pi = hr * ri + hi * rr;
        s += pr * tr + pi * ti;
    }
    return s;
}

static double sp(double x)
{
    return log1p(exp(x));
}

/* The loss of a batch in double: rows of all gathered tensors in one
 * array x = [h (N,D) | r | t | neg (CHUNKS*NEGS, D)]. */
static double ref_loss(enum kge_model m, enum kge_loss loss, double margin, const uint8_t *side, const double *x)
{
    const double *h = x, *r = h + N * D, *t = r + N * D, *neg = t + N * D;
    double sum = 0, count = loss == KGE_LOSS_LOGISTIC ? N : 0;
    for (int i = 0; i < N; i++) {
        double ps = ref_score(m, h + i * D, r + i * D, t + i * D);
        if (loss == KGE_LOSS_LOGISTIC)
            sum += sp(-ps);
        int c = i / CHUNK;
        for (int s = KGE_TAIL; s <= KGE_HEAD; s <<= 1) {
            if (!((side ? side[c] : 3) & s))
                continue;
            double ns[NEGS];
            for (int j = 0; j < NEGS; j++) {
                const double *nj = neg + (c * NEGS + j) * D;
                ns[j] = s == KGE_TAIL ? ref_score(m, h + i * D, r + i * D, nj) : ref_score(m, nj, r + i * D, t + i * D);
            }
            if (loss == KGE_LOSS_SOFTMAX) {
                double z = exp(ps);
                for (int j = 0; j < NEGS; j++)
                    z += exp(ns[j]);
                sum += log(z) - ps;
                count += 1;
            } else {
                for (int j = 0; j < NEGS; j++) {
                    sum += loss == KGE_LOSS_LOGISTIC ? sp(ns[j]) : fmax(0, margin - ps + ns[j]);
                    count += 1;
                }
            }
        }
    }
    return sum / count;
}

#define ROWS (3 * N + CHUNKS * NEGS)

static void check_case(enum kge_model m, enum kge_loss loss, const uint8_t *side, const char *what)
{
    static double x[ROWS * D];
    static float xf[ROWS * D], grad[ROWS * D];
    for (int i = 0; i < ROWS * D; i++) {
        xf[i] = (float)(urand() * 1.6 - 0.8);
        x[i] = xf[i];
    }
    const float margin = 1.0f;
    struct kge_batch b = {.model = m, .loss = loss, .margin = margin, .n = N, .d = D, .h = xf, .r = xf + N * D,
                          .t = xf + 2 * N * D, .chunk = CHUNK, .negs = NEGS, .neg = xf + 3 * N * D, .side = side};
    float *scratch = malloc(kge_step_scratch(&b) * sizeof *scratch);
    uint64_t terms = 0;
    float l = kge_step(&b, grad, grad + N * D, grad + 2 * N * D, grad + 3 * N * D, scratch, &terms);
    double want = ref_loss(m, loss, margin, side, x);
    if (fabs(l - want) > 1e-5 * fmax(1, fabs(want)))
        fail_msg("%s: loss %.9g, reference %.9g", what, l, want);
    /* the loss alone (no gradients) is the same number */
    float l2 = kge_step(&b, NULL, NULL, NULL, NULL, scratch, NULL);
    assert_true(l2 == l);
    /* every gradient element against central differences */
    double worst = 0;
    for (int i = 0; i < ROWS * D; i++) {
        double keep = x[i], e = 1e-6;
        x[i] = keep + e;
        double up = ref_loss(m, loss, margin, side, x);
        x[i] = keep - e;
        double dn = ref_loss(m, loss, margin, side, x);
        x[i] = keep;
        double fd = (up - dn) / (2 * e), diff = fabs(fd - grad[i]);
        if (diff > 2e-4 * fmax(1, fabs(fd)))
            fail_msg("%s: d loss / d x[%d] (row %d) = %.8g, central difference %.8g", what, i, i / D, grad[i], fd);
        worst = fmax(worst, diff);
    }
    (void)worst;
    /* bit-identical for 1 and 3 threads */
    static float g3[ROWS * D];
    ops_set_threads(3);
    float l3 = kge_step(&b, g3, g3 + N * D, g3 + 2 * N * D, g3 + 3 * N * D, scratch, NULL);
    ops_set_threads(1);
    assert_true(l3 == l);
    assert_memory_equal(g3, grad, sizeof g3);
    free(scratch);
}

static void test_losses_and_gradients(void **state)
{
    (void)state;
    const uint8_t both[CHUNKS] = {3, 3, 3}, mixed[CHUNKS] = {KGE_TAIL, KGE_HEAD, 3}, none_head[CHUNKS] = {1, 1, 1};
    const uint8_t *sides[] = {NULL, both, mixed, none_head};
    const char *sname[] = {"both (NULL)", "both", "tail/head/both", "tails"};
    const char *mname[] = {"distmult", "complex"}, *lname[] = {"softmax", "logistic", "margin"};
    char what[128];
    for (int m = 0; m < 2; m++)
        for (int l = 0; l < 3; l++)
            for (size_t s = 0; s < SL_ARRAY_LEN(sides); s++) {
                snprintf(what, sizeof what, "%s %s %s", mname[m], lname[l], sname[s]);
                check_case((enum kge_model)m, (enum kge_loss)l, sides[s], what);
            }
}

/* PyG's training batch: one negative per positive, heads corrupted in the
 * first half, tails in the second; its losses by PyG's definitions. */
static void test_pyg_pattern(void **state)
{
    (void)state;
    enum { B = 6 };
    float h[B * D], r[B * D], t[B * D], neg[B * D], g[4 * B * D];
    for (int i = 0; i < B * D; i++) {
        h[i] = (float)(urand() - 0.5);
        r[i] = (float)(urand() - 0.5);
        t[i] = (float)(urand() - 0.5);
        neg[i] = (float)(urand() - 0.5);
    }
    uint8_t side[B];
    for (int i = 0; i < B; i++)
        side[i] = i < B / 2 ? KGE_HEAD : KGE_TAIL;
    for (int m = 0; m < 2; m++) {
        double pos[B], ns[B];
        for (int i = 0; i < B; i++) {
            double hd[D], rd[D], td[D], nd[D];
            for (int j = 0; j < D; j++)
                hd[j] = h[i * D + j], rd[j] = r[i * D + j], td[j] = t[i * D + j], nd[j] = neg[i * D + j];
            pos[i] = ref_score((enum kge_model)m, hd, rd, td);
            ns[i] = side[i] == KGE_HEAD ? ref_score((enum kge_model)m, nd, rd, td)
                                        : ref_score((enum kge_model)m, hd, rd, nd);
        }
        double bce = 0, mr = 0; /* F.binary_cross_entropy_with_logits over cat(pos, neg); F.margin_ranking_loss */
        for (int i = 0; i < B; i++) {
            bce += sp(-pos[i]) + sp(ns[i]);
            mr += fmax(0, -(pos[i] - ns[i]) + 1.0);
        }
        bce /= 2 * B;
        mr /= B;
        struct kge_batch b = {.model = (enum kge_model)m, .loss = KGE_LOSS_LOGISTIC, .margin = 1.0f, .n = B, .d = D,
                              .h = h, .r = r, .t = t, .chunk = 1, .negs = 1, .neg = neg, .side = side};
        float *scratch = malloc(kge_step_scratch(&b) * sizeof *scratch);
        float l = kge_step(&b, g, g + B * D, g + 2 * B * D, g + 3 * B * D, scratch, NULL);
        assert_true(fabs(l - bce) < 1e-6);
        b.loss = KGE_LOSS_MARGIN;
        l = kge_step(&b, g, g + B * D, g + 2 * B * D, g + 3 * B * D, scratch, NULL);
        assert_true(fabs(l - mr) < 1e-6);
        free(scratch);
    }
}

static void test_queries(void **state)
{
    (void)state;
    float h[2 * D], r[2 * D], t[2 * D], q[2 * D], p[2 * D];
    for (int i = 0; i < 2 * D; i++)
        h[i] = (float)(urand() - 0.5), r[i] = (float)(urand() - 0.5), t[i] = (float)(urand() - 0.5);
    for (int m = 0; m < 2; m++) {
        kge_query_tail((enum kge_model)m, q, h, r, 2, D);
        kge_query_head((enum kge_model)m, p, r, t, 2, D);
        for (int i = 0; i < 2; i++) {
            double hd[D], rd[D], td[D], sq = 0, sp_ = 0;
            for (int j = 0; j < D; j++) {
                hd[j] = h[i * D + j], rd[j] = r[i * D + j], td[j] = t[i * D + j];
                sq += (double)q[i * D + j] * td[j];
                sp_ += hd[j] * (double)p[i * D + j];
            }
            double s = ref_score((enum kge_model)m, hd, rd, td);
            assert_true(fabs(sq - s) < 1e-6 && fabs(sp_ - s) < 1e-6);
        }
        /* kge_score_all is the same dot product for every candidate */
        float all[2 * 2];
        kge_score_all(all, q, 2, t, 2, D);
        for (int i = 0; i < 2; i++)
            for (int c = 0; c < 2; c++) {
                double s = 0;
                for (int j = 0; j < D; j++)
                    s += (double)q[i * D + j] * t[c * D + j];
                assert_true(fabs(all[i * 2 + c] - s) < 1e-6);
            }
    }
}

static void test_coalesce_adagrad(void **state)
{
    (void)state;
    const uint64_t ids[] = {9, 2, 9, 5, 2, 9};
    float g[6 * 2], sum[6 * 2];
    for (int i = 0; i < 12; i++)
        g[i] = (float)(i + 1);
    uint64_t uid[6];
    uint32_t order[6];
    uint32_t u = kge_coalesce(ids, g, 6, 2, uid, sum, order);
    assert_int_equal(u, 3);
    assert_true(uid[0] == 2 && uid[1] == 5 && uid[2] == 9);
    const float want[] = {3 + 9, 4 + 10, 7, 8, 1 + 5 + 11, 2 + 6 + 12};
    assert_memory_equal(sum, want, sizeof want);
    /* Adagrad as torch.optim.Adagrad: two steps by hand */
    float w[2] = {0.5f, -1.0f}, st[2] = {0, 0}, g1[2] = {0.2f, -0.4f}, zero[2] = {0, 0};
    kge_adagrad(w, st, g1, 2, 0.1f, 1e-10f);
    assert_true(fabsf(w[0] - (0.5f - 0.1f)) < 1e-6f && fabsf(w[1] - (-1.0f + 0.1f)) < 1e-6f);
    kge_adagrad(w, st, g1, 2, 0.1f, 1e-10f);
    float a0 = 0.4f - 0.1f * 0.2f / sqrtf(0.08f);
    assert_true(fabsf(w[0] - a0) < 1e-6f);
    float keep[2] = {w[0], w[1]};
    kge_adagrad(w, st, zero, 2, 0.1f, 1e-10f); /* an untouched row stays */
    assert_memory_equal(w, keep, sizeof keep);
}

static void test_rank(void **state)
{
    (void)state;
    const float s[] = {0.5f, 2.0f, 1.0f, 2.0f, -1.0f, 1.0f};
    assert_true(kge_rank(s, 6, 1, NULL, 0) == 1.5);  /* one tie above or level: 1 + 0 + 0.5 */
    assert_true(kge_rank(s, 6, 2, NULL, 0) == 3.5);  /* two higher, one tie */
    assert_true(kge_rank(s, 6, 4, NULL, 0) == 6.0);  /* last */
    const uint64_t skip[] = {1, 3};
    assert_true(kge_rank(s, 6, 2, skip, 2) == 1.5);  /* filtered: the other answers left out */
    const uint64_t self[] = {2};
    assert_true(kge_rank(s, 6, 2, self, 1) == 3.5);  /* truth itself is never left out */
    const float bad[] = {0.5f, NAN, 1.0f};
    assert_true(kge_rank(bad, 3, 1, NULL, 0) == 3.0);
    assert_true(kge_rank(bad, 3, 0, NULL, 0) == 2.0); /* a NaN candidate does not rank above */
}

int main(void)
{
    ops_set_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_losses_and_gradients), cmocka_unit_test(test_pyg_pattern), cmocka_unit_test(test_queries),
        cmocka_unit_test(test_coalesce_adagrad), cmocka_unit_test(test_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
