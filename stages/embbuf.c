/* embbuf.c - the partition buffer with write-back (protocol: embbuf.h).
 *
 * Ownership. The owner thread assigns frames (part_frame, frame_part),
 * evicts and queues; the I/O thread takes ops off the queue in order,
 * transfers between frame and file, and for a read flips the partition
 * LOADING -> RESIDENT (atomic store, release) under mu, broadcasting cv.
 * A frame whose write-back is queued is free for the owner to hand to a
 * read queued later: the queue's order keeps the read behind the write. */
#include "stages/embbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/util.h"
#include "stages/extent_io.h"


#define DEPTH_MAX EXTENT_IO_DEPTH_MAX

static void set_state(struct embbuf *b, uint32_t q, uint8_t s) { __atomic_store_n(&b->state[q], s, __ATOMIC_RELEASE); }
static uint8_t get_state(const struct embbuf *b, uint32_t q) { return __atomic_load_n(&b->state[q], __ATOMIC_ACQUIRE); }

/* ---- the I/O thread ---- */

static void maybe_die(struct embbuf *b, bool write, uint64_t done, size_t total)
{
    if (write && b->kill_at && b->writes_begun == b->kill_at && done >= total / 2)
        raise(SIGKILL);
}

static void kill_hook(void *arg, uint64_t done, size_t total)
{
    struct embbuf *b = arg;
    maybe_die(b, true, done, total);
}

/* Moves partition q between frame f and its slot. 0 or -errno (message in b->msg). */
static int transfer(struct embbuf *b, uint32_t q, uint32_t f, bool write)
{
    if (write)
        b->writes_begun++;
    const struct extent_io x = {.fd = b->fd,
                                .path = b->path,
                                .ring = b->ring, /* NULL without io_uring */
                                .req_bytes = b->io_bytes,
                                .direct = b->direct,
                                .depth = b->depth,
                                .progress = write ? kill_hook : NULL,
                                .arg = b};
    uint64_t bytes = 0, reqs = 0;
    int rc = extent_io_move(&x, write, q, b->mem + (size_t)f * b->part_bytes, (uint64_t)q * b->part_bytes,
                            b->part_bytes, &bytes, &reqs, b->msg, sizeof b->msg);
    pthread_mutex_lock(&b->mu);
    if (write)
        b->st.bytes_written += bytes;
    else
        b->st.bytes_read += bytes;
    b->st.requests += reqs;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

static void *io_main(void *arg)
{
    struct embbuf *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->stop && b->qlen == 0)
            pthread_cond_wait(&b->cv, &b->mu);
        if (b->qlen == 0) /* stopping, and nothing left: queued writes finish first */
            break;
        struct embbuf_op op = b->queue[b->qhead];
        b->qhead = (b->qhead + 1) % b->qcap;
        b->qlen--;
        b->busy = true;
        pthread_mutex_unlock(&b->mu);
        uint64_t t0 = sl_now_ns();
        int rc = b->rc ? b->rc : transfer(b, op.part, op.frame, op.write);
        uint64_t dt = sl_now_ns() - t0;
        pthread_mutex_lock(&b->mu);
        b->busy = false;
        b->st.io_ns += dt;
        if (rc < 0 && b->rc == 0)
            b->rc = rc;
        if (rc == 0 && op.write)
            b->st.writes++;
        if (rc == 0 && !op.write) {
            set_state(b, op.part, EMBBUF_RESIDENT);
            b->st.loads++;
        }
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* ---- setup ---- */

int embbuf_init(struct embbuf *b, const char *path, const struct embbuf_params *pp, char *err, size_t errlen)
{
    memset(b, 0, sizeof *b);
    b->fd = -1;
    const uint32_t p = pp->parts;
    if (p < 1 || pp->slots < 1 || pp->slots > p)
        return sl_errf(err, errlen, -EINVAL, "embedding buffer: %" PRIu32 " slots must be in 1..%" PRIu32
                       " (the partitions)", pp->slots, p);
    if (!pp->part_bytes || pp->part_bytes % 4096)
        return sl_errf(err, errlen, -EINVAL, "embedding buffer: a partition of %zu bytes is not a multiple of 4096",
                       pp->part_bytes);
    b->parts = p;
    b->slots = pp->slots;
    b->frames = SL_MIN(p, pp->slots + pp->spare);
    b->part_bytes = pp->part_bytes;
    b->depth = pp->depth ? pp->depth : EMBBUF_DEPTH_DEFAULT;
    b->io_bytes = pp->io_bytes ? pp->io_bytes : EMBBUF_IO_BYTES_DEFAULT;
    if (b->depth > DEPTH_MAX || b->io_bytes % 4096 || b->io_bytes > (1u << 30))
        return sl_errf(err, errlen, -EINVAL, "embedding buffer: depth 1..%u and a request size that is a multiple of "
                       "4096", DEPTH_MAX);
    if (snprintf(b->path, sizeof b->path, "%s", path) >= (int)sizeof b->path)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", path);
    int rc = -ENOMEM;
    b->qcap = 2 * b->frames + 2;
    b->frame_part = malloc(b->frames * sizeof *b->frame_part);
    b->part_frame = malloc(p * sizeof *b->part_frame);
    b->state = calloc(p, 1);
    b->dirty = calloc(p, 1);
    b->queue = malloc(b->qcap * sizeof *b->queue);
    if (!b->frame_part || !b->part_frame || !b->state || !b->dirty || !b->queue) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t f = 0; f < b->frames; f++)
        b->frame_part[f] = PO_EMPTY;
    for (uint32_t q = 0; q < p; q++)
        b->part_frame[q] = PO_EMPTY;
    size_t bytes = (size_t)b->frames * b->part_bytes;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        char h[32];
        rc = sl_errf(err, errlen, -errno, "embedding buffer: cannot map %s for %" PRIu32 " frames: %s",
                     sl_fmt_bytes(bytes, h, sizeof h), b->frames, strerror(errno));
        goto fail;
    }
    b->mem = m;
    b->direct = !pp->buffered;
    char what[96];
    snprintf(what, sizeof what, "%" PRIu32 " partitions of %zu", p, b->part_bytes);
    b->fd = extent_io_open(path, true, b->direct, (uint64_t)p * b->part_bytes, what, NULL, err, errlen);
    if (b->fd < 0) {
        rc = b->fd;
        b->fd = -1;
        goto fail;
    }
    const char *k = getenv("SLUICE_FAULT_KILL_WRITEBACK");
    if (k && *k)
        b->kill_at = strtoull(k, NULL, 10);
    b->ring = extent_io_ring_new(2 * b->depth);
    b->uring = b->ring != NULL;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    if ((rc = -pthread_create(&b->io, NULL, io_main, b)) < 0) {
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->cv);
        sl_errf(err, errlen, rc, "embedding buffer: cannot start the I/O thread");
        goto fail;
    }
    b->started = true;
    return 0;
fail:
    embbuf_free(b);
    return rc;
}

void embbuf_free(struct embbuf *b)
{
    if (!b)
        return;
    if (b->started) {
        pthread_mutex_lock(&b->mu);
        b->stop = true;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        pthread_join(b->io, NULL); /* what is queued finishes first */
        pthread_mutex_destroy(&b->mu);
        pthread_cond_destroy(&b->cv);
    }
    extent_io_ring_free(b->ring);
    if (b->fd >= 0)
        close(b->fd);
    if (b->mem)
        munmap(b->mem, (size_t)b->frames * b->part_bytes);
    free(b->frame_part);
    free(b->part_frame);
    free(b->state);
    free(b->dirty);
    free(b->queue);
    memset(b, 0, sizeof *b);
    b->fd = -1;
}

/* ---- the owner's side ---- */

static bool in_state(const struct po_plan *pl, uint32_t s, uint32_t q)
{
    for (uint32_t j = 0; j < pl->slots; j++)
        if (po_slot(pl, s, j) == q)
            return true;
    return false;
}

/* Under mu. */
static void enqueue(struct embbuf *b, uint32_t q, uint32_t f, bool write)
{
    b->queue[(b->qhead + b->qlen) % b->qcap] = (struct embbuf_op){q, f, write};
    b->qlen++;
    pthread_cond_broadcast(&b->cv);
}

/* Gives q a free frame and queues its read; false when none is free. Under mu. */
static bool queue_read(struct embbuf *b, uint32_t q)
{
    uint32_t f = 0;
    while (f < b->frames && b->frame_part[f] != PO_EMPTY)
        f++;
    if (f == b->frames)
        return false;
    b->frame_part[f] = q;
    b->part_frame[q] = f;
    set_state(b, q, EMBBUF_LOADING);
    enqueue(b, q, f, false);
    return true;
}

/* Takes resident q out of its frame, queueing its write-back when dirty. Under mu. */
static void evict(struct embbuf *b, uint32_t q)
{
    uint32_t f = b->part_frame[q];
    if (b->dirty[q])
        enqueue(b, q, f, true);
    b->dirty[q] = 0;
    b->frame_part[f] = PO_EMPTY;
    b->part_frame[q] = PO_EMPTY;
    set_state(b, q, EMBBUF_ABSENT);
}

static int check_state(const struct embbuf *b, const struct po_plan *pl, uint32_t s, char *err, size_t errlen)
{
    if (s >= pl->states || pl->parts != b->parts || pl->slots > b->slots)
        return sl_errf(err, errlen, -EINVAL,
                       "embedding buffer: state %" PRIu32 " of a plan of %" PRIu32 " partitions and %" PRIu32
                       " slots does not fit a buffer of %" PRIu32 " partitions and %" PRIu32 " slots",
                       s, pl->parts, pl->slots, b->parts, b->slots);
    return 0;
}

int embbuf_prefetch(struct embbuf *b, const struct po_plan *pl, uint32_t s, char *err, size_t errlen)
{
    int rc = check_state(b, pl, s, err, errlen);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&b->mu);
    rc = b->rc;
    for (uint32_t j = 0; rc == 0 && j < pl->slots; j++) {
        uint32_t q = po_slot(pl, s, j);
        if (q != PO_EMPTY && get_state(b, q) == EMBBUF_ABSENT && !queue_read(b, q))
            break; /* no spare frame left: the rest loads at the switch */
    }
    if (rc < 0)
        sl_errf(err, errlen, rc, "%s", b->msg);
    pthread_mutex_unlock(&b->mu);
    return rc;
}

int embbuf_switch(struct embbuf *b, const struct po_plan *pl, uint32_t s, char *err, size_t errlen)
{
    int rc = check_state(b, pl, s, err, errlen);
    if (rc < 0)
        return rc;
    uint64_t t0 = sl_now_ns();
    pthread_mutex_lock(&b->mu);
    for (;;) {
        /* evict what s does not hold (a stale prefetch still LOADING keeps
         * its frame until it lands, and is evicted on a later pass) */
        for (uint32_t f = 0; f < b->frames; f++) {
            uint32_t q = b->frame_part[f];
            if (q != PO_EMPTY && !in_state(pl, s, q) && get_state(b, q) == EMBBUF_RESIDENT)
                evict(b, q);
        }
        if ((rc = b->rc) < 0)
            break;
        bool all = true;
        for (uint32_t j = 0; j < pl->slots; j++) {
            uint32_t q = po_slot(pl, s, j);
            if (q == PO_EMPTY)
                continue;
            uint8_t st = get_state(b, q);
            if (st == EMBBUF_ABSENT)
                queue_read(b, q); /* no frame free: retried when a stale prefetch lands */
            all &= st == EMBBUF_RESIDENT;
        }
        if (all)
            break;
        pthread_cond_wait(&b->cv, &b->mu);
    }
    b->st.wait_ns += sl_now_ns() - t0;
    if (rc < 0)
        sl_errf(err, errlen, rc, "%s", b->msg);
    pthread_mutex_unlock(&b->mu);
    if (rc == 0)
        for (uint32_t j = 0; j < pl->slots; j++)
            if (po_slot(pl, s, j) != PO_EMPTY)
                b->dirty[po_slot(pl, s, j)] = 1;
    return rc;
}

int embbuf_flush(struct embbuf *b, char *err, size_t errlen)
{
    uint64_t t0 = sl_now_ns();
    pthread_mutex_lock(&b->mu);
    for (uint32_t f = 0; f < b->frames; f++) {
        uint32_t q = b->frame_part[f];
        if (q != PO_EMPTY && b->dirty[q] && get_state(b, q) == EMBBUF_RESIDENT) {
            enqueue(b, q, f, true);
            b->dirty[q] = 0;
        }
    }
    while (b->rc == 0 && (b->qlen > 0 || b->busy))
        pthread_cond_wait(&b->cv, &b->mu);
    int rc = b->rc;
    b->st.wait_ns += sl_now_ns() - t0;
    if (rc < 0)
        sl_errf(err, errlen, rc, "%s", b->msg);
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void embbuf_stats(struct embbuf *b, struct embbuf_stats *out)
{
    pthread_mutex_lock(&b->mu);
    *out = b->st;
    pthread_mutex_unlock(&b->mu);
}
