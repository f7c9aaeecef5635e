/* tboard.h - TensorBoard event files (gnnlaunch --tensorboard DIR;
 * docs/metrics.md): scalars per epoch as TensorBoard's own reader expects
 * them. A file is a sequence of TFRecords - u64 length, u32 masked
 * CRC-32C of the length, the data, u32 masked CRC-32C of the data (the
 * CRC from ISA-L) - each holding one Event protocol buffer
 * (launcher/tensorboard.proto, encoded by protobuf-c): first the file
 * version, then one Event per (step, batch of scalars).
 *
 * Errors: 0 or -errno with a message; a write error leaves the file with
 * whole records only (each record is one write). */
#ifndef SLUICE_LAUNCHER_TBOARD_H
#define SLUICE_LAUNCHER_TBOARD_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tboard {
    int fd; /* -1: closed */
    char path[PATH_MAX];
};

/* Creates dir when missing (its parent must exist) and a new event file in
 * it, events.out.tfevents.<unix time>.<host>.<pid>.sluice, with its
 * version record. */
int tboard_open(struct tboard *t, const char *dir, char *err, size_t errlen);

/* One Event at step with n scalars (tags[i], values[i]) and wall time. */
int tboard_scalars(struct tboard *t, int64_t step, double wall_time, const char *const *tags, const float *values,
                   size_t n, char *err, size_t errlen);

/* The scalars of one Event, gathered: tboard_add keeps the finite ones
 * (at most TBOARD_BATCH_MAX; tags must outlive the batch). */
#define TBOARD_BATCH_MAX 32
struct tboard_batch {
    const char *tags[TBOARD_BATCH_MAX];
    float vals[TBOARD_BATCH_MAX];
    size_t n;
};
void tboard_add(struct tboard_batch *b, const char *tag, double v);

/* Writes b as one Event at step with the wall time now; nothing when t is
 * closed or b empty. A failed write is the run's warning ("gnnlaunch:
 * warning: --tensorboard: ...; no more scalars go there" on stderr): t is
 * closed and *failed set. */
void tboard_write_batch(struct tboard *t, int64_t step, const struct tboard_batch *b, bool *failed);

/* fsync and close (accepts a closed t). */
int tboard_close(struct tboard *t, char *err, size_t errlen);

/* CRC-32C of buf as TFRecord masks it (rotated right by 15, plus
 * 0xa282ead8); for tests. */
uint32_t tboard_masked_crc(const void *buf, size_t len);

#endif
