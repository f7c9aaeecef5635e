/* toml.h - a strict parser for the TOML that Sluice's configs and dataset
 * sidecars use: comments, [tables] and [dotted.tables], bare/quoted/dotted
 * keys, basic and literal strings (single line), integers (decimal with
 * underscores, 0x/0o/0b), floats (incl. inf/nan), booleans, arrays (also
 * across lines, trailing comma allowed) and inline tables.
 * Not supported, and reported as such: multi-line strings, dates and times,
 * arrays of tables. Duplicate keys and table redefinitions are errors.
 *
 * Errors are "FILE:LINE:COL: message". The parsed document is a tree of
 * struct toml_value nodes owned by the root; every node records where it was
 * defined so later validation (unknown keys, wrong types) can point at it. */
#ifndef SLUICE_TOML_H
#define SLUICE_TOML_H

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

enum toml_type {
    TOML_TABLE,
    TOML_ARRAY,
    TOML_STRING,
    TOML_INT,
    TOML_FLOAT,
    TOML_BOOL,
};

struct toml_value;
struct toml_kv {
    char *key;
    struct toml_value *val;
};

struct toml_value {
    enum toml_type type;
    int line, col;           /* 1-based position where the value (or table header) starts */
    bool defined;            /* tables: created by a [header] or key (not only implicitly) */
    bool inline_closed;      /* inline tables and arrays are sealed once written */
    union {
        char *s;             /* TOML_STRING, NUL-terminated UTF-8 */
        int64_t i;
        double f;
        bool b;
        struct {
            struct toml_kv *kv;
            size_t n, cap;
        } tab;
        struct {
            struct toml_value **v;
            size_t n, cap;
        } arr;
    } u;
};

/* Parses text (len bytes, need not be NUL-terminated). Returns the root table
 * or NULL with "name:line:col: message" in err. */
struct toml_value *toml_parse(const char *text, size_t len, const char *name, char *err, size_t errlen);
/* Reads and parses a file (at most 1 MiB). */
struct toml_value *toml_parse_file(const char *path, char *err, size_t errlen);
/* Parses one TOML value written alone, as in `--set key=VALUE`; a bare word
 * that is no valid value is taken as a string. */
struct toml_value *toml_parse_value(const char *text, char *err, size_t errlen);
void toml_free(struct toml_value *v);

/* Looks up `key` in a table (no dots); NULL if absent or v is no table. */
const struct toml_value *toml_get(const struct toml_value *tab, const char *key);
/* Looks up a dotted path "a.b.c" through nested tables. */
const struct toml_value *toml_get_path(const struct toml_value *root, const char *path);
const char *toml_type_name(enum toml_type t);

/* ---- metadata files (dataset.toml, a link dataset's, a partitioned layout's) ---- */

/* The non-negative integer or the string at tab.key. path and tname (the
 * table's name, NULL for the root) are for messages:
 *   "PATH: TNAME.KEY is missing; HINT"
 *   "PATH:LINE:COL: TNAME.KEY must be a non-negative integer" (a string)
 * 0 or -EINVAL. */
int toml_need_uint(const struct toml_value *tab, const char *path, const char *tname, const char *key,
                   const char *hint, uint64_t *out, char *err, size_t errlen);
int toml_need_str(const struct toml_value *tab, const char *path, const char *tname, const char *key,
                  const char *hint, const char **out, char *err, size_t errlen);
/* Writes s as a TOML basic string: quoted, with '"', '\\' and control
 * characters escaped. */
void toml_write_string(FILE *f, const char *s);

#endif
