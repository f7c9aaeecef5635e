/* csc.c - memory-bounded conversion of an edge stream into CSC (csc.h).
 * (~870 lines: the run writer, the radix sort and the k-way merge share
 * one record format and memory budget, described here once.)
 *
 * Edges become records ordered by (dst, src): one u64 key dst << b | src
 * when ids fit in 32 bits (b = bits of nodes-1, so a plain integer order is
 * the (dst, src) order), otherwise a 16-byte {dst, src} pair. Records collect
 * in one buffer; a full buffer is sorted as two halves (LSD radix on the 2b
 * key bits that can differ, one half per thread) and the halves are merged,
 * deduplicated when asked, into a run file in tmpdir. finish() sorts what is
 * left, keeps it in memory, and merges it with the runs through a heap,
 * streaming indices and indptr out as dst advances. More runs than the
 * fan-in (open files, or read buffers that would be too small) are first
 * merged in groups into longer runs. The memory split is described in
 * csc.h. */
#include "prep/csc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

#define CSC_DEFAULT_FANIN 128u
#define CSC_MIN_READ_BUF (16u << 10)   /* smallest read buffer per merged run */
#define CSC_IO_MIN (256u << 10)
#define CSC_IO_MAX (8u << 20)
#define CSC_FIRST_RECS (1u << 16)      /* first size of the edge buffer */
#define CSC_RADIX_BITS 11u
#define CSC_MAX_PASSES 6u              /* ceil(64 / 11) digits per 64-bit word */
#define CSC_HIST_WORDS (CSC_MAX_PASSES << CSC_RADIX_BITS)
#define CSC_THREAD_MIN (1u << 18)      /* records per half worth a second thread */

_Static_assert(2 * CSC_HIST_WORDS * sizeof(uint64_t) <= CSC_IO_MIN, "both halves' histograms fit in io");

typedef struct wrec {
    uint64_t dst, src;
} wrec;

typedef struct csc_run {
    char *path;
    uint64_t recs;
} csc_run;

struct csc {
    struct csc_opts o;
    char tmpdir[4096];
    bool wide;
    unsigned b;              /* bits per id (0 when nodes == 1) */
    size_t rsz;              /* bytes per record: 8 or 16 */
    size_t cap;              /* most records the edge buffer may hold */
    unsigned char *buf;      /* (bcap records) edges as added */
    size_t bcap, len;
    unsigned char *tmp;      /* (tbytes) radix double buffer, then merge read buffers */
    size_t tbytes;
    unsigned char *io;       /* (io_bytes) see csc.h */
    size_t io_bytes;
    csc_run *runs;
    size_t nruns, runs_cap;
    unsigned fanin;
    int failed;              /* first fatal error */
    bool finished;
    struct csc_stats st;
};

/* ------------------------------------------------------------------ */
/* memory */

static void note_peak(struct csc *c)
{
    uint64_t now = c->io_bytes + (uint64_t)c->bcap * c->rsz + c->tbytes;
    if (now > c->st.peak_bytes)
        c->st.peak_bytes = now;
}

static int grow_buf(struct csc *c, char *err, size_t errlen)
{
    size_t ncap = c->bcap ? c->bcap * 2 : CSC_FIRST_RECS;
    if (ncap > c->cap)
        ncap = c->cap;
    unsigned char *p = realloc(c->buf, ncap * c->rsz);
    if (!p)
        return sl_errf(err, errlen, -ENOMEM, "out of memory growing the edge buffer to %zu records; lower --mem-limit",
                       ncap);
    c->buf = p;
    c->bcap = ncap;
    note_peak(c);
    return 0;
}

static int ensure_tmp(struct csc *c, size_t bytes, char *err, size_t errlen)
{
    if (c->tbytes >= bytes)
        return 0;
    free(c->tmp);
    c->tbytes = 0;
    c->tmp = malloc(bytes ? bytes : 1);
    if (!c->tmp)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for a %zu-byte sort buffer; lower --mem-limit", bytes);
    c->tbytes = bytes;
    note_peak(c);
    return 0;
}

/* ------------------------------------------------------------------ */
/* sorting: LSD radix on the bits that can differ */

typedef struct sort_job {
    void *a, *t;        /* records and a second buffer of the same size */
    size_t n;
    unsigned b;
    bool wide;
    uint64_t *hist;     /* CSC_HIST_WORDS */
    void *out;          /* a or t: where the sorted records ended up */
} sort_job;

/* Digit layout for `bits` key bits: passes of d <= 11 bits each. */
static unsigned radix_passes(unsigned bits, unsigned *d)
{
    unsigned passes = (bits + CSC_RADIX_BITS - 1) / CSC_RADIX_BITS;
    *d = passes ? (bits + passes - 1) / passes : 0;
    return passes;
}

/* Turns counts into starting offsets; false when one bucket holds all n
 * (the pass would not move anything). */
static bool radix_offsets(uint64_t *h, size_t nb, size_t n, size_t first_digit)
{
    if (h[first_digit] == n)
        return false;
    uint64_t sum = 0;
    for (size_t j = 0; j < nb; j++) {
        uint64_t k = h[j];
        h[j] = sum;
        sum += k;
    }
    return true;
}

static uint64_t *radix_u64(uint64_t *a, uint64_t *t, size_t n, unsigned bits, uint64_t *hist)
{
    unsigned d, passes = radix_passes(bits, &d);
    if (n < 2 || passes == 0)
        return a;
    size_t nb = (size_t)1 << d;
    uint64_t mask = nb - 1;
    memset(hist, 0, passes * nb * sizeof *hist);
    for (size_t i = 0; i < n; i++) {
        uint64_t k = a[i];
        for (unsigned p = 0; p < passes; p++)
            hist[p * nb + ((k >> (p * d)) & mask)]++;
    }
    uint64_t *src = a, *dst = t;
    for (unsigned p = 0; p < passes; p++) {
        uint64_t *h = hist + p * nb;
        unsigned sh = p * d;
        if (!radix_offsets(h, nb, n, (src[0] >> sh) & mask))
            continue;
        for (size_t i = 0; i < n; i++) {
            uint64_t k = src[i];
            dst[h[(k >> sh) & mask]++] = k;
        }
        uint64_t *x = src;
        src = dst;
        dst = x;
    }
    return src;
}

/* 16-byte records: the src word's digits first, then dst's. */
static wrec *radix_wide(wrec *a, wrec *t, size_t n, unsigned bits, uint64_t *hist)
{
    unsigned d, passes = radix_passes(bits, &d);
    if (n < 2 || passes == 0)
        return a;
    size_t nb = (size_t)1 << d;
    uint64_t mask = nb - 1;
    wrec *src = a, *dst = t;
    for (int w = 0; w < 2; w++) {
        memset(hist, 0, passes * nb * sizeof *hist);
        for (size_t i = 0; i < n; i++) {
            uint64_t k = w ? src[i].dst : src[i].src;
            for (unsigned p = 0; p < passes; p++)
                hist[p * nb + ((k >> (p * d)) & mask)]++;
        }
        for (unsigned p = 0; p < passes; p++) {
            uint64_t *h = hist + p * nb;
            unsigned sh = p * d;
            uint64_t k0 = w ? src[0].dst : src[0].src;
            if (!radix_offsets(h, nb, n, (k0 >> sh) & mask))
                continue;
            for (size_t i = 0; i < n; i++) {
                uint64_t k = w ? src[i].dst : src[i].src;
                dst[h[(k >> sh) & mask]++] = src[i];
            }
            wrec *x = src;
            src = dst;
            dst = x;
        }
    }
    return src;
}

static void *sort_job_run(void *arg)
{
    sort_job *j = arg;
    if (j->wide)
        j->out = radix_wide(j->a, j->t, j->n, j->b, j->hist);
    else
        j->out = radix_u64(j->a, j->t, j->n, 2 * j->b, j->hist);
    return NULL;
}

/* Sorts the buffer as two halves (tmp must hold len records). */
static void sort_halves(struct csc *c, sort_job job[2])
{
    size_t n0 = c->len / 2;
    size_t n[2] = {n0, c->len - n0};
    for (int h = 0; h < 2; h++) {
        size_t off = h ? n0 * c->rsz : 0;
        job[h] = (sort_job){.a = c->buf + off, .t = c->tmp + off, .n = n[h], .b = c->b, .wide = c->wide,
                            .hist = (uint64_t *)c->io + (h ? CSC_HIST_WORDS : 0)};
    }
    pthread_t th;
    if (n0 >= CSC_THREAD_MIN && pthread_create(&th, NULL, sort_job_run, &job[0]) == 0) {
        sort_job_run(&job[1]);
        pthread_join(th, NULL);
    } else {
        sort_job_run(&job[0]);
        sort_job_run(&job[1]);
    }
}

/* ------------------------------------------------------------------ */
/* merging: sources (memory or run file) -> heap -> sink (run or CSC) */

typedef struct msrc {
    const unsigned char *p, *end; /* records not yet consumed */
    unsigned char *rbuf;          /* read buffer of a file source */
    size_t rbytes;
    int fd;                       /* -1: memory source */
    uint64_t off, left;           /* file offset and bytes still to read */
    const char *path;
} msrc;

typedef struct hent {
    uint64_t hi, lo;   /* narrow: key, 0; wide: dst, src */
    size_t s;
} hent;

enum { SINK_RUN, SINK_CSC };

typedef struct sink {
    int kind;
    bool dedupe, has_last;
    uint64_t last_hi, last_lo;
    /* SINK_RUN */
    int fd;
    const char *path;
    unsigned char *wbuf;
    size_t wcap, wlen;
    uint64_t recs;
    /* SINK_CSC */
    struct file_writer ip, ix;
    uint64_t *ipbuf;     /* (ipcap) staged indptr entries */
    size_t ipcap, iplen;
    unsigned char *ixbuf; /* (ixcap bytes) staged indices */
    size_t ixcap, ixlen, idsz;
    uint64_t next_v, edges, nodes;
} sink;

static void msrc_mem(msrc *s, const void *p, size_t n, size_t rsz)
{
    *s = (msrc){.p = p, .end = (const unsigned char *)p + n * rsz, .fd = -1};
}

/* Refills a drained source: 1 data, 0 end, <0 error. */
static int msrc_fill(msrc *s, char *err, size_t errlen)
{
    if (s->fd < 0 || s->left == 0)
        return 0;
    size_t want = s->left < s->rbytes ? (size_t)s->left : s->rbytes;
    size_t got = 0;
    int rc = sl_pread_full(s->fd, s->rbuf, want, (off_t)s->off, &got);
    if (rc < 0)
        return sl_errf(err, errlen, rc, "%s: reading a run file failed at byte %" PRIu64 ": %s", s->path,
                       s->off + got, rc == -EIO && got < want ? "the file is shorter than written" : strerror(-rc));
    s->off += want;
    s->left -= want;
    s->p = s->rbuf;
    s->end = s->rbuf + want;
    return 1;
}

static inline void rec_get(const unsigned char *p, bool wide, uint64_t *hi, uint64_t *lo)
{
    if (wide) {
        wrec r;
        memcpy(&r, p, sizeof r);
        *hi = r.dst;
        *lo = r.src;
    } else {
        memcpy(hi, p, sizeof *hi);
        *lo = 0;
    }
}

static inline bool hless(const hent *x, const hent *y)
{
    return x->hi < y->hi || (x->hi == y->hi && x->lo < y->lo);
}

static void heap_down(hent *h, size_t n, size_t i)
{
    hent x = h[i];
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n)
            break;
        size_t m = l + 1 < n && hless(&h[l + 1], &h[l]) ? l + 1 : l;
        if (!hless(&h[m], &x))
            break;
        h[i] = h[m];
        i = m;
    }
    h[i] = x;
}

static int run_flush(sink *o, char *err, size_t errlen)
{
    int rc = sl_write_all(o->fd, o->wbuf, o->wlen);
    if (rc < 0)
        return sl_errf(err, errlen, rc, "%s: writing a run file failed: %s%s", o->path, strerror(-rc),
                       rc == -ENOSPC ? " (free space there or point the temporary directory elsewhere)" : "");
    o->wlen = 0;
    return 0;
}

static int csc_flush(sink *o, char *err, size_t errlen)
{
    int rc = file_writer_write(&o->ip, o->ipbuf, o->iplen * sizeof *o->ipbuf, err, errlen);
    if (rc == 0)
        rc = file_writer_write(&o->ix, o->ixbuf, o->ixlen, err, errlen);
    o->iplen = o->ixlen = 0;
    return rc;
}

/* indptr entries for nodes next_v..upto (inclusive) all equal the edge count so far. */
static int csc_close_nodes(sink *o, uint64_t upto, char *err, size_t errlen)
{
    while (o->next_v <= upto) {
        if (o->iplen == o->ipcap) {
            int rc = csc_flush(o, err, errlen);
            if (rc < 0)
                return rc;
        }
        uint64_t k = SL_MIN(upto - o->next_v + 1, (uint64_t)(o->ipcap - o->iplen));
        for (uint64_t i = 0; i < k; i++)
            o->ipbuf[o->iplen++] = o->edges;
        o->next_v += k;
    }
    return 0;
}

static inline int sink_put(const struct csc *c, sink *o, uint64_t hi, uint64_t lo, char *err, size_t errlen)
{
    if (o->kind == SINK_RUN) {
        if (o->wlen + c->rsz > o->wcap) {
            int rc = run_flush(o, err, errlen);
            if (rc < 0)
                return rc;
        }
        if (c->wide) {
            wrec r = {hi, lo};
            memcpy(o->wbuf + o->wlen, &r, sizeof r);
        } else {
            memcpy(o->wbuf + o->wlen, &hi, sizeof hi);
        }
        o->wlen += c->rsz;
        o->recs++;
        return 0;
    }
    uint64_t dst = c->wide ? hi : hi >> c->b;
    uint64_t src = c->wide ? lo : hi & ((1ull << c->b) - 1);
    if (dst >= o->next_v) {
        int rc = csc_close_nodes(o, dst, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (o->ixlen + o->idsz > o->ixcap) {
        int rc = csc_flush(o, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (o->idsz == 4) {
        uint32_t v = (uint32_t)src;
        memcpy(o->ixbuf + o->ixlen, &v, sizeof v);
    } else {
        memcpy(o->ixbuf + o->ixlen, &src, sizeof src);
    }
    o->ixlen += o->idsz;
    o->edges++;
    return 0;
}

/* Merges k sorted sources into o, dropping repeats when o->dedupe. */
static int merge(const struct csc *c, msrc *s, size_t k, sink *o, char *err, size_t errlen)
{
    int rc = 0;
    hent *h = malloc((k ? k : 1) * sizeof *h);
    if (!h)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for the merge heap");
    size_t hn = 0;
    for (size_t i = 0; i < k; i++) {
        if (s[i].p == s[i].end) {
            rc = msrc_fill(&s[i], err, errlen);
            if (rc < 0)
                goto out;
            if (rc == 0)
                continue;
        }
        h[hn].s = i;
        rec_get(s[i].p, c->wide, &h[hn].hi, &h[hn].lo);
        hn++;
    }
    for (size_t i = hn / 2; i-- > 0;)
        heap_down(h, hn, i);
    while (hn) {
        uint64_t hi = h[0].hi, lo = h[0].lo;
        if (!(o->dedupe && o->has_last && hi == o->last_hi && lo == o->last_lo)) {
            rc = sink_put(c, o, hi, lo, err, errlen);
            if (rc < 0)
                goto out;
            o->has_last = true;
            o->last_hi = hi;
            o->last_lo = lo;
        }
        msrc *t = &s[h[0].s];
        t->p += c->rsz;
        if (t->p == t->end) {
            rc = msrc_fill(t, err, errlen);
            if (rc < 0)
                goto out;
            if (rc == 0) {
                h[0] = h[--hn];
                if (hn)
                    heap_down(h, hn, 0);
                continue;
            }
        }
        rec_get(t->p, c->wide, &h[0].hi, &h[0].lo);
        heap_down(h, hn, 0);
    }
    rc = 0;
out:
    free(h);
    return rc;
}

/* ------------------------------------------------------------------ */
/* run files */

static void run_remove(csc_run *r)
{
    if (r->path) {
        unlink(r->path);
        free(r->path);
    }
    r->path = NULL;
}

static void runs_remove_all(struct csc *c)
{
    for (size_t i = 0; i < c->nruns; i++)
        run_remove(&c->runs[i]);
    c->nruns = 0;
}

/* Creates a run file, registered at once so that free() deletes it whatever
 * happens next, and points o at it (writing through c->io). */
static int run_create(struct csc *c, sink *o, char *err, size_t errlen)
{
    if (c->nruns == c->runs_cap) {
        size_t ncap = c->runs_cap ? 2 * c->runs_cap : 16;
        csc_run *r = realloc(c->runs, ncap * sizeof *r);
        if (!r)
            return sl_errf(err, errlen, -ENOMEM, "out of memory for the list of run files");
        c->runs = r;
        c->runs_cap = ncap;
    }
    size_t plen = strlen(c->tmpdir) + 32;
    char *path = malloc(plen);
    if (!path)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for a run file name");
    snprintf(path, plen, "%s/sluice-csc-XXXXXX", c->tmpdir);
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        int rc = -errno;
        sl_errf(err, errlen, rc, "%s: cannot create a run file: %s (the temporary directory must exist and be writable)",
                path, strerror(errno));
        free(path);
        return rc;
    }
    c->runs[c->nruns++] = (csc_run){.path = path};
    c->st.runs++;
    *o = (sink){.kind = SINK_RUN, .dedupe = c->o.dedupe, .fd = fd, .path = path, .wbuf = c->io,
                .wcap = c->io_bytes / c->rsz * c->rsz};
    return 0;
}

static int run_finish(struct csc *c, sink *o, char *err, size_t errlen)
{
    int rc = o->wlen ? run_flush(o, err, errlen) : 0;
    if (close(o->fd) < 0 && rc == 0)
        rc = sl_errf(err, errlen, -errno, "%s: closing a run file failed: %s", o->path, strerror(errno));
    o->fd = -1;
    if (rc == 0)
        c->runs[c->nruns - 1].recs = o->recs;
    return rc;
}

static int run_open_src(const csc_run *r, msrc *s, unsigned char *rbuf, size_t rbytes, char *err, size_t errlen)
{
    *s = (msrc){.p = rbuf, .end = rbuf, .rbuf = rbuf, .rbytes = rbytes, .path = r->path, .fd = -1};
    s->fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open a run file: %s", r->path, strerror(errno));
    posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return 0;
}

static void srcs_close(msrc *s, size_t k)
{
    for (size_t i = 0; i < k; i++)
        if (s[i].fd >= 0) {
            close(s[i].fd);
            s[i].fd = -1;
        }
}

/* Opens runs [first, first+k) as sources s[0..k), sharing the scratch buffer. */
static int runs_open(struct csc *c, size_t first, size_t k, msrc *s, char *err, size_t errlen)
{
    size_t rbytes = c->tbytes / k / c->rsz * c->rsz;
    for (size_t i = 0; i < k; i++)
        s[i].fd = -1;
    for (size_t i = 0; i < k; i++) {
        const csc_run *r = &c->runs[first + i];
        int rc = run_open_src(r, &s[i], c->tmp + i * rbytes, rbytes, err, errlen);
        s[i].left = r->recs * c->rsz;
        if (rc < 0) {
            srcs_close(s, k);
            return rc;
        }
    }
    return 0;
}

/* Sorts the full buffer and writes it out as one run. */
static int spill(struct csc *c, char *err, size_t errlen)
{
    int rc = ensure_tmp(c, c->cap * c->rsz, err, errlen);
    if (rc < 0)
        return rc;
    sort_job job[2];
    sort_halves(c, job);
    sink o;
    rc = run_create(c, &o, err, errlen);
    if (rc < 0)
        return rc;
    msrc s[2];
    msrc_mem(&s[0], job[0].out, job[0].n, c->rsz);
    msrc_mem(&s[1], job[1].out, job[1].n, c->rsz);
    rc = merge(c, s, 2, &o, err, errlen);
    if (rc < 0) {
        close(o.fd);
        return rc;
    }
    rc = run_finish(c, &o, err, errlen);
    if (rc < 0)
        return rc;
    c->len = 0;
    return 0;
}

/* Merges the oldest runs in groups until at most fan-in remain. */
static int runs_reduce(struct csc *c, char *err, size_t errlen)
{
    /* k inputs share tmp; the output writes through io. */
    size_t by_mem = c->tbytes / CSC_MIN_READ_BUF;
    size_t fanin = SL_MAX((size_t)2, SL_MIN((size_t)c->fanin, by_mem));
    msrc *s = NULL;
    int rc = 0;
    while (c->nruns > fanin) {
        size_t k = SL_MIN(fanin, c->nruns - fanin + 1);
        free(s);
        s = malloc(k * sizeof *s);
        if (!s)
            return sl_errf(err, errlen, -ENOMEM, "out of memory for merge sources");
        rc = runs_open(c, 0, k, s, err, errlen);
        if (rc < 0)
            goto out;
        sink o;
        rc = run_create(c, &o, err, errlen);
        if (rc < 0) {
            srcs_close(s, k);
            goto out;
        }
        rc = merge(c, s, k, &o, err, errlen);
        srcs_close(s, k);
        if (rc < 0) {
            close(o.fd);
            goto out;
        }
        rc = run_finish(c, &o, err, errlen);
        if (rc < 0)
            goto out;
        for (size_t i = 0; i < k; i++)
            run_remove(&c->runs[i]);
        memmove(c->runs, c->runs + k, (c->nruns - k) * sizeof *c->runs);
        c->nruns -= k;
        c->st.merges++;
    }
out:
    free(s);
    return rc;
}

/* ------------------------------------------------------------------ */
/* public */

int csc_init(struct csc **out, const struct csc_opts *o, char *err, size_t errlen)
{
    *out = NULL;
    if (o->nodes == 0)
        return sl_errf(err, errlen, -EINVAL, "a graph needs at least one node");
    if (o->nodes > (1ull << 62))
        return sl_errf(err, errlen, -EINVAL, "%" PRIu64 " nodes is more than indptr can address", o->nodes);
    if (o->mem_limit < CSC_MIN_MEM)
        return sl_errf(err, errlen, -EINVAL,
                       "memory limit of %" PRIu64 " bytes is below the minimum of 1 MiB for edge conversion; "
                       "raise --mem-limit",
                       o->mem_limit);
    const char *tmpdir = o->tmpdir;
    if (!tmpdir || !*tmpdir)
        tmpdir = getenv("TMPDIR");
    if (!tmpdir || !*tmpdir)
        tmpdir = "/tmp";
    if (strlen(tmpdir) + 32 > sizeof((struct csc *)0)->tmpdir)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: temporary directory path is too long", tmpdir);

    int rc = 0;
    struct csc *c = calloc(1, sizeof *c);
    if (!c)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for the CSC builder");
    c->o = *o;
    snprintf(c->tmpdir, sizeof c->tmpdir, "%s", tmpdir);
    c->o.tmpdir = c->tmpdir;
    c->wide = o->force_wide || o->nodes > (1ull << 32);
    c->b = o->nodes == 1 ? 0 : 64u - (unsigned)__builtin_clzll(o->nodes - 1);
    c->rsz = c->wide ? sizeof(wrec) : sizeof(uint64_t);
    c->fanin = o->max_fanin ? SL_MAX(o->max_fanin, 2u) : CSC_DEFAULT_FANIN;
    uint64_t io = sl_round_up(o->mem_limit / 256, 4096);
    c->io_bytes = (size_t)SL_MAX((uint64_t)CSC_IO_MIN, SL_MIN(io, (uint64_t)CSC_IO_MAX));
    uint64_t cap = (o->mem_limit - c->io_bytes) / (2 * c->rsz);
    c->cap = (size_t)SL_MIN(cap, (uint64_t)SIZE_MAX / 64);
    c->st.wide = c->wide;
    c->io = malloc(c->io_bytes);
    if (!c->io) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for the conversion's I/O buffer");
        goto err;
    }
    note_peak(c);
    *out = c;
    return 0;
err:
    csc_free(c);
    return rc;
}

static int misuse(const struct csc *c, char *err, size_t errlen)
{
    if (c->failed)
        return sl_errf(err, errlen, -EINVAL, "edge conversion failed earlier (%s); start it again",
                       strerror(-c->failed));
    return sl_errf(err, errlen, -EINVAL, "edge conversion already finished; start a new one");
}

static size_t add_narrow(struct csc *c, const uint64_t *src, const uint64_t *dst, size_t m)
{
    uint64_t *out = (uint64_t *)c->buf + c->len;
    unsigned b = c->b;
    bool drop = c->o.drop_self_loops, und = c->o.undirected;
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        uint64_t s = src[i], d = dst[i];
        if (drop && s == d)
            continue;
        out[k++] = d << b | s;
        if (und)
            out[k++] = s << b | d;
    }
    return k;
}

static size_t add_wide(struct csc *c, const uint64_t *src, const uint64_t *dst, size_t m)
{
    wrec *out = (wrec *)c->buf + c->len;
    bool drop = c->o.drop_self_loops, und = c->o.undirected;
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        uint64_t s = src[i], d = dst[i];
        if (drop && s == d)
            continue;
        out[k++] = (wrec){d, s};
        if (und)
            out[k++] = (wrec){s, d};
    }
    return k;
}

int csc_add(struct csc *c, const uint64_t *src, const uint64_t *dst, size_t n, char *err, size_t errlen)
{
    if (c->failed || c->finished)
        return misuse(c, err, errlen);
    uint64_t nodes = c->o.nodes;
    for (size_t i = 0; i < n; i++) {
        if (src[i] >= nodes || dst[i] >= nodes) {
            bool s = src[i] >= nodes;
            return sl_errf(err, errlen, -ERANGE, "edge %" PRIu64 ": %s id %" PRIu64 " is out of range [0, %" PRIu64 ")",
                           c->st.edges + i, s ? "source" : "destination", s ? src[i] : dst[i], nodes);
        }
    }
    size_t per = c->o.undirected ? 2 : 1;
    size_t i = 0;
    while (i < n) {
        size_t room = c->bcap - c->len;
        if (room < per) {
            int rc = c->bcap < c->cap ? grow_buf(c, err, errlen) : spill(c, err, errlen);
            if (rc < 0) {
                c->failed = rc;
                return rc;
            }
            continue;
        }
        size_t m = SL_MIN(n - i, room / per);
        size_t k = c->wide ? add_wide(c, src + i, dst + i, m) : add_narrow(c, src + i, dst + i, m);
        c->len += k;
        c->st.records += k;
        i += m;
    }
    c->st.edges += n;
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int csc_finish(struct csc *c, const char *indptr_path, const char *indices_path, struct dataset_file *indptr,
               struct dataset_file *indices, uint64_t *edges, char *err, size_t errlen)
{
    if (c->failed || c->finished)
        return misuse(c, err, errlen);
    c->finished = true;
    msrc *s = NULL;
    size_t k = 0;
    sink o = {.kind = SINK_CSC, .dedupe = c->o.dedupe, .fd = -1, .nodes = c->o.nodes};
    o.ip.fd = o.ix.fd = -1;

    /* With runs, scratch takes what the edge buffer leaves for read buffers. */
    int rc = c->buf ? 0 : grow_buf(c, err, errlen);
    if (rc == 0)
        rc = ensure_tmp(c, (c->nruns ? c->cap : c->len) * c->rsz, err, errlen);
    if (rc < 0)
        goto out;
    sort_job job[2];
    sort_halves(c, job);
    if (c->nruns) {
        for (int h = 0; h < 2; h++)
            if (job[h].out != job[h].a)
                memcpy(job[h].a, job[h].out, job[h].n * c->rsz);
        rc = runs_reduce(c, err, errlen);
        if (rc < 0)
            goto out;
    }
    k = c->nruns;
    s = malloc((k + 2) * sizeof *s);
    if (!s) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for merge sources");
        goto out;
    }
    if (k) {
        rc = runs_open(c, 0, k, s, err, errlen);
        if (rc < 0) {
            k = 0;
            goto out;
        }
        msrc_mem(&s[k], job[0].a, job[0].n, c->rsz);
        msrc_mem(&s[k + 1], job[1].a, job[1].n, c->rsz);
    } else {
        msrc_mem(&s[0], job[0].out, job[0].n, c->rsz);
        msrc_mem(&s[1], job[1].out, job[1].n, c->rsz);
    }

    o.idsz = dtype_size(dtype_for_ids(c->o.nodes));
    o.ipbuf = (uint64_t *)c->io;
    o.ipcap = c->io_bytes / 2 / sizeof(uint64_t);
    o.ixbuf = c->io + c->io_bytes / 2;
    o.ixcap = c->io_bytes / 2;
    rc = file_writer_open(&o.ip, indptr_path, err, errlen);
    if (rc == 0)
        rc = file_writer_open(&o.ix, indices_path, err, errlen);
    if (rc == 0)
        rc = merge(c, s, k + 2, &o, err, errlen);
    if (rc == 0)
        rc = csc_close_nodes(&o, c->o.nodes, err, errlen);
    if (rc == 0)
        rc = csc_flush(&o, err, errlen);
    uint64_t ip_bytes = 0, ip_hash = 0, ix_bytes = 0, ix_hash = 0;
    if (rc == 0)
        rc = file_writer_close(&o.ip, &ip_bytes, &ip_hash, err, errlen);
    if (rc == 0)
        rc = file_writer_close(&o.ix, &ix_bytes, &ix_hash, err, errlen);
    if (rc < 0)
        goto out;
    if (indptr)
        dataset_file_set(indptr, base_name(indptr_path), DTYPE_U64, c->o.nodes + 1, 1, ip_bytes, ip_hash);
    if (indices)
        dataset_file_set(indices, base_name(indices_path), dtype_for_ids(c->o.nodes), o.edges, 1, ix_bytes, ix_hash);
    if (edges)
        *edges = o.edges;
out:
    if (s)
        srcs_close(s, k);
    free(s);
    file_writer_free(&o.ip);
    file_writer_free(&o.ix);
    runs_remove_all(c);
    free(c->buf);
    free(c->tmp);
    c->buf = c->tmp = NULL;
    c->bcap = c->len = c->tbytes = 0;
    if (rc < 0)
        c->failed = rc;
    return rc;
}

void csc_free(struct csc *c)
{
    if (!c)
        return;
    runs_remove_all(c);
    free(c->runs);
    free(c->buf);
    free(c->tmp);
    free(c->io);
    free(c);
}

void csc_stats_get(const struct csc *c, struct csc_stats *st)
{
    *st = c->st;
}
