/* cachesim.c - row traces, the static policy's hot set and the offline
 * replay of a trace (contracts in cachesim.h). */
#include "stages/cachesim.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/dataset_scan.h"
#include "core/util.h"
#include "stages/featbuf.h"

/* ---- writing ------------------------------------------------------------ */

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int rowtrace_open(struct rowtrace *t, const char *base, int rank, uint64_t nodes, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    int n = snprintf(t->path, sizeof t->path, "%s.rank%d", base, rank);
    if (n < 0 || (size_t)n >= sizeof t->path)
        return sl_errf(err, errlen, -ENAMETOOLONG, "pipeline.trace_rows: '%s' is too long a path", base);
    t->f = fopen(t->path, "wb");
    if (!t->f)
        return sl_errf(err, errlen, -errno, "pipeline.trace_rows: cannot create %s: %s", t->path, strerror(errno));
    unsigned char h[ROWTRACE_HDR_BYTES] = {0};
    memcpy(h, ROWTRACE_MAGIC, 8);
    put_u32(h + 8, ROWTRACE_VERSION);
    put_u32(h + 12, (uint32_t)rank);
    put_u64(h + 16, nodes);
    if (fwrite(h, sizeof h, 1, t->f) != 1) {
        int rc = -errno;
        fclose(t->f);
        t->f = NULL;
        return sl_errf(err, errlen, rc ? rc : -EIO, "pipeline.trace_rows: writing %s failed", t->path);
    }
    pthread_mutex_init(&t->mu, NULL);
    return 0;
}

int rowtrace_add(struct rowtrace *t, uint64_t batch, const uint64_t *nodes, uint32_t n)
{
    unsigned char h[16] = {0};
    put_u64(h, batch);
    put_u32(h + 8, n);
    pthread_mutex_lock(&t->mu);
    if (t->rc == 0) {
        bool ok = fwrite(h, sizeof h, 1, t->f) == 1;
        for (uint32_t i = 0; ok && i < n; i++) {
            unsigned char b[8];
            put_u64(b, nodes[i]);
            ok = fwrite(b, 8, 1, t->f) == 1;
        }
        if (!ok)
            t->rc = errno ? -errno : -EIO;
    }
    int rc = t->rc;
    pthread_mutex_unlock(&t->mu);
    return rc;
}

int rowtrace_close(struct rowtrace *t, char *err, size_t errlen)
{
    if (!t->f)
        return 0;
    int rc = t->rc;
    if (fclose(t->f) != 0 && rc == 0)
        rc = -errno;
    t->f = NULL;
    pthread_mutex_destroy(&t->mu);
    if (rc)
        return sl_errf(err, errlen, rc, "pipeline.trace_rows: writing %s failed: %s", t->path, strerror(-rc));
    return 0;
}

/* ---- reading ------------------------------------------------------------ */

void cachesim_trace_free(struct cachesim_trace *t)
{
    if (!t)
        return;
    free(t->batch);
    free(t->off);
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

static int grow(void **p, uint64_t *cap, uint64_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    uint64_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

int cachesim_trace_read(struct cachesim_trace *t, const char *path, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f)
        return sl_errf(err, errlen, -errno, "%s: %s", path, strerror(errno));
    unsigned char h[ROWTRACE_HDR_BYTES];
    int rc = 0;
    if (fread(h, sizeof h, 1, f) != 1 || memcmp(h, ROWTRACE_MAGIC, 8) || get_u32(h + 8) != ROWTRACE_VERSION) {
        fclose(f);
        return sl_errf(err, errlen, -EINVAL, "%s: not a version %u row trace (pipeline.trace_rows writes them)", path,
                       ROWTRACE_VERSION);
    }
    t->rank = get_u32(h + 12);
    t->n_nodes = get_u64(h + 16);
    uint64_t cap_b = 0, cap_o = 0, cap_n = 0;
    if (grow((void **)&t->off, &cap_o, 1, sizeof *t->off)) {
        fclose(f);
        return sl_errf(err, errlen, -ENOMEM, "out of memory reading %s", path);
    }
    t->off[0] = 0;
    for (;;) {
        unsigned char r[16];
        size_t got = fread(r, 1, sizeof r, f);
        if (got == 0)
            break;
        if (got < sizeof r) {
            t->truncated = true;
            break;
        }
        uint64_t batch = get_u64(r);
        uint32_t n = get_u32(r + 8);
        uint64_t at = t->accesses;
        if (grow((void **)&t->nodes, &cap_n, at + n, sizeof *t->nodes) ||
            grow((void **)&t->batch, &cap_b, t->batches + 1, sizeof *t->batch) ||
            grow((void **)&t->off, &cap_o, t->batches + 2, sizeof *t->off)) {
            rc = sl_errf(err, errlen, -ENOMEM, "out of memory reading %s", path);
            break;
        }
        bool whole = true;
        for (uint32_t i = 0; i < n && whole; i++) {
            unsigned char b[8];
            whole = fread(b, 8, 1, f) == 1;
            if (whole) {
                t->nodes[at + i] = get_u64(b);
                if (t->nodes[at + i] >= t->n_nodes) {
                    rc = sl_errf(err, errlen, -EINVAL,
                                 "%s: batch %" PRIu64 " names node %" PRIu64 ", but the trace says %" PRIu64 " nodes",
                                 path, batch, t->nodes[at + i], t->n_nodes);
                    break;
                }
            }
        }
        if (rc)
            break;
        if (!whole) {
            t->truncated = true;
            break;
        }
        t->batch[t->batches++] = batch;
        t->accesses += n;
        t->off[t->batches] = t->accesses;
        t->max_batch = SL_MAX(t->max_batch, n);
    }
    if (rc == 0 && ferror(f))
        rc = sl_errf(err, errlen, -EIO, "%s: read error", path);
    fclose(f);
    if (rc)
        cachesim_trace_free(t);
    return rc;
}

/* ---- the hot set --------------------------------------------------------- */

/* The k-th largest value of a[0..n) (1 <= k <= n); reorders a. */
static uint32_t kth_largest(uint32_t *a, uint64_t n, uint64_t k)
{
    uint64_t lo = 0, hi = n - 1, want = k - 1; /* index in descending order */
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    while (lo < hi) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t pivot = a[lo + (seed >> 33) % (hi - lo + 1)];
        /* three-way partition: > pivot, == pivot, < pivot */
        uint64_t i = lo, lt = lo, gt = hi;
        while (i <= gt) {
            if (a[i] > pivot) {
                uint32_t x = a[i];
                a[i++] = a[lt];
                a[lt++] = x;
            } else if (a[i] < pivot) {
                uint32_t x = a[i];
                a[i] = a[gt];
                a[gt] = x;
                if (gt == 0)
                    break;
                gt--;
            } else {
                i++;
            }
        }
        if (want < lt)
            hi = lt - 1;
        else if (want > gt)
            lo = gt + 1;
        else
            return pivot;
    }
    return a[lo];
}

/* The k-th largest of count[0..n) (1 <= k <= n) into *t, without a copy
 * of count: a histogram of the counts below HIST_TOP says which value it
 * is, unless it lies among the counts of HIST_TOP or more, which are then
 * gathered (at most edges / HIST_TOP of them) and selected. 0 or -ENOMEM. */
#define HIST_TOP 65535u
static int hot_threshold(const uint32_t *count, uint64_t n, uint64_t k, uint32_t *t, char *err, size_t errlen)
{
    uint64_t *hist = calloc((size_t)HIST_TOP + 1, sizeof *hist);
    if (!hist)
        return sl_errf(err, errlen, -ENOMEM, "no memory for a histogram of out-degrees");
    for (uint64_t v = 0; v < n; v++)
        hist[SL_MIN(count[v], HIST_TOP)]++;
    uint64_t top = hist[HIST_TOP], seen = top;
    int rc = 0;
    if (seen >= k) { /* among the largest counts: select exactly */
        uint32_t *big = malloc((size_t)top * sizeof *big);
        if (!big) {
            rc = sl_errf(err, errlen, -ENOMEM, "no memory for %" PRIu64 " out-degrees", top);
        } else {
            uint64_t j = 0;
            for (uint64_t v = 0; v < n; v++)
                if (count[v] >= HIST_TOP)
                    big[j++] = count[v];
            *t = kth_largest(big, top, k);
            free(big);
        }
    } else {
        uint32_t b = HIST_TOP;
        while (seen < k) /* ends: every count is in some bin, and k <= n */
            seen += hist[--b];
        *t = b;
    }
    free(hist);
    return rc;
}

int cachesim_hot_set(const char *dir, const struct dataset_meta *m, uint64_t k, uint64_t *hot, char *err, size_t errlen)
{
    const struct dataset_file *fi = &m->f[DATASET_INDICES];
    uint64_t n = m->nodes;
    if (k == 0)
        return 0;
    if (!fi->present || k > n)
        return sl_errf(err, errlen, -EINVAL, "%s: a hot set of %" PRIu64 " of %" PRIu64 " nodes needs indices.bin", dir,
                       k, n);
    size_t elem = fi->dtype == DTYPE_U64 ? 8 : 4;
    uint32_t *count = calloc(n, sizeof *count);
    if (!count)
        return sl_errf(err, errlen, -ENOMEM, "no memory for the out-degrees of %" PRIu64 " nodes", n);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, fi->file);
    struct dataset_scan s;
    unsigned char *buf = malloc(DATASET_SCAN_RECORD_MAX);
    int rc = buf ? dataset_scan_open(&s, path, false, err, errlen)
                 : sl_errf(err, errlen, -ENOMEM, "no memory to read %s", path);
    uint64_t left = m->edges;
    while (rc == 0 && left > 0) {
        uint64_t take = SL_MIN(left, (uint64_t)(DATASET_SCAN_RECORD_MAX / elem));
        if ((rc = dataset_scan_read(&s, buf, (size_t)(take * elem), err, errlen)) != 0)
            break;
        for (uint64_t i = 0; i < take; i++) {
            uint64_t v;
            if (elem == 8) {
                memcpy(&v, buf + i * 8, 8);
            } else {
                uint32_t w;
                memcpy(&w, buf + i * 4, 4);
                v = w;
            }
            if (v >= n) {
                rc = sl_errf(err, errlen, -EINVAL, "%s: node id %" PRIu64 " >= %" PRIu64 "; run gnnprep check", path, v,
                             n);
                break;
            }
            if (count[v] != UINT32_MAX)
                count[v]++;
        }
        left -= take;
    }
    if (buf)
        dataset_scan_free(&s);
    free(buf);
    uint32_t t = 0;
    if (rc == 0)
        rc = hot_threshold(count, n, k, &t, err, errlen);
    if (rc == 0) {
        uint64_t above = 0, got = 0;
        for (uint64_t v = 0; v < n; v++)
            above += count[v] > t;
        uint64_t ties = k - above; /* the lowest ids among those equal to t */
        for (uint64_t v = 0; v < n && got < k; v++)
            if (count[v] > t || (count[v] == t && ties > 0 && ties--))
                hot[got++] = v;
    }
    free(count);
    return rc;
}

/* ---- replay: Belady ------------------------------------------------------ */

struct hent {
    uint64_t key, node;
};

struct heap {
    struct hent *a;
    uint64_t n, cap;
};

static int heap_push(struct heap *h, uint64_t key, uint64_t node)
{
    if (grow((void **)&h->a, &h->cap, h->n + 1, sizeof *h->a))
        return -ENOMEM;
    uint64_t i = h->n++;
    while (i > 0 && h->a[(i - 1) / 2].key < key) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = (struct hent){key, node};
    return 0;
}

static struct hent heap_pop(struct heap *h)
{
    struct hent top = h->a[0], last = h->a[--h->n];
    uint64_t i = 0;
    for (;;) {
        uint64_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->a[c + 1].key > h->a[c].key)
            c++;
        if (h->a[c].key <= last.key)
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = last;
    return top;
}

#define KEY_NONE (UINT64_MAX - 1) /* no next use: the farthest */
#define KEY_NOW UINT64_MAX        /* used by the current batch: never a victim */

static int belady(const struct cachesim_trace *t, uint32_t slots, uint64_t *misses, char *err, size_t errlen)
{
    uint64_t n = t->n_nodes, acc = t->accesses;
    uint64_t *next = malloc((acc ? acc : 1) * sizeof *next), *last = malloc(n * sizeof *last);
    uint64_t *key = malloc(n * sizeof *key);
    uint8_t *res = calloc(n, 1);
    struct heap h = {0};
    int rc = 0;
    if (!next || !last || !key || !res) {
        rc = sl_errf(err, errlen, -ENOMEM, "no memory to replay %" PRIu64 " accesses", acc);
        goto out;
    }
    for (uint64_t v = 0; v < n; v++)
        last[v] = KEY_NONE;
    for (uint64_t r = t->batches; r-- > 0;) { /* next record using each access's node */
        for (uint64_t i = t->off[r]; i < t->off[r + 1]; i++)
            next[i] = last[t->nodes[i]];
        for (uint64_t i = t->off[r]; i < t->off[r + 1]; i++)
            last[t->nodes[i]] = r;
    }
    uint64_t resident = 0, miss = 0;
    for (uint64_t r = 0; r < t->batches && rc == 0; r++) {
        for (uint64_t i = t->off[r]; i < t->off[r + 1]; i++) {
            uint64_t v = t->nodes[i];
            if (res[v]) {
                key[v] = KEY_NOW;
                continue;
            }
            miss++;
            if (resident == slots) {
                for (;;) {
                    if (h.n == 0) {
                        rc = sl_errf(err, errlen, -ENOSPC,
                                     "batch %" PRIu64 " has more distinct nodes than the %u slots", t->batch[r], slots);
                        goto out;
                    }
                    struct hent e = heap_pop(&h);
                    if (res[e.node] && key[e.node] == e.key && e.key != KEY_NOW) {
                        res[e.node] = 0;
                        resident--;
                        break;
                    }
                }
            }
            res[v] = 1;
            resident++;
            key[v] = KEY_NOW;
        }
        for (uint64_t i = t->off[r]; i < t->off[r + 1] && rc == 0; i++) {
            uint64_t v = t->nodes[i];
            if (key[v] != KEY_NOW)
                continue; /* a duplicate, already keyed */
            key[v] = next[i];
            if (heap_push(&h, key[v], v))
                rc = sl_errf(err, errlen, -ENOMEM, "no memory to replay %" PRIu64 " accesses", acc);
        }
    }
    *misses = miss;
out:
    free(next);
    free(last);
    free(key);
    free(res);
    free(h.a);
    return rc;
}

/* ---- replay: the live policies ------------------------------------------ */

static int live(const struct cachesim_trace *t, const struct cachesim_run *r, uint64_t *misses, char *err,
                size_t errlen)
{
    bool la = r->policy == CACHESIM_LOOKAHEAD;
    uint32_t npins = r->policy == CACHESIM_LRU ? 0 : r->nhot;
    struct featbuf_params p = {.n_nodes = t->n_nodes,
                               .nslots = r->slots,
                               .row_bytes = 8,
                               .rows_on_device = true,
                               .policy = la ? FEATBUF_POLICY_LOOKAHEAD : FEATBUF_POLICY_LRU,
                               .pin_slots = npins};
    if (la) {
        p.window = r->window;
        p.hint_entries = r->hint_entries ? r->hint_entries : SL_MAX(t->accesses, 1);
        if (p.hint_entries >= UINT32_MAX)
            p.hint_entries = UINT32_MAX - 1;
    }
    size_t len = featbuf_mem_size(&p);
    if (len == 0)
        return sl_errf(err, errlen, -EINVAL,
                       "a %u-slot buffer (window %u, %u pinned) for %" PRIu64 " nodes: bad parameters", r->slots,
                       r->window, npins, t->n_nodes);
    void *mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED)
        return sl_errf(err, errlen, -ENOMEM, "no memory for a %u-slot buffer", r->slots);
    struct featbuf fb;
    uint32_t *slots = malloc(SL_MAX(t->max_batch, 1u) * sizeof *slots);
    uint8_t *act = malloc(SL_MAX(t->max_batch, 1u));
    int rc = slots && act ? 0 : sl_errf(err, errlen, -ENOMEM, "out of memory");
    if (rc == 0)
        rc = featbuf_mem_format(mem, len, &p, err, errlen);
    if (rc == 0)
        rc = featbuf_init(&fb, mem, len, err, errlen);
    for (uint32_t i = 0; rc == 0 && i < npins; i++)
        if ((rc = featbuf_pin(&fb, r->hot[i])) != 0)
            sl_errf(err, errlen, rc, "pinning hot node %" PRIu64 ": %s", r->hot[i], strerror(-rc));
    uint64_t hinted = 0, miss = 0;
    for (uint64_t b = 0; rc == 0 && b < t->batches; b++) {
        while (la && hinted < t->batches && hinted <= b + r->window) {
            uint64_t o = t->off[hinted];
            rc = featbuf_hint(&fb, t->batch[hinted], t->nodes + o, (uint32_t)(t->off[hinted + 1] - o));
            hinted++;
        }
        const uint64_t *nodes = t->nodes + t->off[b];
        uint32_t n = (uint32_t)(t->off[b + 1] - t->off[b]);
        if (rc == 0 && (rc = featbuf_acquire_batch(&fb, t->batch[b], nodes, n, slots, act)) != 0) {
            sl_errf(err, errlen, rc, "batch %" PRIu64 " (%u nodes) does not fit %u slots%s: %s", t->batch[b], n,
                    r->slots, npins ? " less the hot set" : "", strerror(-rc));
            break;
        }
        for (uint32_t i = 0; rc == 0 && i < n; i++)
            if (act[i] == FEATBUF_LOAD) {
                miss++;
                rc = featbuf_loaded(&fb, slots[i]);
            }
        if (rc == 0)
            rc = featbuf_release_many(&fb, slots, n);
    }
    if (rc == 0) {
        char why[256];
        if (featbuf_check(&fb, why, sizeof why))
            rc = sl_errf(err, errlen, -EUCLEAN, "the %s buffer is inconsistent after the replay: %s",
                         cachesim_policy_name(r->policy), why);
    }
    *misses = miss;
    free(slots);
    free(act);
    munmap(mem, len);
    return rc;
}

int cachesim_replay(const struct cachesim_trace *t, const struct cachesim_run *r, uint64_t *misses, char *err,
                    size_t errlen)
{
    if (r->slots == 0 || (r->policy != CACHESIM_LRU && r->policy != CACHESIM_BELADY && r->nhot >= r->slots))
        return sl_errf(err, errlen, -EINVAL, "%u slots with a hot set of %u: need more slots than hot nodes", r->slots,
                       r->nhot);
    if (r->slots < t->max_batch)
        return sl_errf(err, errlen, -EINVAL, "%u slots hold fewer rows than the trace's largest batch (%u nodes)",
                       r->slots, t->max_batch);
    if (r->policy == CACHESIM_BELADY)
        return belady(t, r->slots, misses, err, errlen);
    return live(t, r, misses, err, errlen);
}

const char *cachesim_policy_name(enum cachesim_policy p)
{
    static const char *const names[] = {"lru", "static", "lookahead", "belady"};
    return (unsigned)p < 4 ? names[p] : "?";
}
