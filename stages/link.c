/* link.c - link prediction in memory (stages/link.h). */
#include "stages/link.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "ops/ops.h"
#include "stages/linkenc.h"

#define EVAL_BLOCK 256u      /* queries scored together */
#define EVAL_CAND 16384u     /* candidates per GEMM of the full ranking */

static inline uint64_t below(uint64_t x, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

static inline double unit(uint64_t x)
{
    return (double)(x >> 11) * 0x1.0p-53;
}

static inline uint64_t stream(uint64_t seed, uint64_t a, uint64_t b)
{
    return sl_mix64(seed ^ sl_mix64(a * 0x9e3779b97f4a7c15ull + sl_mix64(b + 0x632be59bd9b4e019ull)));
}

/* ---- the model ---------------------------------------------------------------------------- */

void link_init_stream(const struct link_opts *o, uint64_t nodes, uint64_t relations, uint64_t *st, double *node_bound,
                      double *rel_bound)
{
    *st = sl_mix64(o->seed ^ 0x6b6765696e6974ull);
    /* torch's xavier_uniform_ on a table (num, width): U(+-sqrt(6 / (width
     * + num))); ComplEx's real and imaginary tables have width d / 2 */
    double w = o->model == KGE_COMPLEX ? o->dim / 2.0 : (double)o->dim;
    *node_bound = o->init == LINK_INIT_XAVIER ? sqrt(6.0 / (w + (double)nodes)) : o->init_scale;
    *rel_bound = o->init == LINK_INIT_XAVIER ? sqrt(6.0 / (w + (double)relations)) : o->init_scale;
}

int link_model_init_with(struct link_model *m, uint64_t nodes, uint64_t relations, const struct link_opts *o,
                         int (*emit)(void *arg, uint64_t *st, double bound), void *arg, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    if (!o->dim || (o->model == KGE_COMPLEX && o->dim % 2))
        return sl_errf(err, errlen, -EINVAL, "model.dim = %u must be %s", o->dim,
                       o->model == KGE_COMPLEX ? "even and positive for complex (real and imaginary halves)"
                                               : "positive");
    uint64_t nn64, nr64;
    if (sl_mul_ovf(nodes, o->dim, &nn64) || sl_mul_ovf(relations, o->dim, &nr64) || nn64 > SIZE_MAX / 16 ||
        nr64 > SIZE_MAX / 8)
        return sl_errf(err, errlen, -ENOMEM, "%" PRIu64 " nodes and %" PRIu64 " relations of %u floats do not fit in "
                       "memory", nodes, relations, o->dim);
    m->nodes = nodes;
    m->relations = relations;
    m->d = o->dim;
    size_t nn = emit ? 0 : (size_t)nn64, nr = (size_t)nr64;
    if (!emit) { /* one block: the embeddings, then their Adagrad sums (link_rows' g2_off) */
        m->node = malloc(2 * nn * sizeof *m->node);
        if (m->node) {
            m->node_g2 = m->node + nn;
            memset(m->node_g2, 0, nn * sizeof *m->node_g2);
        }
    }
    m->rel = malloc(nr * sizeof *m->rel);
    m->rel_g2 = calloc(nr, sizeof *m->rel_g2);
    if ((!emit && !m->node) || !m->rel || !m->rel_g2) {
        char b[32];
        link_model_free(m);
        return sl_errf(err, errlen, -ENOMEM, "out of memory for the embedding tables (%s)",
                       sl_fmt_bytes(2 * (nn + nr) * sizeof(float), b, sizeof b));
    }
    uint64_t st;
    double bn, br;
    link_init_stream(o, nodes, relations, &st, &bn, &br);
    if (emit) {
        int rc = emit(arg, &st, bn);
        if (rc < 0) {
            link_model_free(m);
            return rc;
        }
    } else {
        ops_uniform(m->node, nn, bn, &st);
    }
    ops_uniform(m->rel, nr, br, &st);
    return 0;
}

int link_model_init(struct link_model *m, uint64_t nodes, uint64_t relations, const struct link_opts *o, char *err,
                    size_t errlen)
{
    return link_model_init_with(m, nodes, relations, o, NULL, NULL, err, errlen);
}

void link_model_free(struct link_model *m)
{
    free(m->node); /* node_g2 is in the same block */
    free(m->rel);
    free(m->rel_g2);
    memset(m, 0, sizeof *m);
}

/* ---- training ------------------------------------------------------------------------------ */

static void batch_shape(const struct link_opts *o, uint32_t *chunk, uint32_t *negs)
{
    *chunk = o->sides == LINK_SIDES_PYG ? 1 : o->chunk;
    *negs = o->sides == LINK_SIDES_PYG ? 1 : o->negs;
}

uint32_t link_batch_rows(const struct link_opts *o)
{
    uint32_t chunk, negs;
    batch_shape(o, &chunk, &negs);
    return 2 * o->batch + (o->batch + chunk - 1) / chunk * negs;
}

int link_trainer_init(struct link_trainer *t, struct link_model *m, const struct link_opts *o, const uint64_t *triples,
                      uint64_t n, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    uint32_t chunk, negs;
    batch_shape(o, &chunk, &negs);
    if (!o->batch || !chunk || !negs || n == 0 || !(o->lr > 0) || !(o->degree_frac >= 0 && o->degree_frac <= 1))
        return sl_errf(err, errlen, -EINVAL,
                       "link training needs a batch, chunk and negatives of at least 1, lr > 0, a degree fraction in "
                       "[0, 1] and training triples");
    /* the rows of a batch are counted in 32 bits (ops/kge.h) */
    if (3 * (uint64_t)o->batch + ((uint64_t)o->batch + chunk - 1) / chunk * negs > UINT32_MAX)
        return sl_errf(err, errlen, -EINVAL, "a batch of %u with chunks of %u and %u negatives gathers more than 2^32 "
                       "rows", o->batch, chunk, negs);
    t->o = *o;
    t->m = m;
    t->triples = triples;
    t->n = n;
    const uint32_t B = o->batch, C = (B + chunk - 1) / chunk, d = m->d;
    const size_t K = (size_t)C * negs, rows = 2 * (size_t)B + K;
    struct kge_batch shape = {.n = B, .d = d, .chunk = chunk, .negs = negs};
    t->perm = malloc(n * sizeof *t->perm);
    t->rows = malloc((3 * (size_t)B + K) * d * sizeof *t->rows);
    t->grads = malloc((rows + B) * d * sizeof *t->grads);
    t->scratch = malloc(kge_step_scratch(&shape) * sizeof *t->scratch);
    t->gsum = malloc(rows * d * sizeof *t->gsum);
    t->ids = malloc((rows + B) * sizeof *t->ids);
    t->uid = malloc(rows * sizeof *t->uid);
    t->neg_ids = malloc(K * sizeof *t->neg_ids);
    t->order = malloc(rows * sizeof *t->order);
    t->side = malloc(C);
    if (!t->perm || !t->rows || !t->grads || !t->scratch || !t->gsum || !t->ids || !t->uid || !t->neg_ids ||
        !t->order || !t->side) {
        link_trainer_free(t);
        return sl_errf(err, errlen, -ENOMEM, "out of memory for a batch of %u triples", B);
    }
    return 0;
}

void link_trainer_free(struct link_trainer *t)
{
    free(t->perm);
    free(t->rows);
    free(t->grads);
    free(t->scratch);
    free(t->gsum);
    free(t->ids);
    free(t->uid);
    free(t->neg_ids);
    free(t->order);
    free(t->side);
    memset(t, 0, sizeof *t);
}

/* Node v's embedding row in rows. */
static inline float *node_row(const struct link_rows *r, uint64_t v, uint32_t d)
{
    return r->part[v / r->part_nodes] + (size_t)(v % r->part_nodes) * d;
}

/* Sums repeated rows' gradients and steps each distinct row once. */
static void update_nodes(const struct link_rows *r, uint32_t d, const uint64_t *ids, const float *grad, uint32_t k,
                         uint64_t *uid, float *gsum, uint32_t *order, float lr, float eps)
{
    uint32_t u = kge_coalesce(ids, grad, k, d, uid, gsum, order);
    for (uint32_t i = 0; i < u; i++) {
        float *row = node_row(r, uid[i], d);
        kge_adagrad(row, row + r->g2_off, gsum + (size_t)i * d, d, lr, eps);
    }
}

static void update(float *table, float *g2, uint32_t d, const uint64_t *ids, const float *grad, uint32_t k,
                   uint64_t *uid, float *gsum, uint32_t *order, float lr, float eps)
{
    uint32_t u = kge_coalesce(ids, grad, k, d, uid, gsum, order);
    for (uint32_t i = 0; i < u; i++)
        kge_adagrad(table + uid[i] * d, g2 + uid[i] * d, gsum + (size_t)i * d, d, lr, eps);
}

/* The uniform negative number x of negs' count: the x-th node of the
 * partitions in negs, in id order (the identity when every one is). */
static inline uint64_t neg_node(const struct link_negs *g, uint64_t x)
{
    if (!g->parts)
        return x;
    for (uint32_t k = 0;; k++) {
        uint32_t q = g->parts[k];
        uint64_t lo = (uint64_t)q * g->part_nodes, len = SL_MIN(g->part_nodes, g->nodes - lo);
        if (x < len || k + 1 == g->nparts)
            return lo + x;
        x -= len;
    }
}

void link_shuffle(uint64_t *perm, uint64_t n, uint64_t seed, uint32_t epoch, uint32_t state)
{
    for (uint64_t i = 0; i < n; i++)
        perm[i] = i;
    uint64_t st = stream(seed, 0x70657266 ^ ((uint64_t)state << 32), epoch);
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = below(sl_splitmix64(&st), i), x = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = x;
    }
}

/* The encoder's forward for a batch whose ids (2 nb + K: heads, tails,
 * negatives) are at ids: samples their neighbourhood, copies the input
 * row of every sampled node and leaves the encoded rows in t->gsum. */
static int encode(struct link_trainer *t, const struct link_rows *rw, const uint64_t *ids, uint32_t nb, size_t K,
                  uint32_t epoch, uint64_t batch, char *err, size_t errlen)
{
    struct linkenc *e = t->enc;
    const uint32_t d = t->m->d;
    int rc = linkenc_sample(e, ids, 2 * nb + (uint32_t)K, epoch, batch, err, errlen);
    if (rc) {
        char why[1024];
        snprintf(why, sizeof why, "%s", err);
        return sl_errf(err, errlen, rc, "epoch %u, batch %" PRIu64 ": sampling the encoder's neighbourhood: %s",
                       epoch + 1, batch, why);
    }
    const uint64_t *nodes = linkenc_nodes(e);
    float *x = linkenc_input(e);
    for (uint32_t i = 0; i < linkenc_count(e); i++)
        memcpy(x + (size_t)i * d, node_row(rw, nodes[i], d), d * sizeof *x);
    return linkenc_forward(e, t->gsum, err, errlen);
}

/* The encoder's backward from the gradients of the encoded rows (dh, dt,
 * dneg in a row), then one Adagrad step on every sampled node's input row
 * (each node once: the sampled nodes are distinct). */
static int encoder_update(struct link_trainer *t, const struct link_rows *rw, const float *grad, char *err,
                          size_t errlen)
{
    struct linkenc *e = t->enc;
    const uint32_t d = t->m->d;
    int rc = linkenc_backward(e, grad, err, errlen);
    if (rc)
        return rc;
    const uint64_t *nodes = linkenc_nodes(e);
    const float *dx = linkenc_input_grad(e);
    for (uint32_t i = 0; i < linkenc_count(e); i++) {
        float *row = node_row(rw, nodes[i], d);
        kge_adagrad(row, row + rw->g2_off, dx + (size_t)i * d, d, t->o.lr, t->o.eps);
    }
    return 0;
}

int link_train_slice(struct link_trainer *t, const struct link_slice *sl, char *err, size_t errlen)
{
    const struct link_opts *o = &t->o;
    struct link_model *m = t->m;
    const struct link_rows *rw = sl->rows;
    const uint32_t d = m->d;
    uint32_t chunk, negs;
    batch_shape(o, &chunk, &negs);
    for (uint64_t first = 0; first < sl->n; first += o->batch) {
        const uint64_t batch = sl->first_batch + t->slice_batches;
        if (t->stop && *t->stop)
            return sl_errf(err, errlen, -EINTR, "epoch %u stopped at batch %" PRIu64, sl->epoch + 1, batch);
        const uint32_t nb = (uint32_t)SL_MIN((uint64_t)o->batch, sl->n - first), C = (nb + chunk - 1) / chunk;
        const size_t K = (size_t)C * negs;
        float *H = t->rows, *R = H + (size_t)nb * d, *T = R + (size_t)nb * d, *NG = T + (size_t)nb * d;
        uint64_t *hid = t->ids, *tid = hid + nb, *nid = tid + nb, *rid = nid + K;
        for (uint32_t i = 0; i < nb; i++) {
            const uint64_t *tr = sl->triples + sl->perm[first + i] * 3;
            hid[i] = tr[0];
            rid[i] = tr[1];
            tid[i] = tr[2];
            memcpy(H + (size_t)i * d, node_row(rw, tr[0], d), d * sizeof(float));
            memcpy(R + (size_t)i * d, m->rel + tr[1] * d, d * sizeof(float));
            memcpy(T + (size_t)i * d, node_row(rw, tr[2], d), d * sizeof(float));
        }
        uint64_t rs = stream(o->seed, sl->epoch + 1, batch);
        for (size_t j = 0; j < K; j++) {
            uint64_t x = sl_splitmix64(&rs), v;
            if (o->degree_frac > 0 && unit(x) < o->degree_frac) {
                uint64_t y = sl_splitmix64(&rs);
                v = sl->triples[below(y, sl->n) * 3 + ((y & 1) ? 2 : 0)];
            } else {
                v = neg_node(sl->negs, below(sl_splitmix64(&rs), sl->negs->count));
            }
            nid[j] = v;
            memcpy(NG + j * d, node_row(rw, v, d), d * sizeof(float));
        }
        if (t->enc) { /* the decoder scores the encoded rows (ids: heads, tails, negatives in a row) */
            int rc = encode(t, rw, hid, nb, K, sl->epoch, batch, err, errlen);
            if (rc)
                return rc;
            const float *E = t->gsum;
            memcpy(H, E, (size_t)nb * d * sizeof *H);
            memcpy(T, E + (size_t)nb * d, (size_t)nb * d * sizeof *T);
            memcpy(NG, E + 2 * (size_t)nb * d, K * d * sizeof *NG);
        }
        for (uint32_t c = 0; c < C; c++)
            t->side[c] = o->sides == LINK_SIDES_BOTH   ? KGE_TAIL | KGE_HEAD
                         : o->sides == LINK_SIDES_TAIL ? KGE_TAIL
                         : c < nb / 2                  ? KGE_HEAD
                                                       : KGE_TAIL;
        struct kge_batch b = {.model = o->model, .loss = o->loss, .margin = o->margin, .n = nb, .d = d, .h = H,
                              .r = R, .t = T, .chunk = chunk, .negs = negs, .neg = NG, .side = t->side};
        float *dh = t->grads, *dt = dh + (size_t)nb * d, *dneg = dt + (size_t)nb * d, *dr = dneg + K * d;
        float l = kge_step(&b, dh, dr, dt, dneg, t->scratch, NULL);
        if (!isfinite(l))
            return sl_errf(err, errlen, -EDOM,
                           "epoch %u, batch %" PRIu64 ": the loss is not finite (lower train.lr, or check the data)",
                           sl->epoch + 1, batch);
        /* nodes: heads, tails and negatives are contiguous in ids and grads */
        if (t->enc) {
            int rc = encoder_update(t, rw, dh, err, errlen);
            if (rc)
                return rc;
        } else {
            update_nodes(rw, d, hid, dh, 2 * nb + (uint32_t)K, t->uid, t->gsum, t->order, o->lr, o->eps);
        }
        update(m->rel, m->rel_g2, d, rid, dr, nb, t->uid, t->gsum, t->order, o->lr, o->eps);
        t->slice_loss += l;
        t->slice_batches++;
        if (t->on_batch)
            t->on_batch(t->on_batch_arg, sl->first_batch + t->slice_batches, sl->total_batches,
                        t->slice_loss / (double)t->slice_batches);
    }
    return 0;
}

int link_train_epoch(struct link_trainer *t, uint32_t epoch, double *loss, char *err, size_t errlen)
{
    struct link_model *m = t->m;
    link_shuffle(t->perm, t->n, t->o.seed, epoch, 0);
    float *part[1] = {m->node};
    struct link_rows rows = {.part = part, .part_nodes = m->nodes ? m->nodes : 1, .g2_off = (size_t)m->nodes * m->d};
    struct link_negs negs = {.count = m->nodes, .nodes = m->nodes};
    struct link_slice sl = {.rows = &rows, .negs = &negs, .triples = t->triples, .n = t->n, .perm = t->perm,
                            .epoch = epoch, .first_batch = 0, .total_batches = (t->n + t->o.batch - 1) / t->o.batch};
    t->slice_loss = 0;
    t->slice_batches = 0;
    int rc = link_train_slice(t, &sl, err, errlen);
    if (rc)
        return rc;
    *loss = t->slice_batches ? t->slice_loss / (double)t->slice_batches : 0;
    return 0;
}

/* ---- known triples ------------------------------------------------------------------------- */

static int cmp3(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

int link_known_init(struct link_known *k, const uint64_t *const *triples, const uint64_t *ns, int arrays, char *err,
                    size_t errlen)
{
    memset(k, 0, sizeof *k);
    for (int a = 0; a < arrays; a++)
        k->n += ns[a];
    k->t = malloc((k->n * 3 + 1) * sizeof *k->t);
    k->rev = malloc((k->n * 3 + 1) * sizeof *k->rev);
    if (!k->t || !k->rev) {
        link_known_free(k);
        return sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu64 " known triples", k->n);
    }
    uint64_t at = 0;
    for (int a = 0; a < arrays; a++)
        for (uint64_t i = 0; i < ns[a]; i++, at++) {
            const uint64_t *x = triples[a] + i * 3;
            memcpy(k->t + at * 3, x, 24);
            k->rev[at * 3] = x[2];
            k->rev[at * 3 + 1] = x[1];
            k->rev[at * 3 + 2] = x[0];
        }
    qsort(k->t, k->n, 24, cmp3);
    qsort(k->rev, k->n, 24, cmp3);
    return 0;
}

void link_known_free(struct link_known *k)
{
    free(k->t);
    free(k->rev);
    memset(k, 0, sizeof *k);
}

/* The range [*lo, *hi) of rows of a (n, 3) sorted array starting (a, b). */
static void range(const uint64_t *s, uint64_t n, uint64_t a, uint64_t b, uint64_t *lo, uint64_t *hi)
{
    uint64_t l = 0, h = n;
    while (l < h) {
        uint64_t mid = l + (h - l) / 2;
        const uint64_t *x = s + mid * 3;
        if (x[0] < a || (x[0] == a && x[1] < b))
            l = mid + 1;
        else
            h = mid;
    }
    *lo = l;
    h = n;
    while (l < h) {
        uint64_t mid = l + (h - l) / 2;
        const uint64_t *x = s + mid * 3;
        if (x[0] < a || (x[0] == a && x[1] <= b))
            l = mid + 1;
        else
            h = mid;
    }
    *hi = l;
}

static bool known(const uint64_t *s, uint64_t lo, uint64_t hi, uint64_t x)
{
    uint64_t end = hi;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (s[mid * 3 + 2] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < end && s[lo * 3 + 2] == x;
}

/* ---- evaluation ---------------------------------------------------------------------------- */

static void add_rank(struct link_metrics *o, double rank)
{
    o->ranks++;
    o->mrr += 1.0 / rank;
    o->mean_rank += rank;
    o->hits1 += rank <= 1;
    o->hits3 += rank <= 3;
    o->hits10 += rank <= 10;
}

int link_evaluate(const struct link_model *m, const struct link_opts *o, const uint64_t *triples, uint64_t n,
                  const struct link_eval_opts *e, struct link_metrics *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const uint32_t d = m->d;
    const uint64_t cc = SL_MIN((uint64_t)EVAL_CAND, m->nodes);
    float *ent = malloc((size_t)EVAL_BLOCK * d * sizeof *ent), *rel = malloc((size_t)EVAL_BLOCK * d * sizeof *rel);
    float *qq = malloc((size_t)EVAL_BLOCK * d * sizeof *qq);
    /* a table elsewhere (m->node NULL): rows come through e->rows into
     * one, and the full ranking's candidates into cand */
    const bool far = m->node == NULL;
    float *one = far ? malloc((size_t)d * sizeof *one) : NULL;
    float *cand = far && !e->sampled ? malloc((size_t)cc * d * sizeof *cand) : NULL;
    float *scores = e->sampled ? NULL : malloc((size_t)EVAL_BLOCK * cc * sizeof *scores);
    double *st = malloc(EVAL_BLOCK * sizeof *st);
    uint64_t *higher = malloc(EVAL_BLOCK * sizeof *higher), *same = malloc(EVAL_BLOCK * sizeof *same);
    if (far && !e->rows) {
        free(ent), free(rel), free(qq), free(scores), free(st), free(higher), free(same), free(one), free(cand);
        return sl_errf(err, errlen, -EINVAL, "link_evaluate: the node table is elsewhere and no row source was given");
    }
    if (!ent || !rel || !qq || (!e->sampled && !scores) || !st || !higher || !same || (far && !one) ||
        (far && !e->sampled && !cand)) {
        free(ent), free(rel), free(qq), free(scores), free(st), free(higher), free(same), free(one), free(cand);
        return sl_errf(err, errlen, -ENOMEM, "out of memory for the evaluation");
    }
    int rc = 0;
    for (int side = 0; side < (e->heads_too ? 2 : 1) && rc == 0; side++) { /* 0: rank tails, 1: rank heads */
        for (uint64_t first = 0; first < n; first += EVAL_BLOCK) {
            if (e->stop && *e->stop) {
                rc = sl_errf(err, errlen, -EINTR, "the evaluation was stopped");
                break;
            }
            const uint32_t nb = (uint32_t)SL_MIN((uint64_t)EVAL_BLOCK, n - first);
            for (uint32_t i = 0; i < nb; i++) { /* the queries: q(h, r) for tails, p(r, t) for heads */
                const uint64_t *x = triples + (first + i) * 3;
                if (far)
                    rc = e->rows(e->rows_arg, x[side ? 2 : 0], 1, ent + (size_t)i * d, err, errlen);
                else
                    memcpy(ent + (size_t)i * d, m->node + x[side ? 2 : 0] * d, d * sizeof(float));
                memcpy(rel + (size_t)i * d, m->rel + x[1] * d, d * sizeof(float));
            }
            if (rc)
                break;
            if (side == 0)
                kge_query_tail(o->model, qq, ent, rel, nb, d);
            else
                kge_query_head(o->model, qq, rel, ent, nb, d);
            for (uint32_t i = 0; i < nb; i++) {
                const uint64_t *x = triples + (first + i) * 3, truth = x[side ? 0 : 2];
                const float *qi = qq + (size_t)i * d, *ti = far ? one : m->node + truth * d;
                if (far && (rc = e->rows(e->rows_arg, truth, 1, one, err, errlen)))
                    break;
                float sf = 0;
                for (uint32_t j = 0; j < d; j++)
                    sf += qi[j] * ti[j];
                st[i] = isfinite(sf) ? sf : -INFINITY;
                higher[i] = same[i] = 0;
            }
            if (rc)
                break;
            if (e->sampled) {
                for (uint32_t i = 0; i < nb; i++) {
                    const uint64_t *x = triples + (first + i) * 3, truth = x[side ? 0 : 2];
                    uint64_t lo = 0, hi = 0;
                    const uint64_t *ks = e->filter ? (side ? e->filter->rev : e->filter->t) : NULL;
                    if (ks)
                        range(ks, e->filter->n, x[side ? 2 : 0], x[1], &lo, &hi);
                    uint64_t rs = stream(e->seed, first + i, (uint64_t)side + 7);
                    for (uint32_t c = 0; c < e->sampled; c++) {
                        uint64_t v = below(sl_splitmix64(&rs), m->nodes);
                        if (v == truth || (ks && known(ks, lo, hi, v)))
                            continue;
                        if (far && (rc = e->rows(e->rows_arg, v, 1, one, err, errlen)))
                            break;
                        const float *cv = far ? one : m->node + v * d, *qi = qq + (size_t)i * d;
                        float sc = 0;
                        for (uint32_t j = 0; j < d; j++)
                            sc += qi[j] * cv[j];
                        higher[i] += sc > st[i];
                        same[i] += sc == st[i];
                    }
                    if (rc)
                        break;
                }
            } else {
                for (uint64_t c0 = 0; c0 < m->nodes; c0 += cc) {
                    const uint64_t nc = SL_MIN(cc, m->nodes - c0);
                    if (far && (rc = e->rows(e->rows_arg, c0, nc, cand, err, errlen)))
                        break;
                    kge_score_all(scores, qq, nb, far ? cand : m->node + c0 * d, nc, d);
                    for (uint32_t i = 0; i < nb; i++) {
                        const uint64_t *x = triples + (first + i) * 3, truth = x[side ? 0 : 2];
                        const float *s = scores + (size_t)i * nc;
                        for (uint64_t v = 0; v < nc; v++) {
                            if (c0 + v == truth)
                                continue;
                            higher[i] += s[v] > st[i];
                            same[i] += s[v] == st[i];
                        }
                        if (!e->filter)
                            continue;
                        /* the other known answers in this chunk do not count */
                        const uint64_t *ks = side ? e->filter->rev : e->filter->t;
                        uint64_t lo, hi;
                        range(ks, e->filter->n, x[side ? 2 : 0], x[1], &lo, &hi);
                        uint64_t prev = UINT64_MAX;
                        for (uint64_t k = lo; k < hi; k++) {
                            uint64_t v = ks[k * 3 + 2];
                            if (v == truth || v == prev || v < c0 || v >= c0 + nc)
                                continue;
                            prev = v;
                            higher[i] -= s[v - c0] > st[i];
                            same[i] -= s[v - c0] == st[i];
                        }
                    }
                }
            }
            if (rc)
                break;
            for (uint32_t i = 0; i < nb; i++)
                add_rank(out, st[i] == -INFINITY ? (double)m->nodes : 1.0 + (double)higher[i] + 0.5 * (double)same[i]);
        }
    }
    if (out->ranks) {
        double r = (double)out->ranks;
        out->mrr /= r;
        out->mean_rank /= r;
        out->hits1 /= r;
        out->hits3 /= r;
        out->hits10 /= r;
    }
    free(ent), free(rel), free(qq), free(scores), free(st), free(higher), free(same), free(one), free(cand);
    return rc;
}
