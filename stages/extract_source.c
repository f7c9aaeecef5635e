/* extract_source.c - the features file of the extraction engine (struct
 * extract_source, API in extract.h): opening it for direct, buffered or
 * mapped reads, the direct I/O alignment and the extent a row's read
 * covers, the announcements every engine file shares, and the
 * SLUICE_FAULT_READ_EIO test hook. Read-only once open: every extractor
 * thread of the process shares it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "stages/extract.h"
#include "stages/extract_int.h"

#define ENTRY_ALIGN 64u
#define DIO_ALIGN_DEFAULT 512u

/* ---- announcements ------------------------------------------------------- */

static atomic_uint announced;

void extract_announce(const struct extract_source *src, unsigned bit, const char *fmt, ...)
{
    if (atomic_fetch_or(&announced, bit) & bit)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s: %s\n", sl_err_line_start(), src->prog, line);
}

/* ---- fault injection (a test hook; docs/reliability.md) -------------------- */

/* SLUICE_FAULT_READ_EIO=N: the Nth read this process completes - every
 * request of every engine and backend counts, mmap row copies included -
 * completes with -EIO instead of its result, as if the kernel had returned
 * it. Read from the environment by extract_source_open; unset (0), a
 * completion pays one relaxed load and a predictable branch. */
_Atomic uint64_t extract_fault_read_eio;
_Atomic uint64_t extract_fault_reads;

static void fault_init(const struct extract_source *src)
{
    const char *s = getenv("SLUICE_FAULT_READ_EIO");
    uint64_t n = 0;
    if (s && *s && (sl_parse_u64(s, false, &n) != 0 || n == 0)) {
        extract_announce(src, ANN_FAULT, "SLUICE_FAULT_READ_EIO=%s is not a positive integer; no read will fail", s);
        n = 0;
    } else if (n) {
        extract_announce(src, ANN_FAULT, "SLUICE_FAULT_READ_EIO=%" PRIu64 ": read %" PRIu64 " will fail (a test hook)",
                         n, n);
    }
    atomic_store_explicit(&extract_fault_read_eio, n, memory_order_relaxed);
}

/* ---- the source ------------------------------------------------------------ */

static bool pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Direct I/O alignment of fd: statx's (the larger of its offset and memory
 * alignments) when the kernel reports it, else DIO_ALIGN_DEFAULT. 0 when
 * the kernel says this file cannot do direct I/O. */
static uint32_t dio_align(int fd)
{
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
        if (sx.stx_dio_offset_align == 0)
            return 0;
        return SL_MAX(sx.stx_dio_offset_align, sx.stx_dio_mem_align);
    }
#else
    (void)fd;
#endif
    return DIO_ALIGN_DEFAULT;
}

/* Reopens src->path without O_DIRECT after the file system refused it. */
static int reopen_buffered(struct extract_source *src, const char *why, char *err, size_t errlen)
{
    if (src->fd >= 0)
        close(src->fd);
    src->fd = open(src->path, O_RDONLY | O_CLOEXEC);
    if (src->fd < 0)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", src->path, strerror(errno));
    src->io = EXTRACT_IO_BUFFERED;
    extract_announce(src, ANN_NO_DIRECT,
                     "%s: this file system does not support direct I/O (%s); reading through the page cache instead "
                     "(pipeline.io = \"buffered\" or --io buffered says so up front)",
                     src->path, why);
    return 0;
}

int extract_source_open(struct extract_source *src, const char *dir, const struct dataset_meta *m, enum extract_io io,
                        const char *prog, char *err, size_t errlen)
{
    memset(src, 0, sizeof *src);
    src->fd = -1;
    src->prog = prog ? prog : "sluice";
    fault_init(src);
    const struct dataset_file *f = &m->f[DATASET_FEATURES];
    int rc;
    if (io != EXTRACT_IO_DIRECT && io != EXTRACT_IO_BUFFERED && io != EXTRACT_IO_MMAP)
        return sl_errf(err, errlen, -EINVAL, "unknown I/O mode %d", (int)io);
    if (!f->present)
        return sl_errf(err, errlen, -ENOENT, "%s: the dataset has no [features] table; it cannot be trained on", dir);
    if (f->dtype != DTYPE_F32 && f->dtype != DTYPE_F16)
        return sl_errf(err, errlen, -EINVAL, "%s/%s: features of dtype %s; only f32 and f16 are supported", dir,
                       f->file, dtype_name(f->dtype));
    uint64_t row_bytes, span;
    if (f->cols == 0 || sl_mul_ovf(f->cols, dtype_size(f->dtype), &row_bytes) || f->row_stride < row_bytes ||
        f->rows == 0 || sl_mul_ovf(f->rows, f->row_stride, &span) || span > f->bytes || row_bytes > (1u << 30) ||
        f->row_stride > (1u << 30))
        return sl_errf(err, errlen, -EINVAL,
                       "%s/%s: shape [%" PRIu64 ", %" PRIu64 "] with row stride %" PRIu64 " and %" PRIu64
                       " bytes do not add up; run gnnprep check",
                       dir, f->file, f->rows, f->cols, f->row_stride, f->bytes);
    rc = sl_path_join(src->path, sizeof src->path, dir, f->file);
    if (rc)
        return sl_errf(err, errlen, rc, "%s/%s: path too long", dir, f->file);
    src->rows = f->rows;
    src->row_bytes = row_bytes;
    src->row_stride = f->row_stride;
    src->file_bytes = f->bytes;
    src->io = io;

    int flags = O_RDONLY | O_CLOEXEC | (io == EXTRACT_IO_DIRECT ? O_DIRECT : 0);
    src->fd = open(src->path, flags);
    if (src->fd < 0 && errno == EINVAL && io == EXTRACT_IO_DIRECT) {
        rc = reopen_buffered(src, "O_DIRECT: Invalid argument", err, errlen);
        if (rc)
            goto err;
    } else if (src->fd < 0) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot open: %s", src->path, strerror(errno));
        goto err;
    }
    struct stat st;
    if (fstat(src->fd, &st) != 0) {
        rc = sl_errf(err, errlen, -errno, "%s: cannot stat: %s", src->path, strerror(errno));
        goto err;
    }
    if ((uint64_t)st.st_size != src->file_bytes) {
        rc = sl_errf(err, errlen, -EINVAL,
                     "%s is %lld bytes but dataset.toml records %" PRIu64 ": the dataset changed; run gnnprep check",
                     src->path, (long long)st.st_size, src->file_bytes);
        goto err;
    }

    src->align = 1;
    if (src->io == EXTRACT_IO_DIRECT) {
        uint32_t a = dio_align(src->fd);
        if (a == 0 || !pow2(a) || a > STAGING_ALIGN) {
            char why[96];
            snprintf(why, sizeof why,
                     a == 0 ? "statx reports no direct I/O alignment"
                            : "direct I/O alignment %u is not a power of two up to 4096",
                     a);
            rc = reopen_buffered(src, why, err, errlen);
            if (rc)
                goto err;
        } else {
            src->align = a;
        }
    }
    if (src->io == EXTRACT_IO_DIRECT) {
        /* rows start at multiples of gcd(stride, A) within an A block, so
         * the worst extent starts A - g bytes into its first block */
        uint64_t a = src->align, g = gcd_u64(src->row_stride, a);
        src->extent_max = sl_round_up(a - g + src->row_bytes, a);
    } else {
        src->extent_max = src->row_bytes;
    }
    src->entry_bytes = sl_round_up(src->extent_max, ENTRY_ALIGN);

    if (src->io == EXTRACT_IO_MMAP) {
        void *p = mmap(NULL, (size_t)src->file_bytes, PROT_READ, MAP_SHARED, src->fd, 0);
        if (p == MAP_FAILED) {
            rc = sl_errf(err, errlen, -errno, "%s: cannot map %" PRIu64 " bytes: %s", src->path, src->file_bytes,
                         strerror(errno));
            goto err;
        }
        (void)madvise(p, (size_t)src->file_bytes, MADV_RANDOM);
        src->map = p;
        src->map_len = (size_t)src->file_bytes;
        extract_announce(src, ANN_MMAP, "%s: reading features through a read-only mapping (mmap, MADV_RANDOM)",
                         src->path);
    } else if (src->io == EXTRACT_IO_DIRECT) {
        extract_announce(src, ANN_DIRECT,
                         "%s: direct I/O (O_DIRECT), reads aligned to %u B, at most %" PRIu64 " B per %" PRIu64
                         "-B row",
                         src->path, src->align, src->extent_max, src->row_bytes);
    } else {
        extract_announce(src, ANN_BUFFERED, "%s: buffered I/O through the page cache, %" PRIu64 " B per row", src->path,
                         src->row_bytes);
    }
    return 0;
err:
    extract_source_free(src);
    return rc;
}

void extract_source_free(struct extract_source *src)
{
    if (!src)
        return;
    if (src->map)
        munmap((void *)src->map, src->map_len);
    if (src->fd >= 0)
        close(src->fd);
    src->map = NULL;
    src->map_len = 0;
    src->fd = -1;
}

size_t extract_staging_bytes(const struct extract_source *src, unsigned depth)
{
    return (size_t)sl_round_up((uint64_t)depth * src->entry_bytes, STAGING_ALIGN);
}
