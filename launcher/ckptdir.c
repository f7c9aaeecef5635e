/* ckptdir.c - a run's checkpoint directory: lock, move aside, resume
 * checks (ckptdir.h). */
#include "launcher/ckptdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/util.h"
#include "ops/ckpt.h"

#define LOCK_FILE ".lock"

void ckptdir_init(struct ckptdir *c)
{
    c->dir[0] = '\0';
    c->lock_fd = -1;
}

static int mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s", dir) >= sizeof tmp)
        return -ENAMETOOLONG;
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

int ckptdir_lock(struct ckptdir *c, const char *dir, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(c->dir, sizeof c->dir, "%s", dir) >= sizeof c->dir ||
        sl_path_join(path, sizeof path, dir, LOCK_FILE) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "train.checkpoint_dir %s: path too long", dir);
    int rc = mkdir_p(dir);
    if (rc)
        return sl_errf(err, errlen, rc, "cannot create train.checkpoint_dir %s: %s", dir, strerror(-rc));
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "cannot open the lock %s of train.checkpoint_dir: %s", path,
                       strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        rc = -errno;
        char who[64] = "";
        ssize_t n = pread(fd, who, sizeof who - 1, 0);
        who[n > 0 ? n : 0] = '\0';
        who[strcspn(who, "\n")] = '\0';
        close(fd);
        if (rc == -EWOULDBLOCK)
            return sl_errf(err, errlen, rc,
                           "train.checkpoint_dir %s is in use by another run (gnnlaunch pid %s holds %s); two runs "
                           "would mix their checkpoints: wait for it to end, or give this run its own directory "
                           "(--run-name NAME, or --set train.checkpoint_dir=DIR)",
                           dir, who[0] ? who : "unknown", path);
        return sl_errf(err, errlen, rc, "cannot lock %s: %s", path, strerror(-rc));
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        rc = -errno;
        close(fd);
        return sl_errf(err, errlen, rc, "cannot write %s: %s", path, strerror(-rc));
    }
    c->lock_fd = fd;
    return 0;
}

/* A checkpoint's file name (epoch-*.safetensors, or its .partial-PID of a
 * writer that is gone). A partial file of a live writer is not ours to
 * move: with the lock held there is none but a stray one. */
static bool is_ckpt_name(const char *name)
{
    if (!strcmp(name, CKPTDIR_BEST) || !strcmp(name, CKPTDIR_LATEST)) /* the pointers go with their epochs */
        return true;
    if (strncmp(name, "epoch-", 6) != 0)
        return false;
    const char *ext = strstr(name, ".safetensors");
    if (!ext)
        return false;
    if (!strcmp(ext, ".safetensors"))
        return true;
    if (strncmp(ext, ".safetensors.partial-", 21) != 0)
        return false;
    long pid = strtol(ext + 21, NULL, 10);
    return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* The order files are moved aside in: the pointers first, then the
 * epochs oldest first, so that a move cut short (a kill) leaves the
 * newest epochs where they were - a later --resume then continues from
 * the newest, as if nothing had moved - never an older epoch as the
 * newest. */
static long aside_rank(const char *name)
{
    if (!strcmp(name, CKPTDIR_BEST) || !strcmp(name, CKPTDIR_LATEST))
        return -1;
    return strtol(name + 6, NULL, 10); /* "epoch-N..." */
}

static int aside_cmp(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    long rx = aside_rank(x), ry = aside_rank(y);
    return rx != ry ? (rx < ry ? -1 : 1) : strcmp(x, y);
}

/* ".old-STAMP[-K].partial": a move aside that was cut short; renamed to
 * its final name, the move it began being the one that was asked for. */
static void finish_partial_aside(int dfd, const char *name)
{
    size_t n = strlen(name);
    if (strncmp(name, ".old-", 5) != 0 || n < 13 || strcmp(name + n - 8, ".partial") != 0)
        return;
    char final[256];
    snprintf(final, sizeof final, "%.*s", (int)(n - 9), name + 1);
    struct stat st;
    if (fstatat(dfd, final, &st, AT_SYMLINK_NOFOLLOW) != 0)
        renameat(dfd, name, dfd, final);
}

int ckptdir_move_aside(struct ckptdir *c, char *moved, size_t len, char *err, size_t errlen)
{
    if (moved && len)
        moved[0] = '\0';
    int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT ? 0 : sl_errf(err, errlen, -errno, "%s: %s", c->dir, strerror(errno));
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return sl_errf(err, errlen, -errno, "%s: %s", c->dir, strerror(errno));
    }
    char final[96] = "", tmp[sizeof final + 16] = ""; /* tmp: "." final ".partial" */
    int n = 0, rc = 0;
    char **names = NULL;
    size_t nnames = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        finish_partial_aside(dfd, de->d_name);
        if (!is_ckpt_name(de->d_name))
            continue;
        if (nnames == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) {
                rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory", c->dir);
                goto out;
            }
            names = nn;
        }
        if (!(names[nnames] = strdup(de->d_name))) {
            rc = sl_errf(err, errlen, -ENOMEM, "%s: out of memory", c->dir);
            goto out;
        }
        nnames++;
    }
    if (nnames)
        qsort(names, nnames, sizeof *names, aside_cmp);
    for (size_t i = 0; i < nnames; i++) {
        const char *name = names[i];
        if (!tmp[0]) { /* the first one: make the subdirectory */
            time_t now = time(NULL);
            struct tm tm;
            char stamp[32];
            localtime_r(&now, &tm);
            strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
            for (int k = 1; k < 1000; k++) {
                if (k == 1)
                    snprintf(final, sizeof final, "old-%s", stamp);
                else
                    snprintf(final, sizeof final, "old-%s-%d", stamp, k);
                struct stat st;
                if (fstatat(dfd, final, &st, AT_SYMLINK_NOFOLLOW) == 0)
                    continue; /* taken */
                snprintf(tmp, sizeof tmp, ".%s.partial", final);
                if (mkdirat(dfd, tmp, 0755) == 0)
                    break;
                if (errno != EEXIST) {
                    rc = sl_errf(err, errlen, -errno, "cannot create %s/%s: %s", c->dir, tmp, strerror(errno));
                    goto out;
                }
                tmp[0] = '\0';
            }
            if (!tmp[0]) {
                rc = sl_errf(err, errlen, -EEXIST, "%s: no free old-%s-K name", c->dir, stamp);
                goto out;
            }
        }
        char to[PATH_MAX];
        snprintf(to, sizeof to, "%s/%s", tmp, name);
        if (renameat(dfd, name, dfd, to) != 0) {
            rc = sl_errf(err, errlen, -errno, "cannot move %s/%s into %s: %s", c->dir, name, tmp, strerror(errno));
            goto out;
        }
        n += strcmp(name, CKPTDIR_BEST) && strcmp(name, CKPTDIR_LATEST); /* checkpoints, not pointers */
    }
    if (tmp[0]) {
        int sfd = openat(dfd, tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* its entries, durable before its name */
        if (sfd >= 0) {
            fsync(sfd);
            close(sfd);
        }
        if (renameat(dfd, tmp, dfd, final) != 0) {
            rc = sl_errf(err, errlen, -errno, "cannot rename %s/%s to %s: %s", c->dir, tmp, final, strerror(errno));
            goto out;
        }
        fsync(dfd);
    }
    if (moved && len)
        snprintf(moved, len, "%s", final);
    rc = n;
out:
    for (size_t i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    closedir(d); /* closes dfd */
    return rc;
}

int ckptdir_check_run(const char *path, uint64_t run, const char *run_text, char *err, size_t errlen)
{
    struct ckpt k;
    int rc = ckpt_read(&k, path, err, errlen);
    if (rc)
        return rc;
    char want[24], diff[1536];
    snprintf(want, sizeof want, "%016" PRIx64, run);
    const char *got = ckpt_meta(&k, CKPT_META_RUN), *text = ckpt_meta(&k, CKPT_META_RUN_CONFIG);
    if (!got) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "--resume: %s records no run identity (it was written before checkpoints had one), so it "
                     "cannot be told to be this run's; continue from it explicitly with --resume-from %s, or start "
                     "afresh without --resume",
                     path, path);
    } else if (strcmp(got, want) != 0) {
        int nd = text ? config_run_diff(text, run_text, diff, sizeof diff) : 0;
        if (nd == 0) /* the keys agree: the dataset differs */
            snprintf(diff, sizeof diff, "the same keys, so the dataset differs");
        rc = sl_errf(err, errlen, -EINVAL,
                     "--resume: %s belongs to another run (identity %s, this configuration's is %s): %s; resume "
                     "with the configuration it was made with, continue from it explicitly with --resume-from "
                     "FILE, or start afresh without --resume (its checkpoints are then moved aside)",
                     path, got, want, diff);
    }
    ckpt_free(&k);
    return rc;
}

/* Copies the open file fd (size bytes) into the new file tmp (O_EXCL,
 * no symlink followed), fsynced. 0 or -errno with a message. */
static int copy_into(int fd, const char *file, uint64_t size, const char *tmp, char *err, size_t errlen)
{
    unlink(tmp);
    int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out < 0)
        return sl_errf(err, errlen, -errno, "cannot create %s: %s", tmp, strerror(errno));
    static char buf[1 << 20];
    uint64_t off = 0;
    int rc = 0;
    while (rc == 0) {
        size_t got = 0;
        int e = sl_pread_full(fd, buf, sizeof buf, (off_t)off, &got);
        if (e < 0 && e != -EIO) /* -EIO with got < sizeof buf: the end of the file */
            rc = sl_errf(err, errlen, e, "--resume-from %s: read failed: %s", file, strerror(-e));
        else if (got && (e = sl_pwrite_all(out, buf, got, (off_t)off)) < 0)
            rc = sl_errf(err, errlen, e, "cannot write %s: %s", tmp, strerror(-e));
        off += got;
        if (got < sizeof buf)
            break;
    }
    if (rc == 0 && off != size) /* changed while copied: what was checked is not what would be used */
        rc = sl_errf(err, errlen, -EAGAIN, "--resume-from %s: its size changed while it was copied (%" PRIu64
                     " bytes, then %" PRIu64 "); try again once nothing writes it",
                     file, size, off);
    if (rc == 0 && fsync(out) != 0)
        rc = sl_errf(err, errlen, -errno, "cannot write %s: %s", tmp, strerror(errno));
    close(out);
    if (rc)
        unlink(tmp);
    return rc;
}

int ckptdir_adopt(struct ckptdir *c, const char *file, uint32_t *epoch, char *moved, size_t len, char *err,
                  size_t errlen)
{
    /* One copy, from one open of the file, into the directory under a
     * name nothing moves or mistakes for a checkpoint, before anything is
     * moved (the file may be one of those moved); the copy is what is
     * checked and then installed, so a file replaced or cut while we
     * read it is never installed unchecked. */
    char tmp[PATH_MAX + 32], dst[PATH_MAX];
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "--resume-from %s: %s", file, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return sl_errf(err, errlen, -EINVAL, "--resume-from %s: not a regular file", file);
    }
    if (snprintf(tmp, sizeof tmp, "%s/.adopt.partial-%ld", c->dir, (long)getpid()) >= (int)sizeof tmp) {
        close(fd);
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", c->dir);
    }
    int rc = copy_into(fd, file, (uint64_t)st.st_size, tmp, err, errlen);
    close(fd);
    if (rc)
        return rc;
    struct ckpt k;
    char msg[1024];
    if ((rc = ckpt_read(&k, tmp, msg, sizeof msg)) != 0) {
        unlink(tmp);
        return sl_errf(err, errlen, rc, "--resume-from %s: %s", file, msg);
    }
    const char *fmt = ckpt_meta(&k, "format"), *ep = ckpt_meta(&k, "epoch");
    char *end = NULL;
    unsigned long e = ep ? strtoul(ep, &end, 10) : 0;
    bool ok = fmt && !strcmp(fmt, "sluice-checkpoint") && ep && end && !*end && e > 0 && e < UINT32_MAX;
    ckpt_free(&k);
    if (!ok) {
        unlink(tmp);
        return sl_errf(err, errlen, -EINVAL, "--resume-from %s: not a Sluice checkpoint with an epoch", file);
    }
    rc = ckptdir_move_aside(c, moved, len, err, errlen);
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    if (ckpt_path(dst, sizeof dst, c->dir, (uint32_t)e) != 0) {
        unlink(tmp);
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", c->dir);
    }
    if (rename(tmp, dst) != 0) {
        rc = sl_errf(err, errlen, -errno, "cannot rename %s to %s: %s", tmp, dst, strerror(errno));
        unlink(tmp);
        return rc;
    }
    int dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* the rename, durable */
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    *epoch = (uint32_t)e;
    return 0;
}

void ckptdir_free(struct ckptdir *c)
{
    if (c->lock_fd >= 0)
        close(c->lock_fd); /* drops the flock */
    c->lock_fd = -1;
}

int ckptdir_point(const char *dir, const char *name, uint32_t epoch, char *err, size_t errlen)
{
    char target[PATH_MAX], link[PATH_MAX], tmp[PATH_MAX + 32];
    if (ckpt_path(target, sizeof target, dir, epoch) != 0 || sl_path_join(link, sizeof link, dir, name) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", dir);
    if (access(target, F_OK) != 0)
        return sl_errf(err, errlen, -errno, "cannot point %s at %s: %s", link, target, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s/.%s.partial-%ld", dir, name, (long)getpid());
    const char *rel = strrchr(target, '/') + 1; /* ckpt_path joined dir and the name */
    unlink(tmp);
    if (symlink(rel, tmp) != 0)
        return sl_errf(err, errlen, -errno, "cannot make the link %s: %s", tmp, strerror(errno));
    if (rename(tmp, link) != 0) {
        int e = errno;
        unlink(tmp);
        return sl_errf(err, errlen, -e, "cannot rename %s to %s: %s", tmp, link, strerror(e));
    }
    return 0;
}

/* Removes every epoch-N.safetensors of dir (names as ckpt_path makes
 * them) with lo <= N <= hi, except N = spare (0: none). The number
 * removed, or -errno with a message. */
static int unlink_epochs(const char *dir, uint64_t lo, uint64_t hi, uint32_t spare, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return sl_errf(err, errlen, -errno, "cannot read %s: %s", dir, strerror(errno));
    int removed = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        unsigned long e;
        int used = 0;
        char canon[64];
        if (sscanf(de->d_name, "epoch-%lu.safetensors%n", &e, &used) != 1 || de->d_name[used] != '\0' || e == 0 ||
            e > UINT32_MAX || e < lo || e > hi || e == spare)
            continue;
        snprintf(canon, sizeof canon, "epoch-%06lu.safetensors", e);
        if (strcmp(canon, de->d_name))
            continue; /* not a name ckpt_path makes */
        if (unlinkat(dirfd(d), de->d_name, 0) != 0) {
            rc = sl_errf(err, errlen, -errno, "cannot remove %s/%s: %s", dir, de->d_name, strerror(errno));
            break;
        }
        removed++;
    }
    closedir(d);
    return rc ? rc : removed;
}

int ckptdir_drop_after(const char *dir, uint32_t last, char *err, size_t errlen)
{
    return unlink_epochs(dir, (uint64_t)last + 1, UINT32_MAX, 0, err, errlen);
}

int ckptdir_prune(const char *dir, uint32_t newest, uint32_t keep, uint32_t spare, char *err, size_t errlen)
{
    if (keep == 0 || newest <= keep)
        return 0;
    if (spare == 0) { /* not known here (a resumed run before its first evaluation): the best link says */
        char link[PATH_MAX], target[128];
        ssize_t n;
        unsigned long b;
        int used = 0;
        if (sl_path_join(link, sizeof link, dir, CKPTDIR_BEST) == 0 &&
            (n = readlink(link, target, sizeof target - 1)) > 0) {
            target[n] = '\0';
            if (sscanf(target, "epoch-%lu.safetensors%n", &b, &used) == 1 && target[used] == '\0' && b <= UINT32_MAX)
                spare = (uint32_t)b;
        }
    }
    return unlink_epochs(dir, 1, newest - keep, spare, err, errlen); /* outside the window, never the best */
}
