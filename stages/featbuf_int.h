/* featbuf_int.h - the feature buffer's shared-memory records and the core
 * helpers that featbuf.c (the protocol) and featbuf_hooks.c (pins, dirty
 * rows, hints, checks, the policy registry) share. Private to those two
 * files (and to featbuf_lookahead.c's featbuf_lookahead_room, which takes
 * the lock); the protocol they follow is at the top of featbuf.c. */
#ifndef SLUICE_STAGES_FEATBUF_INT_H
#define SLUICE_STAGES_FEATBUF_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "stages/featbuf.h"
#include "stages/featbuf_policy.h"

#define FB_STATE_MASK 0x3u
#define FB_STATE_BROKEN 0x4u /* added to LOADING words by mark_broken */

/* The device record's futex word (featbuf_device.c): the state in the top
 * four bits, the broken bit, the number of importers in the low 24. */
#define FB_DEV_COUNT_MASK 0x00ffffffu
#define FB_DEV_BROKEN 0x01000000u
#define FB_DEV_STATE_SHIFT 28
#define FB_DEV_PUBLISHING 4u /* internal: the exporter is writing the record (NONE to readers) */

/* Where a GPU rank's rows are: the exporter's CUDA IPC handle and what an
 * importer needs besides it. Exactly FEATBUF_DEV_OFFSET bytes into the
 * buffer's memory, 128 bytes, whatever the CUDA headers say (the handle is
 * opaque bytes here). Written once by the exporter before the word says
 * READY (release); read by importers after they see READY (acquire). */
struct featbuf_dev {
    _Atomic uint32_t word;                          /* +0: state << 28 | FB_DEV_BROKEN | importers; futex word */
    _Atomic uint32_t waiters;                       /* +4: sleepers on word */
    int32_t device;                                 /* +8: the exporter's CUDA ordinal */
    int32_t exporter_pid;                           /* +12 */
    uint64_t bytes;                                 /* +16: bytes of the device allocation */
    uint64_t stride;                                /* +24: bytes between device rows: the header's stride */
    char pci_bus_id[FEATBUF_DEV_BUS_ID_BYTES];      /* +32: the device's PCI bus id, NUL terminated */
    unsigned char handle[FEATBUF_IPC_HANDLE_BYTES]; /* +64: cudaIpcMemHandle_t */
};

struct featbuf_hdr {
    _Atomic uint64_t magic; /* FEATBUF_MAGIC; stored last (release) */
    uint32_t version;
    uint32_t nslots;
    uint64_t n_nodes;
    uint64_t row_bytes;
    uint64_t stride;
    uint64_t slots_off; /* offsets from the start of the memory */
    uint64_t policy_off;
    uint64_t policy_bytes;
    uint64_t pins_off; /* 0 when pin_slots is 0 */
    uint64_t map_off;
    uint64_t rows_off; /* 0 when rows are on the device */
    uint64_t total;
    uint32_t policy;
    uint32_t pin_slots;
    uint32_t window; /* struct featbuf_params.window */
    uint32_t reserved1;
    uint64_t hint_entries; /* struct featbuf_params.hint_entries */
    _Alignas(64) struct featbuf_dev dev; /* at FEATBUF_DEV_OFFSET */
    _Alignas(64) pthread_mutex_t lock;
    _Atomic uint32_t broken;
    _Atomic uint32_t resident; /* featbuf_set_resident: every node VALID for good (featbuf_resident.c) */
    _Atomic uint64_t resident_hits; /* rows featbuf_lookup_resident served (counted in the stats' hits) */
    _Alignas(64) _Atomic uint32_t standby_seq; /* futex word: bumped when slots reach standby */
    _Atomic uint32_t standby_waiters;
    /* guarded by lock, on their own line */
    _Alignas(64) uint32_t standby; /* slots on standby */
    uint32_t pinned;               /* nodes pinned */
    uint64_t hits, waits, loads, evictions, failed, writebacks;
};

struct featbuf_slot {
    uint64_t node;          /* FEATBUF_NONE when it holds none (lock) */
    uint32_t refs;          /* references held (lock) */
    _Atomic uint32_t state; /* enum featbuf_state [+ FB_STATE_BROKEN]; futex word */
    _Atomic uint32_t waiters;
    uint8_t standby; /* on standby: known to the policy (lock) */
    uint8_t dirty;   /* row changed since loaded; write back before reuse (lock) */
    uint16_t reserved0;
};

_Static_assert(sizeof(struct featbuf_dev) == 128, "the device record is two cache lines");
_Static_assert(offsetof(struct featbuf_hdr, dev) == FEATBUF_DEV_OFFSET, "the device record's place is fixed");
_Static_assert(offsetof(struct featbuf_hdr, dev.handle) == FEATBUF_DEV_HANDLE_OFFSET, "the handle's place is fixed");

void fb_set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* 0 with the lock held, or -EPIPE (broken; the lock is not held). */
int fb_lock(struct featbuf *fb);
void fb_unlock(struct featbuf *fb);

/* Lock held. Whether node is pinned (false when pins are off). */
static inline bool fb_node_pinned(const struct featbuf *fb, uint64_t node)
{
    return fb->pins && node < fb->n_nodes && (fb->pins[node / 64] >> (node % 64) & 1u);
}

/* Lock held. Slot s became unreferenced (or unpinned): on standby unless
 * its node is pinned. */
void fb_slot_put(struct featbuf *fb, uint32_t s);

/* Lock held. Slot s, on standby, leaves it without being evicted. */
void fb_slot_take(struct featbuf *fb, uint32_t s);

/* Lock held. Writes back slot s's dirty row with this process's callback
 * and marks it clean: 0, -EINVAL (no callback) or its error. */
int fb_write_back(struct featbuf *fb, uint32_t s);

/* featbuf_mark_broken's part in the device record (featbuf_device.c): the
 * broken bit in its word, and a wake-up for its sleepers. */
void fb_device_broken(struct featbuf *fb);

/* After a change that put slots on standby, with the lock released: bumps
 * standby_seq and wakes featbuf_wait_standby sleepers. */
void fb_standby_wake(struct featbuf *fb);

#endif
