/* util.c - error formatting, whole-buffer I/O, paths, number parsing. */
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int sl_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int sl_write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int sl_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
    const char *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
        off += w;
    }
    return 0;
}

int sl_pread_full(int fd, void *buf, size_t n, off_t off, size_t *got)
{
    char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, p + done, n - done, off + (off_t)done);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (got)
                *got = done;
            return -errno;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    if (got)
        *got = done;
    return done == n ? 0 : -EIO;
}

int sl_read_file(const char *path, size_t max_bytes, char **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO (or a device) must not wait for a writer;
     * anything but a regular file is then refused */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int rc = -errno;
        close(fd);
        return sl_errf(err, errlen, rc, "%s: cannot stat: %s", path, strerror(-rc));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sl_errf(err, errlen, -EINVAL, "%s: not a regular file (%s); give the path of a file", path,
                       S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : "a device or socket");
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return sl_errf(err, errlen, -EFBIG, "%s: %lld bytes, more than the %zu this file may have",
                       path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return sl_errf(err, errlen, -ENOMEM, "%s: out of memory", path);
    }
    size_t got = 0;
    int rc = sl_pread_full(fd, buf, n, 0, &got);
    close(fd);
    if (rc < 0 && rc != -EIO) {
        free(buf);
        return sl_errf(err, errlen, rc, "%s: read failed: %s", path, strerror(-rc));
    }
    buf[got] = '\0';
    *out = buf;
    if (len)
        *len = got;
    return 0;
}

FILE *sl_fopen_write(const char *path, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

int sl_atomic_begin(FILE **f, const char *path, char *tmp, size_t tmplen, char *err, size_t errlen)
{
    *f = NULL;
    if ((size_t)snprintf(tmp, tmplen, "%s.tmp", path) >= tmplen)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", path);
    *f = sl_fopen_write(tmp, 0644); /* like the data files, whatever the umask */
    if (!*f)
        return sl_errf(err, errlen, -errno, "%s: cannot create: %s", tmp, strerror(errno));
    return 0;
}

int sl_atomic_commit(FILE *f, const char *tmp, const char *path, char *err, size_t errlen)
{
    int rc = 0;
    if (fflush(f) != 0 || fsync(fileno(f)) < 0)
        rc = sl_errf(err, errlen, -errno, "%s: write failed: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && rc == 0)
        rc = sl_errf(err, errlen, -errno, "%s: write failed: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) < 0)
        rc = sl_errf(err, errlen, -errno, "%s: cannot rename into place: %s", path, strerror(errno));
    if (rc < 0)
        unlink(tmp);
    return rc;
}

int sl_path_join(char *out, size_t outlen, const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    int n = snprintf(out, outlen, "%s%s%s", dir, (dl && dir[dl - 1] == '/') ? "" : "/", name);
    return (n < 0 || (size_t)n >= outlen) ? -ENAMETOOLONG : 0;
}

int sl_rmtree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISDIR(st.st_mode))
        return unlink(path) < 0 ? -errno : 0;
    DIR *d = opendir(path);
    if (!d)
        return -errno;
    int rc = 0;
    struct dirent *e;
    char sub[4096];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (sl_path_join(sub, sizeof sub, path, e->d_name) < 0) {
            rc = -ENAMETOOLONG;
            continue;
        }
        int r = sl_rmtree(sub);
        if (r < 0 && !rc)
            rc = r;
    }
    closedir(d);
    if (rmdir(path) < 0 && !rc)
        rc = -errno;
    return rc;
}

int sl_parse_u64(const char *s, bool binary, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        return -EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return -EINVAL;
    if (errno == ERANGE)
        return -ERANGE;
    uint64_t mult = 1, k = binary ? 1024 : 1000;
    if (*end) {
        switch (*end) {
        case 'k': case 'K': mult = k; break;
        case 'm': case 'M': mult = k * k; break;
        case 'g': case 'G': mult = k * k * k; break;
        case 't': case 'T': mult = k * k * k * k; break;
        default: return -EINVAL;
        }
        end++;
        if (binary && (*end == 'i' || *end == 'B'))
            end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
        if (*end)
            return -EINVAL;
    }
    uint64_t r;
    if (sl_mul_ovf(v, mult, &r))
        return -ERANGE;
    *out = r;
    return 0;
}

int sl_parse_double(const char *s, double *out)
{
    if (!s || !*s)
        return -EINVAL;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end)
        return -EINVAL;
    if (errno == ERANGE || !isfinite(v))
        return -ERANGE;
    *out = v;
    return 0;
}

void sl_hex(const void *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    const uint8_t *p = b;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int sl_unhex(const char *s, void *out, size_t n)
{
    uint8_t *p = out;
    if (!s || strlen(s) != 2 * n)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        p[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

uint64_t sl_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double sl_now(void)
{
    return (double)sl_now_ns() * 1e-9;
}

uint64_t sl_peak_rss(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0)
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024;
}

const char *sl_err_line_start(void)
{
    return isatty(STDERR_FILENO) == 1 ? "\r\033[K" : ""; /* one ioctl; messages are rare */
}

const char *sl_fmt_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < SL_ARRAY_LEN(unit)) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
    return buf;
}

size_t sl_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            size_t v = SL_MIN(SL_MIN(d[i - 1][j] + 1, d[i][j - 1] + 1), d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                v = SL_MIN(v, d[i - 2][j - 2] + 1);
            d[i][j] = v;
        }
    return d[la][lb];
}

bool sl_env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}
