/* util.h - small helpers shared by every Sluice module: error messages,
 * overflow-checked arithmetic, whole-buffer I/O, paths and directories.
 *
 * Error convention (STYLE.md): library functions return 0 (or a count) on
 * success and -errno on failure, and may fill a caller-provided message
 * buffer `char *err, size_t errlen` (either may be NULL/0). A message names
 * the file or field at fault and ends with what the user can do about it. */
#ifndef SLUICE_UTIL_H
#define SLUICE_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define SL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define SL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SL_MAX(a, b) ((a) > (b) ? (a) : (b))
#define SL_PRINTF(f, a) __attribute__((format(printf, f, a)))

/* Formats a message into err (if non-NULL) and returns rc unchanged, so that
 * `return sl_errf(err, errlen, -EINVAL, "...")` reports and fails in one go. */
int sl_errf(char *err, size_t errlen, int rc, const char *fmt, ...) SL_PRINTF(4, 5);

/* Overflow-checked arithmetic on sizes read from disk: true on overflow. */
static inline bool sl_mul_ovf(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline bool sl_add_ovf(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_add_overflow(a, b, out); }
static inline uint64_t sl_round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Write/read exactly n bytes, retrying short transfers and EINTR.
 * Return 0 or -errno; a read that hits end of file returns -EIO... except
 * sl_pread_full, which reports the bytes read before end of file in *got. */
int sl_write_all(int fd, const void *buf, size_t n);
int sl_pwrite_all(int fd, const void *buf, size_t n, off_t off);
int sl_pread_full(int fd, void *buf, size_t n, off_t off, size_t *got);

/* Reads a whole (small) file into a NUL-terminated malloc'd buffer.
 * Fails with -EFBIG beyond max_bytes; anything but a regular file (a FIFO,
 * a device, a directory) with -EINVAL, without blocking on it. */
int sl_read_file(const char *path, size_t max_bytes, char **out, size_t *len, char *err, size_t errlen);

/* Opens path for writing like fopen(path, "we"), but a file it creates gets
 * `mode` (then less the umask) instead of 0666: output that others must not
 * change (--metrics, --trace) is created 0644 whatever the umask. An
 * existing file is truncated and keeps its mode. NULL with errno set. */
FILE *sl_fopen_write(const char *path, mode_t mode);
/* Replaces a small file atomically: sl_atomic_begin opens PATH.tmp (0644,
 * name into tmp) for writing into *f; sl_atomic_commit flushes, fsyncs and
 * closes it and renames it to path, removing the temporary on any failure.
 * 0 or -errno with a message naming the file. */
int sl_atomic_begin(FILE **f, const char *path, char *tmp, size_t tmplen, char *err, size_t errlen);
int sl_atomic_commit(FILE *f, const char *tmp, const char *path, char *err, size_t errlen);

/* Joins dir and name into out (snprintf semantics); -ENAMETOOLONG if cut. */
int sl_path_join(char *out, size_t outlen, const char *dir, const char *name);

/* Removes a directory tree (no symlinks followed). 0 or -errno; a missing
 * path is success. */
int sl_rmtree(const char *path);

/* SplitMix64 (Steele, Lea and Flood, 2014), the one generator behind
 * every random stream of the project (batch seeds, shuffles, sampling,
 * initialisation, dropout masks, synthetic datasets): sl_mix64 is its
 * finaliser, a bijection whose output bits all depend on every input bit;
 * sl_splitmix64 advances a Weyl state by the golden gamma and mixes it. */
#define SL_GOLDEN_GAMMA 0x9E3779B97F4A7C15ull
static inline uint64_t sl_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static inline uint64_t sl_splitmix64(uint64_t *state)
{
    return sl_mix64(*state += SL_GOLDEN_GAMMA);
}

/* The smallest power of two that is >= n and >= lo (lo a power of two);
 * n above 2^63 gives 2^63. */
static inline uint64_t sl_pow2_at_least(uint64_t n, uint64_t lo)
{
    uint64_t c = lo;
    while (c < n && c < (1ull << 63))
        c <<= 1;
    return c;
}

/* Parses an unsigned decimal integer with optional k/M/G/T suffix (binary
 * powers when `binary`, else decimal: 20M nodes = 20,000,000). Rejects
 * signs, junk and overflow. 0 or -EINVAL/-ERANGE. */
int sl_parse_u64(const char *s, bool binary, uint64_t *out);
int sl_parse_double(const char *s, double *out);

/* Optimal string alignment distance: insertions, deletions, substitutions
 * and transpositions of neighbours ("gta" -> "gat") each cost one; 99 for
 * strings over 63 bytes. For "did you mean" suggestions. */
size_t sl_edit_distance(const char *a, const char *b);

/* Lower-case hex of n bytes into out (2n + 1 bytes, NUL-terminated), and
 * back: sl_unhex takes exactly 2n hex digits (either case) and returns 0,
 * or -EINVAL (out then undefined). */
void sl_hex(const void *b, size_t n, char *out);
int sl_unhex(const char *s, void *out, size_t n);

/* The one clock: CLOCK_MONOTONIC in nanoseconds (trace spans, heartbeats,
 * busy/wait counters, benchmarks) and in seconds. */
uint64_t sl_now_ns(void);
double sl_now(void);

/* Peak RSS of this process in bytes. */
uint64_t sl_peak_rss(void);

/* Human-readable byte count ("1.5 GiB") into buf; returns buf. */
const char *sl_fmt_bytes(uint64_t n, char *buf, size_t len);

/* What a message line written to stderr starts with: "\r\033[K" (return
 * and erase the line) when stderr is a terminal, else "". On a terminal
 * gnnlaunch keeps a live progress line without a newline; a stage's message
 * erases it instead of being glued to it, and the launcher redraws it at
 * its next refresh. */
const char *sl_err_line_start(void);

/* Whether the environment variable `name` turns something on: set,
 * non-empty and not "0" (SLUICE_NO_IO_URING=1, SLUICE_NO_HUGE_PAGES=1). */
bool sl_env_on(const char *name);

#endif
