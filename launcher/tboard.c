/* tboard.c - TensorBoard event files (tboard.h). */
#include "launcher/tboard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include "core/util.h"
#include "launcher/tensorboard.pb-c.h"

uint32_t tboard_masked_crc(const void *buf, size_t len)
{
    uint32_t crc = 0xffffffffu;
    const unsigned char *p = buf;
    while (len > 0) { /* ISA-L takes an int length */
        int n = len > (1u << 30) ? 1 << 30 : (int)len;
        crc = crc32_iscsi((unsigned char *)p, n, crc);
        p += n;
        len -= (size_t)n;
    }
    crc ^= 0xffffffffu;
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* One TFRecord holding the packed event, in one write. */
static int write_event(struct tboard *t, const SluiceTb__Event *ev, char *err, size_t errlen)
{
    size_t n = sluice_tb__event__get_packed_size(ev);
    unsigned char *rec = malloc(n + 16);
    if (!rec)
        return sl_errf(err, errlen, -ENOMEM, "out of memory for a TensorBoard record");
    put_le(rec, n, 8);
    put_le(rec + 8, tboard_masked_crc(rec, 8), 4);
    sluice_tb__event__pack(ev, rec + 12);
    put_le(rec + 12 + n, tboard_masked_crc(rec + 12, n), 4);
    int rc = sl_write_all(t->fd, rec, n + 16);
    free(rec);
    if (rc)
        return sl_errf(err, errlen, rc, "writing %s: %s", t->path, strerror(-rc));
    return 0;
}

int tboard_open(struct tboard *t, const char *dir, char *err, size_t errlen)
{
    t->fd = -1;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return sl_errf(err, errlen, -errno, "--tensorboard %s: cannot create it: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return sl_errf(err, errlen, -ENOTDIR, "--tensorboard %s: not a directory", dir);
    char host[256] = "host";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    int n = snprintf(t->path, sizeof t->path, "%s/events.out.tfevents.%lld.%s.%ld.sluice", dir, (long long)time(NULL),
                     host, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof t->path)
        return sl_errf(err, errlen, -ENAMETOOLONG, "--tensorboard %s: path too long", dir);
    t->fd = open(t->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (t->fd < 0)
        return sl_errf(err, errlen, -errno, "--tensorboard: cannot create %s: %s", t->path, strerror(errno));
    SluiceTb__Event ev = SLUICE_TB__EVENT__INIT;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    ev.wall_time = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    ev.what_case = SLUICE_TB__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    int rc = write_event(t, &ev, err, errlen);
    if (rc) {
        close(t->fd);
        t->fd = -1;
    }
    return rc;
}

int tboard_scalars(struct tboard *t, int64_t step, double wall_time, const char *const *tags, const float *values,
                   size_t n, char *err, size_t errlen)
{
    if (t->fd < 0)
        return sl_errf(err, errlen, -EBADF, "the TensorBoard file is closed");
    SluiceTb__SummaryValue *v = calloc(n ? n : 1, sizeof *v);
    SluiceTb__SummaryValue **vp = calloc(n ? n : 1, sizeof *vp);
    if (!v || !vp) {
        free(v), free(vp);
        return sl_errf(err, errlen, -ENOMEM, "out of memory for %zu scalars", n);
    }
    for (size_t i = 0; i < n; i++) {
        sluice_tb__summary_value__init(&v[i]);
        v[i].tag = (char *)tags[i];
        v[i].simple_value = values[i];
        vp[i] = &v[i];
    }
    SluiceTb__Summary sum = SLUICE_TB__SUMMARY__INIT;
    sum.n_value = n;
    sum.value = vp;
    SluiceTb__Event ev = SLUICE_TB__EVENT__INIT;
    ev.wall_time = wall_time;
    ev.step = step;
    ev.what_case = SLUICE_TB__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    int rc = write_event(t, &ev, err, errlen);
    free(v);
    free(vp);
    return rc;
}

void tboard_add(struct tboard_batch *b, const char *tag, double v)
{
    if (isfinite(v) && b->n < TBOARD_BATCH_MAX) {
        b->tags[b->n] = tag;
        b->vals[b->n++] = (float)v;
    }
}

void tboard_write_batch(struct tboard *t, int64_t step, const struct tboard_batch *b, bool *failed)
{
    if (t->fd < 0 || b->n == 0)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char msg[PATH_MAX + 128];
    if (tboard_scalars(t, step, (double)now.tv_sec + (double)now.tv_nsec / 1e9, b->tags, b->vals, b->n, msg,
                       sizeof msg) != 0) {
        fprintf(stderr, "gnnlaunch: warning: --tensorboard: %s; no more scalars go there\n", msg);
        tboard_close(t, msg, sizeof msg);
        *failed = true;
    }
}

int tboard_close(struct tboard *t, char *err, size_t errlen)
{
    if (t->fd < 0)
        return 0;
    int rc = fsync(t->fd) != 0 ? -errno : 0;
    if (close(t->fd) != 0 && rc == 0)
        rc = -errno;
    t->fd = -1;
    return rc ? sl_errf(err, errlen, rc, "closing %s: %s", t->path, strerror(-rc)) : 0;
}
