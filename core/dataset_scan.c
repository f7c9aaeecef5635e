/* dataset_scan.c - hashing sequential reader with a read-ahead thread
 * (see dataset_scan.h).
 *
 * Protocol. Chunk c (bytes c x CHUNK ..) goes to buffer c % BUFS and is
 * read by reader c % READERS, so READERS reads are in flight at once. A
 * reader waits until its chunk's buffer is not full, fills its data part
 * with pread() (to DATASET_SCAN_CHUNK bytes, or the end of the file), then
 * marks it full with the chunk number and byte count. A chunk shorter
 * than CHUNK is the last; a reader past it reads 0 bytes and stops too. The consumer hashes a buffer's bytes
 * when it moves to it, so the hash sees the file in order. The consumer waits
 * until the buffer of the next chunk is full with that chunk, copies the unread tail
 * of the held buffer into the reserve just before the new buffer's data,
 * and only then gives the held buffer back (full = false). Readers never
 * write a reserve, so the copy cannot race with them. Everything in
 * full/chunk/got/last/error/stop/direct is under mu; the bytes of a buffer belong to the
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

/* Turns direct I/O off for the file (after a read it refused). */
static bool direct_off(struct dataset_scan *s)
{
    pthread_mutex_lock(&s->mu);
    bool ok = !s->direct;
    if (s->direct) {
        int fl = fcntl(s->fd, F_GETFL);
        ok = fl >= 0 && fcntl(s->fd, F_SETFL, fl & ~O_DIRECT) == 0;
        if (ok)
            s->direct = false;
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Reader t of DATASET_SCAN_READERS: chunks t, t + READERS, ... */
static void *reader_main(void *arg)
{
    struct dataset_scan *s = ((struct dataset_scan_reader *)arg)->s;
    uint64_t chunk = (uint64_t)((struct dataset_scan_reader *)arg)->index;
    for (;; chunk += DATASET_SCAN_READERS) {
        int i = (int)(chunk % DATASET_SCAN_BUFS);
        pthread_mutex_lock(&s->mu);
        while (s->full[i] && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        bool stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            return NULL;
        unsigned char *d = buf_data(s, i);
        uint64_t off = chunk * DATASET_SCAN_CHUNK;
        size_t n = 0;
        int error = 0;
        bool end = false;
        while (n < DATASET_SCAN_CHUNK) {
            ssize_t r = pread(s->fd, d + n, DATASET_SCAN_CHUNK - n, (off_t)(off + n));
            if (r < 0 && errno == EINTR)
                continue;
            /* direct I/O refused this read (an odd offset after a short
             * read, a filesystem that takes O_DIRECT at open only): on
             * through the page cache */
            if (r < 0 && errno == EINVAL && direct_off(s))
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
        pthread_mutex_lock(&s->mu);
        s->got[i] = n;
        s->chunk[i] = chunk;
        s->last[i] = end || error;
        s->error[i] = error;
        s->full[i] = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
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
    /* direct I/O where the filesystem has it: large aligned reads that run
     * at the device's sequential rate and leave the page cache alone */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    s->direct = fd >= 0;
    if (fd < 0)
        fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    if (!s->direct)
        posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    void *mem = NULL;
    if (posix_memalign(&mem, DATASET_SCAN_ALIGN, (size_t)DATASET_SCAN_BUFS * BUF_BYTES) == 0)
        s->mem = mem;
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
    for (int t = 0; t < DATASET_SCAN_READERS; t++) {
        s->readers[t] = (struct dataset_scan_reader){.s = s, .index = t};
        int rc = pthread_create(&s->readers[t].thread, NULL, reader_main, &s->readers[t]);
        if (rc) {
            dataset_scan_free(s);
            return sl_errf(err, errlen, -rc, "%s: cannot start a reader thread: %s", path, strerror(rc));
        }
        s->started = t + 1;
    }
    return 0;
}

/* Moves to the next buffer, keeping the unread tail in front of it.
 * 0 (s->at_end once the last buffer is held) or the reader's -errno. */
static int advance(struct dataset_scan *s, char *err, size_t errlen)
{
    uint64_t chunk = s->next_chunk;
    int next = (int)(chunk % DATASET_SCAN_BUFS);
    size_t keep = s->len - s->pos;
    pthread_mutex_lock(&s->mu);
    while (!s->full[next] || s->chunk[next] != chunk)
        pthread_cond_wait(&s->cv, &s->mu);
    size_t got = s->got[next];
    bool last = s->last[next];
    int error = s->error[next];
    pthread_mutex_unlock(&s->mu);
    s->next_chunk++;
    unsigned char *d = buf_data(s, next);
    if (s->xxh && got) /* here, not in the reader: reading stays pure I/O */
        XXH3_64bits_update(s->xxh, d, got);
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
        return sl_errf(err, errlen, error, "%s: read failed at byte %" PRIu64 ": %s", s->path,
                       chunk * DATASET_SCAN_CHUNK + got, strerror(-error));
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
    if (hash && s->xxh)
        *hash = XXH3_64bits_digest(s->xxh);
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
        for (int t = 0; t < s->started; t++)
            pthread_join(s->readers[t].thread, NULL);
        s->started = 0;
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
