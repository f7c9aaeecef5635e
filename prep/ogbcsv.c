/* ogbcsv.c - OGB's CSV raw layout read as an struct imp_input (see ogbcsv.h):
 * count files read when opened, then labels, edges and feature rows parsed
 * line by line from their own readers, in batches imp_run asks for. */
#include "ogbcsv.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/util.h"
#include "lines.h"

/* Deflate expands data at most 1032-fold; a little margin on top. */
#define OGBCSV_MAX_RATIO 1040u

typedef struct csv_input {
    struct imp_input in; /* first: what imp_run sees */
    struct lines feat, lab, edge;
    float *row0;            /* (dim) line 1 of node-feat, parsed when opened; NULL once handed out */
    uint64_t feat_rows;     /* feature rows parsed (row 0 included) */
    uint64_t lab_rows;      /* labels parsed */
    uint64_t edge_rows;     /* edges parsed */
    uint64_t num_edges;     /* E from num-edge-list */
    bool feat_end, lab_end, edge_end;
    const char *nn_file;    /* base names of the count files, for messages */
    const char *ne_file;
} csv_input;

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* Length of the field starting at p (up to ',' or the end of the line). */
static int field_len(const char *p)
{
    size_t n = strcspn(p, ",");
    return (int)SL_MIN(n, (size_t)60);
}

static uint64_t count_columns(const char *line)
{
    uint64_t n = 1;
    for (const char *p = line; (p = strchr(p, ',')); p++)
        n++;
    return n;
}

/* ---- count files ---- */

/* Reads a file of one line holding one count (num-node-list.csv.gz,
 * num-edge-list.csv.gz: one line per graph, and a node-property dataset
 * is one graph). */
static int read_count(const char *path, const char *what, uint64_t *v, char *err, size_t errlen)
{
    struct lines l;
    int rc = lines_open(&l, path, err, errlen);
    if (rc < 0) {
        lines_close(&l);
        return rc;
    }
    char *line;
    size_t len;
    rc = lines_next(&l, &line, &len, err, errlen);
    if (rc == 0) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: empty; expected one line holding the %s count", path, what);
    } else if (rc > 0) {
        const char *p = line;
        int code = sl_text_uint(&p, v);
        if (code != SL_NUM_OK || *p)
            rc = sl_errf(err, errlen, code == SL_NUM_OVERFLOW ? -ERANGE : -EINVAL, "%s:1: \"%.60s\" is not %s "
                         "count; expected one non-negative integer", path, line,
                         code == SL_NUM_OVERFLOW ? "a 64-bit" : what[0] == 'e' ? "an edge" : "a node");
        else if ((rc = lines_next(&l, &line, &len, err, errlen)) > 0)
            rc = sl_errf(err, errlen, -EINVAL, "%s:2: a second line; a node-property dataset holds one graph, so the "
                         "file holds one %s count", path, what);
    }
    lines_close(&l);
    return rc;
}

/* ---- line parsers ---- */

/* One node-feat line: exactly dim comma-separated finite numbers into x. */
static int parse_feat(csv_input *c, const char *line, float *x, char *err, size_t errlen)
{
    const uint64_t dim = c->in.dim;
    const char *p = line;
    for (uint64_t col = 0; col < dim; col++) {
        char *end;
        float v = strtof(p, &end);
        if (end == p || isspace((unsigned char)*p) || (*end != ',' && *end != '\0')) {
            if (*p == ',' || !*p)
                return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": column %" PRIu64 ": empty; each row holds %"
                               PRIu64 " numbers separated by commas", c->feat.path, c->feat.lineno, col + 1, dim);
            return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": column %" PRIu64 ": \"%.*s\" is not a number; "
                           "features must be decimal numbers", c->feat.path, c->feat.lineno, col + 1, field_len(p), p);
        }
        if (!isfinite(v))
            return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": column %" PRIu64 ": \"%.*s\" is not a finite "
                           "number; features must be finite and within the float32 range", c->feat.path,
                           c->feat.lineno, col + 1, field_len(p), p);
        x[col] = v;
        p = end;
        if (col + 1 < dim) {
            if (*p != ',')
                return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": %" PRIu64 " columns, expected %" PRIu64 " (as "
                               "on line 1); every row holds one number per feature", c->feat.path, c->feat.lineno,
                               col + 1, dim);
            p++;
        }
    }
    if (*p)
        return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": %" PRIu64 " columns, expected %" PRIu64 " (as on line "
                       "1); every row holds one number per feature", c->feat.path, c->feat.lineno,
                       dim + count_columns(p) - 1, dim);
    return 0;
}

/* One node-label line: a whole number >= 0, or -1 / nan / empty for an
 * unlabelled node. */
static int parse_label(csv_input *c, const char *s, int32_t *out, char *err, size_t errlen)
{
    const char *path = c->lab.path;
    const uint64_t ln = c->lab.lineno;
    if (!*s || !strcasecmp(s, "nan")) {
        *out = -1;
        return 0;
    }
    if (strchr(s, ','))
        return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": %" PRIu64 " columns; expected one class number per "
                       "line (multi-label targets, such as ogbn-proteins' 112 binary tasks, are not supported)", path,
                       ln, count_columns(s));
    const char *p = s + (*s == '-');
    uint64_t v;
    if (sl_text_uint(&p, &v) == SL_NUM_OK && !*p) {
        if (*s == '-' ? v <= 1 : v < INT32_MAX) {
            *out = *s == '-' ? -(int32_t)v : (int32_t)v;
            return 0;
        }
    } else {
        char *end;
        double d = strtod(s, &end);
        if (end == s || *end || isspace((unsigned char)*s))
            return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": \"%.60s\" is not a number; each line holds one "
                           "class number, or nan or nothing for an unlabelled node", path, ln, s);
        if (isnan(d)) {
            *out = -1;
            return 0;
        }
        if (d >= -1 && d == floor(d) && d < (double)INT32_MAX) {
            *out = (int32_t)d;
            return 0;
        }
    }
    return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": label %.60s is not a class number; labels must be whole "
                   "numbers >= 0 (below 2^31 - 1), with nan or an empty line for unlabelled nodes", path, ln, s);
}

/* One edge line: "SRC,DST", two node ids below nodes. */
static int parse_edge(csv_input *c, const char *line, uint64_t *src, uint64_t *dst, char *err, size_t errlen)
{
    const char *path = c->edge.path;
    const uint64_t ln = c->edge.lineno, nodes = c->in.nodes;
    const char *p = line;
    uint64_t v[2];
    for (int col = 0; col < 2; col++) {
        if (col) {
            if (!*p)
                return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": one column; each line must be SRC,DST (two "
                               "node ids separated by a comma)", path, ln);
            p++; /* the ',' the first column ended at */
        }
        const char *f = p;
        int code = sl_text_uint(&p, &v[col]);
        if (code == SL_NUM_OK && *p && *p != ',')
            code = SL_NUM_NONE;
        if (code != SL_NUM_OK)
            return sl_errf(err, errlen, code == SL_NUM_OVERFLOW ? -ERANGE : -EINVAL, "%s:%" PRIu64 ": column %d: "
                           "\"%.*s\" %s; each line must be SRC,DST", path, ln, col + 1, field_len(f), f,
                           sl_text_uint_error(code));
        if (v[col] >= nodes)
            return sl_errf(err, errlen, -ERANGE, "%s:%" PRIu64 ": column %d: node id %" PRIu64 " is out of range; "
                           "the graph has %" PRIu64 " nodes (ids 0..%" PRIu64 ", %s)", path, ln, col + 1, v[col],
                           nodes, nodes - 1, c->nn_file);
    }
    if (*p)
        return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": %" PRIu64 " columns; each line must be SRC,DST (OGB "
                       "keeps edge features in edge-feat.csv.gz)", path, ln, 1 + count_columns(p));
    *src = v[0];
    *dst = v[1];
    return 0;
}

/* ---- the struct imp_input table ---- */

/* Next line of l, or 0 at its end once the count is checked: exactly
 * `want` lines (what: "labels", "rows", "edges"; from: the count's file). */
static int next_line(struct lines *l, uint64_t done, uint64_t want, const char *what, const char *from, char **line,
                     char *err, size_t errlen)
{
    size_t len;
    int rc = lines_next(l, line, &len, err, errlen);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        if (done == want)
            return 0;
        if (done == 0)
            return sl_errf(err, errlen, -EINVAL, "%s: empty, but %s says %" PRIu64 "; the files disagree", l->path,
                           from, want);
        return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": ends after %" PRIu64 " %s, but %s says %" PRIu64 "; "
                       "the files disagree", l->path, l->lineno, done, what, from, want);
    }
    if (done == want)
        return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": more %s than %s's count of %" PRIu64 "; the files "
                       "disagree", l->path, l->lineno, what, from, want);
    return 1;
}

static int csv_labels(struct imp_input *in, int32_t *out, size_t cap, size_t *n, char *err, size_t errlen)
{
    csv_input *c = (csv_input *)in;
    size_t k = 0;
    while (k < cap && !c->lab_end) {
        char *line;
        int rc = next_line(&c->lab, c->lab_rows, in->nodes, "labels", c->nn_file, &line, err, errlen);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            c->lab_end = true;
            break;
        }
        if ((rc = parse_label(c, line, &out[k], err, errlen)) < 0)
            return rc;
        c->lab_rows++;
        k++;
    }
    *n = k;
    return 0;
}

static int csv_edges(struct imp_input *in, uint64_t *src, uint64_t *dst, size_t cap, size_t *n, char *err,
                     size_t errlen)
{
    csv_input *c = (csv_input *)in;
    size_t k = 0;
    while (k < cap && !c->edge_end) {
        char *line;
        int rc = next_line(&c->edge, c->edge_rows, c->num_edges, "edges", c->ne_file, &line, err, errlen);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            c->edge_end = true;
            break;
        }
        if ((rc = parse_edge(c, line, &src[k], &dst[k], err, errlen)) < 0)
            return rc;
        c->edge_rows++;
        k++;
    }
    *n = k;
    return 0;
}

static int csv_features(struct imp_input *in, float *x, size_t cap, size_t *n, char *err, size_t errlen)
{
    csv_input *c = (csv_input *)in;
    const uint64_t dim = in->dim;
    size_t k = 0;
    if (c->row0 && cap) {
        memcpy(x, c->row0, dim * sizeof *x);
        free(c->row0);
        c->row0 = NULL;
        k = 1;
    }
    while (k < cap && !c->feat_end) {
        char *line;
        int rc = next_line(&c->feat, c->feat_rows, in->nodes, "rows", c->nn_file, &line, err, errlen);
        if (rc < 0)
            return rc;
        if (rc == 0) {
            c->feat_end = true;
            break;
        }
        if ((rc = parse_feat(c, line, x + k * dim, err, errlen)) < 0)
            return rc;
        c->feat_rows++;
        k++;
    }
    *n = k;
    return 0;
}

static void csv_close(struct imp_input *in)
{
    csv_input *c = (csv_input *)in;
    if (!c)
        return;
    lines_close(&c->feat);
    lines_close(&c->lab);
    lines_close(&c->edge);
    free(c->row0);
    free(c);
}

static const struct imp_input_ops csv_ops = {
    .labels = csv_labels,
    .edges = csv_edges,
    .features = csv_features,
    .close = csv_close,
};

/* Opens node-feat, takes F from line 1 and parses that line into row0. */
static int open_features(csv_input *c, const char *path, char *err, size_t errlen)
{
    int rc = lines_open(&c->feat, path, err, errlen);
    if (rc == -ENOENT)
        return sl_errf(err, errlen, rc, "%s: no such file; this importer needs node features, one row per node "
                       "(ogbn-proteins ships none: derive them, e.g. by averaging edge-feat.csv.gz over each node's "
                       "edges, and write them here)", path);
    if (rc < 0)
        return rc;
    struct stat st;
    if (stat(path, &st) < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot stat: %s", path, strerror(errno));
    char *line;
    size_t len;
    if ((rc = lines_next(&c->feat, &line, &len, err, errlen)) < 0)
        return rc;
    if (rc == 0)
        return sl_errf(err, errlen, -EINVAL, "%s: empty, but %s says %" PRIu64 " nodes; expected one row of "
                       "features per node", path, c->nn_file, c->in.nodes);
    uint64_t dim = count_columns(line);
    if (dim > IMP_MAX_DIM)
        return sl_errf(err, errlen, -EINVAL, "%s:1: %" PRIu64 " columns; the feature dimension must be 1..%u", path,
                       dim, IMP_MAX_DIM);
    c->in.dim = dim;
    /* A row of F columns takes at least 2F bytes ("0," ... "0\n"), and the
     * file expands at most OGBCSV_MAX_RATIO-fold: a node count beyond that
     * cannot be right, and would make the importer allocate for it. */
    uint64_t most;
    if (sl_mul_ovf((uint64_t)st.st_size, OGBCSV_MAX_RATIO, &most))
        most = UINT64_MAX;
    most = most / (2 * dim) + 1;
    if (c->in.nodes > most)
        return sl_errf(err, errlen, -EINVAL, "%s says %" PRIu64 " nodes, but %s (%" PRIu64 " bytes, %" PRIu64
                       " columns) cannot hold more than %" PRIu64 " rows; one of the files is wrong", c->nn_file,
                       c->in.nodes, path, (uint64_t)st.st_size, dim, most);
    c->row0 = malloc(dim * sizeof *c->row0);
    if (!c->row0)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory for a feature row", path);
    if ((rc = parse_feat(c, line, c->row0, err, errlen)) < 0)
        return rc;
    c->feat_rows = 1;
    return 0;
}

int ogbcsv_open(struct imp_input **out, const struct imp_job *j, char *err, size_t errlen)
{
    *out = NULL;
    csv_input *c = calloc(1, sizeof *c);
    if (!c)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    c->in.ops = &csv_ops;
    c->in.feat_type = "text";
    c->in.edge_fmt = "csv";
    c->nn_file = base_name(j->num_nodes.path);
    c->ne_file = base_name(j->num_edges.path);
    int rc;
    if ((rc = read_count(j->num_nodes.path, "node", &c->in.nodes, err, errlen)) < 0)
        goto fail;
    if (c->in.nodes == 0) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: zero nodes; a dataset needs at least one node", j->num_nodes.path);
        goto fail;
    }
    if ((rc = read_count(j->num_edges.path, "edge", &c->num_edges, err, errlen)) < 0)
        goto fail;
    c->in.edges = c->num_edges <= (uint64_t)INT64_MAX ? (int64_t)c->num_edges : -1;
    if ((rc = open_features(c, j->feat.path, err, errlen)) < 0)
        goto fail;
    if ((rc = lines_open(&c->lab, j->labels.path, err, errlen)) < 0 ||
        (rc = lines_open(&c->edge, j->edges.path, err, errlen)) < 0)
        goto fail;
    snprintf(c->in.feat_name, sizeof c->in.feat_name, "%s", j->feat.path);
    snprintf(c->in.labels_name, sizeof c->in.labels_name, "%s", j->labels.path);
    snprintf(c->in.edges_name, sizeof c->in.edges_name, "%s", j->edges.path);
    *out = &c->in;
    return 0;
fail:
    csv_close(&c->in);
    return rc;
}
