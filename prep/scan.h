/* scan.h - sequential reader over one dataset file that hashes (XXH3-64)
 * everything it reads, so a validation pass and the checksum pass are one
 * pass over the file. Used by `gnnprep check` and `gnnprep info`. */
#ifndef SLUICE_SCAN_H
#define SLUICE_SCAN_H

#include <stddef.h>
#include <stdint.h>

struct prep_scan {
    int fd;
    unsigned char *buf;
    size_t cap, len, pos;
    uint64_t off;         /* file offset of buf[0] */
    void *xxh;            /* XXH3_state_t, NULL when not hashing */
    char path[4096];
};

/* Opens path for a sequential scan; hash = 1 to compute XXH3 on the way. */
int prep_scan_open(struct prep_scan *s, const char *path, int hash, char *err, size_t errlen);
/* Copies the next n bytes into out. 0, -EIO at a premature end of file
 * (message says how many bytes were missing), or -errno. */
int prep_scan_read(struct prep_scan *s, void *out, size_t n, char *err, size_t errlen);
/* Returns a pointer to the next n bytes inside the buffer (n <= 1 MiB),
 * valid until the next call. NULL on error (message in err). */
const void *prep_scan_peek(struct prep_scan *s, size_t n, int *rc, char *err, size_t errlen);
/* Reads to the end of the file (hashing it) and returns the hash and the
 * number of bytes past the current position in *rest. */
int prep_scan_finish(struct prep_scan *s, uint64_t *hash, uint64_t *rest, char *err, size_t errlen);
/* Byte offset of the next unread byte. */
static inline uint64_t prep_scan_pos(const struct prep_scan *s)
{
    return s->off + s->pos;
}
/* Accepts NULL and a scan whose open failed. */
void prep_scan_free(struct prep_scan *s);

#endif
