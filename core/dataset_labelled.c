/* dataset_labelled.c - every split has a labelled node (dataset_labelled.h).
 * labels.bin is mapped read-only and only the entries the split names are
 * touched; split ids are read in chunks with pread. */
#include "core/dataset_labelled.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/util.h"

#define CHUNK_IDS 8192

/* Opens file f of the dataset in dir read-only. */
static int open_file(const char *dir, const struct dataset_file *f, char *path, size_t len, char *err, size_t errlen)
{
    if (sl_path_join(path, len, dir, f->file) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s/%s: path too long", dir, f->file);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    return fd;
}

/* Whether split file fd (ids of dtype dt, rows of them) names a node whose
 * label (labels, nodes of them) is in 0 .. classes-1: 1, 0, or -errno. */
static int split_has_label(int fd, enum dtype dt, uint64_t rows, const int32_t *labels, uint64_t nodes,
                           uint32_t classes)
{
    size_t es = dtype_size(dt);
    uint64_t buf[CHUNK_IDS]; /* room for CHUNK_IDS u64 or 2 x CHUNK_IDS u32 */
    size_t per = sizeof buf / es;
    for (uint64_t at = 0; at < rows;) {
        size_t n = (size_t)SL_MIN((uint64_t)per, rows - at), got = 0;
        int rc = sl_pread_full(fd, buf, n * es, (off_t)(at * es), &got);
        if (rc < 0)
            return rc;
        if (got != n * es)
            return -EIO; /* shorter than dataset_meta_read saw it */
        for (size_t i = 0; i < n; i++) {
            uint64_t id = dt == DTYPE_U32 ? ((const uint32_t *)buf)[i] : buf[i];
            if (id < nodes && labels[id] >= 0 && (uint32_t)labels[id] < classes)
                return 1;
        }
        at += n;
    }
    return 0;
}

int dataset_check_labelled(const char *dir, const struct dataset_meta *m, char *err, size_t errlen)
{
    static const int splits[] = {DATASET_TRAIN, DATASET_VAL, DATASET_TEST};
    static const char *const what[] = {"training would step on nothing", "val_acc would be nan",
                                       "test_acc would be nan"};
    const struct dataset_file *lf = &m->f[DATASET_LABELS];
    char path[4096];
    if (lf->dtype != DTYPE_I32 || lf->rows != m->nodes)
        return sl_errf(err, errlen, -EINVAL, "%s/%s: labels are not i32 x nodes", dir, lf->file);
    int lfd = open_file(dir, lf, path, sizeof path, err, errlen);
    if (lfd < 0)
        return lfd;
    size_t len = (size_t)(m->nodes * sizeof(int32_t));
    void *map = len ? mmap(NULL, len, PROT_READ, MAP_SHARED, lfd, 0) : NULL;
    int rc = 0;
    if (len && map == MAP_FAILED) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot map: %s", path, strerror(errno));
        map = NULL;
        goto out;
    }
    for (size_t s = 0; s < SL_ARRAY_LEN(splits) && rc == 0; s++) {
        const struct dataset_file *sf = &m->f[splits[s]];
        if (sf->rows == 0) {
            rc = sl_errf(err, errlen, -EINVAL,
                         "%s/%s: the split is empty, so %s; make the dataset again with nodes in every split "
                         "(gnnprep synth --train-frac/--val-frac/--test-frac, gnnprep import --train/--val/--test)",
                         dir, sf->file, what[s]);
            break;
        }
        int sfd = open_file(dir, sf, path, sizeof path, err, errlen);
        if (sfd < 0) {
            rc = sfd;
            break;
        }
        int has = split_has_label(sfd, sf->dtype, sf->rows, map, m->nodes, m->classes);
        close(sfd);
        if (has < 0)
            rc = sl_errf(err, errlen, has, "%s: cannot read: %s", path, strerror(-has));
        else if (has == 0)
            rc = sl_errf(err, errlen, -EINVAL,
                         "%s: none of its %" PRIu64 " nodes has a label in 0..%" PRIu32 " (%s/%s), so %s; "
                         "label some of them, or put labelled nodes in this split",
                         path, sf->rows, m->classes - 1, dir, lf->file, what[s]);
    }
out:
    if (map)
        munmap(map, len);
    close(lfd);
    return rc;
}

int dataset_labels_used(const char *dir, const struct dataset_meta *m, uint64_t max_bytes, uint32_t *used, char *err,
                        size_t errlen)
{
    const struct dataset_file *lf = &m->f[DATASET_LABELS];
    if (lf->bytes > max_bytes)
        return 0;
    char path[4096];
    int fd = open_file(dir, lf, path, sizeof path, err, errlen);
    if (fd < 0)
        return fd;
    int32_t buf[CHUNK_IDS];
    int64_t top = -1;
    int rc = 1;
    for (uint64_t at = 0; at < lf->bytes;) {
        size_t n = (size_t)SL_MIN((uint64_t)sizeof buf, lf->bytes - at), got = 0;
        int r = sl_pread_full(fd, buf, n, (off_t)at, &got);
        if (r < 0 || got != n) {
            rc = sl_errf(err, errlen, r < 0 ? r : -EIO, "%s: cannot read: %s", path, strerror(r < 0 ? -r : EIO));
            break;
        }
        for (size_t i = 0; i < n / sizeof buf[0]; i++)
            if (buf[i] >= 0 && (uint32_t)buf[i] < m->classes && buf[i] > top)
                top = buf[i];
        at += n;
    }
    close(fd);
    if (rc == 1)
        *used = (uint32_t)(top + 1);
    return rc;
}
