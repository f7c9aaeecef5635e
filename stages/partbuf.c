/* partbuf.c - the partition buffer (protocol: partbuf.h).
 *
 * Ownership. The owner thread assigns frames (part_frame, frame_part) and
 * evicts; the loader thread only reads into frames it was queued and
 * flips their partitions LOADING -> RESIDENT (atomic stores, release)
 * under mu, broadcasting cv. The owner waits on cv for its state. */
#include "stages/partbuf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/util.h"
#include "stages/extent_io.h"


#define DEPTH_MAX EXTENT_IO_DEPTH_MAX

static void set_state(struct partbuf *pb, uint32_t q, uint8_t s)
{
    __atomic_store_n(&pb->state[q], s, __ATOMIC_RELEASE);
}

static uint8_t get_state(const struct partbuf *pb, uint32_t q)
{
    return __atomic_load_n(&pb->state[q], __ATOMIC_ACQUIRE);
}

/* ---- the loader ---- */

/* Reads one partition into its frame, depth requests in flight.
 * 0 or -errno (message in pb->msg). */
static int load_one(struct partbuf *pb, uint32_t q, uint32_t f)
{
    const struct extent_io x = {.fd = pb->fd,
                                .path = pb->path,
                                .ring = pb->ring, /* NULL without io_uring */
                                .req_bytes = pb->read_bytes,
                                .direct = pb->direct,
                                .depth = pb->depth};
    uint64_t bytes = 0, reads = 0;
    int rc = extent_io_move(&x, false, q, pb->mem + (size_t)f * pb->frame_bytes, (uint64_t)q * pb->pm.part_bytes,
                            pb->pm.part_bytes, &bytes, &reads, pb->msg, sizeof pb->msg);
    pthread_mutex_lock(&pb->mu);
    pb->st.bytes += bytes;
    pb->st.reads += reads;
    pthread_mutex_unlock(&pb->mu);
    return rc;
}

static void *loader_main(void *arg)
{
    struct partbuf *pb = arg;
    pthread_mutex_lock(&pb->mu);
    for (;;) {
        while (!pb->stop && pb->qlen == 0)
            pthread_cond_wait(&pb->cv, &pb->mu);
        if (pb->stop)
            break;
        uint32_t q = pb->queue[pb->qhead];
        pb->qhead = (pb->qhead + 1) % pb->pm.parts;
        pb->qlen--;
        uint32_t f = pb->part_frame[q]; /* assigned before it was queued; fixed while LOADING */
        pthread_mutex_unlock(&pb->mu);
        uint64_t t0 = sl_now_ns();
        int rc = pb->rc ? pb->rc : load_one(pb, q, f);
        uint64_t dt = sl_now_ns() - t0;
        pthread_mutex_lock(&pb->mu);
        pb->st.read_ns += dt;
        if (rc < 0 && pb->rc == 0)
            pb->rc = rc;
        if (rc == 0) {
            set_state(pb, q, PARTBUF_RESIDENT);
            pb->st.loads++;
        }
        pthread_cond_broadcast(&pb->cv);
    }
    pthread_mutex_unlock(&pb->mu);
    return NULL;
}

/* ---- setup ---- */

int partbuf_init(struct partbuf *pb, const char *dir, const struct parts_meta *pm, const struct partbuf_params *pp,
                 char *err, size_t errlen)
{
    memset(pb, 0, sizeof *pb);
    pb->fd = -1;
    pb->pm = *pm;
    uint32_t p = pm->parts;
    if (pp->slots < 1 || pp->slots > p)
        return sl_errf(err, errlen, -EINVAL, "buffer_partitions = %" PRIu32 " must be in 1..%" PRIu32 " (the partitions)",
                       pp->slots, p);
    pb->slots = pp->slots;
    pb->frames = SL_MIN(p, pp->slots + pp->spare);
    pb->frame_bytes = pm->part_bytes;
    pb->depth = pp->depth ? pp->depth : PARTBUF_DEPTH_DEFAULT;
    pb->read_bytes = pp->read_bytes ? pp->read_bytes : PARTBUF_READ_BYTES_DEFAULT;
    if (pb->depth > DEPTH_MAX || pb->read_bytes % PARTS_ALIGN || pb->read_bytes > (1u << 30))
        return sl_errf(err, errlen, -EINVAL, "partition buffer: depth 1..%u and a read size that is a multiple of 4096",
                       DEPTH_MAX);
    int rc = -ENOMEM;
    pb->frame_part = malloc(pb->frames * sizeof *pb->frame_part);
    pb->part_frame = malloc(p * sizeof *pb->part_frame);
    pb->state = calloc(p, 1);
    pb->queue = malloc(p * sizeof *pb->queue);
    if (!pb->frame_part || !pb->part_frame || !pb->state || !pb->queue) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
        goto fail;
    }
    for (uint32_t f = 0; f < pb->frames; f++)
        pb->frame_part[f] = PO_EMPTY;
    for (uint32_t q = 0; q < p; q++)
        pb->part_frame[q] = PO_EMPTY;
    size_t bytes = (size_t)pb->frames * pb->frame_bytes;
    if (pp->run_id) {
        rc = shm_seg_create(&pb->seg, pp->run_id, pp->object ? pp->object : "partbuf", SHM_KIND_RAW, bytes, err, errlen);
        if (rc < 0)
            goto fail;
        pb->mem = pb->seg.data;
    } else {
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            rc = sl_errf(err, errlen, -errno, "partition buffer: cannot map %zu bytes: %s", bytes, strerror(errno));
            goto fail;
        }
        pb->mem = m;
        pb->anon = true;
    }
    if ((rc = sl_path_join(pb->path, sizeof pb->path, dir, parts_file_name[PARTS_FEATURES])) < 0) {
        sl_errf(err, errlen, rc, "%s: path too long", dir);
        goto fail;
    }
    pb->direct = !pp->buffered;
    char what[96];
    snprintf(what, sizeof what, "%" PRIu32 " partitions of %" PRIu64 " bytes", pb->pm.parts, pb->pm.part_bytes);
    pb->fd = extent_io_open(pb->path, false, pb->direct, (uint64_t)pb->pm.parts * pb->pm.part_bytes, what,
                            "make the layout again with gnnprep partition", err, errlen);
    if (pb->fd < 0) {
        rc = pb->fd;
        pb->fd = -1;
        goto fail;
    }
    pb->ring = extent_io_ring_new(2 * pb->depth);
    pb->uring = pb->ring != NULL;
    pthread_mutex_init(&pb->mu, NULL);
    pthread_cond_init(&pb->cv, NULL);
    if ((rc = -pthread_create(&pb->loader, NULL, loader_main, pb)) < 0) {
        pthread_mutex_destroy(&pb->mu);
        pthread_cond_destroy(&pb->cv);
        sl_errf(err, errlen, rc, "partition buffer: cannot start the loader thread");
        goto fail;
    }
    pb->started = true;
    return 0;
fail:
    partbuf_free(pb);
    return rc;
}

void partbuf_free(struct partbuf *pb)
{
    if (!pb)
        return;
    if (pb->started) {
        pthread_mutex_lock(&pb->mu);
        pb->stop = true;
        pthread_cond_broadcast(&pb->cv);
        pthread_mutex_unlock(&pb->mu);
        pthread_join(pb->loader, NULL); /* a partition being read finishes first */
        pthread_mutex_destroy(&pb->mu);
        pthread_cond_destroy(&pb->cv);
    }
    extent_io_ring_free(pb->ring);
    if (pb->fd >= 0)
        close(pb->fd);
    if (pb->anon && pb->mem)
        munmap(pb->mem, (size_t)pb->frames * pb->frame_bytes);
    if (pb->seg.hdr) {
        char name[SHM_NAME_MAX];
        snprintf(name, sizeof name, "%s", pb->seg.name);
        shm_seg_detach(&pb->seg);
        shm_seg_unlink(name);
    }
    free(pb->frame_part);
    free(pb->part_frame);
    free(pb->state);
    free(pb->queue);
    memset(pb, 0, sizeof *pb);
    pb->fd = -1;
}

/* ---- the owner's side ---- */

static bool in_state(const struct po_plan *pl, uint32_t s, uint32_t q)
{
    for (uint32_t j = 0; j < pl->slots; j++)
        if (po_slot(pl, s, j) == q)
            return true;
    return false;
}

/* Gives q a free frame and queues it; false when no frame is free. Under mu. */
static bool queue_part(struct partbuf *pb, uint32_t q)
{
    uint32_t f = 0;
    while (f < pb->frames && pb->frame_part[f] != PO_EMPTY)
        f++;
    if (f == pb->frames)
        return false;
    pb->frame_part[f] = q;
    pb->part_frame[q] = f;
    set_state(pb, q, PARTBUF_LOADING);
    pb->queue[(pb->qhead + pb->qlen) % pb->pm.parts] = q;
    pb->qlen++;
    pthread_cond_broadcast(&pb->cv);
    return true;
}

static int check_state(const struct partbuf *pb, const struct po_plan *pl, uint32_t s, char *err, size_t errlen)
{
    if (s >= pl->states || pl->parts != pb->pm.parts || pl->slots > pb->slots)
        return sl_errf(err, errlen, -EINVAL,
                       "partition buffer: state %" PRIu32 " of a plan of %" PRIu32 " partitions and %" PRIu32
                       " slots does not fit a buffer of %" PRIu32 " partitions and %" PRIu32 " slots",
                       s, pl->parts, pl->slots, pb->pm.parts, pb->slots);
    return 0;
}

int partbuf_prefetch(struct partbuf *pb, const struct po_plan *pl, uint32_t s, char *err, size_t errlen)
{
    int rc = check_state(pb, pl, s, err, errlen);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&pb->mu);
    rc = pb->rc;
    for (uint32_t j = 0; rc == 0 && j < pl->slots; j++) {
        uint32_t q = po_slot(pl, s, j);
        if (q != PO_EMPTY && get_state(pb, q) == PARTBUF_ABSENT && !queue_part(pb, q))
            break; /* no spare frame left: the rest loads at the switch */
    }
    if (rc < 0)
        sl_errf(err, errlen, rc, "%s", pb->msg);
    pthread_mutex_unlock(&pb->mu);
    return rc;
}

int partbuf_switch(struct partbuf *pb, const struct po_plan *pl, uint32_t s, char *err, size_t errlen)
{
    int rc = check_state(pb, pl, s, err, errlen);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&pb->mu);
    /* evict what s does not hold; a partition still LOADING (a prefetch
     * for a state that never came) keeps its frame until it lands */
    for (uint32_t f = 0; f < pb->frames; f++) {
        uint32_t q = pb->frame_part[f];
        if (q == PO_EMPTY || in_state(pl, s, q) || get_state(pb, q) != PARTBUF_RESIDENT)
            continue;
        pb->frame_part[f] = PO_EMPTY;
        pb->part_frame[q] = PO_EMPTY;
        set_state(pb, q, PARTBUF_ABSENT);
    }
    uint64_t t0 = sl_now_ns();
    for (;;) {
        if ((rc = pb->rc) < 0)
            break;
        bool all = true;
        for (uint32_t j = 0; j < pl->slots; j++) {
            uint32_t q = po_slot(pl, s, j);
            if (q == PO_EMPTY)
                continue;
            uint8_t st = get_state(pb, q);
            if (st == PARTBUF_ABSENT)
                queue_part(pb, q); /* no frame free: stale prefetches hold them until they land; retried below */
            all &= st == PARTBUF_RESIDENT;
        }
        if (all)
            break;
        pthread_cond_wait(&pb->cv, &pb->mu);
        /* stale prefetches that landed meanwhile: evict them now */
        for (uint32_t f = 0; f < pb->frames; f++) {
            uint32_t q = pb->frame_part[f];
            if (q != PO_EMPTY && !in_state(pl, s, q) && get_state(pb, q) == PARTBUF_RESIDENT) {
                pb->frame_part[f] = PO_EMPTY;
                pb->part_frame[q] = PO_EMPTY;
                set_state(pb, q, PARTBUF_ABSENT);
            }
        }
    }
    pb->st.wait_ns += sl_now_ns() - t0;
    if (rc < 0)
        sl_errf(err, errlen, rc, "%s", pb->msg);
    pthread_mutex_unlock(&pb->mu);
    return rc;
}

void partbuf_stats(struct partbuf *pb, struct partbuf_stats *out)
{
    pthread_mutex_lock(&pb->mu);
    *out = pb->st;
    pthread_mutex_unlock(&pb->mu);
}
