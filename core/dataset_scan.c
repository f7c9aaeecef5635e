/* dataset_scan.c - hashing sequential reader with a read-ahead thread
 * (see dataset_scan.h).
 *
 * Protocol. Buffers are used in ring order 0, 1, ..., BUFS-1, 0, ... The
 * reader waits until buffer i is not full, fills its data part with
 * read() (to DATASET_SCAN_CHUNK bytes, or the end of the file), hashes
 * those bytes, then marks it full with its byte count. The consumer waits
 * until the buffer after the one it holds is full, copies the unread tail
 * of the held buffer into the reserve just before the new buffer's data,
 * and only then gives the held buffer back (full = false). The reader
 * never writes a reserve, so the copy cannot race with it. Everything in
 * full/got/last/error/stop is under mu; the bytes of a buffer belong to the
 * reader while it is not full and to the consumer while it is. */
#include "core/dataset_scan.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/util.h"

#define BUF_BYTES ((size_t)DATASET_SCAN_RECORD_MAX + DATASET_SCAN_CHUNK)

static unsigned char *buf_data(const struct dataset_scan *s, int i)
{
    return s->mem + (size_t)i * BUF_BYTES + DATASET_SCAN_RECORD_MAX;
}

static void *reader_main(void *arg)
{
    struct dataset_scan *s = arg;
    uint64_t off = 0;
    for (int i = 0;; i = (i + 1) % DATASET_SCAN_BUFS) {
        pthread_mutex_lock(&s->mu);
        while (s->full[i] && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return NULL;
        unsigned char *d = buf_data(s, i);
        size_t n = 0;
        int error = 0;
        bool end = false;
        while (n < DATASET_SCAN_CHUNK) {
            ssize_t r = read(s->fd, d + n, DATASET_SCAN_CHUNK - n);
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                error = -errno;
                break;
            }
            if (r == 0) {
                end = true;
                break;
            }
            n += (size_t)r;
        }
        if (s->xxh && n)
            XXH3_64bits_update(s->xxh, d, n);
        pthread_mutex_lock(&s->mu);
        s->got[i] = n;
        s->last[i] = end || error;
        if (error) {
            s->error = error;
            s->error_off = off + n;
        }
        s->full[i] = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        off += n;
        if (end || error)
            return NULL;
    }
}

int dataset_scan_open(struct dataset_scan *s, const char *path, bool hash, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->held = -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    s->mem = malloc((size_t)DATASET_SCAN_BUFS * BUF_BYTES);
    if (!s->mem) {
        close(fd);
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory for the read buffers", path);
    }
    s->fd = fd;
    if (hash) {
        s->xxh = XXH3_createState();
        if (!s->xxh) {
            dataset_scan_free(s);
            return sl_errf(err, errlen, -ENOMEM, "%s: out of memory for the hash state", path);
        }
        XXH3_64bits_reset(s->xxh);
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->sync_init = true;
    int rc = pthread_create(&s->reader, NULL, reader_main, s);
    if (rc) {
        dataset_scan_free(s);
        return sl_errf(err, errlen, -rc, "%s: cannot start the reader thread: %s", path, strerror(rc));
    }
    s->started = true;
    return 0;
}

/* Moves to the next buffer, keeping the unread tail in front of it.
 * 0 (s->at_end once the last buffer is held) or the reader's -errno. */
static int advance(struct dataset_scan *s, char *err, size_t errlen)
{
    int next = (s->held + 1) % DATASET_SCAN_BUFS;
    size_t keep = s->len - s->pos;
    pthread_mutex_lock(&s->mu);
    while (!s->full[next])
        pthread_cond_wait(&s->cv, &s->mu);
    size_t got = s->got[next];
    bool last = s->last[next];
    int error = s->error;
    uint64_t error_off = s->error_off;
    pthread_mutex_unlock(&s->mu);
    unsigned char *d = buf_data(s, next);
    if (keep)
        memcpy(d - keep, s->cur + s->pos, keep);
    if (s->held >= 0) {
        pthread_mutex_lock(&s->mu);
        s->full[s->held] = false;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    s->off += s->pos;
    s->cur = d - keep;
    s->len = keep + got;
    s->pos = 0;
    s->held = next;
    s->at_end = last;
    if (s->progress)
        s->progress(s->progress_arg, s->off + keep);
    if (last && error)
        return sl_errf(err, errlen, error, "%s: read failed at byte %" PRIu64 ": %s", s->path, error_off,
                       strerror(-error));
    return 0;
}

const void *dataset_scan_peek(struct dataset_scan *s, size_t n, int *rc, char *err, size_t errlen)
{
    *rc = 0;
    if (n > DATASET_SCAN_RECORD_MAX) {
        *rc = sl_errf(err, errlen, -EINVAL, "%s: record of %zu bytes is too large to scan", s->path, n);
        return NULL;
    }
    while (s->len - s->pos < n) {
        if (s->at_end) {
            *rc = sl_errf(err, errlen, -EIO, "%s: ends at byte %" PRIu64 ", %zu bytes short", s->path,
                          s->off + s->len, n - (s->len - s->pos));
            return NULL;
        }
        if ((*rc = advance(s, err, errlen)) < 0)
            return NULL;
    }
    const void *p = s->cur + s->pos;
    s->pos += n;
    return p;
}

int dataset_scan_read(struct dataset_scan *s, void *out, size_t n, char *err, size_t errlen)
{
    char *o = out;
    while (n) {
        size_t k = SL_MIN(n, (size_t)DATASET_SCAN_RECORD_MAX);
        int rc;
        const void *p = dataset_scan_peek(s, k, &rc, err, errlen);
        if (!p)
            return rc;
        memcpy(o, p, k);
        o += k;
        n -= k;
    }
    return 0;
}

int dataset_scan_finish(struct dataset_scan *s, uint64_t *hash, uint64_t *rest, char *err, size_t errlen)
{
    uint64_t extra = s->len - s->pos;
    s->pos = s->len;
    while (!s->at_end) {
        int rc = advance(s, err, errlen);
        if (rc < 0)
            return rc;
        extra += s->len;
        s->pos = s->len;
    }
    if (rest)
        *rest = extra;
    if (hash && s->xxh) {
        /* the reader has exited (it stops after the last buffer): its
         * hash updates happened before it marked that buffer full */
        *hash = XXH3_64bits_digest(s->xxh);
    }
    return 0;
}

void dataset_scan_free(struct dataset_scan *s)
{
    if (!s)
        return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->reader, NULL);
        s->started = false;
    }
    if (s->sync_init) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        s->sync_init = false;
    }
    if (s->mem) {
        close(s->fd);
        s->fd = -1;
    }
    free(s->mem);
    s->mem = NULL;
    if (s->xxh)
        XXH3_freeState(s->xxh);
    s->xxh = NULL;
}
