/* npy.h - strict reader for NumPy .npy arrays, from a file or from a member
 * of an .npz archive (npz.h), streamed in pieces so that arrays larger than
 * memory can be read.
 *
 * Format (numpy/lib/format.py): magic "\x93NUMPY", version byte pair 1.0,
 * 2.0 or 3.0, a little-endian header length (u16 for 1.0, u32 otherwise),
 * then an ASCII Python dict literal
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and ended by '\n', then the raw elements in C order.
 *
 * What is accepted: the three keys exactly once each, in any order, quoted
 * with ' or "; descr one of bool, int8..int64, uint8..uint64, float16/32/64
 * in little-endian ('<', or '|' / '>' for one-byte types); fortran_order
 * False; a shape tuple of up to NPY_MAX_DIMS non-negative integers (a
 * trailing 'L' from Python 2 writers is allowed). Everything else is rejected
 * with a message that says what to do: big-endian data, object (pickled)
 * arrays, structured or string dtypes, fortran_order True, a header longer
 * than NPY_MAX_HEADER, a shape whose byte size overflows, and a file whose
 * size is not exactly header + product(shape) x itemsize ("truncated:
 * expected X bytes, found Y").
 *
 * The parser only reads the bytes it is given and never trusts a length it
 * has read; it is meant to be fuzzed (npy_parse_header on arbitrary
 * bytes). Sluice runs on little-endian hosts only (asserted in npy.c). */
#ifndef SLUICE_NPY_H
#define SLUICE_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NPY_MAX_DIMS 32
/* Longest header (prelude + dict) accepted, in bytes. numpy writes ~128. */
#define NPY_MAX_HEADER 65536u
/* Bytes that always suffice to learn the header length (npy_prelude). */
#define NPY_PRELUDE 12u

enum npy_type {
    NPY_NONE = 0,
    NPY_BOOL,
    NPY_I8,
    NPY_I16,
    NPY_I32,
    NPY_I64,
    NPY_U8,
    NPY_U16,
    NPY_U32,
    NPY_U64,
    NPY_F16,
    NPY_F32,
    NPY_F64,
};

/* numpy's name of a type ("float32"); "none" for NPY_NONE. */
const char *npy_type_name(enum npy_type t);
size_t npy_type_size(enum npy_type t);
static inline bool npy_is_float(enum npy_type t)
{
    return t >= NPY_F16 && t <= NPY_F64;
}
static inline bool npy_is_int(enum npy_type t)
{
    return t >= NPY_I8 && t <= NPY_U64;
}

struct npy_hdr {
    unsigned version;                  /* major: 1, 2 or 3 */
    enum npy_type type;
    size_t itemsize;
    int ndim;                          /* 0 for a scalar */
    uint64_t shape[NPY_MAX_DIMS];
    uint64_t count;                    /* product of shape (1 when ndim == 0) */
    uint64_t header_bytes;             /* offset of the first element */
    uint64_t data_bytes;               /* count * itemsize */
};

/* From the first n bytes of a file: checks magic and version and returns
 * the total header length (prelude + dict) in *header_bytes. Needs at most
 * NPY_PRELUDE bytes. 0 or -EINVAL with a message (no file name). */
int npy_prelude(const void *buf, size_t n, uint64_t *header_bytes, char *err, size_t errlen);

/* Parses a complete header held in buf[0..n) (n may exceed the header).
 * 0 or -EINVAL with a message (no file name). Pure: no I/O, no allocation. */
int npy_parse_header(const void *buf, size_t n, struct npy_hdr *h, char *err, size_t errlen);

/* Formats "(2, 5)" into buf; returns buf. */
const char *npy_shape_str(const struct npy_hdr *h, char *buf, size_t len);

/* ---- streaming reader ---- */
struct npz;

struct npy {
    struct npy_hdr h;
    char name[1024];       /* for messages: "PATH" or "NPZ: MEMBER" */
    int fd;                /* plain file source, or -1 */
    struct npz *z;         /* archive member source, or NULL */
    uint64_t pos;          /* data bytes consumed so far */
};

/* Opens a .npy file and reads its header; the file size must be exactly
 * header + data. Blocking. 0 or -errno (-ENOENT missing, -EINVAL malformed,
 * other -errno for I/O failures), message prefixed with the path. */
int npy_open(struct npy *r, const char *path, char *err, size_t errlen);

/* Opens member `member` (e.g. "edge_index.npy") of the .npz archive npz and
 * reads its header; when the archive records the member's size it must be
 * exactly header + data. Returns 0, or 1 when `optional` and the member is
 * absent, or -errno (-ENOENT when the archive or a required member is
 * missing, -EBADMSG for a damaged archive, -EINVAL for a bad npy header). */
int npy_open_npz(struct npy *r, const char *npz, const char *member, bool optional, char *err, size_t errlen);

/* Reads exactly n bytes of element data (continuing where the last read or
 * skip stopped). Fails with -EINVAL "NAME: truncated: ..." if the data ends
 * early, -EBADMSG if the archive is damaged, other -errno on I/O errors. */
int npy_read(struct npy *r, void *buf, size_t n, char *err, size_t errlen);

/* Skips n bytes of element data: a seek for files, a read for archives. */
int npy_skip(struct npy *r, uint64_t n, char *err, size_t errlen);

/* Checks that all data has been consumed and nothing follows it; for
 * archives this reads to the member's end, which verifies its CRC. */
int npy_end(struct npy *r, char *err, size_t errlen);

/* Releases the reader; accepts a zeroed or already closed reader. */
void npy_close(struct npy *r);

/* Initialises r so that npy_close is safe before any open. */
void npy_init(struct npy *r);

/* ---- element conversion (little-endian sources, any alignment) ---- */
/* n elements of type t at src to float. */
void npy_to_f32(enum npy_type t, const void *src, float *dst, size_t n);
/* n elements to double (labels: exact for every integer up to 2^53). */
void npy_to_f64(enum npy_type t, const void *src, double *dst, size_t n);
/* n integer or bool elements to int64; uint64 values above INT64_MAX become
 * INT64_MAX. Float types are not accepted (returns -EINVAL). */
int npy_to_i64(enum npy_type t, const void *src, int64_t *dst, size_t n);

#endif
