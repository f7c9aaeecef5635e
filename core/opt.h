/* opt.h - one parser for the long options of the stage and bench command
 * lines: a table of struct opt, one per option, says what each takes and
 * where its value goes, and opt_parse() walks argv once.
 *
 * Syntax. Options are long only: `--name=value` or `--name value` for
 * options that take a value, `--name` alone for flags (`--flag=x` is an
 * error). Anything else is an unknown argument. There are no positional
 * arguments; a program that has some parses them before or after.
 *
 * Values are checked as they are read: an integer must be all digits (a
 * leading '-' for OPT_INT) and inside [lo, hi]; OPT_SIZE takes K/M/G/T
 * suffixes (powers of 1024, sl_parse_u64); OPT_LIST takes "1,2,4";
 * OPT_DOUBLE a finite decimal number; a string must be non-empty and
 * shorter than its buffer. OPT_FN hands the text to a callback that checks
 * and stores it. The first bad argument ends the parse with -EINVAL and one
 * message naming the program, the option and the value:
 *     "<prog>: --rank=x is not an integer in range"
 *     "<prog>: --config needs a value"
 *     "<prog>: unknown argument '--bench'<hint>"
 * where an option's `what` replaces "is not an integer in range" and the
 * caller's hint follows an unknown argument (e.g. "; see --help").
 *
 * opt_parse() marks every option it stored in `seen` (an array of nopts
 * booleans the caller owns, may be NULL) so callers can tell a default from
 * a value given, and check which are required. An option given twice keeps
 * its last value. */
#ifndef SLUICE_CORE_OPT_H
#define SLUICE_CORE_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum opt_kind {
    OPT_FLAG = 0, /* no value; dst is bool*, set to true */
    OPT_INT,      /* dst is int64_t*, lo <= v <= hi */
    OPT_UINT,     /* dst is uint64_t*, lo <= v <= hi (both read as unsigned) */
    OPT_SIZE,     /* dst is uint64_t*, K/M/G/T suffixes allowed, lo <= v <= hi */
    OPT_STR,      /* dst is char[len], a non-empty value shorter than len */
    OPT_LIST,     /* dst is struct opt_list*: 1 to OPT_LIST_MAX comma-separated integers, each in [lo, hi] */
    OPT_DOUBLE,   /* dst is double*, a finite number with lo < v <= hi (lo exclusive: (0, 60] is "positive") */
    OPT_FN,       /* fn(value, dst, err, errlen) checks and stores; 0 or -EINVAL */
};

#define OPT_LIST_MAX 8
struct opt_list {
    uint64_t v[OPT_LIST_MAX];
    int n;
};

struct opt {
    const char *name; /* with its dashes: "--rank" */
    enum opt_kind kind;
    void *dst;
    int64_t lo, hi; /* OPT_INT; OPT_UINT and OPT_SIZE read them as uint64_t */
    size_t len;     /* OPT_STR: the size of dst */
    int (*fn)(const char *value, void *dst, char *err, size_t errlen); /* OPT_FN */
    const char *what; /* the error's words for a bad value ("is not an epoch number"), or NULL */
};

/* Parses argv[first .. argc) against opts[0 .. nopts). seen (may be NULL)
 * gets true for every option stored. 0; -EINVAL with the message in err. */
int opt_parse(const char *prog, const struct opt *opts, int nopts, int argc, char **argv, int first, bool *seen,
              const char *unknown_hint, char *err, size_t errlen);

/* The front of a program's main(): opt_parse() with the hint "; see
 * --help"; on a bad argument prints the message and usage(stderr) and
 * returns 2; when *help (a flag of the table) was given prints
 * usage(stdout) and returns 0; else returns -1: go on. */
int opt_main(const char *prog, const struct opt *opts, int nopts, int argc, char **argv, bool *seen, const bool *help,
             void (*usage)(FILE *f));

/* The index of option `name` in opts, or -1 (for checks on seen[]). */
int opt_index(const struct opt *opts, int nopts, const char *name);

#endif
