/* warm.c - the warm start's sequential pass (API, protocol and when it
 * applies: warm.h).
 *
 * Ownership. The pass owns, from its claim until its featbuf_loaded /
 * featbuf_load_failed, the rows of every slot it was answered LOAD for;
 * it writes them (by a read straight into slot memory, or a copy out of
 * its staging) and no one else does. It holds one reference on every row
 * of a chunk from the claim until the chunk is done. Its staging
 * (min(depth, PIECES_MAX) pieces of one chunk's extent) and its io_uring
 * are its own.
 *
 * A chunk's life: CLAIMED (references held; LOADs outstanding) -> READING
 * (a request in flight; short reads continue from the last aligned byte
 * that landed) -> done (LOADs published or failed, references dropped).
 * Chunks are started in file order; they may land out of order and each
 * is published as it lands. On an error no new read starts, the reads in
 * flight are waited for (the kernel may still write into slot memory),
 * then every LOAD not yet published is failed and every reference left is
 * dropped. If io_uring itself fails with reads in flight, their chunks'
 * loads are failed but their references are kept for ever, so no slot the
 * kernel may still write is reused (the run is failing anyway). */
#include "stages/warm.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "ipc/shm.h"
#include "stages/extract_int.h" /* SLUICE_FAULT_READ_EIO counts the pass's reads too */
#include "stages/sink.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#endif

#define WAIT_SLICE_MS 200
#define DEPTH_MAX 256u
#define CLAIM_SLICE 16u /* chunks claimed between two looks at the reads */
#define PIECES_MAX 16u /* staging pieces: chunks that cannot be read straight into their slots (rows on a GPU; a buffer
                         * stride other than the file's, as for rows of 400 bytes: 448 against 512) in flight at
                         * once; 16 MiB reads at ~1.75 GiB/s here, 8 at ~1 */
#define HUGE_STEP ((size_t)8 << 20) /* bytes of slot memory per shm_huge call */
#define HUGE_THREADS 2              /* helpers offering them */

struct wchunk {
    uint64_t first;     /* first row */
    uint32_t n;         /* rows */
    uint64_t e0;        /* its first entry (struct warm's slots/act) */
    uint32_t ne;        /* its entries: n, or its rows of the hot set */
    uint32_t nload;     /* of them answered LOAD */
    uint64_t start;     /* file offset of the extent (aligned) */
    size_t len;         /* bytes of the extent */
    size_t skip;        /* where row `first` starts in the extent */
    size_t need;        /* bytes that must land: up to the end of the last row */
    size_t got;         /* landed: a prefix of the extent */
    size_t from;        /* start of the request in flight */
    unsigned char *dst; /* where the extent lands: slot memory, or a staging piece */
    int piece;          /* its staging piece, or -1 when read straight into the slots */
};

struct warm {
    const struct extract_source *src;
    struct featbuf *fb;
    struct warm_stats *st;
    uint32_t rows_per; /* rows per chunk */
    uint64_t nchunks, claimed;
    /* One entry per row the pass loads: every row of the file (entry =
     * row), or the hot set's rows (entry e = row want[e]), so a hot set's
     * bookkeeping is 5 bytes per row of the set, not of the file. A chunk's
     * entries are consecutive: [ent_first(c), ent_end(c)). */
    uint32_t *slots; /* (entries) the claim's slot */
    uint8_t *act;    /* (entries) the claim's answer (FEATBUF_LOAD, ...) */
    uint64_t *nodes; /* (rows_per): a claim's node ids (every row) */
    /* a hot set (warm_params.nodes): its rows only */
    const uint64_t *want;
    uint64_t nwant;   /* the set's size */
    uint64_t *cstart; /* (nchunks + 1): a hot set's first entry of each chunk */
    unsigned depth;
    unsigned char *staging; /* (npieces, piece_bytes) */
    size_t piece_bytes;
    unsigned npieces; /* min(depth, PIECES_MAX) */
    int *free_piece;  /* (npieces) */
    unsigned nfree;
    struct wchunk *io; /* (depth): chunks in flight, by io slot */
    bool *busy;        /* (depth) */
    unsigned inflight, peak; /* reads in flight now, and the most at once */
    bool ring_failed; /* io_uring failed (a submit or a wait): the pass stops, its reads' slots stay held and the
                       * staging is leaked (the kernel may still write into it) */
    /* huge pages (huge_main): steps of HUGE_STEP bytes from huge_base */
    unsigned char *huge_base;  /* the rows' start, rounded down to a huge page */
    size_t huge_steps;         /* steps up to the rows' end */
    atomic_size_t huge_take;   /* the next step a helper takes */
    atomic_uchar *huge_done;   /* (huge_steps) 1: offered */
    size_t huge_prefix;        /* the read loop's: steps below it all offered */
    atomic_bool huge_off;      /* offers stopped: refused, turned off, or the pass ends */
    atomic_int huge_rc;        /* the first refusal's -errno, or -ECANCELED (SLUICE_NO_HUGE_PAGES) */
    _Atomic uint64_t huge_bytes, huge_end_ns;
    uint64_t huge_t0;
    pthread_t huge_tid[HUGE_THREADS];
    unsigned huge_nt;          /* helpers started */
    pthread_mutex_t huge_mu;   /* with huge_cv: a step was offered */
    pthread_cond_t huge_cv;
    bool huge_inited;          /* huge_start ran: teardown stops the helpers */
    struct row_sink sink; /* copies out of staging into slots (host memory or the device) */
    bool sink_ok;
    int rc;
    char *err;
    size_t errlen;
#ifdef SLUICE_HAVE_URING
    struct io_uring ring;
    bool uring;
#endif
};

bool warm_fits_set(const struct featbuf *fb, const struct extract_source *src, uint64_t n)
{
    return (fb->rows || fb->dev_rows) && n <= (uint64_t)fb->nslots && fb->n_nodes == src->rows &&
           fb->row_bytes >= src->row_bytes;
}

bool warm_fits(const struct featbuf *fb, const struct extract_source *src)
{
    /* n_nodes == rows: no node outside the file can hold a slot, so no
     * claim ever needs to evict (the claims run between the reads, and
     * would otherwise take slots the pass has already filled) */
    return (fb->rows || fb->dev_rows) && (uint64_t)fb->nslots >= src->rows && fb->n_nodes == src->rows &&
           fb->row_bytes >= src->row_bytes;
}

static void SL_PRINTF(3, 4) keep_error(struct warm *w, int rc, const char *fmt, ...)
{
    if (w->rc)
        return;
    w->rc = rc;
    if (w->err && w->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err, w->errlen, fmt, ap);
        va_end(ap);
    }
}

/* Chunk c's entries, and the row of entry e. */
static uint64_t ent_first(const struct warm *w, uint64_t c)
{
    return w->want ? w->cstart[c] : c * w->rows_per;
}

static uint64_t ent_end(const struct warm *w, uint64_t c)
{
    return w->want ? w->cstart[c + 1] : SL_MIN((c + 1) * w->rows_per, w->src->rows);
}

static uint64_t ent_row(const struct warm *w, uint64_t e)
{
    return w->want ? w->want[e] : e;
}

/* Step 1 for chunk c. 0, -EAGAIN (no room: stop claiming), -errno. */
static int claim(struct warm *w, uint64_t c)
{
    uint64_t e0 = ent_first(w, c), ne = ent_end(w, c) - e0;
    if (!ne)
        return 0; /* no row of the hot set here */
    const uint64_t *nodes = w->want + e0;
    if (!w->want) {
        for (uint64_t i = 0; i < ne; i++)
            w->nodes[i] = e0 + i;
        nodes = w->nodes;
    }
    int rc = featbuf_acquire_many(w->fb, nodes, (uint32_t)ne, w->slots + e0, w->act + e0);
    if (rc)
        return rc;
    for (uint64_t i = 0; i < ne; i++)
        if (w->act[e0 + i] != FEATBUF_LOAD)
            w->st->skipped++;
    return 0;
}

/* Claims chunks up to (not including) upto, or to the end; *claiming
 * turns false once every chunk is claimed, a batch took the room (what is
 * claimed is read, the rest is left to the batches) or a claim failed
 * (the error kept). Its time adds to st->claim_ns. */
static void claim_more(struct warm *w, uint64_t upto, bool *claiming)
{
    uint64_t t0 = sl_now_ns();
    upto = SL_MIN(upto, w->nchunks);
    for (; *claiming && w->claimed < upto; w->claimed++) {
        int rc = claim(w, w->claimed);
        if (rc == -EAGAIN) {
            *claiming = false;
        } else if (rc) {
            keep_error(w, rc, "warm start: claiming rows %" PRIu64 "..: %s", w->claimed * w->rows_per, strerror(-rc));
            *claiming = false;
        }
        if (!*claiming)
            break;
    }
    if (w->claimed >= w->nchunks)
        *claiming = false;
    w->st->claim_ns += sl_now_ns() - t0;
}

/* Takes the sink's finished copies (published by the sink: loaded or
 * failed), waiting for at least one when wait. */
static void sink_drain(struct warm *w, bool wait)
{
    struct row_sink_done done[16];
    uint32_t n;
    while ((n = row_sink_poll(&w->sink, done, SL_ARRAY_LEN(done), wait)) > 0) {
        for (uint32_t i = 0; i < n; i++) {
            if (done[i].copy_rc == 0)
                w->st->loaded += done[i].nrows;
            else
                keep_error(w, done[i].copy_rc, "%s: warm start: copying rows into the feature buffer: %s",
                           w->src->path, strerror(-done[i].copy_rc));
            if (done[i].fb_rc == -EPIPE)
                keep_error(w, -EPIPE, "the feature buffer is broken (the run is stopping)");
        }
        wait = false; /* then take what else has finished */
    }
}

/* The LOAD rows of a chunk that landed in staging, copied into their
 * slots through the sink: one copy per run of rows in consecutive slots
 * (a fresh buffer gives a whole chunk one run). Returns once every copy
 * has finished and its rows are published (so the staging piece and the
 * references are free to go). */
static void copy_chunk(struct warm *w, const struct wchunk *k)
{
    const struct extract_source *s = w->src;
    const uint64_t end = k->e0 + k->ne;
    for (uint64_t e = k->e0; e < end;) {
        if (w->act[e] != FEATBUF_LOAD) {
            e++;
            continue;
        }
        uint64_t r = ent_row(w, e);
        uint32_t run = 1;
        while (e + run < end && w->act[e + run] == FEATBUF_LOAD && w->slots[e + run] == w->slots[e] + run &&
               ent_row(w, e + run) == r + run)
            run++;
        struct row_sink_copy c = {.slot = w->slots[e],
                                  .nrows = run,
                                  .src = k->dst + k->skip + (size_t)(r - k->first) * s->row_stride,
                                  .src_pitch = (size_t)s->row_stride,
                                  .row_bytes = (size_t)s->row_bytes,
                                  .tag = r};
        int rc;
        while ((rc = row_sink_put(&w->sink, &c)) == -EBUSY)
            sink_drain(w, true);
        if (rc) { /* nothing started: these loads are still ours */
            keep_error(w, rc, "%s: warm start: copying rows into the feature buffer: %s", s->path, strerror(-rc));
            for (uint32_t j = 0; j < run; j++)
                if (featbuf_load_failed(w->fb, w->slots[e + j]) == -EPIPE)
                    keep_error(w, -EPIPE, "the feature buffer is broken (the run is stopping)");
        }
        e += run;
    }
    while (row_sink_pending(&w->sink))
        sink_drain(w, true);
}

/* Publishes (ok) or fails every LOAD row of chunk c, then drops its
 * references (unless keep_refs). A chunk read into staging goes to its
 * slots through the sink (copy_chunk); one read straight into its slots
 * is published here. */
static void finish(struct warm *w, const struct wchunk *k, bool ok, bool keep_refs)
{
    struct featbuf *fb = w->fb;
    if (ok && k->piece >= 0) {
        copy_chunk(w, k);
    } else {
        for (uint64_t e = k->e0; e < k->e0 + k->ne; e++) {
            if (w->act[e] != FEATBUF_LOAD)
                continue;
            int rc;
            if (ok) {
                rc = featbuf_loaded(fb, w->slots[e]);
                w->st->loaded++;
            } else {
                rc = featbuf_load_failed(fb, w->slots[e]);
            }
            if (rc == -EPIPE)
                keep_error(w, rc, "the feature buffer is broken (the run is stopping)");
        }
    }
    if (keep_refs)
        return;
    /* every entry was claimed, whatever the answer: each holds a reference */
    if (k->ne && featbuf_release_many(fb, w->slots + k->e0, k->ne) == -EPIPE)
        keep_error(w, -EPIPE, "the feature buffer is broken (the run is stopping)");
}

/* Huge pages, beside the reads. Before chunk c's read is sent, the slot
 * memory up to the end of its last LOAD row's slot has been offered to
 * shm_huge (huge_covered), so the read lands in huge pages: a page is
 * zeroed once and read into, with no copy and no small-page faults. The
 * offers are made by HUGE_THREADS helper threads, from the start of the
 * pass, in steps of HUGE_STEP bytes aligned to huge pages (one shm_huge
 * call each: every call drains every CPU's page lists first) taken in
 * slot order from a counter; a step may reach into other chunks' slots
 * (the collapse keeps contents, so it never matters whose rows they
 * are). Where the kernel is slow to hand out huge pages (a virtual
 * machine whose host backs memory on first touch: 1-2 s per GiB on one
 * thread, about 0.5 s on two), that time overlaps the claims and the
 * disk's. Claims gave the chunks rising slots, so the steps the reads
 * wait for come first. The first refusal other than a busy page turns
 * the offers off for the rest of the pass, and the reads then wait for
 * nothing. */

/* Just past the slot memory of chunk c's last LOAD row; NULL when it
 * has none (nothing of it is read). */
static unsigned char *huge_end(const struct warm *w, uint64_t c)
{
    uint32_t top = 0;
    bool any = false;
    for (uint64_t e = ent_first(w, c), end = ent_end(w, c); e < end; e++)
        if (w->act[e] == FEATBUF_LOAD) {
            top = SL_MAX(top, w->slots[e]);
            any = true;
        }
    return any ? featbuf_row(w->fb, top) + w->fb->stride : NULL;
}

/* The end of the slot memory offered: the first `rows` slots, where a
 * fresh buffer puts the file's rows (a buffer with more slots than rows
 * keeps the rest untouched, in small pages, as without the pass). */
static unsigned char *rows_end(const struct warm *w)
{
    uint64_t n = SL_MIN((uint64_t)w->fb->nslots, w->src->rows);
    return featbuf_row(w->fb, 0) + (size_t)n * w->fb->stride;
}

static void *huge_main(void *arg)
{
    struct warm *w = arg;
    unsigned char *lo = featbuf_row(w->fb, 0), *end = rows_end(w);
    for (;;) {
        if (atomic_load_explicit(&w->huge_off, memory_order_relaxed))
            break;
        size_t i = atomic_fetch_add_explicit(&w->huge_take, 1, memory_order_relaxed);
        if (i >= w->huge_steps)
            break;
        unsigned char *a = w->huge_base + i * HUGE_STEP, *b = a + HUGE_STEP;
        a = a < lo ? lo : a;
        b = b > end ? end : b;
        size_t got = 0;
        int rc = shm_huge(a, (size_t)(b - a), &got);
        atomic_fetch_add_explicit(&w->huge_bytes, got, memory_order_relaxed);
        if (rc && rc != -EAGAIN && rc != -EBUSY) {
            int zero = 0;
            atomic_compare_exchange_strong(&w->huge_rc, &zero, rc);
            atomic_store(&w->huge_off, true);
        }
        pthread_mutex_lock(&w->huge_mu);
        atomic_store_explicit(&w->huge_done[i], 1, memory_order_release);
        uint64_t now = sl_now_ns();
        if (now > atomic_load(&w->huge_end_ns))
            atomic_store(&w->huge_end_ns, now);
        pthread_cond_broadcast(&w->huge_cv);
        pthread_mutex_unlock(&w->huge_mu);
    }
    return NULL;
}

/* Starts the helpers (none when turned off, or nothing to offer); a
 * helper that cannot be started leaves its steps to the others, or the
 * offers off. */
static void huge_start(struct warm *w, bool off)
{
    w->huge_t0 = sl_now_ns();
    atomic_init(&w->huge_take, 0);
    atomic_init(&w->huge_bytes, 0);
    atomic_init(&w->huge_end_ns, w->huge_t0);
    atomic_init(&w->huge_rc, 0);
    atomic_init(&w->huge_off, true);
    pthread_mutex_init(&w->huge_mu, NULL);
    pthread_cond_init(&w->huge_cv, NULL);
    w->huge_inited = true;
    if (off || sl_env_on("SLUICE_NO_HUGE_PAGES")) {
        atomic_store(&w->huge_rc, -ECANCELED);
        return;
    }
    unsigned char *lo = featbuf_row(w->fb, 0), *end = rows_end(w);
    w->huge_base = (unsigned char *)((uintptr_t)lo & ~(uintptr_t)(SHM_HUGE_BYTES - 1));
    w->huge_steps = (size_t)(end - w->huge_base + HUGE_STEP - 1) / HUGE_STEP;
    w->huge_done = calloc(w->huge_steps ? w->huge_steps : 1, sizeof *w->huge_done);
    if (!w->huge_done || end - lo < (ptrdiff_t)SHM_HUGE_BYTES)
        return; /* no memory for the bookkeeping, or no whole huge page: small pages */
    atomic_store(&w->huge_off, false);
    for (unsigned i = 0; i < HUGE_THREADS; i++)
        if (pthread_create(&w->huge_tid[w->huge_nt], NULL, huge_main, w) == 0)
            w->huge_nt++;
    if (w->huge_nt == 0)
        atomic_store(&w->huge_off, true);
}

/* Stops the helpers (after their step in hand) and reports. */
static void huge_stop(struct warm *w)
{
    atomic_store(&w->huge_off, true);
    for (unsigned i = 0; i < w->huge_nt; i++)
        pthread_join(w->huge_tid[i], NULL);
    w->huge_nt = 0;
    w->st->huge_bytes = atomic_load(&w->huge_bytes);
    w->st->huge_ns = atomic_load(&w->huge_end_ns) - w->huge_t0;
    w->st->huge_rc = atomic_load(&w->huge_rc);
    free((void *)w->huge_done);
    w->huge_done = NULL;
    pthread_cond_destroy(&w->huge_cv);
    pthread_mutex_destroy(&w->huge_mu);
}

/* Chunk c may be read: the steps under its slots have been offered (or
 * the offers are off). */
static bool huge_covered(struct warm *w, uint64_t c)
{
    if (!w->huge_inited || atomic_load_explicit(&w->huge_off, memory_order_acquire))
        return true;
    unsigned char *need = huge_end(w, c);
    if (!need || need <= w->huge_base)
        return true;
    size_t last = (size_t)(need - 1 - w->huge_base) / HUGE_STEP;
    if (last >= w->huge_steps) /* slots past the offered memory (rows loaded elsewhere first): wait for all */
        last = w->huge_steps - 1;
    while (w->huge_prefix < w->huge_steps && atomic_load_explicit(&w->huge_done[w->huge_prefix], memory_order_acquire))
        w->huge_prefix++;
    return w->huge_prefix > last;
}

/* Waits (at most one slice) for a helper to finish a step. */
static void huge_wait(struct warm *w)
{
    if (!w->huge_inited)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += WAIT_SLICE_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->huge_mu);
    size_t p = w->huge_prefix;
    if (!atomic_load(&w->huge_off) && p < w->huge_steps && !atomic_load(&w->huge_done[p]))
        pthread_cond_timedwait(&w->huge_cv, &w->huge_mu, &ts);
    pthread_mutex_unlock(&w->huge_mu);
}

/* Rows of chunk c the claim answered LOAD: 0 when there is nothing to
 * read (no row of the hot set, or the batches had all of it). */
static uint32_t chunk_nload(const struct warm *w, uint64_t c)
{
    uint32_t n = 0;
    for (uint64_t e = ent_first(w, c), end = ent_end(w, c); e < end; e++)
        n += w->act[e] == FEATBUF_LOAD;
    return n;
}

/* Chunk c can be read straight into its slots: host rows, every row
 * LOAD, in consecutive slots, the same stride as the file, and the direct
 * I/O alignment kept (a fresh buffer gives every chunk this). Else it
 * lands in a staging piece and is copied. */
static bool direct_ok(const struct warm *w, uint64_t c)
{
    const struct extract_source *s = w->src;
    uint64_t a = s->align, first = c * w->rows_per;
    uint32_t n = (uint32_t)SL_MIN((uint64_t)w->rows_per, s->rows - first);
    uint64_t e0 = ent_first(w, c);
    if (!w->fb->rows || w->fb->stride != s->row_stride || s->row_stride % a || (first * s->row_stride) % a ||
        ent_end(w, c) - e0 != n) /* a hot set holding only some of the chunk's rows */
        return false;
    uint32_t s0 = w->slots[e0];
    for (uint32_t i = 0; i < n; i++)
        if (w->act[e0 + i] != FEATBUF_LOAD || w->slots[e0 + i] != s0 + i)
            return false;
    return (uintptr_t)featbuf_row(w->fb, s0) % a == 0;
}

/* Sets chunk c up in an io slot: its extent, and where it lands (its
 * slots when direct, else a free staging piece: the caller checked that
 * there is one; nload: its LOAD rows, chunk_nload); only its entries
 * when it has none. */
static void prepare(struct warm *w, uint64_t c, uint32_t nload, bool direct, struct wchunk *k)
{
    const struct extract_source *s = w->src;
    uint64_t a = s->align, first = c * w->rows_per;
    memset(k, 0, sizeof *k);
    k->first = first;
    k->n = (uint32_t)SL_MIN((uint64_t)w->rows_per, s->rows - first);
    k->e0 = ent_first(w, c);
    k->ne = (uint32_t)(ent_end(w, c) - k->e0);
    k->nload = nload;
    k->piece = -1;
    if (!k->nload)
        return; /* nothing to read: no extent, no staging */
    uint64_t off = first * s->row_stride;
    k->need = (size_t)((k->n - 1) * s->row_stride + s->row_bytes);
    if (direct) {
        k->start = off;
        k->len = (size_t)k->n * s->row_stride;
        k->skip = 0;
        k->dst = featbuf_row(w->fb, w->slots[k->e0]);
        return;
    }
    k->start = off & ~(a - 1);
    k->len = (size_t)(sl_round_up(off + k->need, a) - k->start);
    k->skip = (size_t)(off - k->start);
    k->need += k->skip;
    k->piece = w->free_piece[--w->nfree];
    k->dst = w->staging + (size_t)k->piece * w->piece_bytes;
}

/* ---- reads: io_uring, or pread(2) ------------------------------------------------------------------ */

/* Queues the request of io slot e (from k->from). 0 or -errno. */
static int submit(struct warm *w, unsigned e)
{
    struct wchunk *k = &w->io[e];
#ifdef SLUICE_HAVE_URING
    if (w->uring) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
        if (!sqe)
            return -EBUSY; /* cannot happen: at most depth requests, depth sq entries */
        io_uring_prep_read(sqe, w->src->fd, k->dst + k->from, (unsigned)(k->len - k->from), k->start + k->from);
        io_uring_sqe_set_data64(sqe, e);
        int rc = io_uring_submit(&w->ring);
        if (rc < 0) /* the request may still be in the ring, to be sent by a later call: its slots stay held */
            w->ring_failed = true;
        return rc < 0 ? rc : 0;
    }
#endif
    (void)k;
    return 0; /* pread: the read happens in reap */
}

/* Takes one finished request: its io slot and result (bytes or -errno),
 * waiting for it when wait (at most a slice). 0; -ETIME (nothing within
 * the slice), -EAGAIN (nothing yet, !wait); other -errno: the ring
 * failed. */
static int reap(struct warm *w, unsigned *e, int *res, bool wait)
{
#ifdef SLUICE_HAVE_URING
    if (w->uring) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts = {.tv_sec = 0, .tv_nsec = WAIT_SLICE_MS * 1000000L};
        int rc = wait ? io_uring_wait_cqe_timeout(&w->ring, &cqe, &ts) : io_uring_peek_cqe(&w->ring, &cqe);
        if (rc == -EINTR)
            return -ETIME;
        if (rc)
            return rc;
        *e = (unsigned)io_uring_cqe_get_data64(cqe);
        *res = cqe->res;
        io_uring_cqe_seen(&w->ring, cqe);
        return 0;
    }
#endif
    for (unsigned i = 0; i < w->depth; i++) /* pread: one request at a time (depth 1) */
        if (w->busy[i]) {
            struct wchunk *k = &w->io[i];
            ssize_t n = pread(w->src->fd, k->dst + k->from, k->len - k->from, (off_t)(k->start + k->from));
            *e = i;
            *res = n < 0 ? -errno : (int)n;
            return 0;
        }
    return -EINVAL;
}

/* A request of io slot e ended with res. true when the chunk is done
 * (published, or failed with the error kept). */
static bool complete(struct warm *w, unsigned e, int res)
{
    struct wchunk *k = &w->io[e];
    const struct extract_source *s = w->src;
    if (extract_fault_read_fails())
        res = -EIO;
    if (res == -EAGAIN || res == -EINTR)
        return submit(w, e) == 0 ? false : (keep_error(w, -EIO, "%s: resubmitting a read failed", s->path), true);
    if (res < 0 || (res == 0 && k->got < k->need)) {
        keep_error(w, res < 0 ? res : -EIO,
                   "%s: warm start: reading %zu bytes at offset %" PRIu64 " (rows %" PRIu64 "..%" PRIu64 "): %s",
                   s->path, k->len - k->from, k->start + k->from, k->first, k->first + k->n - 1,
                   res < 0 ? strerror(-res) : "the file ended early (it shrank under us; run gnnprep check)");
        return true;
    }
    w->st->reads++;
    w->st->bytes += (uint64_t)res;
    if (k->from + (size_t)res <= k->got) {
        /* nothing past what the last read gave: a direct read that asked
         * again from the block before the end got the same tail, so the
         * file ends there, off a block boundary */
        keep_error(w, -EIO,
                   "%s: warm start: reading at offset %" PRIu64 " (rows %" PRIu64 "..%" PRIu64
                   "): the file ended early (it shrank under us; run gnnprep check)",
                   s->path, k->start + k->got, k->first, k->first + k->n - 1);
        return true;
    }
    k->got = k->from + (size_t)res;
    if (k->got >= k->need)
        return true;
    if (w->rc)
        return true; /* failing: no follow-ups */
    k->from = k->got & ~((size_t)s->align - 1);
    int rc = submit(w, e);
    if (rc) {
        keep_error(w, rc, "%s: submitting a read: %s", s->path, strerror(-rc));
        return true;
    }
    return false;
}

static void retire(struct warm *w, unsigned e, bool ok)
{
    struct wchunk *k = &w->io[e];
    finish(w, k, ok, false);
    if (k->piece >= 0)
        w->free_piece[w->nfree++] = k->piece;
    w->busy[e] = false;
    w->inflight--;
}

static int setup(struct warm *w, const struct warm_params *p, char *err, size_t errlen)
{
    const struct extract_source *s = w->src;
    size_t chunk = p && p->chunk_bytes ? p->chunk_bytes : WARM_CHUNK_BYTES_DEFAULT;
    chunk = SL_MIN(chunk, (size_t)1 << 30); /* one read's length is 32-bit in io_uring */
    unsigned depth = p && p->depth ? p->depth : WARM_DEPTH_DEFAULT;
    if (depth > DEPTH_MAX)
        return sl_errf(err, errlen, -EINVAL, "warm start: %u reads in flight, more than %u", depth, DEPTH_MAX);
    uint64_t per = chunk / s->row_stride;
    w->rows_per = (uint32_t)SL_MAX(1, SL_MIN(per, (uint64_t)1 << 20));
    w->nchunks = (s->rows + w->rows_per - 1) / w->rows_per;
    w->depth = depth;
    w->piece_bytes = sl_round_up((uint64_t)w->rows_per * s->row_stride + 2 * (uint64_t)s->align, STAGING_ALIGN);
    w->npieces = SL_MIN(depth, PIECES_MAX);
    uint64_t entries = w->want ? w->nwant : s->rows;
    w->slots = malloc((size_t)SL_MAX(entries, 1) * sizeof *w->slots);
    w->act = malloc((size_t)SL_MAX(entries, 1));
    if (!w->want) /* a claim's node ids; a hot set's are its own */
        w->nodes = malloc((size_t)w->rows_per * sizeof *w->nodes);
    if (w->want && (w->cstart = malloc((size_t)(w->nchunks + 1) * sizeof *w->cstart)) != NULL)
        for (uint64_t c = 0, e = 0; c <= w->nchunks; c++) {
            while (e < w->nwant && w->want[e] < c * w->rows_per)
                e++;
            w->cstart[c] = e;
        }
    w->staging = aligned_alloc(STAGING_ALIGN, w->piece_bytes * w->npieces);
    w->free_piece = calloc(w->npieces, sizeof *w->free_piece);
    w->io = calloc(depth, sizeof *w->io);
    w->busy = calloc(depth, sizeof *w->busy);
    if (!w->slots || !w->act || (!w->want && !w->nodes) || (w->want && !w->cstart) || !w->staging || !w->free_piece || !w->io ||
        !w->busy)
        return sl_errf(err, errlen, -ENOMEM, "warm start: no memory for %" PRIu64 " rows' slots and %zu bytes of staging",
                       entries, w->piece_bytes * w->npieces);
    for (unsigned i = 0; i < w->npieces; i++)
        w->free_piece[w->nfree++] = (int)i;
    /* the copies out of staging: the host sink, or the CUDA sink for rows
     * on the device (it registers the staging and makes this thread's
     * device current) */
    char msg[512];
    const struct row_sink_ops *ops = row_sink_pick(w->fb, msg, sizeof msg);
    int rc = ops ? row_sink_init(&w->sink, ops, w->fb, w->staging, w->piece_bytes * w->npieces, 64, msg, sizeof msg)
                 : -ENODEV;
    if (rc)
        return sl_errf(err, errlen, rc, "warm start: %s", msg);
    w->sink_ok = true;
#ifdef SLUICE_HAVE_URING
    w->uring = !sl_env_on("SLUICE_NO_IO_URING") && io_uring_queue_init(depth, &w->ring, 0) == 0; /* as extract.h */
    if (!w->uring)
#endif
        w->depth = 1; /* pread(2): one read at a time, so chunks still land in order */
    w->st->chunk_bytes = (uint64_t)w->rows_per * s->row_stride;
    if (w->fb->rows) /* huge pages for rows in host memory; a device's are its own */
        huge_start(w, p && p->no_huge);
    return 0;
}

static void teardown(struct warm *w)
{
    if (w->huge_inited)
        huge_stop(w);
    if (w->sink_ok)
        row_sink_free(&w->sink); /* nothing is outstanding: every chunk drained its copies */
#ifdef SLUICE_HAVE_URING
    if (w->uring)
        io_uring_queue_exit(&w->ring);
#endif
    free(w->slots);
    free(w->nodes);
    free(w->cstart);
    if (!w->ring_failed)
        free(w->staging); /* else the kernel may still write into it */
    free(w->free_piece);
    free(w->io);
    free(w->busy);
    free(w->act);
}

int warm_fill(const struct extract_source *src, struct featbuf *fb, const struct warm_params *p, warm_idle_fn idle,
              void *arg, struct warm_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (err && errlen)
        err[0] = '\0';
    if (!fb->rows && !fb->dev_rows)
        return sl_errf(err, errlen, -ENODEV,
                       "warm start: the feature buffer keeps its rows on a GPU that this process has not opened "
                       "(featbuf_cuda_import)");
    const uint64_t *want = p ? p->nodes : NULL;
    uint64_t nwant = want ? p->nnodes : src->rows;
    if (!want && !warm_fits(fb, src))
        return sl_errf(err, errlen, -EINVAL,
                       "warm start: the feature buffer has %u slots of %zu bytes, %s has %" PRIu64 " rows of %" PRIu64
                       " bytes: they do not all fit",
                       fb->nslots, fb->row_bytes, src->path, src->rows, src->row_bytes);
    if (want && !warm_fits_set(fb, src, nwant))
        return sl_errf(err, errlen, -EINVAL,
                       "warm start: a hot set of %" PRIu64 " rows does not fit the feature buffer's %u slots of %zu "
                       "bytes for %" PRIu64 " nodes (%s: %" PRIu64 " rows of %" PRIu64 " bytes)",
                       nwant, fb->nslots, fb->row_bytes, fb->n_nodes, src->path, src->rows, src->row_bytes);
    for (uint64_t i = 0; want && i < nwant; i++)
        if (want[i] >= src->rows || (i && want[i] <= want[i - 1]))
            return sl_errf(err, errlen, -EINVAL,
                           "warm start: the hot set's node %" PRIu64 " (entry %" PRIu64 ") is not below %" PRIu64
                           " and above the one before",
                           want[i], i, src->rows);
    uint64_t t0 = sl_now_ns();
    st->rows = nwant;
    struct warm w = {.src = src, .fb = fb, .st = st, .err = err, .errlen = errlen, .want = want, .nwant = want ? nwant : 0};
    int rc = setup(&w, p, err, errlen);
    if (rc) {
        teardown(&w);
        return rc;
    }
    if (src->rows == 0)
        goto out;
    /* 1: claim every row, chunk by chunk: the first reads' chunks now,
     * the rest a slice at a time between the reads below (the disk is
     * busy meanwhile; claiming 2M rows takes ~0.06 s, and the first batch
     * reaches an extractor later than that) */
    bool claiming = true;
    claim_more(&w, w.depth, &claiming);

    /* 2, 3: read the claimed chunks in order, publish each as it lands */
    uint64_t next = 0;
    for (;;) {
        if (w.rc)
            claiming = false;
        while (!w.rc && w.inflight < w.depth && next < w.claimed && huge_covered(&w, next)) {
            uint32_t nload = chunk_nload(&w, next);
            bool direct = nload && direct_ok(&w, next);
            if (nload && !direct && w.nfree == 0)
                break; /* a staging piece comes back with the next chunk done (none in flight: all are free) */
            unsigned e = 0;
            while (w.busy[e])
                e++;
            prepare(&w, next, nload, direct, &w.io[e]);
            next++;
            if (w.io[e].nload == 0) { /* nothing to read: no row of the hot set, or the batches had all of it */
                w.busy[e] = true;
                w.inflight++;
                retire(&w, e, true);
                continue;
            }
            if (direct)
                w.st->chunks_direct++;
            else
                w.st->chunks_copied++;
            w.busy[e] = true;
            w.inflight++;
            w.peak = SL_MAX(w.peak, w.inflight);
            int src_rc = submit(&w, e);
            if (src_rc) {
                keep_error(&w, src_rc, "%s: warm start: submitting a read: %s", src->path, strerror(-src_rc));
                if (w.ring_failed)
                    break;
                retire(&w, e, false);
            }
        }
        if (w.ring_failed)
            break;
        if (claiming)
            claim_more(&w, w.claimed + CLAIM_SLICE, &claiming);
        if (w.inflight == 0) {
            if (w.rc || (next >= w.claimed && !claiming))
                break;
            if (!claiming)
                huge_wait(&w); /* the next chunk's slots are still being made huge */
            if (idle && !w.rc && idle(arg))
                keep_error(&w, -EPIPE, "warm start: stopped (the run is stopping)");
            continue;
        }
        unsigned e;
        int res;
        rc = reap(&w, &e, &res, !claiming); /* while claiming, only what has landed */
        if (rc == -ETIME || rc == -EAGAIN) {
            if (idle && idle(arg) && !w.rc)
                keep_error(&w, -EPIPE, "warm start: stopped (the run is stopping)");
            continue;
        }
        if (rc) { /* the ring failed: the kernel may still write where the reads in flight land */
            keep_error(&w, -EIO, "warm start: io_uring failed: %s", strerror(-rc));
            w.ring_failed = true;
            break;
        }
        bool done = complete(&w, e, res);
        if (w.ring_failed)
            break;
        if (done)
            retire(&w, e, w.io[e].got >= w.io[e].need);
        if (idle && !w.rc && idle(arg))
            keep_error(&w, -EPIPE, "warm start: stopped (the run is stopping)");
    }
    if (w.ring_failed) {
        /* Reads may still be in the kernel's hands (or queued in the ring
         * for a later call to send): their chunks' loads fail but their
         * slots stay referenced, so no batch gets memory a read may still
         * land in, and the staging is leaked (teardown) */
        for (unsigned i = 0; i < w.depth; i++)
            if (w.busy[i]) {
                finish(&w, &w.io[i], false, true);
                w.busy[i] = false;
            }
        w.inflight = 0;
    }
    /* chunks claimed and never started (an error came first) */
    for (; next < w.claimed; next++) {
        struct wchunk k = {.first = next * w.rows_per,
                           .n = (uint32_t)SL_MIN((uint64_t)w.rows_per, src->rows - next * w.rows_per),
                           .e0 = ent_first(&w, next),
                           .ne = (uint32_t)(ent_end(&w, next) - ent_first(&w, next)),
                           .piece = -1};
        finish(&w, &k, false, false);
    }
out:
    st->depth = w.peak;
    teardown(&w);
    st->total_ns = sl_now_ns() - t0;
    return w.rc;
}
