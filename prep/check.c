/* check.c - `gnnprep check DIR`: verifies a dataset completely.
 *
 * One sequential pass per file computes its XXH3 checksum and validates its
 * contents at the same time: indptr starts at 0, never decreases and ends at
 * the edge count; indices are node ids below N, ascending within each node;
 * feature values are finite and padding bytes zero; labels lie in [-1, C);
 * split ids are in range, unique, labelled, and the splits are disjoint.
 * Memory: two bits per node for the split map plus fixed read buffers.
 * Exit 0 when valid, 2 with one message naming the file when not, 1 when
 * the machine failed (read error, out of memory). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"
#include "core/util.h"
#include "prep.h"
#include "scan.h"

#define CHUNK_ELEMS (128u * 1024)

typedef struct checker {
    const char *dir;
    struct dataset_meta m;
    bool quiet;
    char err[2048];
} checker;

static int file_path(const checker *c, int idx, char *out, size_t len)
{
    return sl_path_join(out, len, c->dir, c->m.f[idx].file);
}

/* Invalid content: formats into c->err and returns -EBADMSG. */
static int bad(checker *c, const char *fmt, ...) SL_PRINTF(2, 3);
static int bad(checker *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return -EBADMSG;
}

static uint64_t load_id(const void *p, size_t i, bool wide)
{
    if (wide) {
        uint64_t v;
        memcpy(&v, (const char *)p + i * 8, 8);
        return v;
    }
    uint32_t v;
    memcpy(&v, (const char *)p + i * 4, 4);
    return v;
}

/* Finishes a scan and compares the checksum with dataset.toml. */
static int finish_hash(checker *c, struct prep_scan *s, int idx)
{
    uint64_t h, rest;
    int rc = prep_scan_finish(s, &h, &rest, c->err, sizeof c->err);
    if (rc < 0)
        return rc;
    const struct dataset_file *f = &c->m.f[idx];
    if (h != f->xxh3)
        return bad(c, "%s: checksum mismatch: dataset.toml records xxh3 %016" PRIx64 " but the file hashes to %016" PRIx64
                   "; the file was modified after gnnprep wrote it, regenerate the dataset", s->path, f->xxh3, h);
    if (!c->quiet)
        printf("  %-12s ok  xxh3 %016" PRIx64 "\n", f->file, h);
    return 0;
}

static int check_indptr(checker *c)
{
    char p[4096];
    struct prep_scan s;
    file_path(c, DATASET_INDPTR, p, sizeof p);
    int rc = prep_scan_open(&s, p, 1, c->err, sizeof c->err);
    uint64_t prev = 0, n = c->m.nodes + 1;
    for (uint64_t i = 0; rc == 0 && i < n;) {
        size_t k = (size_t)SL_MIN(n - i, CHUNK_ELEMS);
        const uint64_t *v = prep_scan_peek(&s, k * 8, &rc, c->err, sizeof c->err);
        if (!v)
            break;
        for (size_t j = 0; j < k; j++, i++) {
            uint64_t x;
            memcpy(&x, v + j, 8);
            if (i == 0 && x != 0) {
                rc = bad(c, "%s: indptr[0] = %" PRIu64 ", must be 0", p, x);
                break;
            }
            if (x < prev) {
                rc = bad(c, "%s: indptr decreases at node %" PRIu64 " (%" PRIu64 " after %" PRIu64 ")", p, i - 1, x, prev);
                break;
            }
            if (x > c->m.edges) {
                rc = bad(c, "%s: indptr[%" PRIu64 "] = %" PRIu64 " exceeds the edge count %" PRIu64, p, i, x, c->m.edges);
                break;
            }
            prev = x;
        }
    }
    if (rc == 0 && prev != c->m.edges)
        rc = bad(c, "%s: indptr ends at %" PRIu64 " but the dataset has %" PRIu64 " edges", p, prev, c->m.edges);
    if (rc == 0)
        rc = finish_hash(c, &s, DATASET_INDPTR);
    prep_scan_free(&s);
    return rc;
}

static int check_indices(checker *c)
{
    char p[4096], pp[4096];
    struct prep_scan s, ip;
    file_path(c, DATASET_INDICES, p, sizeof p);
    file_path(c, DATASET_INDPTR, pp, sizeof pp);
    int rc = prep_scan_open(&s, p, 1, c->err, sizeof c->err);
    if (rc < 0)
        return rc;
    rc = prep_scan_open(&ip, pp, 0, c->err, sizeof c->err);
    if (rc < 0) {
        prep_scan_free(&s);
        return rc;
    }
    bool wide = c->m.f[DATASET_INDICES].dtype == DTYPE_U64;
    size_t es = wide ? 8 : 4;
    uint64_t node = 0, end = 0, prev = 0; /* edges of `node` end at `end` */
    rc = prep_scan_read(&ip, &end, 8, c->err, sizeof c->err); /* indptr[0] == 0 */
    for (uint64_t e = 0; rc == 0 && e < c->m.edges;) {
        size_t k = (size_t)SL_MIN(c->m.edges - e, CHUNK_ELEMS);
        const void *v = prep_scan_peek(&s, k * es, &rc, c->err, sizeof c->err);
        if (!v)
            break;
        for (size_t j = 0; j < k; j++, e++) {
            bool first = false;
            while (e >= end && node < c->m.nodes) {
                node++;
                if ((rc = prep_scan_read(&ip, &end, 8, c->err, sizeof c->err)) < 0)
                    goto out;
                first = true;
            }
            uint64_t id = load_id(v, j, wide);
            if (id >= c->m.nodes) {
                rc = bad(c, "%s: edge %" PRIu64 " (an in-edge of node %" PRIu64 ") has source id %" PRIu64
                         ", outside [0, %" PRIu64 ")", p, e, node - 1, id, c->m.nodes);
                goto out;
            }
            if (!first && id < prev) {
                rc = bad(c, "%s: in-neighbours of node %" PRIu64 " are not ascending at edge %" PRIu64 " (%" PRIu64
                         " after %" PRIu64 ")", p, node - 1, e, id, prev);
                goto out;
            }
            prev = id;
        }
    }
    if (rc == 0)
        rc = finish_hash(c, &s, DATASET_INDICES);
out:
    prep_scan_free(&ip);
    prep_scan_free(&s);
    return rc;
}

static int check_features(checker *c)
{
    char p[4096];
    struct prep_scan s;
    const struct dataset_file *f = &c->m.f[DATASET_FEATURES];
    file_path(c, DATASET_FEATURES, p, sizeof p);
    int rc = prep_scan_open(&s, p, 1, c->err, sizeof c->err);
    bool half = f->dtype == DTYPE_F16;
    size_t rowb = (size_t)(f->cols * (half ? 2 : 4)), stride = (size_t)f->row_stride;
    for (uint64_t r = 0; rc == 0 && r < f->rows; r++) {
        const unsigned char *row = prep_scan_peek(&s, stride, &rc, c->err, sizeof c->err);
        if (!row)
            break;
        for (size_t j = 0; j < f->cols; j++) {
            bool finite;
            if (half) {
                uint16_t h;
                memcpy(&h, row + 2 * j, 2);
                finite = ((h >> 10) & 0x1f) != 0x1f;
            } else {
                uint32_t x;
                memcpy(&x, row + 4 * j, 4);
                finite = ((x >> 23) & 0xff) != 0xff;
            }
            if (!finite) {
                rc = bad(c, "%s: node %" PRIu64 " feature %zu is NaN or infinite; clean the input features", p, r, j);
                break;
            }
        }
        for (size_t j = rowb; rc == 0 && j < stride; j++)
            if (row[j]) {
                rc = bad(c, "%s: padding byte %zu of row %" PRIu64 " is not zero; the file is corrupt", p, j, r);
                break;
            }
    }
    /* the tail padding up to the file size is zero too */
    while (rc == 0 && prep_scan_pos(&s) < f->bytes) {
        const unsigned char *b = prep_scan_peek(&s, 1, &rc, c->err, sizeof c->err);
        if (b && *b)
            rc = bad(c, "%s: tail padding at byte %" PRIu64 " is not zero; the file is corrupt", p, prep_scan_pos(&s) - 1);
    }
    if (rc == 0)
        rc = finish_hash(c, &s, DATASET_FEATURES);
    prep_scan_free(&s);
    return rc;
}

static int check_labels(checker *c, int32_t **labels_out)
{
    char p[4096];
    struct prep_scan s;
    file_path(c, DATASET_LABELS, p, sizeof p);
    /* labels are kept (4 bytes per node) to check that split nodes are labelled */
    int32_t *lab = malloc(c->m.nodes * sizeof *lab);
    if (!lab)
        return sl_errf(c->err, sizeof c->err, -ENOMEM, "out of memory for %" PRIu64 " labels", c->m.nodes);
    int rc = prep_scan_open(&s, p, 1, c->err, sizeof c->err);
    if (rc == 0)
        rc = prep_scan_read(&s, lab, c->m.nodes * 4, c->err, sizeof c->err);
    for (uint64_t i = 0; rc == 0 && i < c->m.nodes; i++)
        if (lab[i] < -1 || lab[i] >= (int32_t)c->m.classes)
            rc = bad(c, "%s: node %" PRIu64 " has label %d, outside [-1, %u)", p, i, lab[i], c->m.classes);
    if (rc == 0)
        rc = finish_hash(c, &s, DATASET_LABELS);
    prep_scan_free(&s);
    if (rc < 0)
        free(lab);
    else
        *labels_out = lab;
    return rc;
}

/* split map: 2 bits per node, 0 = in no split, else split index + 1 */
static int check_splits(checker *c, const int32_t *lab)
{
    uint8_t *map = calloc(c->m.nodes / 4 + 1, 1);
    if (!map)
        return sl_errf(c->err, sizeof c->err, -ENOMEM, "out of memory for the split map");
    int rc = 0;
    bool wide = c->m.f[DATASET_TRAIN].dtype == DTYPE_U64;
    for (int sp = DATASET_TRAIN; rc == 0 && sp <= DATASET_TEST; sp++) {
        char p[4096];
        struct prep_scan s;
        const struct dataset_file *f = &c->m.f[sp];
        file_path(c, sp, p, sizeof p);
        rc = prep_scan_open(&s, p, 1, c->err, sizeof c->err);
        uint8_t tag = (uint8_t)(sp - DATASET_TRAIN + 1);
        for (uint64_t i = 0; rc == 0 && i < f->rows;) {
            size_t k = (size_t)SL_MIN(f->rows - i, CHUNK_ELEMS);
            const void *v = prep_scan_peek(&s, k * (wide ? 8 : 4), &rc, c->err, sizeof c->err);
            if (!v)
                break;
            for (size_t j = 0; j < k; j++, i++) {
                uint64_t id = load_id(v, j, wide);
                if (id >= c->m.nodes) {
                    rc = bad(c, "%s: entry %" PRIu64 " is node %" PRIu64 ", outside [0, %" PRIu64 ")", p, i, id, c->m.nodes);
                    break;
                }
                uint8_t old = (map[id / 4] >> (2 * (id % 4))) & 3;
                if (old == tag) {
                    rc = bad(c, "%s: node %" PRIu64 " appears twice", p, id);
                    break;
                }
                if (old) {
                    rc = bad(c, "%s: node %" PRIu64 " is also in %s; splits must be disjoint", p, id,
                             c->m.f[DATASET_TRAIN + old - 1].file);
                    break;
                }
                if (lab[id] < 0) {
                    rc = bad(c, "%s: node %" PRIu64 " has no label (-1) in %s", p, id, c->m.f[DATASET_LABELS].file);
                    break;
                }
                map[id / 4] |= (uint8_t)(tag << (2 * (id % 4)));
            }
        }
        if (rc == 0)
            rc = finish_hash(c, &s, sp);
        prep_scan_free(&s);
    }
    free(map);
    return rc;
}

static void check_usage(FILE *f)
{
    fprintf(f, "usage: gnnprep check DIR [--quiet]\n\n"
               "Verifies a dataset completely: dataset.toml, file sizes and XXH3 checksums,\n"
               "the CSC topology (indptr monotone and ending at the edge count, ids in range,\n"
               "neighbours ascending), finite features with zero padding, labels in [-1, C),\n"
               "split ids in range, unique, labelled and disjoint.\n"
               "Exit status: 0 valid, 2 invalid (the message names the file), 1 read failure.\n");
}

int prep_check_main(int argc, char **argv)
{
    checker c = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            check_usage(stdout);
            return PREP_EXIT_OK;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            c.quiet = true;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "gnnprep check: unknown option '%s'; see gnnprep check --help\n", argv[i]);
            return PREP_EXIT_BAD_INPUT;
        } else if (c.dir) {
            fprintf(stderr, "gnnprep check: more than one directory given ('%s' and '%s')\n", c.dir, argv[i]);
            return PREP_EXIT_BAD_INPUT;
        } else {
            c.dir = argv[i];
        }
    }
    if (!c.dir) {
        check_usage(stderr);
        return PREP_EXIT_BAD_INPUT;
    }
    double t0 = sl_now();
    int rc = dataset_meta_read(c.dir, &c.m, true, c.err, sizeof c.err);
    if (rc == 0) {
        if (!c.quiet)
            printf("checking %s: %" PRIu64 " nodes, %" PRIu64 " edges, %" PRIu64 " features (%s), %u classes\n", c.dir,
                   c.m.nodes, c.m.edges, c.m.feat_dim, dtype_name(c.m.f[DATASET_FEATURES].dtype), c.m.classes);
        int32_t *lab = NULL;
        if ((rc = check_indptr(&c)) == 0 && (rc = check_indices(&c)) == 0 && (rc = check_features(&c)) == 0 &&
            (rc = check_labels(&c, &lab)) == 0)
            rc = check_splits(&c, lab);
        free(lab);
    }
    fflush(stdout);
    if (rc < 0) {
        fprintf(stderr, "gnnprep check: %s\n", c.err);
        /* a premature end of file is a truncated file: invalid data */
        return rc == -EBADMSG || rc == -EIO ? PREP_EXIT_BAD_INPUT : prep_exit_code(rc);
    }
    printf("%s: valid (%.2f s)\n", c.dir, sl_now() - t0);
    return PREP_EXIT_OK;
}
