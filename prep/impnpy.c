/* impnpy.c - imp_run's input from .npy arrays, .npz members and edge-list
 * files (imp_input_open_npy, see importutil.h): every header is checked when
 * opened; labels, features and edges are then streamed in chunks of about
 * IMP_CHUNK_BYTES raw bytes, each value checked on the way. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "importutil.h"
#include "npy.h"

typedef struct npy_input {
    struct imp_input in; /* first: what imp_run sees */
    struct npy feat, lab;
    struct edges *edges;
    uint64_t feat_done;     /* feature rows handed out */
    uint64_t lab_done;      /* labels handed out */
    bool feat_ended, lab_ended;
    void *lab_raw;          /* (IMP_LABEL_CHUNK) raw label elements */
    double *lab_f;          /* (IMP_LABEL_CHUNK) float labels converted */
    int64_t *lab_i;         /* (IMP_LABEL_CHUNK) integer labels converted */
    void *feat_raw;         /* (feat_rows, dim) raw feature elements */
    size_t feat_rows;
} npy_input;

static int open_src(struct npy *r, const struct imp_src *s, char *err, size_t errlen)
{
    if (s->member)
        return npy_open_npz(r, s->path, s->member, false, err, errlen);
    return npy_open(r, s->path, err, errlen);
}

static int check_features(const struct npy *r, char *err, size_t errlen)
{
    const struct npy_hdr *h = &r->h;
    char sh[256];
    npy_shape_str(h, sh, sizeof sh);
    if (!npy_is_float(h->type) && !npy_is_int(h->type))
        return sl_errf(err, errlen, -EINVAL,
                       "%s: dtype %s: features must be numbers (float32, float16, float64 or "
                       "integers)",
                       r->name, npy_type_name(h->type));
    if (h->ndim != 2)
        return sl_errf(err, errlen, -EINVAL, "%s: shape %s: features must be a 2-D array, one row per node (reshape "
                       "a vector with a.reshape(-1, 1))", r->name, sh);
    if (h->shape[0] == 0)
        return sl_errf(err, errlen, -EINVAL, "%s: shape %s: zero nodes; a dataset needs at least one node", r->name, sh);
    if (h->shape[1] == 0 || h->shape[1] > IMP_MAX_DIM)
        return sl_errf(err, errlen, -EINVAL, "%s: shape %s: the feature dimension must be 1..%u", r->name, sh,
                       IMP_MAX_DIM);
    return 0;
}

static int check_labels(const struct npy *r, uint64_t nodes, char *err, size_t errlen)
{
    const struct npy_hdr *h = &r->h;
    char sh[256];
    npy_shape_str(h, sh, sizeof sh);
    if (!npy_is_float(h->type) && !npy_is_int(h->type))
        return sl_errf(err, errlen, -EINVAL,
                       "%s: dtype %s: labels must be integers, or floats with NaN for "
                       "unlabelled nodes",
                       r->name, npy_type_name(h->type));
    if (h->ndim < 1 || h->ndim > 2 || (h->ndim == 2 && h->shape[1] != 1))
        return sl_errf(err, errlen, -EINVAL, "%s: shape %s: labels must be a vector (N,) or a column (N, 1)", r->name,
                       sh);
    if (h->shape[0] != nodes)
        return sl_errf(err, errlen, -EINVAL, "%s: shape %s: %" PRIu64 " labels for %" PRIu64 " nodes (the features' "
                       "row count); they must match", r->name, sh, h->shape[0], nodes);
    return 0;
}

/* OGB's num_nodes_list: one entry per graph; a node-property dataset has
 * one graph, and its count must match the features. */
static int check_num_nodes(const struct imp_job *j, uint64_t nodes, char *err, size_t errlen)
{
    struct npy r;
    int rc = npy_open_npz(&r, j->num_nodes.path, j->num_nodes.member, true, err, errlen);
    if (rc != 0)
        return rc < 0 ? rc : 0;
    char sh[256];
    npy_shape_str(&r.h, sh, sizeof sh);
    int64_t v = 0;
    unsigned char raw[8];
    if (!npy_is_int(r.h.type) || r.h.count != 1) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "%s: %s %s: expected one integer node count (a node-property dataset "
                     "holds one graph)",
                     r.name, sh, npy_type_name(r.h.type));
    } else if ((rc = npy_read(&r, raw, r.h.itemsize, err, errlen)) == 0 && (rc = npy_end(&r, err, errlen)) == 0) {
        npy_to_i64(r.h.type, raw, &v, 1);
        if (v < 0 || (uint64_t)v != nodes)
            rc = sl_errf(err, errlen, -EINVAL, "%s: the graph has %" PRId64 " nodes but the features have %" PRIu64
                         " rows; the archive is inconsistent", r.name, v, nodes);
    }
    npy_close(&r);
    return rc;
}

static void npy_free_label_buffers(npy_input *s)
{
    free(s->lab_raw);
    free(s->lab_f);
    free(s->lab_i);
    s->lab_raw = NULL;
    s->lab_f = NULL;
    s->lab_i = NULL;
}

/* Labels as class numbers: integers (-1 = unlabelled) or whole floats (NaN
 * = unlabelled); anything else names the node. */
static int npy_labels(struct imp_input *in, int32_t *out, size_t cap, size_t *n, char *err, size_t errlen)
{
    npy_input *s = (npy_input *)in;
    struct npy *r = &s->lab;
    *n = 0;
    if (s->lab_done == r->h.count) {
        int rc = 0;
        if (!s->lab_ended)
            rc = npy_end(r, err, errlen);
        s->lab_ended = true;
        npy_free_label_buffers(s);
        return rc;
    }
    if (!s->lab_raw) {
        s->lab_raw = malloc(IMP_LABEL_CHUNK * r->h.itemsize);
        s->lab_f = malloc(IMP_LABEL_CHUNK * sizeof *s->lab_f);
        s->lab_i = malloc(IMP_LABEL_CHUNK * sizeof *s->lab_i);
        if (!s->lab_raw || !s->lab_f || !s->lab_i)
            return sl_errf(err, errlen, -ENOMEM, "out of memory for labels");
    }
    const uint64_t i = s->lab_done;
    size_t k = (size_t)SL_MIN(SL_MIN((uint64_t)IMP_LABEL_CHUNK, (uint64_t)cap), r->h.count - i);
    int rc = npy_read(r, s->lab_raw, k * r->h.itemsize, err, errlen);
    if (rc < 0)
        return rc;
    bool fl = npy_is_float(r->h.type);
    if (fl)
        npy_to_f64(r->h.type, s->lab_raw, s->lab_f, k);
    else
        npy_to_i64(r->h.type, s->lab_raw, s->lab_i, k);
    for (size_t t = 0; t < k; t++) {
        int64_t v;
        if (fl) {
            double x = s->lab_f[t];
            if (isnan(x)) {
                v = -1;
            } else if (!(x >= 0) || x != floor(x) || x >= (double)INT32_MAX) {
                return sl_errf(err, errlen, -EINVAL, "%s: node %" PRIu64 ": label %g is not a class number; labels "
                               "must be whole numbers >= 0, with NaN for unlabelled nodes", r->name, i + t, x);
            } else {
                v = (int64_t)x;
            }
        } else {
            v = s->lab_i[t];
            if (v < -1 || v >= INT32_MAX)
                return sl_errf(err, errlen, -EINVAL, "%s: node %" PRIu64 ": label %" PRId64 " is not a class number; "
                               "labels must be in 0..%d, with -1 for unlabelled nodes", r->name, i + t, v,
                               INT32_MAX - 1);
        }
        out[t] = (int32_t)v;
    }
    s->lab_done += k;
    *n = k;
    return 0;
}

static int npy_edges(struct imp_input *in, uint64_t *src, uint64_t *dst, size_t cap, size_t *n, char *err,
                     size_t errlen)
{
    return edges_read(((npy_input *)in)->edges, src, dst, cap, n, err, errlen);
}

static int npy_features(struct imp_input *in, float *x, size_t cap, size_t *n, char *err, size_t errlen)
{
    npy_input *s = (npy_input *)in;
    struct npy *r = &s->feat;
    const uint64_t rows = r->h.shape[0], dim = r->h.shape[1];
    const uint64_t row_raw = dim * r->h.itemsize;
    *n = 0;
    if (s->feat_done == rows) {
        int rc = 0;
        if (!s->feat_ended)
            rc = npy_end(r, err, errlen);
        s->feat_ended = true;
        free(s->feat_raw);
        s->feat_raw = NULL;
        return rc;
    }
    if (!s->feat_raw) {
        s->feat_rows = (size_t)SL_MAX(1, IMP_CHUNK_BYTES / row_raw);
        s->feat_raw = malloc(s->feat_rows * row_raw);
        if (!s->feat_raw)
            return sl_errf(err, errlen, -ENOMEM, "%s: out of memory for a feature buffer", r->name);
    }
    const uint64_t i = s->feat_done;
    size_t k = (size_t)SL_MIN(SL_MIN((uint64_t)s->feat_rows, (uint64_t)cap), rows - i);
    int rc = npy_read(r, s->feat_raw, k * row_raw, err, errlen);
    if (rc < 0)
        return rc;
    npy_to_f32(r->h.type, s->feat_raw, x, k * dim);
    for (size_t t = 0; t < k; t++)
        for (uint64_t c = 0; c < dim; c++) {
            float v = x[t * dim + c];
            if (!isfinite(v))
                return sl_errf(err, errlen, -EINVAL,
                               "%s: row %" PRIu64 ", column %" PRIu64 ": %s; features must be "
                               "finite float32 numbers",
                               r->name, i + t, c,
                               isnan(v) ? "NaN"
                               : npy_is_float(r->h.type) && r->h.type != NPY_F64
                                   ? "infinite"
                                   : "infinite or beyond the float32 range");
        }
    s->feat_done += k;
    *n = k;
    return 0;
}

static void npy_input_close(struct imp_input *in)
{
    npy_input *s = (npy_input *)in;
    if (!s)
        return;
    npy_close(&s->feat);
    npy_close(&s->lab);
    edges_close(s->edges);
    npy_free_label_buffers(s);
    free(s->feat_raw);
    free(s);
}

static const struct imp_input_ops npy_ops = {
    .labels = npy_labels,
    .edges = npy_edges,
    .features = npy_features,
    .close = npy_input_close,
};

int imp_input_open_npy(struct imp_input **out, const struct imp_job *j, char *err, size_t errlen)
{
    *out = NULL;
    npy_input *s = calloc(1, sizeof *s);
    if (!s)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    s->in.ops = &npy_ops;
    npy_init(&s->feat);
    npy_init(&s->lab);
    int rc;
    if ((rc = open_src(&s->feat, &j->feat, err, errlen)) < 0 || (rc = check_features(&s->feat, err, errlen)) < 0)
        goto fail;
    const uint64_t nodes = s->feat.h.shape[0];
    if (j->nodes && j->nodes != nodes) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: %" PRIu64 " rows, but --nodes says %" PRIu64 "; one feature row per "
                     "node is needed", s->feat.name, nodes, j->nodes);
        goto fail;
    }
    if (j->num_nodes.path && (rc = check_num_nodes(j, nodes, err, errlen)) < 0)
        goto fail;
    if ((rc = open_src(&s->lab, &j->labels, err, errlen)) < 0 || (rc = check_labels(&s->lab, nodes, err, errlen)) < 0)
        goto fail;
    if (j->edges.member)
        rc = edges_open_npz(&s->edges, j->edges.path, j->edges.member, nodes, err, errlen);
    else
        rc = edges_open(&s->edges, j->edges.path, j->edge_fmt, nodes, err, errlen);
    if (rc < 0)
        goto fail;
    s->in.nodes = nodes;
    s->in.dim = s->feat.h.shape[1];
    s->in.edges = edges_total(s->edges);
    s->in.feat_f16 = s->feat.h.type == NPY_F16;
    s->in.feat_type = npy_type_name(s->feat.h.type);
    s->in.edge_fmt = edge_fmt_name(edges_format(s->edges));
    snprintf(s->in.feat_name, sizeof s->in.feat_name, "%s", s->feat.name);
    snprintf(s->in.labels_name, sizeof s->in.labels_name, "%s", s->lab.name);
    if (j->edges.member)
        snprintf(s->in.edges_name, sizeof s->in.edges_name, "%s: %s", j->edges.path, j->edges.member);
    else
        snprintf(s->in.edges_name, sizeof s->in.edges_name, "%s", j->edges.path);
    *out = &s->in;
    return 0;
fail:
    npy_input_close(&s->in);
    return rc;
}
