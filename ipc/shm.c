/* shm.c - named shared-memory segments: create, attach, detach, unlink,
 * and reclaim of stale runs. The naming, layout and creation protocol are
 * described in shm.h. */
#include "ipc/shm.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"

_Static_assert(sizeof(struct shm_header) <= SHM_DATA_OFFSET, "header must fit before the payload");
_Static_assert(SHM_KIND_MAX_ < 256, "kinds fit a byte");

/* ---- names ----------------------------------------------------------------- */

static bool run_id_char(int c)
{
    return isalnum(c) || c == '-' || c == '_';
}
static bool object_char(int c)
{
    return run_id_char(c) || c == '.';
}

int shm_run_id_check(const char *run_id, char *err, size_t errlen)
{
    if (!run_id || !*run_id)
        return sl_errf(err, errlen, -EINVAL, "empty run id; use shm_run_id_new() or a name of [A-Za-z0-9_-]");
    size_t n = strlen(run_id);
    if (n >= SHM_RUN_ID_MAX)
        return sl_errf(err, errlen, -EINVAL, "run id '%.60s' is %zu characters long; the limit is %d", run_id, n,
                       SHM_RUN_ID_MAX - 1);
    for (size_t i = 0; i < n; i++)
        if (!run_id_char((unsigned char)run_id[i]))
            return sl_errf(err, errlen, -EINVAL,
                           "run id '%s' has character '%c' at %zu; use only letters, digits, '-' and '_'", run_id,
                           run_id[i], i);
    return 0;
}

int shm_object_check(const char *object, char *err, size_t errlen)
{
    if (!object || !*object)
        return sl_errf(err, errlen, -EINVAL, "empty shared-memory object name");
    size_t n = strlen(object);
    if (n >= SHM_OBJECT_MAX)
        return sl_errf(err, errlen, -EINVAL, "object name '%.70s' is %zu characters long; the limit is %d", object, n,
                       SHM_OBJECT_MAX - 1);
    for (size_t i = 0; i < n; i++)
        if (!object_char((unsigned char)object[i]))
            return sl_errf(err, errlen, -EINVAL,
                           "object name '%s' has character '%c' at %zu; use only letters, digits, '-', '_' and '.'",
                           object, object[i], i);
    return 0;
}

int shm_prefix(char out[SHM_PREFIX_MAX], char *err, size_t errlen)
{
    snprintf(out, SHM_PREFIX_MAX, "%s", SHM_PREFIX);
    const char *ns = getenv(SHM_NAMESPACE_ENV);
    if (!ns || !*ns)
        return 0;
    size_t n = strlen(ns);
    if (n > SHM_NAMESPACE_MAX)
        return sl_errf(err, errlen, -EINVAL, "%s '%.40s' is %zu characters long; the limit is %d", SHM_NAMESPACE_ENV,
                       ns, n, SHM_NAMESPACE_MAX);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)ns[i]) && ns[i] != '_')
            return sl_errf(err, errlen, -EINVAL,
                           "%s '%s' has character '%c' at %zu; use only letters, digits and '_' (or unset it "
                           "for the default namespace)",
                           SHM_NAMESPACE_ENV, ns, ns[i], i);
    snprintf(out, SHM_PREFIX_MAX, "sluice-%s.", ns);
    return 0;
}

int shm_name(char *out, size_t len, const char *run_id, const char *object, char *err, size_t errlen)
{
    char prefix[SHM_PREFIX_MAX];
    int rc = shm_prefix(prefix, err, errlen);
    if (rc == 0)
        rc = shm_run_id_check(run_id, err, errlen);
    if (rc == 0)
        rc = shm_object_check(object, err, errlen);
    if (rc)
        return rc;
    int n = snprintf(out, len, "/%s%s.%s", prefix, run_id, object);
    if (n < 0 || (size_t)n >= len)
        return sl_errf(err, errlen, -ENAMETOOLONG, "segment name for run '%s' object '%s' does not fit %zu bytes",
                       run_id, object, len);
    return 0;
}

/* Splits a /dev/shm file name "<prefix><run>.<object>" into its run id
 * (copied into run, which has SHM_RUN_ID_MAX bytes); false if it is not one
 * of ours (another namespace's included: a prefix ends in the only dot
 * before the run id). */
static bool parse_file_name(const char *file, const char *prefix, char *run)
{
    size_t plen = strlen(prefix);
    if (strncmp(file, prefix, plen) != 0)
        return false;
    const char *r = file + plen;
    const char *dot = strchr(r, '.');
    if (!dot || dot == r || (size_t)(dot - r) >= SHM_RUN_ID_MAX || !dot[1])
        return false;
    memcpy(run, r, (size_t)(dot - r));
    run[dot - r] = '\0';
    return shm_run_id_check(run, NULL, 0) == 0 && shm_object_check(dot + 1, NULL, 0) == 0;
}

/* "/" + a /dev/shm file name into out; false if it does not fit. */
static bool file_to_name(char *out, size_t len, const char *file)
{
    size_t n = strlen(file);
    if (n + 2 > len)
        return false;
    out[0] = '/';
    memcpy(out + 1, file, n + 1);
    return true;
}

/* ---- processes --------------------------------------------------------------- */

/* Reads a process's state letter and start time (clock ticks after boot)
 * from /proc/PID/stat: 0 or -errno (-ENOENT: no such process). */
static int proc_stat(pid_t pid, char *state, uint64_t *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return e == ESRCH ? -ENOENT : -e;
    buf[n] = '\0';
    /* "pid (comm) state ppid ..." - comm may hold spaces and parentheses,
     * so fields are counted from the last ')'. state is field 3, starttime
     * field 22. */
    char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || !p[2])
        return -EINVAL;
    *state = p[2];
    p++;
    for (int field = 3; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (!p)
            return -EINVAL;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(p + 1, &end, 10);
    if (errno || end == p + 1)
        return -EINVAL;
    *start = v;
    return 0;
}

int shm_pid_start_time(pid_t pid, uint64_t *out)
{
    char state;
    return proc_stat(pid, &state, out);
}

bool shm_pid_alive(pid_t pid, uint64_t start)
{
    if (pid <= 0)
        return false;
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    char state;
    uint64_t now_start;
    int rc = proc_stat(pid, &state, &now_start);
    if (rc == -ENOENT)
        return false;
    if (rc)
        return true; /* cannot tell: assume alive, never remove a live run's segments */
    if (state == 'Z' || state == 'X')
        return false; /* exited, not yet reaped by its parent */
    return start == 0 || now_start == start;
}

/* ---- run ids ------------------------------------------------------------------- */

int shm_run_id_new(char *out, size_t len)
{
    if (len < SHM_RUN_ID_MAX)
        return -ENAMETOOLONG;
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        rnd = (uint32_t)ts.tv_nsec ^ (uint32_t)((uint64_t)ts.tv_sec * 2654435761u) ^ (uint32_t)getpid() << 16;
    }
    snprintf(out, len, "%ld-%08" PRIx32 "-%08" PRIx32, (long)getpid(), (uint32_t)time(NULL), rnd);
    return 0;
}

/* ---- huge pages ---------------------------------------------------------------- */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif

/* Maps size bytes of fd from offset 0 shared, at an address that is a
 * multiple of SHM_HUGE_BYTES when the mapping is at least that large: a
 * reservation one huge page larger, the file mapped over it at the first
 * aligned address, the slack on both sides returned. Then virtual and
 * file offsets agree modulo a huge page, which the kernel needs to map a
 * huge page of the file with one page-table entry (shm_huge). */
static void *map_aligned(size_t size, int prot, int fd)
{
    if (size < SHM_HUGE_BYTES)
        return mmap(NULL, size, prot, MAP_SHARED, fd, 0);
    size_t span = size + SHM_HUGE_BYTES;
    unsigned char *res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED)
        return MAP_FAILED;
    unsigned char *at = (unsigned char *)sl_round_up((uintptr_t)res, SHM_HUGE_BYTES);
    void *base = mmap(at, size, prot, MAP_SHARED | MAP_FIXED, fd, 0);
    if (base == MAP_FAILED) {
        int e = errno;
        munmap(res, span);
        errno = e;
        return MAP_FAILED;
    }
    size_t end = sl_round_up(size, (size_t)sysconf(_SC_PAGESIZE));
    if (at > res)
        munmap(res, (size_t)(at - res));
    if (at + end < res + span)
        munmap(at + end, (size_t)(res + span - (at + end)));
    return base;
}

int shm_huge(void *addr, size_t len, size_t *huge_bytes)
{
    uintptr_t lo = sl_round_up((uintptr_t)addr, SHM_HUGE_BYTES);
    uintptr_t hi = ((uintptr_t)addr + len) & ~(uintptr_t)(SHM_HUGE_BYTES - 1);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (huge_bytes)
        *huge_bytes = 0;
    if (lo >= hi)
        return 0;
    /* one small page present in each huge page (its bytes untouched): a
     * range with no page at all is refused; the collapse fills the rest
     * with zeros and copies what is there */
    for (uintptr_t p = lo; p < hi; p += SHM_HUGE_BYTES)
        if (madvise((void *)p, page, MADV_POPULATE_WRITE) != 0)
            return -errno;
    /* one call for the whole range: each call first drains every CPU's
     * page lists and waits for it, which costs milliseconds on a busy
     * machine */
    int rc = madvise((void *)lo, (size_t)(hi - lo), MADV_COLLAPSE) != 0 ? -errno : 0;
    if (huge_bytes && !rc)
        *huge_bytes = (size_t)(hi - lo);
    return rc;
}

/* ---- create / attach ----------------------------------------------------------- */

int shm_seg_create(struct shm_seg *seg, const char *run_id, const char *object, enum shm_kind kind, size_t data_size,
                   char *err, size_t errlen)
{
    memset(seg, 0, sizeof *seg);
    int rc = shm_name(seg->name, sizeof seg->name, run_id, object, err, errlen);
    if (rc)
        return rc;
    if (kind <= SHM_KIND_ANY || kind >= SHM_KIND_MAX_)
        return sl_errf(err, errlen, -EINVAL, "%s: invalid segment kind %d", seg->name, (int)kind);
    uint64_t total;
    if (sl_add_ovf(SHM_DATA_OFFSET, data_size, &total) || total > (uint64_t)INT64_MAX || total > (uint64_t)SIZE_MAX)
        return sl_errf(err, errlen, -EINVAL, "%s: payload of %zu bytes is too large", seg->name, data_size);

    int fd = shm_open(seg->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        rc = -errno;
        if (rc == -EEXIST)
            return sl_errf(err, errlen, rc,
                           "%s already exists; another run uses this id, or a dead run left it: "
                           "remove " SHM_DIR "%s if no Sluice run is active",
                           seg->name, seg->name);
        return sl_errf(err, errlen, rc, "cannot create %s: %s; check that " SHM_DIR " is mounted and writable",
                       seg->name, strerror(-rc));
    }
    void *base = MAP_FAILED;
    if (ftruncate(fd, (off_t)total) != 0) {
        rc = -errno;
        sl_errf(err, errlen, rc, "cannot size %s to %" PRIu64 " bytes: %s; %s", seg->name, total, strerror(-rc),
                rc == -EFBIG ? "the process's file size limit (ulimit -f) is below it: raise it"
                             : "free memory in " SHM_DIR " or ask for less");
        goto err;
    }
    base = map_aligned((size_t)total, PROT_READ | PROT_WRITE, fd);
    if (base == MAP_FAILED) {
        rc = -errno;
        sl_errf(err, errlen, rc, "cannot map %s (%" PRIu64 " bytes): %s", seg->name, total, strerror(-rc));
        goto err;
    }
    close(fd);
    fd = -1;

    struct shm_header *h = base;
    h->version = SHM_VERSION;
    h->kind = (uint32_t)kind;
    h->total_size = total;
    h->data_offset = SHM_DATA_OFFSET;
    h->data_size = data_size;
    h->creator_pid = (int32_t)getpid();
    uint64_t start = 0;
    if (shm_pid_start_time(getpid(), &start) == 0)
        h->creator_start = start;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    h->created_unix_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    snprintf(h->run_id, sizeof h->run_id, "%s", run_id);
    snprintf(h->object, sizeof h->object, "%s", object);
    atomic_store_explicit(&h->magic, SHM_MAGIC, memory_order_release);

    seg->hdr = h;
    seg->size = (size_t)total;
    seg->data = (char *)base + SHM_DATA_OFFSET;
    seg->data_size = data_size;
    return 0;

err:
    if (fd >= 0)
        close(fd);
    shm_unlink(seg->name);
    memset(seg, 0, sizeof *seg);
    return rc;
}

static const char *kind_name(uint32_t kind)
{
    static const char *names[] = {"any", "raw", "ring", "metrics", "arena", "all-reduce", "feature buffer", "results page",
                                  "staging buffer"};
    return kind < SL_ARRAY_LEN(names) ? names[kind] : "unknown";
}

/* Checks a mapped header against the file size and what the caller wants. */
static int check_header(const struct shm_header *h, const char *name, size_t file_size, enum shm_kind kind, char *err,
                        size_t errlen)
{
    uint64_t magic = atomic_load_explicit(&h->magic, memory_order_acquire);
    if (magic == 0)
        return sl_errf(err, errlen, -EAGAIN,
                       "%s has no header yet: it is still being created, or its creator died while creating "
                       "it; retry, or remove " SHM_DIR "%s if no Sluice run is active",
                       name, name);
    if (magic != SHM_MAGIC)
        return sl_errf(err, errlen, -EINVAL,
                       "%s is not a Sluice segment (magic %#" PRIx64 "); remove " SHM_DIR "%s if no Sluice run "
                       "is active",
                       name, magic, name);
    if (h->version != SHM_VERSION)
        return sl_errf(err, errlen, -EINVAL,
                       "%s has segment format version %" PRIu32 ", this build reads version %u: it belongs to "
                       "another Sluice build; stop that run or remove " SHM_DIR "%s",
                       name, h->version, SHM_VERSION, name);
    if (h->data_offset != SHM_DATA_OFFSET || h->total_size != file_size ||
        h->data_size > h->total_size - SHM_DATA_OFFSET)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: header says %" PRIu64 " bytes (payload %" PRIu64 " at %" PRIu64
                       ") but the segment has %zu; it was resized or damaged, remove " SHM_DIR "%s and "
                       "restart the run",
                       name, h->total_size, h->data_size, h->data_offset, file_size, name);
    if (kind != SHM_KIND_ANY && h->kind != (uint32_t)kind)
        return sl_errf(err, errlen, -EINVAL, "%s holds a %s, not a %s; check the object name", name, kind_name(h->kind),
                       kind_name((uint32_t)kind));
    char expect[SHM_NAME_MAX];
    if (memchr(h->run_id, 0, sizeof h->run_id) == NULL || memchr(h->object, 0, sizeof h->object) == NULL ||
        shm_name(expect, sizeof expect, h->run_id, h->object, NULL, 0) != 0 || strcmp(expect, name) != 0)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: header names another segment; it was renamed or damaged, remove " SHM_DIR "%s", name, name);
    return 0;
}

int shm_seg_attach(struct shm_seg *seg, const char *name, enum shm_kind kind, unsigned flags, char *err, size_t errlen)
{
    memset(seg, 0, sizeof *seg);
    if (!name || name[0] != '/' || strlen(name) >= sizeof seg->name)
        return sl_errf(err, errlen, -EINVAL, "'%s' is not a segment name (/sluice.<run>.<object>)",
                       name ? name : "(null)");
    snprintf(seg->name, sizeof seg->name, "%s", name);
    bool ro = flags & SHM_RDONLY;
    int rc;
    int fd = shm_open(name, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC, 0);
    if (fd < 0) {
        rc = -errno;
        if (rc == -ENOENT)
            return sl_errf(err, errlen, rc,
                           "%s does not exist: the launcher has not created it or has already removed it; "
                           "start stages through gnnlaunch",
                           name);
        return sl_errf(err, errlen, rc, "cannot open %s: %s", name, strerror(-rc));
    }
    void *base = MAP_FAILED;
    size_t size = 0;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        sl_errf(err, errlen, rc, "cannot stat %s: %s", name, strerror(-rc));
        goto err;
    }
    if (st.st_uid != geteuid()) {
        /* /dev/shm is world-writable: a segment of ours is always our own
         * file (created 0600 with O_EXCL), so another owner means someone
         * else put it under our name */
        rc = -EPERM;
        sl_errf(err, errlen, rc,
                "%s belongs to uid %lu, not to you (uid %lu): it is no segment of your runs; ask its owner "
                "to remove " SHM_DIR "%s",
                name, (unsigned long)st.st_uid, (unsigned long)geteuid(), name);
        goto err;
    }
    if (st.st_size < (off_t)SHM_DATA_OFFSET) {
        rc = st.st_size == 0 ? -EAGAIN : -EINVAL;
        sl_errf(err, errlen, rc,
                "%s is %lld bytes, smaller than a segment header: it is still being created or is not a "
                "Sluice segment; retry, or remove " SHM_DIR "%s if no Sluice run is active",
                name, (long long)st.st_size, name);
        goto err;
    }
    size = (size_t)st.st_size;
    base = map_aligned(size, ro ? PROT_READ : PROT_READ | PROT_WRITE, fd);
    if (base == MAP_FAILED) {
        rc = -errno;
        sl_errf(err, errlen, rc, "cannot map %s (%zu bytes): %s", name, size, strerror(-rc));
        goto err;
    }
    close(fd);
    fd = -1;
    rc = check_header(base, name, size, kind, err, errlen);
    if (rc)
        goto err;
    seg->hdr = base;
    seg->size = size;
    seg->data = (char *)base + SHM_DATA_OFFSET;
    seg->data_size = (size_t)seg->hdr->data_size;
    seg->readonly = ro;
    return 0;

err:
    if (base != MAP_FAILED)
        munmap(base, size);
    if (fd >= 0)
        close(fd);
    memset(seg, 0, sizeof *seg);
    return rc;
}

void shm_seg_detach(struct shm_seg *seg)
{
    if (!seg)
        return;
    if (seg->hdr)
        munmap(seg->hdr, seg->size);
    memset(seg, 0, sizeof *seg);
}

int shm_seg_unlink(const char *name)
{
    if (!name || name[0] != '/')
        return -EINVAL;
    return shm_unlink(name) == 0 ? 0 : -errno;
}

/* ---- run-wide operations ------------------------------------------------------- */

int shm_run_unlink(const char *run_id)
{
    char prefix[SHM_PREFIX_MAX];
    if (shm_run_id_check(run_id, NULL, 0) != 0 || shm_prefix(prefix, NULL, 0) != 0)
        return -EINVAL;
    DIR *d = opendir(SHM_DIR);
    if (!d)
        return -errno;
    int n = 0;
    char run[SHM_RUN_ID_MAX], name[SHM_NAME_MAX];
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!parse_file_name(de->d_name, prefix, run) || strcmp(run, run_id) != 0)
            continue;
        if (!file_to_name(name, sizeof name, de->d_name))
            continue;
        if (shm_unlink(name) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* Who created the segment behind an open fd: from its header, else from the
 * pid that starts its run id. false when it cannot be told. */
static bool segment_creator(int fd, const char *run, pid_t *pid, uint64_t *start)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_uid != geteuid())
        return false;
    if (st.st_size >= (off_t)SHM_DATA_OFFSET) {
        const struct shm_header *h = mmap(NULL, SHM_DATA_OFFSET, PROT_READ, MAP_SHARED, fd, 0);
        if (h != MAP_FAILED) {
            bool ok = atomic_load_explicit(&h->magic, memory_order_acquire) == SHM_MAGIC && h->creator_pid > 0;
            if (ok) {
                *pid = h->creator_pid;
                *start = h->creator_start;
            }
            munmap((void *)h, SHM_DATA_OFFSET);
            if (ok)
                return true;
        }
    }
    /* No usable header: the run id's leading pid (shm_run_id_new format). */
    char *end;
    errno = 0;
    long v = strtol(run, &end, 10);
    if (errno || end == run || *end != '-' || v <= 0 || v > INT32_MAX)
        return false;
    *pid = (pid_t)v;
    *start = 0;
    return true;
}

int shm_run_reclaim(const char *run_id, shm_reclaim_fn fn, void *arg, char *err, size_t errlen)
{
    char prefix[SHM_PREFIX_MAX];
    if ((run_id && shm_run_id_check(run_id, err, errlen) != 0) || shm_prefix(prefix, err, errlen) != 0)
        return -EINVAL;
    DIR *d = opendir(SHM_DIR);
    if (!d) {
        int rc = -errno;
        return sl_errf(err, errlen, rc, "cannot list " SHM_DIR ": %s; is it mounted?", strerror(-rc));
    }
    int n = 0;
    char run[SHM_RUN_ID_MAX], name[SHM_NAME_MAX];
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!parse_file_name(de->d_name, prefix, run) || (run_id && strcmp(run, run_id) != 0))
            continue;
        if (!file_to_name(name, sizeof name, de->d_name))
            continue;
        int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
        if (fd < 0)
            continue; /* removed meanwhile, or not ours to read */
        pid_t pid = 0;
        uint64_t start = 0;
        bool known = segment_creator(fd, run, &pid, &start);
        close(fd);
        if (!known || shm_pid_alive(pid, start))
            continue;
        if (shm_unlink(name) == 0) {
            n++;
            if (fn)
                fn(name, pid, arg);
        }
    }
    closedir(d);
    return n;
}
