/* staging.h - the staging buffer shared by the ranks of a node (DESIGN.md
 * section 2; GNNDrive section 4.3): fixed-size blocks in one shared
 * segment that extractor threads read feature rows into before they are
 * copied into the feature buffer (by memcpy on the CPU, by the copy
 * engine from pinned memory on a GPU).
 *
 * Portions. The blocks are cut into portions, one per extractor thread of
 * every rank: portion `rank * threads + thread`, `blocks` blocks each, the
 * portions of one rank side by side (that run is "the rank's portion" of
 * the paper). A thread takes blocks from its own portion first.
 *
 * Borrowing. When its own portion has no free block, a thread may borrow
 * one from another portion: its rank's other threads first, then the
 * other ranks in turn (rank + 1, rank + 2, ...). A borrowed block goes back
 * to the portion it came from when it is put, never to the borrower's.
 *
 * The rules, which make borrowing safe:
 *   keep    a borrower never takes the last `keep` (>= 1) free blocks of a
 *           portion. So a thread that holds none of its own blocks always
 *           finds at least `keep` free at home: every thread can always
 *           start one read, whatever the others hold, and extraction never
 *           deadlocks on staging.
 *   want    an owner that finds its portion empty raises the portion's
 *           `want` flag, and nobody borrows from a portion whose flag is up:
 *           an owner's request beats a borrower's. What was lent before
 *           comes home as each borrowed read finishes (one read and one
 *           copy), and the owner takes it. The owner lowers the flag when it
 *           has no more reads to start (staging_idle), which lets its free
 *           blocks be lent again. A borrow that had already passed the check
 *           when the flag went up may still complete; none starts after.
 *
 * Protocol (shared memory, every process of the node):
 *   A portion's state is its free bitmap (a set bit is a free block) and
 *   `avail`, the number of free blocks nobody has reserved yet. staging_get
 *   reserves one with a CAS on avail (a borrower only while avail > keep),
 *   then clears one set bit of the bitmap with a CAS: a reservation always
 *   has a bit to find, since staging_put sets the bit (release) before it
 *   increments avail. The bit's CAS (acquire) pairs with the release of the
 *   put that freed it, so a block's previous holder is done with it before
 *   the next one writes. No lock: a process that dies holding blocks only
 *   loses them (the run is torn down anyway, DESIGN.md section 8); the
 *   `keep` guarantee does not depend on it.
 *   Waiting: staging_seq / staging_wait sleep on the portion's `seq` futex
 *   word, which every put into the portion bumps (announce, re-check, then
 *   FUTEX_WAIT, as in featbuf.c), so a block coming home is never missed.
 *   staging_close (the launcher's teardown) makes gets fail with -EPIPE and
 *   wakes every sleeper.
 *
 * Memory: the segment's header (magic, version, geometry, offsets), one
 * 64-byte record per portion, the bitmaps (each portion's on its own cache
 * lines), then the blocks, page aligned, every block a multiple of 4096
 * bytes so direct I/O may read into any of them.
 *
 * Errors: 0 or -errno with a message in err (may be NULL). */
#ifndef SLUICE_IPC_STAGING_H
#define SLUICE_IPC_STAGING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/shm.h"

#define STAGING_MAGIC 0x31475453434c53ull /* "SLCSTG1\0" little endian */
#define STAGING_VERSION 1u
#define STAGING_OBJECT "staging"        /* the segment: /sluice.<run>.staging */
#define STAGING_BLOCK_ALIGN 4096u       /* block size and alignment unit */
#define STAGING_PORTIONS_MAX (1u << 20) /* ranks x threads */
#define STAGING_BLOCKS_MAX (1u << 30)   /* blocks in all */
#define STAGING_NONE UINT32_MAX         /* no block */

struct staging_params {
    uint32_t ranks;       /* ranks sharing the segment, >= 1 */
    uint32_t threads;     /* portions per rank (extractor threads), >= 1 */
    uint32_t blocks;      /* blocks in each portion, >= 1 */
    uint64_t block_bytes; /* bytes of a block: a multiple of STAGING_BLOCK_ALIGN */
    uint32_t keep;        /* free blocks a borrower leaves in a portion; 0 means 1 */
};

/* One portion's counters (staging_stats; a snapshot of relaxed loads). */
struct staging_stats {
    uint32_t free;     /* free blocks (set bits) */
    uint32_t lent;     /* blocks of this portion held by other portions' threads */
    uint32_t borrowed; /* blocks of other portions held by this portion's thread */
    bool want;         /* the owner is short: nothing is lent */
    uint64_t borrows;  /* blocks this portion's thread borrowed, in all */
    uint64_t lends;    /* blocks of this portion lent, in all */
};

struct staging_hdr;     /* in shared memory; private to staging.c */
struct staging_portion; /* in shared memory; private to staging.c */

struct staging {
    struct staging_hdr *hdr;
    struct staging_portion *portion; /* (portions) */
    _Atomic uint64_t *bits;          /* (portions, words) free-block bits */
    unsigned char *blocks;           /* (portions x blocks_per, block_bytes) */
    uint64_t block_bytes;
    uint32_t ranks, threads, portions, blocks_per, words, keep;
    struct shm_seg seg; /* the mapping, when created or attached by name */
};

/* Bytes of memory a staging buffer needs; 0 for invalid parameters. */
size_t staging_mem_size(const struct staging_params *p);

/* Lays out a staging buffer with every block free in len bytes of
 * page-aligned memory. 0 or -EINVAL. */
int staging_mem_format(void *mem, size_t len, const struct staging_params *p, char *err, size_t errlen);

/* Binds s to a staging buffer formatted in mem (checks magic, version and
 * sizes): 0 or -EINVAL. */
int staging_init(struct staging *s, void *mem, size_t len, char *err, size_t errlen);

/* "/sluice.<run_id>.staging". */
int staging_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen);

/* Creates the run's segment /sluice.<run_id>.staging (launcher). */
int staging_create(struct staging *s, const char *run_id, const struct staging_params *p, char *err, size_t errlen);

/* Attaches to the run's segment (stages). */
int staging_attach(struct staging *s, const char *run_id, char *err, size_t errlen);

/* Unmaps (never unlinks). Accepts NULL and zeroed handles. */
void staging_free(struct staging *s);

/* Gets fail with -EPIPE from now on and every sleeper wakes (launcher
 * teardown). Never blocks. */
void staging_close(struct staging *s);

/* The portion of extractor thread `thread` of rank `rank`, or STAGING_NONE
 * when either is out of range. */
uint32_t staging_portion_of(const struct staging *s, int rank, int thread);

enum staging_get_flags {
    STAGING_BORROW = 1u << 0, /* when the own portion is empty, borrow */
};

/* Takes a free block for the thread that owns `portion`: its own first;
 * with STAGING_BORROW, when it has none, one borrowed under the rules
 * above. Never blocks. 0 with *block set; -EAGAIN (none can be had now:
 * the owner's `want` flag is up); -EPIPE (closed); -EINVAL (portion out of
 * range). */
int staging_get(struct staging *s, uint32_t portion, unsigned flags, uint32_t *block);

/* Gives block back to the portion it belongs to, from the thread that owns
 * `portion` (who took it). The caller must be done with its bytes (a copy
 * that reads them has finished). Wakes sleepers of the block's portion.
 * 0, or -EINVAL (out of range, or the block is free already: nothing
 * changed; a best-effort check: a second put after the block was handed
 * out again is not caught, and two holders would share it). */
int staging_put(struct staging *s, uint32_t portion, uint32_t block);

/* The owner of `portion` has no more reads to start: its `want` flag goes
 * down, so its free blocks may be lent again. */
void staging_idle(struct staging *s, uint32_t portion);

/* Sleeping until a block comes home to `portion`, without polling: read the
 * sequence, try staging_get, and if it says -EAGAIN wait with what was
 * read. staging_wait returns 0 (a block came home since `seen`; at once if
 * that happened before the call), -ETIMEDOUT (timeout_ms < 0 waits for
 * ever) or -EPIPE (closed). */
uint32_t staging_seq(struct staging *s, uint32_t portion);
int staging_wait(struct staging *s, uint32_t portion, uint32_t seen, int timeout_ms);

/* The bytes of a block (block_bytes long), NULL out of range. */
void *staging_block(const struct staging *s, uint32_t block);

/* The portion a block belongs to, STAGING_NONE out of range. */
uint32_t staging_home(const struct staging *s, uint32_t block);

/* Where a portion's blocks lie (contiguous): 0, or -EINVAL. */
int staging_portion_span(const struct staging *s, uint32_t portion, void **base, size_t *len);

/* Where all the blocks lie (what a CUDA process registers once). */
void *staging_data(const struct staging *s, size_t *len);

/* A portion's counters: 0 or -EINVAL. */
int staging_stats(const struct staging *s, uint32_t portion, struct staging_stats *out);

#endif
