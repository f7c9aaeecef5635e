/* dataset_scan.h - sequential reader over one dataset file that hashes
 * (XXH3-64) everything it reads, so that a validation pass and the
 * checksum pass are one pass over the file. Used by the dataset check
 * (core/dataset_check.h: gnnprep check, gnnlaunch's verification) and by
 * gnnprep info.
 *
 * Threads and ownership. dataset_scan_open starts DATASET_SCAN_READERS
 * reader threads that read the file ahead of the caller in chunks of
 * DATASET_SCAN_CHUNK bytes into DATASET_SCAN_BUFS buffers, with direct I/O (O_DIRECT) where the
 * filesystem allows it, else through the page cache. The caller (one
 * consumer thread) hashes each chunk as it reaches it and sees the bytes
 * in file order through
 * peek/read; a buffer goes back to the reader only once the caller has
 * moved past it. A record that straddles two chunks is copied into the
 * DATASET_SCAN_RECORD_MAX bytes reserved before the next chunk, so peek
 * always returns contiguous bytes. Reading, hashing and the caller's
 * checks so overlap: a scan runs at the speed of the slowest of them,
 * not at the sum of their times.
 *
 * Errors: 0 or -errno with a message naming the file and the byte; a file
 * shorter than the caller expects is -EIO ("ends at byte ..."). */
#ifndef SLUICE_DATASET_SCAN_H
#define SLUICE_DATASET_SCAN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DATASET_SCAN_CHUNK (4u << 20)      /* bytes one read fills */
#define DATASET_SCAN_RECORD_MAX (1u << 20) /* largest n peek takes */
#define DATASET_SCAN_BUFS 4
#define DATASET_SCAN_READERS 2 /* reads in flight */
#define DATASET_SCAN_ALIGN 4096u /* buffer alignment: direct I/O on 4 KiB-sector devices */

struct dataset_scan_reader {
    struct dataset_scan *s;
    int index;
    pthread_t thread;
};

struct dataset_scan {
    int fd;
    unsigned char *mem; /* DATASET_SCAN_BUFS x (RECORD_MAX + CHUNK): reserve, then data */
    void *xxh;          /* XXH3_state_t, updated by the consumer; NULL when not hashing */
    bool direct;        /* reads bypass the page cache (the reader may turn it off) */
    /* shared with the reader threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool full[DATASET_SCAN_BUFS];      /* filled by a reader, not yet given back */
    uint64_t chunk[DATASET_SCAN_BUFS]; /* which chunk of the file it holds */
    size_t got[DATASET_SCAN_BUFS];     /* bytes in the buffer's data */
    bool last[DATASET_SCAN_BUFS];      /* the end of the file (or an error) was met filling it */
    int error[DATASET_SCAN_BUFS];      /* the read's -errno, or 0 */
    bool stop, sync_init;
    int started; /* reader threads running */
    struct dataset_scan_reader readers[DATASET_SCAN_READERS];
    /* the consumer's view */
    const unsigned char *cur; /* the bytes from file offset `off` */
    size_t len, pos;
    uint64_t off;
    int held;                 /* the buffer cur lies in; -1 before the first */
    uint64_t next_chunk;      /* the chunk to move to next */
    bool at_end;              /* the buffer held was the last */
    /* optional: called from the consumer each time it moves past a chunk,
     * with the file offset reached */
    void (*progress)(void *arg, uint64_t pos);
    void *progress_arg;
    char path[4096];
};

/* Opens path and starts the reader; hash = true to compute XXH3 on the way.
 * 0 or -errno (cannot open, out of memory, no thread). */
int dataset_scan_open(struct dataset_scan *s, const char *path, bool hash, char *err, size_t errlen);
/* Copies the next n bytes into out. 0, -EIO at a premature end of file
 * (the message says how many bytes were missing), or -errno. Blocks until
 * the reader has them. */
int dataset_scan_read(struct dataset_scan *s, void *out, size_t n, char *err, size_t errlen);
/* Returns a pointer to the next n bytes (n <= DATASET_SCAN_RECORD_MAX),
 * valid until the next call. NULL on error (*rc and the message set). */
const void *dataset_scan_peek(struct dataset_scan *s, size_t n, int *rc, char *err, size_t errlen);
/* Reads to the end of the file and returns the hash (when hashing) and the
 * number of bytes past the current position in *rest (either may be NULL). */
int dataset_scan_finish(struct dataset_scan *s, uint64_t *hash, uint64_t *rest, char *err, size_t errlen);
/* Byte offset of the next unread byte. */
static inline uint64_t dataset_scan_pos(const struct dataset_scan *s)
{
    return s->off + s->pos;
}
/* Stops the reader and frees everything. Accepts a zeroed scan and one
 * whose open failed; idempotent. */
void dataset_scan_free(struct dataset_scan *s);

#endif
