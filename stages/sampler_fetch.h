/* sampler_fetch.h - one sampling thread's reads of the in-neighbour lists
 * that the neighbour cache does not hold (SAMPLER_TOPO_CACHE; sampler.h).
 *
 * Protocol. For the destinations of one hop, in order, sampler_fetch_lists
 * takes as many as its read buffer covers (at least one, at most
 * SAMPLER_FETCH_DSTS), points lists[i] at each one's ids - into the
 * neighbour cache, or into the buffer after reading the SAMPLER_IO_ALIGN-
 * aligned span of indices.bin that covers the list - and returns when all
 * its reads have completed. Up to SAMPLER_FETCH_DEPTH reads are in flight
 * at once (io_uring; pread(2) one by one without liburing). The pointers
 * stay valid until the next call. Short reads are resubmitted for the rest;
 * a read that ends before the list does (the file shrank) is -EIO.
 *
 * Memory: the buffer (SAMPLER_FETCH_BUF, or two of the longest list's
 * spans when that is more) and the ring belong to the thread. */
#ifndef SLUICE_STAGES_SAMPLER_FETCH_H
#define SLUICE_STAGES_SAMPLER_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "stages/sampler.h"

#define SAMPLER_FETCH_DEPTH 64u             /* reads in flight per thread */
#define SAMPLER_FETCH_BUF ((size_t)4 << 20) /* read buffer per thread, bytes (at least) */

struct sampler_fetch;

/* A reader for t (a CACHE topology). 0, -ENOMEM or the io_uring setup's
 * -errno (then pread(2) is used: not an error). */
int sampler_fetch_init(struct sampler_fetch **f, const struct sampler_topo *t, char *err, size_t errlen);
void sampler_fetch_free(struct sampler_fetch *f);

/* Makes the lists of dsts[0 .. n) (n >= 1) readable as described above:
 * the number of destinations covered (1 .. n), or -errno with a message.
 * *reads and *bytes grow by the reads made and their bytes. Blocks for the
 * reads. */
int64_t sampler_fetch_lists(struct sampler_fetch *f, const uint64_t *dsts, uint32_t n, const void **lists,
                            uint64_t *reads, uint64_t *bytes, char *err, size_t errlen);

#endif
