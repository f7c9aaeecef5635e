/* featbuf.h - the per-rank feature buffer (DESIGN.md section 4): S slots
 * that each hold one feature row, a node -> slot map, per-slot metadata
 * (node, reference count, state) and a standby list of unreferenced slots
 * in LRU order, all in shared memory and used at once by the extractor
 * threads of several processes and by the releaser.
 *
 * Rows. On the CPU the rows live in the same memory, after the metadata:
 * S rows of `stride` bytes (row_bytes rounded up to row_align), the first
 * one page aligned, so an extractor can read a row straight into its slot.
 * A GPU rank keeps its rows on the device (params.rows_on_device): this
 * module then lays out metadata only, featbuf_row() returns NULL, and slot
 * i means row i of the device array.
 *
 * Protocol, one batch of one extractor (DESIGN.md section 4, step 1-3):
 *   featbuf_acquire_many() (or featbuf_acquire() per node) takes a reference
 *   on a slot for every node and says what the caller must do with it:
 *     FEATBUF_HIT   the row is valid: read it;
 *     FEATBUF_WAIT  another extractor (or an earlier entry of the same batch)
 *                   is loading it: featbuf_wait_valid() before reading;
 *     FEATBUF_LOAD  the slot was claimed for this caller: write the row, then
 *                   featbuf_loaded() (or featbuf_load_failed() on I/O error).
 *   Whoever ends up with the batch calls featbuf_release{,_many}() once per
 *   reference when done reading; a slot whose count reaches zero goes to
 *   the standby tail and keeps its row until the policy picks it again.
 *   A caller must finish (loaded / load_failed) every FEATBUF_LOAD it got
 *   before it waits on anything, or waiters on its slots may wait forever.
 *
 * The full protocol (lock, futex words, ordering, the reserve argument) is
 * at the top of featbuf.c.
 *
 * Errors: 0 or -errno; init/create/attach also fill `err` (may be NULL).
 * -EPIPE from any call means the buffer is broken (a process died holding
 * its lock, or featbuf_mark_broken() was called): the run is torn down. */
#ifndef SLUICE_STAGES_FEATBUF_H
#define SLUICE_STAGES_FEATBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/shm.h"

#define FEATBUF_MAGIC 0x31465542434c53ull /* "SLCBUF1\0" little endian */
#define FEATBUF_VERSION 1u
#define FEATBUF_SLOTS_MAX (1u << 30)    /* slot indices stay far from the list sentinels */
#define FEATBUF_ABSENT UINT32_MAX       /* map entry of a node that has no slot */
#define FEATBUF_NONE UINT64_MAX         /* node of a slot that holds no node */
#define FEATBUF_ROW_ALIGN_DEFAULT 64u   /* row stride alignment unless asked */

/* Slot states (the low bits of the slot's futex word). */
enum featbuf_state {
    FEATBUF_INVALID = 0, /* holds no row (or a row being thrown away) */
    FEATBUF_LOADING = 1, /* claimed; its loader is writing the row */
    FEATBUF_VALID = 2,   /* the row of slot.node, readable */
};

/* What featbuf_acquire{,_many} asks of the caller for one node. */
enum featbuf_action {
    FEATBUF_HIT = 0,
    FEATBUF_WAIT = 1,
    FEATBUF_LOAD = 2,
};

/* Eviction policies (the id is stored in shared memory; every process maps
 * it to its own table of functions). */
enum featbuf_policy_id {
    FEATBUF_POLICY_LRU = 0, /* GNNDrive's LRU standby list */
    FEATBUF_POLICY_MAX_,
};

struct featbuf_params {
    uint64_t n_nodes;    /* map entries: node ids are 0..n_nodes-1 */
    uint32_t nslots;     /* S: 1..FEATBUF_SLOTS_MAX; at least extractors x max nodes per batch */
    size_t row_bytes;    /* bytes of one feature row (> 0) */
    size_t row_align;    /* stride alignment, a power of two; 0: FEATBUF_ROW_ALIGN_DEFAULT */
    bool rows_on_device; /* GPU rank: no row storage here, metadata only */
    uint32_t policy;     /* enum featbuf_policy_id */
};

/* Counters, read with featbuf_stats() (a snapshot taken under the lock). */
struct featbuf_stats {
    uint64_t hits;      /* references taken on valid rows */
    uint64_t waits;     /* references taken on rows being loaded */
    uint64_t loads;     /* slots claimed for loading (FEATBUF_LOAD answers) */
    uint64_t evictions; /* valid rows thrown out to make room */
    uint64_t failed;    /* featbuf_load_failed() calls */
    uint32_t standby;   /* slots on the standby list now */
};

struct featbuf_hdr;  /* in shared memory; private to featbuf.c */
struct featbuf_slot; /* in shared memory; private to featbuf.c */
struct featbuf_policy_ops;

struct featbuf {
    struct featbuf_hdr *hdr;
    struct featbuf_slot *slots; /* (nslots) */
    uint32_t *map;              /* (n_nodes) slot of each node, FEATBUF_ABSENT */
    unsigned char *rows;        /* (nslots, stride); NULL when rows_on_device */
    size_t stride;              /* bytes between rows */
    size_t row_bytes;
    uint32_t nslots;
    uint64_t n_nodes;
    const struct featbuf_policy_ops *policy;
    struct shm_seg seg; /* the mapping, when created or attached by name */
};

/* Bytes of shared memory a buffer needs (metadata, map and, on the CPU,
 * rows); 0 for invalid parameters or an overflow. */
size_t featbuf_mem_size(const struct featbuf_params *p);

/* Bytes of the node -> slot map alone: 4 x n_nodes (printed at start). */
size_t featbuf_map_bytes(const struct featbuf_params *p);

/* Lays out an empty buffer (every slot INVALID, on standby; every map entry
 * absent) in len bytes of page-aligned, zeroed or not, memory. Called once,
 * by the creator, before any other process binds. 0 or -EINVAL/-ENOMEM. */
int featbuf_mem_format(void *mem, size_t len, const struct featbuf_params *p, char *err, size_t errlen);

/* Binds fb to a buffer formatted in mem (checks magic, version, sizes). */
int featbuf_init(struct featbuf *fb, void *mem, size_t len, char *err, size_t errlen);

/* Creates the segment /sluice.<run_id>.<object> holding a new buffer. */
int featbuf_create(struct featbuf *fb, const char *run_id, const char *object, const struct featbuf_params *p,
                   char *err, size_t errlen);

/* Attaches to a buffer by segment name. */
int featbuf_attach(struct featbuf *fb, const char *name, char *err, size_t errlen);

/* Unmaps (never unlinks). Accepts NULL and zeroed handles. */
void featbuf_free(struct featbuf *fb);

/* Takes a reference on a slot for node (step 1 of DESIGN.md section 4) and
 * sets *slot and *action (enum featbuf_action). Blocks only on the buffer's
 * lock (held for a few list operations). -EINVAL (node out of range),
 * -EAGAIN (every slot is referenced: nothing taken; wait for the releaser
 * and retry), -EPIPE (broken). */
int featbuf_acquire(struct featbuf *fb, uint64_t node, uint32_t *slot, int *action);

/* The same for n nodes under one hold of the lock: slots[i] and action[i]
 * for nodes[i]. All or nothing: on any error no reference is held and no
 * map entry changed (slots claimed before the failure are put back
 * INVALID at the standby head; their old rows stay evicted). */
int featbuf_acquire_many(struct featbuf *fb, const uint64_t *nodes, uint32_t n, uint32_t *slots, uint8_t *action);

/* Waiting for room after -EAGAIN, without polling: read the standby
 * sequence before acquiring, and if acquire says -EAGAIN, sleep until a
 * release has put a slot on standby since then:
 *     uint32_t seq = featbuf_standby_seq(fb);
 *     while ((rc = featbuf_acquire_many(fb, ...)) == -EAGAIN &&
 *            (rc = featbuf_wait_standby(fb, seq, timeout_ms)) == 0)
 *         seq = featbuf_standby_seq(fb);
 * featbuf_wait_standby returns 0 (something was released since seq; also
 * at once if that happened before the call), -ETIMEDOUT (timeout_ms < 0
 * waits for ever) or -EPIPE (broken). Never takes the lock. */
uint32_t featbuf_standby_seq(struct featbuf *fb);
int featbuf_wait_standby(struct featbuf *fb, uint32_t seen, int timeout_ms);

/* The caller's FEATBUF_LOAD row is written: the slot becomes VALID and its
 * waiters wake. Never blocks (no lock). -EINVAL (slot not LOADING), -EPIPE. */
int featbuf_loaded(struct featbuf *fb, uint32_t slot);

/* The load failed: the node leaves the map, the slot becomes INVALID and
 * its waiters wake with -EIO. The caller still holds (and must release)
 * its reference. -EINVAL (slot not LOADING), -EPIPE. */
int featbuf_load_failed(struct featbuf *fb, uint32_t slot);

/* Sleeps on the slot's futex word until it is VALID (0), its load failed
 * (-EIO), timeout_ms passed (-ETIMEDOUT; < 0 waits for ever) or the buffer
 * broke (-EPIPE). The caller must hold a reference on slot. */
int featbuf_wait_valid(struct featbuf *fb, uint32_t slot, int timeout_ms);

/* Drops one reference; at zero the slot goes to the standby tail with its
 * row (or the head, if it holds none). Blocks only on the lock. -EINVAL
 * (no reference held, or dropping the last one of a LOADING slot), -EPIPE. */
int featbuf_release(struct featbuf *fb, uint32_t slot);
int featbuf_release_many(struct featbuf *fb, const uint32_t *slots, uint32_t n);

/* Start of a slot's row (stride bytes apart), or NULL when rows_on_device.
 * Read only while holding a reference on a VALID slot; write only as its
 * FEATBUF_LOAD owner before featbuf_loaded(). */
void *featbuf_row(const struct featbuf *fb, uint32_t slot);

/* Marks the buffer broken (supervisor, on a dead peer): every later call
 * and every sleeper returns -EPIPE. Never blocks on the lock. */
void featbuf_mark_broken(struct featbuf *fb);

/* Slot of node if it has one (any state), else FEATBUF_ABSENT; takes the
 * lock. For tests and gnnstat, not for the hot path. */
uint32_t featbuf_lookup(struct featbuf *fb, uint64_t node);

/* Copies the counters; -EPIPE if broken. */
int featbuf_stats(struct featbuf *fb, struct featbuf_stats *out);

/* The same without waiting for the lock: -EBUSY while someone holds it.
 * For readers that must never stall (the launcher's status snapshot: a
 * stage stopped in a debugger may hold the lock for minutes). */
int featbuf_stats_try(struct featbuf *fb, struct featbuf_stats *out);

/* Checks every invariant under the lock: the map and slot nodes agree both
 * ways, refcount 0 <=> on standby, the standby list is well formed (links,
 * length), VALID/LOADING slots hold a node, LOADING ones are referenced.
 * 0, or -EUCLEAN with what is wrong in err. O(n_nodes + nslots). */
int featbuf_check(struct featbuf *fb, char *err, size_t errlen);

#endif
