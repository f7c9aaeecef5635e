/* featbuf_resident.c - a resident feature buffer (featbuf.h, "a resident
 * buffer"): every node's row VALID for good, looked up without the lock
 * and without references.
 *
 * Why it is safe. A slot changes node only when an acquire claims it for
 * an absent node (evicting the one it held) or a load fails (the node
 * leaves the map). Once every node maps to a VALID slot, no acquire finds
 * an absent node and no slot is LOADING, so neither can happen again: the
 * map and each slot's node are fixed for the rest of the buffer's life,
 * whoever holds or drops references (pins, hints and releases move slots
 * on and off standby, never between nodes). featbuf_set_resident checks
 * that under the lock and then stores the flag with release order; a
 * lookup loads it with acquire order, after which plain reads of the map
 * see its final state. The flag is never cleared. */
#include <errno.h>

#include "stages/featbuf_int.h"

int featbuf_set_resident(struct featbuf *fb)
{
    if (fb->hdr->policy != FEATBUF_POLICY_LRU)
        return -EOPNOTSUPP; /* lookahead learns each row's use from the batch's acquire: it must see them */
    int rc = fb_lock(fb);
    if (rc)
        return rc;
    for (uint64_t node = 0; node < fb->n_nodes; node++) {
        uint32_t s = fb->map[node];
        if (s == FEATBUF_ABSENT ||
            /* acquire: pairs with the loader's release of VALID, so the row's bytes happen before the
             * release of resident below, and so before every lock-free lookup that sees it */
            (atomic_load_explicit(&fb->slots[s].state, memory_order_acquire) & FB_STATE_MASK) != FEATBUF_VALID ||
            fb->slots[s].dirty) {
            fb_unlock(fb);
            return -EAGAIN;
        }
    }
    atomic_store_explicit(&fb->hdr->resident, 1u, memory_order_release);
    fb_unlock(fb);
    return 0;
}

bool featbuf_is_resident(const struct featbuf *fb)
{
    return atomic_load_explicit(&fb->hdr->resident, memory_order_acquire) != 0;
}

int featbuf_lookup_resident(struct featbuf *fb, const uint64_t *nodes, uint32_t n, uint32_t *slots)
{
    if (atomic_load_explicit(&fb->hdr->broken, memory_order_acquire))
        return -EPIPE;
    if (!featbuf_is_resident(fb))
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (nodes[i] >= fb->n_nodes)
            return -EINVAL;
    const uint32_t *map = fb->map;
    for (uint32_t i = 0; i < n; i++)
        slots[i] = map[nodes[i]];
    atomic_fetch_add_explicit(&fb->hdr->resident_hits, n, memory_order_relaxed);
    return 1;
}
