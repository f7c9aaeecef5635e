/* featbuf_hooks.c - the feature buffer's policy seam (featbuf_policy.h)
 * and the hooks later policies use (featbuf.h): the per-process registry
 * of policy tables, the helpers a policy calls, featbuf_hint, pins, dirty
 * rows with write-back and flush, and featbuf_check. Every shared field is
 * read and written with the lock held, following the protocol at the top
 * of featbuf.c; the registry and the write-back callback are per process
 * and never in shared memory. */
#include <errno.h>

#include "stages/featbuf_int.h"

/* ---- the registry ------------------------------------------------------ */

/* Ids at FEATBUF_POLICY_USER and above, registered in this process. */
static _Atomic(const struct featbuf_policy_ops *) registry[FEATBUF_POLICY_IDS];

int featbuf_policy_register(uint32_t id, const struct featbuf_policy_ops *ops)
{
    if (id < FEATBUF_POLICY_USER || id >= FEATBUF_POLICY_IDS || !ops || !ops->region_size || !ops->init || !ops->put ||
        !ops->take || !ops->victim)
        return -EINVAL;
    const struct featbuf_policy_ops *none = NULL;
    if (!atomic_compare_exchange_strong(&registry[id], &none, ops))
        return none == ops ? 0 : -EEXIST;
    return 0;
}

const struct featbuf_policy_ops *featbuf_policy_find(uint32_t id)
{
    if (id == FEATBUF_POLICY_LRU)
        return &featbuf_policy_lru;
    if (id == FEATBUF_POLICY_LOOKAHEAD)
        return &featbuf_policy_lookahead;
    if (id < FEATBUF_POLICY_USER || id >= FEATBUF_POLICY_IDS)
        return NULL;
    return atomic_load(&registry[id]);
}

void *featbuf_policy_region(const struct featbuf *fb)
{
    return fb->policy_mem;
}

uint64_t featbuf_slot_node(const struct featbuf *fb, uint32_t slot)
{
    return slot < fb->nslots ? fb->slots[slot].node : FEATBUF_NONE;
}

bool featbuf_slot_on_standby(const struct featbuf *fb, uint32_t slot)
{
    return slot < fb->nslots && fb->slots[slot].standby;
}

uint32_t featbuf_policy_window(const struct featbuf *fb)
{
    return fb->hdr->window;
}

uint64_t featbuf_policy_entries(const struct featbuf *fb)
{
    return fb->hdr->hint_entries;
}

uint32_t featbuf_node_slot(const struct featbuf *fb, uint64_t node)
{
    return node < fb->n_nodes ? fb->map[node] : FEATBUF_ABSENT;
}

/* ---- hint -------------------------------------------------------------- */

#define FB_HINT_PIECE 4096u /* nodes per hold of the lock */

int featbuf_hint(struct featbuf *fb, uint64_t batch, const uint64_t *nodes, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (nodes[i] >= fb->n_nodes)
            return -EINVAL;
    if (!fb->policy->hint)
        return 0;
    /* in pieces, so that a batch of 100k nodes never holds the lock the
     * extractors and the releaser wait on for long; the policy sees the
     * pieces as hints of the same batch */
    uint64_t at = 0; /* 64-bit: n near 2^32 must not wrap it back to 0 */
    do { /* once at least: an empty batch is news too */
        int rc = fb_lock(fb);
        if (rc)
            return rc;
        fb->policy->hint(fb, batch, nodes ? nodes + at : NULL, (uint32_t)(n - at < FB_HINT_PIECE ? n - at : FB_HINT_PIECE));
        fb_unlock(fb);
        at += FB_HINT_PIECE;
    } while (at < n);
    return 0;
}

/* ---- pins -------------------------------------------------------------- */

int featbuf_pin(struct featbuf *fb, uint64_t node)
{
    if (node >= fb->n_nodes)
        return -EINVAL;
    int rc = fb_lock(fb);
    if (rc)
        return rc;
    if (fb_node_pinned(fb, node))
        goto out;
    if (!fb->pins || fb->hdr->pinned >= fb->pin_slots) {
        rc = -ENOSPC;
        goto out;
    }
    fb->pins[node / 64] |= 1ull << (node % 64);
    fb->hdr->pinned++;
    uint32_t s = fb->map[node];
    if (s != FEATBUF_ABSENT && fb->slots[s].standby)
        fb_slot_take(fb, s); /* resident and unreferenced: out of the policy's reach now */
out:
    fb_unlock(fb);
    return rc;
}

int featbuf_unpin(struct featbuf *fb, uint64_t node)
{
    if (node >= fb->n_nodes)
        return -EINVAL;
    int rc = fb_lock(fb);
    if (rc)
        return rc;
    bool freed = false;
    if (!fb_node_pinned(fb, node)) {
        rc = -ENOENT;
    } else {
        fb->pins[node / 64] &= ~(1ull << (node % 64));
        fb->hdr->pinned--;
        uint32_t s = fb->map[node];
        if (s != FEATBUF_ABSENT && fb->slots[s].refs == 0) {
            fb_slot_put(fb, s);
            freed = true;
        }
    }
    fb_unlock(fb);
    if (freed)
        fb_standby_wake(fb);
    return rc;
}

/* ---- dirty rows -------------------------------------------------------- */

void featbuf_set_writeback(struct featbuf *fb, featbuf_writeback_fn fn, void *ctx)
{
    fb->writeback = fn;
    fb->writeback_ctx = fn ? ctx : NULL;
}

int featbuf_mark_dirty(struct featbuf *fb, uint32_t slot)
{
    if (!fb->writeback || slot >= fb->nslots)
        return -EINVAL;
    int rc = fb_lock(fb);
    if (rc)
        return rc;
    struct featbuf_slot *x = &fb->slots[slot];
    if (x->refs == 0 || atomic_load_explicit(&x->state, memory_order_acquire) != FEATBUF_VALID)
        rc = -EINVAL;
    else
        x->dirty = 1;
    fb_unlock(fb);
    return rc;
}

int featbuf_flush(struct featbuf *fb)
{
    if (!fb->writeback)
        return -EINVAL;
    int rc = fb_lock(fb), n = 0;
    if (rc)
        return rc;
    for (uint32_t s = 0; s < fb->nslots && rc == 0; s++) {
        struct featbuf_slot *x = &fb->slots[s];
        if (x->dirty && x->refs == 0) {
            rc = fb_write_back(fb, s);
            n += rc == 0;
        }
    }
    fb_unlock(fb);
    return rc ? rc : n;
}

/* ---- featbuf_check ----------------------------------------------------- */

static int check_slots(struct featbuf *fb, char *err, size_t errlen)
{
    uint32_t standby = 0;
    for (uint32_t s = 0; s < fb->nslots; s++) {
        struct featbuf_slot *x = &fb->slots[s];
        uint32_t st = atomic_load_explicit(&x->state, memory_order_acquire) & FB_STATE_MASK;
        if (x->node == FEATBUF_NONE ? st != FEATBUF_INVALID : (x->node >= fb->n_nodes || fb->map[x->node] != s)) {
            fb_set_err(err, errlen, "slot %u: node %llu state %u disagrees with the map", s,
                       (unsigned long long)x->node, st);
            return -EUCLEAN;
        }
        if (x->node != FEATBUF_NONE && st == FEATBUF_INVALID) {
            fb_set_err(err, errlen, "slot %u: INVALID but holds node %llu", s, (unsigned long long)x->node);
            return -EUCLEAN;
        }
        bool pinned = fb_node_pinned(fb, x->node);
        if ((x->refs == 0 && !pinned) != (x->standby != 0)) {
            fb_set_err(err, errlen, "slot %u: refs %u, %spinned, but %son standby", s, x->refs, pinned ? "" : "not ",
                       x->standby ? "" : "not ");
            return -EUCLEAN;
        }
        if (st == FEATBUF_LOADING && x->refs == 0) {
            fb_set_err(err, errlen, "slot %u: LOADING with no reference", s);
            return -EUCLEAN;
        }
        if (x->dirty && st != FEATBUF_VALID) {
            fb_set_err(err, errlen, "slot %u: dirty but in state %u", s, st);
            return -EUCLEAN;
        }
        standby += x->standby != 0;
    }
    if (standby != fb->hdr->standby) {
        fb_set_err(err, errlen, "standby: %u slots flagged, count says %u", standby, fb->hdr->standby);
        return -EUCLEAN;
    }
    return 0;
}

static int check_map(struct featbuf *fb, char *err, size_t errlen)
{
    uint32_t pinned = 0;
    for (uint64_t v = 0; v < fb->n_nodes; v++) {
        uint32_t s = fb->map[v];
        if (s != FEATBUF_ABSENT && (s >= fb->nslots || fb->slots[s].node != v)) {
            fb_set_err(err, errlen, "map: node %llu -> slot %u, which holds another node", (unsigned long long)v, s);
            return -EUCLEAN;
        }
        pinned += fb_node_pinned(fb, v);
    }
    if (pinned != fb->hdr->pinned || pinned > fb->pin_slots) {
        fb_set_err(err, errlen, "pins: %u nodes pinned, count says %u, at most %u", pinned, fb->hdr->pinned,
                   fb->pin_slots);
        return -EUCLEAN;
    }
    return 0;
}

int featbuf_check(struct featbuf *fb, char *err, size_t errlen)
{
    char local[1];
    if (!err || !errlen) { /* the policy's check may always write its reason */
        err = local;
        errlen = sizeof local;
    }
    int rc = fb_lock(fb);
    if (rc)
        return rc;
    rc = check_slots(fb, err, errlen);
    if (rc == 0)
        rc = check_map(fb, err, errlen);
    if (rc == 0 && fb->policy->check)
        rc = fb->policy->check(fb, err, errlen);
    fb_unlock(fb);
    return rc;
}
