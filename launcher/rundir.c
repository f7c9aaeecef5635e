/* rundir.c - the private run directory: base directory, atomic creation,
 * owner checks and reclaim of dead runs' directories (see rundir.h). */
#include "launcher/rundir.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/toml.h"
#include "core/util.h"
#include "ipc/shm.h"

#define NEW_PREFIX ".new-" /* directories being created: .new-<run-id> */

/* ---- the base directory ------------------------------------------------------- */

/* Without XDG_RUNTIME_DIR the base is ${TMPDIR:-/tmp}/sluice-<uid> - a
 * name any local user can take first (a directory of their own, or a
 * link). Then the launcher makes a private directory with a random suffix
 * (mkdtemp: ${TMPDIR:-/tmp}/sluice-<uid>-XXXXXX, 0700) and records its
 * path in $HOME/.cache/sluice/run-base, where gnnstat (rundir_base_find)
 * and later launches find it; a recorded directory is used while it is
 * still a private directory of the user's. */
#define RECORD_DIR ".cache/sluice"
#define RECORD_FILE "run-base"

/* 0 when path is a directory (not a link) owned by us; with private, also
 * of mode 0700 (a directory of ours of another mode is made 0700). */
static int owned_dir(const char *path, bool fix_mode)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return -errno;
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return -EPERM;
    if ((st.st_mode & 0777) != 0700 && (!fix_mode || chmod(path, 0700) != 0))
        return -EPERM;
    return 0;
}

static int tmp_path(char *out, size_t len, const char *suffix)
{
    const char *tmp = getenv("TMPDIR");
    int n = snprintf(out, len, "%s/sluice-%lu%s", tmp && tmp[0] == '/' ? tmp : "/tmp", (unsigned long)geteuid(),
                     suffix);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The record's path ($HOME/.cache/sluice/run-base); -ENOENT without HOME. */
static int record_path(char *out, size_t len)
{
    const char *home = getenv("HOME");
    if (!home || home[0] != '/')
        return -ENOENT;
    int n = snprintf(out, len, "%s/" RECORD_DIR "/" RECORD_FILE, home);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* The recorded base, when it is still a private directory of ours. */
static int recorded_base(char *out, size_t len)
{
    char rec[PATH_MAX], *text = NULL;
    size_t n = 0;
    if (record_path(rec, sizeof rec) != 0 || sl_read_file(rec, PATH_MAX, &text, &n, NULL, 0) != 0)
        return -ENOENT;
    text[strcspn(text, "\n")] = '\0';
    int rc = text[0] == '/' && strlen(text) < len && owned_dir(text, false) == 0 ? 0 : -ENOENT;
    if (rc == 0)
        snprintf(out, len, "%s", text);
    free(text);
    return rc;
}

/* Records base for later launches and gnnstat (temp file + rename). */
static int record_base(const char *base)
{
    char rec[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX + 32];
    if (record_path(rec, sizeof rec) != 0)
        return -ENOENT;
    snprintf(dir, sizeof dir, "%s", rec);
    *strrchr(dir, '/') = '\0';
    *strrchr(dir, '/') = '\0'; /* $HOME/.cache */
    mkdir(dir, 0700);
    snprintf(dir, sizeof dir, "%s", rec);
    *strrchr(dir, '/') = '\0'; /* $HOME/.cache/sluice */
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return -errno;
    snprintf(tmp, sizeof tmp, "%s.partial-%ld", rec, (long)getpid());
    FILE *f = sl_fopen_write(tmp, 0600);
    if (!f)
        return -errno;
    fprintf(f, "%s\n", base);
    if (fclose(f) != 0 || rename(tmp, rec) != 0) {
        int rc = -errno;
        unlink(tmp);
        return rc;
    }
    return 0;
}

int rundir_base_find(char *out, size_t len, char *err, size_t errlen)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n = 0;
    if (xdg && xdg[0] == '/')
        n = snprintf(out, len, "%s/sluice", xdg);
    else if (recorded_base(out, len) == 0)
        return 0;
    else
        n = tmp_path(out, len, "") ? -1 : 0;
    if (n < 0 || (size_t)n >= len)
        return sl_errf(err, errlen, -ENAMETOOLONG, "XDG_RUNTIME_DIR or TMPDIR is too long; set a shorter one");
    int rc = owned_dir(out, false);
    if (rc == -ENOENT)
        return sl_errf(err, errlen, rc, "cannot open the run directory base %s: %s", out, strerror(-rc));
    if (rc)
        return sl_errf(err, errlen, -EPERM,
                       "%s is not a private directory owned by you (uid %lu); remove it or set "
                       "XDG_RUNTIME_DIR to a private directory",
                       out, (unsigned long)geteuid());
    return 0;
}

int rundir_base(char *out, size_t len, char *err, size_t errlen)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && xdg[0] == '/') {
        int n = snprintf(out, len, "%s/sluice", xdg);
        if (n < 0 || (size_t)n >= len)
            return sl_errf(err, errlen, -ENAMETOOLONG, "XDG_RUNTIME_DIR is too long; set it to a shorter directory");
        if (mkdir(out, 0700) != 0 && errno != EEXIST)
            return sl_errf(err, errlen, -errno,
                           "cannot create the run directory base %s: %s; set XDG_RUNTIME_DIR to a writable directory",
                           out, strerror(errno));
        if (owned_dir(out, true) != 0)
            return sl_errf(err, errlen, -EPERM,
                           "%s is not a private directory owned by you (uid %lu); remove it or set "
                           "XDG_RUNTIME_DIR to a private directory",
                           out, (unsigned long)geteuid());
        return 0;
    }
    if (recorded_base(out, len) == 0)
        return 0;
    if (tmp_path(out, len, "") != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "TMPDIR is too long; set a shorter one");
    if ((mkdir(out, 0700) == 0 || errno == EEXIST) && owned_dir(out, true) == 0)
        return 0;
    /* taken by someone else (or not a directory): a private one of our own */
    char taken[PATH_MAX];
    snprintf(taken, sizeof taken, "%s", out);
    if (tmp_path(out, len, "-XXXXXX") != 0 || !mkdtemp(out))
        return sl_errf(err, errlen, -errno,
                       "%s is not a private directory of yours and no other could be made (%s); set "
                       "XDG_RUNTIME_DIR to a private directory",
                       taken, strerror(errno));
    int rc = record_base(out);
    fprintf(stderr,
            "gnnlaunch: note: %s is not a private directory of yours (another user may have made it); run "
            "directories go to %s instead%s\n",
            taken, out,
            rc == 0 ? " (recorded in $HOME/" RECORD_DIR "/" RECORD_FILE " for gnnstat and later runs)"
                    : "; it could not be recorded (no writable $HOME), so gnnstat will not find it: set "
                      "XDG_RUNTIME_DIR");
    return 0;
}

int rundir_name_check(const char *name, char *err, size_t errlen)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n >= RUNDIR_NAME_MAX)
        return sl_errf(err, errlen, -EINVAL, "--run-name must have 1 to %d characters", RUNDIR_NAME_MAX - 1);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '-' && name[i] != '_')
            return sl_errf(err, errlen, -EINVAL,
                           "--run-name '%s' has character '%c'; use only letters, digits, "
                           "'-' and '_'",
                           name, name[i]);
    return 0;
}

/* ---- state ---------------------------------------------------------------------- */

/* Writes s as a TOML basic string (quotes included). */
static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void put_key(FILE *f, const char *key, const char *val)
{
    if (!val)
        return;
    fprintf(f, "%s = ", key);
    put_string(f, val);
    fputc('\n', f);
}

static int write_state(const char *dir, const char *final, const struct rundir_state *st, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (sl_path_join(path, sizeof path, dir, RUNDIR_STATE) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "run directory path too long");
    FILE *f = sl_fopen_write(path, 0600); /* private, like the directory, whatever the umask */
    if (!f) {
        int rc = -errno;
        return sl_errf(err, errlen, rc, "cannot write %s: %s", path, strerror(-rc));
    }
    char sock[PATH_MAX + 16];
    fprintf(f, "# gnnlaunch run state; removed when the run ends (docs/architecture.md)\n");
    put_key(f, "run_id", st->run_id);
    put_key(f, "name", st->name);
    fprintf(f, "pid = %ld\npid_start = %" PRIu64 "\nranks = %d\nresume = %s\n", (long)st->pid, st->pid_start, st->ranks,
            st->resume ? "true" : "false");
    put_key(f, "config", st->config_path);
    snprintf(sock, sizeof sock, "%s/" RUNDIR_CONFIG, final);
    put_key(f, "effective_config", sock);
    snprintf(sock, sizeof sock, "ipc://%s/" RUNDIR_CONTROL, final);
    put_key(f, "control", sock);
    snprintf(sock, sizeof sock, "ipc://%s/" RUNDIR_METRICS, final);
    put_key(f, "publish", sock);
    put_key(f, "metrics_file", st->metrics_file);
    put_key(f, "trace_file", st->trace_file);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
        return sl_errf(err, errlen, -EIO, "cannot write %s", path);
    return 0;
}

static int write_config(const char *dir, const struct config *c, char *err, size_t errlen)
{
    char path[PATH_MAX];
    if (sl_path_join(path, sizeof path, dir, RUNDIR_CONFIG) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "run directory path too long");
    FILE *f = sl_fopen_write(path, 0600); /* private, like the directory, whatever the umask */
    if (!f) {
        int rc = -errno;
        return sl_errf(err, errlen, rc, "cannot write %s: %s", path, strerror(-rc));
    }
    fprintf(f, "# effective configuration of this run (config file + --set), written by gnnlaunch\n");
    config_write_toml(c, f);
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
        return sl_errf(err, errlen, -EIO, "cannot write %s", path);
    return 0;
}

int rundir_read_owner(const char *dir, pid_t *pid, uint64_t *start)
{
    char path[PATH_MAX];
    if (sl_path_join(path, sizeof path, dir, RUNDIR_STATE) < 0)
        return -ENAMETOOLONG;
    if (access(path, F_OK) != 0)
        return -ENOENT;
    struct toml_value *root = toml_parse_file(path, NULL, 0);
    if (!root)
        return -EINVAL;
    const struct toml_value *p = toml_get(root, "pid"), *s = toml_get(root, "pid_start");
    int rc = -EINVAL;
    if (p && p->type == TOML_INT && p->u.i > 0 && p->u.i <= INT32_MAX && s && s->type == TOML_INT && s->u.i >= 0) {
        *pid = (pid_t)p->u.i;
        *start = (uint64_t)s->u.i;
        rc = 0;
    }
    toml_free(root);
    return rc;
}

/* Copies the string key of root into out ("" when absent or not a
 * string); false when it does not fit. */
static bool get_string(const struct toml_value *root, const char *key, char *out, size_t len)
{
    const struct toml_value *v = toml_get(root, key);
    out[0] = '\0';
    if (!v || v->type != TOML_STRING)
        return true;
    int n = snprintf(out, len, "%s", v->u.s);
    return n >= 0 && (size_t)n < len;
}

int rundir_read_info(const char *dir, struct rundir_info *info, char *err, size_t errlen)
{
    memset(info, 0, sizeof *info);
    char path[PATH_MAX];
    if (snprintf(info->path, sizeof info->path, "%s", dir) >= (int)sizeof info->path ||
        sl_path_join(path, sizeof path, dir, RUNDIR_STATE) < 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "run directory path too long: %s", dir);
    struct stat st;
    if (stat(path, &st) != 0) {
        int rc = -errno;
        return sl_errf(err, errlen, rc == -ENOTDIR ? -ENOENT : rc, "%s: %s; it is no run directory of gnnlaunch",
                       path, strerror(-rc));
    }
    info->started = st.st_mtime;
    char msg[256];
    struct toml_value *root = toml_parse_file(path, msg, sizeof msg);
    if (!root)
        return sl_errf(err, errlen, -EINVAL, "cannot read %s: %s", path, msg);
    const struct toml_value *p = toml_get(root, "pid"), *s = toml_get(root, "pid_start"), *r = toml_get(root, "ranks");
    int rc = 0;
    if (!p || p->type != TOML_INT || p->u.i <= 0 || p->u.i > INT32_MAX || !s || s->type != TOML_INT || s->u.i < 0) {
        rc = sl_errf(err, errlen, -EINVAL, "%s has no valid pid and pid_start", path);
        goto out;
    }
    info->pid = (pid_t)p->u.i;
    info->pid_start = (uint64_t)s->u.i;
    info->ranks = r && r->type == TOML_INT && r->u.i > 0 && r->u.i <= INT32_MAX ? (int)r->u.i : 0;
    if (!get_string(root, "run_id", info->run_id, sizeof info->run_id) ||
        !get_string(root, "name", info->name, sizeof info->name) ||
        !get_string(root, "config", info->config, sizeof info->config) ||
        !get_string(root, "control", info->control, sizeof info->control) ||
        !get_string(root, "publish", info->publish, sizeof info->publish) || !info->run_id[0] || !info->control[0]) {
        rc = sl_errf(err, errlen, -EINVAL, "%s lacks run_id or control, or holds an over-long value", path);
        goto out;
    }
    if (!info->name[0])
        snprintf(info->name, sizeof info->name, "%s", info->run_id);
    info->alive = shm_pid_alive(info->pid, info->pid_start);
out:
    toml_free(root);
    return rc;
}

int rundir_list(const char *base, struct rundir_info *out, int max)
{
    DIR *d = opendir(base);
    if (!d)
        return -errno;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || rundir_name_check(e->d_name, NULL, 0) != 0)
            continue; /* ., .., .new-<run-id> being made, and what is not ours */
        char path[PATH_MAX];
        struct rundir_info info;
        if (sl_path_join(path, sizeof path, base, e->d_name) != 0 || rundir_read_info(path, &info, NULL, 0) != 0)
            continue;
        if (n < max)
            out[n] = info;
        n++;
    }
    closedir(d);
    return n;
}

/* ---- reclaim -------------------------------------------------------------------- */

/* Is the directory base/entry left by a launcher that is gone? */
static bool entry_is_stale(const char *base, const char *entry)
{
    char path[PATH_MAX];
    if (sl_path_join(path, sizeof path, base, entry) < 0)
        return false;
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return false;
    pid_t pid;
    uint64_t start;
    if (!strncmp(entry, NEW_PREFIX, strlen(NEW_PREFIX))) {
        /* .new-<run-id>: the run id starts with the launcher's pid */
        char *end;
        long v = strtol(entry + strlen(NEW_PREFIX), &end, 10);
        if (v <= 0 || v > INT32_MAX || *end != '-')
            return false;
        return !shm_pid_alive((pid_t)v, 0);
    }
    if (rundir_name_check(entry, NULL, 0) != 0 || rundir_read_owner(path, &pid, &start) != 0)
        return false; /* not ours, or cannot tell: leave it */
    return !shm_pid_alive(pid, start);
}

/* Holds <base>/.lock exclusively while a launcher decides that a run
 * directory is dead and removes or replaces it: deciding and removing are
 * two steps, and without the lock a second launcher that decided the same
 * a moment earlier could remove the directory the first had just put in
 * its place. The fd (close drops the lock), or -1 when the lock file
 * cannot be made (the steps then run unlocked, as before). */
static int base_lock(const char *base)
{
    char path[PATH_MAX];
    if (sl_path_join(path, sizeof path, base, ".lock") != 0)
        return -1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return -1;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    return fd;
}

static void base_unlock(int fd)
{
    if (fd >= 0)
        close(fd);
}

int rundir_reclaim(const char *base)
{
    int lk = base_lock(base);
    DIR *d = opendir(base);
    if (!d) {
        int rc = -errno;
        base_unlock(lk);
        return rc;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !entry_is_stale(base, e->d_name))
            continue;
        char path[PATH_MAX];
        if (sl_path_join(path, sizeof path, base, e->d_name) == 0 && sl_rmtree(path) == 0)
            n++;
    }
    closedir(d);
    base_unlock(lk);
    return n;
}

/* ---- create / remove -------------------------------------------------------------- */

int rundir_create(struct rundir *d, const char *base, const char *name, const struct rundir_state *st,
                  const struct config *c, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    snprintf(d->base, sizeof d->base, "%s", base);
    snprintf(d->name, sizeof d->name, "%s", name);
    int n = snprintf(d->path, sizeof d->path, "%s/%s", base, name);
    if (n < 0 || (size_t)n + 1 + strlen(RUNDIR_CONTROL) > RUNDIR_SOCKET_MAX)
        return sl_errf(err, errlen, -ENAMETOOLONG,
                       "run directory %s/%s is too long for a socket path (%d bytes "
                       "at most); set XDG_RUNTIME_DIR to a shorter directory or use a shorter --run-name",
                       base, name, RUNDIR_SOCKET_MAX - 1 - (int)strlen(RUNDIR_CONTROL));
    char tmp[PATH_MAX];
    int lk = -1; /* the base's lock, while the name is taken over */
    n = snprintf(tmp, sizeof tmp, "%s/" NEW_PREFIX "%s", base, st->run_id);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return sl_errf(err, errlen, -ENAMETOOLONG, "run directory path too long");
    int rc;
    if (mkdir(tmp, 0700) != 0) {
        rc = -errno;
        return sl_errf(err, errlen, rc, "cannot create %s: %s", tmp, strerror(-rc));
    }
    if (chmod(tmp, 0700) != 0) {
        rc = -errno;
        sl_errf(err, errlen, rc, "cannot chmod 0700 %s: %s", tmp, strerror(-rc));
        goto err;
    }
    if ((rc = write_state(tmp, d->path, st, err, errlen)) != 0 || (rc = write_config(tmp, c, err, errlen)) != 0)
        goto err;
    /* rename() replaces an empty directory and fails on a full one: a run
     * directory with its name in place is always complete. Under the
     * base's lock: a dead run's directory is judged and replaced in one
     * step for all launchers. */
    lk = base_lock(base);
    for (int attempt = 0;; attempt++) {
        if (rename(tmp, d->path) == 0)
            break;
        rc = -errno;
        if ((rc != -ENOTEMPTY && rc != -EEXIST) || attempt >= 2) {
            sl_errf(err, errlen, rc, "cannot create run directory %s: %s", d->path, strerror(-rc));
            goto err;
        }
        pid_t pid;
        uint64_t start;
        int orc = rundir_read_owner(d->path, &pid, &start);
        if (orc == 0 && shm_pid_alive(pid, start)) {
            rc = sl_errf(err, errlen, -EBUSY,
                         "run name '%s' is in use by a running gnnlaunch (pid %ld, %s); "
                         "stop it or choose another --run-name",
                         name, (long)pid, d->path);
            goto err;
        }
        if (orc != 0) {
            rc = sl_errf(err, errlen, -EEXIST,
                         "%s exists but has no readable %s, so it is no run directory of "
                         "gnnlaunch; remove it or choose another --run-name",
                         d->path, RUNDIR_STATE);
            goto err;
        }
        sl_rmtree(d->path); /* a dead run's directory: take the name over */
    }
    base_unlock(lk);
    d->created = true;
    return 0;

err:
    base_unlock(lk);
    sl_rmtree(tmp);
    return rc;
}

int rundir_file(const struct rundir *d, const char *file, char *out, size_t len)
{
    return sl_path_join(out, len, d->path, file);
}

void rundir_remove(struct rundir *d)
{
    if (!d || !d->created)
        return;
    sl_rmtree(d->path);
    d->created = false;
}
