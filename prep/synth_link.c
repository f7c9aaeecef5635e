/* synth_link.c - `gnnprep synth OUT --task link`: a synthetic knowledge
 * graph with planted relational structure, written as a link-prediction
 * dataset (core/linkdata.h), so that a correct model must reach a known
 * MRR far above chance.
 *
 * The model, for N nodes, R relations, clusters of M nodes and a seed:
 *   clusters   a random permutation P of the nodes; node v is in cluster
 *              P(v) / M (K = ceil(N / M) clusters, the last one smaller
 *              when M does not divide N).
 *   relations  relation r maps cluster c to s_r(c) = (a_r - c) mod K with
 *              a_r drawn per relation: an involution (s_r(s_r(c)) = c),
 *              so every relation is symmetric at the level of clusters and
 *              DistMult (whose score is symmetric in head and tail) can
 *              represent it as well as ComplEx.
 *   edges      every node h is the head of floor(D) or ceil(D) triples
 *              (mean D = --avg-degree), each with a uniform relation r and a
 *              tail drawn uniformly from cluster s_r(cluster(h)) - or, with
 *              probability X (--noise), uniformly from all nodes. A tail
 *              equal to h is drawn again (up to 8 times); a head's repeated
 *              (relation, tail) pairs are dropped, so a triple appears once.
 *   splits     each triple goes to test with probability U (--test-frac),
 *              else to valid with probability V (--valid-frac), else to
 *              train, from a hash of (seed, head, relation, tail).
 *
 * The planted MRR (recorded as planted_mrr in dataset.toml and printed):
 * the mean over the test triples (h, r, t) of the expected reciprocal rank
 * of t among all nodes, filtered (the other known tails of (h, r, .) in any
 * split are left out of the ranking), for a model whose score of (h, r, x)
 * depends only on whether x lies in cluster s_r(cluster(h)) - the best a
 * model can do, ties broken at random. With M' candidates in the cluster
 * after filtering and N' in all, a test tail inside the cluster has
 * expected reciprocal rank H(M') / M' (H the harmonic number), one outside
 * it (a noise edge) (H(N') - H(M')) / (N' - M'). Chance is about H(N) / N.
 *
 * Determinism: every random number is a hash of (seed, purpose, indices),
 * so the files depend on the arguments only. Memory: the permutation and
 * its inverse (2 ids per node) and one head's triples. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"
#include "core/linkdata.h"
#include "core/opt.h"
#include "core/util.h"
#include "prep.h"

#define SL_MAX_NODES (1ull << 36)
#define SL_MAX_RELATIONS (1ull << 24)
#define SL_MAX_DEGREE 4096.0
#define SL_SELF_REDRAWS 8

enum { P_PERM = 1, P_REL, P_DEG, P_EDGE, P_NOISE, P_SPLIT };

static inline uint64_t key(uint64_t seed, uint64_t purpose)
{
    return sl_mix64(seed ^ sl_mix64(purpose * SL_GOLDEN_GAMMA + 0x2545f4914f6cdd1dull));
}
static inline uint64_t h2(uint64_t k, uint64_t a)
{
    return sl_mix64(k ^ sl_mix64(a + SL_GOLDEN_GAMMA));
}
static inline uint64_t h3(uint64_t k, uint64_t a, uint64_t b)
{
    return sl_mix64(h2(k, a) ^ sl_mix64(b * 0x9e3779b97f4a7c15ull + 0x7f4a7c15ull));
}
static inline double unit(uint64_t x)
{
    return (double)(x >> 11) * 0x1.0p-53;
}
static inline uint64_t below(uint64_t x, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

struct link_opts {
    char out[4096];
    uint64_t nodes, relations, cluster, seed;
    double degree, noise, valid, test;
    char task[16];
    bool help;
};

struct gen {
    const struct link_opts *o;
    uint64_t n, k;          /* nodes, clusters */
    uint64_t *perm, *inv;   /* cluster order: node -> position, position -> node */
    uint64_t *a;            /* a_r per relation */
    uint64_t kperm, kdeg, kedge, knoise, ksplit;
};

struct triple {
    uint64_t r, t;
};

static int cmp_triple(const void *x, const void *y)
{
    const struct triple *a = x, *b = y;
    if (a->r != b->r)
        return a->r < b->r ? -1 : 1;
    return (a->t > b->t) - (a->t < b->t);
}

static volatile sig_atomic_t g_stop;
static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gnnprep synth OUT --task link --nodes N --relations R --avg-degree D [options]\n\n"
            "A synthetic knowledge graph with planted structure, as a link-prediction dataset\n"
            "(docs/format.md, \"Link-prediction datasets\"): nodes fall into clusters of M; relation\n"
            "r sends cluster c to cluster (a_r - c) mod K; each node heads about D triples whose tails\n"
            "are drawn from the cluster its relation points to. A model that learns the clusters\n"
            "reaches the planted MRR printed at the end (tail prediction, filtered ranking).\n\n"
            "  --nodes N          nodes (suffixes k, M, G: 20M = 20,000,000)\n"
            "  --relations R      relation types (at most %llu)\n"
            "  --avg-degree D     triples headed by each node, on average (at most %.0f)\n"
            "  --cluster-size M   nodes per cluster (default 10; 1 <= M <= N)\n"
            "  --noise X          share of triples whose tail is any node (default 0)\n"
            "  --valid-frac V     share of triples in the validation split (default 0.05)\n"
            "  --test-frac U      share in the test split (default 0.05)\n"
            "  --seed S           (default 0)\n\n"
            "Memory: two ids per node. The output is staged beside OUT and renamed when complete.\n",
            (unsigned long long)SL_MAX_RELATIONS, SL_MAX_DEGREE);
}

static int parse_frac(const char *v, void *dst, char *err, size_t errlen)
{
    double x;
    if (sl_parse_double(v, &x) < 0 || !(x >= 0 && x <= 1))
        return sl_errf(err, errlen, -EINVAL, "'%s' is not a fraction in [0, 1] (--noise, --valid-frac, --test-frac)", v);
    *(double *)dst = x;
    return 0;
}

/* A count with decimal suffixes (20M = 20,000,000), as gnnprep synth's
 * --nodes: the value must be in [1, *(uint64_t *)dst] on entry. */
static int parse_count(const char *v, void *dst, char *err, size_t errlen)
{
    uint64_t x, max = *(uint64_t *)dst;
    if (sl_parse_u64(v, false, &x) < 0 || x < 1 || x > max)
        return sl_errf(err, errlen, -EINVAL, "'%s' is not a count in 1..%" PRIu64 " (digits with an optional k/M/G "
                       "suffix, e.g. 20M)", v, max);
    *(uint64_t *)dst = x;
    return 0;
}

static int parse_degree(const char *v, void *dst, char *err, size_t errlen)
{
    double x;
    if (sl_parse_double(v, &x) < 0 || !(x > 0 && x <= SL_MAX_DEGREE))
        return sl_errf(err, errlen, -EINVAL, "--avg-degree '%s' is not a mean degree in (0, %.0f]", v, SL_MAX_DEGREE);
    *(double *)dst = x;
    return 0;
}

/* The relation's partner cluster. */
static inline uint64_t partner(const struct gen *g, uint64_t r, uint64_t c)
{
    return (g->a[r] + g->k - c) % g->k;
}

static inline uint64_t cluster_of(const struct gen *g, uint64_t v)
{
    return g->perm[v] / g->o->cluster;
}

static inline uint64_t cluster_size(const struct gen *g, uint64_t c)
{
    uint64_t lo = c * g->o->cluster;
    return SL_MIN(g->o->cluster, g->n - lo);
}

static double harmonic(uint64_t n)
{
    if (n < 64) {
        double s = 0;
        for (uint64_t i = 1; i <= n; i++)
            s += 1.0 / (double)i;
        return s;
    }
    double x = (double)n; /* asymptotic expansion, error below 1e-12 here */
    return log(x) + 0.57721566490153286 + 1.0 / (2 * x) - 1.0 / (12 * x * x);
}

static int gen_init(struct gen *g, const struct link_opts *o, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    g->o = o;
    g->n = o->nodes;
    g->k = (o->nodes + o->cluster - 1) / o->cluster;
    g->kperm = key(o->seed, P_PERM);
    g->kdeg = key(o->seed, P_DEG);
    g->kedge = key(o->seed, P_EDGE);
    g->knoise = key(o->seed, P_NOISE);
    g->ksplit = key(o->seed, P_SPLIT);
    g->perm = malloc(g->n * sizeof *g->perm);
    g->inv = malloc(g->n * sizeof *g->inv);
    g->a = malloc(o->relations * sizeof *g->a);
    if (!g->perm || !g->inv || !g->a)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu64 " nodes (16 bytes each)", g->n);
    for (uint64_t i = 0; i < g->n; i++)
        g->inv[i] = i;
    for (uint64_t i = g->n; i > 1; i--) { /* Fisher-Yates, position -> node */
        uint64_t j = below(h2(g->kperm, i), i);
        uint64_t t = g->inv[i - 1];
        g->inv[i - 1] = g->inv[j];
        g->inv[j] = t;
    }
    for (uint64_t p = 0; p < g->n; p++)
        g->perm[g->inv[p]] = p;
    uint64_t krel = key(o->seed, P_REL);
    for (uint64_t r = 0; r < o->relations; r++)
        g->a[r] = below(h2(krel, r), g->k);
    return 0;
}

static void gen_free(struct gen *g)
{
    free(g->perm);
    free(g->inv);
    free(g->a);
}

/* The triples headed by h, sorted by (relation, tail), without repeats,
 * into *out (room for ceil(D)); their count. */
static size_t head_triples(const struct gen *g, uint64_t h, struct triple *out)
{
    const struct link_opts *o = g->o;
    uint64_t d = (uint64_t)floor(o->degree);
    if (unit(h2(g->kdeg, h)) < o->degree - (double)d)
        d++;
    uint64_t ch = cluster_of(g, h);
    for (uint64_t i = 0; i < d; i++) {
        uint64_t x = h3(g->kedge, h, i);
        uint64_t r = below(x, o->relations);
        bool noise = o->noise > 0 && unit(h3(g->knoise, h, i)) < o->noise;
        uint64_t c = partner(g, r, ch), lo = c * o->cluster, m = cluster_size(g, c), t = h;
        for (int tries = 0; tries <= SL_SELF_REDRAWS && t == h; tries++) {
            uint64_t y = h3(g->kedge ^ (uint64_t)(tries + 1) * 0x9e3779b97f4a7c15ull, h, i);
            t = noise ? below(y, g->n) : g->inv[lo + below(y, m)];
        }
        out[i] = (struct triple){r, t};
    }
    qsort(out, d, sizeof *out, cmp_triple);
    size_t n = 0;
    for (size_t i = 0; i < d; i++)
        if (!n || out[i].r != out[n - 1].r || out[i].t != out[n - 1].t)
            out[n++] = out[i];
    return n;
}

/* Expected reciprocal rank of test triple i of h's list (see the file
 * comment). */
static double planted_rr(const struct gen *g, uint64_t h, const struct triple *tr, size_t n, size_t i)
{
    uint64_t c = partner(g, tr[i].r, cluster_of(g, h));
    uint64_t m = cluster_size(g, c), others_in = 0, others_out = 0;
    for (size_t j = 0; j < n; j++)
        if (j != i && tr[j].r == tr[i].r) {
            if (cluster_of(g, tr[j].t) == c)
                others_in++;
            else
                others_out++;
        }
    uint64_t mp = m - others_in, np = g->n - others_in - others_out;
    if (cluster_of(g, tr[i].t) == c)
        return harmonic(mp) / (double)mp;
    return np > mp ? (harmonic(np) - harmonic(mp)) / (double)(np - mp) : 0.0;
}

int prep_synth_link_main(int argc, char **argv)
{
    /* the count options hold their largest value until parsed */
    struct link_opts o = {.nodes = SL_MAX_NODES, .relations = SL_MAX_RELATIONS, .cluster = SL_MAX_NODES, .valid = 0.05,
                          .test = 0.05};
    bool seen[10] = {false};
    const struct opt opts[] = {
        {.name = "--task", .kind = OPT_STR, .dst = o.task, .len = sizeof o.task},
        {.name = "--nodes", .kind = OPT_FN, .dst = &o.nodes, .fn = parse_count,
         .what = "is not a node count in 2..2^36 (digits with an optional k/M/G suffix: 20M = 20,000,000)"},
        {.name = "--relations", .kind = OPT_FN, .dst = &o.relations, .fn = parse_count,
         .what = "is not a relation count in 1..2^24 (digits with an optional k/M suffix)"},
        {.name = "--avg-degree", .kind = OPT_FN, .dst = &o.degree, .fn = parse_degree},
        {.name = "--cluster-size", .kind = OPT_FN, .dst = &o.cluster, .fn = parse_count,
         .what = "is not a cluster size of at least 1"},
        {.name = "--noise", .kind = OPT_FN, .dst = &o.noise, .fn = parse_frac},
        {.name = "--valid-frac", .kind = OPT_FN, .dst = &o.valid, .fn = parse_frac},
        {.name = "--test-frac", .kind = OPT_FN, .dst = &o.test, .fn = parse_frac},
        {.name = "--seed", .kind = OPT_UINT, .dst = &o.seed, .lo = 0, .hi = INT64_MAX},
        {.name = "--help", .kind = OPT_FLAG, .dst = &o.help},
    };
    int nopts = (int)SL_ARRAY_LEN(opts);
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') { /* OUT first, as every gnnprep command takes it */
        snprintf(o.out, sizeof o.out, "%s", argv[1]);
        first = 2;
    }
    char err[4096];
    if (opt_parse("gnnprep synth", opts, nopts, argc, argv, first, seen, "; see gnnprep synth --task link --help", err,
                  sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return PREP_EXIT_BAD_INPUT;
    }
    if (o.help) {
        usage(stdout);
        return PREP_EXIT_OK;
    }
    if (!seen[opt_index(opts, nopts, "--cluster-size")])
        o.cluster = 10;
    const char *need[] = {"--nodes", "--relations", "--avg-degree"};
    for (size_t i = 0; i < SL_ARRAY_LEN(need); i++)
        if (!seen[opt_index(opts, nopts, need[i])]) {
            fprintf(stderr, "gnnprep synth: --task link needs %s; see gnnprep synth --task link --help\n", need[i]);
            return PREP_EXIT_BAD_INPUT;
        }
    if (!o.out[0]) {
        fprintf(stderr, "gnnprep synth: give the directory to create first: gnnprep synth OUT --task link ...\n");
        return PREP_EXIT_BAD_INPUT;
    }
    if (o.cluster > o.nodes) {
        fprintf(stderr, "gnnprep synth: --cluster-size %" PRIu64 " is larger than --nodes %" PRIu64 "\n", o.cluster,
                o.nodes);
        return PREP_EXIT_BAD_INPUT;
    }
    if (o.nodes < 2) {
        fprintf(stderr, "gnnprep synth: --task link needs at least 2 nodes\n");
        return PREP_EXIT_BAD_INPUT;
    }
    if (o.valid + o.test >= 1) {
        fprintf(stderr, "gnnprep synth: --valid-frac %g and --test-frac %g leave no training triple; keep their sum below 1\n",
                o.valid, o.test);
        return PREP_EXIT_BAD_INPUT;
    }

    double t0 = sl_now();
    struct dataset_dir d;
    int rc = dataset_dir_begin(&d, o.out, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "gnnprep synth: %s\n", err);
        return prep_exit_code(rc);
    }
    signal(SIGXFSZ, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    struct gen g;
    memset(&g, 0, sizeof g);
    struct link_meta m;
    memset(&m, 0, sizeof m);
    struct file_writer w[LINK_SPLITS];
    memset(w, 0, sizeof w);
    for (int s = 0; s < LINK_SPLITS; s++)
        w[s].fd = -1;
    struct triple *tr = malloc(((size_t)ceil(o.degree) + 1) * sizeof *tr);
    uint64_t count[LINK_SPLITS] = {0}, in_cluster = 0;
    double rr_sum = 0;
    enum dtype idt = link_id_dtype(o.nodes, o.relations);
    size_t esz = dtype_size(idt);
    if (!tr) {
        rc = sl_errf(err, sizeof err, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = gen_init(&g, &o, err, sizeof err)) < 0)
        goto out;
    static const char *const file[LINK_SPLITS] = {"train.bin", "valid.bin", "test.bin"};
    for (int s = 0; s < LINK_SPLITS; s++) {
        char path[4200];
        dataset_dir_path(&d, file[s], path, sizeof path);
        if ((rc = file_writer_open(&w[s], path, err, sizeof err)) < 0)
            goto out;
    }
    for (uint64_t h = 0; h < g.n && !g_stop; h++) {
        size_t n = head_triples(&g, h, tr);
        for (size_t i = 0; i < n; i++) {
            double u = unit(h3(g.ksplit, h, tr[i].r * g.n + tr[i].t));
            int s = u < o.test ? LINK_TEST : u < o.test + o.valid ? LINK_VALID : LINK_TRAIN;
            uint64_t id[3] = {h, tr[i].r, tr[i].t};
            unsigned char buf[24];
            for (int c = 0; c < 3; c++) {
                if (esz == 4) {
                    uint32_t x = (uint32_t)id[c];
                    memcpy(buf + c * 4, &x, 4);
                } else {
                    memcpy(buf + c * 8, &id[c], 8);
                }
            }
            if ((rc = file_writer_write(&w[s], buf, 3 * esz, err, sizeof err)) < 0)
                goto out;
            count[s]++;
            if (s == LINK_TEST) {
                rr_sum += planted_rr(&g, h, tr, n, i);
                in_cluster += cluster_of(&g, tr[i].t) == partner(&g, tr[i].r, cluster_of(&g, h));
            }
        }
    }
    if (g_stop) {
        rc = sl_errf(err, sizeof err, -EINTR, "interrupted; nothing was written to %s", o.out);
        goto out;
    }
    if (count[LINK_TRAIN] == 0) {
        rc = sl_errf(err, sizeof err, -EINVAL, "no training triple was drawn; raise --nodes or --avg-degree");
        goto out;
    }
    for (int s = 0; s < LINK_SPLITS; s++) {
        uint64_t bytes, h;
        if ((rc = file_writer_close(&w[s], &bytes, &h, err, sizeof err)) < 0)
            goto out;
        dataset_file_set(&m.split[s], file[s], idt, count[s], 3, bytes, h);
        m.split[s].row_stride = 3 * esz;
    }
    m.version = LINK_VERSION;
    m.nodes = o.nodes;
    m.relations = o.relations;
    m.planted_mrr = count[LINK_TEST] ? rr_sum / (double)count[LINK_TEST] : -1;
    size_t sn = (size_t)snprintf(m.source, sizeof m.source, "gnnprep");
    for (int i = 0; i < argc && sn < sizeof m.source; i++)
        sn += (size_t)snprintf(m.source + sn, sizeof m.source - sn, " %s", argv[i]);
    if ((rc = link_meta_write(d.tmp, &m, err, sizeof err)) < 0 || (rc = dataset_dir_rename(&d, err, sizeof err)) < 0)
        goto out;
    uint64_t total = count[0] + count[1] + count[2];
    printf("synth: wrote %s: %" PRIu64 " nodes, %" PRIu64 " relations, %" PRIu64 " triples (train %" PRIu64
           ", valid %" PRIu64 ", test %" PRIu64 ") in %.1f s\n",
           d.out, o.nodes, o.relations, total, count[0], count[1], count[2], sl_now() - t0);
    printf("nodes=%" PRIu64 " relations=%" PRIu64 " clusters=%" PRIu64 " train=%" PRIu64 " valid=%" PRIu64
           " test=%" PRIu64 " test_in_cluster=%.4f planted_mrr=%.6f chance_mrr=%.3g\n",
           o.nodes, o.relations, g.k, count[0], count[1], count[2],
           count[2] ? (double)in_cluster / (double)count[2] : 0.0, m.planted_mrr < 0 ? 0.0 : m.planted_mrr,
           harmonic(o.nodes) / (double)o.nodes);
    fflush(stdout);
out:
    for (int s = 0; s < LINK_SPLITS; s++)
        file_writer_free(&w[s]);
    free(tr);
    gen_free(&g);
    dataset_dir_abort(&d);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc < 0) {
        fprintf(stderr, "gnnprep synth: %s\n", err);
        return rc == -EINTR ? 130 : prep_exit_code(rc);
    }
    return PREP_EXIT_OK;
}
