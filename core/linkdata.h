/* linkdata.h - the on-disk format of a link-prediction dataset
 * (docs/format.md, "Link-prediction datasets"): a knowledge graph's
 * triples (head, relation, tail) split into training, validation and test
 * edges, with the names of its entities and relations when it was
 * imported from text.
 *
 * A link dataset is a directory, like a node-classification dataset
 * (core/dataset.h), and is written the same way (struct dataset_dir:
 * staged, renamed when complete; struct file_writer: sizes and XXH3-64 on
 * the way). Its dataset.toml says format = "sluice-link-dataset":
 *
 *   nodes, relations      counts; every head and tail < nodes, every
 *                         relation < relations
 *   [train] [valid] [test]  id[E, 3] triples (head, relation, tail), row
 *                         after row, id = u32 when nodes and relations
 *                         are below 2^32, else u64; [valid] and [test]
 *                         may hold no triple
 *   [entity_names] [relation_names]  (optional, both or neither) text,
 *                         one name per line in id order, each line ended
 *                         by '\n'; shape = [nodes] or [relations]
 *   planted_mrr           (optional, synthetic graphs only) the tail MRR
 *                         that a model which has learnt the planted
 *                         structure exactly reaches on the test split
 *                         (prep/synth_link.c says how it is computed)
 *
 * Node-classification readers (dataset_meta_read) refuse a link dataset
 * with a message that says what it is; link_meta_read refuses a
 * node-classification one the same way. */
#ifndef SLUICE_CORE_LINKDATA_H
#define SLUICE_CORE_LINKDATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"

#define LINK_FORMAT "sluice-link-dataset"
#define LINK_VERSION 1

enum { LINK_TRAIN, LINK_VALID, LINK_TEST, LINK_SPLITS };
enum { LINK_ENTITY_NAMES, LINK_RELATION_NAMES, LINK_NAME_FILES };
extern const char *const link_split_key[LINK_SPLITS];    /* "train", "valid", "test" */
extern const char *const link_names_key[LINK_NAME_FILES]; /* "entity_names", "relation_names" */

struct link_meta {
    uint32_t version;
    uint64_t nodes;
    uint64_t relations;
    double planted_mrr; /* < 0: none recorded */
    char source[512];
    /* rows = triples, cols = 3, row_stride = 3 x the id size */
    struct dataset_file split[LINK_SPLITS];
    /* rows = names (lines), cols = 1, dtype DTYPE_NONE; present or not */
    struct dataset_file names[LINK_NAME_FILES];
};

/* The id dtype of a link dataset with these counts. */
static inline enum dtype link_id_dtype(uint64_t nodes, uint64_t relations)
{
    return nodes < (1ull << 32) && relations < (1ull << 32) ? DTYPE_U32 : DTYPE_U64;
}

/* Writes dir/dataset.toml atomically (temp file, fsync, rename). 0 or -errno. */
int link_meta_write(const char *dir, const struct link_meta *m, char *err, size_t errlen);
/* The parsing and validation half of link_meta_read, on dataset.toml's
 * text (path in messages only): every key present and of its type, no
 * unknown key, counts >= 1 node and relation, a non-empty training split,
 * shapes, dtypes and byte sizes consistent. 0, -EINVAL, or -EMEDIUMTYPE
 * when the text describes a node-classification dataset (the message says
 * so). */
int link_meta_parse(const char *text, size_t len, const char *path, struct link_meta *m, char *err, size_t errlen);
/* Reads and parses dir/dataset.toml and, when check_files, checks that
 * every file exists with its recorded size. 0, -EINVAL, -ENOENT,
 * -EMEDIUMTYPE (a node-classification dataset), or another -errno. */
int link_meta_read(const char *dir, struct link_meta *m, bool check_files, char *err, size_t errlen);
/* XXH3-64 of a canonical text of the counts and of every file's name,
 * shape, size and checksum (not source, not the path): what a checkpoint
 * or a derived file records to be tied to this dataset. */
uint64_t link_meta_identity(const struct link_meta *m);

/* True when dir/dataset.toml names the link format (a cheap look at the
 * format key; false when it is missing or unreadable). */
bool link_is_link_dataset(const char *dir);

/* Reads split s's triples into *out (malloc'd, rows * 3 u64, head,
 * relation, tail), checking sizes and ranges (not the checksum: the
 * check's job). 0, -ENOMEM, -EBADMSG (an id out of range, named), or an
 * I/O -errno. */
int link_load_split(const char *dir, const struct link_meta *m, int s, uint64_t **out, char *err, size_t errlen);

/* The whole check (gnnprep check): every file's size and XXH3-64, every
 * id of every triple in range (the first offender named by split, triple
 * and column), the name files' line counts and that no name is empty or
 * repeated. file_ok (may be NULL) is told of each file that passed. 0,
 * -EBADMSG (contents wrong; the message names file and place), -ENOMEM,
 * or an I/O -errno. */
int link_check(const char *dir, const struct link_meta *m, void (*file_ok)(void *arg, const char *file, uint64_t xxh3),
               void *arg, char *err, size_t errlen);

#endif
