/* extract.c - the extraction engine (API and behaviour in extract.h).
 *
 * Protocol of one batch on one engine (one thread; DESIGN.md section 4)
 * ---------------------------------------------------------------------
 * 1. featbuf_acquire_many takes a reference per node and answers HIT,
 *    WAIT or LOAD for each. The LOAD positions are listed in `loads`.
 * 2. The backend reads every listed row. The engine's staging memory is
 *    cut into `depth` entries of src->entry_bytes; an entry serves one read
 *    at a time (struct xread), so at most `depth` reads are in flight.
 *    A read covers the row's extent: [off & ~(A-1), round_up(off + row, A))
 *    with A = src->align (1 for buffered I/O: exactly the row). It may end
 *    in several requests: a short read continues from the last aligned
 *    byte it reached (direct I/O needs aligned offsets, so a few bytes may
 *    be read twice); -EAGAIN / -EINTR repeat the request (AGAIN_MAX times
 *    in a row at most). When the bytes up to the row's end have landed the
 *    row is copied into its slot and featbuf_loaded() publishes it (this
 *    copy is where a GPU rank will cudaMemcpyAsync from pinned staging).
 *    A read that makes no progress (0 bytes, or a follow-up that ends
 *    where the last one did) hit the end of the file: the file shrank.
 *    Backends: io_uring (depth reads kept in flight: an entry whose read
 *    completes takes the next row at once; requests are submitted
 *    SUBMIT_BATCH at a time and with each io_uring_submit_and_wait, which
 *    sleeps for at least one completion; every ready completion is reaped
 *    with io_uring_peek_batch_cqe + io_uring_cq_advance; fixed buffer and
 *    fixed file when registration works), pread(2) (one read at a time),
 *    mmap (a copy per row).
 * 3. featbuf_wait_valid for every WAIT answer, in 200 ms slices with the
 *    idle hook between them.
 *
 * Failure. The first error of a batch is kept (code and message). After
 *   it no new read starts, reads in flight are drained (their rows are
 *   still published if they complete, otherwise their loads fail), every
 *   load never started is failed with featbuf_load_failed, step 3 is
 *   skipped, and all n references the batch took are released. So no slot
 *   is left LOADING and the caller holds nothing. If io_uring itself fails
 *   with reads in flight (no way to know when the kernel is done with the
 *   staging memory) the engine is "wedged": their loads are failed, the
 *   batch and every later one fail, and extractor_free leaks the staging
 *   memory rather than hand pages the kernel may still write to malloc.
 *
 * Ownership. The source (fd, mapping) is shared read-only by every thread
 *   of the process. An engine (ring, staging, scratch) belongs to one
 *   thread; only rows of slots it was answered LOAD for are written by it.
 *
 * Announcements go to stderr once per process, each kind under its own
 * bit of `announced`. */
#include "stages/extract.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#endif

#include "core/util.h"

#define DEPTH_MAX 4096u
#define STAGING_ALIGN 4096u
#define ENTRY_ALIGN 64u
#define DIO_ALIGN_DEFAULT 512u
#define AGAIN_MAX 64u     /* -EAGAIN/-EINTR repeats of one request in a row */
#define SUBMIT_BATCH 4u   /* io_uring requests handed to the kernel per io_uring_submit */
#define WAIT_SLICE_MS 200 /* longest sleep between calls of the idle hook */

/* ---- announcements ------------------------------------------------------- */

enum {
    ANN_DIRECT = 1u << 0,
    ANN_BUFFERED = 1u << 1,
    ANN_MMAP = 1u << 2,
    ANN_NO_DIRECT = 1u << 3,
    ANN_URING = 1u << 4,
    ANN_PREAD = 1u << 5,
    ANN_NO_FIXED = 1u << 6,
    ANN_FAULT = 1u << 7,
};

static atomic_uint announced;

static void SL_PRINTF(3, 4) announce(const struct extract_source *src, unsigned bit, const char *fmt, ...)
{
    if (atomic_fetch_or(&announced, bit) & bit)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s: %s\n", sl_err_line_start(), src->prog, line);
}

/* ---- fault injection (a test hook; docs/reliability.md) -------------------- */

/* SLUICE_FAULT_READ_EIO=N: the Nth read this process completes - every
 * request of every engine and backend counts, mmap row copies included -
 * completes with -EIO instead of its result, as if the kernel had returned
 * it. Read from the environment by extract_source_open; unset (0), a
 * completion pays one relaxed load and a predictable branch. */
static _Atomic uint64_t fault_read_eio;
static _Atomic uint64_t fault_reads;

static void fault_init(const struct extract_source *src)
{
    const char *s = getenv("SLUICE_FAULT_READ_EIO");
    uint64_t n = 0;
    if (s && *s && (sl_parse_u64(s, false, &n) != 0 || n == 0)) {
        announce(src, ANN_FAULT, "SLUICE_FAULT_READ_EIO=%s is not a positive integer; no read will fail", s);
        n = 0;
    } else if (n) {
        announce(src, ANN_FAULT, "SLUICE_FAULT_READ_EIO=%" PRIu64 ": read %" PRIu64 " will fail (a test hook)", n, n);
    }
    atomic_store_explicit(&fault_read_eio, n, memory_order_relaxed);
}

/* Counts one completed read; true for the one that must fail. */
static inline bool fault_read_fails(void)
{
    uint64_t n = atomic_load_explicit(&fault_read_eio, memory_order_relaxed);
    return n && atomic_fetch_add_explicit(&fault_reads, 1, memory_order_relaxed) + 1 == n;
}

/* ---- the source ------------------------------------------------------------ */

int extract_io_parse(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "direct"))
        return EXTRACT_IO_DIRECT;
    if (!strcmp(s, "buffered"))
        return EXTRACT_IO_BUFFERED;
    if (!strcmp(s, "mmap"))
        return EXTRACT_IO_MMAP;
    return -1;
}

const char *extract_io_name(enum extract_io io)
{
    switch (io) {
    case EXTRACT_IO_DIRECT:
        return "direct";
    case EXTRACT_IO_BUFFERED:
        return "buffered";
    case EXTRACT_IO_MMAP:
        return "mmap";
    }
    return "unknown";
}

static bool pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Direct I/O alignment of fd: statx's (the larger of its offset and memory
 * alignments) when the kernel reports it, else DIO_ALIGN_DEFAULT. 0 when
 * the kernel says this file cannot do direct I/O. */
static uint32_t dio_align(int fd)
{
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
        if (sx.stx_dio_offset_align == 0)
            return 0;
        return SL_MAX(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
    }
#else
    (void)fd;
#endif
    return DIO_ALIGN_DEFAULT;
}

/* Reopens src->path without O_DIRECT after the file system refused it. */
static int reopen_buffered(struct extract_source *src, const char *why, char *err, size_t errlen)
{
    if (src->fd >= 0)
        close(src->fd);
    src->fd = open(src->path, O_RDONLY | O_CLOEXEC);
    if (src->fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", src->path, strerror(errno));
    src->io = EXTRACT_IO_BUFFERED;
    announce(src, ANN_NO_DIRECT,
             "%s: this file system does not support direct I/O (%s); reading through the page cache instead "
             "(pipeline.io = \"buffered\" or --io buffered says so up front)",
             src->path, why);
    return 0;
}

int extract_source_open(struct extract_source *src, const char *dir, const sl_dataset_meta *m, enum extract_io io,
                        const char *prog, char *err, size_t errlen)
{
    memset(src, 0, sizeof *src);
    src->fd = -1;
    src->prog = prog ? prog : "sluice";
    fault_init(src);
    const sl_dsfile *f = &m->f[SL_F_FEATURES];
    int rc;
    if (io != EXTRACT_IO_DIRECT && io != EXTRACT_IO_BUFFERED && io != EXTRACT_IO_MMAP)
        return sl_errf(err, errlen, -EINVAL, "unknown I/O mode %d", (int)io);
    if (!f->present)
        return sl_errf(err, errlen, -ENOENT, "%s: the dataset has no [features] table; it cannot be trained on", dir);
    if (f->dtype != SL_DT_F32 && f->dtype != SL_DT_F16)
        return sl_errf(err, errlen, -EINVAL, "%s/%s: features of dtype %s; only f32 and f16 are supported", dir,
                       f->file, sl_dtype_name(f->dtype));
    uint64_t row_bytes, span;
    if (f->cols == 0 || sl_mul_ovf(f->cols, sl_dtype_size(f->dtype), &row_bytes) || f->row_stride < row_bytes ||
        f->rows == 0 || sl_mul_ovf(f->rows, f->row_stride, &span) || span > f->bytes || row_bytes > (1u << 30) ||
        f->row_stride > (1u << 30))
        return sl_errf(err, errlen, -EINVAL,
                       "%s/%s: shape [%" PRIu64 ", %" PRIu64 "] with row stride %" PRIu64 " and %" PRIu64
                       " bytes do not add up; run gnnprep check",
                       dir, f->file, f->rows, f->cols, f->row_stride, f->bytes);
    rc = sl_path_join(src->path, sizeof src->path, dir, f->file);
    if (rc)
        return sl_errf(err, errlen, rc, "%s/%s: path too long", dir, f->file);
    src->rows = f->rows;
    src->row_bytes = row_bytes;
    src->row_stride = f->row_stride;
    src->file_bytes = f->bytes;
    src->io = io;

    int flags = O_RDONLY | O_CLOEXEC | (io == EXTRACT_IO_DIRECT ? O_DIRECT : 0);
    src->fd = open(src->path, flags);
    if (src->fd < 0 && errno == EINVAL && io == EXTRACT_IO_DIRECT) {
        rc = reopen_buffered(src, "O_DIRECT: Invalid argument", err, errlen);
        if (rc)
            goto err;
    } else if (src->fd < 0) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot open: %s", src->path, strerror(errno));
        goto err;
    }
    struct stat st;
    if (fstat(src->fd, &st) != 0) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot stat: %s", src->path, strerror(errno));
        goto err;
    }
    if ((uint64_t)st.st_size != src->file_bytes) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "%s is %lld bytes but dataset.toml records %" PRIu64 ": the dataset changed; run gnnprep check",
                     src->path, (long long)st.st_size, src->file_bytes);
        goto err;
    }

    src->align = 1;
    if (src->io == EXTRACT_IO_DIRECT) {
        uint32_t a = dio_align(src->fd);
        if (a == 0 || !pow2(a) || a > STAGING_ALIGN) {
            char why[96];
            snprintf(why, sizeof why,
                     a == 0 ? "statx reports no direct I/O alignment"
                            : "direct I/O alignment %u is not a power of two up to 4096",
                     a);
            rc = reopen_buffered(src, why, err, errlen);
            if (rc)
                goto err;
        } else {
            src->align = a;
        }
    }
    if (src->io == EXTRACT_IO_DIRECT) {
        /* rows start at multiples of gcd(stride, A) within an A block, so
         * the worst extent starts A - g bytes into its first block */
        uint64_t a = src->align, g = gcd_u64(src->row_stride, a);
        src->extent_max = sl_round_up(a - g + src->row_bytes, a);
    } else {
        src->extent_max = src->row_bytes;
    }
    src->entry_bytes = sl_round_up(src->extent_max, ENTRY_ALIGN);

    if (src->io == EXTRACT_IO_MMAP) {
        void *p = mmap(NULL, (size_t)src->file_bytes, PROT_READ, MAP_SHARED, src->fd, 0);
        if (p == MAP_FAILED) {
            rc = sl_errf(err, errlen, -errno, "%s: cannot map %" PRIu64 " bytes: %s", src->path, src->file_bytes,
                         strerror(errno));
            goto err;
        }
        (void)madvise(p, (size_t)src->file_bytes, MADV_RANDOM);
        src->map = p;
        src->map_len = (size_t)src->file_bytes;
        announce(src, ANN_MMAP, "%s: reading features through a read-only mapping (mmap, MADV_RANDOM)", src->path);
    } else if (src->io == EXTRACT_IO_DIRECT) {
        announce(src, ANN_DIRECT,
                 "%s: direct I/O (O_DIRECT), reads aligned to %u B, at most %" PRIu64 " B per %" PRIu64 "-B row",
                 src->path, src->align, src->extent_max, src->row_bytes);
    } else {
        announce(src, ANN_BUFFERED, "%s: buffered I/O through the page cache, %" PRIu64 " B per row", src->path,
                 src->row_bytes);
    }
    return 0;
err:
    extract_source_free(src);
    return rc;
}

void extract_source_free(struct extract_source *src)
{
    if (!src)
        return;
    if (src->map)
        munmap((void *)src->map, src->map_len);
    if (src->fd >= 0)
        close(src->fd);
    src->map = NULL;
    src->map_len = 0;
    src->fd = -1;
}

size_t extract_staging_bytes(const struct extract_source *src, unsigned depth)
{
    return (size_t)sl_round_up((uint64_t)depth * src->entry_bytes, STAGING_ALIGN);
}

/* ---- the engine's private state -------------------------------------------- */

struct xread {
    uint64_t start; /* file offset of the extent (aligned) */
    uint32_t len;   /* bytes of the extent */
    uint32_t skip;  /* where the row starts inside it */
    uint32_t need;  /* skip + row_bytes: what must land */
    uint32_t got;   /* bytes landed, a prefix of the extent */
    uint32_t from;  /* start of the request in flight, inside the extent */
    uint32_t again; /* -EAGAIN/-EINTR in a row */
    uint32_t idx;   /* batch position of its load */
    bool busy;      /* a request is in flight (or being handled) */
};

struct xbackend;

struct xstate {
    const struct xbackend *be;
    struct xread *rd; /* (depth) */
    uint32_t *spare;  /* (depth) entries with no read */
    uint32_t nspare;
    uint32_t *loads;       /* (cap) batch positions answered FEATBUF_LOAD */
    uint32_t nloads, next; /* this batch's loads, and how many were started */
    bool wedged;
    /* the batch being run */
    const uint64_t *nodes;
    uint32_t *slots;
    int rc; /* its first error */
    char *err;
    size_t errlen;
#ifdef SLUICE_HAVE_URING
    struct io_uring_cqe **cqes; /* (depth) */
    bool fixed_buf, fixed_file;
#endif
};

/* Reads every listed load of the batch (xs->loads[xs->next ...]). */
struct xbackend {
    void (*loads)(struct extractor *x);
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Keeps the batch's first error. */
static void SL_PRINTF(3, 4) batch_error(struct extractor *x, int rc, const char *fmt, ...)
{
    struct xstate *xs = x->inflight;
    if (xs->rc)
        return;
    xs->rc = rc;
    if (xs->err && xs->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(xs->err, xs->errlen, fmt, ap);
        va_end(ap);
    }
}

static unsigned char *entry_buf(const struct extractor *x, uint32_t e)
{
    return x->staging + (size_t)e * x->src->entry_bytes;
}

/* Sets up entry r for the load at batch position idx. */
static void read_setup(struct extractor *x, struct xread *r, uint32_t idx)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    uint64_t off = xs->nodes[idx] * s->row_stride, a = s->align;
    r->start = off & ~(a - 1);
    r->len = (uint32_t)(sl_round_up(off + s->row_bytes, a) - r->start);
    r->skip = (uint32_t)(off - r->start);
    r->need = r->skip + (uint32_t)s->row_bytes;
    r->got = r->from = r->again = 0;
    r->idx = idx;
    r->busy = true;
}

enum { READ_DONE = 0, READ_AGAIN = 1 };

/* Ends entry r's read in failure: the load fails, the error is kept. */
static int read_failed(struct extractor *x, struct xread *r, int rc, bool eof)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    uint64_t node = xs->nodes[r->idx];
    int frc = featbuf_load_failed(x->fb, xs->slots[r->idx]);
    if (eof)
        batch_error(x, -EIO,
                    "%s: read of node %" PRIu64 " at offset %" PRIu64
                    " hit the end of the file after %u of %u bytes: features.bin shrank under us; run gnnprep check",
                    s->path, node, node * s->row_stride, r->got, r->need);
    else
        batch_error(x, rc, "%s: read of node %" PRIu64 " at offset %" PRIu64 " failed: %s", s->path, node,
                    node * s->row_stride, strerror(-rc));
    if (frc == -EPIPE)
        xs->rc = -EPIPE;
    r->busy = false;
    return READ_DONE;
}

/* One request of entry e finished with res (bytes or -errno). READ_AGAIN:
 * issue the request described by the entry again (from r->from). */
static int read_complete(struct extractor *x, uint32_t e, int res)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    struct xread *r = &xs->rd[e];
    if (fault_read_fails())
        res = -EIO;
    if (res < 0) {
        if ((res == -EAGAIN || res == -EINTR) && r->again < AGAIN_MAX && !xs->rc) {
            r->again++;
            x->st.retries++;
            return READ_AGAIN;
        }
        return read_failed(x, r, res, false);
    }
    x->st.io_ops++;
    x->st.io_bytes += (uint64_t)res;
    uint32_t end = r->from + (uint32_t)res;
    if (end <= r->got) /* nothing new: the file ends before the row does */
        return read_failed(x, r, -EIO, true);
    r->got = end;
    r->again = 0;
    if (r->got < r->need) {
        if (xs->rc)
            return read_failed(x, r, -EIO, false); /* the batch is failing: no follow-ups */
        r->from = r->got & ~(s->align - 1);
        x->st.retries++;
        return READ_AGAIN;
    }
    uint32_t slot = xs->slots[r->idx];
    memcpy(featbuf_row(x->fb, slot), entry_buf(x, e) + r->skip, (size_t)s->row_bytes);
    int rc = featbuf_loaded(x->fb, slot);
    if (rc)
        batch_error(x, rc, "feature buffer: publishing node %" PRIu64 " in slot %u: %s", xs->nodes[r->idx], slot,
                    strerror(-rc));
    r->busy = false;
    return READ_DONE;
}

/* ---- backends ----------------------------------------------------------------- */

static void pread_loads(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    struct xread *r = &xs->rd[0];
    unsigned char *buf = entry_buf(x, 0);
    while (xs->next < xs->nloads && !xs->rc) {
        read_setup(x, r, xs->loads[xs->next++]);
        int more;
        do {
            ssize_t got = pread(s->fd, buf + r->from, r->len - r->from, (off_t)(r->start + r->from));
            more = read_complete(x, 0, got < 0 ? -errno : (int)got);
        } while (more == READ_AGAIN);
    }
}

static void mmap_loads(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    while (xs->next < xs->nloads && !xs->rc) {
        uint32_t idx = xs->loads[xs->next++], slot = xs->slots[idx];
        if (fault_read_fails()) { /* as a read would report it (a real error here is SIGBUS) */
            read_setup(x, &xs->rd[0], idx);
            read_failed(x, &xs->rd[0], -EIO, false);
            break;
        }
        memcpy(featbuf_row(x->fb, slot), s->map + xs->nodes[idx] * s->row_stride, (size_t)s->row_bytes);
        x->st.io_ops++;
        x->st.io_bytes += s->row_bytes;
        int rc = featbuf_loaded(x->fb, slot);
        if (rc)
            batch_error(x, rc, "feature buffer: publishing node %" PRIu64 " in slot %u: %s", xs->nodes[idx], slot,
                        strerror(-rc));
    }
}

static const struct xbackend be_pread = {pread_loads};
static const struct xbackend be_mmap = {mmap_loads};

#ifdef SLUICE_HAVE_URING
/* Queues entry e's request (submitted by the next io_uring_submit*).
 * false if the ring had no room (cannot happen: requests prepared or in
 * flight never exceed depth <= sq entries); the load has then failed. */
static bool uring_queue(struct extractor *x, uint32_t e)
{
    struct xstate *xs = x->inflight;
    struct io_uring *ring = x->ring;
    struct xread *r = &xs->rd[e];
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) {
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    if (!sqe) {
        read_failed(x, r, -EBUSY, false);
        return false;
    }
    void *buf = entry_buf(x, e) + r->from;
    unsigned len = r->len - r->from;
    uint64_t off = r->start + r->from;
    int fd = xs->fixed_file ? 0 : x->src->fd;
    if (xs->fixed_buf)
        io_uring_prep_read_fixed(sqe, fd, buf, len, off, 0);
    else
        io_uring_prep_read(sqe, fd, buf, len, off);
    if (xs->fixed_file)
        sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, e);
    return true;
}

/* Keeps up to depth reads in flight: an entry whose read completes takes
 * the batch's next row at once, and prepared requests go to the kernel
 * SUBMIT_BATCH at a time (plus whatever is left at each wait). Submitting
 * a few at a time as completions are handled, rather than all of a round
 * at once, keeps the device busy evenly; measured in
 * bench/results/extractor-fio-2026-11-22.md. */
static void uring_loads(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    struct io_uring *ring = x->ring;
    unsigned queued = 0; /* prepared since the last submission */
    for (;;) {
        while (xs->nspare && xs->next < xs->nloads && !xs->rc) {
            uint32_t e = xs->spare[--xs->nspare];
            read_setup(x, &xs->rd[e], xs->loads[xs->next++]);
            if (!uring_queue(x, e)) {
                xs->spare[xs->nspare++] = e;
                continue;
            }
            if (++queued == SUBMIT_BATCH) {
                io_uring_submit(ring);
                queued = 0;
            }
        }
        if (xs->nspare == x->depth)
            return;
        int rc = io_uring_submit_and_wait(ring, 1);
        queued = 0;
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            /* the ring is unusable with reads in flight: give their loads up */
            batch_error(x, rc, "%s: io_uring_submit_and_wait failed: %s", x->src->path, strerror(-rc));
            for (uint32_t e = 0; e < x->depth; e++)
                if (xs->rd[e].busy)
                    read_failed(x, &xs->rd[e], rc, false);
            xs->wedged = true;
            return;
        }
        unsigned n = io_uring_peek_batch_cqe(ring, xs->cqes, x->depth);
        for (unsigned i = 0; i < n; i++) {
            uint32_t e = (uint32_t)io_uring_cqe_get_data64(xs->cqes[i]);
            if (read_complete(x, e, xs->cqes[i]->res) != READ_AGAIN) {
                if (xs->next >= xs->nloads || xs->rc) {
                    xs->spare[xs->nspare++] = e;
                    continue;
                }
                read_setup(x, &xs->rd[e], xs->loads[xs->next++]); /* the entry's next row */
            }
            if (!uring_queue(x, e)) {
                xs->spare[xs->nspare++] = e;
                continue;
            }
            if (++queued == SUBMIT_BATCH) {
                io_uring_submit(ring);
                queued = 0;
            }
        }
        io_uring_cq_advance(ring, n);
    }
}

static const struct xbackend be_uring = {uring_loads};

/* Sets up the ring; 0, or -errno with the reason in why. */
static int uring_start(struct extractor *x, char *why, size_t whylen)
{
    struct xstate *xs = x->inflight;
    struct io_uring *ring = calloc(1, sizeof *ring);
    xs->cqes = calloc(x->depth, sizeof *xs->cqes);
    if (!ring || !xs->cqes) {
        free(ring);
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    struct io_uring_params p = {0};
#ifdef IORING_SETUP_COOP_TASKRUN
    p.flags = IORING_SETUP_COOP_TASKRUN; /* no IPI to run completions: this thread reaps them itself */
#endif
    int rc = io_uring_queue_init_params(x->depth, ring, &p);
    if (rc == -EINVAL && p.flags) {
        memset(&p, 0, sizeof p);
        rc = io_uring_queue_init_params(x->depth, ring, &p);
    }
    if (rc) {
        free(ring);
        snprintf(why, whylen, "io_uring_queue_init: %s", strerror(-rc));
        return rc;
    }
    x->ring = ring;
    x->use_uring = true;
    struct iovec iov = {.iov_base = x->staging, .iov_len = x->staging_len};
    rc = io_uring_register_buffers(ring, &iov, 1);
    xs->fixed_buf = rc == 0;
    if (rc)
        announce(x->src, ANN_NO_FIXED,
                 "io_uring cannot register the %zu-byte staging buffer (%s); using unregistered reads (raise "
                 "ulimit -l)",
                 x->staging_len, strerror(-rc));
    xs->fixed_file = io_uring_register_files(ring, &x->src->fd, 1) == 0;
    announce(x->src, ANN_URING, "extracting with io_uring: %u reads in flight per thread, %s buffers, %s file",
             x->depth, xs->fixed_buf ? "registered" : "unregistered", xs->fixed_file ? "registered" : "unregistered");
    return 0;
}
#else
static int uring_start(struct extractor *x, char *why, size_t whylen)
{
    (void)x;
    snprintf(why, whylen, "built without liburing");
    return -ENOSYS;
}
#endif

/* ---- the engine --------------------------------------------------------------- */

int extractor_init(struct extractor *x, const struct extract_source *src, struct featbuf *fb, unsigned depth,
                   void *staging, size_t staging_len, char *err, size_t errlen)
{
    memset(x, 0, sizeof *x);
    x->src = src;
    x->fb = fb;
    x->depth = depth;
    int rc;
    if (depth < 1 || depth > DEPTH_MAX)
        return sl_errf(err, errlen, -EINVAL, "I/O depth %u is outside 1..%u", depth, DEPTH_MAX);
    if (!fb->rows)
        return sl_errf(err, errlen, -EINVAL,
                       "the feature buffer keeps its rows on the device; this engine "
                       "writes host rows only");
    if (fb->row_bytes < src->row_bytes)
        return sl_errf(err, errlen, -EINVAL, "feature buffer rows hold %zu bytes, %s's rows %" PRIu64, fb->row_bytes,
                       src->path, src->row_bytes);
    if (fb->n_nodes < src->rows)
        return sl_errf(err, errlen, -EINVAL, "feature buffer maps %" PRIu64 " nodes, %s has %" PRIu64 " rows",
                       fb->n_nodes, src->path, src->rows);
    struct xstate *xs = calloc(1, sizeof *xs);
    if (!xs)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    x->inflight = xs;
    xs->rd = calloc(depth, sizeof *xs->rd);
    xs->spare = calloc(depth, sizeof *xs->spare);
    if (!xs->rd || !xs->spare) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
        goto err;
    }
    for (uint32_t e = 0; e < depth; e++)
        xs->spare[e] = depth - 1 - e;
    xs->nspare = depth;
    if (src->io == EXTRACT_IO_MMAP) {
        xs->be = &be_mmap;
        return 0;
    }
    size_t need = extract_staging_bytes(src, depth);
    if (staging) {
        if ((uintptr_t)staging % STAGING_ALIGN || staging_len < need) {
            rc = sl_errf(err, errlen, -EINVAL, "staging memory: %zu bytes at %p; %u reads need %zu bytes aligned to %u",
                         staging_len, staging, depth, need, STAGING_ALIGN);
            goto err;
        }
        x->staging = staging;
        x->staging_len = staging_len;
    } else {
        x->staging = aligned_alloc(STAGING_ALIGN, need);
        if (!x->staging) {
            rc = sl_errf(err, errlen, -ENOMEM, "no memory for %zu bytes of staging", need);
            goto err;
        }
        memset(x->staging, 0, need);
        x->staging_len = need;
        x->own_staging = true;
    }
    const char *no = getenv("SLUICE_NO_IO_URING");
    char why[128];
    if (no && *no && strcmp(no, "0") != 0) {
        snprintf(why, sizeof why, "SLUICE_NO_IO_URING is set");
        rc = -ENOSYS;
    } else {
        rc = uring_start(x, why, sizeof why);
    }
    if (rc) {
        announce(src, ANN_PREAD, "io_uring unavailable (%s); extracting with pread(2), one read at a time per thread",
                 why);
        xs->be = &be_pread;
    } else {
#ifdef SLUICE_HAVE_URING
        xs->be = &be_uring;
#endif
    }
    return 0;
err:
    extractor_free(x);
    return rc;
}

void extractor_free(struct extractor *x)
{
    if (!x)
        return;
    struct xstate *xs = x->inflight;
    bool wedged = xs && xs->wedged;
#ifdef SLUICE_HAVE_URING
    if (x->ring) {
        io_uring_queue_exit(x->ring);
        free(x->ring);
    }
    if (xs)
        free(xs->cqes);
#endif
    if (x->own_staging && !wedged)
        free(x->staging);
    if (xs) {
        free(xs->rd);
        free(xs->spare);
        free(xs->loads);
        free(xs);
    }
    free(x->action);
    memset(x, 0, sizeof *x);
}

static int grow(struct extractor *x, uint32_t n, char *err, size_t errlen)
{
    struct xstate *xs = x->inflight;
    if (n <= x->cap)
        return 0;
    uint8_t *a = realloc(x->action, n);
    if (a)
        x->action = a;
    uint32_t *l = realloc(xs->loads, (size_t)n * sizeof *l);
    if (l)
        xs->loads = l;
    if (!a || !l)
        return sl_errf(err, errlen, -ENOMEM, "no memory for a batch of %u nodes", n);
    x->cap = n;
    return 0;
}

/* Step 1: references on every node, waiting for room while the buffer is
 * full. Nothing is held on error. */
static int acquire(struct extractor *x, const uint64_t *nodes, uint32_t n, uint32_t *slots, char *err, size_t errlen)
{
    struct featbuf *fb = x->fb;
    uint32_t seq = featbuf_standby_seq(fb);
    int rc;
    while ((rc = featbuf_acquire_many(fb, nodes, n, slots, x->action)) == -EAGAIN) {
        do {
            uint64_t t0 = now_ns();
            rc = featbuf_wait_standby(fb, seq, WAIT_SLICE_MS);
            x->st.wait_ns += now_ns() - t0;
            if (rc == -ETIMEDOUT && x->idle) {
                int irc = x->idle(x->idle_arg);
                if (irc)
                    return sl_errf(err, errlen, irc, "stopped while waiting for room for %u rows in the feature buffer",
                                   n);
            }
        } while (rc == -ETIMEDOUT);
        if (rc)
            break;
        seq = featbuf_standby_seq(fb);
    }
    if (rc == -EPIPE)
        return sl_errf(err, errlen, rc, "the feature buffer is broken (the run is stopping)");
    if (rc)
        return sl_errf(err, errlen, rc, "feature buffer: acquiring %u rows: %s", n, strerror(-rc));
    return 0;
}

/* Step 3: waits for a row another extractor (or this batch) loads. */
static void wait_row(struct extractor *x, uint32_t i)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    uint64_t node = xs->nodes[i];
    for (;;) {
        uint64_t t0 = now_ns();
        int rc = featbuf_wait_valid(x->fb, xs->slots[i], WAIT_SLICE_MS);
        x->st.wait_ns += now_ns() - t0;
        if (rc == 0)
            return;
        if (rc == -ETIMEDOUT) {
            int irc = x->idle ? x->idle(x->idle_arg) : 0;
            if (irc) {
                batch_error(x, irc, "stopped while waiting for node %" PRIu64 ", which another extractor reads", node);
                return;
            }
            continue;
        }
        if (rc == -EIO)
            batch_error(x, -EIO, "%s: node %" PRIu64 " at offset %" PRIu64 ": the extractor that was reading it failed",
                        s->path, node, node * s->row_stride);
        else if (rc == -EPIPE)
            batch_error(x, rc, "the feature buffer is broken (the run is stopping)");
        else
            batch_error(x, rc, "feature buffer: waiting for node %" PRIu64 ": %s", node, strerror(-rc));
        return;
    }
}

int extractor_run(struct extractor *x, const uint64_t *nodes, uint32_t n, uint32_t *slots, char *err, size_t errlen)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    if (err && errlen)
        err[0] = '\0';
    if (xs->wedged)
        return sl_errf(err, errlen, -EIO, "%s: this extractor's io_uring failed earlier; it cannot read any more",
                       s->path);
    if (n == 0)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (nodes[i] >= s->rows)
            return sl_errf(err, errlen, -EINVAL, "node %" PRIu64 " is out of range: %s has %" PRIu64 " rows", nodes[i],
                           s->path, s->rows);
    int rc = grow(x, n, err, errlen);
    if (rc)
        return rc;
    rc = acquire(x, nodes, n, slots, err, errlen);
    if (rc)
        return rc;

    xs->nodes = nodes;
    xs->slots = slots;
    xs->rc = 0;
    xs->err = err;
    xs->errlen = errlen;
    xs->nloads = xs->next = 0;
    uint32_t nwait = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (x->action[i] == FEATBUF_LOAD)
            xs->loads[xs->nloads++] = i;
        else if (x->action[i] == FEATBUF_WAIT)
            nwait++;
    }
    x->st.rows += n;
    x->st.loads += xs->nloads;
    x->st.waits += nwait;
    x->st.hits += n - xs->nloads - nwait;

    if (xs->nloads)
        xs->be->loads(x);
    for (uint32_t k = xs->next; k < xs->nloads; k++) /* never started: the batch failed first */
        featbuf_load_failed(x->fb, slots[xs->loads[k]]);
    for (uint32_t i = 0; i < n && nwait && !xs->rc; i++)
        if (x->action[i] == FEATBUF_WAIT)
            wait_row(x, i);

    rc = xs->rc;
    xs->nodes = NULL;
    xs->slots = NULL;
    xs->err = NULL;
    if (rc) {
        featbuf_release_many(x->fb, slots, n);
        return rc;
    }
    x->st.batches++;
    return 0;
}

void extract_stats_add(struct extract_stats *dst, const struct extract_stats *src)
{
    dst->batches += src->batches;
    dst->rows += src->rows;
    dst->hits += src->hits;
    dst->waits += src->waits;
    dst->loads += src->loads;
    dst->io_ops += src->io_ops;
    dst->io_bytes += src->io_bytes;
    dst->retries += src->retries;
    dst->wait_ns += src->wait_ns;
}
