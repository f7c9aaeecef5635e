/* metrics.c - the metrics page: layout, claim, heartbeat and snapshots
 * (protocol in metrics.h). */
#include "ipc/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"

/* Page header: one line, written once by metrics_mem_format. */
struct metrics_page_hdr {
    alignas(64) _Atomic uint64_t magic; /* METRICS_MAGIC, stored last (release) */
    uint32_t version;
    uint32_t nblocks;
    uint32_t block_size;
    uint32_t reserved;
    uint64_t mem_size;
};

_Static_assert(sizeof(struct metrics_page_hdr) == 64, "page header is one line");

size_t metrics_mem_size(uint32_t nblocks)
{
    if (nblocks == 0 || nblocks > METRICS_BLOCKS_MAX)
        return 0;
    return sizeof(struct metrics_page_hdr) + (size_t)nblocks * sizeof(struct metrics_block);
}

int metrics_mem_format(void *mem, size_t len, uint32_t nblocks, char *err, size_t errlen)
{
    size_t need = metrics_mem_size(nblocks);
    if (need == 0)
        return sl_errf(err, errlen, -EINVAL, "metrics page: %" PRIu32 " blocks is outside 1..%u", nblocks,
                       METRICS_BLOCKS_MAX);
    if (!mem || (uintptr_t)mem % 64 != 0 || len < need)
        return sl_errf(err, errlen, -EINVAL, "metrics page: need %zu bytes, 64-byte aligned; got %zu at %p", need, len,
                       mem);
    memset(mem, 0, need);
    struct metrics_page_hdr *h = mem;
    h->version = METRICS_VERSION;
    h->nblocks = nblocks;
    h->block_size = (uint32_t)sizeof(struct metrics_block);
    h->mem_size = need;
    atomic_store_explicit(&h->magic, METRICS_MAGIC, memory_order_release);
    return 0;
}

static int bind(struct metrics_page *p, void *mem, size_t len, const char *what, char *err, size_t errlen)
{
    if (!mem || (uintptr_t)mem % 64 != 0 || len < sizeof(struct metrics_page_hdr))
        return sl_errf(err, errlen, -EINVAL, "%s: %zu bytes at %p cannot hold a metrics page", what, len, mem);
    struct metrics_page_hdr *h = mem;
    uint64_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (magic != METRICS_MAGIC)
        return sl_errf(err, errlen, -EINVAL,
                       "%s does not hold a metrics page (magic %#" PRIx64 "); check the "
                       "object name",
                       what, magic);
    if (h->version != METRICS_VERSION)
        return sl_errf(err, errlen, -EINVAL,
                       "%s holds a metrics page of version %" PRIu32 ", this build reads "
                       "%u; use gnnstat from the same build as the launcher",
                       what, h->version, METRICS_VERSION);
    size_t need = metrics_mem_size(h->nblocks);
    if (need == 0 || h->block_size != sizeof(struct metrics_block) || h->mem_size != need || need > len)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: damaged metrics page header (%" PRIu32 " blocks of %" PRIu32
                       " bytes in %zu); restart the run",
                       what, h->nblocks, h->block_size, len);
    p->hdr = h;
    p->blocks = (struct metrics_block *)((char *)mem + sizeof *h);
    p->nblocks = h->nblocks;
    return 0;
}

int metrics_init(struct metrics_page *p, void *mem, size_t len, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    return bind(p, mem, len, "metrics memory", err, errlen);
}

int metrics_create(struct metrics_page *p, const char *run_id, const char *object, uint32_t nblocks, char *err,
                   size_t errlen)
{
    memset(p, 0, sizeof *p);
    size_t need = metrics_mem_size(nblocks);
    if (need == 0)
        return sl_errf(err, errlen, -EINVAL, "metrics page: %" PRIu32 " blocks is outside 1..%u", nblocks,
                       METRICS_BLOCKS_MAX);
    int rc = shm_seg_create(&p->seg, run_id, object, SHM_KIND_METRICS, need, err, errlen);
    if (rc)
        return rc;
    rc = metrics_mem_format(p->seg.data, p->seg.data_size, nblocks, err, errlen);
    if (rc == 0)
        rc = bind(p, p->seg.data, p->seg.data_size, p->seg.name, err, errlen);
    if (rc) {
        char name[SHM_NAME_MAX];
        memcpy(name, p->seg.name, sizeof name);
        metrics_free(p);
        shm_seg_unlink(name);
    }
    return rc;
}

int metrics_attach(struct metrics_page *p, const char *name, unsigned flags, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    int rc = shm_seg_attach(&p->seg, name, SHM_KIND_METRICS, flags, err, errlen);
    if (rc == 0)
        rc = bind(p, p->seg.data, p->seg.data_size, p->seg.name, err, errlen);
    if (rc)
        metrics_free(p);
    return rc;
}

void metrics_free(struct metrics_page *p)
{
    if (!p)
        return;
    shm_seg_detach(&p->seg);
    memset(p, 0, sizeof *p);
}

struct metrics_block *metrics_block(const struct metrics_page *p, uint32_t i)
{
    return p && p->blocks && i < p->nblocks ? &p->blocks[i] : NULL;
}

int metrics_claim(struct metrics_block *b, const char *name, int32_t rank, char *err, size_t errlen)
{
    int32_t expect = 0;
    int32_t me = (int32_t)getpid();
    if (!atomic_compare_exchange_strong_explicit(&b->pid, &expect, me, memory_order_acq_rel, memory_order_acquire) &&
        expect != me)
        return sl_errf(err, errlen, -EBUSY,
                       "metrics block already claimed by pid %" PRId32 "; each process needs "
                       "its own block index",
                       expect);
    snprintf(b->name, sizeof b->name, "%s", name ? name : "");
    b->rank = rank;
    metrics_heartbeat(b);
    atomic_store_explicit(&b->state, METRICS_RUNNING, memory_order_release);
    return 0;
}

void metrics_heartbeat(struct metrics_block *b)
{
    atomic_store_explicit(&b->heartbeat_ns, sl_now_ns(), memory_order_relaxed);
}

void metrics_set_state(struct metrics_block *b, enum metrics_state state)
{
    atomic_store_explicit(&b->state, (uint32_t)state, memory_order_release);
}

uint32_t metrics_snapshot(const struct metrics_page *p, struct metrics_snapshot *out, uint32_t max)
{
    if (!p || !p->blocks)
        return 0;
    uint32_t n = SL_MIN(max, p->nblocks);
    for (uint32_t i = 0; i < n; i++) {
        const struct metrics_block *b = &p->blocks[i];
        struct metrics_snapshot *s = &out[i];
        memset(s, 0, sizeof *s);
        s->state = atomic_load_explicit(&b->state, memory_order_acquire);
        s->pid = atomic_load_explicit(&b->pid, memory_order_relaxed);
        s->busy_ns = metrics_busy_now(b, sl_now_ns());
        s->wait_ns = atomic_load_explicit(&b->wait_ns, memory_order_relaxed);
        s->items = atomic_load_explicit(&b->items, memory_order_relaxed);
        s->bytes = atomic_load_explicit(&b->bytes, memory_order_relaxed);
        s->io_ops = atomic_load_explicit(&b->io_ops, memory_order_relaxed);
        s->errors = atomic_load_explicit(&b->errors, memory_order_relaxed);
        s->heartbeat_ns = atomic_load_explicit(&b->heartbeat_ns, memory_order_relaxed);
        if (s->state != METRICS_FREE) {
            memcpy(s->name, b->name, sizeof s->name);
            s->name[sizeof s->name - 1] = '\0';
            s->rank = b->rank;
        }
    }
    return n;
}

uint64_t metrics_busy_now(const struct metrics_block *b, uint64_t now_ns)
{
    /* busy first: a period that ends between the two loads is missed for
     * this reading rather than counted twice */
    uint64_t busy = atomic_load_explicit(&b->busy_ns, memory_order_acquire);
    uint64_t open = atomic_load_explicit(&b->busy_open, memory_order_acquire);
    uint64_t n = open >> 56, starts = open & (METRICS_OPEN_ONE - 1), now_us = now_ns / 1000;
    if (n && n * now_us > starts)
        busy += (n * now_us - starts) * 1000;
    return busy;
}
