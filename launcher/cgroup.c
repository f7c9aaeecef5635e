/* cgroup.c - finding the launcher's memory cgroup, its limit, usage and
 * OOM count (the rules are in cgroup.h). */
#include "launcher/cgroup.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"

#define V1_UNLIMITED ((uint64_t)1 << 62) /* v1 reports "no limit" as PAGE_COUNTER_MAX pages, about 2^63 */

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The first line of dir/file into buf (newline dropped): 0 or -errno. */
static int read_line(const char *dir, const char *file, char *buf, size_t len)
{
    char path[PATH_MAX];
    if (sl_path_join(path, sizeof path, dir, file) != 0)
        return -ENAMETOOLONG;
    FILE *f = fopen(path, "re");
    if (!f)
        return -errno;
    bool ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    if (!ok)
        return -ENODATA;
    buf[strcspn(buf, "\n")] = '\0';
    return 0;
}

/* A whole unsigned decimal (leading and trailing blanks allowed). */
static bool parse_u64(const char *s, uint64_t *out)
{
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    while (*end == ' ' || *end == '\t')
        end++;
    if (errno || *end)
        return false;
    *out = (uint64_t)v;
    return true;
}

/* The value of line "KEY N" in dir/file (memory.events, memory.oom_control),
 * or CGROUP_NONE. */
static uint64_t read_keyed(const char *dir, const char *file, const char *key)
{
    char path[PATH_MAX], line[256];
    if (sl_path_join(path, sizeof path, dir, file) != 0)
        return CGROUP_NONE;
    FILE *f = fopen(path, "re");
    if (!f)
        return CGROUP_NONE;
    uint64_t v = CGROUP_NONE;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        uint64_t x;
        if (!strncmp(line, key, n) && line[n] == ' ' && parse_u64(line + n + 1, &x)) {
            v = x;
            break;
        }
    }
    fclose(f);
    return v;
}

/* The limit in dir's limit file: 0 with *out (CGROUP_NONE for none),
 * -ENOENT when the file is absent, -EINVAL when it holds no number. */
static int read_limit(int version, const char *dir, uint64_t *out)
{
    char line[128];
    int rc = read_line(dir, version == 2 ? "memory.max" : "memory.limit_in_bytes", line, sizeof line);
    if (rc)
        return rc;
    if (version == 2 && !strcmp(line, "max")) {
        *out = CGROUP_NONE;
        return 0;
    }
    uint64_t v;
    if (!parse_u64(line, &v))
        return -EINVAL;
    *out = version == 1 && v >= V1_UNLIMITED ? CGROUP_NONE : v;
    return 0;
}

/* The path of hierarchy `version` in a /proc/self/cgroup text: v1, the
 * line whose controller list holds "memory"; v2, the "0::" line. */
static bool find_path(const char *text, int version, char *out, size_t len)
{
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *c1 = strchr(p, ':'), *nl = strchr(p, '\n');
        const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c1 || !c2 || (nl && c2 > nl))
            continue;
        size_t end = nl ? (size_t)(nl - c2 - 1) : strlen(c2 + 1);
        bool match = false;
        if (version == 2) {
            match = c1 - p == 1 && p[0] == '0' && c2 == c1 + 1;
        } else {
            for (const char *c = c1 + 1; c < c2;) { /* controllers, comma-separated */
                const char *comma = memchr(c, ',', (size_t)(c2 - c));
                const char *e = comma ? comma : c2;
                match |= e - c == 6 && !strncmp(c, "memory", 6);
                c = e + 1;
            }
        }
        if (match && end + 1 <= len && c2[1] == '/') {
            memcpy(out, c2 + 1, end);
            out[end] = '\0';
            return true;
        }
    }
    return false;
}

int cgroup_mem_read_at(struct cgroup_mem *g, const char *root, const char *proc_self_cgroup, char *err,
                       size_t errlen)
{
    memset(g, 0, sizeof *g);
    g->limit = g->oom_kills_start = CGROUP_NONE;
    /* a /proc file says its size is 0: read it with stdio, up to 64 KiB */
    FILE *pf = fopen(proc_self_cgroup, "re");
    if (!pf)
        return sl_errf(err, errlen, -errno, "%s: %s", proc_self_cgroup, strerror(errno));
    char *text = malloc(64 << 10);
    size_t n = text ? fread(text, 1, (64 << 10) - 1, pf) : 0;
    fclose(pf);
    if (!text)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    text[n] = '\0';
    int rc;
    char mount[PATH_MAX] = "", name[PATH_MAX];
    int version = 0;
    if (find_path(text, 1, name, sizeof name)) {
        snprintf(mount, sizeof mount, "%s/memory", root);
        version = is_dir(mount) ? 1 : 0;
    }
    if (!version && find_path(text, 2, name, sizeof name)) {
        char m[PATH_MAX];
        snprintf(m, sizeof m, "%s/cgroup.controllers", root);
        if (is_file(m)) {
            snprintf(mount, sizeof mount, "%s", root);
            version = 2;
        } else {
            snprintf(m, sizeof m, "%s/unified/cgroup.controllers", root);
            snprintf(mount, sizeof mount, "%s/unified", root);
            version = is_file(m) ? 2 : 0;
        }
    }
    free(text);
    if (!version)
        return 0; /* no memory cgroup: MemAvailable is the limit */
    char dir[PATH_MAX];
    int w = snprintf(dir, sizeof dir, "%s%s", mount, strcmp(name, "/") ? name : "");
    if (w < 0 || (size_t)w >= sizeof dir)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: cgroup path %s too long", proc_self_cgroup, name);
    if (!is_dir(dir)) { /* the mount's root is this cgroup (a container without a cgroup namespace) */
        snprintf(dir, sizeof dir, "%s", mount);
        snprintf(name, sizeof name, "/");
    }
    /* from the cgroup up to the mount's root: the smallest limit binds */
    uint64_t best = CGROUP_NONE;
    char best_name[PATH_MAX] = "", at[PATH_MAX], at_name[PATH_MAX];
    bool any = false;
    snprintf(at, sizeof at, "%s", dir);
    snprintf(at_name, sizeof at_name, "%s", name);
    size_t mlen = strlen(mount);
    for (;;) {
        uint64_t lim;
        rc = read_limit(version, at, &lim);
        if (rc == 0) {
            any = true;
            if (lim < best) {
                best = lim;
                snprintf(best_name, sizeof best_name, "%s", at_name);
            }
        } else if (rc != -ENOENT) {
            return sl_errf(err, errlen, rc, "%s/%s: %s", at, version == 2 ? "memory.max" : "memory.limit_in_bytes",
                           rc == -EINVAL ? "not a number of bytes" : strerror(-rc));
        }
        if (strlen(at) <= mlen)
            break;
        char *slash = strrchr(at, '/'), *nslash = strrchr(at_name, '/');
        if (!slash || (size_t)(slash - at) < mlen)
            break;
        *slash = '\0';
        if (nslash == at_name)
            snprintf(at_name, sizeof at_name, "/");
        else if (nslash)
            *nslash = '\0';
    }
    if (version == 2 && !any) {
        char ev[PATH_MAX];
        if (sl_path_join(ev, sizeof ev, dir, "memory.events") != 0 || !is_file(ev))
            return 0; /* no memory controller on this cgroup (or the root cgroup): no limit of its own */
    }
    g->version = version;
    snprintf(g->dir, sizeof g->dir, "%s", dir);
    snprintf(g->name, sizeof g->name, "%s", name);
    g->limit = best;
    snprintf(g->limit_name, sizeof g->limit_name, "%s", best_name);
    g->oom_kills_start = cgroup_mem_oom_kills(g);
    return 0;
}

int cgroup_mem_read(struct cgroup_mem *g, char *err, size_t errlen)
{
    const char *root = getenv("SLUICE_CGROUP_ROOT"), *self = getenv("SLUICE_PROC_SELF_CGROUP");
    return cgroup_mem_read_at(g, root && *root ? root : "/sys/fs/cgroup", self && *self ? self : "/proc/self/cgroup",
                              err, errlen);
}

const char *cgroup_mem_limit_file(const struct cgroup_mem *g)
{
    return g->version == 2 ? "memory.max" : "memory.limit_in_bytes";
}

uint64_t cgroup_mem_oom_kills(const struct cgroup_mem *g)
{
    if (g->version == 2)
        return read_keyed(g->dir, "memory.events", "oom_kill");
    if (g->version == 1)
        return read_keyed(g->dir, "memory.oom_control", "oom_kill");
    return CGROUP_NONE;
}

uint64_t cgroup_mem_usage(const struct cgroup_mem *g, const char **what)
{
    static const char *const v2[] = {"memory.peak", "memory.current"};
    static const char *const v1[] = {"memory.max_usage_in_bytes", "memory.usage_in_bytes"};
    const char *const *files = g->version == 2 ? v2 : v1;
    *what = "";
    for (int i = 0; g->version && i < 2; i++) {
        char line[128];
        uint64_t v;
        if (read_line(g->dir, files[i], line, sizeof line) == 0 && parse_u64(line, &v)) {
            *what = files[i];
            return v;
        }
    }
    return CGROUP_NONE;
}
