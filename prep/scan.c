/* scan.c - hashing sequential reader (see scan.h). */
#include "scan.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/util.h"

#define SCAN_BUF (8u << 20)

int prep_scan_open(struct prep_scan *s, const char *path, int hash, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->fd = -1;
    snprintf(s->path, sizeof s->path, "%s", path);
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    s->cap = SCAN_BUF;
    s->buf = malloc(s->cap);
    if (hash) {
        s->xxh = XXH3_createState();
        if (s->xxh)
            XXH3_64bits_reset(s->xxh);
    }
    if (!s->buf || (hash && !s->xxh)) {
        prep_scan_free(s);
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory for the read buffer", path);
    }
    return 0;
}

/* Moves the unread tail to the front and reads more; returns bytes now
 * available (0 at end of file) or -errno. */
static ssize_t refill(struct prep_scan *s, char *err, size_t errlen)
{
    size_t keep = s->len - s->pos;
    if (s->xxh && s->pos > 0)
        XXH3_64bits_update(s->xxh, s->buf, s->pos);
    memmove(s->buf, s->buf + s->pos, keep);
    s->off += s->pos;
    s->pos = 0;
    s->len = keep;
    while (s->len < s->cap) {
        ssize_t r = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return sl_errf(err, errlen, -errno, "%s: read failed at byte %" PRIu64 ": %s", s->path, s->off + s->len,
                           strerror(errno));
        }
        if (r == 0)
            break;
        s->len += (size_t)r;
    }
    return (ssize_t)s->len;
}

const void *prep_scan_peek(struct prep_scan *s, size_t n, int *rc, char *err, size_t errlen)
{
    *rc = 0;
    if (n > s->cap / 8) {
        *rc = sl_errf(err, errlen, -EINVAL, "%s: record of %zu bytes is too large to scan", s->path, n);
        return NULL;
    }
    if (s->len - s->pos < n) {
        ssize_t r = refill(s, err, errlen);
        if (r < 0) {
            *rc = (int)r;
            return NULL;
        }
        if (s->len < n) {
            *rc = sl_errf(err, errlen, -EIO, "%s: ends at byte %" PRIu64 ", %zu bytes short", s->path,
                          s->off + s->len, n - s->len);
            return NULL;
        }
    }
    const void *p = s->buf + s->pos;
    s->pos += n;
    return p;
}

int prep_scan_read(struct prep_scan *s, void *out, size_t n, char *err, size_t errlen)
{
    char *o = out;
    while (n) {
        size_t k = SL_MIN(n, s->cap / 8);
        int rc;
        const void *p = prep_scan_peek(s, k, &rc, err, errlen);
        if (!p)
            return rc;
        memcpy(o, p, k);
        o += k;
        n -= k;
    }
    return 0;
}

int prep_scan_finish(struct prep_scan *s, uint64_t *hash, uint64_t *rest, char *err, size_t errlen)
{
    uint64_t extra = 0;
    for (;;) {
        extra += s->len - s->pos;
        s->pos = s->len;
        ssize_t r = refill(s, err, errlen);
        if (r < 0)
            return (int)r;
        if (r == 0)
            break;
    }
    if (rest)
        *rest = extra;
    if (hash && s->xxh)
        *hash = XXH3_64bits_digest(s->xxh);
    return 0;
}

void prep_scan_free(struct prep_scan *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    free(s->buf);
    s->buf = NULL;
    if (s->xxh)
        XXH3_freeState(s->xxh);
    s->xxh = NULL;
}
