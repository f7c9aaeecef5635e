/* lines.c - plain or gzip text read line by line (see lines.h).
 *
 * gzip is read with zlib's inflate rather than gzread: gzread stops at the
 * first bytes after a member that are not another gzip header and reports
 * a clean end, so text appended to a .gz file (`cat a.gz b.txt > c.gz`)
 * would be dropped without a word. Here the bytes after a member must be
 * another member (concatenated gzip files are one text, as gzip -d reads
 * them) or zeros (the padding some tools add, which gzip -d accepts too);
 * anything else is refused with its byte offset. */
#include "lines.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/util.h"

#define IN_BYTES (1u << 18) /* compressed (or plain) bytes read at a time */

/* Reads up to IN_BYTES more file bytes into l->in after the unread ones.
 * 0 (l->in_eof set at the end of the file) or -errno. */
static int in_fill(struct lines *l, char *err, size_t errlen)
{
    z_stream *z = l->z;
    size_t have = z ? z->avail_in : l->in_len - l->in_off;
    const unsigned char *from = z ? z->next_in : l->in + l->in_off;
    if (have && from != l->in)
        memmove(l->in, from, have);
    ssize_t r;
    do
        r = read(l->fd, l->in + have, IN_BYTES - have);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return sl_errf(err, errlen, -errno, "%s: read failed: %s", l->path, strerror(errno));
    if (r == 0)
        l->in_eof = true;
    l->in_off = 0;
    l->in_len = have + (size_t)r;
    if (z) {
        z->next_in = l->in;
        z->avail_in = (uInt)l->in_len;
    }
    return 0;
}

static int gz_damaged(struct lines *l, const char *what, char *err, size_t errlen)
{
    return sl_errf(err, errlen, -EBADMSG, "%s: damaged gzip data after line %" PRIu64 " (%s); download or re-create "
                   "the file", l->path, l->lineno, what);
}

/* After a member's end: another member starts (1), zeros run to the end
 * of the file (0), or other bytes follow (-EBADMSG, naming their offset). */
static int gz_next_member(struct lines *l, char *err, size_t errlen)
{
    z_stream *z = l->z;
    bool padded = false;
    for (;;) {
        while (z->avail_in && *z->next_in == 0) { /* padding */
            padded = true;
            z->next_in++;
            z->avail_in--;
            l->in_used++;
        }
        if (z->avail_in >= 2 || (z->avail_in && (padded || l->in_eof)))
            break;
        if (!z->avail_in && l->in_eof)
            return 0;
        int rc = in_fill(l, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (!padded && z->avail_in >= 2 && z->next_in[0] == 0x1f && z->next_in[1] == 0x8b) {
        if (inflateReset(z) != Z_OK)
            return gz_damaged(l, "cannot restart the decompressor", err, errlen);
        return 1;
    }
    return sl_errf(err, errlen, -EBADMSG, "%s: bytes that are not gzip data follow the compressed text (at byte %" PRIu64
                   " of the file); was something appended to it? Decompress it with gzip -d, or re-create it",
                   l->path, l->in_used);
}

/* Up to cap bytes of text into dst: > 0 bytes, 0 at the end, or -errno. */
static int text_read(struct lines *l, char *dst, size_t cap, char *err, size_t errlen)
{
    z_stream *z = l->z;
    if (!z) { /* plain: what is buffered, then the file */
        if (l->in_off == l->in_len) {
            if (l->in_eof)
                return 0;
            int rc = in_fill(l, err, errlen);
            if (rc < 0)
                return rc;
        }
        size_t n = SL_MIN(cap, l->in_len - l->in_off);
        memcpy(dst, l->in + l->in_off, n);
        l->in_off += n;
        return (int)n;
    }
    if (l->z_end)
        return 0;
    z->next_out = (unsigned char *)dst;
    z->avail_out = (uInt)cap;
    while (z->avail_out == cap) {
        if (!z->avail_in && !l->in_eof) {
            int rc = in_fill(l, err, errlen);
            if (rc < 0)
                return rc;
        }
        if (!z->avail_in && l->in_eof)
            return gz_damaged(l, "the file ends inside the compressed data: cut short?", err, errlen);
        uInt before = z->avail_in;
        int zr = inflate(z, Z_NO_FLUSH);
        l->in_used += before - z->avail_in;
        if (zr == Z_STREAM_END) {
            int more = gz_next_member(l, err, errlen);
            if (more < 0)
                return more;
            if (!more) {
                l->z_end = true;
                break;
            }
        } else if (zr == Z_BUF_ERROR && z->avail_in && z->avail_out == cap) {
            /* no progress with input and room for output: cannot happen (zlib says Z_BUF_ERROR only then), so
             * never spin on it */
            return gz_damaged(l, "the decompressor made no progress", err, errlen);
        } else if (zr == Z_MEM_ERROR) {
            return sl_errf(err, errlen, -ENOMEM, "%s: out of memory decompressing", l->path);
        } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
            return gz_damaged(l, z->msg ? z->msg : "zlib error", err, errlen);
        }
    }
    return (int)(cap - z->avail_out);
}

int lines_open(struct lines *l, const char *path, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->fd = -1;
    snprintf(l->path, sizeof l->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s; check the path", path, strerror(errno));
    l->fd = fd;
    l->fd_open = true;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        lines_close(l);
        return sl_errf(err, errlen, -EINVAL, "%s: not a regular file", path);
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    l->in = malloc(IN_BYTES);
    l->buf = malloc(LINES_MAX + 2); /* a longest line, its newline, and a NUL */
    if (!l->in || !l->buf) {
        lines_close(l);
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
    }
    int rc;
    while (l->in_len < 2 && !l->in_eof) /* enough to tell gzip from text */
        if ((rc = in_fill(l, err, errlen)) < 0) {
            lines_close(l);
            return rc;
        }
    if (l->in_len >= 2 && l->in[0] == 0x1f && l->in[1] == 0x8b) {
        l->z = calloc(1, sizeof(z_stream));
        if (!l->z || inflateInit2(l->z, 16 + MAX_WBITS) != Z_OK) {
            free(l->z);
            l->z = NULL;
            lines_close(l);
            return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
        }
        l->z->next_in = l->in;
        l->z->avail_in = (uInt)l->in_len;
    }
    return 0;
}

int lines_next(struct lines *l, char **line, size_t *len, char *err, size_t errlen)
{
    char *s;
    size_t n;
    for (;;) {
        s = l->buf + l->off;
        size_t avail = l->len - l->off;
        char *nl = memchr(s, '\n', avail);
        if (nl) {
            n = (size_t)(nl - s);
            l->off += n + 1;
            break;
        }
        if (l->eof) {
            if (!avail)
                return 0;
            n = avail;
            l->off = l->len;
            break;
        }
        memmove(l->buf, s, avail);
        l->len = avail;
        l->off = 0;
        if (l->len == LINES_MAX + 1) /* no newline among them: the line is longer */
            return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": line longer than %u bytes; is this a text file?",
                           l->path, l->lineno + 1, LINES_MAX);
        int r = text_read(l, l->buf + l->len, LINES_MAX + 1 - l->len, err, errlen);
        if (r < 0)
            return r;
        if (r == 0)
            l->eof = true;
        l->len += (size_t)r;
    }
    s[n] = '\0';
    l->lineno++;
    if (n && s[n - 1] == '\r')
        s[--n] = '\0';
    if (memchr(s, '\0', n))
        return sl_errf(err, errlen, -EINVAL, "%s:%" PRIu64 ": binary data (a NUL byte) in a text file; is this the "
                       "right file or format?", l->path, l->lineno);
    *line = s;
    *len = n;
    return 1;
}

void lines_close(struct lines *l)
{
    if (!l)
        return;
    if (l->z) {
        inflateEnd(l->z);
        free(l->z);
        l->z = NULL;
    }
    if (l->fd_open)
        close(l->fd);
    l->fd_open = false;
    l->fd = -1;
    free(l->in);
    l->in = NULL;
    free(l->buf);
    l->buf = NULL;
}

int sl_text_uint(const char **p, uint64_t *v)
{
    const char *s = *p;
    if (*s == '-')
        return SL_NUM_NEGATIVE;
    if (*s < '0' || *s > '9')
        return SL_NUM_NONE;
    uint64_t x = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (sl_mul_ovf(x, 10, &x) || sl_add_ovf(x, (uint64_t)(*s - '0'), &x)) {
            while (*s >= '0' && *s <= '9')
                s++;
            *p = s;
            return SL_NUM_OVERFLOW;
        }
    }
    *p = s;
    *v = x;
    return SL_NUM_OK;
}

const char *sl_text_uint_error(int code)
{
    switch (code) {
    case SL_NUM_NEGATIVE:
        return "is negative; node ids start at 0";
    case SL_NUM_OVERFLOW:
        return "is too large for a 64-bit node id";
    case SL_NUM_NONE:
        return "is not a non-negative integer";
    default:
        return "is fine";
    }
}
