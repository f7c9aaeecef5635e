/* embbuf.h - a partition buffer with write-back: whole partitions of a
 * file of p equal slots in memory, state after state of an ordering
 * (core/partorder.h), read with large direct reads, and written back with
 * large direct writes when they leave the buffer (issue 23: Marius's
 * node-embedding partitions, which training changes; Marius §4.2).
 *
 * Why not stages/partbuf.h. partbuf's contract is read-only: a switch
 * frees an evicted partition's frame at once ("nobody may read it any
 * more"), its file is a layout's features.bin opened O_RDONLY, and its
 * loader knows only reads. Write-back changes all three: an evicted frame
 * must stay untouched until its bytes are on disk, a partition read again
 * must not overtake its own write-back, and the file is the run's own.
 * So this is a sibling with one ordered queue of reads and writes; the
 * shape of the protocol (prefetch, switch, slots and spare frames) is
 * partbuf's.
 *
 * The file. parts slots of part_bytes each (a multiple of 4096), slot q
 * at q * part_bytes; what a slot holds is the caller's (stages/linkooc.h
 * keeps a partition's embeddings and Adagrad sums there). Frame f of the
 * buffer holds one slot, at f * part_bytes of private anonymous memory.
 *
 * Protocol (one owner thread calls everything; one I/O thread inside does
 * the reads and writes in the order they were queued):
 *   embbuf_prefetch(s)  gives every partition of state s that is neither
 *                       in memory nor loading a free frame, if one is
 *                       left, and queues its read; returns at once.
 *   embbuf_switch(s)    evicts every partition not in state s: a dirty
 *                       one's write-back is queued from its frame, and the
 *                       frame is free for a read queued after it (the
 *                       queue's order makes the read wait for the write);
 *                       then queues what s lacks and blocks until all of s
 *                       is in memory. Every partition of s is then dirty:
 *                       the owner may change its bytes (embbuf_frame)
 *                       until the next switch or flush.
 *   embbuf_flush()      queues the write-back of every dirty partition,
 *                       waits until the queue is empty (every write done),
 *                       and leaves them in memory, clean: the file then
 *                       holds the whole table (a checkpoint reads it).
 * A partition read again after its eviction is read after its write-back
 * finished (one queue, in order), so it comes back with its last bytes.
 * The I/O thread cuts each partition into io_bytes requests (the last
 * shorter), depth of them in flight (io_uring; pread/pwrite one at a time
 * without it or with SLUICE_NO_IO_URING=1); short transfers continue
 * where they stopped.
 *
 * Counting: loads and writes (partitions), bytes_read and bytes_written,
 * requests, wait_ns (switches and flushes blocked), io_ns (the I/O
 * thread's busy time).
 *
 * Faults (tests): SLUICE_FAULT_KILL_WRITEBACK=N raises SIGKILL in the
 * process when half of its N-th write-back (counted from 1) is written.
 *
 * Errors: 0 or -errno with a message naming the file: -EIO (a transfer
 * failed or the file ended early: every later call fails the same way),
 * -ENOMEM, -EINVAL (parameters or a plan that does not fit). */
#ifndef SLUICE_STAGES_EMBBUF_H
#define SLUICE_STAGES_EMBBUF_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/partorder.h"

#define EMBBUF_IO_BYTES_DEFAULT (4u << 20)
#define EMBBUF_DEPTH_DEFAULT 4u

struct embbuf_params {
    uint32_t parts;    /* p: slots of the file */
    size_t part_bytes; /* bytes a slot, a multiple of 4096 */
    uint32_t slots;    /* c: partitions a state holds, 1..p */
    uint32_t spare;    /* frames beyond c, for prefetching (1 prefetches BETA fully) */
    unsigned depth;    /* requests in flight, 1..64; 0: default */
    size_t io_bytes;   /* bytes a request, a multiple of 4096; 0: default */
    bool buffered;     /* through the page cache instead of O_DIRECT */
};

struct embbuf_stats {
    uint64_t loads, writes;
    uint64_t bytes_read, bytes_written, requests;
    uint64_t wait_ns, io_ns;
};

struct embbuf_op {
    uint32_t part, frame;
    bool write;
};

struct embbuf {
    uint32_t parts, frames, slots;
    size_t part_bytes, io_bytes;
    unsigned depth;
    int fd;
    bool direct, uring;
    unsigned char *mem;   /* (frames, part_bytes) */
    uint32_t *frame_part; /* (frames) the partition the frame holds or is loading, PO_EMPTY */
    uint32_t *part_frame; /* (parts) its frame, PO_EMPTY */
    uint8_t *state;       /* (parts) EMBBUF_*; under mu */
    uint8_t *dirty;       /* (parts) owner only */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct embbuf_op *queue; /* ring of qcap ops, under mu */
    uint32_t qhead, qlen, qcap;
    bool busy; /* the I/O thread is doing an op it took off the queue */
    bool stop, started;
    int rc;
    char msg[512];
    pthread_t io;
    struct embbuf_stats st;
    uint64_t kill_at, writes_begun; /* SLUICE_FAULT_KILL_WRITEBACK */
    void *ring;                     /* struct io_uring, when uring */
    char path[4096];
};

enum { EMBBUF_ABSENT = 0, EMBBUF_LOADING, EMBBUF_RESIDENT };

/* Opens path (which must hold parts * part_bytes bytes) for reading and
 * writing and makes the frames. 0 or -errno. */
int embbuf_init(struct embbuf *b, const char *path, const struct embbuf_params *pp, char *err, size_t errlen);
/* Finishes the queued I/O (writes included), stops the thread, unmaps.
 * Does not flush: dirty partitions not written back are lost (the caller
 * flushes what it wants kept). Accepts a zeroed or half-built buffer. */
void embbuf_free(struct embbuf *b);

int embbuf_prefetch(struct embbuf *b, const struct po_plan *pl, uint32_t s, char *err, size_t errlen);
int embbuf_switch(struct embbuf *b, const struct po_plan *pl, uint32_t s, char *err, size_t errlen);
int embbuf_flush(struct embbuf *b, char *err, size_t errlen);

/* The bytes of partition q in memory (after the switch that brought it),
 * else NULL. Owner thread only. */
static inline unsigned char *embbuf_frame(const struct embbuf *b, uint32_t q)
{
    uint32_t f = q < b->parts ? b->part_frame[q] : PO_EMPTY;
    if (f == PO_EMPTY || __atomic_load_n(&b->state[q], __ATOMIC_ACQUIRE) != EMBBUF_RESIDENT)
        return NULL;
    return b->mem + (size_t)f * b->part_bytes;
}

/* A copy of the counters (under the lock). */
void embbuf_stats(struct embbuf *b, struct embbuf_stats *out);

#endif
