/* metrics.h - the metrics page: one cache-line-aligned block of counters
 * per process of a run, in shared memory (DESIGN.md sections 3 and 7).
 *
 * Protocol. The launcher creates the page with one block per process it
 * will spawn and tells each child its block index. The child claims the
 * block (metrics_claim: pid, name, rank, state) and from then on its threads
 * add to the counters with relaxed atomic adds - each counter is exact and
 * never goes backwards, but a reader may see one counter updated before
 * another (no cross-counter consistency; rates computed from two snapshots
 * are what the readers use). The heartbeat is the CLOCK_MONOTONIC time of
 * the owner's last metrics_heartbeat() (system-wide clock, so the launcher
 * can compare it with its own). Readers (launcher, gnnstat) only load; they
 * may attach read-only. Block identity (name, rank) is written before the
 * state leaves METRICS_FREE (release), and readers load the state with
 * acquire before reading the identity; a block is claimed once per run.
 * Memory belongs to the launcher, which unlinks the segment.
 *
 * Errors: 0 or -errno with a message in `err` (may be NULL). */
#ifndef SLUICE_IPC_METRICS_H
#define SLUICE_IPC_METRICS_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/shm.h"

#define METRICS_MAGIC 0x3152544d434c53ull /* "SLCMTR1\0" little endian */
#define METRICS_VERSION 1u
#define METRICS_NAME_MAX 48
#define METRICS_BLOCKS_MAX 65536u

enum metrics_state {
    METRICS_FREE = 0,    /* not claimed yet */
    METRICS_RUNNING = 1, /* claimed by a live process */
    METRICS_DONE = 2,    /* its process finished cleanly */
    METRICS_FAILED = 3,  /* its process reported a failure */
};

/* One process's counters: line 0 is written by the owner all the time,
 * line 1 once at claim time. */
struct metrics_block {
    alignas(64) _Atomic uint64_t busy_ns; /* time doing work */
    _Atomic uint64_t wait_ns;             /* time blocked on queues */
    _Atomic uint64_t items;               /* batches, rows, ... (stage-defined unit) */
    _Atomic uint64_t bytes;               /* bytes moved (read from disk, copied) */
    _Atomic uint64_t io_ops;              /* I/O requests completed */
    _Atomic uint64_t errors;              /* errors seen (retried or not) */
    _Atomic uint64_t heartbeat_ns;        /* CLOCK_MONOTONIC at the last heartbeat */
    _Atomic int32_t pid;                  /* owner; 0 while free */
    _Atomic uint32_t state;               /* enum metrics_state */

    alignas(64) char name[METRICS_NAME_MAX]; /* e.g. "extractor" */
    int32_t rank;
    _Atomic uint32_t loss_bits; /* trainer: the float bits of the running mean training loss of the epoch under way (0: none yet) */
    _Atomic uint64_t busy_open; /* busy periods under way: count << 56 | sum of their starts in microseconds */
};

_Static_assert(sizeof(struct metrics_block) == 128, "a block is two cache lines");

/* A plain copy of one block, as a reader sees it. */
struct metrics_snapshot {
    uint64_t busy_ns, wait_ns, items, bytes, io_ops, errors, heartbeat_ns;
    int32_t pid;
    uint32_t state;
    int32_t rank;
    char name[METRICS_NAME_MAX];
};

struct metrics_page_hdr; /* in shared memory; private to metrics.c */

struct metrics_page {
    struct metrics_page_hdr *hdr;
    struct metrics_block *blocks; /* (nblocks) */
    uint32_t nblocks;
    struct shm_seg seg; /* the mapping, when created or attached by name */
};

/* Bytes a page of nblocks blocks needs (0 if nblocks is 0 or too large). */
size_t metrics_mem_size(uint32_t nblocks);

/* Lays out an empty page in len bytes of 64-byte aligned memory. */
int metrics_mem_format(void *mem, size_t len, uint32_t nblocks, char *err, size_t errlen);

/* Binds p to a formatted page in mem (checked): 0 or -EINVAL. */
int metrics_init(struct metrics_page *p, void *mem, size_t len, char *err, size_t errlen);

/* Creates the segment /sluice.<run_id>.<object> holding an empty page. */
int metrics_create(struct metrics_page *p, const char *run_id, const char *object, uint32_t nblocks, char *err,
                   size_t errlen);

/* Attaches to a page by name; flags as shm_seg_attach (SHM_RDONLY for
 * readers that must not write). */
int metrics_attach(struct metrics_page *p, const char *name, unsigned flags, char *err, size_t errlen);

/* Unmaps (never unlinks). Accepts NULL and zeroed pages. */
void metrics_free(struct metrics_page *p);

/* Block i of the page, or NULL when i is out of range. */
struct metrics_block *metrics_block(const struct metrics_page *p, uint32_t i);

/* Claims a free block for the calling process: records pid, name (cut to
 * METRICS_NAME_MAX-1 bytes) and rank, sets state RUNNING and a first
 * heartbeat. -EBUSY if another process holds it (its pid in err). */
int metrics_claim(struct metrics_block *b, const char *name, int32_t rank, char *err, size_t errlen);

/* Adds v to one counter of a block, e.g. metrics_add(&b->items, 1).
 * Safe from any thread; never blocks. */
static inline void metrics_add(_Atomic uint64_t *counter, uint64_t v)
{
    atomic_fetch_add_explicit(counter, v, memory_order_relaxed);
}

/* Busy periods that readers see as they go (metrics_busy_now) rather
 * than when they end: a thread calls metrics_busy_begin(b, t0) when it
 * starts a piece of work at CLOCK_MONOTONIC t0 (sl_now_ns) and
 * metrics_busy_end(b, t0, busy) when it ends, which adds busy to busy_ns.
 * Any number of threads of a block may do so at once (up to 255 periods
 * under way). A long batch then shows up in every interval it spans
 * instead of all in the one where it ended (a one-thread stage above 100%
 * busy). A reader between the end's two stores may see the period as
 * neither under way nor added, for that moment only. */
#define METRICS_OPEN_ONE ((uint64_t)1 << 56)
static inline void metrics_busy_begin(struct metrics_block *b, uint64_t t0_ns)
{
    atomic_fetch_add_explicit(&b->busy_open, METRICS_OPEN_ONE + t0_ns / 1000, memory_order_relaxed);
}
static inline void metrics_busy_end(struct metrics_block *b, uint64_t t0_ns, uint64_t busy)
{
    atomic_fetch_add_explicit(&b->busy_ns, busy, memory_order_relaxed);
    atomic_fetch_sub_explicit(&b->busy_open, METRICS_OPEN_ONE + t0_ns / 1000, memory_order_release);
}
/* busy_ns plus the part of the periods under way spent by now_ns. */
uint64_t metrics_busy_now(const struct metrics_block *b, uint64_t now_ns);

/* Stores the current time into the block's heartbeat. */
void metrics_heartbeat(struct metrics_block *b);

/* Sets the block's state (enum metrics_state), e.g. METRICS_DONE at exit. */
void metrics_set_state(struct metrics_block *b, enum metrics_state state);

/* Copies up to max blocks (in index order) into out; returns how many. */
uint32_t metrics_snapshot(const struct metrics_page *p, struct metrics_snapshot *out, uint32_t max);

#endif
