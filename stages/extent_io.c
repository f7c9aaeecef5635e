/* extent_io.c - one extent in large requests (extent_io.h). */
#include "stages/extent_io.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/util.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#endif

struct req {
    uint64_t off;       /* file offset of the next byte */
    unsigned char *buf; /* the memory's next byte */
    size_t left;        /* bytes still to move */
};

#ifdef SLUICE_HAVE_URING
/* Waits until none of the *inflight requests is the kernel's: sends what
 * was prepared but not yet sent (a short transfer's rest prepared in the
 * batch that also met the error, or requests a failed submit left in the
 * ring) and reaps every completion. -EINTR and the ring's transient
 * refusals (-EAGAIN, -EBUSY while completions wait to be reaped) are
 * retried; another failure returns it with requests possibly still in
 * the kernel's hands (the ring is unusable then). */
static int drain(struct io_uring *ring, size_t *inflight)
{
    unsigned idle = 0;
    while (*inflight > 0) {
        int s = io_uring_submit_and_wait(ring, 1);
        if (s < 0 && s != -EINTR && s != -EAGAIN && s != -EBUSY)
            return s;
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(ring, head, cqe)
        seen++;
        io_uring_cq_advance(ring, seen);
        *inflight -= SL_MIN((size_t)seen, *inflight);
        if (s < 0 && seen == 0 && ++idle > 10000)
            return s; /* refused for ever: give up rather than spin */
    }
    return 0;
}

static void prep(struct io_uring_sqe *sqe, const struct extent_io *x, bool write, const struct req *r, unsigned e)
{
    if (write)
        io_uring_prep_write(sqe, x->fd, r->buf, (unsigned)r->left, r->off);
    else
        io_uring_prep_read(sqe, x->fd, r->buf, (unsigned)r->left, r->off);
    io_uring_sqe_set_data64(sqe, e);
}
#endif

int extent_io_open(const char *path, bool write, bool direct, uint64_t need, const char *what, const char *remedy,
                   char *err, size_t errlen)
{
    int fd = open(path, (write ? O_RDWR : O_RDONLY) | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd < 0 && errno == EINVAL && direct)
        return sl_errf(err, errlen, -EINVAL, "%s: this filesystem does not support direct I/O; use pipeline.io = "
                       "\"buffered\"", path);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < need) {
        sl_errf(err, errlen, -EIO, "%s: holds %lld bytes, %" PRIu64 " expected (%s)%s%s", path, (long long)sb.st_size,
                need, what, remedy ? "; " : "", remedy ? remedy : "");
        close(fd);
        return -EIO;
    }
    return fd;
}

void *extent_io_ring_new(unsigned entries)
{
#ifdef SLUICE_HAVE_URING
    if (sl_env_on("SLUICE_NO_IO_URING"))
        return NULL;
    struct io_uring *ring = calloc(1, sizeof *ring);
    if (ring && io_uring_queue_init(entries, ring, 0) == 0)
        return ring;
    free(ring);
#else
    (void)entries;
#endif
    return NULL;
}

void extent_io_ring_free(void *ring)
{
#ifdef SLUICE_HAVE_URING
    if (ring)
        io_uring_queue_exit(ring);
#endif
    free(ring);
}

int extent_io_move(const struct extent_io *x, bool write, uint32_t part, unsigned char *mem, uint64_t off,
                   size_t total, uint64_t *bytes, uint64_t *reqs, char *err, size_t errlen)
{
    const size_t rb = x->req_bytes, nreq = (total + rb - 1) / rb;
    const char *what = write ? "write-back" : "read";
    int rc = 0;
#ifdef SLUICE_HAVE_URING
    if (x->ring) {
        struct io_uring *ring = x->ring;
        struct req rq[EXTENT_IO_DEPTH_MAX];
        memset(rq, 0, sizeof rq);
        size_t next = 0, inflight = 0;
        uint64_t done = 0;
        while ((next < nreq || inflight > 0) && rc == 0) {
            while (next < nreq && inflight < x->depth) {
                unsigned e = 0; /* a free request slot: one with nothing left to move */
                while (e < x->depth && rq[e].left)
                    e++;
                rq[e] = (struct req){off + next * rb, mem + next * rb, SL_MIN(rb, total - next * rb)};
                prep(io_uring_get_sqe(ring), x, write, &rq[e], e);
                next++;
                inflight++;
            }
            int s = io_uring_submit_and_wait(ring, 1);
            if (s < 0 && s != -EINTR) {
                rc = sl_errf(err, errlen, s, "%s: io_uring submit failed: %s", x->path, strerror(-s));
                int d = drain(ring, &inflight);
                if (d < 0)
                    sl_errf(err, errlen, rc, "%s: io_uring submit failed: %s; %zu requests left in flight (%s)",
                            x->path, strerror(-s), inflight, strerror(-d));
                break;
            }
            struct io_uring_cqe *cqe;
            unsigned head, seen = 0;
            io_uring_for_each_cqe(ring, head, cqe)
            {
                seen++;
                unsigned e = (unsigned)io_uring_cqe_get_data64(cqe);
                int res = cqe->res;
                if (res <= 0) {
                    if (rc == 0)
                        rc = sl_errf(err, errlen, res < 0 ? res : -EIO,
                                     "%s: %s of partition %" PRIu32 " at byte %" PRIu64 " failed: %s", x->path, what,
                                     part, rq[e].off, res < 0 ? strerror(-res) : "the file ends early");
                    rq[e].left = 0;
                    inflight--;
                    continue;
                }
                done += (uint64_t)res;
                *bytes += (uint64_t)res;
                (*reqs)++;
                rq[e].off += (uint64_t)res;
                rq[e].buf += res;
                rq[e].left -= (size_t)res;
                if (rq[e].left == 0) {
                    inflight--;
                } else if (rc == 0 && !write && x->direct && rq[e].off % EXTENT_IO_DIRECT_ALIGN) {
                    /* a direct read stops short of a block boundary only at the end of the file */
                    rc = sl_errf(err, errlen, -EIO, "%s: read of partition %" PRIu32 " at byte %" PRIu64
                                 " failed: the file ends early", x->path, part, rq[e].off);
                    rq[e].left = 0;
                    inflight--;
                } else if (rc == 0) { /* short: the rest, from where it stopped */
                    prep(io_uring_get_sqe(ring), x, write, &rq[e], e);
                } else {
                    rq[e].left = 0;
                    inflight--;
                }
            }
            io_uring_cq_advance(ring, seen);
            if (x->progress)
                x->progress(x->arg, done, total);
            if (rc < 0) { /* drain what is still in flight: the kernel may touch the memory */
                int d = drain(ring, &inflight);
                size_t used = err ? strlen(err) : 0;
                if (d < 0 && err && used + 1 < errlen)
                    snprintf(err + used, errlen - used, "; %zu requests left in flight (%s)", inflight, strerror(-d));
            }
        }
        return rc;
    }
#endif
    uint64_t done = 0;
    for (size_t r = 0; r < nreq && rc == 0; r++) {
        size_t len = SL_MIN(rb, total - r * rb), got = 0;
        off_t at = (off_t)(off + r * rb);
        int e = write ? sl_pwrite_all(x->fd, mem + r * rb, len, at) : sl_pread_full(x->fd, mem + r * rb, len, at, &got);
        /* short: pread gave 0 bytes (sl_pread_full's -EIO), or a direct
         * read stopped off a block boundary and its rest was refused */
        bool ended = !write && got < len &&
                     (e == 0 || e == -EIO || (x->direct && e == -EINVAL && got % EXTENT_IO_DIRECT_ALIGN));
        if (ended) {
            rc = sl_errf(err, errlen, -EIO, "%s: read of partition %" PRIu32 " at byte %" PRIu64
                         " failed: the file ends early", x->path, part, off + r * rb + got);
        } else if (e < 0) {
            rc = sl_errf(err, errlen, e, "%s: %s of partition %" PRIu32 " at byte %" PRIu64 " failed: %s",
                         x->path, what, part, off + r * rb, strerror(-e));
        } else {
            done += len;
            *bytes += len;
            (*reqs)++;
            if (x->progress)
                x->progress(x->arg, done, total);
        }
    }
    return rc;
}
