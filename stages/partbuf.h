/* partbuf.h - the partition buffer: whole partitions of a partitioned
 * layout (core/partition.h) in memory, state after state of an ordering
 * (core/partorder.h), loaded with large direct reads and prefetched while
 * the state before trains (issue 22; Marius §4.2, MariusGNN §3).
 *
 * Memory. frames = slots + spare frames of part_bytes each, in one
 * segment /sluice.<run>.<object> of kind SHM_KIND_RAW (or private
 * anonymous memory when no run id is given: tests, benchmarks); frame f
 * starts at f * part_bytes, 4096-aligned. The slots hold the current
 * state; the spare frames take the next state's new partitions while the
 * current one trains, so give at least the most partitions one state
 * loads (po_plan's group for comet, 1 for beta) to prefetch fully; with
 * fewer, the rest load at the switch, after the evictions.
 *
 * Protocol (one owner thread calls everything but the row look-ups; one
 * loader thread inside does the reads):
 *   partbuf_prefetch(s)  gives every partition of state s that is neither
 *                        in memory nor loading a free frame, if one is
 *                        left, and queues its read; returns at once.
 *   partbuf_switch(s)    evicts every partition not in state s (its frame
 *                        becomes free: nobody may read it any more),
 *                        queues what s still lacks, and blocks until all
 *                        of s is in memory. After it, partbuf_row answers
 *                        for every position of s's partitions until the
 *                        next switch.
 * The loader reads a partition as part_bytes / read_bytes requests of
 * read_bytes (the last shorter), depth of them in flight (io_uring;
 * pread(2) one at a time without it, or with SLUICE_NO_IO_URING=1),
 * straight into the frame; a short read continues where it stopped.
 * Frames being read are never given out, and a partition's frame is only
 * freed by a switch, after its read completed.
 *
 * Counting. loads counts partitions read, bytes and reads the requests
 * (so bytes / reads is the average request), wait_ns the time switches
 * blocked on the loader, read_ns the loader's busy time.
 *
 * Errors: 0 or -errno with a message naming the file: -EIO (a read
 * failed or the file ended early; every later call fails the same way),
 * -ENOMEM, -EINVAL (parameters). */
#ifndef SLUICE_STAGES_PARTBUF_H
#define SLUICE_STAGES_PARTBUF_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/partition.h"
#include "core/partorder.h"
#include "ipc/shm.h"

#define PARTBUF_READ_BYTES_DEFAULT (4u << 20)
#define PARTBUF_DEPTH_DEFAULT 4u

struct partbuf_params {
    const char *run_id;  /* segment of this run; NULL: private memory */
    const char *object;  /* its object name (default "partbuf") */
    uint32_t slots;      /* c */
    uint32_t spare;      /* frames for prefetching */
    unsigned depth;      /* reads in flight, 1..64; 0: default */
    size_t read_bytes;   /* bytes a request, a multiple of 4096; 0: default */
    bool buffered;       /* through the page cache instead of O_DIRECT */
};

struct partbuf_stats {
    uint64_t loads, bytes, reads;
    uint64_t wait_ns, read_ns;
};

enum { PARTBUF_ABSENT = 0, PARTBUF_LOADING, PARTBUF_RESIDENT };

struct partbuf {
    struct parts_meta pm;
    uint32_t frames, slots;
    size_t frame_bytes, read_bytes;
    unsigned depth;
    int fd;
    bool direct, uring;
    struct shm_seg seg;
    unsigned char *mem; /* (frames, frame_bytes) */
    bool anon;
    uint32_t *frame_part; /* (frames) partition in the frame, PO_EMPTY */
    uint32_t *part_frame; /* (parts) its frame, PO_EMPTY */
    uint8_t *state;       /* (parts) PARTBUF_*; under mu */
    /* the loader's queue of partitions, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t *queue; /* (parts) ring */
    uint32_t qhead, qlen;
    bool stop, started;
    int rc;
    char msg[512];
    pthread_t loader;
    struct partbuf_stats st;
    void *ring; /* struct io_uring, when uring */
    char path[4096];
};

/* Opens dir/features.bin of layout pm and makes the frames. 0 or -errno. */
int partbuf_init(struct partbuf *pb, const char *dir, const struct parts_meta *pm, const struct partbuf_params *pp,
                 char *err, size_t errlen);
/* Stops the loader (waiting for reads in flight), unmaps and unlinks the
 * segment. Accepts a zeroed or half-built buffer. */
void partbuf_free(struct partbuf *pb);

int partbuf_prefetch(struct partbuf *pb, const struct po_plan *pl, uint32_t s, char *err, size_t errlen);
int partbuf_switch(struct partbuf *pb, const struct po_plan *pl, uint32_t s, char *err, size_t errlen);

/* The row of position pos when its partition is in memory (after the
 * switch that brought it), else NULL. */
static inline const unsigned char *partbuf_row(const struct partbuf *pb, uint64_t pos)
{
    uint64_t q = pos / pb->pm.part_nodes;
    uint32_t f = q < pb->pm.parts ? pb->part_frame[q] : PO_EMPTY;
    if (f == PO_EMPTY || pb->state[q] != PARTBUF_RESIDENT)
        return NULL;
    return pb->mem + (size_t)f * pb->frame_bytes + (size_t)(pos % pb->pm.part_nodes) * pb->pm.row_stride;
}

/* A copy of the counters (under the lock). */
void partbuf_stats(struct partbuf *pb, struct partbuf_stats *out);

#endif
