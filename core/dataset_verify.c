/* dataset_verify.c - the verification record of a dataset
 * (dataset_verify.h).
 *
 * Record format (text, one file per line, '#' comments):
 *     sluice-verified 1 dataset <identity, 16 hex digits>
 *     <table> <st_dev> <st_ino> <size> <mtime ns> <ctime ns>     x DATASET_FILES
 * Tables in dataset_file_key order. Any other content makes it "no record". */
#include "core/dataset_verify.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/dataset_check.h"
#include "core/util.h"

#define RECORD_MAGIC "sluice-verified"
#define RECORD_VERSION 1
#define RECORD_MAX 4096

static int64_t ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

int dataset_verify_stamp_take(const char *dir, const struct dataset_meta *m, struct dataset_verify_stamp *s,
                              char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->dataset = dataset_meta_identity(m);
    for (int i = 0; i < DATASET_FILES; i++) {
        char p[PATH_MAX];
        struct stat st;
        if (sl_path_join(p, sizeof p, dir, m->f[i].file) != 0)
            return sl_errf(err, errlen, -ENAMETOOLONG, "%s/%s: path too long", dir, m->f[i].file);
        if (stat(p, &st) != 0)
            return sl_errf(err, errlen, -errno, "%s: %s", p, strerror(errno));
        s->f[i] = (struct dataset_verify_ident){.dev = (uint64_t)st.st_dev,
                                                .ino = (uint64_t)st.st_ino,
                                                .size = (uint64_t)st.st_size,
                                                .mtime_ns = ts_ns(&st.st_mtim),
                                                .ctime_ns = ts_ns(&st.st_ctim)};
    }
    return 0;
}

static bool ident_equal(const struct dataset_verify_ident *a, const struct dataset_verify_ident *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns &&
           a->ctime_ns == b->ctime_ns;
}

int dataset_verify_stamp_diff(const struct dataset_verify_stamp *a, const struct dataset_verify_stamp *b)
{
    for (int i = 0; i < DATASET_FILES; i++)
        if (!ident_equal(&a->f[i], &b->f[i]))
            return i;
    return a->dataset == b->dataset ? -1 : DATASET_FILES;
}

static void fmt_time(int64_t ns, char *out, size_t len)
{
    time_t sec = (time_t)(ns / 1000000000);
    struct tm tm;
    char day[32] = "?";
    if (localtime_r(&sec, &tm))
        strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out, len, "%s.%09" PRId64, day, ns % 1000000000);
}

void dataset_verify_stamp_explain(const struct dataset_verify_stamp *was, const struct dataset_verify_stamp *now,
                                  int i, char *out, size_t len)
{
    if (i < 0 || i >= DATASET_FILES) {
        snprintf(out, len, "dataset.toml records other contents (identity %016" PRIx64 ", was %016" PRIx64 ")",
                 now->dataset, was->dataset);
        return;
    }
    const struct dataset_verify_ident *a = &was->f[i], *b = &now->f[i];
    char t0[48], t1[48];
    if (a->dev != b->dev || a->ino != b->ino)
        snprintf(out, len, "it was replaced by another file (inode %" PRIu64 ", was %" PRIu64 ")", b->ino, a->ino);
    else if (a->size != b->size)
        snprintf(out, len, "its size changed from %" PRIu64 " to %" PRIu64 " bytes", a->size, b->size);
    else if (a->mtime_ns != b->mtime_ns) {
        fmt_time(a->mtime_ns, t0, sizeof t0);
        fmt_time(b->mtime_ns, t1, sizeof t1);
        snprintf(out, len, "it was written (modification time %s, was %s)", t1, t0);
    } else {
        fmt_time(a->ctime_ns, t0, sizeof t0);
        fmt_time(b->ctime_ns, t1, sizeof t1);
        snprintf(out, len, "it was changed (change time %s, was %s)", t1, t0);
    }
}

int dataset_verify_stamp_write(const char *path, const struct dataset_verify_stamp *s, mode_t mode, char *err,
                               size_t errlen)
{
    char text[RECORD_MAX], tmp[PATH_MAX + 32];
    int n = snprintf(text, sizeof text,
                     "# Sluice (docs/format.md, \"Verification\"): every byte of these files was checked against\n"
                     "# dataset.toml while they had these identities: table st_dev st_ino size mtime_ns ctime_ns\n"
                     "%s %d dataset %016" PRIx64 "\n",
                     RECORD_MAGIC, RECORD_VERSION, s->dataset);
    for (int i = 0; i < DATASET_FILES && n > 0 && (size_t)n < sizeof text; i++) {
        const struct dataset_verify_ident *f = &s->f[i];
        n += snprintf(text + n, sizeof text - (size_t)n, "%s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRId64 " %" PRId64 "\n",
                      dataset_file_key[i], f->dev, f->ino, f->size, f->mtime_ns, f->ctime_ns);
    }
    if (n < 0 || (size_t)n >= sizeof text)
        return sl_errf(err, errlen, -EOVERFLOW, "%s: record too long", path);
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot create: %s", tmp, strerror(errno));
    int rc = sl_write_all(fd, text, (size_t)n);
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc) {
        unlink(tmp);
        return sl_errf(err, errlen, rc, "%s: cannot write: %s", path, strerror(-rc));
    }
    return 0;
}

int dataset_verify_stamp_read(const char *path, struct dataset_verify_stamp *s, char *err, size_t errlen)
{
    char *text = NULL;
    size_t len;
    int rc = sl_read_file(path, RECORD_MAX, &text, &len, err, errlen);
    if (rc)
        return rc == -EFBIG ? -EINVAL : rc;
    memset(s, 0, sizeof *s);
    int line = 0; /* 0: the magic line; 1 + i: file i */
    rc = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l && rc == 0; l = strtok_r(NULL, "\n", &save)) {
        if (l[0] == '#')
            continue;
        char key[64];
        int ver, used = -1;
        if (line == 0) {
            if (sscanf(l, "%63s %d dataset %" SCNx64 "%n", key, &ver, &s->dataset, &used) != 3 ||
                strcmp(key, RECORD_MAGIC) || ver != RECORD_VERSION || l[used] != '\0')
                rc = -EINVAL;
        } else if (line <= DATASET_FILES) {
            struct dataset_verify_ident *f = &s->f[line - 1];
            if (sscanf(l, "%63s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNd64 " %" SCNd64 "%n", key, &f->dev, &f->ino,
                       &f->size, &f->mtime_ns, &f->ctime_ns, &used) != 6 ||
                strcmp(key, dataset_file_key[line - 1]) || l[used] != '\0')
                rc = -EINVAL;
        } else {
            rc = -EINVAL;
        }
        line++;
    }
    free(text);
    if (rc == 0 && line != DATASET_FILES + 1)
        rc = -EINVAL;
    if (rc)
        return sl_errf(err, errlen, rc, "%s: not a verification record", path);
    return 0;
}

/* mkdir -p of a private directory (0700) for the cache. */
static int make_private_dir(const char *path)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int dataset_verify_cache_path(const char *dir, char *out, size_t len, char *err, size_t errlen)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[PATH_MAX], real[PATH_MAX];
    if (xdg && xdg[0] == '/')
        snprintf(base, sizeof base, "%s/sluice", xdg);
    else if (home && home[0] == '/')
        snprintf(base, sizeof base, "%s/.cache/sluice", home);
    else
        return sl_errf(err, errlen, -ENOENT, "no cache directory: neither XDG_CACHE_HOME nor HOME is set");
    if (!realpath(dir, real))
        return sl_errf(err, errlen, -errno, "%s: %s", dir, strerror(errno));
    int n = snprintf(out, len, "%s/verified-%016" PRIx64, base, (uint64_t)XXH3_64bits(real, strlen(real)));
    if (n < 0 || (size_t)n >= len)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: cache path too long", base);
    return 0;
}

/* Whether a record at path matches stamp s. */
static bool record_matches(const char *path, const struct dataset_verify_stamp *s)
{
    struct dataset_verify_stamp r;
    return dataset_verify_stamp_read(path, &r, NULL, 0) == 0 && dataset_verify_stamp_diff(&r, s) < 0;
}

/* True when a file of s was modified in the coarse clock's tick `now_ns`
 * or later (its times could then repeat for a later write). */
static bool stamp_racy(const struct dataset_verify_stamp *s, int64_t now_ns)
{
    for (int i = 0; i < DATASET_FILES; i++)
        if (s->f[i].mtime_ns >= now_ns || s->f[i].ctime_ns >= now_ns)
            return true;
    return false;
}

/* Records stamp s: beside the dataset, else in the cache. */
static void record_write(struct dataset_verify *v, const char *dir, const struct dataset_verify_stamp *s)
{
    char beside[PATH_MAX], cache[PATH_MAX], msg[1024], msg2[1024];
    int rc = sl_path_join(beside, sizeof beside, dir, DATASET_VERIFY_RECORD);
    if (rc == 0 && (rc = dataset_verify_stamp_write(beside, s, 0644, msg, sizeof msg)) == 0) {
        snprintf(v->record, sizeof v->record, "%s", beside);
        v->recorded = true;
        return;
    }
    if (rc == -ENAMETOOLONG)
        snprintf(msg, sizeof msg, "%s: path too long", dir);
    int rc2 = dataset_verify_cache_path(dir, cache, sizeof cache, msg2, sizeof msg2);
    if (rc2 == 0) {
        char base[PATH_MAX];
        snprintf(base, sizeof base, "%s", cache);
        char *slash = strrchr(base, '/');
        *slash = '\0';
        rc2 = make_private_dir(base);
        if (rc2)
            snprintf(msg2, sizeof msg2, "%.900s: cannot create: %s", base, strerror(-rc2));
        else
            rc2 = dataset_verify_stamp_write(cache, s, 0600, msg2, sizeof msg2);
    }
    if (rc2 == 0) {
        snprintf(v->record, sizeof v->record, "%s", cache);
        v->recorded = true;
        return;
    }
    snprintf(v->note, sizeof v->note, "the verification could not be recorded (%.440s; %.440s), so the next launch reads the "
             "dataset again", msg, msg2);
}

int dataset_verify_run(struct dataset_verify *v, const char *dir, const struct dataset_meta *m, char *err,
                       size_t errlen)
{
    v->checked = v->recorded = false;
    v->record[0] = v->note[0] = '\0';
    struct timespec coarse;
    clock_gettime(CLOCK_REALTIME_COARSE, &coarse);
    int64_t t0 = ts_ns(&coarse);
    int rc = dataset_verify_stamp_take(dir, m, &v->stamp, err, errlen);
    if (rc)
        return rc;
    char beside[PATH_MAX], cache[PATH_MAX];
    bool have_beside = sl_path_join(beside, sizeof beside, dir, DATASET_VERIFY_RECORD) == 0;
    bool have_cache = dataset_verify_cache_path(dir, cache, sizeof cache, NULL, 0) == 0;
    const char *why = "--force";
    char whybuf[PATH_MAX + 1200];
    if (!v->force) {
        if (have_beside && record_matches(beside, &v->stamp)) {
            snprintf(v->record, sizeof v->record, "%s", beside);
            return 0;
        }
        if (have_cache && record_matches(cache, &v->stamp)) {
            snprintf(v->record, sizeof v->record, "%s", cache);
            return 0;
        }
        struct dataset_verify_stamp old;
        int d = -1;
        if ((have_beside && dataset_verify_stamp_read(beside, &old, NULL, 0) == 0) ||
            (have_cache && dataset_verify_stamp_read(cache, &old, NULL, 0) == 0))
            d = dataset_verify_stamp_diff(&old, &v->stamp);
        if (d < 0) {
            why = "it was never verified in its present state";
        } else {
            char what[512];
            dataset_verify_stamp_explain(&old, &v->stamp, d, what, sizeof what);
            snprintf(whybuf, sizeof whybuf, "%s changed since it was last verified: %s",
                     d < DATASET_FILES ? m->f[d].file : DATASET_META_FILE, what);
            why = whybuf;
        }
    }
    if (v->begin)
        v->begin(v->arg, dataset_check_bytes(m), why);
    struct dataset_check c = {.file_ok = v->file_ok, .progress = v->progress, .arg = v->arg};
    v->checked = true;
    if ((rc = dataset_check_run(&c, dir, m, err, errlen)) != 0)
        return rc;
    struct dataset_verify_stamp after;
    if ((rc = dataset_verify_stamp_take(dir, m, &after, err, errlen)) != 0)
        return rc;
    int d = dataset_verify_stamp_diff(&v->stamp, &after);
    if (d >= 0) {
        /* the pass read bytes that changed under it: they were valid, but
         * what is there now was not all read */
        char what[512];
        dataset_verify_stamp_explain(&v->stamp, &after, d, what, sizeof what);
        return sl_errf(err, errlen, -EAGAIN, "%s/%s changed while it was being verified: %s; try again once nothing "
                       "writes the dataset", dir, d < DATASET_FILES ? m->f[d].file : DATASET_META_FILE, what);
    }
    if (stamp_racy(&v->stamp, t0)) {
        snprintf(v->note, sizeof v->note, "a file was modified moments before the verification began, so it is not "
                 "recorded and the next launch reads the dataset again");
        return 0;
    }
    record_write(v, dir, &v->stamp);
    return 0;
}
