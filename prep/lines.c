/* lines.c - plain or gzip text read line by line (see lines.h). */
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

int lines_open(struct lines *l, const char *path, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    snprintf(l->path, sizeof l->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s; check the path", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sl_errf(err, errlen, -EINVAL, "%s: not a regular file", path);
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    l->gz = gzdopen(fd, "rb");
    l->buf = malloc(LINES_MAX + 2); /* a longest line, its newline, and a NUL */
    if (!l->gz || !l->buf) {
        if (!l->gz)
            close(fd);
        lines_close(l);
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
    }
    gzbuffer(l->gz, 1u << 18);
    return 0;
}

/* Maps a zlib read error: damaged data is bad input, errno is the machine. */
static int gz_fail(struct lines *l, char *err, size_t errlen)
{
    int zerr = Z_OK;
    const char *msg = gzerror(l->gz, &zerr);
    if (zerr == Z_ERRNO)
        return sl_errf(err, errlen, errno ? -errno : -EIO, "%s: read failed: %s", l->path, strerror(errno ? errno : EIO));
    if (zerr == Z_MEM_ERROR)
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory decompressing", l->path);
    /* zlib prefixes the name it was opened with, "<fd:N>: ", to its message */
    if (msg && !strncmp(msg, "<fd:", 4) && strstr(msg, ": "))
        msg = strstr(msg, ": ") + 2;
    return sl_errf(err, errlen, -EBADMSG, "%s: damaged gzip data after line %" PRIu64 " (%s); download or "
                   "re-create the file", l->path, l->lineno, msg && *msg ? msg : "zlib error");
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
        int r = gzread(l->gz, l->buf + l->len, (unsigned)(LINES_MAX + 1 - l->len));
        if (r < 0)
            return gz_fail(l, err, errlen);
        if (r == 0) {
            int zerr = Z_OK;
            gzerror(l->gz, &zerr);
            if (zerr != Z_OK)
                return gz_fail(l, err, errlen);
            l->eof = true;
        }
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
    if (l->gz)
        gzclose(l->gz);
    l->gz = NULL;
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
