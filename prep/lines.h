/* lines.h - line-by-line reader for text inputs (SNAP edge lists, split id
 * lists), plain or gzip-compressed (told apart by the gzip magic bytes; several
 * gzip members in a row are one text), with line numbers
 * for error messages. Lines are handed out in place, without the '\n' (and
 * without a '\r' before it), NUL-terminated; a line may be at most
 * LINES_MAX bytes. */
#ifndef SLUICE_LINES_H
#define SLUICE_LINES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LINES_MAX (1u << 20)

struct lines {
    int fd;                  /* the file, while fd_open */
    bool fd_open;            /* false in a zeroed or closed reader (whose fd 0 is not ours) */
    unsigned char *in;       /* file bytes read and not yet used (plain: text; gzip: compressed) */
    size_t in_len, in_off;   /* plain: valid bytes in `in`, the next unused one (gzip: z's next_in/avail_in) */
    bool in_eof;             /* the file has no more bytes */
    uint64_t in_used;        /* gzip: compressed bytes used so far (for messages) */
    struct z_stream_s *z;    /* gzip: zlib's inflate state; NULL for plain text */
    bool z_end;              /* gzip: the last member ended where the file ends */
    char *buf;         /* LINES_MAX + 2 bytes */
    size_t len, off;   /* valid bytes in buf, start of the next line */
    bool eof;
    uint64_t lineno;   /* number of the line last returned (1-based) */
    char path[4096];
};

/* Opens path (a regular file, optionally gzip-compressed). 0 or -errno
 * (-ENOENT missing, -EINVAL not a regular file), message names the path. */
int lines_open(struct lines *l, const char *path, char *err, size_t errlen);

/* Next line in *line (length *len). Returns 1, 0 at the end, or -errno:
 * -EINVAL for a line longer than LINES_MAX or a NUL byte in the text,
 * -EBADMSG for a damaged or cut-short gzip stream, or bytes after it that
 * are neither another gzip member nor zero padding; other -errno for I/O. */
int lines_next(struct lines *l, char **line, size_t *len, char *err, size_t errlen);

/* Parses a decimal unsigned integer at *p (no sign, no suffix), advancing
 * *p past its digits. Returns SL_NUM_OK, or what is wrong; *p is left at the
 * offending character. */
enum { SL_NUM_OK = 0, SL_NUM_NONE, SL_NUM_NEGATIVE, SL_NUM_OVERFLOW };
int sl_text_uint(const char **p, uint64_t *v);
/* What is wrong with the text, as a predicate: "is negative; ...". */
const char *sl_text_uint_error(int code);

/* Closes; accepts a zeroed or closed reader. */
void lines_close(struct lines *l);

#endif
