/* featbuf.c - the per-rank feature buffer (API in featbuf.h): the
 * protocol core. (Over ~800 lines on purpose: about 175 of them are the
 * protocol below, which belongs beside the lock-holding code it governs.) Pins, dirty rows, hints, checks and the policy registry
 * are in featbuf_hooks.c; each eviction policy is a file of its own behind
 * struct featbuf_policy_ops (featbuf_policy.h; LRU in featbuf_lru.c).
 *
 * Protocol
 * --------
 * Memory (one segment, or memory the creator owns, page aligned):
 *
 *     struct featbuf_hdr   read-only lines (magic, version, sizes, offsets,
 *                          policy id, pin_slots) written once by
 *                          featbuf_mem_format; the device record at
 *                          FEATBUF_DEV_OFFSET (a GPU rank's CUDA IPC
 *                          handle, its own protocol: featbuf_device.c);
 *                          the process-shared robust mutex; the broken
 *                          flag; standby and pin counts; counters
 *     slots                nslots x struct featbuf_slot (node, refs,
 *                          state futex word, waiters, standby and dirty
 *                          flags)
 *     policy region        policy_bytes (the policy's region_size), 64-byte
 *                          aligned, laid out by its init, written only by
 *                          its functions (LRU: the standby list's links)
 *     pins                 ceil(n_nodes / 64) x uint64 pinned-node bits,
 *                          only when pin_slots > 0
 *     map                  n_nodes x uint32 slot index or FEATBUF_ABSENT
 *     rows                 nslots x stride bytes, page aligned (CPU only)
 *   Every process binds with the offsets checked against the layout its own
 *   policy table implies, so a process whose table for the id asks for
 *   another region size is refused.
 *
 * The lock. One mutex (PTHREAD_PROCESS_SHARED, PTHREAD_MUTEX_ROBUST)
 *   guards the map, every slot's node/refs/flags, the pin bits, the
 *   standby set and the policy's region (its functions run only inside).
 *   Extractors take it once per batch (featbuf_acquire_many) and the
 *   releaser once per trained batch (featbuf_release_many); inside, each
 *   node costs a map lookup and an O(1) policy call (LRU: list surgery),
 *   so a batch of 10^5 nodes
 *   holds it for about a millisecond, while the same batch's reads take tens
 *   of milliseconds. Contention is bounded by batch rate, not row rate;
 *   a finer scheme (per-node CAS on the map, as GNNDrive does) is a later
 *   optimisation behind the same API.
 *   If a process dies holding the lock, the next locker gets EOWNERDEAD:
 *   it marks the buffer broken, makes the mutex consistent and returns
 *   -EPIPE; every later call returns -EPIPE and the run is torn down
 *   (DESIGN.md section 8) - the half-done list surgery is never trusted.
 *
 * Slot state. A slot's `state` word (INVALID / LOADING / VALID) is the
 *   futex word its waiters sleep on. Transitions:
 *     INVALID|VALID -> LOADING   acquire claims a standby slot (lock held;
 *                                refs 0 -> 1, so nobody else reads it)
 *     LOADING -> VALID           featbuf_loaded, by the claimer, without the
 *                                lock: store-release after the row is written
 *     LOADING -> INVALID         featbuf_load_failed (lock held: the node
 *                                also leaves the map)
 *   A slot with refs > 0 is never on standby, so it is never claimed again:
 *   while a caller holds a reference the slot's node cannot change and its
 *   state only moves forward from LOADING, so waiters see no ABA.
 *   Readers of the state (acquire under the lock, waiters) load it with
 *   acquire order, so a VALID they see carries the loader's row writes.
 *
 * Waiting without lost wake-ups. A waiter increments the slot's `waiters`
 *   (seq_cst), re-reads the broken flag and the state, and only then calls
 *   FUTEX_WAIT(state, LOADING) (shared futex: waiters and loaders live in
 *   different processes). The loader stores the new state (seq_cst) before
 *   it loads `waiters` (seq_cst): either it sees the waiter and wakes all
 *   sleepers on the word, or the waiter's re-check sees the new state (and
 *   if it raced into FUTEX_WAIT, the word no longer equals LOADING and the
 *   kernel returns at once). So loaded() makes no system call unless
 *   someone sleeps. featbuf_mark_broken() sets the flag, then adds a
 *   BROKEN bit to every LOADING word and wakes every slot with waiters; the
 *   changed word makes a racing FUTEX_WAIT return at once. It bumps the
 *   standby word and sets the device record's broken bit the same way.
 *
 * Who writes what: the creator formats everything once and stores the
 *   magic last (release). Under the lock: the map, slot node/refs/flags,
 *   pin bits, the policy region, counts and counters, and the state
 *   transitions that
 *   start or abandon a load. Without the lock: LOADING -> VALID (claimer),
 *   `waiters` (waiters), the broken flag and bits (mark_broken). A row's
 *   bytes are written only by the claimer of its LOADING slot, read by
 *   holders of a reference on its VALID slot (a holder that changes it
 *   marks it dirty: featbuf_mark_dirty), and owned by the buffer's creator
 *   like the rest of the segment.
 *
 * The reserve. -EAGAIN means every slot is referenced or pinned. References are held
 *   by extractors in the middle of a batch and by whole batches downstream
 *   (train queue, trainer), which the releaser drops without waiting on
 *   anything in this buffer. With S >= extractors x max_nodes_per_batch,
 *   the extractors together hold fewer than S slots while one of them is
 *   still acquiring (each holds < max_nodes_per_batch then, sharing only
 *   lowers the count), so when acquire fails some slot is held downstream
 *   and its release is coming: waiting for the releaser and retrying always
 *   makes progress. featbuf_acquire_many is all or nothing, so a failed
 *   batch holds nothing while it waits. If nothing is downstream (the
 *   stress test: each extractor releases its own batch) -EAGAIN cannot
 *   happen at all at that size.
 *   Pins: a slot whose node is pinned never goes on standby, so it is as
 *   good as referenced for ever. featbuf_pin refuses (-ENOSPC) to pin more
 *   than pin_slots nodes, resident or not, and the creator sizes
 *   S >= extractors x max_nodes_per_batch + pin_slots: the unpinned slots
 *   are then at least the reserve and the argument above holds for them
 *   (extractor references on pinned slots only lower their count).
 *
 *   A caller that got -EAGAIN sleeps in featbuf_wait_standby() on the
 *   header's `standby_seq` word, read before its acquire; a release that
 *   put any slot on standby bumps it (seq_cst, after unlocking) and wakes
 *   its sleepers if `standby_waiters` is non-zero (same announce / re-check
 *   pattern as the slot words). A release between the caller's read and
 *   its sleep changes the word, so that wake-up is never lost.
 *
 * Standby and the policy. The core keeps which slots are on standby (the
 *   slot's `standby` flag, the header's count): exactly the unreferenced
 *   slots whose node is not pinned. Each change is told to the policy
 *   under the lock (contract in featbuf_policy.h): put (joins: refs reached
 *   0, or unpinned while unreferenced), take (leaves: a new reference, or a
 *   pin) and victim (the policy picks and removes one to reuse). hint
 *   passes sampled batches through. LRU keeps the standby list oldest
 *   first, empty slots in front; a lookahead policy can pick another.
 *
 * Dirty rows and write-back. featbuf_mark_dirty sets the slot's dirty flag
 *   (lock held; the caller holds a reference, so the slot cannot be
 *   reused meanwhile). When acquire's victim is dirty, the core calls the
 *   acquiring process's write-back with the lock held, before the node
 *   leaves the map, and clears the flag only if it succeeds; on failure the
 *   slot goes back on standby, dirty, and the acquire fails (all or
 *   nothing, as for -EAGAIN). Holding the lock over the write-back is the
 *   safe choice: no other process can see the slot half reused, take a
 *   new reference on the node while its old bytes are being saved, or load
 *   the node from disk before its newer bytes reach it; the price is the
 *   write's time added to the lock hold, paid only by dirty evictions.
 *   featbuf_flush writes back every unreferenced dirty row the same way.
 *   Each dirty row is written back once per marking: the flag is cleared
 *   under the same hold of the lock as the successful write.
 *
 * Dead peers. A loader that dies leaves its slot LOADING: waiters sleep
 *   until their timeout or until the supervisor calls
 *   featbuf_mark_broken(). References of a dead process are never dropped;
 *   the run is torn down anyway. */
#include "stages/featbuf.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "ipc/futex.h"
#include "stages/featbuf_int.h"

#define PAGE 4096u
#define POLICY_BYTES_MAX (1ull << 48)

void fb_set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- layout ------------------------------------------------------------ */

struct layout {
    uint64_t stride, slots_off, policy_off, policy_bytes, pins_off, map_off, rows_off, total;
    const struct featbuf_policy_ops *ops;
};

static int plan(const struct featbuf_params *p, struct layout *l, char *err, size_t errlen)
{
    if (!p || p->nslots == 0 || p->nslots > FEATBUF_SLOTS_MAX || p->n_nodes == 0 || p->row_bytes == 0 ||
        p->pin_slots >= p->nslots) {
        fb_set_err(err, errlen, "feature buffer: bad parameters (need 1..%u slots, nodes > 0, row bytes > 0, "
                   "fewer pinnable slots than slots); check the [buffer] section of the config", FEATBUF_SLOTS_MAX);
        return -EINVAL;
    }
    if (p->policy == FEATBUF_POLICY_LOOKAHEAD &&
        (p->window == 0 || p->window > FEATBUF_WINDOW_MAX || p->hint_entries == 0 ||
         p->hint_entries >= UINT32_MAX || p->n_nodes >= UINT32_MAX)) {
        fb_set_err(err, errlen, "feature buffer: the lookahead policy needs a window of 1..%u batches, "
                   "1..%u hint records and fewer than 2^32 - 1 nodes, not %u, %llu and %llu; check "
                   "pipeline.lookahead (or use pipeline.cache_policy = \"lru\")", FEATBUF_WINDOW_MAX,
                   UINT32_MAX - 1, p->window, (unsigned long long)p->hint_entries,
                   (unsigned long long)p->n_nodes);
        return -EINVAL;
    }
    l->ops = featbuf_policy_find(p->policy);
    if (!l->ops) {
        fb_set_err(err, errlen, "feature buffer: eviction policy %u is unknown to this process; register it "
                   "(featbuf_policy_register) before creating or attaching", p->policy);
        return -EINVAL;
    }
    uint64_t align = p->row_align ? p->row_align : FEATBUF_ROW_ALIGN_DEFAULT;
    if (align & (align - 1)) {
        fb_set_err(err, errlen, "feature buffer: row alignment %zu is not a power of two", p->row_align);
        return -EINVAL;
    }
    uint64_t v, map_bytes, rows_bytes = 0;
    l->stride = sl_round_up(p->row_bytes, align);
    l->slots_off = sl_round_up(sizeof(struct featbuf_hdr), 64);
    if (sl_mul_ovf(p->nslots, sizeof(struct featbuf_slot), &v) || sl_add_ovf(l->slots_off, v, &v))
        goto ovf;
    l->policy_off = sl_round_up(v, 64);
    l->policy_bytes = l->ops->region_size(p);
    if (l->policy_bytes > POLICY_BYTES_MAX || sl_add_ovf(l->policy_off, l->policy_bytes, &v))
        goto ovf;
    l->pins_off = 0;
    if (p->pin_slots) {
        l->pins_off = sl_round_up(v, 64);
        if (sl_add_ovf(l->pins_off, (p->n_nodes + 63) / 64 * sizeof(uint64_t), &v))
            goto ovf;
    }
    l->map_off = sl_round_up(v, 64);
    if (sl_mul_ovf(p->n_nodes, sizeof(uint32_t), &map_bytes) || sl_add_ovf(l->map_off, map_bytes, &v) ||
        v > UINT64_MAX - PAGE)
        goto ovf;
    l->rows_off = 0;
    l->total = v;
    if (!p->rows_on_device) {
        l->rows_off = sl_round_up(v, PAGE);
        if (l->stride < p->row_bytes || sl_mul_ovf(p->nslots, l->stride, &rows_bytes) ||
            sl_add_ovf(l->rows_off, rows_bytes, &l->total))
            goto ovf;
    }
    if (l->total > SIZE_MAX)
        goto ovf;
    return 0;
ovf:
    fb_set_err(err, errlen, "feature buffer: %u slots x %zu-byte rows for %llu nodes overflows the address space; "
               "use fewer slots", p->nslots, p->row_bytes, (unsigned long long)p->n_nodes);
    return -ENOMEM;
}

size_t featbuf_mem_size(const struct featbuf_params *p)
{
    struct layout l;
    return plan(p, &l, NULL, 0) ? 0 : (size_t)l.total;
}

size_t featbuf_map_bytes(const struct featbuf_params *p)
{
    uint64_t v;
    if (!p || sl_mul_ovf(p->n_nodes, sizeof(uint32_t), &v) || v > SIZE_MAX)
        return 0;
    return (size_t)v;
}

/* Points fb's arrays into mem laid out as l (sizes already checked). */
static void point(struct featbuf *fb, unsigned char *base, const struct layout *l, uint64_t n_nodes,
                  uint32_t nslots, uint32_t pin_slots)
{
    fb->hdr = (struct featbuf_hdr *)base;
    fb->slots = (struct featbuf_slot *)(base + l->slots_off);
    fb->policy_mem = l->policy_bytes ? base + l->policy_off : NULL;
    fb->pins = l->pins_off ? (uint64_t *)(base + l->pins_off) : NULL;
    fb->map = (uint32_t *)(base + l->map_off);
    fb->rows = l->rows_off ? base + l->rows_off : NULL;
    fb->stride = (size_t)l->stride;
    fb->nslots = nslots;
    fb->pin_slots = pin_slots;
    fb->n_nodes = n_nodes;
    fb->policy = l->ops;
}

int featbuf_mem_format(void *mem, size_t len, const struct featbuf_params *p, char *err, size_t errlen)
{
    struct layout l;
    int rc = plan(p, &l, err, errlen);
    if (rc)
        return rc;
    if (!mem || len < l.total || ((uintptr_t)mem % PAGE)) {
        fb_set_err(err, errlen, "feature buffer: needs %llu bytes of page-aligned memory, got %zu",
                   (unsigned long long)l.total, len);
        return -EINVAL;
    }
    unsigned char *base = mem;
    struct featbuf_hdr *h = mem;
    memset(h, 0, sizeof *h);
    h->version = FEATBUF_VERSION;
    h->nslots = p->nslots;
    h->n_nodes = p->n_nodes;
    h->row_bytes = p->row_bytes;
    h->stride = l.stride;
    h->slots_off = l.slots_off;
    h->policy_off = l.policy_off;
    h->policy_bytes = l.policy_bytes;
    h->pins_off = l.pins_off;
    h->map_off = l.map_off;
    h->rows_off = l.rows_off;
    h->total = l.total;
    h->policy = p->policy;
    h->pin_slots = p->pin_slots;
    h->window = p->window;
    h->hint_entries = p->hint_entries;

    pthread_mutexattr_t ma;
    if ((rc = pthread_mutexattr_init(&ma)) != 0)
        goto mutex_err;
    if ((rc = pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED)) == 0 &&
        (rc = pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST)) == 0)
        rc = pthread_mutex_init(&h->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    if (rc)
        goto mutex_err;

    struct featbuf_slot *slots = (struct featbuf_slot *)(base + l.slots_off);
    for (uint32_t i = 0; i < p->nslots; i++) {
        slots[i].node = FEATBUF_NONE;
        slots[i].refs = 0;
        atomic_init(&slots[i].state, FEATBUF_INVALID);
        atomic_init(&slots[i].waiters, 0);
        slots[i].standby = 1;
        slots[i].dirty = 0;
        slots[i].reserved0 = 0;
    }
    h->standby = p->nslots;
    if (l.pins_off)
        memset(base + l.pins_off, 0, (size_t)((p->n_nodes + 63) / 64 * sizeof(uint64_t)));
    memset(base + l.map_off, 0xff, (size_t)(p->n_nodes * sizeof(uint32_t))); /* FEATBUF_ABSENT */
    /* the policy's init, through a handle on this memory alone */
    struct featbuf tmp = {0};
    point(&tmp, base, &l, p->n_nodes, p->nslots, p->pin_slots);
    tmp.row_bytes = p->row_bytes;
    l.ops->init(&tmp);
    atomic_store_explicit(&h->magic, FEATBUF_MAGIC, memory_order_release);
    return 0;
mutex_err:
    fb_set_err(err, errlen, "feature buffer: cannot make a process-shared robust mutex: %s", strerror(rc));
    return -rc;
}

/* Binds fb to mem, keeping fb->seg (create and attach map first). The
 * header's sizes are read once, checked against the layout they imply and
 * against len, and only the checked copies are used. */
static int bind_mem(struct featbuf *fb, void *mem, size_t len, char *err, size_t errlen)
{
    struct shm_seg keep = fb->seg;
    memset(fb, 0, sizeof *fb);
    fb->seg = keep;
    struct featbuf_hdr *h = mem;
    if (!mem || len < sizeof *h || atomic_load_explicit(&h->magic, memory_order_acquire) != FEATBUF_MAGIC ||
        h->version != FEATBUF_VERSION) {
        fb_set_err(err, errlen, "feature buffer: memory is not a version %u feature buffer; recreate the run",
                   FEATBUF_VERSION);
        return -EINVAL;
    }
    const volatile struct featbuf_hdr *vh = h;
    const uint64_t n_nodes = vh->n_nodes, row_bytes = vh->row_bytes, stride = vh->stride, rows_off = vh->rows_off,
                   total = vh->total, slots_off = vh->slots_off, map_off = vh->map_off, policy_off = vh->policy_off,
                   policy_bytes = vh->policy_bytes, pins_off = vh->pins_off;
    const uint32_t nslots = vh->nslots, policy = vh->policy, pin_slots = vh->pin_slots, window = vh->window;
    const uint64_t hint_entries = vh->hint_entries;
    struct featbuf_params p = {.n_nodes = n_nodes, .nslots = nslots, .row_bytes = (size_t)row_bytes,
                               .row_align = 1, .rows_on_device = rows_off == 0, .policy = policy,
                               .pin_slots = pin_slots, .window = window, .hint_entries = hint_entries};
    if (policy < FEATBUF_POLICY_IDS && !featbuf_policy_find(policy)) {
        fb_set_err(err, errlen, "feature buffer: its eviction policy %u is unknown to this process; register it "
                   "(featbuf_policy_register) before attaching", policy);
        return -EINVAL;
    }
    struct layout l;
    /* Where the last array ends: the node map (rows on the device: l.total
     * of that layout) or the rows at the header's stride. It must lie
     * within the header's total, and that within the memory really there. */
    uint64_t rows_bytes = 0, end = 0;
    bool bad = row_bytes > SIZE_MAX || plan(&p, &l, NULL, 0) || slots_off != l.slots_off || map_off != l.map_off ||
               policy_off != l.policy_off || policy_bytes != l.policy_bytes || pins_off != l.pins_off ||
               stride < row_bytes || stride > SIZE_MAX || (rows_off && rows_off != l.rows_off);
    if (!bad && rows_off == 0)
        end = l.total;
    else if (!bad)
        bad = sl_mul_ovf(nslots, stride, &rows_bytes) || sl_add_ovf(rows_off, rows_bytes, &end);
    if (bad || end > total || total > len) {
        fb_set_err(err, errlen, "feature buffer: header sizes do not match its %zu bytes; the segment is damaged",
                   len);
        return -EINVAL;
    }
    l.stride = stride;
    l.rows_off = rows_off;
    point(fb, mem, &l, n_nodes, nslots, pin_slots);
    fb->row_bytes = (size_t)row_bytes;
    return 0;
}

int featbuf_init(struct featbuf *fb, void *mem, size_t len, char *err, size_t errlen)
{
    memset(fb, 0, sizeof *fb); /* memory the caller owns: no segment to unmap later */
    return bind_mem(fb, mem, len, err, errlen);
}
int featbuf_create(struct featbuf *fb, const char *run_id, const char *object, const struct featbuf_params *p,
                   char *err, size_t errlen)
{
    memset(fb, 0, sizeof *fb);
    size_t need = featbuf_mem_size(p);
    if (need == 0) {
        struct layout l;
        return plan(p, &l, err, errlen); /* reports the bad parameters */
    }
    int rc = shm_seg_create(&fb->seg, run_id, object, SHM_KIND_FEATBUF, need, err, errlen);
    if (rc)
        return rc;
    rc = featbuf_mem_format(fb->seg.data, fb->seg.data_size, p, err, errlen);
    if (rc == 0)
        rc = bind_mem(fb, fb->seg.data, fb->seg.data_size, err, errlen);
    if (rc) {
        char name[SHM_NAME_MAX];
        memcpy(name, fb->seg.name, sizeof name);
        featbuf_free(fb);
        shm_seg_unlink(name);
    }
    return rc;
}

int featbuf_attach(struct featbuf *fb, const char *name, char *err, size_t errlen)
{
    memset(fb, 0, sizeof *fb);
    int rc = shm_seg_attach(&fb->seg, name, SHM_KIND_FEATBUF, 0, err, errlen);
    if (rc == 0)
        rc = bind_mem(fb, fb->seg.data, fb->seg.data_size, err, errlen);
    if (rc)
        featbuf_free(fb);
    return rc;
}

void featbuf_free(struct featbuf *fb)
{
    if (!fb)
        return;
    shm_seg_detach(&fb->seg);
    memset(fb, 0, sizeof *fb);
}

/* ---- locking ----------------------------------------------------------- */

static bool is_broken(const struct featbuf *fb)
{
    return atomic_load_explicit(&fb->hdr->broken, memory_order_acquire) != 0;
}

void featbuf_mark_broken(struct featbuf *fb)
{
    atomic_store_explicit(&fb->hdr->broken, 1, memory_order_seq_cst);
    for (uint32_t i = 0; i < fb->nslots; i++) {
        struct featbuf_slot *x = &fb->slots[i];
        uint32_t st = atomic_load_explicit(&x->state, memory_order_relaxed);
        while ((st & FB_STATE_MASK) == FEATBUF_LOADING && !(st & FB_STATE_BROKEN) &&
               !atomic_compare_exchange_weak_explicit(&x->state, &st, st | FB_STATE_BROKEN, memory_order_seq_cst,
                                                      memory_order_relaxed))
            ;
        if (atomic_load_explicit(&x->waiters, memory_order_seq_cst))
            futex_wake(&x->state, INT_MAX);
    }
    atomic_fetch_add_explicit(&fb->hdr->standby_seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&fb->hdr->standby_waiters, memory_order_seq_cst))
        futex_wake(&fb->hdr->standby_seq, INT_MAX);
    fb_device_broken(fb);
}

/* What pthread_mutex_lock or _trylock returned (rc) made into 0 with the
 * lock held, or -EPIPE (broken; the lock is not held). */
static int lock_taken(struct featbuf *fb, int rc)
{
    if (rc == EOWNERDEAD) {
        featbuf_mark_broken(fb);
        pthread_mutex_consistent(&fb->hdr->lock);
        pthread_mutex_unlock(&fb->hdr->lock);
        return -EPIPE;
    }
    if (rc) {
        featbuf_mark_broken(fb); /* ENOTRECOVERABLE: someone saw EOWNERDEAD before */
        return -EPIPE;
    }
    if (is_broken(fb)) {
        pthread_mutex_unlock(&fb->hdr->lock);
        return -EPIPE;
    }
    return 0;
}

int fb_lock(struct featbuf *fb)
{
    if (is_broken(fb))
        return -EPIPE;
    return lock_taken(fb, pthread_mutex_lock(&fb->hdr->lock));
}

void fb_unlock(struct featbuf *fb) { pthread_mutex_unlock(&fb->hdr->lock); }

/* ---- debug checks ------------------------------------------------------ */

#ifdef SLUICE_DEBUG
#include <stdlib.h>
/* O(1) checks of one slot after an operation on it (lock held). */
static void debug_slot(struct featbuf *fb, uint32_t s)
{
    struct featbuf_slot *x = &fb->slots[s];
    uint32_t st = atomic_load_explicit(&x->state, memory_order_relaxed) & FB_STATE_MASK;
    bool ok = (x->refs == 0 && !fb_node_pinned(fb, x->node)) == (x->standby != 0) &&
              (x->node == FEATBUF_NONE ? st == FEATBUF_INVALID
                                       : x->node < fb->n_nodes && fb->map[x->node] == s && st != FEATBUF_INVALID) &&
              (st != FEATBUF_LOADING || x->refs > 0) && (!x->dirty || st == FEATBUF_VALID);
    if (!ok) {
        fprintf(stderr, "featbuf: invariant broken at slot %u (node %llu refs %u state %u standby %u dirty %u)\n", s,
                (unsigned long long)x->node, x->refs, st, x->standby, x->dirty);
        abort();
    }
}
#define DEBUG_SLOT(fb, s) debug_slot(fb, s)
#else
#define DEBUG_SLOT(fb, s) ((void)0)
#endif

/* ---- standby (lock held) ------------------------------------------------ */

void fb_slot_put(struct featbuf *fb, uint32_t s)
{
    struct featbuf_slot *x = &fb->slots[s];
    if (fb_node_pinned(fb, x->node))
        return; /* held by its pin */
    x->standby = 1;
    fb->hdr->standby++;
    fb->policy->put(fb, s, x->node != FEATBUF_NONE);
}

void fb_slot_take(struct featbuf *fb, uint32_t s)
{
    fb->slots[s].standby = 0;
    fb->hdr->standby--;
    fb->policy->take(fb, s);
}

/* The policy's victim, off standby: a slot index, or FEATBUF_NO_SLOT. A
 * policy that names a slot not on standby has broken the buffer. */
static uint32_t slot_victim(struct featbuf *fb)
{
    uint32_t s = fb->policy->victim(fb);
    if (s == FEATBUF_NO_SLOT)
        return s;
    if (s >= fb->nslots || !fb->slots[s].standby) {
        fprintf(stderr, "featbuf: policy %s chose slot %u, which is not on standby\n", fb->policy->name, s);
        featbuf_mark_broken(fb);
        return FEATBUF_NO_SLOT;
    }
    fb->slots[s].standby = 0;
    fb->hdr->standby--;
    return s;
}

int fb_write_back(struct featbuf *fb, uint32_t s)
{
    struct featbuf_slot *x = &fb->slots[s];
    if (!fb->writeback)
        return -EINVAL;
    int rc = fb->writeback(fb->writeback_ctx, x->node, s, featbuf_row(fb, s), fb->row_bytes);
    if (rc)
        return rc < 0 ? rc : -EIO;
    x->dirty = 0;
    fb->hdr->writebacks++;
    return 0;
}

void fb_standby_wake(struct featbuf *fb)
{
    atomic_fetch_add_explicit(&fb->hdr->standby_seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&fb->hdr->standby_waiters, memory_order_seq_cst))
        futex_wake(&fb->hdr->standby_seq, INT_MAX);
}

/* ---- acquire / release (lock held) -------------------------------------- */

static int acquire_locked(struct featbuf *fb, uint64_t node, uint32_t *slot, uint8_t *action)
{
    struct featbuf_hdr *h = fb->hdr;
    if (node >= fb->n_nodes)
        return -EINVAL;
    uint32_t s = fb->map[node];
    if (s != FEATBUF_ABSENT) {
        struct featbuf_slot *x = &fb->slots[s];
        if (x->refs++ == 0 && x->standby)
            fb_slot_take(fb, s);
        uint32_t st = atomic_load_explicit(&x->state, memory_order_acquire) & FB_STATE_MASK;
        if (st == FEATBUF_VALID) {
            *action = FEATBUF_HIT;
            h->hits++;
        } else {
            *action = FEATBUF_WAIT;
            h->waits++;
        }
        *slot = s;
        DEBUG_SLOT(fb, s);
        return 0;
    }
    s = slot_victim(fb);
    if (s == FEATBUF_NO_SLOT)
        return is_broken(fb) ? -EPIPE : -EAGAIN;
    struct featbuf_slot *x = &fb->slots[s];
    /* The row's last writer published it with featbuf_loaded (a release on
     * state); acquire that before the slot's memory goes to a new load.
     * The lock orders the two already, but through the trainer's and the
     * releaser's processes, which a thread sanitizer in this process does
     * not see (it reported the new load's copy as racing the old one). */
    (void)atomic_load_explicit(&x->state, memory_order_acquire);
    if (x->dirty) {
        int rc = fb_write_back(fb, s);
        if (rc) {
            fb_slot_put(fb, s); /* back on standby, still dirty */
            return rc;
        }
    }
    if (x->node != FEATBUF_NONE) {
        fb->map[x->node] = FEATBUF_ABSENT;
        h->evictions++;
    }
    x->node = node;
    x->refs = 1;
    fb->map[node] = s;
    atomic_store_explicit(&x->state, FEATBUF_LOADING, memory_order_relaxed);
    h->loads++;
    *slot = s;
    *action = FEATBUF_LOAD;
    DEBUG_SLOT(fb, s);
    return 0;
}

static int release_locked(struct featbuf *fb, uint32_t s)
{
    if (s >= fb->nslots)
        return -EINVAL;
    struct featbuf_slot *x = &fb->slots[s];
    uint32_t st = atomic_load_explicit(&x->state, memory_order_relaxed) & FB_STATE_MASK;
    if (x->refs == 0 || (x->refs == 1 && st == FEATBUF_LOADING))
        return -EINVAL;
    if (--x->refs == 0)
        fb_slot_put(fb, s);
    DEBUG_SLOT(fb, s);
    return 0;
}

/* Abandons a LOADING slot (lock held): node out of the map, INVALID. */
static void unload_locked(struct featbuf *fb, uint32_t s)
{
    struct featbuf_slot *x = &fb->slots[s];
    fb->map[x->node] = FEATBUF_ABSENT;
    x->node = FEATBUF_NONE;
    x->dirty = 0;
    atomic_store_explicit(&x->state, FEATBUF_INVALID, memory_order_seq_cst);
}
int featbuf_acquire(struct featbuf *fb, uint64_t node, uint32_t *slot, int *action)
{
    uint8_t t;
    int rc = featbuf_acquire_many(fb, &node, 1, slot, &t);
    if (rc == 0)
        *action = t;
    return rc;
}

int featbuf_acquire_many(struct featbuf *fb, const uint64_t *nodes, uint32_t n, uint32_t *slots, uint8_t *action)
{
    return featbuf_acquire_batch(fb, FEATBUF_NO_BATCH, nodes, n, slots, action);
}

int featbuf_acquire_batch(struct featbuf *fb, uint64_t batch, const uint64_t *nodes, uint32_t n, uint32_t *slots,
                          uint8_t *action)
{
    int rc = fb_lock(fb);
    if (rc)
        return rc;
    uint32_t i;
    for (i = 0; i < n; i++) {
        rc = acquire_locked(fb, nodes[i], &slots[i], &action[i]);
        if (rc)
            break;
    }
    if (rc) {
        /* undo in reverse, so a slot claimed and then waited on within the
         * batch drops its waiter reference before its loader's */
        while (i-- > 0) {
            if (action[i] == FEATBUF_LOAD) {
                unload_locked(fb, slots[i]);
                fb->hdr->loads--;
            } else if (action[i] == FEATBUF_HIT) {
                fb->hdr->hits--;
            } else {
                fb->hdr->waits--;
            }
            struct featbuf_slot *x = &fb->slots[slots[i]];
            if (--x->refs == 0)
                fb_slot_put(fb, slots[i]);
            DEBUG_SLOT(fb, slots[i]);
        }
    } else if (batch != FEATBUF_NO_BATCH && fb->policy->use) {
        for (i = 0; i < n; i++) /* once, when the whole batch holds its references */
            fb->policy->use(fb, batch, nodes[i]);
    }
    fb_unlock(fb);
    return rc;
}

/* Wakes the sleepers of slot after its state changed (seq_cst store). */
static void wake_slot(struct featbuf *fb, uint32_t s)
{
    if (atomic_load_explicit(&fb->slots[s].waiters, memory_order_seq_cst))
        futex_wake(&fb->slots[s].state, INT_MAX);
}

int featbuf_loaded(struct featbuf *fb, uint32_t slot)
{
    if (slot >= fb->nslots)
        return -EINVAL;
    uint32_t expect = FEATBUF_LOADING;
    if (!atomic_compare_exchange_strong_explicit(&fb->slots[slot].state, &expect, FEATBUF_VALID,
                                                 memory_order_seq_cst, memory_order_relaxed))
        return (expect & FB_STATE_BROKEN) || is_broken(fb) ? -EPIPE : -EINVAL;
    wake_slot(fb, slot);
    return 0;
}

int featbuf_load_failed(struct featbuf *fb, uint32_t slot)
{
    if (slot >= fb->nslots)
        return -EINVAL;
    int rc = fb_lock(fb);
    if (rc)
        return rc;
    struct featbuf_slot *x = &fb->slots[slot];
    if (atomic_load_explicit(&x->state, memory_order_relaxed) != FEATBUF_LOADING || x->refs == 0) {
        fb_unlock(fb);
        return -EINVAL;
    }
    unload_locked(fb, slot);
    fb->hdr->failed++;
    DEBUG_SLOT(fb, slot);
    fb_unlock(fb);
    wake_slot(fb, slot);
    return 0;
}

int featbuf_wait_valid(struct featbuf *fb, uint32_t slot, int timeout_ms)
{
    if (slot >= fb->nslots)
        return -EINVAL;
    struct featbuf_slot *x = &fb->slots[slot];
    struct timespec deadline;
    if (timeout_ms >= 0)
        futex_deadline(&deadline, timeout_ms);
    for (;;) {
        uint32_t st = atomic_load_explicit(&x->state, memory_order_acquire);
        if (is_broken(fb) || (st & FB_STATE_BROKEN))
            return -EPIPE;
        if (st == FEATBUF_VALID)
            return 0;
        if (st == FEATBUF_INVALID)
            return -EIO;
        atomic_fetch_add_explicit(&x->waiters, 1, memory_order_seq_cst);
        st = atomic_load_explicit(&x->state, memory_order_seq_cst);
        int rc = 0;
        if (st == FEATBUF_LOADING && !is_broken(fb))
            rc = futex_wait_until(&x->state, FEATBUF_LOADING, timeout_ms >= 0 ? &deadline : NULL);
        atomic_fetch_sub_explicit(&x->waiters, 1, memory_order_relaxed);
        if (rc == -ETIMEDOUT && atomic_load_explicit(&x->state, memory_order_acquire) == FEATBUF_LOADING)
            return -ETIMEDOUT;
    }
}

int featbuf_release(struct featbuf *fb, uint32_t slot) { return featbuf_release_many(fb, &slot, 1); }

int featbuf_release_many(struct featbuf *fb, const uint32_t *slots, uint32_t n)
{
    int rc = fb_lock(fb), first = 0;
    if (rc)
        return rc;
    uint32_t before = fb->hdr->standby;
    for (uint32_t i = 0; i < n; i++) {
        rc = release_locked(fb, slots[i]);
        if (rc && !first)
            first = rc; /* drop the rest anyway; report the first bad one */
    }
    bool freed = fb->hdr->standby != before;
    fb_unlock(fb);
    if (freed)
        fb_standby_wake(fb);
    return first;
}

uint32_t featbuf_standby_seq(struct featbuf *fb)
{
    return atomic_load_explicit(&fb->hdr->standby_seq, memory_order_seq_cst);
}

int featbuf_wait_standby(struct featbuf *fb, uint32_t seen, int timeout_ms)
{
    struct featbuf_hdr *h = fb->hdr;
    struct timespec deadline;
    if (timeout_ms >= 0)
        futex_deadline(&deadline, timeout_ms);
    for (;;) {
        if (is_broken(fb))
            return -EPIPE;
        if (atomic_load_explicit(&h->standby_seq, memory_order_seq_cst) != seen)
            return 0;
        atomic_fetch_add_explicit(&h->standby_waiters, 1, memory_order_seq_cst);
        int rc = 0;
        if (atomic_load_explicit(&h->standby_seq, memory_order_seq_cst) == seen && !is_broken(fb))
            rc = futex_wait_until(&h->standby_seq, seen, timeout_ms >= 0 ? &deadline : NULL);
        atomic_fetch_sub_explicit(&h->standby_waiters, 1, memory_order_relaxed);
        if (rc == -ETIMEDOUT && atomic_load_explicit(&h->standby_seq, memory_order_seq_cst) == seen)
            return -ETIMEDOUT;
    }
}

void *featbuf_row(const struct featbuf *fb, uint32_t slot)
{
    if (!fb->rows || slot >= fb->nslots)
        return NULL;
    return fb->rows + (size_t)slot * fb->stride;
}

uint32_t featbuf_lookup(struct featbuf *fb, uint64_t node)
{
    if (node >= fb->n_nodes || fb_lock(fb))
        return FEATBUF_ABSENT;
    uint32_t s = fb->map[node];
    fb_unlock(fb);
    return s;
}

static void stats_locked(struct featbuf *fb, struct featbuf_stats *out)
{
    struct featbuf_hdr *h = fb->hdr;
    uint64_t rh = atomic_load_explicit(&h->resident_hits, memory_order_relaxed);
    *out = (struct featbuf_stats){.hits = h->hits + rh, .waits = h->waits, .loads = h->loads,
                                  .evictions = h->evictions, .failed = h->failed, .standby = h->standby,
                                  .writebacks = h->writebacks, .pinned = h->pinned};
}

int featbuf_stats_try(struct featbuf *fb, struct featbuf_stats *out)
{
    if (is_broken(fb))
        return -EPIPE;
    int rc = pthread_mutex_trylock(&fb->hdr->lock);
    if (rc == EBUSY)
        return -EBUSY;
    if ((rc = lock_taken(fb, rc)) != 0)
        return rc;
    stats_locked(fb, out);
    fb_unlock(fb);
    return 0;
}

int featbuf_stats(struct featbuf *fb, struct featbuf_stats *out)
{
    int rc = fb_lock(fb);
    if (rc)
        return rc;
    stats_locked(fb, out);
    fb_unlock(fb);
    return 0;
}
