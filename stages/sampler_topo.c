/* sampler_topo.c - loading indices.bin for the MEMORY and CACHE topology
 * modes (sampler.h): large sequential reads at open, the neighbour cache's
 * choice (Ginex, section 3.2: the in-neighbour lists of the nodes with
 * the highest out-degree / in-degree ratio, because a node is sampled as
 * a destination about as often as it is someone's in-neighbour, and a
 * short list costs little room) and its filling.
 *
 * Reads. indices.bin is read front to back in pieces of 8 MiB with
 * O_DIRECT, SEQ_DEPTH of them in flight through io_uring (pread(2) one at
 * a time without it), straight into the destination (MEMORY) or into
 * SEQ_DEPTH aligned buffers handed to the pass in file order while the
 * next pieces are read (the two passes of CACHE). A filesystem that
 * refuses O_DIRECT gets buffered reads.
 *
 * Memory at open (CACHE): a u32 out-degree per node and a 16-byte sort
 * record per node with in-degree > 0, both freed before open returns,
 * beside what stays: the index (8 bytes per node) and the cached lists. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "stages/sampler.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#endif

#define SEQ_CHUNK_DEFAULT ((size_t)8 << 20) /* bytes per sequential read (sampler_topo_opts.load_chunk) */
#define SEQ_DEPTH 4u                        /* sequential reads in flight (io_uring) */

const char *sampler_topo_mode_name(enum sampler_topo_mode m)
{
    switch (m) {
    case SAMPLER_TOPO_MMAP:
        return "mmap";
    case SAMPLER_TOPO_MEMORY:
        return "memory";
    case SAMPLER_TOPO_CACHE:
        return "cache";
    }
    return "?";
}

/* ---- the choice ------------------------------------------------------------------------ */

struct cand {
    uint64_t in;  /* in-degree (> 0) */
    uint32_t out; /* out-degree */
    uint32_t pad;
    uint64_t id;
};

/* Decreasing out/in, exactly (cross-multiplied in 128 bits); then node id. */
static int cand_cmp(const void *pa, const void *pb)
{
    const struct cand *a = pa, *b = pb;
    unsigned __int128 l = (unsigned __int128)a->out * b->in, r = (unsigned __int128)b->out * a->in;
    if (l != r)
        return l > r ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

int sampler_cache_choose(const uint64_t *indptr, const uint32_t *outdeg, uint64_t nodes, uint64_t bytes, size_t es,
                         uint64_t *off, uint64_t *n_nodes, uint64_t *n_edges)
{
    uint64_t nc = 0;
    for (uint64_t v = 0; v < nodes; v++)
        nc += indptr[v + 1] > indptr[v];
    struct cand *c = malloc((nc ? nc : 1) * sizeof *c);
    if (!c)
        return -ENOMEM;
    nc = 0;
    for (uint64_t v = 0; v < nodes; v++) {
        off[v] = SAMPLER_UNCACHED;
        uint64_t d = indptr[v + 1] - indptr[v];
        if (d)
            c[nc++] = (struct cand){.in = d, .out = outdeg[v], .id = v};
        else
            off[v] = 0; /* nothing to read */
    }
    qsort(c, nc, sizeof *c, cand_cmp);
    uint64_t left = bytes, cn = 0, ce = 0;
    for (uint64_t i = 0; i < nc; i++) {
        if (c[i].in > left / es)
            break; /* a prefix of the ratio order: the first list that does not fit ends it */
        left -= c[i].in * es;
        off[c[i].id] = 0; /* chosen; its offset below */
        cn++;
    }
    free(c);
    for (uint64_t v = 0; v < nodes; v++) { /* the cache in node order: the fill is one sweep */
        uint64_t d = indptr[v + 1] - indptr[v];
        if (d && off[v] != SAMPLER_UNCACHED) {
            off[v] = ce;
            ce += d;
        }
    }
    *n_nodes = cn;
    *n_edges = ce;
    return 0;
}

/* ---- sequential reads -------------------------------------------------------------------- */

/* Called with each piece [off, off + len) of the file as it lands. */
typedef int (*seq_fn)(void *ctx, const unsigned char *data, uint64_t off, size_t len, char *err, size_t errlen);

/* Reads bytes [0, size) of fd front to back: into dest when non-NULL
 * (SAMPLER_IO_ALIGN-aligned, room for size rounded up to it), else through
 * buf (aligned, chunk bytes) calling fn for each piece. */
static int seq_read_pread(int fd, const char *path, uint64_t size, size_t chunk, unsigned char *dest,
                          unsigned char *buf, seq_fn fn, void *ctx, char *err, size_t errlen)
{
    for (uint64_t off = 0; off < size;) {
        size_t want = (size_t)SL_MIN((uint64_t)chunk, sl_round_up(size - off, SAMPLER_IO_ALIGN));
        unsigned char *to = dest ? dest + off : buf;
        size_t got = 0; /* direct reads: only whole blocks until the end of the file, never a read from mid-block */
        while (got < want && off + got < size) {
            ssize_t r = pread(fd, to + got, want - got, (off_t)(off + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0)
                return sl_errf(err, errlen, -errno, "%s: read at byte %" PRIu64 " failed: %s", path, off + got,
                               strerror(errno));
            if (r == 0)
                break;
            got += (size_t)r;
            if (got % SAMPLER_IO_ALIGN && off + got < size)
                break; /* a short read mid-file that a direct read cannot continue: reported below */
        }
        int rc;
        size_t len = (size_t)SL_MIN((uint64_t)got, size - off);
        if (len < want && off + len < size)
            return sl_errf(err, errlen, -EINVAL, "%s: ends at byte %" PRIu64 ", not %" PRIu64 "; run gnnprep check",
                           path, off + len, size);
        if (fn && (rc = fn(ctx, to, off, len, err, errlen)))
            return rc;
        off += len;
    }
    return 0;
}

#ifdef SLUICE_HAVE_URING
/* seq_read_pread's contract with SEQ_DEPTH reads in flight; bufs: SEQ_DEPTH
 * aligned buffers of chunk bytes (unused with dest). Pieces reach fn in file
 * order. A short read before the end of the file is finished by pread. */
static int seq_read_uring(struct io_uring *ring, int fd, const char *path, uint64_t size, size_t chunk,
                          unsigned char *dest, unsigned char **bufs, seq_fn fn, void *ctx, char *err, size_t errlen)
{
    uint64_t n = (size + chunk - 1) / chunk, next = 0, done = 0;
    int64_t got[SEQ_DEPTH];
    unsigned inflight = 0;
    int rc = 0;
    while (done < n) {
        while (!rc && next < n && next < done + SEQ_DEPTH) { /* a buffer per piece in flight: piece i uses i % DEPTH */
            uint64_t off = next * chunk;
            size_t want = (size_t)SL_MIN((uint64_t)chunk, sl_round_up(size - off, SAMPLER_IO_ALIGN));
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            io_uring_prep_read(sqe, fd, dest ? dest + off : bufs[next % SEQ_DEPTH], (unsigned)want, off);
            io_uring_sqe_set_data64(sqe, next);
            got[next % SEQ_DEPTH] = INT64_MIN; /* not yet */
            next++;
            inflight++;
        }
        if (!inflight)
            break;
        struct io_uring_cqe *cqe;
        int r = io_uring_submit_and_wait(ring, 1);
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && !rc)
            rc = sl_errf(err, errlen, r, "%s: io_uring: %s", path, strerror(-r));
        while (io_uring_peek_cqe(ring, &cqe) == 0) {
            uint64_t i = io_uring_cqe_get_data64(cqe);
            got[i % SEQ_DEPTH] = cqe->res;
            io_uring_cqe_seen(ring, cqe);
            inflight--;
        }
        while (!rc && done < next && got[done % SEQ_DEPTH] != INT64_MIN) { /* in file order */
            uint64_t off = done * chunk;
            size_t len = (size_t)SL_MIN((uint64_t)chunk, size - off);
            unsigned char *to = dest ? dest + off : bufs[done % SEQ_DEPTH];
            int64_t g = got[done % SEQ_DEPTH];
            if (g < 0) {
                rc = sl_errf(err, errlen, (int)g, "%s: read at byte %" PRIu64 " failed: %s", path, off,
                             strerror((int)-g));
                break;
            }
            size_t have = (size_t)g;
            while (have < len) { /* short: the rest the plain way */
                ssize_t p = pread(fd, to + have, sl_round_up(len - have, SAMPLER_IO_ALIGN), (off_t)(off + have));
                if (p <= 0 || (have + (size_t)p < len && (have + (size_t)p) % SAMPLER_IO_ALIGN)) {
                    rc = sl_errf(err, errlen, p < 0 ? -errno : -EINVAL,
                                 "%s: ends at byte %" PRIu64 ", not %" PRIu64 "; run gnnprep check", path,
                                 off + have + (p > 0 ? (uint64_t)p : 0), size);
                    break;
                }
                have += (size_t)p;
            }
            if (!rc && fn)
                rc = fn(ctx, to, off, len, err, errlen);
            done++;
        }
        if (rc && !inflight)
            return rc;
    }
    return rc;
}
#endif

/* Reads bytes [0, size) of fd front to back: into dest when non-NULL
 * (SAMPLER_IO_ALIGN-aligned, room for size rounded up to it), else through
 * aligned buffers calling fn for each piece in file order. */
static int seq_read(int fd, const char *path, uint64_t size, size_t chunk, unsigned char *dest, seq_fn fn, void *ctx,
                    char *err, size_t errlen)
{
    unsigned char *bufs[SEQ_DEPTH] = {0};
    int rc = 0;
    unsigned nb = dest ? 0 : SEQ_DEPTH;
    for (unsigned i = 0; i < nb; i++)
        if (!(bufs[i] = aligned_alloc(SAMPLER_IO_ALIGN, chunk)))
            rc = sl_errf(err, errlen, -ENOMEM, "%s: no memory for read buffers", path);
#ifdef SLUICE_HAVE_URING
    struct io_uring ring;
    if (!rc && io_uring_queue_init(SEQ_DEPTH, &ring, 0) == 0) {
        rc = seq_read_uring(&ring, fd, path, size, chunk, dest, bufs, fn, ctx, err, errlen);
        io_uring_queue_exit(&ring);
        goto out;
    }
#endif
    if (!rc)
        rc = seq_read_pread(fd, path, size, chunk, dest, bufs[0], fn, ctx, err, errlen);
#ifdef SLUICE_HAVE_URING
out:
#endif
    for (unsigned i = 0; i < nb; i++)
        free(bufs[i]);
    return rc;
}

/* Opens indices.bin for reading, with O_DIRECT unless buffered or the
 * filesystem refuses it (probed with one aligned read); *direct says which. */
static int open_indices(const char *path, bool buffered, bool *direct, char *err, size_t errlen)
{
    *direct = false;
    if (!buffered) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
        if (fd >= 0) {
            void *probe = aligned_alloc(SAMPLER_IO_ALIGN, SAMPLER_IO_ALIGN);
            ssize_t r = probe ? pread(fd, probe, SAMPLER_IO_ALIGN, 0) : 0;
            int e = errno;
            free(probe);
            if (r >= 0) {
                *direct = true;
                return fd;
            }
            close(fd);
            if (e != EINVAL)
                return sl_errf(err, errlen, -e, "%s: cannot read: %s", path, strerror(e));
        } else if (errno != EINVAL) {
            return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
        }
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    return fd;
}

/* The granule of the sampling threads' direct reads of fd: the larger of
 * statx's direct I/O offset and memory alignments when it is a power of
 * two in [512, SAMPLER_IO_ALIGN], else SAMPLER_IO_ALIGN (always safe). A
 * smaller granule reads less around each list (a 1 KiB list spans one or
 * two 4 KiB blocks, but only two or three 512-byte sectors). */
static uint32_t read_granule(int fd, bool direct)
{
    if (!direct)
        return 512;
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
        uint32_t a = SL_MAX(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
        if (a >= 512 && a <= SAMPLER_IO_ALIGN && (a & (a - 1)) == 0)
            return a;
    }
#else
    (void)fd;
#endif
    return SAMPLER_IO_ALIGN;
}

/* ---- MEMORY ---------------------------------------------------------------------------------- */

int sampler_topo_load_memory(struct sampler_topo *t, const char *path, uint64_t bytes, size_t chunk, bool buffered,
                             char *err, size_t errlen)
{
    chunk = chunk ? chunk : SEQ_CHUNK_DEFAULT;
    bool direct;
    int fd = open_indices(path, buffered, &direct, err, errlen);
    if (fd < 0)
        return fd;
    double t0 = sl_now();
    int rc = 0;
    t->indices_mem = aligned_alloc(SAMPLER_IO_ALIGN, (size_t)sl_round_up(bytes, SAMPLER_IO_ALIGN));
    if (!t->indices_mem)
        rc = sl_errf(err, errlen, -ENOMEM,
                     "%s: no memory to hold its %" PRIu64 " bytes (pipeline.topology = "
                     "\"memory\"); use \"cache\" or \"mmap\"",
                     path, bytes);
    else
        rc = seq_read(fd, path, bytes, chunk, t->indices_mem, NULL, NULL, err, errlen);
    close(fd);
    if (rc)
        return rc;
    t->indices = t->indices_mem;
    t->direct = direct;
    t->load_bytes = bytes;
    t->load_s = sl_now() - t0;
    return 0;
}

/* ---- MEMORY, shared by a node's samplers ------------------------------------------------------ */

enum { SHARED_LOADING = 0, SHARED_READY = 1, SHARED_FAILED = 2 };

/* The header page of the shared segment. */
struct shared_hdr {
    _Atomic uint32_t state; /* SHARED_*: the loader stores READY or FAILED last (release) */
    uint32_t direct;
    uint64_t bytes; /* indices.bin's size */
    double load_s;
};

int sampler_topo_load_shared(struct sampler_topo *t, const char *path, uint64_t bytes, size_t chunk, bool buffered,
                             const char *run_id, char *err, size_t errlen)
{
    chunk = chunk ? chunk : SEQ_CHUNK_DEFAULT;
    t->shm = calloc(1, sizeof *t->shm);
    if (!t->shm)
        return sl_errf(err, errlen, -ENOMEM, "no memory");
    uint64_t size = SAMPLER_IO_ALIGN + sl_round_up(bytes, SAMPLER_IO_ALIGN);
    if (size > SIZE_MAX)
        return sl_errf(err, errlen, -EOVERFLOW, "%s: too large for the address space", path);
    int rc = shm_seg_create(t->shm, run_id, "topology", SHM_KIND_RAW, (size_t)size, err, errlen);
    if (rc == 0) { /* the loader */
        struct shared_hdr *h = t->shm->data;
        bool direct;
        double t0 = sl_now();
        int fd = open_indices(path, buffered, &direct, err, errlen);
        rc = fd < 0 ? fd : seq_read(fd, path, bytes, chunk, (unsigned char *)t->shm->data + SAMPLER_IO_ALIGN, NULL, NULL,
                                    err, errlen);
        if (fd >= 0)
            close(fd);
        h->bytes = bytes;
        h->direct = direct;
        h->load_s = sl_now() - t0;
        atomic_store_explicit(&h->state, rc ? SHARED_FAILED : SHARED_READY, memory_order_release);
        if (rc)
            return rc;
        t->shm_loader = true;
        t->direct = direct;
        t->load_bytes = bytes;
        t->load_s = h->load_s;
    } else if (rc == -EEXIST) { /* another rank's sampler loads it */
        char name[SHM_NAME_MAX];
        if ((rc = shm_name(name, sizeof name, run_id, "topology", err, errlen)))
            return rc;
        const struct timespec ms = {.tv_nsec = 1000000};
        double t0 = sl_now();
        while ((rc = shm_seg_attach(t->shm, name, SHM_KIND_RAW, SHM_RDONLY, err, errlen)) == -EAGAIN)
            nanosleep(&ms, NULL);
        if (rc)
            return rc;
        const struct shared_hdr *h = t->shm->data;
        uint32_t st;
        while ((st = atomic_load_explicit(&h->state, memory_order_acquire)) == SHARED_LOADING)
            nanosleep(&ms, NULL);
        if (st != SHARED_READY || h->bytes != bytes || t->shm->data_size < size)
            return sl_errf(err, errlen, -EIO,
                           "%s: the sampler of another rank of this node failed to load it into the shared segment %s "
                           "(its message says why)",
                           path, name);
        t->direct = h->direct;
        t->load_s = sl_now() - t0; /* the wait */
    } else {
        return rc;
    }
    t->indices = (const unsigned char *)t->shm->data + SAMPLER_IO_ALIGN;
    return 0;
}

/* ---- CACHE ---------------------------------------------------------------------------------- */

struct pass {
    const struct sampler_topo *t;
    size_t es;
    uint32_t *outdeg; /* pass 1 */
    uint64_t v;       /* pass 2: the first node whose list is not wholly copied */
};

static int count_out(void *ctx, const unsigned char *data, uint64_t off, size_t len, char *err, size_t errlen)
{
    struct pass *p = ctx;
    uint64_t n = p->t->nodes;
    size_t k = len / p->es;
    for (size_t i = 0; i < k; i++) {
        uint64_t u = p->es == 8 ? ((const uint64_t *)data)[i] : ((const uint32_t *)data)[i];
        if (u >= n)
            return sl_errf(err, errlen, -EINVAL,
                           "indices.bin: id %" PRIu64 " at %" PRIu64 " is not below %" PRIu64
                           " nodes; run gnnprep check",
                           u, off / p->es + i, n);
        if (p->outdeg[u] != UINT32_MAX)
            p->outdeg[u]++;
    }
    return 0;
}

static int fill_cache(void *ctx, const unsigned char *data, uint64_t off, size_t len, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct pass *p = ctx;
    const struct sampler_topo *t = p->t;
    uint64_t end = off + len;
    while (p->v < t->nodes) {
        uint64_t v = p->v, ls = t->indptr[v] * p->es, le = t->indptr[v + 1] * p->es;
        if (ls >= end)
            break;
        if (le > ls && t->cache_off[v] != SAMPLER_UNCACHED) {
            uint64_t a = SL_MAX(ls, off), b = SL_MIN(le, end);
            memcpy((unsigned char *)t->cache + t->cache_off[v] * p->es + (a - ls), data + (a - off), (size_t)(b - a));
        }
        if (le > end)
            break; /* the rest of v's list is in the next piece */
        p->v++;
    }
    return 0;
}

int sampler_topo_load_cache(struct sampler_topo *t, const char *path, uint64_t bytes, uint64_t budget, size_t chunk,
                            bool buffered, char *err, size_t errlen)
{
    chunk = chunk ? chunk : SEQ_CHUNK_DEFAULT;
    size_t es = t->indices_u64 ? 8 : 4;
    uint64_t index = sampler_cache_index_bytes(t->nodes);
    char b1[32], b2[32], b3[32];
    if (budget <= index)
        return sl_errf(err, errlen, -EINVAL,
                       "pipeline.neighbour_cache_mb: a budget of %s is not above the cache's index of %s (8 bytes a "
                       "node for %" PRIu64 " nodes); raise it, or use pipeline.topology = \"mmap\"",
                       sl_fmt_bytes(budget, b1, sizeof b1), sl_fmt_bytes(index, b2, sizeof b2), t->nodes);
    if (budget - index >= bytes)
        return sl_errf(err, errlen, -EINVAL,
                       "pipeline.neighbour_cache_mb: a budget of %s holds all of indices.bin (%s) and the index (%s); "
                       "use pipeline.topology = \"memory\", which needs no index, or a smaller budget",
                       sl_fmt_bytes(budget, b1, sizeof b1), sl_fmt_bytes(bytes, b2, sizeof b2),
                       sl_fmt_bytes(index, b3, sizeof b3));
    bool direct;
    int fd = open_indices(path, buffered, &direct, err, errlen);
    if (fd < 0)
        return fd;
    t->fd = fd;
    t->direct = direct;
    t->read_align = read_granule(fd, direct);
    double t0 = sl_now();
    int rc = 0;
    struct pass p = {.t = t, .es = es};
    p.outdeg = calloc(t->nodes, sizeof *p.outdeg);
    t->cache_off = malloc((size_t)index);
    if (!p.outdeg || !t->cache_off) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: no memory for the neighbour cache's index", path);
        goto out;
    }
    if ((rc = seq_read(fd, path, bytes, chunk, NULL, count_out, &p, err, errlen)))
        goto out;
    if ((rc = sampler_cache_choose(t->indptr, p.outdeg, t->nodes, budget - index, es, t->cache_off, &t->cache_nodes,
                                   &t->cache_edges))) {
        rc = sl_errf(err, errlen, rc, "%s: no memory to choose the neighbour cache", path);
        goto out;
    }
    free(p.outdeg);
    p.outdeg = NULL;
    t->cache = malloc(t->cache_edges ? (size_t)(t->cache_edges * es) : 1);
    if (!t->cache) {
        rc = sl_errf(err, errlen, -ENOMEM, "%s: no memory for a neighbour cache of %" PRIu64 " ids", path,
                     t->cache_edges);
        goto out;
    }
    if ((rc = seq_read(fd, path, bytes, chunk, NULL, fill_cache, &p, err, errlen)))
        goto out;
    t->load_bytes = 2 * bytes;
    t->load_s = sl_now() - t0;
out:
    free(p.outdeg);
    return rc;
}
