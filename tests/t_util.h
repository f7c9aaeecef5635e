/* t_util.h - helpers shared by the cmocka tests (prefix t_).
 * Include after <cmocka.h>'s prerequisites. Tests find the built binaries
 * through $SLUICE_BIN and scratch space under $SLUICE_TMP (set by ctest). */
#ifndef SLUICE_T_UTIL_H
#define SLUICE_T_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

/* A fresh scratch directory $SLUICE_TMP/<name>-<pid> (removed first). */
static inline void t_scratch(char *out, size_t len, const char *name)
{
    const char *base = getenv("SLUICE_TMP");
    if (!base)
        base = "/tmp";
    snprintf(out, len, "%s/%s-%ld", base, name, (long)getpid());
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out, out);
    assert_int_equal(system(cmd), 0);
}

static inline void t_rmrf(const char *path)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* Path of a built program in $SLUICE_BIN. */
static inline void t_bin(char *out, size_t len, const char *prog)
{
    const char *bin = getenv("SLUICE_BIN");
    snprintf(out, len, "%s/%s", bin ? bin : "build/bin", prog);
}

/* Runs a shell command line (built printf-style), captures stdout+stderr
 * into out (if non-NULL) and returns the exit status (or 128+signal). */
static inline int t_run(char *out, size_t outlen, const char *fmt, ...)
{
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char full[8300];
    snprintf(full, sizeof full, "%s 2>&1", cmd);
    FILE *p = popen(full, "r");
    assert_non_null(p);
    size_t n = 0;
    char buf[4096];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, p)) > 0) {
        if (out && n + 1 < outlen) {
            size_t k = r < outlen - 1 - n ? r : outlen - 1 - n;
            memcpy(out + n, buf, k);
            n += k;
        }
    }
    if (out && outlen)
        out[n] = '\0';
    int st = pclose(p);
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* True if path exists. */
static inline int t_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

#endif
