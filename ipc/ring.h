/* ring.h - bounded multi-producer multi-consumer queue of fixed-size
 * entries in shared memory, usable across processes.
 *
 * Stages exchange small descriptors (an index into the batch arena) through
 * these rings (DESIGN.md sections 2 and 3). The fast path is lock-free; a
 * push into a full ring or a pop from an empty one sleeps on a futex in the
 * shared memory until a peer makes room or data, the ring is closed, or the
 * timeout passes. Nothing spins or sleeps in a loop. The protocol (who
 * writes what, memory ordering, what a dead peer leaves behind) is at the
 * top of ring.c.
 *
 * Lifetime. The launcher creates a ring (ring_create: a segment of kind
 * SHM_KIND_RING, or ring_mem_format + ring_init inside memory it owns);
 * stages ring_attach() by name. ring_free() unmaps but never unlinks: the
 * launcher removes the segment. A ring is closed once (ring_close, or the
 * last of `producers` calling ring_producer_done) and stays closed.
 *
 * Delivery guarantee. A push that returns 0 is delivered exactly once to
 * some pop that returns 0, provided consumers keep popping until -EPIPE and
 * no consumer dies holding it. A push that returns an error delivers
 * nothing. Entries from one producer reach any one consumer in push order.
 *
 * Full and empty. A push waits while the slot at the next position still
 * holds an entry: normally because the ring holds `capacity` entries, but
 * also when a consumer a whole lap behind has claimed that slot and not yet
 * finished its pop (it was preempted or died there) - the ring may then
 * hold fewer entries. Symmetrically a pop waits at a position whose
 * producer has claimed it and not yet published, even if entries behind it
 * are ready. ring_count() counts claimed positions, not ready entries.
 *
 * Timeouts (timeout_ms): RING_FOREVER (-1) waits until success or close;
 * 0 never waits and returns -EAGAIN instead; > 0 waits at most that long and
 * then returns -ETIMEDOUT, so a supervisor-aware stage can look up from a
 * queue whose peer has died. A signal handler installed without SA_RESTART
 * makes a waiting call return -EINTR.
 *
 * Calls on one struct ring handle may come from many threads at once;
 * ring_free and ring_init/attach must not race with them. */
#ifndef SLUICE_IPC_RING_H
#define SLUICE_IPC_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/shm.h"

#define RING_MAGIC 0x31474e4952434c53ull /* "SLCRING1" little endian */
#define RING_VERSION 1u
#define RING_ENTRY_MAX 4096u         /* largest entry, bytes */
#define RING_CAPACITY_MAX (1u << 24) /* most entries in one ring */
#define RING_FOREVER (-1)

struct ring_shared; /* the part in shared memory; private to ring.c */

/* Shape of a ring, fixed at creation. */
struct ring_params {
    uint32_t entry_size; /* bytes per entry, 1..RING_ENTRY_MAX */
    uint32_t capacity;   /* entries; a power of two, 2..RING_CAPACITY_MAX */
    uint32_t producers;  /* producers that will call ring_producer_done(); 0 = close explicitly */
};

/* One process's handle. Fields are read-only for callers. */
struct ring {
    struct ring_shared *sh; /* control block in shared memory */
    unsigned char *slots;   /* slot array in shared memory */
    uint64_t mask;          /* capacity - 1 */
    uint32_t entry_size;
    uint32_t stride; /* bytes per slot: sequence word + entry, 8-aligned */
    uint32_t capacity;
    struct shm_seg seg; /* the mapping, when created or attached by name */
};

/* A claimed slot between ring_push_start/finish or ring_pop_start/finish. */
struct ring_ticket {
    uint64_t pos; /* position in the ring's sequence of entries */
    void *entry;  /* entry_size bytes inside the slot */
};

/* Bytes of memory a ring of these parameters needs (control block plus
 * slots); 0 if the parameters are invalid. */
size_t ring_mem_size(const struct ring_params *p);

/* Lays out an empty ring in len bytes of zero- or garbage-filled memory
 * that is 128-byte aligned and not yet in use. 0, or -EINVAL with a message
 * (bad parameters, too little memory). */
int ring_mem_format(void *mem, size_t len, const struct ring_params *p, char *err, size_t errlen);

/* Binds a handle to a ring formatted in mem (by any process), checking its
 * control block: 0 or -EINVAL with a message. ring_free() is still to be
 * called but unmaps nothing. */
int ring_init(struct ring *r, void *mem, size_t len, char *err, size_t errlen);

/* Creates the segment /sluice.<run_id>.<object>, formats a ring in it and
 * binds r. Errors as shm_seg_create and ring_mem_format. */
int ring_create(struct ring *r, const char *run_id, const char *object, const struct ring_params *p, char *err,
                size_t errlen);

/* Attaches to a ring segment by full name and binds r. Errors as
 * shm_seg_attach and ring_init. */
int ring_attach(struct ring *r, const char *name, char *err, size_t errlen);

/* Releases the handle (unmapping a segment it attached or created, never
 * unlinking it). Accepts NULL and zeroed or half-built handles. */
void ring_free(struct ring *r);

/* Copies entry_size bytes from entry into the ring. Blocks while the ring
 * is full (see timeouts above). 0; -EPIPE if the ring is closed (also when
 * it is closed while this push is in flight and its entry was dropped);
 * -EAGAIN, -ETIMEDOUT, -EINTR as above. */
int ring_push(struct ring *r, const void *entry, int timeout_ms);

/* Copies the oldest available entry into entry (entry_size bytes). Blocks
 * while the ring is empty. 0; -EPIPE once the ring is closed and every
 * entry pushed before the close has been popped (end of stream);
 * -EAGAIN, -ETIMEDOUT, -EINTR as above. */
int ring_pop(struct ring *r, void *entry, int timeout_ms);

/* Zero-copy halves of push and pop. *_start claims a slot (blocking as
 * push/pop do) and points t->entry at it; the caller fills or reads the
 * entry and must call *_finish promptly: until then the slot holds up
 * consumers (push) or producers (pop) that reach its position.
 * ring_push_finish returns -EPIPE if the ring was closed meanwhile and a
 * consumer dropped the unfinished slot (the entry is not delivered). */
int ring_push_start(struct ring *r, struct ring_ticket *t, int timeout_ms);
int ring_push_finish(struct ring *r, const struct ring_ticket *t);
int ring_pop_start(struct ring *r, struct ring_ticket *t, int timeout_ms);
void ring_pop_finish(struct ring *r, const struct ring_ticket *t);

/* Closes the ring: pushes fail with -EPIPE from now on, pops return what is
 * left and then -EPIPE, and every sleeping caller in every process is
 * woken. Idempotent; never blocks. Safe to call from a supervisor that
 * does not push or pop. */
void ring_close(struct ring *r);

/* A producer announces it will push no more; the last of the `producers`
 * given at creation closes the ring. 0, or -EINVAL if more producers call
 * it than were declared. */
int ring_producer_done(struct ring *r);

bool ring_is_closed(const struct ring *r);

/* Entries pushed and not yet popped (a snapshot; exact when idle). */
uint64_t ring_count(const struct ring *r);

#endif
