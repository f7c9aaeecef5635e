/* test_linkooc.c - link prediction out of core (stages/linkooc.h,
 * stages/embbuf.h): BETA's states train every edge bucket exactly once an
 * epoch, each in a state that holds both its partitions; partitions the
 * buffer writes back come back bit for bit after a swap (and through
 * O_DIRECT and pread alike); the layout starts as the in-memory table bit
 * for bit; with c = p an epoch is the in-memory epoch bit for bit; with
 * c < p the table learns the planted structure as the in-memory mode does;
 * impossible p and c are refused; a killed run's staged layout is
 * removed by the next run, a live one's left alone. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_util.h"
#include "t_link.h"
#include "core/linkdata.h"
#include "core/util.h"
#include "ops/ops.h"
#include "stages/embbuf.h"
#include "stages/link.h"
#include "stages/linkenc.h"
#include "stages/linkooc.h"

static char g_dir[4096], g_kg[4200];
static struct link_meta g_m;
static uint64_t *g_split[LINK_SPLITS];

static struct link_opts opts(enum kge_model model)
{
    return (struct link_opts){.model = model, .loss = KGE_LOSS_SOFTMAX, .margin = 1.0f, .dim = 32, .lr = 0.1f,
                              .eps = 1e-10f, .batch = 500, .chunk = 50, .negs = 64, .degree_frac = 0.5,
                              .sides = LINK_SIDES_BOTH, .init = LINK_INIT_XAVIER, .seed = 7};
}

static void ooc_init_order(struct linkooc *x, struct link_model *m, const struct link_opts *o, uint32_t p, uint32_t c,
                           const char *name, bool comet)
{
    char dir[4400], err[1024];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, name);
    struct linkooc_params pp = {.parts = p, .slots = c, .io_bytes = 8192, .depth = 3, .comet = comet};
    struct linkooc_triples src = {linkooc_read_array, g_split[LINK_TRAIN]};
    if (linkooc_init(x, dir, &pp, o, g_m.nodes, g_m.relations, &src, g_m.split[LINK_TRAIN].rows, m, err, sizeof err))
        fail_msg("linkooc_init p=%u c=%u: %s", p, c, err);
}

static void ooc_init(struct linkooc *x, struct link_model *m, const struct link_opts *o, uint32_t p, uint32_t c,
                     const char *name)
{
    ooc_init_order(x, m, o, p, c, name, false);
}

static float *table(struct linkooc *x, bool g2)
{
    char err[1024];
    size_t bytes = (size_t)g_m.nodes * x->d * sizeof(float);
    float *t = malloc(bytes);
    assert_non_null(t);
    if (linkooc_table_bytes(g2 ? linkooc_g2_arg(x) : &x->view[0], 0, t, bytes, err, sizeof err))
        fail_msg("%s", err);
    return t;
}

/* Every bucket in exactly one state, a state holding both its partitions;
 * the sizes add up to the training split. */
static void test_beta_covers_buckets(void **state)
{
    (void)state;
    const uint32_t ps[] = {2, 5, 8, 13}, cs[] = {2, 3, 4, 7};
    struct link_opts o = opts(KGE_DISTMULT);
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++) {
            uint32_t p = ps[a], c = cs[b];
            if (c > p)
                continue;
            struct linkooc x;
            struct link_model m;
            ooc_init(&x, &m, &o, p, c, "cover");
            uint64_t *seen = calloc((size_t)p * p, sizeof *seen);
            for (uint32_t s = 0; s < x.plan.states; s++) {
                bool in[64] = {false};
                for (uint32_t j = 0; j < c; j++)
                    if (po_slot(&x.plan, s, j) != PO_EMPTY)
                        in[po_slot(&x.plan, s, j)] = true;
                for (uint32_t i = 0; i < p; i++)
                    for (uint32_t k = 0; k < p; k++)
                        if (x.bucket_state[i * p + k] == s) {
                            assert_true(in[i] && in[k]);
                            seen[i * p + k]++;
                        }
            }
            for (uint32_t i = 0; i < p * p; i++)
                assert_int_equal(seen[i], 1);
            assert_int_equal(x.bucket_off[p * p], g_m.split[LINK_TRAIN].rows);
            /* the buckets hold the right triples */
            uint64_t *rec = malloc(g_m.split[LINK_TRAIN].rows * 32);
            assert_int_equal(pread(x.bfd, rec, g_m.split[LINK_TRAIN].rows * 32, 0),
                             (ssize_t)(g_m.split[LINK_TRAIN].rows * 32));
            for (uint32_t bk = 0; bk < p * p; bk++)
                for (uint64_t r = x.bucket_off[bk]; r < x.bucket_off[bk + 1]; r++) {
                    const uint64_t *e = rec + r * 4, *t = g_split[LINK_TRAIN] + e[0] * 3;
                    assert_true(e[1] == t[0] && e[2] == t[1] && e[3] == t[2]);
                    assert_int_equal(e[1] / x.part_nodes, bk / p);
                    assert_int_equal(e[3] / x.part_nodes, bk % p);
                    if (r > x.bucket_off[bk])
                        assert_true(e[0] > e[-4]); /* split order within a bucket */
                }
            /* BETA's count, and within Marius's bound's reach */
            assert_int_equal(x.plan.swaps, linkooc_expected_swaps(p, c));
            assert_true(x.plan.swaps >= po_lower_bound_pairs(p, c));
            free(rec);
            free(seen);
            link_model_free(&m);
            linkooc_free(&x, true);
        }
}

/* COMET (the GNN encoder's order): every epoch every bucket trains in
 * exactly one state, one that holds both its partitions, drawn anew each
 * epoch from (seed, epoch) - the same draw twice, another the next epoch -
 * and the states' triples add up to the training split. */
static void test_comet_covers_buckets(void **state)
{
    (void)state;
    const uint32_t ps[] = {4, 8, 13}, cs[] = {2, 4, 6};
    struct link_opts o = opts(KGE_DISTMULT);
    char err[1024];
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 3; b++) {
            uint32_t p = ps[a], c = cs[b];
            if (c > p)
                continue;
            struct linkooc x;
            struct link_model m;
            ooc_init_order(&x, &m, &o, p, c, "comet", true);
            assert_int_equal(x.order, PO_ORDER_COMET);
            uint32_t *prev = malloc((size_t)p * p * sizeof *prev);
            bool moved = false, multi = false;
            for (uint32_t e = 0; e < 4; e++) {
                assert_int_equal(linkooc_assign(&x, e, err, sizeof err), 0);
                uint64_t *seen = calloc((size_t)p * p, sizeof *seen), total = 0;
                for (uint32_t s = 0; s < x.plan.states; s++) {
                    bool in[64] = {false};
                    for (uint32_t j = 0; j < c; j++)
                        if (po_slot(&x.plan, s, j) != PO_EMPTY)
                            in[po_slot(&x.plan, s, j)] = true;
                    for (uint32_t i = 0; i < p; i++)
                        for (uint32_t k = 0; k < p; k++) {
                            multi |= in[i] && in[k] && x.bucket_state[i * p + k] != s;
                            if (x.bucket_state[i * p + k] == s) {
                                assert_true(in[i] && in[k]);
                                seen[i * p + k]++;
                                total += x.bucket_off[i * p + k + 1] - x.bucket_off[i * p + k];
                            }
                        }
                }
                for (uint32_t i = 0; i < p * p; i++)
                    assert_int_equal(seen[i], 1);
                assert_int_equal(total, g_m.split[LINK_TRAIN].rows);
                if (e)
                    moved |= memcmp(prev, x.bucket_state, (size_t)p * p * sizeof *prev) != 0;
                memcpy(prev, x.bucket_state, (size_t)p * p * sizeof *prev);
                free(seen);
            }
            /* the same epoch draws the same states */
            assert_int_equal(linkooc_assign(&x, 3, err, sizeof err), 0);
            assert_memory_equal(prev, x.bucket_state, (size_t)p * p * sizeof *prev);
            if (multi) /* some bucket had a choice of states: the draws differ between epochs */
                assert_true(moved);
            free(prev);
            link_model_free(&m);
            linkooc_free(&x, true);
        }
}

/* The buffer alone: partitions changed in a state, written back when a
 * later state evicts them, read again and compared, over a whole BETA
 * epoch, O_DIRECT (or buffered where the filesystem refuses it) and with
 * io_uring or pread alike. */
static void run_writeback(bool buffered)
{
    const uint32_t p = 7, c = 3;
    const size_t pb = 3 * 4096 + 4096;
    char path[4400], err[1024];
    snprintf(path, sizeof path, "%s/wb.bin", g_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    unsigned char *want = malloc(p * pb);
    for (size_t i = 0; i < p * pb; i++)
        want[i] = (unsigned char)(i * 2654435761u >> 13);
    assert_int_equal(sl_pwrite_all(fd, want, p * pb, 0), 0);
    close(fd);
    struct po_plan pl;
    struct po_params pp = {.parts = p, .slots = c, .order = PO_ORDER_BETA, .cover = PO_COVER_PAIRS};
    assert_int_equal(po_plan_build(&pl, &pp, err, sizeof err), 0);
    struct embbuf b;
    struct embbuf_params bp = {.parts = p, .part_bytes = pb, .slots = c, .spare = 1, .depth = 3, .io_bytes = 8192,
                               .buffered = buffered};
    int rc = embbuf_init(&b, path, &bp, err, sizeof err);
    if (rc == -EINVAL && !buffered) { /* no O_DIRECT here (tmpfs): the buffered run covers the rest */
        print_message("O_DIRECT refused here: %s\n", err);
        po_plan_free(&pl);
        free(want);
        return;
    }
    assert_int_equal(rc, 0);
    uint32_t visits[16] = {0};
    for (int epoch = 0; epoch < 2; epoch++)
        for (uint32_t s = 0; s < pl.states; s++) {
            assert_int_equal(embbuf_switch(&b, &pl, s, err, sizeof err), 0);
            assert_int_equal(embbuf_prefetch(&b, &pl, s + 1 < pl.states ? s + 1 : 0, err, sizeof err), 0);
            for (uint32_t j = 0; j < c; j++) {
                uint32_t q = po_slot(&pl, s, j);
                unsigned char *f = embbuf_frame(&b, q);
                assert_non_null(f);
                /* what the file held when it came in: the last bytes written */
                assert_memory_equal(f, want + q * pb, pb);
                visits[q]++;
                for (size_t i = 0; i < pb; i += 97) { /* change it: must be written back */
                    f[i] = (unsigned char)(f[i] + 1 + q + visits[q]);
                    want[q * pb + i] = f[i];
                }
            }
        }
    assert_int_equal(embbuf_flush(&b, err, sizeof err), 0);
    struct embbuf_stats st;
    embbuf_stats(&b, &st);
    assert_true(st.writes > 0 && st.bytes_written == st.writes * pb && st.bytes_read == st.loads * pb);
    embbuf_free(&b);
    unsigned char *got = malloc(p * pb);
    fd = open(path, O_RDONLY);
    assert_int_equal(pread(fd, got, p * pb, 0), (ssize_t)(p * pb));
    close(fd);
    assert_memory_equal(got, want, p * pb);
    for (uint32_t q = 0; q < p; q++)
        assert_true(visits[q] >= 2);
    free(got);
    free(want);
    po_plan_free(&pl);
}

static void test_writeback_survives_swaps(void **state)
{
    (void)state;
    run_writeback(false);
    run_writeback(true);
    setenv("SLUICE_NO_IO_URING", "1", 1);
    run_writeback(true);
    unsetenv("SLUICE_NO_IO_URING");
}

/* The layout starts as link_model_init's table, bit for bit; c = p trains
 * as link_train_epoch bit for bit (tables, Adagrad sums, losses) and
 * evaluates the same through the row source. */
static void test_full_buffer_is_in_memory(void **state)
{
    (void)state;
    char err[1024];
    for (int model = 0; model < 2; model++) {
        struct link_opts o = opts((enum kge_model)model);
        struct link_model a, b;
        struct linkooc x;
        assert_int_equal(link_model_init(&a, g_m.nodes, g_m.relations, &o, err, sizeof err), 0);
        ooc_init(&x, &b, &o, 6, 6, "full");
        float *t0 = table(&x, false);
        assert_memory_equal(t0, a.node, g_m.nodes * o.dim * sizeof(float));
        assert_memory_equal(b.rel, a.rel, g_m.relations * o.dim * sizeof(float));
        free(t0);
        struct link_trainer ta, tb;
        assert_int_equal(link_trainer_init(&ta, &a, &o, g_split[LINK_TRAIN], g_m.split[LINK_TRAIN].rows, err,
                                           sizeof err), 0);
        assert_int_equal(link_trainer_init(&tb, &b, &o, NULL, 1, err, sizeof err), 0);
        for (uint32_t e = 0; e < 2; e++) {
            double la, lb;
            assert_int_equal(link_train_epoch(&ta, e, &la, err, sizeof err), 0);
            if (linkooc_epoch(&x, &tb, e, &lb, err, sizeof err))
                fail_msg("%s", err);
            assert_true(la == lb);
        }
        float *tn = table(&x, false), *tg = table(&x, true);
        assert_memory_equal(tn, a.node, g_m.nodes * o.dim * sizeof(float));
        assert_memory_equal(tg, a.node_g2, g_m.nodes * o.dim * sizeof(float));
        assert_memory_equal(b.rel, a.rel, g_m.relations * o.dim * sizeof(float));
        assert_memory_equal(b.rel_g2, a.rel_g2, g_m.relations * o.dim * sizeof(float));
        free(tn);
        free(tg);
        struct link_eval_opts ea = {.sampled = 50, .seed = 3}, eb = {.sampled = 50, .seed = 3, .rows = linkooc_rows,
                                                                     .rows_arg = &x};
        struct link_metrics ma, mb;
        assert_int_equal(link_evaluate(&a, &o, g_split[LINK_TEST], g_m.split[LINK_TEST].rows, &ea, &ma, err,
                                       sizeof err), 0);
        assert_int_equal(link_evaluate(&b, &o, g_split[LINK_TEST], g_m.split[LINK_TEST].rows, &eb, &mb, err,
                                       sizeof err), 0);
        assert_true(ma.mrr == mb.mrr && ma.hits10 == mb.hits10);
        ea.sampled = eb.sampled = 0; /* the full ranking streams the table */
        assert_int_equal(link_evaluate(&a, &o, g_split[LINK_TEST], 200, &ea, &ma, err, sizeof err), 0);
        assert_int_equal(link_evaluate(&b, &o, g_split[LINK_TEST], 200, &eb, &mb, err, sizeof err), 0);
        assert_true(ma.mrr == mb.mrr && ma.hits1 == mb.hits1);
        link_trainer_free(&ta);
        link_trainer_free(&tb);
        link_model_free(&a);
        link_model_free(&b);
        linkooc_free(&x, true);
    }
}

/* A run killed while it wrote its layout leaves DIR.partial-PID; the next
 * run's linkooc_init removes it when PID is gone, and leaves a live
 * process's alone. */
static void test_stale_stage_reaped(void **state)
{
    (void)state;
    char dead[4400], live[4400], f[4500];
    pid_t kid = fork(); /* a pid that is certainly gone once reaped */
    assert_true(kid >= 0);
    if (kid == 0)
        _exit(0);
    assert_int_equal(waitpid(kid, NULL, 0), kid);
    snprintf(dead, sizeof dead, "%s/stale.partial-%ld", g_dir, (long)kid);
    snprintf(live, sizeof live, "%s/stale.partial-%ld", g_dir, (long)getppid());
    for (int i = 0; i < 2; i++) {
        const char *d = i ? live : dead;
        assert_int_equal(mkdir(d, 0755), 0);
        snprintf(f, sizeof f, "%s/embeddings.bin", d);
        FILE *fp = fopen(f, "w");
        assert_non_null(fp);
        fputs("half-written", fp);
        fclose(fp);
    }
    struct link_opts o = opts(KGE_DISTMULT);
    struct link_model m;
    struct linkooc x;
    ooc_init(&x, &m, &o, 4, 2, "stale");
    if (access(dead, F_OK) == 0)
        fail_msg("%s (its writer gone) is still there", dead);
    if (access(live, F_OK) != 0)
        fail_msg("%s (its writer alive) was removed", live);
    snprintf(f, sizeof f, "%s/embeddings.bin", live);
    unlink(f);
    rmdir(live);
    linkooc_free(&x, true);
    link_model_free(&m);
}

/* c < p: BETA's states, negatives from the buffer, write-back; the table
 * learns the planted structure about as well as in memory; the swaps are
 * BETA's; a restored table continues as the original. */
static void test_partial_buffer_learns(void **state)
{
    (void)state;
    char err[1024];
    struct link_opts o = opts(KGE_DISTMULT);
    struct link_model a, b;
    struct linkooc x;
    assert_int_equal(link_model_init(&a, g_m.nodes, g_m.relations, &o, err, sizeof err), 0);
    ooc_init(&x, &b, &o, 8, 3, "partial");
    struct link_trainer ta, tb;
    assert_int_equal(link_trainer_init(&ta, &a, &o, g_split[LINK_TRAIN], g_m.split[LINK_TRAIN].rows, err, sizeof err),
                     0);
    assert_int_equal(link_trainer_init(&tb, &b, &o, NULL, 1, err, sizeof err), 0);
    uint64_t loads = 0;
    for (uint32_t e = 0; e < 20; e++) {
        double la, lb;
        assert_int_equal(link_train_epoch(&ta, e, &la, err, sizeof err), 0);
        if (linkooc_epoch(&x, &tb, e, &lb, err, sizeof err))
            fail_msg("%s", err);
        loads += x.st.swaps;
    }
    /* S_0, then BETA's swaps every epoch (odd epochs walk back: no carry) */
    print_message("p 8, c 3: %llu loads in 20 epochs; BETA %llu swaps an epoch, bound %llu\n",
                  (unsigned long long)loads, (unsigned long long)x.plan.swaps,
                  (unsigned long long)po_lower_bound_pairs(8, 3));
    assert_int_equal(loads, x.plan.first_loads + 20 * x.plan.swaps);
    struct link_known k;
    const uint64_t *arr[3] = {g_split[0], g_split[1], g_split[2]};
    uint64_t ns[3] = {g_m.split[0].rows, g_m.split[1].rows, g_m.split[2].rows};
    assert_int_equal(link_known_init(&k, arr, ns, 3, err, sizeof err), 0);
    struct link_eval_opts ea = {.filter = &k}, eb = {.filter = &k, .rows = linkooc_rows, .rows_arg = &x};
    struct link_metrics ma, mb;
    assert_int_equal(link_evaluate(&a, &o, g_split[LINK_TEST], g_m.split[LINK_TEST].rows, &ea, &ma, err, sizeof err),
                     0);
    assert_int_equal(link_evaluate(&b, &o, g_split[LINK_TEST], g_m.split[LINK_TEST].rows, &eb, &mb, err, sizeof err),
                     0);
    print_message("filtered test MRR: in memory %.4f, out of core (p 8, c 3) %.4f, planted %.4f\n", ma.mrr, mb.mrr,
                  g_m.planted_mrr);
    assert_true(mb.mrr > 0.8 * g_m.planted_mrr);
    assert_true(fabs(mb.mrr - ma.mrr) < 0.05);
    /* restore: a second layout given this one's table continues bit for bit */
    float *tn = table(&x, false), *tg = table(&x, true);
    struct linkooc y;
    struct link_model c2;
    ooc_init(&y, &c2, &o, 8, 3, "restored");
    assert_int_equal(linkooc_restore(&y, tn, tg, err, sizeof err), 0);
    memcpy(c2.rel, b.rel, g_m.relations * o.dim * sizeof(float));
    memcpy(c2.rel_g2, b.rel_g2, g_m.relations * o.dim * sizeof(float));
    struct link_trainer tc;
    assert_int_equal(link_trainer_init(&tc, &c2, &o, NULL, 1, err, sizeof err), 0);
    double l1, l2;
    assert_int_equal(linkooc_epoch(&x, &tb, 20, &l1, err, sizeof err), 0);
    assert_int_equal(linkooc_epoch(&y, &tc, 20, &l2, err, sizeof err), 0);
    assert_true(l1 == l2);
    free(tn);
    free(tg);
    tn = table(&x, false);
    float *tm = table(&y, false);
    assert_memory_equal(tn, tm, g_m.nodes * o.dim * sizeof(float));
    free(tn);
    free(tm);
    link_known_free(&k);
    link_trainer_free(&ta);
    link_trainer_free(&tb);
    link_trainer_free(&tc);
    link_model_free(&a);
    link_model_free(&b);
    link_model_free(&c2);
    linkooc_free(&x, true);
    linkooc_free(&y, true);
}

/* The GNN encoder out of core: with c = p (one state) COMET's epoch is
 * the in-memory one bit for bit, the encoder's weights included; with c <
 * p every node a batch samples lies in a partition of the buffer, and the
 * encoded table learns the planted structure as the in-memory encoder. */
struct in_buffer {
    struct linkooc *x;
    struct linkenc *e;
    uint64_t batches, outside;
};

static void check_in_buffer(void *arg, uint64_t done, uint64_t total, double loss)
{
    (void)done, (void)total, (void)loss;
    struct in_buffer *b = arg;
    b->batches++;
    for (uint32_t i = 0; i < linkenc_count(b->e); i++)
        b->outside += b->x->part[linkenc_nodes(b->e)[i] / b->x->part_nodes] == NULL;
}

static double encoded_mrr(struct link_model *m, struct linkenc *e, struct linkooc *x, const struct link_opts *o)
{
    char err[1024];
    const size_t nd = g_m.nodes * o->dim;
    float *in = x ? table(x, false) : m->node, *enc = malloc(nd * sizeof *enc);
    assert_int_equal(linkenc_encode_all(e, in, enc, err, sizeof err), 0);
    struct link_model em = *m;
    em.node = enc;
    struct link_known k;
    const uint64_t *arr[3] = {g_split[0], g_split[1], g_split[2]};
    uint64_t ns[3] = {g_m.split[0].rows, g_m.split[1].rows, g_m.split[2].rows};
    assert_int_equal(link_known_init(&k, arr, ns, 3, err, sizeof err), 0);
    struct link_eval_opts eo = {.filter = &k};
    struct link_metrics r;
    assert_int_equal(link_evaluate(&em, o, g_split[LINK_TEST], g_m.split[LINK_TEST].rows, &eo, &r, err, sizeof err),
                     0);
    link_known_free(&k);
    if (x)
        free(in);
    free(enc);
    return r.mrr;
}

static void test_encoder(void **state)
{
    (void)state;
    char err[1024];
    struct link_opts o = opts(KGE_DISTMULT);
    struct linkenc_opts eo = {.layers = 2, .fanouts = {8, 4}, .aggr = MODEL_AGGR_MEAN, .activation = MODEL_ACT_RELU,
                              .dim = o.dim, .lr = 0.01f, .seed = 7};
    const uint32_t cases[][3] = {{6, 6, 2}, {8, 4, 12}}; /* p, c, epochs */
    for (int cs = 0; cs < 2; cs++) {
        const uint32_t p = cases[cs][0], c = cases[cs][1], epochs = cases[cs][2];
        struct link_model a, b;
        struct linkooc x;
        struct linkenc ea, eb;
        assert_int_equal(link_model_init(&a, g_m.nodes, g_m.relations, &o, err, sizeof err), 0);
        ooc_init_order(&x, &b, &o, p, c, "enc", true);
        if (c == p)
            assert_int_equal(x.plan.states, 1);
        assert_int_equal(linkenc_init(&ea, g_m.nodes, g_split[LINK_TRAIN], g_m.split[LINK_TRAIN].rows,
                                      link_batch_rows(&o), &eo, err, sizeof err), 0);
        struct linkenc_triples src = {linkooc_read_array, g_split[LINK_TRAIN]};
        assert_int_equal(linkenc_init_read(&eb, g_m.nodes, &src, g_m.split[LINK_TRAIN].rows, link_batch_rows(&o), &eo,
                                           err, sizeof err), 0);
        struct link_trainer ta, tb;
        assert_int_equal(link_trainer_init(&ta, &a, &o, g_split[LINK_TRAIN], g_m.split[LINK_TRAIN].rows, err,
                                           sizeof err), 0);
        assert_int_equal(link_trainer_init(&tb, &b, &o, NULL, 1, err, sizeof err), 0);
        ta.enc = &ea;
        tb.enc = &eb;
        struct in_buffer ib = {.x = &x, .e = &eb};
        tb.on_batch = check_in_buffer;
        tb.on_batch_arg = &ib;
        for (uint32_t e = 0; e < epochs; e++) {
            double la, lb;
            assert_int_equal(link_train_epoch(&ta, e, &la, err, sizeof err), 0);
            if (linkooc_epoch(&x, &tb, e, &lb, err, sizeof err))
                fail_msg("%s", err);
            if (c == p)
                assert_true(la == lb);
        }
        assert_true(ib.batches > 0);
        assert_int_equal(ib.outside, 0);
        if (c == p) {
            float *tn = table(&x, false);
            assert_memory_equal(tn, a.node, g_m.nodes * o.dim * sizeof(float));
            assert_memory_equal(linkenc_params(&ea), linkenc_params(&eb), linkenc_nparams(&ea) * sizeof(float));
            free(tn);
        } else {
            double ma = encoded_mrr(&a, &ea, NULL, &o), mb = encoded_mrr(&b, &eb, &x, &o);
            print_message("encoder, filtered test MRR: in memory %.4f, out of core COMET (p %u, c %u) %.4f, "
                          "planted %.4f\n", ma, p, c, mb, g_m.planted_mrr);
            assert_true(mb > 0.8 * g_m.planted_mrr);
            assert_true(fabs(mb - ma) < 0.05);
        }
        link_trainer_free(&ta);
        link_trainer_free(&tb);
        linkenc_free(&ea);
        linkenc_free(&eb);
        link_model_free(&a);
        link_model_free(&b);
        linkooc_free(&x, true);
    }
}

static void test_refusals(void **state)
{
    (void)state;
    char err[1024], dir[4400];
    struct link_opts o = opts(KGE_DISTMULT);
    struct linkooc x;
    struct link_model m;
    snprintf(dir, sizeof dir, "%s/refused", g_dir);
    const uint32_t bad[][2] = {{8, 1}, {4, 5}, {(uint32_t)g_m.nodes + 1, 2}, {1, 1}};
    for (size_t i = 0; i < 4; i++) {
        struct linkooc_params pp = {.parts = bad[i][0], .slots = bad[i][1]};
        struct linkooc_triples src = {linkooc_read_array, g_split[LINK_TRAIN]};
        assert_int_equal(linkooc_init(&x, dir, &pp, &o, g_m.nodes, g_m.relations, &src,
                                      g_m.split[LINK_TRAIN].rows, &m, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "buffer partitions"));
        struct stat sb;
        assert_true(stat(dir, &sb) != 0); /* nothing made */
    }
}

static int setup(void **state)
{
    (void)state;
    if (t_link_kg_make("linkooc", g_dir, sizeof g_dir, g_kg, sizeof g_kg, &g_m, g_split))
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
        cmocka_unit_test(test_beta_covers_buckets),     cmocka_unit_test(test_writeback_survives_swaps),
        cmocka_unit_test(test_full_buffer_is_in_memory), cmocka_unit_test(test_partial_buffer_learns),
        cmocka_unit_test(test_refusals),                cmocka_unit_test(test_stale_stage_reaped),
        cmocka_unit_test(test_comet_covers_buckets),    cmocka_unit_test(test_encoder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
