/* featbuf.h - the per-rank feature buffer (DESIGN.md section 4): S slots
 * that each hold one feature row, a node -> slot map, per-slot metadata
 * (node, reference count, state, dirty) and the set of unreferenced slots
 * on standby, ordered for reuse by an eviction policy (LRU unless asked;
 * the policy table is in featbuf_policy.h), all in shared memory and used
 * at once by the extractor threads of several processes and by the
 * releaser.
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
 *   reference when done reading; a slot whose count reaches zero goes on
 *   standby and keeps its row until the policy picks it as a victim.
 *   A caller must finish (loaded / load_failed) every FEATBUF_LOAD it got
 *   before it waits on anything, or waiters on its slots may wait forever.
 *
 * Policy hooks:
 *   featbuf_hint()        tells the policy which nodes a sampled batch will
 *                         acquire (a lookahead policy's future; the sampler
 *                         calls it W batches ahead with pipeline.cache_policy
 *                         = "lookahead", and the extractor acquires with
 *                         featbuf_acquire_batch so the policy sees each
 *                         announced use arrive);
 *   featbuf_pin/unpin()   a hot set that is never evicted, within
 *                         params.pin_slots;
 *   featbuf_mark_dirty()  a row changed in place (learnable embeddings): it
 *                         is written back through the process's write-back
 *                         callback before its slot is reused, or by
 *                         featbuf_flush().
 *
 * The full protocol (lock, futex words, ordering, the reserve argument,
 * pins and write-back) is at the top of featbuf.c.
 *
 * Rows on a GPU (featbuf_device.c, protocol at its top): the rank's trainer
 * allocates the S rows on its device, exports them with CUDA IPC and
 * publishes the handle in this buffer's header (featbuf_device_publish);
 * extractors wait for it, count themselves in (featbuf_device_attach),
 * open it, and count themselves out after closing it
 * (featbuf_device_detach); the trainer stops new importers
 * (featbuf_device_close) and frees only after featbuf_device_wait_closed
 * says none is left. The CUDA calls around this are in featbuf_cuda.h.
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
#define FEATBUF_VERSION 3u
#define FEATBUF_SLOTS_MAX (1u << 30)    /* slot indices stay far from the sentinels */
#define FEATBUF_ABSENT UINT32_MAX       /* map entry of a node that has no slot */
#define FEATBUF_NONE UINT64_MAX         /* node of a slot that holds no node */
#define FEATBUF_ROW_ALIGN_DEFAULT 64u   /* row stride alignment unless asked */

/* The device record in the header (struct featbuf_dev in featbuf_int.h):
 * fixed byte offsets from the start of the buffer's memory, the same in
 * every build, with or without CUDA. */
#define FEATBUF_IPC_HANDLE_BYTES 64u   /* sizeof(cudaIpcMemHandle_t); featbuf_cuda.c asserts it */
#define FEATBUF_DEV_BUS_ID_BYTES 32u   /* a PCI bus id ("0000:3b:00.0") with its NUL */
#define FEATBUF_DEV_OFFSET 128u        /* the record: two cache lines */
#define FEATBUF_DEV_HANDLE_OFFSET 192u /* the handle's 64 bytes */
#define FEATBUF_DEV_IMPORTERS_MAX 0xffffffu

/* Slot states (the low bits of the slot's futex word). */
enum featbuf_state {
    FEATBUF_INVALID = 0, /* holds no row (or a row being thrown away) */
    FEATBUF_LOADING = 1, /* claimed; its loader is writing the row */
    FEATBUF_VALID = 2,   /* the row of slot.node, readable */
};

/* Where the device rows are in their life (featbuf_device_state). */
enum featbuf_dev_state {
    FEATBUF_DEV_NONE = 0,    /* not published yet (CPU ranks stay here) */
    FEATBUF_DEV_READY = 1,   /* published: importers may attach */
    FEATBUF_DEV_CLOSING = 2, /* the exporter is leaving: no new importers; it waits for the others */
    FEATBUF_DEV_CLOSED = 3,  /* every importer closed the handle: the exporter may free */
};

/* What the exporter publishes and an importer gets back. */
struct featbuf_device {
    unsigned char handle[FEATBUF_IPC_HANDLE_BYTES]; /* cudaIpcMemHandle_t, opaque here */
    int device;                                     /* the exporter's CUDA ordinal */
    char pci_bus_id[FEATBUF_DEV_BUS_ID_BYTES];      /* its PCI bus id ("" when unknown) */
    uint64_t bytes;                                 /* of the allocation: >= nslots x stride */
    uint64_t stride;                                /* bytes between rows (the buffer's stride) */
    int32_t exporter_pid;
};

/* What featbuf_acquire{,_many} asks of the caller for one node. */
enum featbuf_action {
    FEATBUF_HIT = 0,
    FEATBUF_WAIT = 1,
    FEATBUF_LOAD = 2,
};

/* Eviction policies (the id is stored in shared memory; every process maps
 * it to its own table of functions: featbuf_policy.h). */
enum featbuf_policy_id {
    FEATBUF_POLICY_LRU = 0,   /* GNNDrive's LRU standby list (featbuf_lru.c) */
    FEATBUF_POLICY_LOOKAHEAD = 1, /* farthest next use in a window of hinted batches (featbuf_lookahead.c) */
    FEATBUF_POLICY_USER = 8,  /* first id featbuf_policy_register() accepts */
    FEATBUF_POLICY_IDS = 16,  /* ids are 0..FEATBUF_POLICY_IDS-1 */
};

struct featbuf_params {
    uint64_t n_nodes;    /* map entries: node ids are 0..n_nodes-1 */
    uint32_t nslots;     /* S: 1..FEATBUF_SLOTS_MAX; at least extractors x max nodes per batch */
    size_t row_bytes;    /* bytes of one feature row (> 0) */
    size_t row_align;    /* stride alignment, a power of two; 0: FEATBUF_ROW_ALIGN_DEFAULT */
    bool rows_on_device; /* GPU rank: no row storage here, metadata only */
    uint32_t policy;     /* enum featbuf_policy_id; 0: LRU */
    uint32_t pin_slots;  /* most nodes pinned at once, < nslots; on top of the reserve (featbuf_pin); 0: none */
    uint32_t window;       /* lookahead: batches hinted ahead of the oldest one still acquiring (1..FEATBUF_WINDOW_MAX); else 0 */
    uint64_t hint_entries; /* lookahead: (node, batch) pairs its hint log holds (>= 1); else 0 */
};

#define FEATBUF_WINDOW_MAX 4096u      /* pipeline.lookahead's upper bound */
#define FEATBUF_NO_BATCH UINT64_MAX   /* featbuf_acquire_batch: not a batch of the schedule */

/* Counters, read with featbuf_stats() (a snapshot taken under the lock). */
struct featbuf_stats {
    uint64_t hits;      /* references taken on valid rows */
    uint64_t waits;     /* references taken on rows being loaded */
    uint64_t loads;     /* slots claimed for loading (FEATBUF_LOAD answers) */
    uint64_t evictions; /* valid rows thrown out to make room */
    uint64_t failed;    /* featbuf_load_failed() calls */
    uint64_t writebacks; /* dirty rows written back (eviction or flush) */
    uint32_t standby;   /* slots on standby now */
    uint32_t pinned;    /* nodes pinned now */
};

/* Writes back the dirty row of node, held in slot (row: its bytes, NULL
 * when rows_on_device; row_bytes long), before the slot is reused or by
 * featbuf_flush(). Called with the buffer's lock held (see featbuf.c): it
 * must not call into this buffer. 0, or -errno: the row stays dirty and
 * resident and the call that needed it fails with that error. */
typedef int (*featbuf_writeback_fn)(void *ctx, uint64_t node, uint32_t slot, const void *row, size_t row_bytes);

struct featbuf_hdr;  /* in shared memory; private to featbuf.c */
struct featbuf_slot; /* in shared memory; private to featbuf.c */
struct featbuf_policy_ops;

struct featbuf {
    struct featbuf_hdr *hdr;
    struct featbuf_slot *slots; /* (nslots) */
    void *policy_mem;           /* the policy's region; NULL when it asked for none */
    uint64_t *pins;             /* (ceil(n_nodes / 64)) pinned-node bits; NULL when pin_slots is 0 */
    uint32_t *map;              /* (n_nodes) slot of each node, FEATBUF_ABSENT */
    unsigned char *rows;        /* (nslots, stride); NULL when rows_on_device */
    size_t stride;              /* bytes between rows */
    size_t row_bytes;
    uint32_t nslots;
    uint32_t pin_slots;
    uint64_t n_nodes;
    const struct featbuf_policy_ops *policy; /* this process's table for the header's id */
    void *dev_rows;  /* rows on the device: this process's pointer to row 0 (featbuf_cuda.h), else NULL */
    int dev_ordinal; /* the CUDA device dev_rows is on */
    featbuf_writeback_fn writeback;          /* this process's, or NULL (featbuf_set_writeback) */
    void *writeback_ctx;
    struct shm_seg seg; /* the mapping, when created or attached by name */
};

/* Bytes of shared memory a buffer needs (metadata, map and, on the CPU,
 * rows); 0 for invalid parameters or an overflow. */
size_t featbuf_mem_size(const struct featbuf_params *p);

/* Bytes of the node -> slot map alone: 4 x n_nodes (printed at start). */
size_t featbuf_map_bytes(const struct featbuf_params *p);

/* Lays out an empty buffer (every slot INVALID, on standby; every map entry
 * absent; nothing pinned; the policy's region by its init) in len bytes of page-aligned, zeroed or not, memory. Called once,
 * by the creator, before any other process binds. 0 or -EINVAL/-ENOMEM. */
int featbuf_mem_format(void *mem, size_t len, const struct featbuf_params *p, char *err, size_t errlen);

/* Binds fb to a buffer formatted in mem (checks magic, version, sizes, and
 * that this process knows the header's policy id). */
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
 * lock (held for a few list operations, and for the write-back of a dirty
 * victim). -EINVAL (node out of range, or a dirty victim and no write-back
 * registered in this process), -EAGAIN (every slot is referenced or
 * pinned: nothing taken; wait for the releaser and retry), -EPIPE (broken),
 * or the write-back's error. */
int featbuf_acquire(struct featbuf *fb, uint64_t node, uint32_t *slot, int *action);

/* The same for n nodes under one hold of the lock: slots[i] and action[i]
 * for nodes[i]. All or nothing: on any error no reference is held and no
 * node of the batch is mapped that was not before (slots claimed before
 * the failure are put back INVALID on standby, empty, so LRU reuses them
 * first; the rows they held stay evicted - their nodes' entries gone -,
 * written back first if they were dirty). */
int featbuf_acquire_many(struct featbuf *fb, const uint64_t *nodes, uint32_t n, uint32_t *slots, uint8_t *action);

/* The same for the nodes of schedule batch `batch` (the number its hint
 * carried, featbuf_hint): the policy learns that batch's use of each node
 * has come (a lookahead policy's bookkeeping). featbuf_acquire_many is this
 * with FEATBUF_NO_BATCH (a use no hint announced). */
int featbuf_acquire_batch(struct featbuf *fb, uint64_t batch, const uint64_t *nodes, uint32_t n, uint32_t *slots,
                          uint8_t *action);

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

/* Drops one reference; at zero the slot goes on standby with its row
 * (unless its node is pinned: then it stays out of the policy's reach).
 * Blocks only on the lock. -EINVAL
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
 * ways, on standby <=> unreferenced and not pinned, the standby count,
 * VALID/LOADING slots hold a node, LOADING ones are referenced, dirty ones
 * are VALID, the pin count, and the policy's own check of its region.
 * 0, or -EUCLEAN with what is wrong in err. O(n_nodes + nslots). */
int featbuf_check(struct featbuf *fb, char *err, size_t errlen);

/* ---- policy hooks ------------------------------------------------------ */

/* Tells the policy that batch number `batch` (sampled, not yet extracted)
 * will acquire nodes[0..n-1]. Advice: the policy may ignore it (LRU does).
 * Blocks only on the lock, which it takes once per 4096 nodes (the policy
 * may see other calls between those pieces). 0, -EINVAL (a node out of
 * range: nothing told), -EPIPE. */
int featbuf_hint(struct featbuf *fb, uint64_t batch, const uint64_t *nodes, uint32_t n);

/* Pins node: once resident, its slot is never a victim until unpinned. A
 * resident node leaves standby at once; one not resident is loaded by the
 * next acquirer as usual and then stays. Pins count by node, whether
 * resident or not, against params.pin_slots, which the creator adds on top
 * of the reserve (featbuf.c): a pin that would make more than pin_slots
 * nodes pinned is refused with -ENOSPC, so pins never eat into the slots
 * the extractors need. Pinning a pinned node is a no-op (0). Blocks only
 * on the lock. 0, -EINVAL (node out of range), -ENOSPC, -EPIPE. */
int featbuf_pin(struct featbuf *fb, uint64_t node);

/* Unpins node; an unreferenced resident row goes on standby (newest).
 * 0, -EINVAL (out of range), -ENOENT (not pinned), -EPIPE. */
int featbuf_unpin(struct featbuf *fb, uint64_t node);

/* Registers this process's write-back (fn NULL: none). Per process, not in
 * shared memory: every process that may evict (every extractor, and
 * whoever calls featbuf_flush) of a buffer whose rows are marked dirty
 * must register one; set it before the process acquires, not concurrently
 * with its own calls on fb. */
void featbuf_set_writeback(struct featbuf *fb, featbuf_writeback_fn fn, void *ctx);

/* The row in slot was changed in place by its reference holder: it is
 * written back before the slot is reused (or by featbuf_flush). The caller
 * holds a reference on a VALID slot. Blocks only on the lock. 0, -EINVAL
 * (no write-back registered here, slot out of range, unreferenced or not
 * VALID), -EPIPE. */
int featbuf_mark_dirty(struct featbuf *fb, uint32_t slot);

/* Writes back every dirty row with no reference (pinned ones included)
 * and marks it clean, in slot order, with the lock held throughout;
 * referenced dirty rows stay dirty. Returns the number written, or -EINVAL
 * (no write-back registered), -EPIPE, or the first write-back error (rows
 * written before it stay clean). For checkpoints and the end of a run. */
int featbuf_flush(struct featbuf *fb);

/* ---- a resident buffer (featbuf_resident.c) ----------------------------- */

/* Once every node 0..n_nodes-1 holds a VALID, clean row (the warm start,
 * stages/warm.h, filled a buffer with a slot for every row), nothing can
 * ever be claimed or evicted again: no acquire needs a new slot, so no
 * row moves. The buffer may then be declared resident, for good, and
 * batches look their rows up without the lock and without references:
 *
 * featbuf_set_resident() checks, under the lock, that every node maps to
 * a VALID slot and no row is dirty, and sets the flag (a store-release
 * after the map's last change). 0; -EAGAIN (some node is absent, loading
 * or dirty: nothing set); -EOPNOTSUPP (the policy is not LRU: lookahead
 * learns every row's use from the batches' acquires, which a resident
 * buffer skips); -EPIPE (broken). O(n_nodes); call once.
 *
 * featbuf_lookup_resident() answers 1 when the buffer is resident, with
 * slots[i] = the slot of nodes[i] and NO reference taken (so nothing to
 * release: the batch must say so to whoever releases it); 0 when it is
 * not (nothing done: acquire as usual); -EINVAL (a node out of range),
 * -EPIPE (broken). Never blocks. Lookups served this way count as hits
 * in featbuf_stats (one relaxed atomic add per call). A row reached this way is
 * unreferenced: featbuf_mark_dirty refuses it, so a run with rows that
 * change in place (learnable embeddings) must not set the flag. */
int featbuf_set_resident(struct featbuf *fb);
int featbuf_lookup_resident(struct featbuf *fb, const uint64_t *nodes, uint32_t n, uint32_t *slots);
bool featbuf_is_resident(const struct featbuf *fb);

/* ---- rows on the device (featbuf_device.c) ------------------------------ */

/* Exporter: publishes its device rows (NONE -> READY) and wakes whoever
 * waits for them. handle_len must be FEATBUF_IPC_HANDLE_BYTES, bytes at
 * least nslots x stride, the buffer laid out with rows_on_device. Never
 * blocks. 0, -EINVAL, -EALREADY (published before), -EPIPE (broken). */
int featbuf_device_publish(struct featbuf *fb, const void *handle, size_t handle_len, int device,
                           const char *pci_bus_id, uint64_t bytes);

/* Importer: sleeps on the record's futex word until the rows are
 * published. 0 (READY), -ETIMEDOUT (timeout_ms < 0 waits for ever),
 * -EPIPE (broken, or the exporter is closing or closed: they will never be
 * there). */
int featbuf_device_wait_ready(struct featbuf *fb, int timeout_ms);

/* Importer: counts this process in and copies the record into out. Call
 * before opening the handle. Never blocks. 0; -EAGAIN (not published yet);
 * -EPIPE (broken, closing or closed); -EOVERFLOW (too many importers). */
int featbuf_device_attach(struct featbuf *fb, struct featbuf_device *out);

/* Importer: counts this process out, after it closed the handle
 * (cudaIpcCloseMemHandle); wakes the exporter if it was the last. Works on
 * a broken buffer too. 0, -EINVAL (nobody attached). */
int featbuf_device_detach(struct featbuf *fb);

/* Exporter: READY -> CLOSING: attaching fails from now on and importers
 * waiting for the rows give up. Idempotent. 0, -EINVAL (never published). */
int featbuf_device_close(struct featbuf *fb);

/* Exporter, after featbuf_device_close: sleeps until every importer has
 * detached, then the state is CLOSED and the exporter may free: 0.
 * -ETIMEDOUT (timeout_ms < 0 waits for ever); -EPIPE (broken with
 * importers still counted: one may have died with the handle open, or may
 * still copy; do not free, leave the memory to process exit); -EINVAL
 * (not closing). */
int featbuf_device_wait_closed(struct featbuf *fb, int timeout_ms);

/* The state (enum featbuf_dev_state) and, if importers is not NULL, how
 * many importers are counted in. Never blocks. */
int featbuf_device_state(const struct featbuf *fb, uint32_t *importers);

#endif
