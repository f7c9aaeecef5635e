/* edgelist.h - streaming readers for edge lists, handing out (src, dst)
 * batches with every id checked against the node count.
 *
 * Formats:
 *   snap   SNAP text: one edge "SRC DST" per line, separated by spaces or
 *          tabs; lines starting with '#' and blank lines are skipped; columns
 *          after the second (weights, timestamps) are ignored; may be gzip-
 *          compressed. Negative, non-numeric or overflowing ids and lines
 *          with one column are errors naming FILE:LINE.
 *   bin32  raw little-endian u32 pairs (src, dst), 8 bytes per edge
 *   bin64  raw little-endian u64 pairs, 16 bytes per edge; the file size
 *          must be a multiple of the pair size
 *   npy    a 2-D .npy array of int32/int64 (or uint32/uint64), either 2xE
 *          (row 0 sources, row 1 destinations; PyG's edge_index, OGB's
 *          layout) or Ex2 (one edge per row). Shape (2, 2) reads as 2xE.
 *          2xE is read with two cursors in lockstep (one at the sources, one
 *          at the destinations), so nothing is loaded whole and no
 *          temporary file is written; inside an .npz archive the second
 *          cursor inflates the source half once more to reach the
 *          destinations.
 * Auto-detection (EDGE_FMT_AUTO): the npy magic or a .npy name -> npy;
 * names ending .bin32/.u32 -> bin32, .bin64/.u64 -> bin64; another binary
 * name (.bin) is ambiguous and needs --edge-format; anything else -> snap.
 *
 * Ids are reported in messages with the edge's position (0-based) for
 * binary formats and FILE:LINE for text. */
#ifndef SLUICE_EDGELIST_H
#define SLUICE_EDGELIST_H

#include <stddef.h>
#include <stdint.h>

enum edge_fmt {
    EDGE_FMT_AUTO = 0,
    EDGE_FMT_SNAP,
    EDGE_FMT_BIN32,
    EDGE_FMT_BIN64,
    EDGE_FMT_NPY,
};

/* "snap", "bin32", "bin64", "npy" -> format; 0 or -EINVAL. */
int edge_fmt_parse(const char *s, enum edge_fmt *f);
const char *edge_fmt_name(enum edge_fmt f);

struct edges;

/* Opens an edge list file (fmt EDGE_FMT_AUTO detects it, see above) whose ids
 * must be < nodes. Checks what can be checked up front (npy header, binary
 * size). 0 or -errno, message names the file. */
int edges_open(struct edges **out, const char *path, enum edge_fmt fmt, uint64_t nodes, char *err, size_t errlen);

/* Opens an npy edge list stored as member `member` of an .npz archive. */
int edges_open_npz(struct edges **out, const char *npz, const char *member, uint64_t nodes, char *err, size_t errlen);

/* Reads up to cap edges into src/dst (cap >= 1); *n = 0 at the end, when
 * the input has also been checked to end cleanly (no trailing data, archive
 * CRC). Blocking. 0 or -errno: -EINVAL/-ERANGE for bad input (message names
 * the file and line or edge), -EBADMSG damaged archive, others for I/O. */
int edges_read(struct edges *e, uint64_t *src, uint64_t *dst, size_t cap, size_t *n, char *err, size_t errlen);

/* Number of edges the input holds when its format says (binary, npy), else
 * -1. */
int64_t edges_total(const struct edges *e);
enum edge_fmt edges_format(const struct edges *e);

/* Closes; accepts NULL. */
void edges_close(struct edges *e);

#endif
