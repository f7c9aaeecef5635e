/* sampler_fetch.h - one sampling thread's reads of the in-neighbour lists
 * that the neighbour cache does not hold (SAMPLER_TOPO_CACHE; sampler.h).
 *
 * Protocol. A hop's destinations are taken in rounds, in order. A round
 * (sampler_fetch_start) covers as many destinations as half the thread's
 * read buffer holds (at least one, at most SAMPLER_FETCH_DSTS, and at most
 * the reader's max_reads reads: small rounds let the sampling of one
 * overlap the reads of the next from a hop's start): each
 * one's list is in the neighbour cache, or the span of indices.bin
 * covering it in t->read_align granules is read into the round's half. Two
 * rounds may be outstanding: the sampler starts round r + 1, then waits
 * for round r (sampler_fetch_wait: its list pointers, valid until the next
 * start of that half) and samples it while r + 1's reads run. Up to
 * SAMPLER_FETCH_DEPTH reads are in flight (io_uring), the older round's
 * first; without liburing the reads are made by pread(2) in start. Short
 * reads are resubmitted for the rest; a read that ends before its list
 * does (the file shrank) is -EIO. After an error, or to stop early,
 * sampler_fetch_cancel waits for what is in flight and forgets the rounds.
 *
 * Memory: the buffer (the size asked for, or twice the longest list's span
 * when that is more) and the ring belong to the thread. A sampling thread
 * has two readers (stages/sampler.h): one for the batch it samples
 * (SAMPLER_FETCH_BUF) and one for the targets of the batches it will
 * sample next (SAMPLER_PREFETCH_BUF); SAMPLER_READ_BUFS is both. */
#ifndef SLUICE_STAGES_SAMPLER_FETCH_H
#define SLUICE_STAGES_SAMPLER_FETCH_H

#include <stddef.h>
#include <stdint.h>

#include "stages/sampler.h"

#define SAMPLER_FETCH_DEPTH 64u              /* reads in flight per thread */
#define SAMPLER_FETCH_BUF ((size_t)16 << 20) /* read buffer per thread (two rounds), bytes (at least) */
#define SAMPLER_PREFETCH_BUF ((size_t)4 << 20) /* the next batches' targets: two rounds, bytes (at least) */
#define SAMPLER_FETCH_ROUND_READS 128u /* reads per round of a hop, at most (sampler_topo_opts.round_reads) */
#define SAMPLER_READ_BUFS (SAMPLER_FETCH_BUF + SAMPLER_PREFETCH_BUF) /* a sampling thread's read buffers */

struct sampler_fetch;

/* A reader for t (a CACHE topology) with a buffer of `bytes` (both rounds;
 * raised to twice the longest list's span) whose rounds make max_reads
 * reads at most (0: no limit). 0 or -ENOMEM (an io_uring that cannot be
 * set up is no error: pread(2) is used). */
int sampler_fetch_init(struct sampler_fetch **f, const struct sampler_topo *t, size_t bytes, uint32_t max_reads,
                       char *err, size_t errlen);
void sampler_fetch_free(struct sampler_fetch *f);

/* Starts a round over dsts[0 .. n) (n >= 1; at most one other round
 * outstanding); known (NULL, or n entries) gives lists already in memory
 * (non-NULL entries are used as they are, never read): the destinations
 * it covers (1 .. n), or -errno with a
 * message (then no round is outstanding). Does not block with io_uring. */
int64_t sampler_fetch_start(struct sampler_fetch *f, const uint64_t *dsts, const void *const *known, uint32_t n,
                            char *err, size_t errlen);
/* Waits for the oldest outstanding round: its destination count, with
 * *lists pointing at their lists in order; *reads and *bytes grow by its
 * reads and their bytes. -errno with a message on a failed read (then no
 * round is outstanding). Blocks for the round's reads. */
int64_t sampler_fetch_wait(struct sampler_fetch *f, const void *const **lists, uint64_t *reads, uint64_t *bytes,
                           char *err, size_t errlen);
/* Waits for every read in flight and forgets the outstanding rounds. */
void sampler_fetch_cancel(struct sampler_fetch *f);

#endif
