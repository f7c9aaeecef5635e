/* importutil.c - the conversion both importers run: inputs checked up
 * front, then labels, splits, topology and features streamed into a staged
 * dataset (see importutil.h). */
#include "importutil.h"
#include "prep.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "csc.h"
#include "splits.h"

#define IMP_EDGE_BATCH (1u << 18) /* edges per csc_add */

const char imp_common_help[] =
    "  --mem-limit BYTES   memory for sorting the edges, e.g. 512M or 8G (default 1G,\n"
    "                      at least 1M); a larger edge list is sorted in runs spilled\n"
    "                      into OUT's staging directory and merged\n"
    "  --dtype f32|f16     feature storage type (default: f16 when the input features\n"
    "                      are float16, else f32)\n"
    "  --undirected        also add the reverse (d, s) of every edge (s, d)\n"
    "  --dedupe            keep one copy of repeated edges (after --undirected)\n"
    "  --drop-self-loops   drop edges (v, v)\n"
    "  --quiet             no progress lines\n"
    "  -h, --help          this text\n";

void imp_job_init(struct imp_job *j, const char *cmd)
{
    memset(j, 0, sizeof *j);
    j->cmd = cmd;
    j->mem_limit = IMP_DEFAULT_MEM_LIMIT;
    j->dtype = DTYPE_NONE;
}

int imp_opt_value(int argc, char **argv, int *i, const char *name, const char **val, char *err, size_t errlen)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n))
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        *i += 1;
        return 1;
    }
    if (a[n])
        return 0;
    if (*i + 1 >= argc)
        return sl_errf(err, errlen, -EINVAL, "%s needs a value", name);
    *val = argv[*i + 1];
    *i += 2;
    return 1;
}

int imp_common_opt(struct imp_job *j, int argc, char **argv, int *i, char *err, size_t errlen)
{
    static const struct { const char *name; size_t off;
    } flags[] = {
        {"--undirected", offsetof(struct imp_job, undirected)},
        {"--dedupe", offsetof(struct imp_job, dedupe)},
        {"--drop-self-loops", offsetof(struct imp_job, drop_self_loops)},
        {"--quiet", offsetof(struct imp_job, quiet)},
    };
    for (size_t k = 0; k < SL_ARRAY_LEN(flags); k++)
        if (!strcmp(argv[*i], flags[k].name)) {
            *(bool *)((char *)j + flags[k].off) = true;
            *i += 1;
            return 1;
        }
    const char *v;
    int r = imp_opt_value(argc, argv, i, "--mem-limit", &v, err, errlen);
    if (r < 0)
        return r;
    if (r) {
        uint64_t x;
        if (sl_parse_u64(v, true, &x) < 0)
            return sl_errf(err, errlen, -EINVAL, "--mem-limit %s: expected a byte count such as 512M or 8G", v);
        if (x < CSC_MIN_MEM)
            return sl_errf(err, errlen, -EINVAL, "--mem-limit %s: must be at least 1M", v);
        j->mem_limit = x;
        return 1;
    }
    r = imp_opt_value(argc, argv, i, "--dtype", &v, err, errlen);
    if (r < 0)
        return r;
    if (r) {
        j->dtype = dtype_parse(v);
        if (j->dtype != DTYPE_F32 && j->dtype != DTYPE_F16)
            return sl_errf(err, errlen, -EINVAL, "--dtype %s: must be f32 or f16", v);
        return 1;
    }
    return 0;
}

/* Shell-quotes s onto buf at *n when it holds anything but safe chars. */
static void append_arg(char *buf, size_t len, size_t *n, const char *s)
{
    bool plain = *s != '\0';
    for (const char *p = s; *p; p++)
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./:,+@%", *p))
            plain = false;
    int k;
    if (plain) {
        k = snprintf(buf + *n, len - *n, " %s", s);
    } else {
        k = snprintf(buf + *n, len - *n, " '");
        for (const char *p = s; *p && k > 0 && *n + (size_t)k < len; p++) {
            int m = *p == '\'' ? snprintf(buf + *n + k, len - *n - (size_t)k, "'\\''")
                               : snprintf(buf + *n + k, len - *n - (size_t)k, "%c", *p);
            k += m;
        }
        if (k > 0 && *n + (size_t)k < len)
            k += snprintf(buf + *n + k, len - *n - (size_t)k, "'");
    }
    if (k > 0)
        *n = SL_MIN(*n + (size_t)k, len - 1);
}

void imp_set_source(struct imp_job *j, int argc, char **argv)
{
    size_t n = (size_t)snprintf(j->source, sizeof j->source, "gnnprep");
    for (int i = 0; i < argc && n + 1 < sizeof j->source; i++)
        append_arg(j->source, sizeof j->source, &n, argv[i]);
}

/* ------------------------------------------------------------------ */

static void say(const struct imp_job *j, const char *fmt, ...) SL_PRINTF(2, 3);
static void say(const struct imp_job *j, const char *fmt, ...)
{
    if (j->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    printf("gnnprep %s: ", j->cmd);
    vprintf(fmt, ap);
    putchar('\n');
    fflush(stdout);
    va_end(ap);
}

/* A "\r"-updated progress line on a terminal, at most every half second. */
typedef struct progress {
    const struct imp_job *j;
    const char *what;
    bool tty;
    double last;
} progress;

static void progress_init(progress *p, const struct imp_job *j, const char *what)
{
    p->j = j;
    p->what = what;
    p->tty = !j->quiet && isatty(STDERR_FILENO);
    p->last = sl_now();
}

static void progress_tick(progress *p, uint64_t done, int64_t total)
{
    if (!p->tty)
        return;
    double now = sl_now();
    if (now - p->last < 0.5)
        return;
    p->last = now;
    if (total > 0)
        fprintf(stderr, "\r%s: %" PRIu64 " / %" PRId64 " (%.1f%%)   ", p->what, done, total,
                100.0 * (double)done / (double)total);
    else
        fprintf(stderr, "\r%s: %" PRIu64 "   ", p->what, done);
}

static void progress_done(progress *p)
{
    if (p->tty)
        fprintf(stderr, "\r%60s\r", "");
}

/* ---- the conversion ---- */

#define IMP_CLASSES_SEEN (1u << 24) /* labels below this are counted as used classes (a 2 MiB bitmap) */

/* Streams the labels into labels.bin (i32) and marks labelled nodes in the
 * bitmap lmap (N bits). */
static int write_labels(struct imp_input *in, const char *path, struct dataset_file *f, uint32_t *classes,
                        uint64_t *labelled, uint8_t *lmap, char *err, size_t errlen)
{
    const size_t chunk = IMP_LABEL_CHUNK;
    int32_t *out = malloc(chunk * sizeof *out);
    struct file_writer w = {.fd = -1};
    int rc = 0;
    int64_t max = -1;
    uint64_t have = 0, i = 0;
    /* the classes used, one bit each (up to IMP_CLASSES_SEEN): a stray
     * label far above the others would silently become the class count */
    uint8_t *seen = calloc(IMP_CLASSES_SEEN / 8, 1);
    if (!out || !seen) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for labels");
        goto out;
    }
    if ((rc = file_writer_open(&w, path, err, errlen)) < 0)
        goto out;
    for (;;) {
        size_t k;
        if ((rc = prep_interrupted(err, errlen)) < 0 || (rc = in->ops->labels(in, out, chunk, &k, err, errlen)) < 0)
            goto out;
        if (!k)
            break;
        if (k > in->nodes - i) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: more labels than the %" PRIu64 " nodes", in->labels_name,
                         in->nodes);
            goto out;
        }
        for (size_t t = 0; t < k; t++) {
            int32_t v = out[t];
            max = SL_MAX(max, (int64_t)v);
            if (v >= 0) {
                have++;
                lmap[(i + t) / 8] |= (uint8_t)(1u << ((i + t) % 8));
                if (v < (int32_t)IMP_CLASSES_SEEN)
                    seen[v / 8] |= (uint8_t)(1u << (v % 8));
            }
        }
        if ((rc = file_writer_write(&w, out, k * sizeof *out, err, errlen)) < 0)
            goto out;
        i += k;
    }
    if (i != in->nodes) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: %" PRIu64 " labels for %" PRIu64 " nodes; they must match",
                     in->labels_name, i, in->nodes);
        goto out;
    }
    if (max < 0) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: no node has a label; a training dataset needs labelled nodes",
                     in->labels_name);
        goto out;
    }
    uint64_t bytes, h;
    if ((rc = file_writer_close(&w, &bytes, &h, err, errlen)) < 0)
        goto out;
    dataset_file_set(f, "labels.bin", DTYPE_I32, in->nodes, 1, bytes, h);
    *classes = (uint32_t)(max + 1);
    *labelled = have;
    uint64_t used = 0;
    for (uint64_t b = 0; b < SL_MIN((uint64_t)max + 1, (uint64_t)IMP_CLASSES_SEEN); b++)
        used += (seen[b / 8] >> (b % 8)) & 1;
    if (max >= (int64_t)IMP_CLASSES_SEEN || used * 2 < (uint64_t)max + 1)
        fprintf(stderr,
                "gnnprep: warning: %s: the largest label is %" PRId64 ", so the dataset gets %" PRId64
                " classes (and a model that many outputs), but only %" PRIu64 "%s of them are used; if %" PRId64
                " is a stray value, fix the labels\n",
                in->labels_name, max, max + 1, used, max >= (int64_t)IMP_CLASSES_SEEN ? " or more" : "", max);
out:
    file_writer_free(&w);
    free(out);
    free(seen);
    return rc;
}

static int write_features(const struct imp_job *j, struct imp_input *in, enum dtype dt, const char *path,
                          struct dataset_file *f, char *err, size_t errlen)
{
    const uint64_t n = in->nodes, dim = in->dim;
    const size_t rows = (size_t)SL_MAX(1, IMP_CHUNK_BYTES / (dim * sizeof(float)));
    float *x = malloc(rows * dim * sizeof *x);
    struct feat_writer fw;
    memset(&fw, 0, sizeof fw);
    fw.w.fd = -1;
    int rc = 0;
    uint64_t i = 0;
    if (!x) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory for a feature buffer", in->feat_name);
        goto out;
    }
    if ((rc = feat_writer_open(&fw, path, dt, dim, err, errlen)) < 0)
        goto out;
    progress pg;
    progress_init(&pg, j, "features");
    for (;;) {
        size_t k;
        if ((rc = prep_interrupted(err, errlen)) < 0 || (rc = in->ops->features(in, x, rows, &k, err, errlen)) < 0)
            goto out;
        if (!k)
            break;
        if (k > n - i) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: more feature rows than the %" PRIu64 " nodes", in->feat_name, n);
            goto out;
        }
        for (size_t t = 0; t < k; t++) {
            const float *row = x + t * dim;
            for (uint64_t c = 0; dt == DTYPE_F16 && c < dim; c++)
                if (fabsf(row[c]) >= 65520.0f) {
                    rc = sl_errf(err, errlen, -EINVAL, "%s: row %" PRIu64 ", column %" PRIu64 ": %g does not fit in "
                                 "float16; store the features as f32 (--dtype f32)", in->feat_name, i + t, c,
                                 (double)row[c]);
                    goto out;
                }
            if ((rc = feat_writer_put(&fw, row, err, errlen)) < 0)
                goto out;
        }
        i += k;
        progress_tick(&pg, i, (int64_t)n);
    }
    progress_done(&pg);
    if (i != n) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: %" PRIu64 " feature rows for %" PRIu64 " nodes; they must match",
                     in->feat_name, i, n);
        goto out;
    }
    rc = feat_writer_close(&fw, f, err, errlen);
out:
    feat_writer_free(&fw);
    free(x);
    return rc;
}

static int write_topology(const struct imp_job *j, struct imp_input *in, const struct dataset_dir *d,
                          struct dataset_meta *m, uint64_t *read, uint64_t *runs, char *err, size_t errlen)
{
    struct csc_opts o;
    memset(&o, 0, sizeof o);
    o.nodes = in->nodes;
    o.mem_limit = j->mem_limit;
    o.undirected = j->undirected;
    o.dedupe = j->dedupe;
    o.drop_self_loops = j->drop_self_loops;
    o.tmpdir = d->tmp;
    struct csc *c = NULL;
    uint64_t *src = malloc(IMP_EDGE_BATCH * sizeof *src), *dst = malloc(IMP_EDGE_BATCH * sizeof *dst);
    int rc;
    char p1[4096], p2[4096], msg[1024];
    if (!src || !dst) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for an edge batch");
        goto out;
    }
    if ((rc = csc_init(&c, &o, msg, sizeof msg)) < 0) {
        sl_errf(err, errlen, rc, "%s", msg);
        goto out;
    }
    progress pg;
    progress_init(&pg, j, "edges");
    *read = 0;
    /* a test hook (docs/reliability.md): wait here for a signal, so a test
     * can interrupt an import that is surely under way */
    while (sl_env_on("SLUICE_FAULT_PREP_WAIT_SIGNAL") && !prep_stop)
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    for (;;) {
        size_t n;
        if ((rc = prep_interrupted(err, errlen)) < 0 ||
            (rc = in->ops->edges(in, src, dst, IMP_EDGE_BATCH, &n, err, errlen)) < 0)
            goto out;
        if (!n)
            break;
        if ((rc = csc_add(c, src, dst, n, msg, sizeof msg)) < 0) {
            sl_errf(err, errlen, rc, "%s: %s", in->edges_name, msg);
            goto out;
        }
        *read += n;
        progress_tick(&pg, *read, in->edges);
    }
    progress_done(&pg);
    if ((rc = dataset_dir_path(d, "indptr.bin", p1, sizeof p1)) < 0 ||
        (rc = dataset_dir_path(d, "indices.bin", p2, sizeof p2)) < 0) {
        sl_errf(err, errlen, rc, "%s: path too long", d->tmp);
        goto out;
    }
    rc = csc_finish(c, p1, p2, &m->f[DATASET_INDPTR], &m->f[DATASET_INDICES], &m->edges, err, errlen);
    if (rc == 0)
        rc = prep_interrupted(err, errlen); /* the merge does not look: a signal during it is seen here */
    struct csc_stats st;
    csc_stats_get(c, &st);
    *runs = st.runs;
out:
    csc_free(c);
    free(src);
    free(dst);
    return rc;
}

static const char *const split_file[IMP_SPLITS] = {"train.bin", "val.bin", "test.bin"};
static const char *const split_name[IMP_SPLITS] = {"train", "val", "test"};
static const int split_slot[IMP_SPLITS] = {DATASET_TRAIN, DATASET_VAL, DATASET_TEST};

int imp_run(const struct imp_job *j, char *err, size_t errlen)
{
    double t0 = sl_now();
    struct dataset_dir d;
    struct dataset_meta m;
    memset(&m, 0, sizeof m);
    struct imp_input *in = NULL;
    struct imp_split sp[IMP_SPLITS];
    memset(sp, 0, sizeof sp);
    uint8_t *lmap = NULL; /* labelled nodes, one bit each */
    char path[4096];
    int rc = dataset_dir_begin(&d, j->out, err, errlen);
    if (rc < 0)
        return rc;
    struct prep_signals sigs; /* Ctrl-C: the staging directory goes, exit 130 */
    prep_signals_on(&sigs);

    /* 1. every header, so that shapes and dtypes fail before any work */
    if ((rc = (j->open ? j->open : imp_input_open_npy)(&in, j, err, errlen)) < 0)
        goto out;
    const uint64_t nodes = in->nodes, dim = in->dim;
    enum dtype dt = j->dtype != DTYPE_NONE ? j->dtype : in->feat_f16 ? DTYPE_F16 : DTYPE_F32;
    say(j, "%" PRIu64 " nodes, %" PRIu64 " %s features per node (stored as %s); edges: %s", nodes, dim, in->feat_type,
        dtype_name(dt), in->edge_fmt);

    /* 2. labels */
    uint64_t labelled = 0;
    lmap = calloc(nodes / 8 + 1, 1);
    if (!lmap) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for a bitmap of %" PRIu64 " nodes", nodes);
        goto out;
    }
    if ((rc = dataset_dir_path(&d, "labels.bin", path, sizeof path)) < 0 ||
        (rc = write_labels(in, path, &m.f[DATASET_LABELS], &m.classes, &labelled, lmap, err, errlen)) < 0)
        goto out;
    say(j, "labels: %u classes, %" PRIu64 " of %" PRIu64 " nodes labelled", m.classes, labelled, nodes);

    /* 3. splits */
    for (int s = 0; s < IMP_SPLITS; s++)
        if ((rc = imp_split_read(&sp[s], j->split[s], split_name[s], nodes, err, errlen)) < 0)
            goto out;
    if (sp[IMP_TRAIN].n == 0) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: no node ids; the training split must not be empty", sp[IMP_TRAIN].path);
        goto out;
    }
    if ((rc = imp_splits_check(sp, IMP_SPLITS, err, errlen)) < 0 ||
        (rc = imp_splits_labelled(sp, IMP_SPLITS, lmap, in->labels_name, err, errlen)) < 0)
        goto out;
    free(lmap);
    lmap = NULL;
    for (int s = 0; s < IMP_SPLITS; s++) {
        if ((rc = dataset_dir_path(&d, split_file[s], path, sizeof path)) < 0 ||
            (rc = imp_split_write(&sp[s], nodes, path, &m.f[split_slot[s]], err, errlen)) < 0)
            goto out;
    }
    say(j, "splits: train %" PRIu64 ", val %" PRIu64 ", test %" PRIu64, sp[0].n, sp[1].n, sp[2].n);

    /* 4. topology */
    double t1 = sl_now();
    uint64_t read = 0, runs = 0;
    if ((rc = write_topology(j, in, &d, &m, &read, &runs, err, errlen)) < 0)
        goto out;
    say(j, "topology: %" PRIu64 " edges read, %" PRIu64 " stored, %" PRIu64 " sorted runs spilled (%.1f s)", read,
        m.edges, runs, sl_now() - t1);

    /* 5. features */
    t1 = sl_now();
    if ((rc = dataset_dir_path(&d, "features.bin", path, sizeof path)) < 0 ||
        (rc = write_features(j, in, dt, path, &m.f[DATASET_FEATURES], err, errlen)) < 0)
        goto out;
    say(j, "features: %" PRIu64 " x %" PRIu64 " %s, row stride %" PRIu64 " bytes (%.1f s)", nodes, dim, dtype_name(dt),
        m.f[DATASET_FEATURES].row_stride, sl_now() - t1);

    /* 6. dataset.toml, then the rename that publishes OUT (the last moment to stop) */
    if ((rc = prep_interrupted(err, errlen)) < 0)
        goto out;
    m.version = DATASET_VERSION;
    m.nodes = nodes;
    m.feat_dim = dim;
    m.feat_align = DATASET_FEAT_ALIGN;
    snprintf(m.source, sizeof m.source, "%s", j->source);
    if ((rc = dataset_dir_commit(&d, &m, err, errlen)) < 0)
        goto out;
    char mem[32];
    say(j, "wrote %s: %" PRIu64 " nodes, %" PRIu64 " edges, %u classes in %.1f s (peak memory %s)", j->out, nodes,
        m.edges, m.classes, sl_now() - t0, sl_fmt_bytes(sl_peak_rss(), mem, sizeof mem));
out:
    free(lmap);
    for (int s = 0; s < IMP_SPLITS; s++)
        imp_split_free(&sp[s]);
    if (in)
        in->ops->close(in);
    if (rc < 0 && prep_stop) /* a read the signal cut short reports the signal, not EINTR */
        rc = prep_interrupted(err, errlen);
    if (rc < 0)
        dataset_dir_abort(&d);
    prep_signals_off(&sigs);
    return rc;
}
