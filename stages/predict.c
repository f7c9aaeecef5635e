/* predict.c - the files of a prediction run (predict.h). */
#include "stages/predict.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"

const char *const predict_file_name[PREDICT_FILES] = {"nodes.npy", "logits.npy", "embeddings.npy", "pred.npy"};

int predict_write_run_file(const char *path, const char *ckpt, const char *out, char *err, size_t errlen)
{
    if (strchr(ckpt, '\n') || strchr(out, '\n'))
        return sl_errf(err, errlen, -EINVAL, "a path with a line break: '%s', '%s'", ckpt, out);
    FILE *f = fopen(path, "we");
    if (!f)
        return sl_errf(err, errlen, -errno, "cannot create %s: %s", path, strerror(errno));
    fprintf(f, "checkpoint=%s\nout=%s\n", ckpt, out);
    if (fclose(f) != 0)
        return sl_errf(err, errlen, -EIO, "cannot write %s", path);
    return 0;
}

int predict_read_run_file(const char *path, char *ckpt, size_t ckpt_len, char *out, size_t out_len, char *err,
                          size_t errlen)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return sl_errf(err, errlen, -errno, "cannot read %s: %s", path, strerror(errno));
    char line[8192];
    ckpt[0] = out[0] = '\0';
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strncmp(line, "checkpoint=", 11))
            snprintf(ckpt, ckpt_len, "%s", line + 11);
        else if (!strncmp(line, "out=", 4))
            snprintf(out, out_len, "%s", line + 4);
    }
    fclose(f);
    if (!ckpt[0] || !out[0])
        return sl_errf(err, errlen, -EINVAL, "%s names no checkpoint or no output directory", path);
    return 0;
}

/* A version 1.0 header of PREDICT_HEADER bytes for dtype descr and shape
 * (rows, cols; cols 0: one dimension). */
static void header(unsigned char *h, const char *descr, uint64_t rows, uint32_t cols)
{
    char dict[PREDICT_HEADER];
    int n = cols ? snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ", %" PRIu32
                                                "), }",
                            descr, rows, cols)
                 : snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%" PRIu64 ",), }",
                            descr, rows);
    memset(h, ' ', PREDICT_HEADER);
    memcpy(h, "\x93NUMPY\x01\x00", 8);
    uint16_t hl = PREDICT_HEADER - 10;
    h[8] = (unsigned char)(hl & 0xff);
    h[9] = (unsigned char)(hl >> 8);
    memcpy(h + 10, dict, (size_t)n);
    h[PREDICT_HEADER - 1] = '\n';
}

/* Shape of file k: rows, cols (0: one dimension) and element size. */
static void shape_of(int k, uint64_t n, uint32_t classes, uint32_t width, uint32_t *cols, size_t *elem,
                     const char **descr)
{
    *cols = k == PREDICT_LOGITS ? classes : k == PREDICT_EMB ? width : 0;
    *elem = k == PREDICT_LOGITS || k == PREDICT_EMB ? 4 : 8;
    *descr = *elem == 4 ? "<f4" : "<i8";
    (void)n;
}

static int copy_from(void *arg, uint64_t off, void *dst, size_t len, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    memcpy(dst, (const unsigned char *)arg + off, len);
    return 0;
}

int predict_write_npy(const char *path, const char *descr, uint64_t rows, uint32_t cols, size_t elem,
                      const void *data, char *err, size_t errlen)
{
    return predict_write_npy_from(path, descr, rows, cols, elem, copy_from, (void *)(uintptr_t)data, err, errlen);
}

int predict_write_npy_from(const char *path, const char *descr, uint64_t rows, uint32_t cols, size_t elem,
                           int (*fill)(void *arg, uint64_t off, void *dst, size_t len, char *err, size_t errlen),
                           void *arg, char *err, size_t errlen)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    unsigned char h[PREDICT_HEADER];
    header(h, descr, rows, cols);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "cannot create %s: %s", tmp, strerror(errno));
    int rc = sl_write_all(fd, h, sizeof h);
    const uint64_t total = rows * (cols ? cols : 1) * elem, chunk = 4u << 20;
    unsigned char *buf = total ? malloc(SL_MIN(total, chunk)) : NULL;
    if (total && !buf)
        rc = -ENOMEM;
    char msg[1024] = "";
    for (uint64_t off = 0; rc == 0 && off < total; off += chunk) {
        size_t len = (size_t)SL_MIN(chunk, total - off);
        if ((rc = fill(arg, off, buf, len, msg, sizeof msg)) == 0)
            rc = sl_write_all(fd, buf, len);
    }
    free(buf);
    if (rc == 0 && fsync(fd) != 0)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return sl_errf(err, errlen, rc, "cannot write %s: %s", path, *msg ? msg : strerror(-rc));
    }
    return 0;
}

int predict_create(const char *dir, const uint64_t *ids, uint64_t n, uint32_t classes, uint32_t width, char *err,
                   size_t errlen)
{
    for (int k = 0; k < PREDICT_FILES; k++) {
        char path[4096];
        if (sl_path_join(path, sizeof path, dir, predict_file_name[k]) != 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
        uint32_t cols;
        size_t elem;
        const char *descr;
        shape_of(k, n, classes, width, &cols, &elem, &descr);
        unsigned char h[PREDICT_HEADER];
        header(h, descr, n, cols);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0)
            return sl_errf(err, errlen, -errno, "cannot create %s: %s", path, strerror(errno));
        int rc = sl_write_all(fd, h, sizeof h);
        uint64_t bytes = PREDICT_HEADER + n * (cols ? cols : 1) * elem;
        if (rc == 0 && k == PREDICT_NODES) { /* the ids, written through a buffer */
            int64_t buf[4096];
            for (uint64_t i = 0; rc == 0 && i < n; i += 4096) {
                size_t m = (size_t)SL_MIN(n - i, 4096);
                for (size_t j = 0; j < m; j++)
                    buf[j] = (int64_t)ids[i + j];
                rc = sl_write_all(fd, buf, m * sizeof buf[0]);
            }
        } else if (rc == 0 && ftruncate(fd, (off_t)bytes) != 0) {
            rc = -errno;
        }
        if (rc == 0 && fsync(fd) != 0)
            rc = -errno;
        close(fd);
        if (rc)
            return sl_errf(err, errlen, rc, "cannot write %s: %s", path, strerror(-rc));
    }
    return 0;
}

/* Reads the shape back from a header this file wrote. */
static int read_shape(const unsigned char *h, size_t len, uint64_t *rows, uint32_t *cols)
{
    if (len < PREDICT_HEADER || memcmp(h, "\x93NUMPY\x01\x00", 8))
        return -EINVAL;
    const char *s = strstr((const char *)h + 10, "'shape': (");
    if (!s || (const unsigned char *)s > h + PREDICT_HEADER - 16)
        return -EINVAL;
    unsigned long long r = 0, c = 0;
    int got = sscanf(s + 10, "%llu, %llu)", &r, &c);
    if (got < 1)
        return -EINVAL;
    *rows = r;
    *cols = got == 2 ? (uint32_t)c : 0;
    return 0;
}

int predict_map(struct predict_files *f, const char *dir, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    uint64_t rows[PREDICT_FILES];
    uint32_t cols[PREDICT_FILES];
    for (int k = 0; k < PREDICT_FILES; k++) {
        char path[4096];
        if (sl_path_join(path, sizeof path, dir, predict_file_name[k]) != 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
        int fd = open(path, (k == PREDICT_NODES ? O_RDONLY : O_RDWR) | O_CLOEXEC);
        if (fd < 0)
            return sl_errf(err, errlen, -errno, "cannot open %s: %s", path, strerror(errno));
        struct stat st;
        if (fstat(fd, &st) != 0 || st.st_size < PREDICT_HEADER) {
            close(fd);
            return sl_errf(err, errlen, -EINVAL, "%s is not a prediction file of this run", path);
        }
        void *p = mmap(NULL, (size_t)st.st_size, k == PREDICT_NODES ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED,
                       fd, 0);
        close(fd);
        if (p == MAP_FAILED)
            return sl_errf(err, errlen, -errno, "cannot map %s: %s", path, strerror(errno));
        f->map[k] = p;
        f->len[k] = (size_t)st.st_size;
        uint32_t want_cols;
        size_t elem;
        const char *descr;
        if (read_shape(p, f->len[k], &rows[k], &cols[k]) != 0)
            return sl_errf(err, errlen, -EINVAL, "%s: not a header this run wrote", path);
        shape_of(k, rows[k], cols[k], cols[k], &want_cols, &elem, &descr);
        if (f->len[k] != PREDICT_HEADER + rows[k] * (cols[k] ? cols[k] : 1) * elem || rows[k] != rows[0] ||
            (k != PREDICT_LOGITS && k != PREDICT_EMB && cols[k]))
            return sl_errf(err, errlen, -EINVAL, "%s: its size or shape does not match nodes.npy", path);
    }
    f->n = rows[0];
    f->classes = cols[PREDICT_LOGITS];
    f->width = cols[PREDICT_EMB];
    f->nodes = (const int64_t *)((const char *)f->map[PREDICT_NODES] + PREDICT_HEADER);
    f->logits = (float *)((char *)f->map[PREDICT_LOGITS] + PREDICT_HEADER);
    f->emb = (float *)((char *)f->map[PREDICT_EMB] + PREDICT_HEADER);
    f->pred = (int64_t *)((char *)f->map[PREDICT_PRED] + PREDICT_HEADER);
    return 0;
}

int64_t predict_row(const struct predict_files *f, uint64_t node)
{
    uint64_t lo = 0, hi = f->n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if ((uint64_t)f->nodes[mid] < node)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < f->n && (uint64_t)f->nodes[lo] == node ? (int64_t)lo : -1;
}

void predict_put(struct predict_files *f, uint64_t row, const float *logits, const float *emb)
{
    memcpy(f->logits + row * f->classes, logits, f->classes * sizeof(float));
    memcpy(f->emb + row * f->width, emb, f->width * sizeof(float));
    uint32_t best = 0;
    for (uint32_t c = 1; c < f->classes; c++)
        if (logits[c] > logits[best])
            best = c;
    f->pred[row] = best;
}

int predict_unmap(struct predict_files *f, char *err, size_t errlen)
{
    int rc = 0;
    for (int k = 0; k < PREDICT_FILES; k++) {
        if (!f->map[k])
            continue;
        if (k != PREDICT_NODES && msync(f->map[k], f->len[k], MS_SYNC) != 0 && rc == 0)
            rc = sl_errf(err, errlen, -errno, "cannot write %s back: %s", predict_file_name[k], strerror(errno));
        munmap(f->map[k], f->len[k]);
        f->map[k] = NULL;
    }
    return rc;
}
