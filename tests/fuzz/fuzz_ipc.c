/* fuzz_ipc.c - libFuzzer target for the checks a process makes when it
 * attaches to shared memory another process formatted: the ring queue, the
 * batch arena, the metrics page, the feature buffer and the all-reduce
 * headers (ring_init, arena_init, metrics_init, featbuf_init,
 * allreduce_init: the same bind code as *_attach, on memory the target
 * owns) and a sampled batch in an arena slot (batch_view). A damaged or
 * hostile segment must be refused, or every byte the accepted handle says
 * it owns must lie inside the memory: after each accepted bind the target
 * reads all of it, in an allocation of exactly the bound length, so ASan
 * reports any byte past the end.
 *
 * Input: byte 0 picks the object (low 3 bits) and the mode (bit 7):
 *   formatted (bit 7 clear): bytes 1..8 are parameters (sizes, counts,
 *     the rank to claim); the object is formatted by its own *_mem_format
 *     (a batch: written with the batch writer); from byte 10 on the input
 *     is patches of 3 bytes (a little-endian u16 offset into the memory,
 *     modulo its length, and a byte to store there); then the last
 *     8 x byte 9 bytes are cut off and the rest is handed to the bind;
 *   raw (bit 7 set): the rest of the input is the memory itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/allreduce.h"
#include "ipc/arena.h"
#include "ipc/batch.h"
#include "ipc/metrics.h"
#include "ipc/ring.h"
#include "stages/featbuf.h"

enum { OBJ_RING, OBJ_ARENA, OBJ_METRICS, OBJ_FEATBUF, OBJ_ALLREDUCE, OBJ_BATCH, OBJ_COUNT };

static volatile uint8_t g_sink;

/* Reads every byte of [p, p + n): ASan checks each one. */
static void touch(const void *p, size_t n)
{
    const volatile uint8_t *b = p;
    uint8_t x = 0;
    for (size_t i = 0; i < n; i++)
        x ^= b[i];
    g_sink ^= x;
}

/* An allocation of exactly n bytes, page aligned (every bind wants at least
 * 64-byte alignment; the arena and the all-reduce want a page). */
static void *exact_alloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0)
        abort();
    return p;
}

/* Small parameters: every object stays a few pages. */
static size_t format(int obj, const uint8_t *p, uint8_t **mem)
{
    char err[512];
    size_t n = 0;
    switch (obj) {
    case OBJ_RING: {
        struct ring_params rp = {.entry_size = 1 + p[0] % 64, .capacity = 2u << (p[1] % 6), .producers = p[2] % 3};
        n = ring_mem_size(&rp);
        *mem = exact_alloc(n);
        if (ring_mem_format(*mem, n, &rp, err, sizeof err) != 0)
            abort();
        break;
    }
    case OBJ_ARENA: {
        struct arena_params ap = {.slot_size = 1 + (size_t)p[0] * 8, .nslots = 1 + p[1] % 8};
        n = arena_mem_size(&ap);
        *mem = exact_alloc(n);
        if (arena_mem_format(*mem, n, &ap, err, sizeof err) != 0)
            abort();
        break;
    }
    case OBJ_METRICS: {
        uint32_t nb = 1 + p[0] % 16;
        n = metrics_mem_size(nb);
        *mem = exact_alloc(n);
        if (metrics_mem_format(*mem, n, nb, err, sizeof err) != 0)
            abort();
        break;
    }
    case OBJ_FEATBUF: {
        struct featbuf_params fp = {.n_nodes = 1 + (uint64_t)p[0] * 4,
                                    .nslots = 1 + p[1] % 32,
                                    .row_bytes = 1 + (size_t)p[2] * 2,
                                    .row_align = p[3] % 2 ? 64 : 0,
                                    .rows_on_device = p[4] & 1,
                                    .policy = FEATBUF_POLICY_LRU};
        n = featbuf_mem_size(&fp);
        *mem = exact_alloc(n);
        if (featbuf_mem_format(*mem, n, &fp, err, sizeof err) != 0)
            abort();
        break;
    }
    case OBJ_ALLREDUCE: {
        uint32_t ranks = 1 + p[0] % 4;
        size_t floats = 1 + (size_t)p[1] * 16;
        n = allreduce_mem_size(ranks, floats);
        *mem = exact_alloc(n);
        if (allreduce_mem_format(*mem, n, ranks, floats, err, sizeof err) != 0)
            abort();
        break;
    }
    case OBJ_BATCH: {
        struct batch_shape s = {.batch_size = 1 + p[0] % 8,
                                .layers = 1 + p[1] % 3,
                                .nodes = 1u << 20,
                                .edges = BATCH_UNKNOWN,
                                .max_in_degree = BATCH_UNKNOWN};
        for (uint32_t k = 0; k < s.layers; k++)
            s.fanouts[k] = (p[2] >> (2 * k)) % 4;
        n = batch_max_bytes(&s, err, sizeof err);
        if (n == 0)
            abort();
        *mem = exact_alloc(n);
        memset(*mem, 0, n);
        struct batch_writer w;
        struct batch_id id = {.batch = p[3], .epoch = p[4], .rank = 0, .split = p[5] % BATCH_SPLITS};
        uint32_t targets = (uint32_t)s.batch_size;
        if (batch_init(&w, *mem, n, &s, targets, &id, err, sizeof err) != 0)
            abort();
        uint64_t next = 0;
        for (uint32_t t = 0; t < targets; t++)
            batch_add_target(&w, next++, (int32_t)t % 3 - 1);
        uint32_t rnd = (uint32_t)p[6] << 8 | p[7];
        for (uint32_t k = 0; k < s.layers; k++) {
            batch_begin_block(&w);
            uint32_t dsts = w.nn;
            for (uint32_t d = 0; d < dsts; d++) {
                for (int64_t f = 0; f < s.fanouts[k]; f++) {
                    rnd = rnd * 1103515245u + 12345u;
                    int64_t src = (rnd >> 16) % 2 ? batch_add_node(&w, next++) : (int64_t)((rnd >> 17) % w.nn);
                    if (src >= 0)
                        batch_add_edge(&w, (uint32_t)src);
                }
                batch_end_dst(&w);
            }
            batch_end_block(&w);
        }
        if (batch_finish(&w, err, sizeof err) != 0)
            abort();
        break;
    }
    }
    return n;
}

/* Binds obj to mem[0..n) and, if accepted, reads all the memory the handle
 * claims. */
static void bind_and_touch(int obj, uint8_t *mem, size_t n, uint8_t rank)
{
    char err[512];
    switch (obj) {
    case OBJ_RING: {
        struct ring r;
        if (ring_init(&r, mem, n, err, sizeof err) == 0) {
            if (r.capacity < 2 || r.mask != r.capacity - 1 || r.stride < r.entry_size)
                abort();
            touch(r.slots, (size_t)r.capacity * r.stride);
            g_sink ^= (uint8_t)ring_count(&r);
            ring_free(&r);
        }
        break;
    }
    case OBJ_ARENA: {
        struct arena a;
        if (arena_init(&a, mem, n, err, sizeof err) == 0) {
            if (a.stride < a.slot_size || a.free.capacity < a.nslots)
                abort();
            touch((const void *)a.state, (size_t)a.nslots * sizeof *a.state);
            touch(a.slots, (size_t)a.nslots * a.stride);
            touch(a.free.slots, (size_t)a.free.capacity * a.free.stride);
            arena_free(&a);
        }
        break;
    }
    case OBJ_METRICS: {
        struct metrics_page m;
        if (metrics_init(&m, mem, n, err, sizeof err) == 0) {
            touch(m.blocks, (size_t)m.nblocks * sizeof *m.blocks);
            metrics_free(&m);
        }
        break;
    }
    case OBJ_FEATBUF: {
        struct featbuf fb;
        if (featbuf_init(&fb, mem, n, err, sizeof err) == 0) {
            /* header and slot records, the node map, the rows */
            if ((uint8_t *)fb.slots < mem || (uint8_t *)fb.map < (uint8_t *)fb.slots || fb.stride < fb.row_bytes)
                abort();
            touch(mem, (size_t)((uint8_t *)fb.map - mem));
            touch(fb.map, (size_t)fb.n_nodes * sizeof *fb.map);
            if (fb.rows)
                touch(fb.rows, (size_t)fb.nslots * fb.stride);
            featbuf_free(&fb);
        }
        break;
    }
    case OBJ_ALLREDUCE: {
        struct allreduce a;
        int32_t r = rank % 2 ? ALLREDUCE_NO_RANK : rank / 2 % 8;
        if (allreduce_init(&a, mem, n, r, err, sizeof err) == 0) {
            if (a.stride < a.max_floats)
                abort();
            touch(mem, (size_t)((uint8_t *)a.in - mem));
            touch(a.in, (size_t)a.ranks * a.stride * sizeof(float));
            touch(a.out, a.max_floats * sizeof(float));
            allreduce_free(&a);
        }
        break;
    }
    case OBJ_BATCH: {
        struct batch_view v;
        if (batch_view(mem, n, 0, &v, err, sizeof err) == 0) {
            uint32_t L = v.h.layers;
            touch(v.labels, (size_t)v.h.targets * sizeof *v.labels);
            touch(v.nodes, (size_t)v.h.n[L] * sizeof *v.nodes);
            touch(v.alias, (size_t)v.h.n[L] * sizeof *v.alias);
            for (uint32_t k = 0; k < L; k++) {
                touch(v.indptr[k], ((size_t)v.h.n[k] + 1) * sizeof *v.indptr[k]);
                touch(v.src[k], (size_t)v.h.e[k] * sizeof *v.src[k]);
                for (uint32_t j = 0; j < v.h.e[k]; j++)
                    if (v.src[k][j] >= v.h.n[k + 1])
                        abort(); /* a full view promises sources below n[k+1] */
            }
        }
        break;
    }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int obj = (data[0] & 7) % OBJ_COUNT;
    if (data[0] & 0x80) { /* raw memory */
        size_t n = size - 1;
        uint8_t *mem = exact_alloc(n);
        memcpy(mem, data + 1, n);
        bind_and_touch(obj, mem, n, data[0] >> 3);
        free(mem);
        return 0;
    }
    if (size < 10)
        return 0;
    uint8_t *full = NULL;
    size_t n = format(obj, data + 1, &full);
    for (size_t i = 10; i + 3 <= size; i += 3) {
        size_t off = ((size_t)data[i] | (size_t)data[i + 1] << 8) % n;
        full[off] = data[i + 2];
    }
    /* byte 9: how much to cut off the end (0: nothing) */
    size_t cut = (size_t)data[9] * 8, len = cut < n ? n - cut : 0;
    uint8_t *mem = exact_alloc(len);
    memcpy(mem, full, len);
    free(full);
    bind_and_touch(obj, mem, len, data[8]);
    free(mem);
    return 0;
}
