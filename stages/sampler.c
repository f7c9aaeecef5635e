/* sampler.c - the topology handle, the split files and node-wise
 * neighbour sampling into a batch slot (protocol and choices: sampler.h).
 * Which targets a batch holds is the schedule's business (schedule.h). */
#include "stages/sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/util.h"
#include "stages/sampler_fetch.h"

/* Fanouts up to this many use a linear scan of the picks so far as
 * Floyd's set (f^2/2 compares of values in one cache line or two);
 * larger ones a stamped hash set. */
#define PICK_SCAN_MAX 24

/* ---- randomness --------------------------------------------------------------------- */

/* Lemire, "Fast random integer generation in an interval" (2019): the high
 * word of x * range, rejecting the (2^64 mod range) low words that would
 * make some results more likely. */
static inline uint64_t below(uint64_t *state, uint64_t range)
{
    unsigned __int128 m = (unsigned __int128)sl_splitmix64(state) * range;
    uint64_t lo = (uint64_t)m;
    if (lo < range) {
        uint64_t t = (0 - range) % range;
        while (lo < t) {
            m = (unsigned __int128)sl_splitmix64(state) * range;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

uint64_t sampler_rand_below(uint64_t *state, uint64_t range)
{
    return below(state, range);
}

uint64_t sampler_batch_seed(uint64_t seed, uint32_t epoch, uint32_t rank, uint64_t batch)
{
    uint64_t h = sl_mix64(seed ^ 0x5A3C1E0F00000000ull);
    h = sl_mix64(h ^ ((uint64_t)epoch << 32 | rank));
    return sl_mix64(h ^ batch);
}

/* ---- topology ------------------------------------------------------------------------ */

static int map_file(const char *dir, const struct dataset_file *f, size_t *len, const void **out, bool random,
                    char *err, size_t errlen)
{
    char path[4096];
    *out = NULL;
    *len = 0;
    if (sl_path_join(path, sizeof path, dir, f->file))
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s/%s: path too long", dir, f->file);
    if (f->bytes == 0)
        return 0;
    if (f->bytes > SIZE_MAX)
        return sl_errf(err, errlen, -EOVERFLOW, "%s: %" PRIu64 " bytes do not fit the address space", path, f->bytes);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    void *p = mmap(NULL, (size_t)f->bytes, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return sl_errf(err, errlen, -e, "%s: cannot map %" PRIu64 " bytes: %s", path, f->bytes, strerror(e));
    if (random)
        (void)madvise(p, (size_t)f->bytes, MADV_RANDOM); /* advice only */
    *out = p;
    *len = (size_t)f->bytes;
    return 0;
}

/* Reads a whole dataset file of exactly f->bytes into buf. */
static int read_whole(const char *dir, const struct dataset_file *f, void *buf, char *err, size_t errlen)
{
    char path[4096];
    if (sl_path_join(path, sizeof path, dir, f->file))
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s/%s: path too long", dir, f->file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    size_t got = 0;
    int rc = sl_pread_full(fd, buf, (size_t)f->bytes, 0, &got);
    close(fd);
    if (rc)
        return sl_errf(err, errlen, rc, "%s: read failed: %s", path, strerror(-rc));
    if (got != f->bytes)
        return sl_errf(err, errlen, -EINVAL, "%s: %zu of %" PRIu64 " bytes read (file shrank?); run gnnprep check",
                       path, got, f->bytes);
    return 0;
}

int sampler_topo_open(struct sampler_topo *t, const char *dir, const struct dataset_meta *m, char *err, size_t errlen)
{
    return sampler_topo_open_mode(t, dir, m, NULL, err, errlen);
}

int sampler_topo_open_mode(struct sampler_topo *t, const char *dir, const struct dataset_meta *m,
                           const struct sampler_topo_opts *o, char *err, size_t errlen)
{
    static const struct sampler_topo_opts mmap_opts = {.mode = SAMPLER_TOPO_MMAP};
    if (!o)
        o = &mmap_opts;
    if (o->load_chunk % SAMPLER_IO_ALIGN)
        return sl_errf(err, errlen, -EINVAL, "sampler: a load chunk of %zu bytes is not a multiple of %u", o->load_chunk,
                       SAMPLER_IO_ALIGN);
    memset(t, 0, sizeof *t);
    t->fd = -1;
    t->mode = o->mode;
    t->fetch_buf = o->fetch_buf;
    t->round_reads = o->round_reads ? o->round_reads : SAMPLER_FETCH_ROUND_READS;
    const struct dataset_file *fp = &m->f[DATASET_INDPTR], *fi = &m->f[DATASET_INDICES];
    int rc;
    if (!fp->present || !fi->present || m->nodes == 0)
        return sl_errf(err, errlen, -EINVAL, "%s: the dataset has no graph (indptr.bin, indices.bin)", dir);
    uint64_t want;
    enum dtype id = dtype_for_ids(m->nodes);
    if (fp->dtype != DTYPE_U64 || fi->dtype != id || sl_mul_ovf(m->nodes + 1, 8, &want) || fp->bytes != want ||
        sl_mul_ovf(m->edges, dtype_size(id), &want) || fi->bytes != want || m->nodes + 1 > SIZE_MAX / 8)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: indptr/indices types or sizes disagree with %" PRIu64 " nodes and %" PRIu64
                       " edges; run gnnprep check",
                       dir, m->nodes, m->edges);
    t->nodes = m->nodes;
    t->edges = m->edges;
    t->indices_u64 = id == DTYPE_U64;
    t->indptr = malloc((size_t)fp->bytes);
    if (!t->indptr) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: no memory for indptr (%" PRIu64 " bytes)", dir, fp->bytes);
        goto err;
    }
    if ((rc = read_whole(dir, fp, t->indptr, err, errlen)))
        goto err;
    if (t->indptr[0] != 0 || t->indptr[t->nodes] != t->edges) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "%s/%s: starts at %" PRIu64 " and ends at %" PRIu64 " (want 0 and %" PRIu64 "); run gnnprep check",
                     dir, fp->file, t->indptr[0], t->indptr[t->nodes], t->edges);
        goto err;
    }
    for (uint64_t v = 0; v < t->nodes; v++) {
        if (t->indptr[v + 1] < t->indptr[v]) {
            rc = sl_errf(err, errlen, -EINVAL, "%s/%s: decreases at node %" PRIu64 "; run gnnprep check", dir, fp->file,
                         v);
            goto err;
        }
        uint64_t d = t->indptr[v + 1] - t->indptr[v];
        if (d > t->max_in_degree)
            t->max_in_degree = d;
    }
    char ipath[4096];
    if (sl_path_join(ipath, sizeof ipath, dir, fi->file)) {
        rc = sl_errf(err, errlen, -ENAMETOOLONG, "%s/%s: path too long", dir, fi->file);
        goto err;
    }
    switch (o->mode) {
    case SAMPLER_TOPO_MMAP:
        rc = map_file(dir, fi, &t->indices_len, &t->indices, true, err, errlen);
        break;
    case SAMPLER_TOPO_MEMORY:
        if (fi->bytes && o->shm_run)
            rc = sampler_topo_load_shared(t, ipath, fi->bytes, o->load_chunk, o->buffered, o->shm_run, err, errlen);
        else if (fi->bytes)
            rc = sampler_topo_load_memory(t, ipath, fi->bytes, o->load_chunk, o->buffered, err, errlen);
        break;
    case SAMPLER_TOPO_CACHE:
        rc = sampler_topo_load_cache(t, ipath, fi->bytes, o->cache_bytes, o->load_chunk, o->buffered, err, errlen);
        break;
    default:
        rc = sl_errf(err, errlen, -EINVAL, "sampler: unknown topology mode %d", (int)o->mode);
    }
    if (rc)
        goto err;
    const struct dataset_file *fl = &m->f[DATASET_LABELS];
    if (fl->present) {
        if (fl->dtype != DTYPE_I32 || fl->bytes != t->nodes * 4) {
            rc = sl_errf(err, errlen, -EINVAL, "%s/%s: not i32[%" PRIu64 "]; run gnnprep check", dir, fl->file,
                         t->nodes);
            goto err;
        }
        if (t->mode == SAMPLER_TOPO_MMAP) { /* the mode that leaves the dataset's pages to the page cache */
            const void *p;
            if ((rc = map_file(dir, fl, &t->labels_len, &p, true, err, errlen)))
                goto err;
            t->labels = p;
        } else if (fl->bytes) {
            /* in memory: a mapped label is a 4 KiB random read when its
             * page is not cached, waiting behind every read the extractor
             * has queued on the same disk (a papers100M-sized run stalled
             * on them: ~1000 such faults a batch) */
            if (!(t->labels_mem = malloc((size_t)fl->bytes))) {
                rc = sl_errf(err, errlen, -ENOMEM, "%s/%s: no memory for %" PRIu64 " labels", dir, fl->file, t->nodes);
                goto err;
            }
            if ((rc = read_whole(dir, fl, t->labels_mem, err, errlen)))
                goto err;
            t->labels = t->labels_mem;
        }
    }
    return 0;
err:
    sampler_topo_free(t);
    return rc;
}

void sampler_topo_free(struct sampler_topo *t)
{
    if (!t)
        return;
    free(t->indptr);
    if (t->indices_len)
        munmap((void *)t->indices, t->indices_len);
    free(t->indices_mem);
    if (t->shm) {
        shm_seg_detach(t->shm);
        free(t->shm);
    }
    free(t->cache_off);
    free(t->cache);
    if (t->mode == SAMPLER_TOPO_CACHE && t->fd >= 0) /* a zeroed handle (mode MMAP) owns no fd */
        close(t->fd);
    if (t->labels_len)
        munmap((void *)t->labels, t->labels_len);
    free(t->labels_mem);
    memset(t, 0, sizeof *t);
}

int sampler_split_load(const char *dir, const struct dataset_meta *m, int split, uint64_t **ids, uint64_t *n, char *err,
                       size_t errlen)
{
    *ids = NULL;
    *n = 0;
    if (split != DATASET_TRAIN && split != DATASET_VAL && split != DATASET_TEST)
        return sl_errf(err, errlen, -EINVAL, "not a split file index: %d", split);
    const struct dataset_file *f = &m->f[split];
    if (!f->present)
        return sl_errf(err, errlen, -ENOENT, "%s: the dataset has no %s split", dir, dataset_file_key[split]);
    size_t es = dtype_size(f->dtype);
    uint64_t want;
    if ((f->dtype != DTYPE_U32 && f->dtype != DTYPE_U64) || sl_mul_ovf(f->rows, es, &want) || want != f->bytes ||
        f->rows > SIZE_MAX / 8)
        return sl_errf(err, errlen, -EINVAL, "%s/%s: not a u32/u64 vector of %" PRIu64 " ids; run gnnprep check", dir,
                       f->file, f->rows);
    uint64_t *out = malloc(f->rows ? (size_t)f->rows * 8 : 8);
    if (!out)
        return sl_errf(err, errlen, -ENOMEM, "%s/%s: no memory for %" PRIu64 " ids", dir, f->file, f->rows);
    int rc = 0;
    if (f->rows && (rc = read_whole(dir, f, out, err, errlen)))
        goto err;
    if (f->dtype == DTYPE_U32) /* widen in place, back to front */
        for (uint64_t i = f->rows; i-- > 0;)
            out[i] = ((const uint32_t *)out)[i];
    for (uint64_t i = 0; i < f->rows; i++)
        if (out[i] >= m->nodes) {
            rc = sl_errf(err, errlen, -EINVAL,
                         "%s/%s: id %" PRIu64 " at %" PRIu64 " is not below %" PRIu64 " nodes; run gnnprep check", dir,
                         f->file, out[i], i, m->nodes);
            goto err;
        }
    *ids = out;
    *n = f->rows;
    return 0;
err:
    free(out);
    return rc;
}

/* ---- the sampler ------------------------------------------------------------------------ */

int sampler_init(struct sampler *s, const struct sampler_topo *t, const struct batch_shape *shape, char *err,
                 size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->topo = t;
    s->shape = *shape;
    s->shape.nodes = t->nodes;
    s->shape.edges = t->edges;
    s->shape.max_in_degree = t->max_in_degree;
    int rc = batch_plan(&s->shape, &s->plan, err, errlen);
    if (rc)
        return rc;
    uint64_t nmax = s->plan.n_max[s->plan.layers];
    uint64_t cap = sl_pow2_at_least(2 * nmax, 16);
    uint64_t fmax = 0;
    for (uint32_t k = 0; k < s->plan.layers; k++)
        if (s->shape.fanouts[k] >= 0 && (uint64_t)s->shape.fanouts[k] > fmax)
            fmax = (uint64_t)s->shape.fanouts[k];
    fmax = SL_MIN(fmax, SL_MAX(t->max_in_degree, 1));
    uint64_t pcap = sl_pow2_at_least(2 * fmax, 16);
    s->mask = cap - 1;
    s->shift = (unsigned)(64 - __builtin_ctzll(cap));
    s->pick_mask = pcap - 1;
    s->pick_shift = (unsigned)(64 - __builtin_ctzll(pcap));
    s->map = calloc(cap, sizeof *s->map);
    s->pick_keys = malloc(pcap * sizeof *s->pick_keys);
    s->pick_stamp = calloc(pcap, sizeof *s->pick_stamp);
    s->pick_cap = fmax ? fmax : 1;
    s->picks = malloc(2 * s->pick_cap * sizeof *s->picks);
    if (!s->map || !s->pick_keys || !s->pick_stamp || !s->picks) {
        sampler_free(s);
        return sl_errf(err, errlen, -ENOMEM, "sampler: no memory for a node map of %" PRIu64 " entries", cap);
    }
    if (t->mode == SAMPLER_TOPO_CACHE) {
        uint64_t nk = s->plan.layers ? s->plan.n_max[s->plan.layers - 1] : 1;
        s->known = malloc((nk ? nk : 1) * sizeof *s->known);
        s->store = malloc(SAMPLER_KNOWN_STORE);
        if (!s->known || !s->store) {
            sampler_free(s);
            return sl_errf(err, errlen, -ENOMEM, "sampler: no memory for the batch's read lists");
        }
        size_t buf = t->fetch_buf ? t->fetch_buf : SAMPLER_FETCH_BUF;
        size_t pbuf = t->fetch_buf ? t->fetch_buf / 4 : SAMPLER_PREFETCH_BUF;
        if ((rc = sampler_fetch_init(&s->fetch, t, buf, t->round_reads, err, errlen)) ||
            (rc = sampler_fetch_init(&s->pre, t, pbuf, 0, err, errlen))) { /* a batch's targets: one round */
            sampler_free(s);
            return rc;
        }
        for (int i = 0; i < 2; i++) {
            s->pre_ids[i] = malloc(SL_MAX(s->shape.batch_size, 1) * sizeof *s->pre_ids[i]);
            if (!s->pre_ids[i]) {
                sampler_free(s);
                return sl_errf(err, errlen, -ENOMEM, "sampler: no memory for the next batches' targets");
            }
        }
    }
    return 0;
}

void sampler_free(struct sampler *s)
{
    if (!s)
        return;
    free(s->map);
    free(s->pick_keys);
    free(s->pick_stamp);
    free(s->picks);
    sampler_fetch_free(s->fetch);
    sampler_fetch_free(s->pre);
    free(s->pre_ids[0]);
    free(s->pre_ids[1]);
    free(s->known);
    free(s->store);
    free(s->kept);
    memset(s, 0, sizeof *s);
}

int sampler_set_filter(struct sampler *s, const struct sampler_filter *f, char *err, size_t errlen)
{
    if (!f) {
        s->filtered = false;
        return 0;
    }
    if (!f->node_pos || !f->part_in || f->part_nodes == 0 || f->parts == 0)
        return sl_errf(err, errlen, -EINVAL, "sampler: a filter needs node positions, partitions and their size");
    if (s->shape.degrees && s->topo->mode == SAMPLER_TOPO_CACHE)
        return sl_errf(err, errlen, -EINVAL,
                       "sampler: the partition mode's in-buffer degrees (GCN) need every list in memory; use "
                       "pipeline.topology = \"memory\" or \"mmap\"");
    if (!s->kept) { /* two destinations' (the memory path draws one ahead) */
        s->kept = malloc(2 * SL_MAX(s->topo->max_in_degree, 1) * sizeof *s->kept);
        if (!s->kept)
            return sl_errf(err, errlen, -ENOMEM, "sampler: no memory for %" PRIu64 " in-neighbours",
                           s->topo->max_in_degree);
    }
    s->filter = *f;
    s->filtered = true;
    return 0;
}

/* Whether node g is in the filter's buffer. */
static inline bool node_in(const struct sampler_filter *f, uint64_t g)
{
    uint64_t pos = f->pos_u64 ? ((const uint64_t *)f->node_pos)[g] : ((const uint32_t *)f->node_pos)[g];
    uint64_t q = pos / f->part_nodes;
    return q < f->parts && f->part_in[q];
}

/* Next stamp of a stamped table; on wrap-around the table is wiped once. */
static uint32_t next_stamp(uint32_t *cur, uint32_t *stamp, uint64_t cap)
{
    if (++*cur == 0) {
        memset(stamp, 0, cap * sizeof *stamp);
        *cur = 1;
    }
    return *cur;
}

/* The same for the node map's entries. */
static uint32_t next_map_stamp(struct sampler *s)
{
    if (++s->cur == 0) {
        for (uint64_t i = 0; i <= s->mask; i++)
            s->map[i].stamp = 0;
        s->cur = 1;
    }
    return s->cur;
}

/* Fibonacci hashing: the top bits of key * 2^64/phi, as many as the
 * table has (mask = 2^bits - 1). */
static inline uint64_t slot_of(uint64_t key, unsigned shift)
{
    return (key * 0x9E3779B97F4A7C15ull) >> shift;
}

/* The local id of global node g, adding it to the batch if new: the local
 * id, or the writer's error (< 0). */
static inline int64_t local_of(struct sampler *s, struct batch_writer *w, uint64_t g)
{
    uint64_t i = slot_of(g, s->shift);
    for (;;) {
        struct sampler_ent *e = &s->map[i];
        if (e->stamp != s->cur) {
            int64_t l = batch_add_node(w, g);
            if (l < 0)
                return l;
            *e = (struct sampler_ent){.key = g, .val = (uint32_t)l, .stamp = s->cur};
            return l;
        }
        if (e->key == g)
            return e->val;
        i = (i + 1) & s->mask;
    }
}

/* Inserts position p into the stamped pick set; false if present. */
static inline bool pick_insert(struct sampler *s, uint64_t p)
{
    uint64_t i = slot_of(p, s->pick_shift);
    while (s->pick_stamp[i] == s->pick_cur) {
        if (s->pick_keys[i] == p)
            return false;
        i = (i + 1) & s->pick_mask;
    }
    s->pick_stamp[i] = s->pick_cur;
    s->pick_keys[i] = p;
    return true;
}

/* Floyd's algorithm: f distinct positions of [0, d), uniform over the
 * f-subsets, into p. For j = d-f .. d-1 draw t in [0, j]; take t
 * unless already taken, else j (which cannot have been taken yet). */
static void floyd(struct sampler *s, uint64_t *rng, uint64_t d, uint64_t f, uint64_t *restrict p)
{
    if (f <= PICK_SCAN_MAX) {
        for (uint64_t j = d - f, n = 0; j < d; j++, n++) {
            uint64_t t = below(rng, j + 1);
            for (uint64_t i = 0; i < n; i++)
                if (p[i] == t) {
                    t = j;
                    break;
                }
            p[n] = t;
        }
        return;
    }
    next_stamp(&s->pick_cur, s->pick_stamp, s->pick_mask + 1);
    for (uint64_t j = d - f, n = 0; j < d; j++, n++) {
        uint64_t t = below(rng, j + 1);
        if (!pick_insert(s, t)) {
            t = j;
            pick_insert(s, t);
        }
        p[n] = t;
    }
}

/* The i-th id of a list of u32 or u64 ids. */
static inline uint64_t list_at(const void *list, bool u64, uint64_t i)
{
    return u64 ? ((const uint64_t *)list)[i] : ((const uint32_t *)list)[i];
}

/* One destination's sampling, in two steps: pend_draw picks its sources
 * (the random draws, in destination order: the only use of rng) and asks
 * for their node map entries; pend_put adds them to the batch. Between
 * the two the caller may draw the next destination, so that its map
 * misses overlap this one's inserts (sample_block_mem); done back to back
 * they are sample_dst. Either way the draws, the local ids and the edges
 * come in the same order: the same batch. */
struct pend {
    const void *list; /* the destination's in-neighbour ids (with a filter: its in-buffer ones, u64) */
    bool u64;         /* list's ids are u64 */
    uint64_t d, take; /* in-degree (in the buffer, with a filter), sources taken */
    uint64_t *picks;  /* (take) positions in list, when take < d */
};

/* picks: room for the largest fanout; kept: with a filter, room for the
 * largest in-degree (a pending destination's in-buffer list lives there) */
static inline void pend_draw(struct sampler *s, uint64_t *rng, struct pend *p, const void *list, uint64_t d, int64_t f,
                             uint64_t *picks, uint64_t *kept)
{
    bool u64 = s->topo->indices_u64;
    if (s->filtered) { /* the in-buffer part of the list, drawn from as a whole list */
        uint64_t n = 0;
        for (uint64_t i = 0; i < d; i++) {
            uint64_t g = list_at(list, u64, i);
            if (node_in(&s->filter, g))
                kept[n++] = g;
        }
        list = kept;
        d = n;
        u64 = true;
    }
    p->u64 = u64;
    p->list = list;
    p->d = d;
    p->take = f < 0 || d <= (uint64_t)f ? d : (uint64_t)f;
    p->picks = picks;
    /* the node map's entries of these sources lie at random in a table
     * larger than the caches: ask for all of them now */
    if (p->take == d) {
        for (uint64_t i = 0; i < d; i++)
            __builtin_prefetch(&s->map[slot_of(list_at(list, u64, i), s->shift)]);
    } else {
        floyd(s, rng, d, p->take, picks);
        for (uint64_t i = 0; i < p->take; i++)
            __builtin_prefetch(&s->map[slot_of(list_at(list, u64, picks[i]), s->shift)]);
    }
}

/* The edges taken, and w->rc set on failure. */
static inline uint64_t pend_put(struct sampler *s, struct batch_writer *w, const struct pend *p)
{
    const bool u64 = p->u64;
    uint64_t take = p->take;
    uint32_t *out = take ? batch_reserve_edges(w, (uint32_t)take) : NULL;
    if (take && !out)
        return 0;
    for (uint64_t i = 0; i < take; i++) {
        int64_t l = local_of(s, w, list_at(p->list, u64, take == p->d ? i : p->picks[i]));
        if (l < 0)
            break;
        out[i] = (uint32_t)l;
    }
    batch_end_dst(w);
    return take;
}

/* Samples destination g (in-degree d, its ids at list) with fanout f into
 * the writer: the edges taken, and w->rc set on failure. */
static inline uint64_t sample_dst(struct sampler *s, struct batch_writer *w, uint64_t *rng, const void *list, uint64_t d,
                                  int64_t f)
{
    struct pend p;
    pend_draw(s, rng, &p, list, d, f, s->picks, s->kept);
    return pend_put(s, w, &p);
}

#define SAMPLE_PREFETCH 8 /* destinations ahead whose indptr entries are prefetched */

/* Waits for the oldest prefetch and forgets it: 0 with *lists and *n its
 * lists and how many targets they cover, or -errno. */
static int prefetch_pop(struct sampler *s, const void *const **lists, uint32_t *n, char *err, size_t errlen)
{
    int64_t got = sampler_fetch_wait(s->pre, lists, &s->lists_read, &s->bytes_read, err, errlen);
    if (got < 0) {
        s->pre_count = 0; /* the reader forgot every round */
        return (int)got;
    }
    s->pre_head = (s->pre_head + 1) % 2;
    s->pre_count--;
    *n = (uint32_t)got;
    return 0;
}

int sampler_prefetch(struct sampler *s, const uint64_t *targets, uint32_t n, char *err, size_t errlen)
{
    if (!s->pre)
        return 0;
    if (n == 0 || n > s->shape.batch_size)
        return sl_errf(err, errlen, -EINVAL, "sampler: prefetch of %" PRIu32 " targets (1 .. %" PRIu64 ")", n,
                       s->shape.batch_size);
    for (uint32_t i = 0; i < n; i++)
        if (targets[i] >= s->topo->nodes)
            return sl_errf(err, errlen, -ERANGE, "sampler: target %" PRIu64 " is not below %" PRIu64 " nodes",
                           targets[i], s->topo->nodes);
    if (s->pre_count == 2) { /* the oldest was never asked for */
        const void *const *lists;
        uint32_t got;
        int rc = prefetch_pop(s, &lists, &got, err, errlen);
        if (rc)
            return rc;
    }
    int64_t got = sampler_fetch_start(s->pre, targets, NULL, n, err, errlen);
    if (got < 0) {
        s->pre_count = 0;
        return (int)got;
    }
    unsigned i = (s->pre_head + s->pre_count) % 2;
    memcpy(s->pre_ids[i], targets, n * sizeof *targets);
    s->pre_n[i] = n;
    s->pre_count++;
    return 0;
}

/* The prefetch of exactly these targets, if one is outstanding: waits for
 * it (and drops the older one before it) and sets known[0 .. *covered)
 * to its lists; *covered = 0 when there is none. 0 or -errno. */
static int prefetch_take(struct sampler *s, const uint64_t *targets, uint32_t n, uint32_t *covered, char *err,
                         size_t errlen)
{
    *covered = 0;
    for (unsigned j = 0; j < s->pre_count; j++) {
        unsigned i = (s->pre_head + j) % 2;
        if (s->pre_n[i] != n || memcmp(s->pre_ids[i], targets, n * sizeof *targets) != 0)
            continue;
        const void *const *lists = NULL;
        uint32_t got = 0;
        for (unsigned d = 0; d <= j; d++) { /* j = 1: the older one first, never asked for */
            int rc = prefetch_pop(s, &lists, &got, err, errlen);
            if (rc)
                return rc;
        }
        for (uint32_t v = 0; v < got; v++) {
            s->known[v] = lists[v]; /* valid until the next sampler_prefetch: after this batch */
            uint64_t g = targets[v];
            s->lists_prefetched += s->topo->cache_off[g] == SAMPLER_UNCACHED && s->topo->indptr[g + 1] > s->topo->indptr[g];
        }
        *covered = got;
        return 0;
    }
    return 0;
}

int sampler_sample(struct sampler *s, void *slot, size_t size, const uint64_t *targets, uint32_t n_targets,
                   const struct batch_id *id, uint64_t seed, uint64_t *edges, char *err, size_t errlen)
{
    const struct sampler_topo *t = s->topo;
    struct batch_writer w;
    uint64_t rng = seed, total = 0;
    const size_t es = t->indices_u64 ? 8 : 4;
    if (edges)
        *edges = 0;
    int rc = batch_init(&w, slot, size, &s->shape, n_targets, id, err, errlen);
    if (rc)
        return rc;
    next_map_stamp(s);
    for (uint32_t i = 0; i < n_targets; i++) {
        uint64_t g = targets[i];
        if (g >= t->nodes)
            return sl_errf(err, errlen, -ERANGE, "sampler: target %" PRIu64 " is not below %" PRIu64 " nodes", g,
                           t->nodes);
        uint64_t j = slot_of(g, s->shift);
        while (s->map[j].stamp == s->cur) {
            if (s->map[j].key == g)
                return sl_errf(err, errlen, -EINVAL, "sampler: target %" PRIu64 " appears twice in one batch", g);
            j = (j + 1) & s->mask;
        }
        if (s->filtered && !node_in(&s->filter, g))
            return sl_errf(err, errlen, -EINVAL,
                           "sampler: target %" PRIu64 " is not in a partition of the buffer (the schedule's state and the "
                           "buffer's disagree)",
                           g);
        s->map[j] = (struct sampler_ent){.key = g, .val = i, .stamp = s->cur};
        batch_add_target(&w, g, t->labels ? t->labels[g] : -1);
    }
    uint32_t prev_ndst = 0; /* the previous block's destinations */
    for (uint32_t k = 0; k < s->shape.layers; k++) {
        int64_t f = s->shape.fanouts[k];
        batch_begin_block(&w);
        uint32_t ndst = w.nn;
        if (!s->fetch) { /* every list is in memory or mapped */
            /* destination v + 1 drawn before v is put (struct pend) */
            struct pend pd[2];
            const unsigned char *ix = t->indices;
            if (ndst) {
                uint64_t g = w.nodes[0], beg = t->indptr[g];
                pend_draw(s, &rng, &pd[0], ix + beg * es, t->indptr[g + 1] - beg, f, s->picks, s->kept);
            }
            for (uint32_t v = 0; v < ndst && !w.rc; v++) {
                if (v + SAMPLE_PREFETCH < ndst) /* destinations are scattered over the graph: ask for one ahead */
                    __builtin_prefetch(&t->indptr[w.nodes[v + SAMPLE_PREFETCH]]);
                if (v + SAMPLE_PREFETCH / 2 < ndst) /* and, its indptr entry in by now, for the start of its list */
                    __builtin_prefetch(ix + t->indptr[w.nodes[v + SAMPLE_PREFETCH / 2]] * es);
                if (v + 1 < ndst) {
                    uint64_t g = w.nodes[v + 1], beg = t->indptr[g];
                    pend_draw(s, &rng, &pd[(v + 1) & 1], ix + beg * es, t->indptr[g + 1] - beg, f,
                              s->picks + ((v + 1) & 1) * s->pick_cap,
                              s->kept ? s->kept + ((v + 1) & 1) * SL_MAX(t->max_in_degree, 1) : NULL);
                }
                total += pend_put(s, &w, &pd[v & 1]);
            }
        } else { /* rounds of reads (sampler_fetch.h): round r + 1's run while round r is sampled, in order */
            /* block k's first destinations are block k - 1's, whose lists are
             * known (s->known); the new ones are not yet */
            uint32_t from = k ? prev_ndst : 0;
            if (k == 0) { /* the targets' lists may have been read ahead (sampler_prefetch) */
                s->store_used = 0;
                if (s->pre_count && (rc = prefetch_take(s, targets, n_targets, &from, err, errlen)) != 0)
                    return rc;
            }
            for (uint32_t i = from; i < ndst; i++)
                s->known[i] = NULL;
            bool keep = k + 1 < s->shape.layers; /* a later block needs these lists again */
            uint32_t planned = 0;
            int64_t got = sampler_fetch_start(s->fetch, w.nodes, s->known, ndst, err, errlen);
            if (got < 0)
                return (int)got;
            planned = (uint32_t)got;
            for (uint32_t v = 0; v < ndst && !w.rc;) {
                if (planned < ndst) {
                    got = sampler_fetch_start(s->fetch, w.nodes + planned, s->known + planned, ndst - planned, err,
                                              errlen);
                    if (got < 0)
                        return (int)got;
                    planned += (uint32_t)got;
                }
                const void *const *lists;
                got = sampler_fetch_wait(s->fetch, &lists, &s->lists_read, &s->bytes_read, err, errlen);
                if (got < 0)
                    return (int)got;
                for (uint32_t i = 0; i < (uint32_t)got && !w.rc; i++) {
                    uint64_t g = w.nodes[v + i], d = t->indptr[g + 1] - t->indptr[g];
                    total += sample_dst(s, &w, &rng, lists[i], d, f);
                    if (!keep || s->known[v + i] || !d)
                        continue;
                    if (t->cache_off[g] != SAMPLER_UNCACHED) {
                        s->known[v + i] = lists[i];
                    } else if (s->store_used + sl_round_up(d * es, 8) <= SAMPLER_KNOWN_STORE) { /* in the round's buffer */
                        memcpy(s->store + s->store_used, lists[i], d * es);
                        s->known[v + i] = s->store + s->store_used;
                        s->store_used += (size_t)sl_round_up(d * es, 8);
                    } /* else read again by the next block */
                }
                v += (uint32_t)got;
            }
            sampler_fetch_cancel(s->fetch); /* a batch that filled its slot early leaves a round out */
        }
        prev_ndst = ndst;
        batch_end_block(&w);
    }
    uint32_t *deg = s->shape.degrees ? batch_degrees(&w) : NULL;
    for (uint32_t i = 0; deg && i < w.nn; i++) { /* GCN's graph norm: in-degrees in the graph */
        uint64_t g = w.nodes[i], d = t->indptr[g + 1] - t->indptr[g];
        if (s->filtered) { /* ... in the subgraph the batch was sampled from */
            uint64_t n = 0;
            for (uint64_t e = t->indptr[g]; e < t->indptr[g + 1]; e++)
                n += node_in(&s->filter, list_at(t->indices, t->indices_u64, e));
            d = n;
        }
        deg[i] = d < UINT32_MAX ? (uint32_t)d : UINT32_MAX;
    }
    rc = batch_finish(&w, err, errlen);
    if (rc == 0 && edges)
        *edges = total;
    return rc;
}
