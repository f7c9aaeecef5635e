/* t_batch.c - test graphs and a reference sampler (see t_batch.h). */
#include "t_batch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

uint64_t t_mix(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int t_csc_random(struct t_csc *g, uint64_t n, uint32_t avg_deg, bool hubs, uint64_t seed)
{
    memset(g, 0, sizeof *g);
    uint64_t st = seed;
    g->n = n;
    g->indptr = malloc((n + 1) * sizeof *g->indptr);
    g->labels = malloc(n * sizeof *g->labels);
    if (!g->indptr || !g->labels)
        goto err;
    g->indptr[0] = 0;
    for (uint64_t v = 0; v < n; v++) {
        uint64_t span = hubs && t_mix(&st) % 32 == 0 ? 16ull * avg_deg : 2ull * avg_deg;
        g->indptr[v + 1] = g->indptr[v] + t_mix(&st) % (span + 1);
        g->labels[v] = (int32_t)(t_mix(&st) % 5) - (t_mix(&st) % 9 == 0); /* a few -1 */
    }
    g->e = g->indptr[n];
    g->indices = malloc((g->e ? g->e : 1) * sizeof *g->indices);
    if (!g->indices)
        goto err;
    for (uint64_t i = 0; i < g->e; i++)
        g->indices[i] = (uint32_t)(t_mix(&st) % n);
    return 0;
err:
    t_csc_free(g);
    return -ENOMEM;
}

/* Reads dir/<file of entry f> into *out, expecting exactly bytes. */
static int load(const char *dir, const struct dataset_file *f, uint64_t bytes, void **out, char *err, size_t errlen)
{
    char path[4200];
    if (sl_path_join(path, sizeof path, dir, f->file) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s/%s: path too long", dir, f->file);
    char *buf;
    size_t len;
    int rc = sl_read_file(path, (size_t)bytes + 1, &buf, &len, err, errlen);
    if (rc)
        return rc;
    if (len != bytes) {
        free(buf);
        return sl_errf(err, errlen, -EINVAL, "%s: %zu bytes, expected %" PRIu64, path, len, bytes);
    }
    *out = buf;
    return 0;
}

int t_csc_load(struct t_csc *g, const char *dir, const struct dataset_meta *m, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    if (m->f[DATASET_INDICES].dtype != DTYPE_U32 || m->nodes > (1ull << 28))
        return sl_errf(err, errlen, -EINVAL, "%s: the test sampler reads small graphs with 32-bit ids", dir);
    g->n = m->nodes;
    g->e = m->edges;
    void *p;
    int rc = load(dir, &m->f[DATASET_INDPTR], (g->n + 1) * 8, &p, err, errlen);
    if (rc)
        goto err;
    g->indptr = p;
    if ((rc = load(dir, &m->f[DATASET_INDICES], g->e * 4, &p, err, errlen)) != 0)
        goto err;
    g->indices = p;
    if ((rc = load(dir, &m->f[DATASET_LABELS], g->n * 4, &p, err, errlen)) != 0)
        goto err;
    g->labels = p;
    if (g->indptr[0] != 0 || g->indptr[g->n] != g->e) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: indptr does not run from 0 to %" PRIu64, dir, g->e);
        goto err;
    }
    return 0;
err:
    t_csc_free(g);
    return rc;
}

void t_csc_free(struct t_csc *g)
{
    if (!g)
        return;
    free(g->indptr);
    free(g->indices);
    free(g->labels);
    memset(g, 0, sizeof *g);
}

uint64_t t_csc_max_in_degree(const struct t_csc *g)
{
    uint64_t d = 0;
    for (uint64_t v = 0; v < g->n; v++)
        d = SL_MAX(d, g->indptr[v + 1] - g->indptr[v]);
    return d;
}

/* ---- the reference sampler ------------------------------------------------------------- */

/* Open addressing map global id -> local id. */
struct idmap {
    uint64_t *keys; /* UINT64_MAX = empty */
    uint32_t *vals;
    uint64_t mask;
};

static int idmap_init(struct idmap *m, uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    m->mask = cap - 1;
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    if (!m->keys || !m->vals)
        return -ENOMEM;
    memset(m->keys, 0xff, cap * sizeof *m->keys);
    return 0;
}

/* The slot of key: where it is, or the empty one where it goes. */
static uint64_t idmap_find(const struct idmap *m, uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    uint64_t i = (h ^ (h >> 29)) & m->mask;
    while (m->keys[i] != UINT64_MAX && m->keys[i] != key)
        i = (i + 1) & m->mask;
    return i;
}

/* The local id of global id g, adding it as a new node when unseen. */
static int64_t local_of(struct batch_writer *w, struct idmap *m, uint64_t g, unsigned opts)
{
    uint64_t i = idmap_find(m, g);
    if (m->keys[i] == g)
        return m->vals[i];
    int64_t local;
    if (opts & T_RESERVE_NODES) {
        uint32_t first;
        uint64_t *p = batch_reserve_nodes(w, 1, &first);
        if (!p)
            return w->rc;
        *p = g;
        local = first;
    } else {
        local = batch_add_node(w, g);
        if (local < 0)
            return local;
    }
    m->keys[i] = g;
    m->vals[i] = (uint32_t)local;
    return local;
}

int t_sample_batch(const struct t_csc *g, const struct batch_shape *s, uint32_t targets, uint64_t seed,
                   const struct batch_id *id, unsigned opts, void *slot, size_t size, char *err, size_t errlen)
{
    struct batch_writer w;
    int rc = batch_init(&w, slot, size, s, targets, id, err, errlen);
    if (rc)
        return rc;
    struct idmap m = {0};
    uint64_t *pos = NULL; /* chosen neighbour positions of one destination */
    uint64_t fan_max = 0;
    for (uint32_t k = 0; k < s->layers; k++)
        fan_max = SL_MAX(fan_max, s->fanouts[k] < 0 ? t_csc_max_in_degree(g) : (uint64_t)s->fanouts[k]);
    pos = malloc((fan_max + 1) * sizeof *pos);
    if (!pos || idmap_init(&m, w.plan.n_max[s->layers]) != 0) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    uint64_t st = seed;
    /* targets: Floyd's algorithm, distinct ids of [0, n) */
    for (uint64_t j = g->n - targets; j < g->n; j++) {
        uint64_t t = t_mix(&st) % (j + 1);
        if (m.keys[idmap_find(&m, t)] == t)
            t = j;
        uint64_t i = idmap_find(&m, t);
        m.keys[i] = t;
        m.vals[i] = w.nn;
        batch_add_target(&w, t, g->labels ? g->labels[t] : (int32_t)(t % 7));
    }
    for (uint32_t k = 0; k < s->layers && !w.rc; k++) {
        batch_begin_block(&w);
        uint32_t ndst = w.nn;
        for (uint32_t d = 0; d < ndst && !w.rc; d++) {
            uint64_t v = w.nodes[d];
            uint64_t deg = g->indptr[v + 1] - g->indptr[v];
            uint64_t cnt = s->fanouts[k] < 0 ? deg : SL_MIN(deg, (uint64_t)s->fanouts[k]);
            /* cnt distinct positions of [0, deg): Floyd again, with a linear check */
            for (uint64_t j = deg - cnt, c = 0; j < deg; j++, c++) {
                uint64_t t = cnt == deg ? j : t_mix(&st) % (j + 1);
                for (uint64_t q = 0; q < c; q++)
                    if (pos[q] == t)
                        t = j;
                pos[c] = t;
            }
            uint32_t *dst = (opts & T_RESERVE_EDGES) && cnt ? batch_reserve_edges(&w, (uint32_t)cnt) : NULL;
            for (uint64_t c = 0; c < cnt && !w.rc; c++) {
                int64_t local = local_of(&w, &m, g->indices[g->indptr[v] + pos[c]], opts);
                if (local < 0)
                    break;
                if (dst)
                    dst[c] = (uint32_t)local;
                else
                    batch_add_edge(&w, (uint32_t)local);
            }
            batch_end_dst(&w);
        }
        batch_end_block(&w);
    }
    rc = batch_finish(&w, err, errlen);
out:
    free(pos);
    free(m.keys);
    free(m.vals);
    return rc;
}

#define DIFF(...) (snprintf(msg, len, __VA_ARGS__), -1)

int t_batch_compare(const struct batch_view *a, const struct batch_view *b, char *msg, size_t len)
{
    const struct batch_hdr *x = &a->h, *y = &b->h;
    if (x->batch != y->batch || x->epoch != y->epoch || x->rank != y->rank)
        return DIFF("ids %" PRIu64 "/%u/%u vs %" PRIu64 "/%u/%u", x->batch, x->epoch, x->rank, y->batch, y->epoch,
                    y->rank);
    if (x->layers != y->layers || x->targets != y->targets)
        return DIFF("%u layers, %u targets vs %u, %u", x->layers, x->targets, y->layers, y->targets);
    for (uint32_t k = 0; k <= x->layers; k++)
        if (x->n[k] != y->n[k] || (k < x->layers && x->e[k] != y->e[k]))
            return DIFF("hop %u: %u nodes, %u edges vs %u, %u", k, x->n[k], k < x->layers ? x->e[k] : 0, y->n[k],
                        k < x->layers ? y->e[k] : 0);
    if (memcmp(a->labels, b->labels, 4ull * x->targets))
        return DIFF("labels differ");
    if (memcmp(a->nodes, b->nodes, 8ull * x->n[x->layers]))
        return DIFF("nodes differ");
    for (uint32_t k = 0; k < x->layers; k++)
        if (memcmp(a->indptr[k], b->indptr[k], 4ull * (x->n[k] + 1)) || memcmp(a->src[k], b->src[k], 4ull * x->e[k]))
            return DIFF("block %u differs", k);
    return 0;
}
