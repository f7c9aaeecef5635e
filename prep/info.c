/* info.c - `gnnprep info DIR`: a summary of a dataset — counts, in-degree
 * statistics, class balance, split sizes and sizes on disk.
 *
 * Reads dataset.toml, indptr.bin (streamed) and labels.bin (streamed); it
 * never touches features or indices, so it is quick on any size. Degree
 * percentiles are exact: a histogram counts degrees below 2^20 one by one
 * and the rare larger ones in a sorted list. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/dataset.h"
#include "core/util.h"
#include "prep.h"
#include "stages/pack.h"
#include "core/dataset_scan.h"
#include "core/linkdata.h"

#define HIST_MAX (1u << 20)

typedef struct deg_stats {
    uint64_t *hist;     /* hist[d] = nodes of in-degree d, d < HIST_MAX */
    uint64_t *big;      /* degrees >= HIST_MAX */
    size_t nbig, capbig;
    uint64_t n, zero, max;
} deg_stats;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Degree of rank r (0-based) in ascending order. */
static uint64_t deg_at(const deg_stats *d, uint64_t r)
{
    uint64_t acc = 0;
    for (uint64_t k = 0; k < HIST_MAX; k++) {
        acc += d->hist[k];
        if (r < acc)
            return k;
    }
    return d->big[r - acc];
}

static int read_degrees(const char *path, uint64_t nodes, deg_stats *d, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    d->hist = calloc(HIST_MAX, sizeof *d->hist);
    if (!d->hist)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    struct dataset_scan s;
    int rc = dataset_scan_open(&s, path, false, err, errlen);
    uint64_t prev = 0;
    for (uint64_t i = 0; rc == 0 && i <= nodes; i++) {
        uint64_t x;
        if ((rc = dataset_scan_read(&s, &x, 8, err, errlen)) < 0)
            break;
        if (i == 0) {
            prev = x;
            continue;
        }
        if (x < prev) {
            rc = sl_errf(err, errlen, -EBADMSG, "%s: indptr decreases at node %" PRIu64 "; run gnnprep check", path, i - 1);
            break;
        }
        uint64_t deg = x - prev;
        prev = x;
        d->n++;
        d->zero += deg == 0;
        d->max = SL_MAX(d->max, deg);
        if (deg < HIST_MAX) {
            d->hist[deg]++;
        } else {
            if (d->nbig == d->capbig) {
                size_t cap = d->capbig ? d->capbig * 2 : 64;
                uint64_t *nb = realloc(d->big, cap * sizeof *nb);
                if (!nb) {
                    rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
                    break;
                }
                d->big = nb;
                d->capbig = cap;
            }
            d->big[d->nbig++] = deg;
        }
    }
    dataset_scan_free(&s);
    if (d->nbig)
        qsort(d->big, d->nbig, sizeof *d->big, cmp_u64);
    return rc;
}

/* A link-prediction dataset: counts, the training triples' relations and
 * node degrees (streamed from train.bin; a counter per node and relation). */
static int info_link(const char *dir)
{
    char err[2048], p[4096], b1[32];
    struct link_meta m;
    int rc = link_meta_read(dir, &m, true, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "gnnprep info: %s\n", err);
        return prep_exit_code(rc);
    }
    printf("dataset      %s (link prediction)\n", dir);
    printf("source       %s\n", m.source[0] ? m.source : "(unknown)");
    printf("nodes        %" PRIu64 "%s\n", m.nodes, m.names[LINK_ENTITY_NAMES].present ? " (named)" : "");
    printf("relations    %" PRIu64 "%s\n", m.relations, m.names[LINK_RELATION_NAMES].present ? " (named)" : "");
    printf("triples      train %" PRIu64 "  valid %" PRIu64 "  test %" PRIu64 " (%s ids)\n", m.split[LINK_TRAIN].rows,
           m.split[LINK_VALID].rows, m.split[LINK_TEST].rows, dtype_name(m.split[LINK_TRAIN].dtype));
    if (m.planted_mrr >= 0)
        printf("planted MRR  %.6f (tail prediction, filtered, of a model that learnt the planted clusters)\n",
               m.planted_mrr);
    uint32_t *deg = calloc(m.nodes, sizeof *deg);
    uint64_t *rel = calloc(m.relations, sizeof *rel);
    if (!deg || !rel) {
        free(deg);
        free(rel);
        fprintf(stderr, "gnnprep info: out of memory for %" PRIu64 " nodes\n", m.nodes);
        return PREP_EXIT_FAIL;
    }
    struct dataset_scan s;
    sl_path_join(p, sizeof p, dir, m.split[LINK_TRAIN].file);
    rc = dataset_scan_open(&s, p, false, err, sizeof err);
    size_t esz = dtype_size(m.split[LINK_TRAIN].dtype);
    for (uint64_t t = 0; rc == 0 && t < m.split[LINK_TRAIN].rows; t++) {
        unsigned char b[24];
        uint64_t id[3];
        if ((rc = dataset_scan_read(&s, b, 3 * esz, err, sizeof err)) < 0)
            break;
        for (int c = 0; c < 3; c++) {
            if (esz == 4) {
                uint32_t x;
                memcpy(&x, b + c * 4, 4);
                id[c] = x;
            } else {
                memcpy(&id[c], b + c * 8, 8);
            }
        }
        if (id[0] >= m.nodes || id[2] >= m.nodes || id[1] >= m.relations) {
            rc = sl_errf(err, sizeof err, -EBADMSG, "%s: triple %" PRIu64 " has an id out of range; run gnnprep check",
                         p, t);
            break;
        }
        deg[id[0]] += deg[id[0]] < UINT32_MAX;
        deg[id[2]] += deg[id[2]] < UINT32_MAX;
        rel[id[1]]++;
    }
    dataset_scan_free(&s);
    if (rc == 0) {
        uint64_t none = 0, max = 0, rlo = UINT64_MAX, rhi = 0;
        for (uint64_t v = 0; v < m.nodes; v++) {
            none += deg[v] == 0;
            max = SL_MAX(max, (uint64_t)deg[v]);
        }
        for (uint64_t r = 0; r < m.relations; r++) {
            rlo = SL_MIN(rlo, rel[r]);
            rhi = SL_MAX(rhi, rel[r]);
        }
        printf("degree       mean %.2f  max %" PRIu64 "  nodes in no training triple %" PRIu64 " (%.1f%%)\n",
               2.0 * (double)m.split[LINK_TRAIN].rows / (double)m.nodes, max, none,
               100.0 * (double)none / (double)m.nodes);
        printf("per relation min %" PRIu64 " max %" PRIu64 " training triples;", rlo, rhi);
        for (uint64_t r = 0; r < m.relations && r < 32; r++)
            printf(" %" PRIu64, rel[r]);
        printf("%s\n", m.relations > 32 ? " ..." : "");
    }
    free(deg);
    free(rel);
    if (rc < 0) {
        fprintf(stderr, "gnnprep info: %s\n", err);
        return prep_exit_code(rc);
    }
    uint64_t total = 0;
    printf("on disk     ");
    for (int i = 0; i < LINK_SPLITS + LINK_NAME_FILES; i++) {
        const struct dataset_file *f = i < LINK_SPLITS ? &m.split[i] : &m.names[i - LINK_SPLITS];
        if (!f->present)
            continue;
        total += f->bytes;
        printf(" %s %s", f->file, sl_fmt_bytes(f->bytes, b1, sizeof b1));
    }
    printf("\ntotal        %s\n", sl_fmt_bytes(total, b1, sizeof b1));
    return PREP_EXIT_OK;
}

static void info_usage(FILE *f)
{
    fprintf(f, "usage: gnnprep info DIR [--verify]\n\n"
               "Prints a summary of a dataset: counts, in-degree statistics, class balance,\n"
               "split sizes and sizes on disk. Reads only dataset.toml, indptr and labels;\n"
               "`gnnprep check` verifies the whole dataset.\n"
               "On a pack (gnnprep pack) it prints its batches, epochs, the bytes of each tier,\n"
               "the rows' replication factor with and without its cache tier and its space on\n"
               "disk; --verify (packs only) checks every file of the pack against the checksums\n"
               "its manifest records.\n");
}

int prep_info_main(int argc, char **argv)
{
    const char *dir = NULL;
    bool verify = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            info_usage(stdout);
            return PREP_EXIT_OK;
        } else if (!strcmp(argv[i], "--verify")) {
            verify = true;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "gnnprep info: unknown option '%s'; see gnnprep info --help\n", argv[i]);
            return PREP_EXIT_BAD_INPUT;
        } else if (dir) {
            fprintf(stderr, "gnnprep info: more than one directory given ('%s' and '%s')\n", dir, argv[i]);
            return PREP_EXIT_BAD_INPUT;
        } else {
            dir = argv[i];
        }
    }
    if (!dir) {
        info_usage(stderr);
        return PREP_EXIT_BAD_INPUT;
    }
    if (link_is_link_dataset(dir))
        return info_link(dir);
    char err[2048], p[4096], b1[32], b2[32];
    snprintf(p, sizeof p, "%s/" PACK_MANIFEST, dir);
    if (access(p, F_OK) == 0) /* a pack (gnnprep pack), not a dataset */
        return prep_pack_info(dir, verify);
    if (verify) {
        fprintf(stderr, "gnnprep info: --verify checks packs; %s is no pack (gnnprep check verifies a dataset)\n", dir);
        return PREP_EXIT_BAD_INPUT;
    }
    struct dataset_meta m;
    int rc = dataset_meta_read(dir, &m, true, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "gnnprep info: %s\n", err);
        return prep_exit_code(rc);
    }
    const struct dataset_file *f = m.f;
    printf("dataset      %s\n", dir);
    printf("source       %s\n", m.source[0] ? m.source : "(unknown)");
    printf("nodes        %" PRIu64 "\n", m.nodes);
    printf("edges        %" PRIu64 " (in-neighbour CSC, %s ids)\n", m.edges, dtype_name(f[DATASET_INDICES].dtype));
    uint64_t rowb = f[DATASET_FEATURES].cols * dtype_size(f[DATASET_FEATURES].dtype);
    printf("features     %" PRIu64 " x %s, row %" PRIu64 " B, stride %" PRIu64 " B (%.1f%% padding)\n", m.feat_dim,
           dtype_name(f[DATASET_FEATURES].dtype), rowb, f[DATASET_FEATURES].row_stride,
           100.0 * (double)(f[DATASET_FEATURES].row_stride - rowb) / (double)f[DATASET_FEATURES].row_stride);
    printf("classes      %u\n", m.classes);

    deg_stats d;
    sl_path_join(p, sizeof p, dir, f[DATASET_INDPTR].file);
    rc = read_degrees(p, m.nodes, &d, err, sizeof err);
    if (rc == 0) {
        printf("in-degree    mean %.2f  median %" PRIu64 "  p90 %" PRIu64 "  p99 %" PRIu64 "  p99.9 %" PRIu64
               "  max %" PRIu64 "  isolated %" PRIu64 " (%.1f%%)\n",
               (double)m.edges / (double)m.nodes, deg_at(&d, d.n / 2), deg_at(&d, d.n * 90 / 100),
               deg_at(&d, d.n * 99 / 100), deg_at(&d, d.n * 999 / 1000), d.max, d.zero,
               100.0 * (double)d.zero / (double)d.n);
    }
    free(d.hist);
    free(d.big);
    if (rc < 0) {
        fprintf(stderr, "gnnprep info: %s\n", err);
        return prep_exit_code(rc);
    }

    uint64_t *cls = calloc(m.classes + 1, sizeof *cls);
    if (!cls) {
        fprintf(stderr, "gnnprep info: out of memory\n");
        return PREP_EXIT_FAIL;
    }
    struct dataset_scan s;
    sl_path_join(p, sizeof p, dir, f[DATASET_LABELS].file);
    rc = dataset_scan_open(&s, p, false, err, sizeof err);
    for (uint64_t i = 0; rc == 0 && i < m.nodes; i++) {
        int32_t l;
        if ((rc = dataset_scan_read(&s, &l, 4, err, sizeof err)) < 0)
            break;
        if (l < -1 || l >= (int32_t)m.classes) {
            rc = sl_errf(err, sizeof err, -EBADMSG, "%s: node %" PRIu64 " has label %d outside [-1, %u); run gnnprep check",
                         p, i, l, m.classes);
            break;
        }
        cls[l + 1]++;
    }
    dataset_scan_free(&s);
    if (rc == 0) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (uint32_t k = 0; k < m.classes; k++) {
            lo = SL_MIN(lo, cls[k + 1]);
            hi = SL_MAX(hi, cls[k + 1]);
        }
        printf("labels       %" PRIu64 " labelled, %" PRIu64 " unlabelled; nodes per class min %" PRIu64 " max %" PRIu64 "\n",
               m.nodes - cls[0], cls[0], lo, hi);
        printf("class sizes ");
        for (uint32_t k = 0; k < m.classes && k < 32; k++)
            printf(" %" PRIu64, cls[k + 1]);
        printf("%s\n", m.classes > 32 ? " ..." : "");
    }
    free(cls);
    if (rc < 0) {
        fprintf(stderr, "gnnprep info: %s\n", err);
        return prep_exit_code(rc);
    }
    printf("splits       train %" PRIu64 "  val %" PRIu64 "  test %" PRIu64 "\n", f[DATASET_TRAIN].rows,
           f[DATASET_VAL].rows, f[DATASET_TEST].rows);
    uint64_t total = 0;
    printf("on disk     ");
    for (int i = 0; i < DATASET_FILES; i++) {
        total += f[i].bytes;
        printf(" %s %s%s", dataset_file_key[i], sl_fmt_bytes(f[i].bytes, b1, sizeof b1),
               i + 1 < DATASET_FILES ? "," : "");
    }
    printf("\ntotal        %s (features %s of it)\n", sl_fmt_bytes(total, b2, sizeof b2),
           sl_fmt_bytes(f[DATASET_FEATURES].bytes, b1, sizeof b1));
    return PREP_EXIT_OK;
}
