/* featbuf_lookahead.c - the feature buffer's lookahead policy: evict the
 * standby slot whose next use inside a window of already-sampled batches
 * is farthest, or that has none (Belady's rule on the future the sampler
 * announces; Ginex section 3.4's next-use bookkeeping without its
 * superbatch files). Behind struct featbuf_policy_ops (contract in
 * featbuf_policy.h); selected with pipeline.cache_policy = "lookahead".
 *
 * The future. The sampler hints batch g + W (featbuf_hint) before it
 * samples batch g, so the policy knows the nodes of the next W batches
 * (and of those sampled but not extracted yet). The extractor acquires
 * with featbuf_acquire_batch, which tells the policy (use) that the use
 * (node, batch) announced has come. Batch numbers of hints mostly rise;
 * several sampler threads interleave them a little, and extractor threads
 * consume batches out of order: neither breaks anything, they only make
 * the order of equal-distance victims differ from the exact optimum.
 *
 * Region (fixed size from the parameters; every bound is set at format
 * time, nothing grows):
 *   header      the highest batch hinted ("top"), counts, the log's ends;
 *   slots (S)   per slot: the list it is on (none, the no-use list, or
 *               the bucket of its next use), links, its next-use batch;
 *   buckets (B) one list head per batch number modulo B, B = the power of
 *               two >= 2W + 64, and a bitmap of the non-empty ones (B/64
 *               words). A batch number b is "in the window" while
 *               top - b < B; a slot's bucket is its next use's batch;
 *   nodes (N)   per node its newest pending log record (4 bytes a node:
 *               the table of hinted-but-not-yet-used nodes, resident or
 *               not, is indexed by node id; ids below 2^32 - 1);
 *   log (E)     hint_entries records (node, batch, next of the same node;
 *               12 bytes) appended in hint order in a ring: a node's
 *               pending uses are a singly linked list through it, newest
 *               first. A use that arrives unlinks its record and leaves a
 *               tombstone that the ring's head skips later. When the ring
 *               is full the oldest record is dropped if it left the
 *               window, else the new hint is (advice only; counted in
 *               `dropped`; the sampler asks featbuf_lookahead_room first,
 *               so it announces no batch that would not fit).
 * Memory: 64 + 16 S + 4 B + B/8 + 4 N + 12 E bytes (E = W x nodes per
 * batch covers the window; the launcher caps it with
 * pipeline.lookahead_mb and says so).
 *
 * Operations (lock held by the core), with L = a node's pending uses in
 * the window (1 or 2 in practice, at most W):
 *   hint     O(L) per node (duplicate check at its newest, push, move a
 *            standby slot to an earlier bucket), plus expiring the buckets
 *            the window slid past: O(1) amortised per batch number;
 *   use      O(L): unlink the record of that batch;
 *   put      O(L): the slot goes to the bucket of its node's nearest
 *            pending use, or to the no-use list (tail; an empty slot to
 *            its head);
 *   take     O(1) unlink;
 *   victim   the no-use list's head (least recently used among rows no
 *            batch in the window wants; empty slots first), else the
 *            non-empty bucket nearest below top: B/64 bitmap words at most.
 * So a row that a batch in the window will use is never evicted while a
 * row without a next use is on standby, and among wanted rows the one
 * wanted last goes first. With a window covering a whole access sequence
 * (one batch at a time) this is Belady's optimum (tests/test_cachesim.c
 * checks it against the simulator's own Belady, stages/cachesim.c). */
#include "stages/featbuf_int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define LA_NIL UINT32_MAX
#define LA_OFF 0u    /* slot on no list */
#define LA_NOUSE 1u  /* on the no-use list */
#define LA_BUCKET 2u /* in the bucket of slot.nu */

struct la_hdr {
    uint64_t top;          /* highest batch hinted (valid once hinted) */
    uint64_t head, tail;   /* log records [head, tail) (sequence numbers; ring index = seq % cap) */
    uint64_t dropped;      /* hint records dropped because the log was full */
    uint32_t hinted;       /* any hint yet */
    uint32_t buckets, cap; /* B, E */
    uint32_t nouse_head, nouse_tail, nouse_count, bucket_count;
    uint32_t reserved0;
};

struct la_slot {
    uint32_t prev, next;
    uint32_t nu;    /* next use's batch (low 32 bits) when where == LA_BUCKET */
    uint32_t where; /* LA_OFF, LA_NOUSE, LA_BUCKET */
};

#define LA_DEAD UINT32_MAX /* la_rec.node of a tombstone: used or dropped */

struct la_rec {
    uint32_t node;  /* LA_DEAD for a tombstone (node ids < 2^32 - 1: plan() checks) */
    uint32_t batch; /* low 32 bits of the batch number */
    uint32_t next;  /* the node's next older pending record, LA_NIL */
};

struct la {
    struct la_hdr *h;
    struct la_slot *slot;
    uint32_t *bucket; /* (B) list heads */
    uint64_t *bits;   /* (B / 64) */
    uint32_t *node;   /* (N) each node's newest pending record, LA_NIL */
    struct la_rec *rec;
    uint32_t nslots;
    uint64_t n_nodes;
};

static uint32_t la_buckets(uint32_t window)
{
    uint32_t b = 64;
    while (b < 2u * window + 64u)
        b *= 2;
    return b;
}

static uint64_t la_off_slots(void)
{
    return 64;
}
static uint64_t la_off_buckets(uint32_t s)
{
    return la_off_slots() + (uint64_t)s * sizeof(struct la_slot);
}
static uint64_t la_off_bits(uint32_t s, uint32_t b)
{
    return (la_off_buckets(s) + (uint64_t)b * 4u + 7u) & ~7ull;
}
static uint64_t la_off_nodes(uint32_t s, uint32_t b)
{
    return la_off_bits(s, b) + (uint64_t)b / 8u;
}
static uint64_t la_off_recs(uint32_t s, uint32_t b, uint64_t n)
{
    return (la_off_nodes(s, b) + n * sizeof(uint32_t) + 7u) & ~7ull;
}

static uint64_t la_region_size(const struct featbuf_params *p)
{
    uint32_t w = p->window ? p->window : 1;
    uint64_t e = p->hint_entries ? p->hint_entries : 1;
    return la_off_recs(p->nslots, la_buckets(w), p->n_nodes) + e * sizeof(struct la_rec);
}

_Static_assert(sizeof(struct la_hdr) <= 64, "the header fits its 64 bytes");

static struct la view(struct featbuf *fb)
{
    unsigned char *base = featbuf_policy_region(fb);
    struct la a;
    a.h = (struct la_hdr *)base;
    uint32_t b = a.h->buckets;
    a.nslots = fb->nslots;
    a.n_nodes = fb->n_nodes;
    a.slot = (struct la_slot *)(base + la_off_slots());
    a.bucket = (uint32_t *)(base + la_off_buckets(fb->nslots));
    a.bits = (uint64_t *)(base + la_off_bits(fb->nslots, b));
    a.node = (uint32_t *)(base + la_off_nodes(fb->nslots, b));
    a.rec = (struct la_rec *)(base + la_off_recs(fb->nslots, b, fb->n_nodes));
    return a;
}

static void la_init(struct featbuf *fb)
{
    struct la_hdr *h = featbuf_policy_region(fb);
    memset(h, 0, sizeof *h);
    h->buckets = la_buckets(featbuf_policy_window(fb));
    h->cap = (uint32_t)featbuf_policy_entries(fb);
    struct la a = view(fb);
    uint32_t n = fb->nslots;
    for (uint32_t i = 0; i < n; i++)
        a.slot[i] =
            (struct la_slot){.prev = i == 0 ? LA_NIL : i - 1, .next = i + 1 == n ? LA_NIL : i + 1, .where = LA_NOUSE};
    h->nouse_head = 0;
    h->nouse_tail = n - 1;
    h->nouse_count = n;
    memset(a.bucket, 0xff, (size_t)h->buckets * sizeof *a.bucket);
    memset(a.bits, 0, (size_t)h->buckets / 8u);
    memset(a.node, 0xff, (size_t)(a.n_nodes * sizeof *a.node));
}

/* ---- the slot lists ---------------------------------------------------- */

static void bit_set(struct la *a, uint32_t k)
{
    a->bits[k / 64] |= 1ull << (k % 64);
}
static void bit_clear(struct la *a, uint32_t k)
{
    a->bits[k / 64] &= ~(1ull << (k % 64));
}

static void unlink_slot(struct la *a, uint32_t s)
{
    struct la_slot *x = &a->slot[s];
    if (x->where == LA_NOUSE) {
        if (x->prev == LA_NIL)
            a->h->nouse_head = x->next;
        else
            a->slot[x->prev].next = x->next;
        if (x->next == LA_NIL)
            a->h->nouse_tail = x->prev;
        else
            a->slot[x->next].prev = x->prev;
        a->h->nouse_count--;
    } else if (x->where == LA_BUCKET) {
        uint32_t k = x->nu & (a->h->buckets - 1);
        if (x->prev == LA_NIL)
            a->bucket[k] = x->next;
        else
            a->slot[x->prev].next = x->next;
        if (x->next != LA_NIL)
            a->slot[x->next].prev = x->prev;
        if (a->bucket[k] == LA_NIL)
            bit_clear(a, k);
        a->h->bucket_count--;
    }
    x->prev = x->next = LA_NIL;
    x->where = LA_OFF;
}

static void nouse_push(struct la *a, uint32_t s, bool front)
{
    struct la_slot *x = &a->slot[s];
    struct la_hdr *h = a->h;
    x->where = LA_NOUSE;
    if (front) {
        x->prev = LA_NIL;
        x->next = h->nouse_head;
        if (h->nouse_head == LA_NIL)
            h->nouse_tail = s;
        else
            a->slot[h->nouse_head].prev = s;
        h->nouse_head = s;
    } else {
        x->next = LA_NIL;
        x->prev = h->nouse_tail;
        if (h->nouse_tail == LA_NIL)
            h->nouse_head = s;
        else
            a->slot[h->nouse_tail].next = s;
        h->nouse_tail = s;
    }
    h->nouse_count++;
}

static void bucket_push(struct la *a, uint32_t s, uint32_t batch)
{
    uint32_t k = batch & (a->h->buckets - 1);
    struct la_slot *x = &a->slot[s];
    x->where = LA_BUCKET;
    x->nu = batch;
    x->prev = LA_NIL;
    x->next = a->bucket[k];
    if (x->next != LA_NIL)
        a->slot[x->next].prev = s;
    a->bucket[k] = s;
    bit_set(a, k);
    a->h->bucket_count++;
}

/* ---- the log ----------------------------------------------------------- */

/* Distance of batch b below top (32-bit wrap-around arithmetic); records
 * and buckets with a distance >= B have left the window. */
static uint32_t dist(const struct la *a, uint32_t b)
{
    return (uint32_t)a->h->top - b;
}
static bool in_window(const struct la *a, uint32_t b)
{
    return dist(a, b) < a->h->buckets;
}

/* Unlinks record r (whose predecessor in its node's list is prev, LA_NIL
 * for the list's first, the newest) and makes it a tombstone. */
static void rec_unlink(struct la *a, uint32_t r, uint32_t prev)
{
    struct la_rec *x = &a->rec[r];
    if (prev == LA_NIL)
        a->node[x->node] = x->next;
    else
        a->rec[prev].next = x->next;
    x->node = LA_DEAD;
    x->next = LA_NIL;
}

/* The nearest pending use of node in the window (true, *batch), dropping
 * records that left it on the way. */
static bool next_use(struct la *a, uint64_t node, uint32_t *batch)
{
    bool found = false;
    uint32_t best = 0, prev = LA_NIL;
    for (uint32_t r = a->node[node]; r != LA_NIL;) {
        uint32_t nx = a->rec[r].next, b = a->rec[r].batch;
        if (!in_window(a, b)) {
            rec_unlink(a, r, prev);
        } else {
            if (!found || dist(a, b) > dist(a, best))
                best = b;
            found = true;
            prev = r;
        }
        r = nx;
    }
    *batch = best;
    return found;
}

/* Where standby slot s belongs now (it is on no list). */
static void place(struct featbuf *fb, struct la *a, uint32_t s)
{
    uint64_t v = featbuf_slot_node(fb, s);
    uint32_t b;
    if (v == FEATBUF_NONE)
        nouse_push(a, s, true);
    else if (next_use(a, v, &b))
        bucket_push(a, s, b);
    else
        nouse_push(a, s, false);
}

/* The window slid from top old to top new: the buckets of batches
 * old+1 .. new held batches that are now B or more below top. */
static void expire(struct la *a, uint64_t old, uint64_t now)
{
    uint32_t nb = a->h->buckets;
    uint64_t span = now - old < nb ? now - old : nb;
    for (uint64_t i = 1; i <= span; i++) {
        uint32_t k = (uint32_t)(old + i) & (nb - 1);
        while (a->bucket[k] != LA_NIL) {
            uint32_t s = a->bucket[k];
            unlink_slot(a, s);
            nouse_push(a, s, false);
        }
    }
}

/* Frees log room at the ring's head: skips tombstones and drops records
 * that left the window (the oldest record of the log is the oldest of its
 * node: its list's last). */
static void log_reclaim(struct la *a)
{
    struct la_hdr *h = a->h;
    while (h->head < h->tail) {
        uint32_t r = (uint32_t)(h->head % h->cap);
        if (a->rec[r].node != LA_DEAD) {
            if (in_window(a, a->rec[r].batch))
                return;
            uint32_t prev = LA_NIL;
            for (uint32_t q = a->node[a->rec[r].node]; q != r; q = a->rec[q].next)
                prev = q;
            rec_unlink(a, r, prev);
        }
        h->head++;
    }
}

/* True if the log has room for one more record. */
static bool log_room(struct la *a)
{
    if (a->h->tail - a->h->head == a->h->cap)
        log_reclaim(a);
    return a->h->tail - a->h->head < a->h->cap;
}

static void la_hint(struct featbuf *fb, uint64_t batch, const uint64_t *nodes, uint32_t n)
{
    struct la a = view(fb);
    struct la_hdr *h = a.h;
    if (!h->hinted) {
        h->top = batch;
        h->hinted = 1;
    } else if (batch > h->top && batch - h->top < (1ull << 31)) {
        uint64_t old = h->top;
        h->top = batch;
        expire(&a, old, batch);
    } else if (!in_window(&a, (uint32_t)batch)) {
        return; /* far behind the window: nothing to keep */
    }
    uint32_t b = (uint32_t)batch;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t v = nodes[i];
        uint32_t *first = &a.node[v];
        if (*first != LA_NIL && a.rec[*first].batch == b)
            continue; /* a duplicate within the batch */
        if (!log_room(&a)) {
            h->dropped += n - i;
            return;
        }
        uint32_t r = (uint32_t)(h->tail % h->cap);
        h->tail++;
        a.rec[r] = (struct la_rec){.node = (uint32_t)v, .batch = b, .next = *first};
        *first = r;
        uint32_t s = featbuf_node_slot(fb, v);
        if (s == FEATBUF_ABSENT || !featbuf_slot_on_standby(fb, s))
            continue; /* placed when it reaches standby */
        struct la_slot *x = &a.slot[s];
        if (x->where == LA_NOUSE || (x->where == LA_BUCKET && dist(&a, b) > dist(&a, x->nu))) {
            unlink_slot(&a, s);
            bucket_push(&a, s, b);
        }
    }
}

static void la_use(struct featbuf *fb, uint64_t batch, uint64_t node)
{
    struct la a = view(fb);
    uint32_t b = (uint32_t)batch, prev = LA_NIL;
    for (uint32_t r = a.node[node]; r != LA_NIL; prev = r, r = a.rec[r].next)
        if (a.rec[r].batch == b) {
            rec_unlink(&a, r, prev);
            return;
        }
}

static void la_put(struct featbuf *fb, uint32_t s, bool row)
{
    struct la a = view(fb);
    if (!row)
        nouse_push(&a, s, true);
    else
        place(fb, &a, s);
}

static void la_take(struct featbuf *fb, uint32_t s)
{
    struct la a = view(fb);
    unlink_slot(&a, s);
}

static uint32_t la_victim(struct featbuf *fb)
{
    struct la a = view(fb);
    struct la_hdr *h = a.h;
    uint32_t s;
    if (h->nouse_head != LA_NIL) {
        s = h->nouse_head;
    } else if (h->bucket_count) {
        /* the non-empty bucket nearest below top, circularly: the farthest next use */
        uint32_t nb = h->buckets, words = nb / 64, k = (uint32_t)h->top & (nb - 1);
        uint32_t w = k / 64;
        uint64_t m = a.bits[w] & (k % 64 == 63 ? ~0ull : ((1ull << (k % 64 + 1)) - 1));
        for (uint32_t i = 0; !m && i < words; i++) {
            w = (w + words - 1) % words;
            m = a.bits[w];
        }
        s = a.bucket[w * 64 + 63 - (uint32_t)__builtin_clzll(m)];
    } else {
        return FEATBUF_NO_SLOT;
    }
    unlink_slot(&a, s);
    return s;
}

/* ---- check ------------------------------------------------------------- */

static int la_check(struct featbuf *fb, char *err, size_t errlen)
{
    struct la a = view(fb);
    struct la_hdr *h = a.h;
    uint32_t on_nouse = 0, on_buckets = 0, prev = LA_NIL;
    for (uint32_t s = h->nouse_head; s != LA_NIL; s = a.slot[s].next) {
        if (s >= a.nslots || a.slot[s].where != LA_NOUSE || a.slot[s].prev != prev || ++on_nouse > a.nslots) {
            snprintf(err, errlen, "lookahead: bad no-use list at slot %u after %u entries", s, on_nouse);
            return -EUCLEAN;
        }
        prev = s;
    }
    if (prev != h->nouse_tail || on_nouse != h->nouse_count) {
        snprintf(err, errlen, "lookahead: no-use list walked %u ending at %u, header says %u ending at %u", on_nouse,
                 prev, h->nouse_count, h->nouse_tail);
        return -EUCLEAN;
    }
    for (uint32_t k = 0; k < h->buckets; k++) {
        bool bit = a.bits[k / 64] >> (k % 64) & 1u;
        if (bit != (a.bucket[k] != LA_NIL)) {
            snprintf(err, errlen, "lookahead: bucket %u's bit disagrees with its list", k);
            return -EUCLEAN;
        }
        prev = LA_NIL;
        for (uint32_t s = a.bucket[k]; s != LA_NIL; s = a.slot[s].next) {
            if (s >= a.nslots || a.slot[s].where != LA_BUCKET || a.slot[s].prev != prev ||
                (a.slot[s].nu & (h->buckets - 1)) != k || !in_window(&a, a.slot[s].nu) || ++on_buckets > a.nslots) {
                snprintf(err, errlen, "lookahead: bad bucket %u at slot %u", k, s);
                return -EUCLEAN;
            }
            prev = s;
        }
    }
    if (on_buckets != h->bucket_count) {
        snprintf(err, errlen, "lookahead: %u slots in buckets, header says %u", on_buckets, h->bucket_count);
        return -EUCLEAN;
    }
    for (uint32_t s = 0; s < a.nslots; s++)
        if ((a.slot[s].where != LA_OFF) != featbuf_slot_on_standby(fb, s)) {
            snprintf(err, errlen, "lookahead: slot %u is %son a list but %son standby", s,
                     a.slot[s].where != LA_OFF ? "" : "not ", featbuf_slot_on_standby(fb, s) ? "" : "not ");
            return -EUCLEAN;
        }
    /* the log: every live record in exactly its node's list, in log order */
    uint64_t live = 0, linked = 0;
    if (h->tail - h->head > h->cap || h->tail < h->head) {
        snprintf(err, errlen, "lookahead: log ends %llu..%llu exceed its %u records", (unsigned long long)h->head,
                 (unsigned long long)h->tail, h->cap);
        return -EUCLEAN;
    }
    for (uint64_t q = h->head; q < h->tail; q++)
        live += a.rec[q % h->cap].node != LA_DEAD;
    uint32_t base = (uint32_t)(h->head % h->cap);
    for (uint64_t v = 0; v < a.n_nodes; v++) {
        uint64_t before = UINT64_MAX; /* newest first: ring positions fall along the list */
        for (uint32_t r = a.node[v]; r != LA_NIL; r = a.rec[r].next) {
            uint64_t pos = ((uint64_t)r + h->cap - base) % h->cap;
            if (r >= h->cap || a.rec[r].node != v || pos >= h->tail - h->head || pos >= before || ++linked > live) {
                snprintf(err, errlen,
                         "lookahead: node %llu's list holds record %u out of place (another node's, "
                         "a dead one, or not newest first)",
                         (unsigned long long)v, r);
                return -EUCLEAN;
            }
            before = pos;
        }
    }
    if (linked != live) {
        snprintf(err, errlen, "lookahead: %llu live log records, %llu in node lists", (unsigned long long)live,
                 (unsigned long long)linked);
        return -EUCLEAN;
    }
    return 0;
}

uint64_t featbuf_lookahead_room(struct featbuf *fb)
{
    if (fb->policy != &featbuf_policy_lookahead)
        return UINT64_MAX;
    if (fb_lock(fb))
        return 0;
    struct la a = view(fb);
    struct la_hdr *h = a.h;
    log_reclaim(&a);
    uint64_t room = h->cap - (h->tail - h->head);
    fb_unlock(fb);
    return room;
}

/* Hint records dropped because the log was full (for tests and reports;
 * lock held by the caller or the buffer quiet). */
uint64_t featbuf_lookahead_dropped(struct featbuf *fb)
{
    return fb->policy == &featbuf_policy_lookahead ? ((struct la_hdr *)featbuf_policy_region(fb))->dropped : 0;
}

const struct featbuf_policy_ops featbuf_policy_lookahead = {
    .name = "lookahead",
    .region_size = la_region_size,
    .init = la_init,
    .put = la_put,
    .take = la_take,
    .victim = la_victim,
    .hint = la_hint,
    .use = la_use,
    .check = la_check,
};
