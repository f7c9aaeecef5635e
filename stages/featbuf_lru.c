/* featbuf_lru.c - the feature buffer's LRU policy (GNNDrive's standby
 * list), behind struct featbuf_policy_ops (contract in featbuf_policy.h).
 *
 * Region: a header (head, tail, length) and one link pair per slot, a
 * doubly linked list of the slots on standby, oldest at the head. put
 * appends a slot that holds a row at the tail and pushes an empty one at
 * the head (nothing worth keeping: reuse it first); take unlinks; victim
 * unlinks and returns the head. Every call is O(1). A slot not on the list
 * has both links LRU_OFF. hint is ignored. */
#include "stages/featbuf_policy.h"

#include <errno.h>
#include <stdio.h>

#define LRU_NIL UINT32_MAX        /* end of the list */
#define LRU_OFF (UINT32_MAX - 1u) /* links of a slot not on the list */

struct lru_link {
    uint32_t prev, next;
};

struct lru_region {
    uint32_t head, tail, count, reserved0;
    struct lru_link link[]; /* (nslots) */
};

static uint64_t lru_region_size(const struct featbuf_params *p)
{
    return sizeof(struct lru_region) + (uint64_t)p->nslots * sizeof(struct lru_link);
}

static void lru_init(struct featbuf *fb)
{
    struct lru_region *r = featbuf_policy_region(fb);
    uint32_t n = fb->nslots;
    for (uint32_t i = 0; i < n; i++) {
        r->link[i].prev = i == 0 ? LRU_NIL : i - 1;
        r->link[i].next = i + 1 == n ? LRU_NIL : i + 1;
    }
    r->head = 0;
    r->tail = n - 1;
    r->count = n;
    r->reserved0 = 0;
}

static void lru_unlink(struct lru_region *r, uint32_t s)
{
    struct lru_link *x = &r->link[s];
    if (x->prev == LRU_NIL)
        r->head = x->next;
    else
        r->link[x->prev].next = x->next;
    if (x->next == LRU_NIL)
        r->tail = x->prev;
    else
        r->link[x->next].prev = x->prev;
    x->prev = x->next = LRU_OFF;
    r->count--;
}

static void lru_put(struct featbuf *fb, uint32_t s, bool row)
{
    struct lru_region *r = featbuf_policy_region(fb);
    struct lru_link *x = &r->link[s];
    if (row) { /* tail: the newest */
        x->next = LRU_NIL;
        x->prev = r->tail;
        if (r->tail == LRU_NIL)
            r->head = s;
        else
            r->link[r->tail].next = s;
        r->tail = s;
    } else { /* head: the next victim */
        x->prev = LRU_NIL;
        x->next = r->head;
        if (r->head == LRU_NIL)
            r->tail = s;
        else
            r->link[r->head].prev = s;
        r->head = s;
    }
    r->count++;
}

static void lru_take(struct featbuf *fb, uint32_t s)
{
    lru_unlink(featbuf_policy_region(fb), s);
}

static uint32_t lru_victim(struct featbuf *fb)
{
    struct lru_region *r = featbuf_policy_region(fb);
    uint32_t s = r->head;
    if (s == LRU_NIL)
        return FEATBUF_NO_SLOT;
    lru_unlink(r, s);
    return s;
}

static int lru_check(struct featbuf *fb, char *err, size_t errlen)
{
    struct lru_region *r = featbuf_policy_region(fb);
    uint32_t len = 0, on = 0, prev = LRU_NIL;
    for (uint32_t s = r->head; s != LRU_NIL; s = r->link[s].next) {
        if (s >= fb->nslots || r->link[s].prev != prev || ++len > fb->nslots || !featbuf_slot_on_standby(fb, s)) {
            snprintf(err, errlen, "lru: bad link at slot %u after %u entries (or a slot not on standby listed)", s,
                     len);
            return -EUCLEAN;
        }
        prev = s;
    }
    for (uint32_t s = 0; s < fb->nslots; s++) {
        bool linked = r->link[s].prev != LRU_OFF;
        if (linked != (r->link[s].next != LRU_OFF) || linked != featbuf_slot_on_standby(fb, s)) {
            snprintf(err, errlen, "lru: slot %u links %u/%u disagree with standby", s, r->link[s].prev,
                     r->link[s].next);
            return -EUCLEAN;
        }
        on += linked;
    }
    if (prev != r->tail || len != r->count || on != len) {
        snprintf(err, errlen, "lru: tail %u / count %u, walked %u ending at %u", r->tail, r->count, len, prev);
        return -EUCLEAN;
    }
    return 0;
}

const struct featbuf_policy_ops featbuf_policy_lru = {
    .name = "lru",
    .region_size = lru_region_size,
    .init = lru_init,
    .put = lru_put,
    .take = lru_take,
    .victim = lru_victim,
    .hint = NULL,
    .check = lru_check,
};
