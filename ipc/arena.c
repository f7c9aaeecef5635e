/* arena.c - batch arena: fixed-size slots with a free list that is a ring
 * of slot indices (protocol in arena.h).
 *
 * Layout in memory (page aligned):
 *     0                    struct arena_hdr (one 128-byte block)
 *     state_off            _Atomic uint32_t state[nslots]
 *     ring_off             free-list ring (128-byte aligned)
 *     slots_off            nslots x stride bytes (page aligned) */
#include "ipc/arena.h"

#include <errno.h>
#include <inttypes.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <string.h>

#include "core/util.h"

#define ARENA_PAGE 4096u

enum { SLOT_FREE = 0, SLOT_USED = 1 };

struct arena_hdr {
    alignas(128) _Atomic uint64_t magic; /* ARENA_MAGIC, stored last (release) */
    uint32_t version;
    uint32_t nslots;
    uint64_t slot_size;
    uint64_t stride;
    uint64_t state_off, ring_off, slots_off, mem_size;
};

_Static_assert(sizeof(struct arena_hdr) == 128, "arena header is one block");

struct layout {
    struct ring_params ring;
    uint64_t stride, state_off, ring_off, slots_off, size;
};

/* Computes the layout; false if the parameters are invalid or overflow. */
static bool plan(const struct arena_params *p, struct layout *l)
{
    if (!p || p->slot_size == 0 || p->nslots == 0 || p->nslots > ARENA_SLOTS_MAX)
        return false;
    l->ring =
        (struct ring_params){.entry_size = sizeof(uint32_t), .capacity = (uint32_t)sl_pow2_at_least(p->nslots, 2)};
    l->stride = sl_round_up(p->slot_size, ARENA_SLOT_ALIGN);
    if (l->stride < p->slot_size)
        return false;
    l->state_off = sizeof(struct arena_hdr);
    l->ring_off = sl_round_up(l->state_off + (uint64_t)p->nslots * sizeof(uint32_t), 128);
    l->slots_off = sl_round_up(l->ring_off + ring_mem_size(&l->ring), ARENA_PAGE);
    uint64_t bytes;
    if (sl_mul_ovf(l->stride, p->nslots, &bytes) || sl_add_ovf(l->slots_off, bytes, &l->size) ||
        l->size > (uint64_t)SIZE_MAX / 2)
        return false;
    return true;
}

size_t arena_mem_size(const struct arena_params *p)
{
    struct layout l;
    return plan(p, &l) ? (size_t)l.size : 0;
}

int arena_mem_format(void *mem, size_t len, const struct arena_params *p, char *err, size_t errlen)
{
    struct layout l;
    if (!plan(p, &l))
        return sl_errf(err, errlen, -EINVAL,
                       "arena: %" PRIu32 " slots of %zu bytes is not a valid arena (1..%u "
                       "slots, nonzero size)",
                       p ? p->nslots : 0, p ? p->slot_size : 0, ARENA_SLOTS_MAX);
    if (!mem || (uintptr_t)mem % ARENA_PAGE != 0 || len < l.size)
        return sl_errf(err, errlen, -EINVAL, "arena: need %" PRIu64 " bytes, page aligned; got %zu at %p", l.size, len,
                       mem);
    unsigned char *base = mem;
    struct arena_hdr *h = mem;
    memset(h, 0, sizeof *h);
    h->version = ARENA_VERSION;
    h->nslots = p->nslots;
    h->slot_size = p->slot_size;
    h->stride = l.stride;
    h->state_off = l.state_off;
    h->ring_off = l.ring_off;
    h->slots_off = l.slots_off;
    h->mem_size = l.size;
    _Atomic uint32_t *state = (_Atomic uint32_t *)(base + l.state_off);
    for (uint32_t i = 0; i < p->nslots; i++)
        atomic_init(&state[i], SLOT_FREE);
    int rc = ring_mem_format(base + l.ring_off, (size_t)(l.slots_off - l.ring_off), &l.ring, err, errlen);
    if (rc)
        return rc;
    struct ring fl;
    rc = ring_init(&fl, base + l.ring_off, (size_t)(l.slots_off - l.ring_off), err, errlen);
    for (uint32_t i = 0; rc == 0 && i < p->nslots; i++)
        rc = ring_push(&fl, &i, 0);
    ring_free(&fl);
    if (rc)
        return sl_errf(err, errlen, rc, "arena: cannot fill the free list (%d)", rc);
    atomic_store_explicit(&h->magic, ARENA_MAGIC, memory_order_release);
    return 0;
}

static int bind(struct arena *a, void *mem, size_t len, const char *what, char *err, size_t errlen)
{
    if (!mem || (uintptr_t)mem % ARENA_PAGE != 0 || len < sizeof(struct arena_hdr))
        return sl_errf(err, errlen, -EINVAL, "%s: %zu bytes at %p cannot hold an arena", what, len, mem);
    struct arena_hdr *h = mem;
    uint64_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (magic != ARENA_MAGIC)
        return sl_errf(err, errlen, -EINVAL,
                       "%s does not hold a batch arena (magic %#" PRIx64 "); check the "
                       "object name",
                       what, magic);
    if (h->version != ARENA_VERSION)
        return sl_errf(err, errlen, -EINVAL,
                       "%s holds an arena of version %" PRIu32 ", this build reads %u; run "
                       "stages from the same build as the launcher",
                       what, h->version, ARENA_VERSION);
    struct arena_params p = {.slot_size = (size_t)h->slot_size, .nslots = h->nslots};
    struct layout l;
    if (h->slot_size > SIZE_MAX || !plan(&p, &l) || l.stride != h->stride || l.state_off != h->state_off ||
        l.ring_off != h->ring_off || l.slots_off != h->slots_off || l.size != h->mem_size || l.size > len)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: damaged arena header (%" PRIu32 " slots of %" PRIu64 " bytes in "
                       "%zu); restart the run",
                       what, h->nslots, h->slot_size, len);
    unsigned char *base = mem;
    char why[256];
    int rc = ring_init(&a->free, base + l.ring_off, (size_t)(l.slots_off - l.ring_off), why, sizeof why);
    if (rc)
        return sl_errf(err, errlen, rc, "%s: free list: %s", what, why);
    if (a->free.entry_size != sizeof(uint32_t) || a->free.capacity < p.nslots) {
        ring_free(&a->free);
        return sl_errf(err, errlen, -EINVAL, "%s: damaged arena free list; restart the run", what);
    }
    a->hdr = h;
    a->state = (_Atomic uint32_t *)(base + l.state_off);
    a->slots = base + l.slots_off;
    a->stride = (size_t)l.stride;
    a->slot_size = p.slot_size;
    a->nslots = p.nslots;
    return 0;
}

int arena_init(struct arena *a, void *mem, size_t len, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    return bind(a, mem, len, "arena memory", err, errlen);
}

int arena_create(struct arena *a, const char *run_id, const char *object, const struct arena_params *p, char *err,
                 size_t errlen)
{
    memset(a, 0, sizeof *a);
    size_t need = arena_mem_size(p);
    if (need == 0)
        return arena_mem_format(NULL, 0, p, err, errlen); /* reports the bad parameters */
    int rc = shm_seg_create(&a->seg, run_id, object, SHM_KIND_ARENA, need, err, errlen);
    if (rc)
        return rc;
    rc = arena_mem_format(a->seg.data, a->seg.data_size, p, err, errlen);
    if (rc == 0)
        rc = bind(a, a->seg.data, a->seg.data_size, a->seg.name, err, errlen);
    if (rc) {
        char name[SHM_NAME_MAX];
        memcpy(name, a->seg.name, sizeof name);
        arena_free(a);
        shm_seg_unlink(name);
    }
    return rc;
}

int arena_attach(struct arena *a, const char *name, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    int rc = shm_seg_attach(&a->seg, name, SHM_KIND_ARENA, 0, err, errlen);
    if (rc == 0)
        rc = bind(a, a->seg.data, a->seg.data_size, a->seg.name, err, errlen);
    if (rc)
        arena_free(a);
    return rc;
}

void arena_free(struct arena *a)
{
    if (!a)
        return;
    ring_free(&a->free);
    shm_seg_detach(&a->seg);
    memset(a, 0, sizeof *a);
}

int arena_alloc(struct arena *a, uint32_t *slot, int timeout_ms)
{
    uint32_t i;
    int rc = ring_pop(&a->free, &i, timeout_ms);
    if (rc)
        return rc;
    uint32_t expect = SLOT_FREE;
    if (i >= a->nslots || !atomic_compare_exchange_strong_explicit(&a->state[i], &expect, SLOT_USED,
                                                                   memory_order_acq_rel, memory_order_relaxed))
        return -EIO;
    *slot = i;
    return 0;
}

int arena_release(struct arena *a, uint32_t slot)
{
    if (slot >= a->nslots)
        return -EINVAL;
    uint32_t expect = SLOT_USED;
    if (!atomic_compare_exchange_strong_explicit(&a->state[slot], &expect, SLOT_FREE, memory_order_acq_rel,
                                                 memory_order_relaxed))
        return -EINVAL;
    /* The list has room for every slot, but a push may still wait for an
     * allocator that is between claiming and finishing its pop one lap
     * ahead (ring.h, "Full"); that takes a few instructions. */
    int rc;
    do
        rc = ring_push(&a->free, &slot, RING_FOREVER);
    while (rc == -EINTR);
    return rc;
}

void *arena_slot(const struct arena *a, uint32_t slot)
{
    return slot < a->nslots ? a->slots + (size_t)slot * a->stride : NULL;
}

uint32_t arena_available(const struct arena *a)
{
    return (uint32_t)ring_count(&a->free);
}

void arena_close(struct arena *a)
{
    ring_close(&a->free);
}
