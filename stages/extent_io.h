/* extent_io.h - one contiguous extent moved between memory and a file in
 * large requests, several in flight: what the partition buffers do to load
 * a partition (stages/partbuf.h) and to write one back (stages/embbuf.h).
 *
 * The extent [off, off + total) of fd and the memory at mem are split into
 * requests of req_bytes (the last shorter); with a ring (an io_uring set up
 * by the caller with room for depth entries) up to depth of them are in
 * flight, a short transfer continuing from where it stopped; without one,
 * pread(2)/pwrite(2) one after another. On an error no new request is
 * sent and those in flight are waited for before the call returns (the
 * kernel may still touch mem), so mem is the caller's again on every
 * return - unless the ring itself fails while requests are in flight:
 * the message then says how many were left, and the caller must treat
 * the ring (and mem) as the kernel's. Not thread-safe per ring: one
 * caller at a time. */
#ifndef SLUICE_STAGES_EXTENT_IO_H
#define SLUICE_STAGES_EXTENT_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXTENT_IO_DEPTH_MAX 64u    /* requests in flight at most */
#define EXTENT_IO_DIRECT_ALIGN 512u /* O_DIRECT's transfer unit that direct files are laid out in */

struct extent_io {
    int fd;
    const char *path;  /* for messages */
    void *ring;        /* a struct io_uring *, or NULL: one request at a time */
    size_t req_bytes;  /* bytes per request, > 0 */
    bool direct;       /* fd is O_DIRECT: a read that stops short off a 512-byte boundary met the end of the
                        * file (its rest could not be asked for: unaligned) */
    unsigned depth;    /* 1 .. EXTENT_IO_DEPTH_MAX */
    /* called after each batch of completions with the bytes moved so far
     * (a test hook's place); may be NULL */
    void (*progress)(void *arg, uint64_t done, size_t total);
    void *arg;
};

/* Opens the partition file path for reading (write: and writing), with
 * O_DIRECT when direct, and checks it holds at least `need` bytes: a file
 * cut short (an interrupted copy, a full disk) is refused here rather than
 * mid-epoch. The fd, or -errno with a message ("PATH: holds B bytes, N
 * expected (...)", then "; " and remedy when given). */
int extent_io_open(const char *path, bool write, bool direct, uint64_t need, const char *what, const char *remedy,
                   char *err, size_t errlen);

/* An io_uring of `entries` for extent_io_move, or NULL when there is none
 * (a build without liburing, SLUICE_NO_IO_URING=1, or the kernel refuses):
 * requests then go one at a time with pread/pwrite. Freed with
 * extent_io_ring_free (which takes NULL). */
void *extent_io_ring_new(unsigned entries);
void extent_io_ring_free(void *ring);

/* Moves partition `part`'s extent (write: mem to the file; else the file
 * to mem). Adds the bytes moved and the requests completed to *bytes and
 * *reqs, also on an error. 0, or -errno with "PATH: read|write-back of
 * partition P at byte B failed: ..." (or the ring's failure) in err. */
int extent_io_move(const struct extent_io *x, bool write, uint32_t part, unsigned char *mem, uint64_t off,
                   size_t total, uint64_t *bytes, uint64_t *reqs, char *err, size_t errlen);

#endif
