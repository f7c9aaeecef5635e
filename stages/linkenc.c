/* linkenc.c - the GNN encoder of link prediction (stages/linkenc.h). */
#include "stages/linkenc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

#define READ_CHUNK 65536u

static int read_array(void *arg, uint64_t first, uint64_t count, uint64_t *dst, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    memcpy(dst, (const uint64_t *)arg + first * 3, count * 3 * sizeof *dst);
    return 0;
}

/* The training graph, both directions, into t (mode MEMORY, 32-bit ids),
 * from the n triples src reads (twice: degrees, then lists). */
static int build_graph(struct sampler_topo *t, uint64_t nodes, const struct linkenc_triples *src, uint64_t n,
                       char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    t->mode = SAMPLER_TOPO_MEMORY;
    if (nodes >= UINT32_MAX || n >= UINT32_MAX / 2)
        return sl_errf(err, errlen, -EINVAL,
                       "model.encoder = \"sage\": %" PRIu64 " nodes and %" PRIu64 " training triples; the encoder's "
                       "graph needs both below 2^32 (nodes) and 2^31 (triples)",
                       nodes, n);
    t->nodes = nodes;
    t->edges = 2 * n;
    t->indptr = calloc(nodes + 1, sizeof *t->indptr);
    uint32_t *ix = malloc((2 * n + 1) * sizeof *ix);
    uint64_t *fill = malloc((nodes + 1) * sizeof *fill), *buf = malloc(READ_CHUNK * 3 * sizeof *buf);
    if (!t->indptr || !ix || !fill || !buf) {
        free(ix);
        free(fill);
        free(buf);
        sampler_topo_free(t);
        return sl_errf(err, errlen, -ENOMEM, "model.encoder: out of memory for the graph of %" PRIu64 " triples", n);
    }
    t->indices_mem = ix; /* sampler_topo_free frees it */
    t->indices = ix;
    int rc = 0;
    for (uint64_t f = 0; f < n && rc == 0; f += READ_CHUNK) {
        const uint64_t k = SL_MIN((uint64_t)READ_CHUNK, n - f);
        if ((rc = src->read(src->arg, f, k, buf, err, errlen)) < 0)
            break;
        for (uint64_t i = 0; i < k; i++) {
            t->indptr[buf[i * 3 + 2] + 1]++;
            t->indptr[buf[i * 3] + 1]++;
        }
    }
    for (uint64_t v = 0; v < nodes; v++) {
        uint64_t dv = t->indptr[v + 1];
        t->max_in_degree = dv > t->max_in_degree ? dv : t->max_in_degree;
        t->indptr[v + 1] += t->indptr[v];
    }
    memcpy(fill, t->indptr, (nodes + 1) * sizeof *fill);
    for (uint64_t f = 0; f < n && rc == 0; f += READ_CHUNK) {
        const uint64_t k = SL_MIN((uint64_t)READ_CHUNK, n - f);
        if ((rc = src->read(src->arg, f, k, buf, err, errlen)) < 0)
            break;
        for (uint64_t i = 0; i < k; i++) {
            uint64_t h = buf[i * 3], tl = buf[i * 3 + 2];
            ix[fill[tl]++] = (uint32_t)h;
            ix[fill[h]++] = (uint32_t)tl;
        }
    }
    free(fill);
    free(buf);
    if (rc < 0)
        sampler_topo_free(t);
    return rc;
}

int linkenc_init(struct linkenc *e, uint64_t nodes, const uint64_t *triples, uint64_t n, uint32_t max_ids,
                 const struct linkenc_opts *o, char *err, size_t errlen)
{
    struct linkenc_triples src = {read_array, (void *)triples};
    return linkenc_init_read(e, nodes, &src, n, max_ids, o, err, errlen);
}

int linkenc_init_read(struct linkenc *e, uint64_t nodes, const struct linkenc_triples *src, uint64_t n,
                      uint32_t max_ids, const struct linkenc_opts *o, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    e->topo.fd = -1;
    e->o = *o;
    if (o->layers < 1 || o->layers > MODEL_LAYERS_MAX || !o->dim || !max_ids)
        return sl_errf(err, errlen, -EINVAL, "model.encoder: model.layers = %u must be 1 .. %d", o->layers,
                       MODEL_LAYERS_MAX);
    int rc = build_graph(&e->topo, nodes, src, n, err, errlen);
    if (rc)
        return rc;
    struct batch_shape shape = {.batch_size = max_ids, .layers = o->layers};
    for (uint32_t k = 0; k < o->layers; k++)
        shape.fanouts[k] = o->fanouts[k];
    struct model_config mc = {.kind = MODEL_SAGE, .layers = o->layers, .in_dim = o->dim, .hidden = o->dim,
                              .classes = o->dim, .activation = o->activation, .aggr = o->aggr,
                              .seed = o->seed ^ 0x656e636f646572ull};
    if ((rc = sampler_init(&e->smp, &e->topo, &shape, err, errlen)) ||
        (rc = model_create(&e->net, &mc, err, errlen))) {
        linkenc_free(e);
        return rc;
    }
    model_set_input_grad(e->net, true);
    e->max_ids = max_ids;
    e->slot_size = batch_max_bytes(sampler_shape(&e->smp), err, errlen);
    const uint64_t most = e->smp.plan.n_max[o->layers];
    e->indptr32 = malloc((nodes + 1) * sizeof *e->indptr32);
    e->slot = e->slot_size ? aligned_alloc(64, sl_round_up(e->slot_size, 64)) : NULL;
    e->targets = malloc(max_ids * sizeof *e->targets);
    e->pos = malloc(max_ids * sizeof *e->pos);
    e->x = malloc(most * o->dim * sizeof *e->x);
    e->out = malloc((size_t)max_ids * o->dim * sizeof *e->out);
    e->dout = malloc((size_t)max_ids * o->dim * sizeof *e->dout);
    if (!e->indptr32 || !e->slot || !e->targets || !e->pos || !e->x || !e->out || !e->dout ||
        adam_init(&e->adam, model_nparams(e->net), o->lr)) {
        char b[32];
        linkenc_free(e);
        return sl_errf(err, errlen, -ENOMEM, "model.encoder: out of memory for a batch of %u rows (%s sampled)",
                       max_ids, sl_fmt_bytes(e->slot_size, b, sizeof b));
    }
    for (uint64_t v = 0; v <= nodes; v++)
        e->indptr32[v] = (uint32_t)e->topo.indptr[v];
    return 0;
}

void linkenc_free(struct linkenc *e)
{
    sampler_free(&e->smp);
    sampler_topo_free(&e->topo);
    if (e->net)
        model_destroy(e->net);
    if (e->adam.m)
        adam_free(&e->adam);
    free(e->indptr32);
    free(e->slot);
    free(e->targets);
    free(e->pos);
    free(e->x);
    free(e->out);
    free(e->dout);
    free(e->node_pos);
    free(e->part_in);
    memset(e, 0, sizeof *e);
    e->topo.fd = -1;
}

int linkenc_set_buffer(struct linkenc *e, uint64_t part_nodes, uint32_t parts, const uint32_t *in, uint32_t nin,
                       char *err, size_t errlen)
{
    if (!e->node_pos) { /* partitions are id ranges: a node's position is its id */
        uint32_t *pos = malloc(SL_MAX(e->topo.nodes, 1) * sizeof *pos);
        e->part_in = calloc(parts, 1);
        if (!pos || !e->part_in) {
            free(pos);
            return sl_errf(err, errlen, -ENOMEM, "model.encoder: out of memory for the partition filter");
        }
        for (uint64_t v = 0; v < e->topo.nodes; v++)
            pos[v] = (uint32_t)v;
        e->node_pos = pos;
        e->parts = parts;
    }
    memset(e->part_in, 0, e->parts);
    for (uint32_t k = 0; k < nin; k++)
        e->part_in[in[k]] = 1;
    struct sampler_filter f = {.node_pos = e->node_pos, .pos_u64 = false, .part_nodes = part_nodes, .parts = parts,
                               .part_in = e->part_in};
    return sampler_set_filter(&e->smp, &f, err, errlen);
}

int linkenc_sample(struct linkenc *e, const uint64_t *ids, uint32_t k, uint32_t epoch, uint64_t batch, char *err,
                   size_t errlen)
{
    if (k > e->max_ids)
        return sl_errf(err, errlen, -EINVAL, "linkenc: %u ids in a batch, at most %u", k, e->max_ids);
    memcpy(e->targets, ids, k * sizeof *ids);
    qsort(e->targets, k, sizeof *e->targets, cmp_u64);
    uint32_t u = 0;
    for (uint32_t i = 0; i < k; i++)
        if (!u || e->targets[u - 1] != e->targets[i])
            e->targets[u++] = e->targets[i];
    e->ntargets = u;
    for (uint32_t i = 0; i < k; i++) { /* each id's target: a binary search in the sorted set */
        uint32_t lo = 0, hi = u;
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (e->targets[mid] < ids[i])
                lo = mid + 1;
            else
                hi = mid;
        }
        e->pos[i] = lo;
    }
    e->nids = k;
    struct batch_id id = {.batch = batch, .epoch = epoch};
    uint64_t edges = 0;
    int rc = sampler_sample(&e->smp, e->slot, e->slot_size, e->targets, u, &id,
                            sampler_batch_seed(e->o.seed, epoch, 0, batch), &edges, err, errlen);
    if (rc == 0)
        rc = batch_view(e->slot, e->slot_size, BATCH_VIEW_HEADER_ONLY, &e->view, err, errlen);
    if (rc)
        return rc;
    e->edges_sampled += edges;
    e->nodes_sampled += batch_nodes(&e->view);
    e->batches++;
    const uint32_t L = e->o.layers;
    for (uint32_t i = 0; i < L; i++) { /* layer i aggregates over block L-1-i (ipc/batch.h) */
        uint32_t b = batch_block_for_layer(&e->view, i);
        e->blocks[i] = (struct ops_block){.n_dst = batch_block_dst(&e->view, b), .n_src = batch_block_src(&e->view, b),
                                          .indptr = e->view.indptr[b], .src = e->view.src[b]};
    }
    return 0;
}

int linkenc_forward(struct linkenc *e, float *dst, char *err, size_t errlen)
{
    const uint32_t d = e->o.dim;
    int rc = model_forward(e->net, e->blocks, e->o.layers, e->ntargets, e->x, true, 0, e->out, err, errlen);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < e->nids; i++)
        memcpy(dst + (size_t)i * d, e->out + (size_t)e->pos[i] * d, d * sizeof *dst);
    return 0;
}

int linkenc_backward_step(struct linkenc *e, const float *grad, bool step, char *err, size_t errlen)
{
    const uint32_t d = e->o.dim;
    ops_zero(e->dout, (size_t)e->ntargets * d);
    for (uint32_t i = 0; i < e->nids; i++) { /* each target's rows summed in id order */
        float *o = e->dout + (size_t)e->pos[i] * d;
        const float *g = grad + (size_t)i * d;
        for (uint32_t j = 0; j < d; j++)
            o[j] += g[j];
    }
    int rc = model_backward(e->net, e->dout, err, errlen);
    if (rc == 0 && step)
        rc = adam_step(&e->adam, model_params(e->net), model_grads(e->net));
    return rc;
}

int linkenc_backward(struct linkenc *e, const float *grad, char *err, size_t errlen)
{
    return linkenc_backward_step(e, grad, true, err, errlen);
}

int linkenc_encode_all(struct linkenc *e, const float *in, float *out, char *err, size_t errlen)
{
    const uint64_t nodes = e->topo.nodes;
    const uint32_t L = e->o.layers, d = e->o.dim;
    float *tmp = L > 1 ? malloc(nodes * d * sizeof *tmp) : NULL;
    if (L > 1 && !tmp)
        return sl_errf(err, errlen, -ENOMEM, "model.encoder: out of memory to encode %" PRIu64 " nodes", nodes);
    struct ops_block b = {.n_dst = (uint32_t)nodes, .n_src = (uint32_t)nodes, .indptr = e->indptr32,
                          .src = e->topo.indices};
    const float *x = in;
    int rc = 0;
    for (uint32_t i = 0; i < L && rc == 0; i++) { /* the last layer writes out, the one before tmp, and so on */
        float *y = (L - 1 - i) % 2 == 0 ? out : tmp;
        rc = model_forward_layer(e->net, i, &b, x, y, err, errlen);
        x = y;
    }
    free(tmp);
    return rc;
}

int linkenc_file_rows(void *arg, uint64_t first, uint64_t count, float *dst, char *err, size_t errlen)
{
    const struct linkenc_file *f = arg;
    size_t bytes = (size_t)count * f->d * sizeof *dst, got = 0;
    int rc = sl_pread_full(f->fd, dst, bytes, (off_t)(first * f->d * sizeof *dst), &got);
    if (rc < 0 || got != bytes)
        return sl_errf(err, errlen, rc < 0 ? rc : -EIO, "the encoded table: reading row %" PRIu64 ": %s", first,
                       rc < 0 ? strerror(-rc) : "the file ends early");
    return 0;
}

/* One layer over every node: destinations in chunks, sources through
 * get (layer 0) or from the file in_fd, output into out_fd. */
static int layer_stream(struct linkenc *e, uint32_t i,
                        int (*get)(void *arg, uint64_t first, uint64_t count, float *dst, char *err, size_t errlen),
                        void *arg, int in_fd, int out_fd, uint32_t *loc, char *err, size_t errlen)
{
    const uint64_t nodes = e->topo.nodes;
    const uint32_t d = e->o.dim, *ix = e->topo.indices;
    const uint32_t C = e->stream_chunk ? e->stream_chunk : LINKENC_CHUNK;
    struct linkenc_file inf = {.fd = in_fd, .d = d};
    if (!get) {
        get = linkenc_file_rows;
        arg = &inf;
    }
    uint64_t most = 0; /* the most sources of a chunk */
    for (uint64_t c0 = 0; c0 < nodes; c0 += C) {
        uint64_t c1 = SL_MIN(nodes, c0 + C);
        most = SL_MAX(most, (c1 - c0) + (e->topo.indptr[c1] - e->topo.indptr[c0]));
    }
    uint64_t *ids = malloc(most * sizeof *ids);
    uint32_t *indptr = malloc((C + 1) * sizeof *indptr), *src = malloc(SL_MAX(most, 1) * sizeof *src);
    float *x = malloc(most * d * sizeof *x), *y = malloc((size_t)C * d * sizeof *y);
    int rc = 0;
    if (!ids || !indptr || !src || !x || !y)
        rc = sl_errf(err, errlen, -ENOMEM, "model.encoder: out of memory to encode a chunk of %u nodes", C);
    for (uint64_t c0 = 0; c0 < nodes && rc == 0; c0 += C) {
        const uint32_t nd = (uint32_t)SL_MIN((uint64_t)C, nodes - c0);
        uint32_t ns = nd;
        for (uint32_t v = 0; v < nd; v++) { /* the chunk's nodes are its first sources */
            ids[v] = c0 + v;
            loc[c0 + v] = v;
        }
        indptr[0] = 0;
        for (uint32_t v = 0; v < nd; v++) {
            uint32_t k = indptr[v];
            for (uint64_t q = e->topo.indptr[c0 + v]; q < e->topo.indptr[c0 + v + 1]; q++) {
                uint32_t u = ix[q];
                if (loc[u] == UINT32_MAX) {
                    loc[u] = ns;
                    ids[ns++] = u;
                }
                src[k++] = loc[u];
            }
            indptr[v + 1] = k;
        }
        rc = get(arg, c0, nd, x, err, errlen);
        for (uint32_t k = nd; k < ns && rc == 0; k++)
            rc = get(arg, ids[k], 1, x + (size_t)k * d, err, errlen);
        for (uint32_t k = 0; k < ns; k++)
            loc[ids[k]] = UINT32_MAX;
        if (rc)
            break;
        struct ops_block b = {.n_dst = nd, .n_src = ns, .indptr = indptr, .src = src};
        if ((rc = model_forward_layer(e->net, i, &b, x, y, err, errlen)))
            break;
        size_t bytes = (size_t)nd * d * sizeof *y;
        ssize_t w = pwrite(out_fd, y, bytes, (off_t)(c0 * d * sizeof *y));
        if (w != (ssize_t)bytes)
            rc = sl_errf(err, errlen, w < 0 ? -errno : -EIO, "the encoded table: writing: %s",
                         w < 0 ? strerror(errno) : "short write");
    }
    free(ids), free(indptr), free(src), free(x), free(y);
    return rc;
}

int linkenc_encode_file(struct linkenc *e,
                        int (*get)(void *arg, uint64_t first, uint64_t count, float *dst, char *err, size_t errlen),
                        void *arg, const char *path, char *err, size_t errlen)
{
    const uint32_t L = e->o.layers;
    char tmp[2][4200];
    snprintf(tmp[0], sizeof tmp[0], "%s.layer0", path);
    snprintf(tmp[1], sizeof tmp[1], "%s.layer1", path);
    uint32_t *loc = malloc(SL_MAX(e->topo.nodes, 1) * sizeof *loc);
    if (!loc)
        return sl_errf(err, errlen, -ENOMEM, "model.encoder: out of memory for a map of %" PRIu64 " nodes",
                       e->topo.nodes);
    memset(loc, 0xff, e->topo.nodes * sizeof *loc);
    int rc = 0, in_fd = -1;
    for (uint32_t i = 0; i < L && rc == 0; i++) { /* the last layer writes path, the others alternate */
        const char *out = i + 1 == L ? path : tmp[i % 2];
        int out_fd = open(out, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (out_fd < 0) {
            rc = sl_errf(err, errlen, -errno, "%s: cannot create: %s", out, strerror(errno));
            break;
        }
        rc = layer_stream(e, i, i ? NULL : get, arg, in_fd, out_fd, loc, err, errlen);
        if (in_fd >= 0)
            close(in_fd);
        in_fd = out_fd;
        if (i)
            unlink(tmp[(i - 1) % 2]);
    }
    if (in_fd >= 0)
        close(in_fd);
    unlink(tmp[0]);
    unlink(tmp[1]);
    free(loc);
    return rc;
}
