/* featbuf_policy.h - the feature buffer's policy table (DESIGN.md section
 * 10): which unreferenced slot to reuse, and what a policy may be told
 * about future use. The protocol core (featbuf.c) owns the slots, the map,
 * the lock, pins and dirty rows; a policy owns one region of the buffer's
 * shared memory and the order of the slots on standby in it.
 *
 * Choosing a policy. struct featbuf_params.policy holds its id (0: LRU);
 * the creator stores it in the shared header, and every process that binds
 * (featbuf_init / featbuf_attach) looks the id up in its own registry:
 * function pointers differ between processes, ids do not. Ids below
 * FEATBUF_POLICY_USER are built in; others are registered per process with
 * featbuf_policy_register() before the first create or bind that uses them
 * (every process of the run must register the same table under the same
 * id, or binding fails with -EINVAL).
 *
 * Contract of a table. The core calls every function with the buffer's
 * lock held (so they are serialised across all processes), never from a
 * signal handler, and never twice for the same event:
 *   region_size(p)   bytes the policy needs in shared memory for a buffer
 *                    of these parameters (may be 0; at most 2^48). Pure:
 *                    every process must compute the same value.
 *   init(fb)         lays out the region (featbuf_policy_region(fb),
 *                    64-byte aligned, not zeroed) once, at format time: every
 *                    slot is on standby, empty, as if put in order 0, 1, ...,
 *                    S-1. Called before any other process binds.
 *   put(fb, s, row)  slot s joined standby: its reference count reached 0
 *                    (or it was unpinned while unreferenced). row: it still
 *                    holds a valid row worth keeping (false: empty, reuse
 *                    it first).
 *   take(fb, s)      slot s left standby without being evicted: a new
 *                    reference on its row (a hit), or a pin.
 *   victim(fb)       picks a slot on standby, removes it from standby and
 *                    returns it; FEATBUF_NO_SLOT when standby is empty (the
 *                    only case it may return that). The core then writes
 *                    back the row if dirty and reuses the slot.
 *   hint(fb, batch, nodes, n)   optional (NULL: ignored): the nodes of
 *                    sampled batch `batch` that will be acquired later
 *                    (every id < n_nodes, duplicates possible). Batch numbers
 *                    of one run increase, but hints of several samplers may
 *                    interleave. Advice only: nothing may depend on it.
 *   use(fb, batch, node)        optional (NULL: ignored): batch `batch`
 *                    (featbuf_acquire_batch) now holds a reference on
 *                    node's slot; called once per node after the whole
 *                    batch was acquired (never for a failed one), so the
 *                    use a hint announced has come. Advice only too.
 *   check(fb, err, errlen)      optional: verifies the region against the
 *                    core (featbuf_check calls it): exactly the slots for
 *                    which featbuf_slot_on_standby() is true are in it.
 *                    0 or -EUCLEAN with what is wrong in err (never NULL,
 *                    errlen >= 1).
 * Slots on standby are exactly those with no reference that are not held
 * by a pin; the core keeps that set and its size (featbuf_slot_on_standby,
 * struct featbuf_stats.standby); put / take / victim tell the policy each
 * change of it, so the policy only orders it. A policy never sees pinned
 * slots, never changes a slot's node, state or references, and never calls
 * the public featbuf_* functions (they take the lock). What it keeps in
 * its region must be valid after any prefix of its own calls: a process
 * dying in one of them breaks the whole buffer (EOWNERDEAD), so nothing
 * is repaired later. */
#ifndef SLUICE_STAGES_FEATBUF_POLICY_H
#define SLUICE_STAGES_FEATBUF_POLICY_H

#include "stages/featbuf.h"

#define FEATBUF_NO_SLOT UINT32_MAX /* victim(): standby is empty */

struct featbuf_policy_ops {
    const char *name;
    uint64_t (*region_size)(const struct featbuf_params *p);
    void (*init)(struct featbuf *fb);
    void (*put)(struct featbuf *fb, uint32_t slot, bool row);
    void (*take)(struct featbuf *fb, uint32_t slot);
    uint32_t (*victim)(struct featbuf *fb);
    void (*hint)(struct featbuf *fb, uint64_t batch, const uint64_t *nodes, uint32_t n);
    void (*use)(struct featbuf *fb, uint64_t batch, uint64_t node);
    int (*check)(struct featbuf *fb, char *err, size_t errlen);
};

/* The built-in tables. */
extern const struct featbuf_policy_ops featbuf_policy_lru;       /* featbuf_lru.c */
extern const struct featbuf_policy_ops featbuf_policy_lookahead; /* featbuf_lookahead.c */

/* Registers ops under id (FEATBUF_POLICY_USER .. FEATBUF_POLICY_IDS-1) in
 * this process; thread safe. 0, -EINVAL (id out of that range, or a
 * required function missing: region_size, init, put, take, victim) or
 * -EEXIST (another table holds the id). */
int featbuf_policy_register(uint32_t id, const struct featbuf_policy_ops *ops);

/* This process's table for id, or NULL. */
const struct featbuf_policy_ops *featbuf_policy_find(uint32_t id);

/* For policies, with the lock held (inside a call from the core). */
void *featbuf_policy_region(const struct featbuf *fb);               /* 64-byte aligned; NULL if size 0 */
uint64_t featbuf_slot_node(const struct featbuf *fb, uint32_t slot); /* FEATBUF_NONE when empty */
bool featbuf_slot_on_standby(const struct featbuf *fb, uint32_t slot);
uint32_t featbuf_node_slot(const struct featbuf *fb, uint64_t node); /* FEATBUF_ABSENT when not resident */
uint32_t featbuf_policy_window(const struct featbuf *fb);            /* struct featbuf_params.window */
uint64_t featbuf_policy_entries(const struct featbuf *fb);           /* struct featbuf_params.hint_entries */

/* The lookahead policy's count of hint records dropped because its log was
 * full (0 for other policies); read with the buffer quiet. */
uint64_t featbuf_lookahead_dropped(struct featbuf *fb);

/* Records the lookahead policy's hint log has free now (UINT64_MAX for
 * other policies; 0 when broken); takes the lock. A sampler announces a
 * batch only when it is likely to fit: a batch that does not fit loses its
 * announcements for good (the log never re-learns them). */
uint64_t featbuf_lookahead_room(struct featbuf *fb);

#endif
