/* arena.h - the batch arena: a fixed number of equal-size slots in shared
 * memory with a shared free list (DESIGN.md section 3). A sampler takes a
 * free slot, writes one sampled batch into it and passes the slot index
 * down the pipeline through the rings; the releaser gives it back.
 *
 * Protocol. The creator (launcher) lays out the arena and puts every slot
 * index on the free list, which is a ring (ring.h) of uint32 indices whose
 * capacity is at least the number of slots, so a release never waits for
 * room (only, briefly, for a concurrent allocator to finish its pop). Each
 * slot also has a state word (FREE/USED) changed with a CAS on allocation
 * and release, which catches double releases and releases of free slots.
 * Ownership of a slot's bytes moves with its index: from arena_alloc to the
 * matching arena_release only the holder of the index (and whoever it
 * passes the index to through a ring) touches the slot. The ring's
 * release/acquire on push/pop orders a slot's previous use before its next.
 *
 * Dead processes: a slot held by a process that dies is not returned; the
 * run is torn down anyway (DESIGN.md section 8). arena_close() closes the
 * free list so that allocators blocked on an empty list return -EPIPE.
 *
 * Errors: 0 or -errno with a message in `err` (may be NULL). */
#ifndef SLUICE_IPC_ARENA_H
#define SLUICE_IPC_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "ipc/ring.h"
#include "ipc/shm.h"

#define ARENA_MAGIC 0x314e5241434c53ull /* "SLCARN1\0" little endian */
#define ARENA_VERSION 1u
#define ARENA_SLOTS_MAX (1u << 22)
#define ARENA_SLOT_ALIGN 64u /* slot stride alignment; the slot array is page aligned */

struct arena_hdr; /* in shared memory; private to arena.c */

struct arena_params {
    size_t slot_size; /* bytes per slot (rounded up to ARENA_SLOT_ALIGN) */
    uint32_t nslots;  /* 1..ARENA_SLOTS_MAX */
};

struct arena {
    struct arena_hdr *hdr;
    _Atomic uint32_t *state; /* (nslots) FREE/USED */
    unsigned char *slots;    /* (nslots, stride) */
    size_t stride;           /* bytes between slots */
    size_t slot_size;        /* usable bytes per slot, as asked */
    uint32_t nslots;
    struct ring free;   /* free list of slot indices */
    struct shm_seg seg; /* the mapping, when created or attached by name */
};

/* Bytes of memory an arena needs; 0 for invalid parameters. */
size_t arena_mem_size(const struct arena_params *p);

/* Lays out an arena with every slot free in len bytes of page-aligned
 * memory. 0 or -EINVAL. */
int arena_mem_format(void *mem, size_t len, const struct arena_params *p, char *err, size_t errlen);

/* Binds a to an arena formatted in mem: 0 or -EINVAL. */
int arena_init(struct arena *a, void *mem, size_t len, char *err, size_t errlen);

/* Creates the segment /sluice.<run_id>.<object> holding a new arena. */
int arena_create(struct arena *a, const char *run_id, const char *object, const struct arena_params *p, char *err,
                 size_t errlen);

/* Attaches to an arena by name. */
int arena_attach(struct arena *a, const char *name, char *err, size_t errlen);

/* Unmaps (never unlinks). Accepts NULL and zeroed handles. */
void arena_free(struct arena *a);

/* Takes a free slot into *slot. Blocks while none is free (timeout_ms as
 * in ring.h). 0, -EPIPE (arena closed), -EAGAIN, -ETIMEDOUT, -EINTR, or
 * -EIO if the free list handed out a slot in use (damaged arena). */
int arena_alloc(struct arena *a, uint32_t *slot, int timeout_ms);

/* Gives slot back. Does not wait for room; it may wait while an allocator
 * is in the middle of its pop at the same ring slot (a few instructions,
 * or until arena_close if that allocator died there). 0; -EINVAL if slot
 * is out of range or not in use (double release); -EPIPE if the arena is
 * closed. */
int arena_release(struct arena *a, uint32_t slot);

/* Start of a slot's bytes (slot_size usable, ARENA_SLOT_ALIGN aligned),
 * or NULL if slot is out of range. */
void *arena_slot(const struct arena *a, uint32_t slot);

/* Slots on the free list now (a snapshot). */
uint32_t arena_available(const struct arena *a);

/* Closes the free list: blocked and later allocations return -EPIPE. */
void arena_close(struct arena *a);

#endif
