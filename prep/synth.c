/* synth.c - `gnnprep synth`: a synthetic node-classification dataset that
 * behaves like a real graph, generated straight into the on-disk format
 * (docs/format.md) with bounded memory and every core. (~1250 lines: the
 * model below, its counter-based random numbers and the parallel writers
 * that must reproduce it bit for bit at any thread count stay together.)
 *
 * The model, for N nodes, C classes and a seed:
 *   label(v)      uniform in [0, C), from a hash of (seed, v).
 *   in-degree(v)  a shifted power law (Lomax, tail index SYN_TAIL = 2.5, so
 *                 P(deg >= x) ~ x^-2.5): most nodes have a handful of
 *                 in-neighbours, a few have thousands. Its scale is solved
 *                 numerically so that the expected mean is --avg-degree, and
 *                 it is capped at K = min(N-1, max(32768, 16 * D)).
 *   sources       each in-neighbour of v is drawn from v's class with
 *                 probability H (--homophily), else from one of the other
 *                 C-1 classes uniformly, so H is the expected edge homophily
 *                 ratio (fraction of edges joining nodes of one class).
 *                 Within a class, a node's popularity follows its rank in a
 *                 per-class random permutation: rank r is drawn with density
 *                 ~ (r+1)^-1/2, which makes out-degrees heavy-tailed too (tail
 *                 index 2). Self loops and duplicates are redrawn; after
 *                 SYN_MAX_REJECT redraws in a row (a hub that has exhausted
 *                 its class), the next free node in a uniform scan is taken.
 *   features      x_v = mu_{label(v)} + X * eps, where the class centroids
 *                 mu_c are random unit vectors and eps is standard normal per
 *                 dimension (X = --feature-noise). A node's own features
 *                 therefore identify its class only noisily, while the mean
 *                 of its in-neighbours' features averages the noise away and
 *                 keeps a fraction H of the class signal: neighbours carry
 *                 information a node's own features lack.
 *   splits        exact counts round(frac * N) of train/val/test, disjoint,
 *                 chosen by sequential sampling so each file is written in
 *                 ascending node order. Every node has a label.
 *
 * Determinism: every random number comes from a counter-based generator
 * keyed by (seed, purpose, node), so each node's edges and features are
 * computed independently of all others and the files are byte-identical for
 * a seed whatever the number of threads.
 *
 * Pipeline: the main thread is the only writer. `--threads` workers claim
 * blocks of consecutive nodes, generate their sorted in-neighbour lists and
 * feature rows (already in the file's dtype and padded stride) into one of
 * a ring of block slots; the writer takes the blocks in node order and
 * appends them to indptr.bin, indices.bin and features.bin. Memory is the
 * per-node arrays (class member lists, out-degree counters: ~8 bytes per
 * node for u32 ids) plus the slots (a few MiB each); the edge list is never
 * held. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "core/dataset.h"
#include "core/util.h"
#include "prep.h"

/* ---- model constants (see the file comment) ---- */
#define SYN_TAIL 2.5               /* tail index of the in-degree law */
#define SYN_DEG_CAP 32768u         /* in-degree cap, unless 16 * D is larger */
#define SYN_MAX_REJECT 64          /* redraws in a row before the uniform fallback */
#define SYN_MAX_DIM 65536u         /* largest --feat-dim accepted */
#define SYN_MAX_CLASSES 1000000u   /* largest --classes accepted */
#define SYN_MAX_THREADS 64u
#define SYN_BLOCK_BYTES (4u << 20) /* feature bytes per block of nodes */
#define SYN_GAUSS_BITS 16          /* normal deviates from a 2^16-entry quantile table */

/* ---- defaults (documented in --help) ---- */
#define SYN_DEF_HOMOPHILY 0.8
#define SYN_DEF_NOISE 0.6
#define SYN_DEF_TRAIN 0.10
#define SYN_DEF_VAL 0.05
#define SYN_DEF_TEST 0.05
#define SYN_DEF_SEED 0

/* Stream purposes: each gets its own key so that streams never coincide. */
enum { K_LABEL = 1, K_DEGREE, K_EDGES, K_FEAT, K_CENTROID, K_PERM, K_SPLIT };

/* ------------------------------------------------------------------ */
/* counter-based random numbers */

static inline uint64_t key_of(uint64_t seed, uint64_t purpose)
{
    return sl_mix64(seed ^ sl_mix64(purpose * SL_GOLDEN_GAMMA + 0x632be59bd9b4e019ull));
}

/* One value for (key, i). */
static inline uint64_t hash2(uint64_t key, uint64_t i)
{
    return sl_mix64(key ^ sl_mix64(i + SL_GOLDEN_GAMMA));
}

/* A stream for (key, node): successive outputs of a Weyl sequence started
 * at a hashed offset, each mixed (splitmix64's construction). */
typedef struct rng {
    uint64_t s;
} rng;

static inline rng rng_at(uint64_t key, uint64_t node)
{
    rng r = {hash2(key, node)};
    return r;
}

static inline uint64_t rng_next(rng *r)
{
    r->s += SL_GOLDEN_GAMMA;
    return sl_mix64(r->s);
}

/* Uniform integer in [0, n) (multiply-high; bias below 2^-32 for our n). */
static inline uint64_t below(uint64_t x, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)x * n) >> 64);
}

/* Uniform double in (0, 1]. */
static inline double unit_open0(uint64_t x)
{
    return (double)((x >> 11) + 1) * (1.0 / 9007199254740992.0);
}

/* Uniform double in [0, 1). */
static inline double unit(uint64_t x)
{
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

/* ------------------------------------------------------------------ */
/* options */

typedef struct synth_opts {
    const char *out;
    uint64_t nodes, feat_dim, classes, seed;
    double avg_degree, homophily, noise, frac[3];
    enum dtype dtype;
    unsigned threads;
} synth_opts;

static void usage(FILE *f)
{
    fprintf(f,
        "usage: gnnprep synth OUT --nodes N --avg-degree D --feat-dim F --classes C [options]\n"
        "\n"
        "Generates a synthetic node-classification dataset in directory OUT (which must\n"
        "not exist): a directed graph stored as in-neighbour lists (CSC) with power-law\n"
        "in- and out-degrees and class homophily, class-centroid-plus-noise features,\n"
        "a label for every node and random train/val/test splits.\n"
        "With --task link it makes a knowledge graph for link prediction instead\n"
        "(gnnprep synth --task link --help).\n"
        "\n"
        "required:\n"
        "  --nodes N          number of nodes (k/M/G suffixes: 20M = 20,000,000)\n"
        "  --avg-degree D     mean in-degree, 0 < D <= N-1 (decimals allowed). In-degrees\n"
        "                     follow a power law with tail index %.1f, capped at\n"
        "                     min(N-1, max(%u, 16*D))\n"
        "  --feat-dim F       feature dimension, 1..%u\n"
        "  --classes C        number of classes, 1..%u\n"
        "options:\n"
        "  --homophily H      expected fraction of edges whose ends share a class, in\n"
        "                     [0, 1] (default %.2f, like citation graphs)\n"
        "  --feature-noise X  standard deviation of the per-dimension Gaussian noise\n"
        "                     added to unit-length class centroids (default %.2f: a\n"
        "                     node's own features identify its class only noisily,\n"
        "                     so averaging neighbours' features helps, as in real graphs)\n"
        "  --train-frac T     fraction of nodes in train.bin (default %.2f)\n"
        "  --val-frac V       fraction in val.bin (default %.2f)\n"
        "  --test-frac U      fraction in test.bin (default %.2f); T+V+U <= 1, the\n"
        "                     splits are disjoint and nodes outside them keep labels\n"
        "  --seed S           random seed (default %d); the same command gives\n"
        "                     byte-identical files whatever the thread count\n"
        "  --dtype f32|f16    feature storage type (default f32)\n"
        "  --threads T        generator threads (default: online CPUs)\n"
        "  --help             this text\n"
        "\n"
        "Prints a summary (edges, degree percentiles, seconds, peak memory) at the end.\n"
        "Exit status: 0 done, 2 bad flags or OUT exists, 1 I/O failure (nothing is left\n"
        "at OUT), 130 interrupted.\n",
        SYN_TAIL, SYN_DEG_CAP, SYN_MAX_DIM, SYN_MAX_CLASSES, SYN_DEF_HOMOPHILY, SYN_DEF_NOISE,
        SYN_DEF_TRAIN, SYN_DEF_VAL, SYN_DEF_TEST, SYN_DEF_SEED);
}

#define BAD(...)                                                                                                       \
    do {                                                                                                               \
        fprintf(stderr, "gnnprep synth: " __VA_ARGS__);                                                                \
        fputc('\n', stderr);                                                                                           \
        return PREP_EXIT_BAD_INPUT;                                                                                    \
    } while (0)

enum { O_NODES, O_DEG, O_DIM, O_CLASSES, O_HOMO, O_NOISE, O_TRAIN, O_VAL, O_TEST, O_SEED, O_DTYPE, O_THREADS, O_COUNT };
static const char *const opt_name[O_COUNT] = {
    "--nodes", "--avg-degree", "--feat-dim", "--classes", "--homophily", "--feature-noise",
    "--train-frac", "--val-frac", "--test-frac", "--seed", "--dtype", "--threads",
};

static int parse_count(const char *flag, const char *v, uint64_t *out)
{
    int rc = sl_parse_u64(v, false, out);
    if (rc == -ERANGE)
        BAD("%s: '%s' is too large", flag, v);
    if (rc < 0)
        BAD("%s: '%s' is not a whole number; give digits with an optional k/M/G suffix (e.g. 20M)", flag, v);
    return 0;
}

static int parse_real(const char *flag, const char *v, double lo, double hi, double *out)
{
    if (sl_parse_double(v, out) < 0)
        BAD("%s: '%s' is not a number; give a decimal number between %g and %g", flag, v, lo, hi);
    if (*out < lo || *out > hi)
        BAD("%s: %s is outside [%g, %g]; give a value in that range", flag, v, lo, hi);
    return 0;
}

static int parse_opts(int argc, char **argv, synth_opts *o)
{
    memset(o, 0, sizeof *o);
    o->homophily = SYN_DEF_HOMOPHILY;
    o->noise = SYN_DEF_NOISE;
    o->frac[0] = SYN_DEF_TRAIN;
    o->frac[1] = SYN_DEF_VAL;
    o->frac[2] = SYN_DEF_TEST;
    o->seed = SYN_DEF_SEED;
    o->dtype = DTYPE_F32;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = ncpu < 1 ? 1 : ncpu > (long)SYN_MAX_THREADS ? SYN_MAX_THREADS : (unsigned)ncpu;
    bool seen[O_COUNT] = {false};

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return -1; /* caller prints usage, exits 0 */
        if (strncmp(a, "--", 2) != 0) {
            if (o->out)
                BAD("unexpected argument '%s': only one OUT directory is taken (see gnnprep synth --help)", a);
            if (!*a)
                BAD("OUT is empty; give the directory to create");
            o->out = a;
            continue;
        }
        if (!strcmp(a, "--"))
            BAD("'--' is not supported; give flags as --name VALUE");
        /* --name VALUE or --name=VALUE */
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        int k = -1;
        for (int j = 0; j < O_COUNT; j++)
            if (strlen(opt_name[j]) == nl && !strncmp(a, opt_name[j], nl))
                k = j;
        if (k < 0)
            BAD("unknown flag '%.*s'; see gnnprep synth --help", (int)nl, a);
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc)
                BAD("%s needs a value; see gnnprep synth --help", opt_name[k]);
            v = argv[++i];
        }
        if (seen[k])
            BAD("%s is given twice; give it once", opt_name[k]);
        seen[k] = true;
        uint64_t u;
        switch (k) {
        case O_NODES:
            if (parse_count(opt_name[k], v, &o->nodes))
                return PREP_EXIT_BAD_INPUT;
            if (o->nodes == 0)
                BAD("--nodes must be at least 1");
            if (o->nodes > (1ull << 40))
                BAD("--nodes %s is beyond the 2^40 this generator supports", v);
            break;
        case O_DEG: {
            /* a count with a suffix (2k), or a decimal number (2.5) */
            if (sl_parse_u64(v, false, &u) == 0)
                o->avg_degree = (double)u;
            else if (sl_parse_double(v, &o->avg_degree) < 0)
                BAD("--avg-degree: '%s' is not a number; give the mean in-degree, e.g. 20", v);
            if (!(o->avg_degree > 0))
                BAD("--avg-degree must be positive; give the mean in-degree, e.g. 20");
            break;
        }
        case O_DIM:
            if (parse_count(opt_name[k], v, &o->feat_dim))
                return PREP_EXIT_BAD_INPUT;
            if (o->feat_dim == 0 || o->feat_dim > SYN_MAX_DIM)
                BAD("--feat-dim %s is outside 1..%u; give the feature dimension", v, SYN_MAX_DIM);
            break;
        case O_CLASSES:
            if (parse_count(opt_name[k], v, &o->classes))
                return PREP_EXIT_BAD_INPUT;
            if (o->classes == 0 || o->classes > SYN_MAX_CLASSES)
                BAD("--classes %s is outside 1..%u; give the number of classes", v, SYN_MAX_CLASSES);
            break;
        case O_HOMO:
            if (parse_real(opt_name[k], v, 0, 1, &o->homophily))
                return PREP_EXIT_BAD_INPUT;
            break;
        case O_NOISE:
            if (parse_real(opt_name[k], v, 0, 1e6, &o->noise))
                return PREP_EXIT_BAD_INPUT;
            break;
        case O_TRAIN:
        case O_VAL:
        case O_TEST:
            if (parse_real(opt_name[k], v, 0, 1, &o->frac[k - O_TRAIN]))
                return PREP_EXIT_BAD_INPUT;
            break;
        case O_SEED:
            if (parse_count(opt_name[k], v, &o->seed))
                return PREP_EXIT_BAD_INPUT;
            break;
        case O_DTYPE:
            o->dtype = dtype_parse(v);
            if (o->dtype != DTYPE_F32 && o->dtype != DTYPE_F16)
                BAD("--dtype '%s' is not supported; give f32 or f16", v);
            break;
        case O_THREADS:
            if (parse_count(opt_name[k], v, &u))
                return PREP_EXIT_BAD_INPUT;
            if (u == 0 || u > SYN_MAX_THREADS)
                BAD("--threads %s is outside 1..%u", v, SYN_MAX_THREADS);
            o->threads = (unsigned)u;
            break;
        }
    }
    if (!o->out)
        BAD("missing OUT directory; usage: gnnprep synth OUT --nodes N --avg-degree D --feat-dim F --classes C");
    const int required[] = {O_NODES, O_DEG, O_DIM, O_CLASSES};
    for (size_t j = 0; j < SL_ARRAY_LEN(required); j++)
        if (!seen[required[j]])
            BAD("%s is required; see gnnprep synth --help", opt_name[required[j]]);
    if (o->avg_degree > (double)(o->nodes - 1))
        BAD("--avg-degree %g must be at most --nodes - 1 = %" PRIu64 " (no self loops or duplicate edges); "
            "lower it or add nodes", o->avg_degree, o->nodes - 1);
    if (o->frac[0] + o->frac[1] + o->frac[2] > 1.0 + 1e-9)
        BAD("--train-frac + --val-frac + --test-frac = %g exceeds 1; lower them (the splits are disjoint)",
            o->frac[0] + o->frac[1] + o->frac[2]);
    if (o->classes * o->feat_dim > (1ull << 28))
        BAD("--classes x --feat-dim = %" PRIu64 " centroid values is too many; lower one of them",
            o->classes * o->feat_dim);
    /* Per-node arrays must fit in memory: refuse up front rather than swap. */
    uint64_t per_node = dtype_size(dtype_for_ids(o->nodes)) + 4, need, phys;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    phys = (pages > 0 && psz > 0) ? (uint64_t)pages * (uint64_t)psz : UINT64_MAX;
    if (!sl_mul_ovf(o->nodes, per_node, &need) && need > phys / 2) {
        char a[32], b[32];
        BAD("--nodes %" PRIu64 " needs %s of per-node arrays, more than half of this machine's %s; use fewer nodes",
            o->nodes, sl_fmt_bytes(need, a, sizeof a), sl_fmt_bytes(phys, b, sizeof b));
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* the model's tables */

typedef struct synth {
    synth_opts o;
    uint64_t n, C, F;
    enum dtype id_dt;
    size_t id_size;
    uint64_t kmax;       /* in-degree cap */
    double xm;           /* Lomax scale solved for the mean in-degree */
    uint64_t same_thr;   /* choose own class when a draw is below this */
    bool always_same;
    uint64_t k_label, k_deg, k_edges, k_feat;
    uint64_t *cls_off;   /* (C+1) start of each class in members */
    double *cls_sq;      /* (C) sqrt(size + 1) - 1, for rank sampling */
    void *members;       /* (N) node ids by class, each class in popularity order; id_size each */
    uint32_t *outdeg;    /* (N) out-degree counters, or NULL when N >= 2^32 */
    float *centroid;     /* (C, F) unit rows */
    float gauss[1u << SYN_GAUSS_BITS]; /* standard normal quantiles, unit variance */
    uint64_t row_bytes, stride;
} synth;

static inline uint64_t label_of(const synth *s, uint64_t v)
{
    return below(hash2(s->k_label, v), s->C);
}

static inline uint64_t member(const synth *s, uint64_t i)
{
    return s->id_size == 4 ? ((const uint32_t *)s->members)[i] : ((const uint64_t *)s->members)[i];
}

/* Expected in-degree for scale xm: the sum over j of P(round(X) >= j) =
 * S(j - 1/2) with S(x) = (1 + x/xm)^-a, up to the cap; exact for the first
 * terms, the tail by the midpoint rule it equals (an integral). */
static double mean_degree(double xm, uint64_t kmax)
{
    const double a = SYN_TAIL;
    uint64_t exact = SL_MIN(kmax, 4096);
    double m = 0;
    for (uint64_t j = 1; j <= exact; j++)
        m += pow(1.0 + ((double)j - 0.5) / xm, -a);
    if (kmax > exact)
        m += xm / (a - 1) * (pow(1.0 + (double)exact / xm, 1 - a) - pow(1.0 + (double)kmax / xm, 1 - a));
    return m;
}

static double solve_scale(double d, uint64_t kmax)
{
    double lo = log(1e-6), hi = log(1e15);
    if (mean_degree(exp(hi), kmax) <= d)
        return exp(hi);
    for (int it = 0; it < 80; it++) {
        double mid = 0.5 * (lo + hi);
        if (mean_degree(exp(mid), kmax) < d)
            lo = mid;
        else
            hi = mid;
    }
    return exp(0.5 * (lo + hi));
}

static inline uint64_t degree_of(const synth *s, uint64_t v)
{
    double u = unit_open0(hash2(s->k_deg, v));
    double x = s->xm * (pow(u, -1.0 / SYN_TAIL) - 1.0) + 0.5;
    return x >= (double)s->kmax ? s->kmax : (uint64_t)x;
}

/* Standard normal quantiles at the midpoints (i + 1/2) / 2^16, by Newton's
 * method on Phi from the previous quantile (monotone convergence: Phi is
 * concave right of 0), mirrored, then scaled to unit variance. The table
 * truncates the tails at about 4.2 sigma; its spacing near 0 is 4e-5 sigma,
 * finer than f16 resolves. */
static void gauss_table(float *t)
{
    const uint32_t n = 1u << SYN_GAUSS_BITS, h = n / 2;
    double x = 0, var = 0;
    for (uint32_t i = 0; i < h; i++) {
        double p = ((double)(h + i) + 0.5) / n;
        for (int it = 0; it < 100; it++) {
            double f = 0.5 * erfc(-x / M_SQRT2) - p;
            double dx = f / (exp(-0.5 * x * x) / sqrt(2 * M_PI));
            x -= dx;
            if (fabs(dx) < 1e-14 * (1 + fabs(x)))
                break;
        }
        var += 2 * x * x;
        t[h + i] = (float)x;
        t[h - 1 - i] = (float)-x;
    }
    double sc = 1.0 / sqrt(var / n);
    for (uint32_t i = 0; i < n; i++)
        t[i] = (float)(t[i] * sc);
}

static int synth_init(synth *s, const synth_opts *o, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->o = *o;
    s->n = o->nodes;
    s->C = o->classes;
    s->F = o->feat_dim;
    s->id_dt = dtype_for_ids(s->n);
    s->id_size = dtype_size(s->id_dt);
    s->kmax = SL_MIN(s->n - 1, SL_MAX((uint64_t)SYN_DEG_CAP, (uint64_t)ceil(16 * o->avg_degree)));
    s->xm = solve_scale(o->avg_degree, s->kmax);
    s->always_same = s->C == 1 || o->homophily >= 1.0;
    s->same_thr = (uint64_t)(o->homophily * 18446744073709551616.0);
    s->k_label = key_of(o->seed, K_LABEL);
    s->k_deg = key_of(o->seed, K_DEGREE);
    s->k_edges = key_of(o->seed, K_EDGES);
    s->k_feat = key_of(o->seed, K_FEAT);
    s->row_bytes = s->F * dtype_size(o->dtype);
    s->stride = dataset_row_stride(s->row_bytes, DATASET_FEAT_ALIGN);
    gauss_table(s->gauss);

    s->cls_off = calloc(s->C + 1, sizeof *s->cls_off);
    s->cls_sq = calloc(s->C, sizeof *s->cls_sq);
    s->members = malloc(s->n * s->id_size);
    s->centroid = malloc(s->C * s->F * sizeof(float));
    if (s->n < (1ull << 32))
        s->outdeg = calloc(s->n, sizeof *s->outdeg);
    if (!s->cls_off || !s->cls_sq || !s->members || !s->centroid || (s->n < (1ull << 32) && !s->outdeg))
        return sl_errf(err, errlen, -ENOMEM, "out of memory for the per-node arrays of %" PRIu64 " nodes", s->n);

    /* Class member lists by counting sort, then a per-class shuffle: the
     * position in the shuffled list is the node's popularity rank. */
    for (uint64_t v = 0; v < s->n; v++)
        s->cls_off[label_of(s, v) + 1]++;
    for (uint64_t c = 0; c < s->C; c++)
        s->cls_off[c + 1] += s->cls_off[c];
    uint64_t *fill = malloc(s->C * sizeof *fill);
    if (!fill)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for the class lists");
    memcpy(fill, s->cls_off, s->C * sizeof *fill);
    for (uint64_t v = 0; v < s->n; v++) {
        uint64_t i = fill[label_of(s, v)]++;
        if (s->id_size == 4)
            ((uint32_t *)s->members)[i] = (uint32_t)v;
        else
            ((uint64_t *)s->members)[i] = v;
    }
    free(fill);
    uint64_t kperm = key_of(o->seed, K_PERM);
    for (uint64_t c = 0; c < s->C; c++) {
        uint64_t b = s->cls_off[c], m = s->cls_off[c + 1] - b;
        s->cls_sq[c] = sqrt((double)m + 1.0) - 1.0;
        rng r = rng_at(kperm, c);
        for (uint64_t i = m; i > 1; i--) {
            uint64_t j = below(rng_next(&r), i);
            if (s->id_size == 4) {
                uint32_t *a = (uint32_t *)s->members + b, t = a[i - 1];
                a[i - 1] = a[j];
                a[j] = t;
            } else {
                uint64_t *a = (uint64_t *)s->members + b, t = a[i - 1];
                a[i - 1] = a[j];
                a[j] = t;
            }
        }
    }

    /* Centroids: Gaussian directions (Box-Muller), normalised to length 1. */
    uint64_t kc = key_of(o->seed, K_CENTROID);
    for (uint64_t c = 0; c < s->C; c++) {
        rng r = rng_at(kc, c);
        float *mu = s->centroid + c * s->F;
        double norm = 0;
        for (uint64_t j = 0; j < s->F; j++) {
            double g = sqrt(-2.0 * log(unit_open0(rng_next(&r)))) * cos(2 * M_PI * unit(rng_next(&r)));
            mu[j] = (float)g;
            norm += g * g;
        }
        double sc = norm > 0 ? 1.0 / sqrt(norm) : 0;
        for (uint64_t j = 0; j < s->F; j++)
            mu[j] = (float)(mu[j] * sc);
    }
    return 0;
}

static void synth_free(synth *s)
{
    free(s->cls_off);
    free(s->cls_sq);
    free(s->members);
    free(s->outdeg);
    free(s->centroid);
}

/* ------------------------------------------------------------------ */
/* one node: in-neighbours and features */

typedef struct scratch {
    uint64_t *set;   /* open-addressing set, empty = UINT64_MAX */
    uint64_t *nb;    /* (kmax) candidate positions, then chosen sources */
    bool *same;      /* (kmax) candidate drawn from the destination's class */
    float *row;      /* (F) one f32 row (f16 output) */
} scratch;

#define SET_EMPTY UINT64_MAX

static inline bool set_add(uint64_t *set, uint64_t mask, uint64_t x)
{
    uint64_t i = sl_mix64(x) & mask;
    while (set[i] != SET_EMPTY) {
        if (set[i] == x)
            return false;
        i = (i + 1) & mask;
    }
    set[i] = x;
    return true;
}

static inline bool set_has(const uint64_t *set, uint64_t mask, uint64_t x)
{
    uint64_t i = sl_mix64(x) & mask;
    while (set[i] != SET_EMPTY) {
        if (set[i] == x)
            return true;
        i = (i + 1) & mask;
    }
    return false;
}

static void sort_u64(uint64_t *a, size_t n)
{
    while (n > 24) {
        /* median of three, Hoare partition; recurse on the smaller part */
        uint64_t x = a[0], y = a[n / 2], z = a[n - 1];
        uint64_t p = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        size_t i = 0, j = n - 1;
        for (;;) {
            while (a[i] < p)
                i++;
            while (a[j] > p)
                j--;
            if (i >= j)
                break;
            uint64_t t = a[i];
            a[i++] = a[j];
            a[j--] = t;
        }
        size_t left = j + 1;
        if (left < n - left) {
            sort_u64(a, left);
            a += left;
            n -= left;
        } else {
            sort_u64(a + left, n - left);
            n = left;
        }
    }
    for (size_t i = 1; i < n; i++) {
        uint64_t t = a[i];
        size_t j = i;
        for (; j > 0 && a[j - 1] > t; j--)
            a[j] = a[j - 1];
        a[j] = t;
    }
}

/* One candidate source for a destination of class y: its position in
 * `members` (UINT64_MAX when the drawn class is empty); *same says whether
 * the class drawn was y. */
static inline uint64_t draw_pos(const synth *s, rng *r, uint64_t y, bool *same)
{
    uint64_t c = y;
    if (!s->always_same && rng_next(r) >= s->same_thr) {
        c = below(rng_next(r), s->C - 1);
        c += c >= y;
    }
    *same = c == y;
    uint64_t b = s->cls_off[c], m = s->cls_off[c + 1] - b;
    double x = 1.0 + unit(rng_next(r)) * s->cls_sq[c];
    if (m == 0)
        return UINT64_MAX;
    uint64_t rank = (uint64_t)(x * x) - 1;
    return b + (rank < m ? rank : m - 1);
}

/* Draws the k distinct in-neighbours of v (class y) into sc->nb, sorted;
 * returns how many share v's class. The stream is consumed in a fixed
 * order: k first candidates (looked up after prefetching them all, since
 * the member table is far larger than cache), then redraws for candidates
 * that were self loops or duplicates, in edge order. */
static uint64_t gen_edges(const synth *s, scratch *sc, uint64_t v, uint64_t y, uint64_t k)
{
    uint64_t cap = 16;
    while (cap < 2 * k)
        cap <<= 1;
    uint64_t mask = cap - 1;
    memset(sc->set, 0xff, cap * sizeof *sc->set);
    rng r = rng_at(s->k_edges, v);
    uint64_t same = 0, *pos = sc->nb;
    const char *mem = s->members;
    for (uint64_t e = 0; e < k; e++) {
        bool sm;
        pos[e] = draw_pos(s, &r, y, &sm);
        sc->same[e] = sm;
        if (pos[e] != UINT64_MAX)
            __builtin_prefetch(mem + pos[e] * s->id_size);
    }
    for (uint64_t e = 0; e < k; e++) {
        uint64_t p = pos[e];
        bool sm = sc->same[e];
        uint64_t src = SET_EMPTY;
        for (int tries = 0; tries < SYN_MAX_REJECT; tries++) {
            if (tries)
                p = draw_pos(s, &r, y, &sm);
            if (p == UINT64_MAX)
                continue;
            uint64_t cand = member(s, p);
            if (cand != v && set_add(sc->set, mask, cand)) {
                src = cand;
                same += sm;
                break;
            }
        }
        if (src == SET_EMPTY) {
            /* Uniform scan for a free node; one exists since k <= N-1. */
            uint64_t cand = below(rng_next(&r), s->n);
            while (cand == v || set_has(sc->set, mask, cand))
                cand = cand + 1 == s->n ? 0 : cand + 1;
            set_add(sc->set, mask, cand);
            src = cand;
            same += label_of(s, cand) == y;
        }
        sc->nb[e] = src; /* pos[e] is consumed: nb and pos share storage */
    }
    sort_u64(sc->nb, k);
    return same;
}

/* Writes v's feature row (class y) in the file's dtype at out; the padding
 * after row_bytes is left as it is (zero). */
static void gen_features(const synth *s, scratch *sc, uint64_t v, uint64_t y, unsigned char *out)
{
    const float *mu = s->centroid + y * s->F;
    const float noise = (float)s->o.noise;
    const uint64_t F = s->F;
    float *x = s->o.dtype == DTYPE_F32 ? (float *)out : sc->row;
    rng r = rng_at(s->k_feat, v);
    uint64_t j = 0;
    for (; j + 4 <= F; j += 4) {
        uint64_t h = rng_next(&r);
        x[j] = mu[j] + noise * s->gauss[h & 0xffff];
        x[j + 1] = mu[j + 1] + noise * s->gauss[(h >> 16) & 0xffff];
        x[j + 2] = mu[j + 2] + noise * s->gauss[(h >> 32) & 0xffff];
        x[j + 3] = mu[j + 3] + noise * s->gauss[h >> 48];
    }
    if (j < F) {
        uint64_t h = rng_next(&r);
        for (; j < F; j++, h >>= 16)
            x[j] = mu[j] + noise * s->gauss[h & 0xffff];
    }
    if (s->o.dtype == DTYPE_F16) {
        uint16_t *o16 = (uint16_t *)out;
        for (j = 0; j < F; j++)
            o16[j] = half_from_f32(x[j]);
    }
}

/* ------------------------------------------------------------------ */
/* block pipeline */

enum { SLOT_FREE, SLOT_BUSY, SLOT_READY };

typedef struct slot {
    int state;
    int err;                /* -errno of a failed worker */
    bool used;              /* has held a block */
    uint64_t block;         /* the block held (or last held) */
    uint64_t first, count;  /* nodes [first, first + count) */
    uint64_t *deg;          /* (npb) in-degrees */
    unsigned char *feat;    /* (npb, stride) rows in file layout */
    unsigned char *idx;     /* in-neighbour ids, id_size each */
    size_t idx_len, idx_cap;
    uint64_t same;          /* edges joining one class */
} slot;

typedef struct pool {
    const synth *s;
    pthread_mutex_t mu;
    pthread_cond_t cv_free, cv_ready;
    uint64_t next_block, nblocks, npb;
    slot *slots;
    unsigned nslots;
    bool stop;
} pool;

static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig)
{
    (void)sig;
    g_interrupted = 1;
}

static int fill_block(const synth *s, scratch *sc, slot *sl)
{
    sl->idx_len = 0;
    sl->same = 0;
    for (uint64_t i = 0; i < sl->count; i++) {
        uint64_t v = sl->first + i, y = label_of(s, v), k = degree_of(s, v);
        size_t need = sl->idx_len + k * s->id_size;
        if (need > sl->idx_cap) {
            size_t cap = SL_MAX(need, sl->idx_cap * 2);
            unsigned char *p = realloc(sl->idx, cap);
            if (!p)
                return -ENOMEM;
            sl->idx = p;
            sl->idx_cap = cap;
        }
        sl->same += gen_edges(s, sc, v, y, k);
        if (s->id_size == 4) {
            uint32_t *o = (uint32_t *)(sl->idx + sl->idx_len);
            for (uint64_t e = 0; e < k; e++)
                o[e] = (uint32_t)sc->nb[e];
        } else {
            memcpy(sl->idx + sl->idx_len, sc->nb, k * 8);
        }
        sl->idx_len = need;
        sl->deg[i] = k;
        gen_features(s, sc, v, y, sl->feat + i * s->stride);
    }
    return 0;
}

static void *worker_main(void *arg)
{
    pool *p = arg;
    const synth *s = p->s;
    scratch sc = {0};
    uint64_t setcap = 16;
    while (setcap < 2 * s->kmax)
        setcap <<= 1;
    sc.set = malloc(setcap * sizeof *sc.set);
    sc.nb = malloc((s->kmax + 1) * sizeof *sc.nb);
    sc.same = malloc((s->kmax + 1) * sizeof *sc.same);
    sc.row = malloc(s->F * sizeof *sc.row);
    int oom = !sc.set || !sc.nb || !sc.same || !sc.row;

    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->stop || p->next_block >= p->nblocks)
            break;
        uint64_t b = p->next_block++;
        /* Block b goes to slot b % nslots once block b - nslots has been
         * written from it. */
        slot *sl = &p->slots[b % p->nslots];
        while (!p->stop && (sl->state != SLOT_FREE || (sl->used && sl->block + p->nslots != b)))
            pthread_cond_wait(&p->cv_free, &p->mu);
        if (p->stop)
            break;
        sl->state = SLOT_BUSY;
        sl->used = true;
        sl->block = b;
        sl->first = b * p->npb;
        sl->count = SL_MIN(p->npb, s->n - sl->first);
        pthread_mutex_unlock(&p->mu);

        int rc = oom ? -ENOMEM : fill_block(s, &sc, sl);

        pthread_mutex_lock(&p->mu);
        sl->err = rc;
        sl->state = SLOT_READY;
        pthread_cond_broadcast(&p->cv_ready);
    }
    pthread_mutex_unlock(&p->mu);
    free(sc.set);
    free(sc.nb);
    free(sc.same);
    free(sc.row);
    return NULL;
}

/* Statistics the writer gathers for the summary. */
typedef struct synth_stats {
    uint64_t edges, same, max_in;
    uint64_t *hist;     /* in-degree histogram, hist_n buckets, last one = overflow */
    uint64_t hist_n;
    double wait_s;      /* writer idle, waiting for generated blocks */
    double write_s;     /* writer busy: statistics, hashing, write(2) */
    double write_cpu_s; /* CPU time of the writer thread in the pipeline */
} synth_stats;

static uint64_t hist_pct(const uint64_t *h, uint64_t nb, uint64_t total, double p)
{
    uint64_t want = (uint64_t)ceil(p * (double)total), acc = 0;
    if (want == 0)
        want = 1;
    for (uint64_t i = 0; i < nb; i++) {
        acc += h[i];
        if (acc >= want)
            return i;
    }
    return nb - 1;
}

/* Out-degree counts of a block's sources (writer thread only, so plain
 * increments); loads run ahead of use since the counters miss cache. */
static void count_sources(synth *s, const slot *sl)
{
    if (!s->outdeg)
        return;
    const uint32_t *id = (const uint32_t *)sl->idx;
    size_t n = sl->idx_len / 4, ahead = 16;
    for (size_t e = 0; e < n; e++) {
        if (e + ahead < n)
            __builtin_prefetch(&s->outdeg[id[e + ahead]], 1);
        s->outdeg[id[e]]++;
    }
}

typedef struct outputs {
    struct file_writer indptr, indices;
    struct feat_writer feat;
} outputs;

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs the pool and writes every block in order. 0, -EINTR, or -errno
 * with a message. */
static int run_pipeline(synth *s, outputs *w, synth_stats *st, char *err, size_t errlen)
{
    pool p = {.s = s};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv_free, NULL);
    pthread_cond_init(&p.cv_ready, NULL);
    p.npb = SL_MAX(16, SL_MIN(65536, SYN_BLOCK_BYTES / s->stride));
    p.nblocks = (s->n + p.npb - 1) / p.npb;
    unsigned nthreads = (unsigned)SL_MIN((uint64_t)s->o.threads, p.nblocks);
    p.nslots = 2 * nthreads + 2;
    p.slots = calloc(p.nslots, sizeof *p.slots);
    pthread_t *tid = calloc(nthreads, sizeof *tid);
    uint64_t *indptr = malloc(p.npb * sizeof *indptr); /* (npb) one block's offsets */
    unsigned started = 0;
    int rc = 0;
    if (!p.slots || !tid || !indptr) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for the generator's buffers");
        goto out;
    }
    for (unsigned i = 0; i < p.nslots; i++) {
        p.slots[i].deg = malloc(p.npb * sizeof *p.slots[i].deg);
        p.slots[i].feat = calloc(p.npb, s->stride);
        if (!p.slots[i].deg || !p.slots[i].feat) {
            rc = sl_errf(err, errlen, -ENOMEM, "out of memory for the generator's buffers");
            goto out;
        }
    }
    for (; started < nthreads; started++) {
        int e = pthread_create(&tid[started], NULL, worker_main, &p);
        if (e) {
            rc = sl_errf(err, errlen, -e, "cannot start a generator thread: %s", strerror(e));
            goto out;
        }
    }

    uint64_t off = 0;
    bool tty = isatty(STDERR_FILENO);
    double cpu0 = thread_cpu_s();
    double t0 = sl_now(), last = t0;
    for (uint64_t b = 0; b < p.nblocks; b++) {
        slot *sl = &p.slots[b % p.nslots];
        double tw = sl_now();
        pthread_mutex_lock(&p.mu);
        while (!(sl->state == SLOT_READY && sl->block == b) && !g_interrupted) {
            /* wake now and then to notice Ctrl-C */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&p.cv_ready, &p.mu, &ts);
        }
        pthread_mutex_unlock(&p.mu);
        if (g_interrupted) {
            rc = sl_errf(err, errlen, -EINTR, "interrupted");
            goto out;
        }
        if (sl->err < 0) {
            rc = sl_errf(err, errlen, sl->err, "generating nodes %" PRIu64 "..: %s", sl->first, strerror(-sl->err));
            goto out;
        }
        double tg = sl_now();
        st->wait_s += tg - tw;
        for (uint64_t i = 0; i < sl->count; i++) {
            uint64_t d = sl->deg[i];
            off += d;
            indptr[i] = off;
            st->max_in = SL_MAX(st->max_in, d);
            st->hist[SL_MIN(d, st->hist_n - 1)]++;
        }
        st->same += sl->same;
        count_sources(s, sl);
        if ((rc = file_writer_write(&w->indptr, indptr, sl->count * 8, err, errlen)) < 0 ||
            (rc = file_writer_write(&w->indices, sl->idx, sl->idx_len, err, errlen)) < 0 ||
            (rc = feat_writer_put_rows(&w->feat, sl->feat, sl->count, err, errlen)) < 0)
            goto out;
        st->write_s += sl_now() - tg;
        pthread_mutex_lock(&p.mu);
        sl->state = SLOT_FREE;
        pthread_cond_broadcast(&p.cv_free);
        pthread_mutex_unlock(&p.mu);
        double now = sl_now();
        if (tty && now - last >= 1.0) {
            last = now;
            uint64_t done = sl->first + sl->count;
            fprintf(stderr, "\rsynth: %5.1f%%  %" PRIu64 "/%" PRIu64 " nodes  %" PRIu64 " edges  %.0f s ",
                    100.0 * (double)done / (double)s->n, done, s->n, off, now - t0);
        }
    }
    if (tty && sl_now() - t0 >= 1.0)
        fprintf(stderr, "\r%70s\r", "");
    st->edges = off;
    st->write_cpu_s = thread_cpu_s() - cpu0;
out:
    pthread_mutex_lock(&p.mu);
    p.stop = true;
    pthread_cond_broadcast(&p.cv_free);
    pthread_mutex_unlock(&p.mu);
    for (unsigned i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    if (p.slots)
        for (unsigned i = 0; i < p.nslots; i++) {
            free(p.slots[i].deg);
            free(p.slots[i].feat);
            free(p.slots[i].idx);
        }
    free(p.slots);
    free(tid);
    free(indptr);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv_free);
    pthread_cond_destroy(&p.cv_ready);
    return rc;
}

/* ------------------------------------------------------------------ */
/* labels and splits */

static int write_labels(const synth *s, const struct dataset_dir *d, struct dataset_file *f, char *err, size_t errlen)
{
    char path[4096];
    struct file_writer w;
    int32_t buf[4096];
    dataset_dir_path(d, "labels.bin", path, sizeof path);
    int rc = file_writer_open(&w, path, err, errlen);
    if (rc < 0)
        return rc;
    for (uint64_t v = 0; v < s->n && rc == 0;) {
        size_t k = 0;
        for (; k < SL_ARRAY_LEN(buf) && v < s->n; k++, v++)
            buf[k] = (int32_t)label_of(s, v);
        rc = file_writer_write(&w, buf, k * sizeof *buf, err, errlen);
    }
    uint64_t bytes = 0, h = 0;
    if (rc == 0)
        rc = file_writer_close(&w, &bytes, &h, err, errlen);
    else
        file_writer_free(&w);
    if (rc == 0)
        dataset_file_set(f, "labels.bin", DTYPE_I32, s->n, 1, bytes, h);
    return rc;
}

/* Train/val/test by sequential sampling: node v joins a split with
 * probability (places left in it) / (nodes left), which draws a uniformly
 * random set of exactly the requested sizes. Each file lists its node ids
 * in ascending order (sorted, as docs/format.md allows readers to assume). */
static int write_splits(const synth *s, const struct dataset_dir *d, struct dataset_meta *m, uint64_t count[3],
                        char *err, size_t errlen)
{
    static const char *const name[3] = {"train.bin", "val.bin", "test.bin"};
    struct file_writer w[3];
    int rc = 0;
    for (int i = 0; i < 3; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].fd = -1;
    }
    uint64_t left[3], total = 0;
    for (int i = 0; i < 3; i++) {
        count[i] = (uint64_t)llround(s->o.frac[i] * (double)s->n);
        if (total + count[i] > s->n)
            count[i] = s->n - total; /* rounding may overshoot by one */
        total += count[i];
        left[i] = count[i];
    }
    for (int i = 0; i < 3; i++) {
        char path[4096];
        dataset_dir_path(d, name[i], path, sizeof path);
        if ((rc = file_writer_open(&w[i], path, err, errlen)) < 0)
            goto out;
    }
    uint64_t key = key_of(s->o.seed, K_SPLIT);
    for (uint64_t v = 0; v < s->n && rc == 0; v++) {
        uint64_t u = below(hash2(key, v), s->n - v), acc = 0;
        for (int i = 0; i < 3; i++) {
            acc += left[i];
            if (u < acc) {
                left[i]--;
                if (s->id_size == 4) {
                    uint32_t x = (uint32_t)v;
                    rc = file_writer_write(&w[i], &x, 4, err, errlen);
                } else {
                    rc = file_writer_write(&w[i], &v, 8, err, errlen);
                }
                break;
            }
        }
    }
    for (int i = 0; i < 3 && rc == 0; i++) {
        uint64_t bytes = 0, h = 0;
        rc = file_writer_close(&w[i], &bytes, &h, err, errlen);
        if (rc == 0)
            dataset_file_set(&m->f[DATASET_TRAIN + i], name[i], s->id_dt, count[i], 1, bytes, h);
    }
out:
    for (int i = 0; i < 3; i++)
        file_writer_free(&w[i]); /* no-op on closed writers */
    return rc;
}

/* ------------------------------------------------------------------ */
/* main */

static void join_argv(char *out, size_t len, int argc, char **argv)
{
    size_t n = (size_t)snprintf(out, len, "gnnprep");
    for (int i = 0; i < argc && n < len; i++)
        n += (size_t)snprintf(out + n, len - n, " %s", argv[i]);
}

/* Refuses early when the estimated output cannot fit on the file system. */
static int check_space(const synth *s, const struct dataset_dir *d, char *err, size_t errlen)
{
    struct statvfs vfs;
    if (statvfs(d->tmp, &vfs) < 0)
        return 0;
    double need = 8.0 * (double)(s->n + 1) + s->o.avg_degree * (double)s->n * (double)s->id_size +
                  (double)s->n * (double)s->stride + 4.0 * (double)s->n +
                  (double)s->n * (double)s->id_size;
    double have = (double)vfs.f_bavail * (double)vfs.f_frsize;
    if (need > have) {
        char a[32], b[32];
        return sl_errf(err, errlen, -ENOSPC, "%s: the dataset needs about %s but only %s is free; free some space or "
                       "write elsewhere", d->out, sl_fmt_bytes((uint64_t)need, a, sizeof a),
                       sl_fmt_bytes((uint64_t)have, b, sizeof b));
    }
    return 0;
}

int prep_synth_main(int argc, char **argv)
{
    /* --task: node (this file, the default) or link (synth_link.c) */
    const char *task = prep_find_opt(argc, argv, "--task");
    if (task && !strcmp(task, "link"))
        return prep_synth_link_main(argc, argv);
    if (task && strcmp(task, "node")) {
        fprintf(stderr, "gnnprep synth: --task '%s' is not node or link\n", task);
        return PREP_EXIT_BAD_INPUT;
    }
    char *args[256];
    if (task) { /* drop --task node, which the parser below does not know */
        if (argc > (int)SL_ARRAY_LEN(args)) {
            fprintf(stderr, "gnnprep synth: too many arguments\n");
            return PREP_EXIT_BAD_INPUT;
        }
        int n = 0;
        for (int i = 0; i < argc; i++) {
            if (!strcmp(argv[i], "--task")) {
                i++;
                continue;
            }
            if (!strncmp(argv[i], "--task=", 7))
                continue;
            args[n++] = argv[i];
        }
        argc = n;
        argv = args;
    }
    synth_opts o;
    int prc = parse_opts(argc, argv, &o);
    if (prc < 0) {
        usage(stdout);
        return PREP_EXIT_OK;
    }
    if (prc)
        return prc;

    double t0 = sl_now();
    char err[1024] = "";
    struct dataset_dir dsw;
    int rc = dataset_dir_begin(&dsw, o.out, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "gnnprep synth: %s\n", err);
        return prep_exit_code(rc);
    }

    /* A file-size limit becomes a write error (EFBIG), not a kill, so the
     * staging directory is still removed; Ctrl-C stops cleanly. */
    signal(SIGXFSZ, SIG_IGN);
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);

    synth *s = calloc(1, sizeof *s);
    struct dataset_meta *m = calloc(1, sizeof *m);
    outputs w;
    memset(&w, 0, sizeof w);
    w.indptr.fd = w.indices.fd = w.feat.w.fd = -1;
    synth_stats st = {0};
    uint64_t split_n[3] = {0};
    char path[4096];
    if (!s || !m) {
        rc = sl_errf(err, sizeof err, -ENOMEM, "out of memory");
        goto out;
    }
    if ((rc = synth_init(s, &o, err, sizeof err)) < 0 || (rc = check_space(s, &dsw, err, sizeof err)) < 0)
        goto out;
    st.hist_n = SL_MIN(s->kmax, 1u << 20) + 2;
    st.hist = calloc(st.hist_n, sizeof *st.hist);
    if (!st.hist) {
        rc = sl_errf(err, sizeof err, -ENOMEM, "out of memory");
        goto out;
    }

    if ((rc = write_labels(s, &dsw, &m->f[DATASET_LABELS], err, sizeof err)) < 0 ||
        (rc = write_splits(s, &dsw, m, split_n, err, sizeof err)) < 0)
        goto out;

    uint64_t zero = 0;
    dataset_dir_path(&dsw, "indptr.bin", path, sizeof path);
    if ((rc = file_writer_open(&w.indptr, path, err, sizeof err)) < 0 ||
        (rc = file_writer_write(&w.indptr, &zero, 8, err, sizeof err)) < 0)
        goto out;
    dataset_dir_path(&dsw, "indices.bin", path, sizeof path);
    if ((rc = file_writer_open(&w.indices, path, err, sizeof err)) < 0)
        goto out;
    dataset_dir_path(&dsw, "features.bin", path, sizeof path);
    if ((rc = feat_writer_open(&w.feat, path, o.dtype, o.feat_dim, err, sizeof err)) < 0)
        goto out;
    if ((rc = run_pipeline(s, &w, &st, err, sizeof err)) < 0)
        goto out;

    uint64_t bytes, h;
    if ((rc = file_writer_close(&w.indptr, &bytes, &h, err, sizeof err)) < 0)
        goto out;
    dataset_file_set(&m->f[DATASET_INDPTR], "indptr.bin", DTYPE_U64, s->n + 1, 1, bytes, h);
    if ((rc = file_writer_close(&w.indices, &bytes, &h, err, sizeof err)) < 0)
        goto out;
    dataset_file_set(&m->f[DATASET_INDICES], "indices.bin", s->id_dt, st.edges, 1, bytes, h);
    if ((rc = feat_writer_close(&w.feat, &m->f[DATASET_FEATURES], err, sizeof err)) < 0)
        goto out;

    m->version = DATASET_VERSION;
    m->nodes = s->n;
    m->edges = st.edges;
    m->feat_dim = s->F;
    m->classes = (uint32_t)s->C;
    m->feat_align = DATASET_FEAT_ALIGN;
    join_argv(m->source, sizeof m->source, argc, argv);
    if (g_interrupted) {
        rc = -EINTR;
        goto out;
    }
    if ((rc = dataset_dir_commit(&dsw, m, err, sizeof err)) < 0)
        goto out;

    /* Summary. */
    uint64_t max_out = 0, total_bytes = 0;
    if (s->outdeg)
        for (uint64_t v = 0; v < s->n; v++)
            max_out = SL_MAX(max_out, s->outdeg[v]);
    for (int i = 0; i < DATASET_FILES; i++)
        total_bytes += m->f[i].bytes;
    double secs = sl_now() - t0;
    char b1[32], b2[32];
    printf("synth: wrote %s: %" PRIu64 " nodes, %" PRIu64 " edges, %" PRIu64 "-dim %s features, %" PRIu64
           " classes, %s in %.1f s\n",
           dsw.out, s->n, st.edges, s->F, dtype_name(o.dtype), s->C, sl_fmt_bytes(total_bytes, b1, sizeof b1), secs);
    printf("nodes=%" PRIu64 " edges=%" PRIu64 " mean_in_degree=%.3f max_in_degree=%" PRIu64
           " in_degree_p50=%" PRIu64 " in_degree_p90=%" PRIu64 " in_degree_p99=%" PRIu64 " in_degree_p999=%" PRIu64,
           s->n, st.edges, (double)st.edges / (double)s->n, st.max_in, hist_pct(st.hist, st.hist_n, s->n, 0.5),
           hist_pct(st.hist, st.hist_n, s->n, 0.9), hist_pct(st.hist, st.hist_n, s->n, 0.99),
           hist_pct(st.hist, st.hist_n, s->n, 0.999));
    if (s->outdeg)
        printf(" max_out_degree=%" PRIu64, max_out);
    printf(" edge_homophily=%.4f train=%" PRIu64 " val=%" PRIu64 " test=%" PRIu64 " bytes=%" PRIu64
           " seconds=%.2f writer_wait_s=%.2f writer_busy_s=%.2f writer_cpu_s=%.2f threads=%u peak_rss=%s\n",
           st.edges ? (double)st.same / (double)st.edges : 0.0, split_n[0], split_n[1], split_n[2], total_bytes, secs,
           st.wait_s, st.write_s, st.write_cpu_s, o.threads, sl_fmt_bytes(sl_peak_rss(), b2, sizeof b2));
    fflush(stdout);

out:
    file_writer_free(&w.indptr);
    file_writer_free(&w.indices);
    feat_writer_free(&w.feat);
    dataset_dir_abort(&dsw);
    if (s)
        synth_free(s);
    free(s);
    free(m);
    free(st.hist);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc == -EINTR || g_interrupted) {
        fprintf(stderr, "gnnprep synth: interrupted; nothing was left at %s\n", o.out);
        return 130;
    }
    if (rc < 0) {
        fprintf(stderr, "gnnprep synth: %s\n", err);
        return PREP_EXIT_FAIL;
    }
    return PREP_EXIT_OK;
}
