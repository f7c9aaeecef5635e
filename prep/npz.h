/* npz.h - one member of a zip archive (NumPy's .npz: np.savez writes stored
 * members, np.savez_compressed deflated ones, both with zip64 records) read
 * as a byte stream through libarchive, without extracting it to disk.
 *
 * libarchive's seekable zip reader locates members through the central
 * directory, so opening a member late in a large archive costs a few seeks;
 * the member's data is inflated as it is read, in pieces, and its CRC-32 is
 * checked when the reader reaches the member's end. Two struct npz opened on the
 * same archive are independent cursors (each holds its own descriptor). */
#ifndef SLUICE_NPZ_H
#define SLUICE_NPZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct npz;

/* Opens `member` of the archive at path. Returns 0 with *out set; 1 when
 * `optional` and the member is absent (*out NULL); otherwise -errno with a
 * message naming the archive (and member): -ENOENT archive or required
 * member missing (the message lists the members present), -EBADMSG not a
 * zip archive or a damaged one, -EINVAL a member that is not a regular file,
 * -ENOMEM, -EIO. Blocking. */
int npz_open(struct npz **out, const char *path, const char *member, bool optional, char *err, size_t errlen);

/* The member's uncompressed size as recorded in the archive, or -1 when the
 * archive does not record it. */
int64_t npz_size(const struct npz *z);

/* Reads up to n bytes of the member's uncompressed data. Returns the count
 * (0 at the member's end) or -errno: -EBADMSG for damaged data (bad deflate
 * stream, CRC mismatch, archive cut short), -ENOMEM, -EIO. */
ssize_t npz_read(struct npz *z, void *buf, size_t n, char *err, size_t errlen);

/* Closes the archive; accepts NULL. */
void npz_close(struct npz *z);

#endif
