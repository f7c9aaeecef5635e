/* trainer_cuda.c - the CUDA backend of gnn-trainer (trainer_backend.h):
 * the model of ops/model.h on the operator table of trainer_cuda_ops.c
 * (gpu/kernels.h), with the parameters, gradients, Adam's moments,
 * activations and the reduce buffer in device memory. Written only
 * against gpu/kernels.h and the reducer table, so that this one source is
 * built twice (stages/CMakeLists.txt): with sluice_gpu for a GPU, and with
 * sluice_gpu_shim, where "device" memory is host memory, a launch is loops
 * and gk_gemm is ops_gemm - there it computes the CPU backend's bits, which
 * is how CI tests it (tests/test_trainer_cuda_shim.c).
 *
 * Per call (one context, one stream; "waits" = returns after the stream
 * has run everything queued so far):
 *   create        makes the configured device current (gk_set_device),
 *                 a context (work stream + copy stream + cuBLAS handle,
 *                 pedantic float GEMMs), the model and Adam on the device
 *                 (parameters drawn on the host as the CPU does,
 *                 uploaded), the reduce buffer and its buckets. Waits.
 *   gather(v)     packs the batch's aliases, labels and every layer's
 *                 block with its transpose (gk_block_transpose_host) into
 *                 one page-locked host buffer, queues its upload on the
 *                 copy stream (gk_upload_async), then gk_gather_rows from
 *                 the device feature rows behind it. Does not wait.
 *   forward       queues the model's forward, then the loss
 *                 (gk_cross_entropy waits: loss and counts on the host). So
 *                 when forward returns, the gather has read the feature
 *                 rows and the host batch is no longer needed.
 *   backward(r)   queues the model's backward; with a device reducer r
 *                 (more ranks), starts each gradient bucket's sum as soon
 *                 as the pass has queued the bucket's last gradient
 *                 (below). Does not wait.
 *   reduce        waits for the sums backward started, or (no backward:
 *                 a padding step; or backward had no reducer) copies the
 *                 gradients or zeros into the reduce buffer and sums it in
 *                 the same buckets; then downloads the total weight
 *                 (waits).
 *   step          queues the scale and Adam.
 *   state         downloads parameters and both moments into host copies
 *                 (waits); state_loaded uploads them (waits).
 *
 * Double buffering. Two page-locked host buffers and two device buffers
 * alternate between batches. Batch g+1's gather is called once batch g's
 * step has queued g's backward and Adam (the loop's order), so its upload
 * runs on the copy engine while the device still computes batch g. Two
 * events keep it safe: `freed[i]`, recorded on the work stream when the
 * batch after the one in buffer i is gathered (behind all of that
 * batch's work), which the upload into buffer i waits for on the device;
 * `copied[i]`, recorded behind the upload from host buffer i, which the
 * host waits for before packing into it again. Where page-locked memory
 * cannot be had the buffers are ordinary memory: the runtime then waits
 * for the copy's staging, and nothing else changes.
 *
 * Gradient buckets. The reduce buffer holds the gradients and, at n, the
 * batch's weight. It is summed in buckets of whole layers, formed at
 * create from the last layer down (a bucket closes once it holds
 * bucket_floats, BUCKET_MIN_FLOATS by default, or at layer 0; the first
 * also carries the weight), so
 * every rank sums the same buckets in the same order, which NCCL needs.
 * The backward pass reports each layer as done (model_backward_progress);
 * when a bucket's lowest layer is done, backward queues the copy of its
 * gradients into the reduce buffer, records an event behind it and
 * starts the bucket's sum behind that event (reducer_start): with NCCL
 * the sums of the last layers run while the first layers' backward is
 * still computing. reduce then only waits (reducer_finish). A host
 * reducer (the shim build) sums each bucket when started; the sums are
 * per element, so buckets change no bit.
 *
 * Device. create makes c->device current on the calling thread, which
 * then calls the backend (one thread).
 *
 * Determinism: every non-GEMM kernel gives the CPU's bits (docs/gpu.md);
 * GEMMs are cuBLAS in pedantic float math, the same bits run to run on one
 * GPU model, within rounding of OpenBLAS. */
#include "stages/trainer_backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "gpu/kernels.h"

/* The smallest gradient bucket (floats) unless the configuration says
 * (bucket_floats): smaller layers join the next one down. 64 Ki floats
 * (256 KiB) keep NCCL's per-call latency (tens of microseconds) small
 * beside the transfer. */
#define BUCKET_MIN_FLOATS ((size_t)64 * 1024)

/* Where this build's "device" buffers are: host memory in the shim build
 * (so it takes a host reducer), device memory otherwise (an NCCL one). */
#ifdef GK_SHIM
#define CUDA_BUFFERS_ON_DEVICE false
#else
#define CUDA_BUFFERS_ON_DEVICE true
#endif

/* A device buffer that only grows (contents not kept across growth). */
struct dbuf {
    void *p;
    size_t cap; /* bytes */
};

struct trainer_backend {
    struct trainer_backend_config c;
    struct gk_ctx g;
    struct model *m;
    struct adam adam;
    size_t nparams;
    bool graph;                /* the model reads blocks (not the mlp) */
    const unsigned char *rows; /* feature row 0 where the kernels read it */
    size_t stride;             /* bytes between rows */
    struct dbuf x;             /* (nodes, in_dim) gathered input */
    struct dbuf logits;        /* (targets, classes) */
    struct dbuf dlogits;       /* (targets, classes) */
    struct dbuf red;           /* (nparams + 1) reduce buffer: gradients, then the weight */
    struct dbuf one;           /* (1) the weight of a real batch, 1.0 */
    struct dbuf flag;          /* one float: gk_any_nonfinite's answer */
    struct dbuf sumsq;         /* gk_sumsq's chunk sums and answer */
    float *h_x;                /* host copy of x for nonfinite_rows */
    size_t h_x_cap;            /* floats */
    struct dbuf up[2];         /* a batch's upload (below), alternating */
    unsigned cur;              /* up[cur] holds the gathered batch */
    uint32_t *pack[2];         /* host: the upload packed for up[i] */
    size_t pack_cap[2];        /* words */
    bool pinned[2];            /* pack[i] is page-locked (else malloc) */
    struct gk_event copied[2]; /* behind the upload from pack[i] */
    struct gk_event freed[2];  /* behind the last work that reads up[i] */
    /* gradient buckets: bucket k = [lo[k], k ? lo[k-1] : nparams + 1), k = 0 the last layers */
    uint32_t nbuckets;
    size_t bucket_lo[MODEL_LAYERS_MAX];
    struct gk_event bucket_ready; /* behind the work that completes a bucket */
    struct reducer *bwd_r;        /* the sums the last backward started; NULL: none */
    uint32_t bwd_next;            /* the next bucket backward starts */
    int bwd_rc;                   /* the first failure of a started sum (reduce returns it) */
    bool summed;                  /* the reduce buffer holds a sum no step has taken */
    /* the gathered batch */
    bool gathered;
    const uint32_t *alias_of; /* its view's alias array: which batch it is */
    uint32_t nodes, targets, nblocks;
    const uint32_t *alias_dev;
    const int32_t *labels_dev;
    struct gk_block gb[MODEL_LAYERS_MAX];
    struct model_block mb[MODEL_LAYERS_MAX];
    /* host copies for state() */
    float *h_params, *h_m, *h_v;
};

static int dbuf_need(struct gk_ctx *g, struct dbuf *b, size_t bytes)
{
    if (bytes <= b->cap && b->p)
        return 0;
    size_t cap = sl_round_up(bytes + bytes / 8 + 256, 256); /* headroom for a slightly larger batch */
    gk_free(b->p);
    b->p = NULL;
    b->cap = 0;
    int rc = gk_malloc(g, &b->p, cap);
    if (rc)
        return rc;
    b->cap = cap;
    return 0;
}

static void dbuf_free(struct dbuf *b)
{
    gk_free(b->p);
    b->p = NULL;
    b->cap = 0;
}

/* Host upload buffer i: page-locked when the runtime gives it, else
 * ordinary memory (pinned[i] says which). */
static void pack_free(struct trainer_backend *b, int i)
{
    if (b->pinned[i])
        gk_host_free(b->pack[i]);
    else
        free(b->pack[i]);
    b->pack[i] = NULL;
    b->pack_cap[i] = 0;
    b->pinned[i] = false;
}

/* At least `words` in pack[i]; its last upload must be done (copied[i]). */
static int pack_need(struct trainer_backend *b, int i, size_t words)
{
    if (words <= b->pack_cap[i] && b->pack[i])
        return 0;
    size_t cap = words + words / 8 + 64;
    pack_free(b, i);
    void *p = NULL;
    if (gk_host_alloc(&b->g, &p, cap * sizeof(uint32_t)) == 0 && p) {
        b->pinned[i] = true;
    } else if (!(p = malloc(cap * sizeof(uint32_t)))) {
        return -ENOMEM;
    }
    b->pack[i] = p;
    b->pack_cap[i] = cap;
    return 0;
}

/* Buckets of whole layers from the last down (see the top of the file). */
static void plan_buckets(struct trainer_backend *b)
{
    uint32_t L = b->c.model.layers, k = 0;
    size_t hi = b->nparams, min = b->c.bucket_floats ? b->c.bucket_floats : BUCKET_MIN_FLOATS;
    for (uint32_t i = L; i-- > 0;) {
        size_t lo = model_layer_offset(b->m, i);
        if (hi - lo >= min || i == 0) {
            b->bucket_lo[k++] = lo;
            hi = lo;
        }
    }
    b->nbuckets = k;
}

static size_t bucket_hi(const struct trainer_backend *b, uint32_t k)
{
    return k ? b->bucket_lo[k - 1] : b->nparams + 1;
}

/* Queues bucket k of the reduce buffer: the gradients (real) or zeros,
 * and in bucket 0 also the weight, 1 or 0. */
static int fill_bucket(struct trainer_backend *b, uint32_t k, bool real)
{
    size_t lo = b->bucket_lo[k], hi = bucket_hi(b, k), grads = k ? hi : b->nparams; /* bucket 0: + the weight */
    float *red = b->red.p;
    if (!real)
        return gk_zero(&b->g, red + lo, hi - lo);
    int rc = gk_copy(&b->g, red + lo, model_grads(b->m) + lo, grads - lo);
    return rc == 0 && k == 0 ? gk_copy(&b->g, red + b->nparams, b->one.p, 1) : rc;
}

/* Starts the sum of bucket k of the reduce buffer, behind the work queued
 * so far (which completes it). A reducer that cannot wait for an event
 * (no start in its table) sums at once, so the host waits for the work
 * first. */
static int start_bucket(struct trainer_backend *b, struct reducer *r, uint32_t k)
{
    size_t lo = b->bucket_lo[k], hi = bucket_hi(b, k);
    int rc = gk_event_record(&b->g, &b->bucket_ready);
    if (rc == 0 && !r->ops->start)
        rc = gk_event_sync(&b->g, &b->bucket_ready);
    return rc ? rc : reducer_start(r, (float *)b->red.p + lo, hi - lo, b->bucket_ready.ev);
}

static void cuda_free(struct trainer_backend *b)
{
    if (!b)
        return;
    if (b->g.stream)
        gk_sync(&b->g); /* nothing queued still reads what is freed below */
    for (int i = 0; i < 2; i++) {
        if (b->copied[i].ev)
            gk_event_sync(&b->g, &b->copied[i]); /* nor copies from the host buffers */
        pack_free(b, i);
        gk_event_free(&b->copied[i]);
        gk_event_free(&b->freed[i]);
    }
    gk_event_free(&b->bucket_ready);
    model_destroy(b->m);
    adam_free(&b->adam);
    struct dbuf *bufs[] = {&b->x, &b->logits, &b->dlogits, &b->red, &b->one, &b->flag, &b->sumsq, &b->up[0], &b->up[1]};
    for (size_t i = 0; i < SL_ARRAY_LEN(bufs); i++)
        dbuf_free(bufs[i]);
    gk_ctx_free(&b->g); /* accepts the zeroed context of a failed create */
    free(b->h_x);
    free(b->h_params);
    free(b->h_m);
    free(b->h_v);
    free(b);
}

static int cuda_create(struct trainer_backend **out, const struct trainer_backend_config *c, char *err, size_t errlen)
{
    *out = NULL;
    if (!c->fb)
        return sl_errf(err, errlen, -EINVAL, "the CUDA trainer has no feature buffer");
    if (c->device < 0)
        return sl_errf(err, errlen, -EINVAL, "CUDA device %d: a device ordinal is 0 or more", c->device);
    const unsigned char *rows = c->rows_dev;
    if (!rows && !CUDA_BUFFERS_ON_DEVICE)
        rows = featbuf_row(c->fb, 0); /* the shim's kernels read host memory */
    if (!rows)
        return sl_errf(err, errlen, -EINVAL,
                       "the feature buffer has no rows on the device: the CUDA trainer gathers from device rows "
                       "(a feature buffer created with rows_on_device, its rows published by the trainer)");
    struct trainer_backend *b = calloc(1, sizeof *b);
    if (!b)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    b->c = *c;
    b->rows = rows;
    b->stride = c->fb->stride;
    b->graph = c->model.kind != MODEL_MLP;
    int rc = gk_set_device(c->device, err, errlen);
    if (rc == 0)
        rc = gk_ctx_init(&b->g, GK_MATH_PEDANTIC, err, errlen);
    if (rc)
        goto fail;
    if ((rc = model_create_on(&b->m, &c->model, &trainer_cuda_model_ops, &b->g, err, errlen)) != 0)
        goto fail;
    b->nparams = model_nparams(b->m);
    if ((rc = adam_init_on(&b->adam, b->nparams, c->lr, &trainer_cuda_model_ops, &b->g)) != 0) {
        rc = sl_errf(err, errlen, rc, "cannot allocate Adam's moments on the device: %s", gk_ctx_error(&b->g));
        goto fail;
    }
    b->adam.weight_decay = c->weight_decay;
    b->adam.decoupled = c->decoupled;
    const float one = 1.0f;
    for (int i = 0; i < 2 && rc == 0; i++)
        if ((rc = gk_event_init(&b->g, &b->copied[i])) == 0)
            rc = gk_event_init(&b->g, &b->freed[i]);
    if (rc || (rc = gk_event_init(&b->g, &b->bucket_ready)) != 0 ||
        (rc = dbuf_need(&b->g, &b->red, (b->nparams + 1) * sizeof(float))) != 0 ||
        (rc = dbuf_need(&b->g, &b->one, sizeof one)) != 0 || (rc = gk_upload(&b->g, b->one.p, &one, sizeof one)) != 0) {
        rc = sl_errf(err, errlen, rc, "cannot set up the reduce buffer and the upload events on the device: %s",
                     gk_ctx_error(&b->g));
        goto fail;
    }
    plan_buckets(b);
    *out = b;
    return 0;
fail:
    cuda_free(b);
    return rc;
}

/* Words of the upload of batch v: aliases (nodes), labels (targets), the
 * graph degrees (nodes; only when the batch has them), then
 * per layer the block's indptr (n_dst + 1), src (e), and its transpose
 * t_indptr (n_src + 1), t_dst (e), t_edge (e). */
static size_t upload_words(const struct batch_view *v, const struct ops_block *ob, uint32_t nblocks)
{
    size_t w = (size_t)batch_nodes(v) + batch_targets(v) + (v->deg && nblocks ? batch_nodes(v) : 0);
    for (uint32_t i = 0; i < nblocks; i++)
        w += (size_t)ob[i].n_dst + 1 + (size_t)ob[i].n_src + 1 + 3 * (size_t)ops_block_edges(&ob[i]);
    return w;
}

/* Packs batch v into b->pack (host), uploads it into the next device
 * buffer and points the gathered batch's device arrays into it. */
static int upload_batch(struct trainer_backend *b, const struct batch_view *v, char *err, size_t errlen)
{
    struct ops_block ob[MODEL_LAYERS_MAX];
    uint32_t nblocks = b->graph ? trainer_batch_blocks(v, ob) : 0;
    uint32_t n = batch_nodes(v), B = batch_targets(v);
    size_t words = upload_words(v, ob, nblocks);
    /* buffer cur holds the last batch: all its work is queued now */
    unsigned cur = b->cur, next = cur ^ 1u;
    int rc = gk_event_record(&b->g, &b->freed[cur]);
    if (rc == 0)
        rc = gk_event_sync(&b->g, &b->copied[next]); /* the host buffer's last upload (two batches ago) is done */
    if (rc)
        return sl_errf(err, errlen, rc, "before uploading a batch of %u nodes: %s", n, gk_ctx_error(&b->g));
    if ((rc = pack_need(b, (int)next, words)) != 0)
        return sl_errf(err, errlen, rc, "out of memory packing a batch of %u nodes", n);
    /* offsets (words) of each array, host and device alike */
    size_t at = 0, off_alias = at, off_labels;
    uint32_t *p = b->pack[next];
    memcpy(p + at, v->alias, (size_t)n * sizeof *p);
    at += n;
    off_labels = at;
    memcpy(p + at, v->labels, (size_t)B * sizeof *p);
    at += B;
    size_t off_deg = at;
    bool deg = v->deg && nblocks;
    if (deg) { /* every block's sources are a prefix of the batch's nodes */
        memcpy(p + at, v->deg, (size_t)n * sizeof *p);
        at += n;
    }
    size_t off[MODEL_LAYERS_MAX][5];
    for (uint32_t i = 0; i < nblocks; i++) {
        const struct ops_block *k = &ob[i];
        size_t e = ops_block_edges(k);
        off[i][0] = at;
        memcpy(p + at, k->indptr, ((size_t)k->n_dst + 1) * sizeof *p);
        at += (size_t)k->n_dst + 1;
        off[i][1] = at;
        memcpy(p + at, k->src, e * sizeof *p);
        at += e;
        off[i][2] = at;
        at += (size_t)k->n_src + 1;
        off[i][3] = at;
        at += e;
        off[i][4] = at;
        at += e;
        if ((rc = gk_block_transpose_host(k, p + off[i][2], p + off[i][3], p + off[i][4], err, errlen)) != 0)
            return rc;
    }
    struct dbuf *d = &b->up[next];
    rc = dbuf_need(&b->g, d, words * sizeof *p); /* growing frees the old buffer: cudaFree waits for its readers */
    if (rc == 0)
        rc = gk_upload_async(&b->g, d->p, p, words * sizeof *p, &b->freed[next], &b->copied[next]);
    if (rc)
        return sl_errf(err, errlen, rc, "uploading a batch of %u nodes: %s", n, gk_ctx_error(&b->g));
    b->cur = next;
    const uint32_t *dev = d->p;
    b->alias_dev = dev + off_alias;
    b->labels_dev = (const int32_t *)(dev + off_labels);
    for (uint32_t i = 0; i < nblocks; i++) {
        b->gb[i] = (struct gk_block){.n_dst = ob[i].n_dst,
                                     .n_src = ob[i].n_src,
                                     .n_edges = ops_block_edges(&ob[i]),
                                     .indptr = dev + off[i][0],
                                     .src = dev + off[i][1],
                                     .t_indptr = dev + off[i][2],
                                     .t_dst = dev + off[i][3],
                                     .t_edge = dev + off[i][4],
                                     .deg = deg ? dev + off_deg : NULL};
        b->mb[i] = (struct model_block){
            .n_dst = b->gb[i].n_dst, .n_src = b->gb[i].n_src, .n_edges = b->gb[i].n_edges, .impl = &b->gb[i]};
    }
    b->nblocks = nblocks;
    return 0;
}

static int cuda_gather(struct trainer_backend *b, const struct batch_view *v, char *err, size_t errlen)
{
    b->gathered = false;
    uint32_t n = batch_nodes(v), dim = b->c.model.in_dim;
    int rc = upload_batch(b, v, err, errlen);
    if (rc)
        return rc;
    if ((rc = dbuf_need(&b->g, &b->x, (size_t)n * dim * sizeof(float))) != 0 ||
        (rc = gk_gather_rows(&b->g, b->x.p, b->rows, b->stride, b->alias_dev, n, dim, b->c.f16)) != 0)
        return sl_errf(err, errlen, rc, "gathering %u input rows: %s", n, gk_ctx_error(&b->g));
    b->gathered = true;
    b->alias_of = v->alias;
    b->nodes = n;
    b->targets = batch_targets(v);
    return 0;
}

static int cuda_forward(struct trainer_backend *b, const struct batch_view *v, bool train, uint64_t dropout_seed,
                        struct trainer_loss *out, char *err, size_t errlen)
{
    uint32_t B = batch_targets(v), classes = b->c.model.classes;
    if (!b->gathered || v->alias != b->alias_of || B != b->targets || batch_nodes(v) != b->nodes)
        return sl_errf(err, errlen, -EINVAL, "forward of a batch that was not the last one gathered");
    size_t bytes = (size_t)B * classes * sizeof(float);
    int rc;
    if ((rc = dbuf_need(&b->g, &b->logits, bytes)) != 0 || (rc = dbuf_need(&b->g, &b->dlogits, bytes)) != 0)
        return sl_errf(err, errlen, rc, "cannot allocate %u targets' logits on the device: %s", B, gk_ctx_error(&b->g));
    rc = model_forward_blocks(b->m, b->mb, b->nblocks, B, b->x.p, train, dropout_seed, b->logits.p, err, errlen);
    if (rc)
        return rc;
    return model_cross_entropy(b->m, b->logits.p, b->labels_dev, B, train ? b->dlogits.p : NULL, &out->loss,
                               &out->labelled, &out->correct, err, errlen);
}

/* Layer done in the backward pass: gradients [from, n) are final. Starts
 * every bucket that is now complete. A failure to start is kept for
 * reduce (bwd_rc), which reports reducer codes as the loop expects. */
static int bucket_done(void *arg, size_t from)
{
    struct trainer_backend *b = arg;
    while (b->bwd_next < b->nbuckets && b->bucket_lo[b->bwd_next] >= from) {
        uint32_t k = b->bwd_next++;
        if (b->bwd_rc)
            continue;
        int rc = fill_bucket(b, k, true);
        b->bwd_rc = rc ? rc : start_bucket(b, b->bwd_r, k);
    }
    return 0;
}

static int cuda_backward(struct trainer_backend *b, struct reducer *r, char *err, size_t errlen)
{
    if (b->bwd_r)
        return sl_errf(err, errlen, -EINVAL, "backward twice without a reduce between: the sums started are pending");
    if (!r || r->ops->device != CUDA_BUFFERS_ON_DEVICE) /* one rank; or reduce refuses it */
        return model_backward(b->m, b->dlogits.p, err, errlen);
    b->bwd_r = r;
    b->bwd_next = 0;
    b->bwd_rc = 0;
    return model_backward_progress(b->m, b->dlogits.p, bucket_done, b, err, errlen);
}

static int cuda_grads_finite(struct trainer_backend *b, bool reduced, bool *finite, char *err, size_t errlen)
{
    if (reduced && !b->summed)
        return sl_errf(err, errlen, -EINVAL, "grads_finite of a sum without a reduce before");
    bool any = false;
    int rc = dbuf_need(&b->g, &b->flag, sizeof(float));
    if (rc == 0)
        rc = gk_any_nonfinite(&b->g, reduced ? b->red.p : model_grads(b->m), b->nparams, b->flag.p, &any);
    if (rc)
        return sl_errf(err, errlen, rc, "checking the gradients: %s", gk_ctx_error(&b->g));
    *finite = !any;
    return 0;
}

/* The slow path: the gathered rows copied down and scanned on the host. */
static int cuda_nonfinite_rows(struct trainer_backend *b, uint32_t *rows, uint32_t max, uint32_t *n, char *err,
                               size_t errlen)
{
    *n = 0;
    if (!b->gathered)
        return 0;
    size_t dim = b->c.model.in_dim, total = (size_t)b->nodes * dim;
    if (total > b->h_x_cap) {
        float *p = realloc(b->h_x, total * sizeof *p);
        if (!p)
            return sl_errf(err, errlen, -ENOMEM, "out of memory for a host copy of %u input rows", b->nodes);
        b->h_x = p;
        b->h_x_cap = total;
    }
    int rc = total ? gk_download(&b->g, b->h_x, b->x.p, total * sizeof(float)) : 0;
    if (rc)
        return sl_errf(err, errlen, rc, "copying the input rows to the host: %s", gk_ctx_error(&b->g));
    uint32_t found = 0;
    for (uint32_t r = 0; r < b->nodes; r++)
        if (ops_count_nonfinite(b->h_x + (size_t)r * dim, dim)) {
            if (found < max)
                rows[found] = r;
            found++;
        }
    *n = found;
    return 0;
}

static int cuda_reduce(struct trainer_backend *b, struct reducer *r, bool real, float *weight)
{
    *weight = 0.0f;
    b->summed = false;
    if (r->ops->device != CUDA_BUFFERS_ON_DEVICE)
        return -EINVAL; /* the reducer would read the buffer in the wrong memory */
    size_t n = b->nparams;
    float *red = b->red.p;
    int rc = 0;
    if (b->bwd_r) { /* backward started every bucket */
        bool same = b->bwd_r == r && real && b->bwd_next == b->nbuckets;
        rc = b->bwd_rc ? b->bwd_rc : reducer_finish(b->bwd_r);
        b->bwd_r = NULL;
        if (rc == 0 && !same)
            rc = -EINVAL; /* not the reduce of that backward */
    } else { /* the same buckets, in the same order */
        for (uint32_t k = 0; rc == 0 && k < b->nbuckets; k++)
            if ((rc = fill_bucket(b, k, real)) == 0)
                rc = start_bucket(b, r, k);
        if (rc == 0)
            rc = reducer_finish(r);
    }
    if (rc == 0)
        rc = gk_download(&b->g, weight, red + n, sizeof *weight);
    b->summed = rc == 0;
    return rc;
}

static int cuda_outputs(struct trainer_backend *b, float *logits, float *emb, char *err, size_t errlen)
{
    const float *e = model_last_input(b->m);
    if (!e || !b->logits.p)
        return sl_errf(err, errlen, -EINVAL, "outputs before any forward");
    int rc;
    if ((rc = gk_download(&b->g, logits, b->logits.p, (size_t)b->targets * b->c.model.classes * sizeof(float))) ||
        (rc = gk_download(&b->g, emb, e, (size_t)b->targets * model_embed_width(&b->c.model) * sizeof(float))))
        return sl_errf(err, errlen, rc, "copying the outputs to the host: %s", gk_ctx_error(&b->g));
    return 0;
}

static int cuda_grad_sqnorm(struct trainer_backend *b, bool reduced, double *sumsq, char *err, size_t errlen)
{
    if (reduced && !b->summed)
        return sl_errf(err, errlen, -EINVAL, "grad_sqnorm of a sum without a reduce before");
    int rc = dbuf_need(&b->g, &b->sumsq, gk_sumsq_scratch(b->nparams) * sizeof(double));
    if (rc == 0)
        rc = gk_sumsq(&b->g, reduced ? b->red.p : model_grads(b->m), b->nparams, b->sumsq.p, sumsq);
    if (rc)
        return sl_errf(err, errlen, rc, "the gradient's norm: %s", gk_ctx_error(&b->g));
    return 0;
}

static void cuda_set_lr(struct trainer_backend *b, float lr)
{
    b->adam.lr = lr;
}

static int cuda_step(struct trainer_backend *b, bool reduced, float scale)
{
    if (!reduced) {
        int rc = scale != 1.0f ? gk_scale(&b->g, model_grads(b->m), b->nparams, scale) : 0;
        return rc ? rc : adam_step(&b->adam, model_params(b->m), model_grads(b->m));
    }
    if (!b->summed)
        return -EINVAL; /* no reduce before */
    b->summed = false;
    int rc = gk_scale(&b->g, b->red.p, b->nparams, scale);
    return rc ? rc : adam_step(&b->adam, model_params(b->m), b->red.p);
}

static int cuda_state(struct trainer_backend *b, struct trainer_state *s, char *err, size_t errlen)
{
    size_t n = b->nparams, bytes = (n ? n : 1) * sizeof(float);
    if (!b->h_params) {
        b->h_params = malloc(bytes);
        b->h_m = malloc(bytes);
        b->h_v = malloc(bytes);
        if (!b->h_params || !b->h_m || !b->h_v) {
            free(b->h_params), free(b->h_m), free(b->h_v);
            b->h_params = b->h_m = b->h_v = NULL;
            return sl_errf(err, errlen, -ENOMEM, "out of memory for a host copy of %zu parameters", n);
        }
    }
    int rc;
    if ((rc = gk_download(&b->g, b->h_params, model_params(b->m), n * sizeof(float))) != 0 ||
        (rc = gk_download(&b->g, b->h_m, b->adam.m, n * sizeof(float))) != 0 ||
        (rc = gk_download(&b->g, b->h_v, b->adam.v, n * sizeof(float))) != 0)
        return sl_errf(err, errlen, rc, "copying the parameters and Adam's moments to the host: %s",
                       gk_ctx_error(&b->g));
    *s = (struct trainer_state){
        .n = n, .params = b->h_params, .adam_m = b->h_m, .adam_v = b->h_v, .step = &b->adam.step};
    return 0;
}

static int cuda_state_loaded(struct trainer_backend *b, char *err, size_t errlen)
{
    if (!b->h_params)
        return sl_errf(err, errlen, -EINVAL, "state_loaded without state(): nothing was written to take");
    size_t n = b->nparams;
    int rc;
    if ((rc = gk_upload(&b->g, model_params(b->m), b->h_params, n * sizeof(float))) != 0 ||
        (rc = gk_upload(&b->g, b->adam.m, b->h_m, n * sizeof(float))) != 0 ||
        (rc = gk_upload(&b->g, b->adam.v, b->h_v, n * sizeof(float))) != 0)
        return sl_errf(err, errlen, rc, "copying the parameters and Adam's moments to the device: %s",
                       gk_ctx_error(&b->g));
    return 0;
}

const struct trainer_backend_ops trainer_cuda_backend = {
    .name = "cuda",
    .create = cuda_create,
    .gather = cuda_gather,
    .forward = cuda_forward,
    .backward = cuda_backward,
    .grads_finite = cuda_grads_finite,
    .nonfinite_rows = cuda_nonfinite_rows,
    .reduce = cuda_reduce,
    .grad_sqnorm = cuda_grad_sqnorm,
    .outputs = cuda_outputs,
    .set_lr = cuda_set_lr,
    .step = cuda_step,
    .state = cuda_state,
    .state_loaded = cuda_state_loaded,
    .free = cuda_free,
};
