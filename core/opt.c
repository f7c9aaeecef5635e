/* opt.c - the long-option parser of the stage and bench command lines
 * (contract in opt.h). */
#include "core/opt.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

int opt_index(const struct opt *opts, int nopts, const char *name)
{
    for (int k = 0; k < nopts; k++)
        if (!strcmp(opts[k].name, name))
            return k;
    return -1;
}

/* The option argv's arg names: its index, and the value after '=' (NULL
 * when there is none); -1 when none matches. */
static int match(const struct opt *opts, int nopts, const char *arg, const char **val)
{
    for (int k = 0; k < nopts; k++) {
        size_t n = strlen(opts[k].name);
        if (strncmp(arg, opts[k].name, n) != 0)
            continue;
        if (arg[n] == '=') {
            *val = arg + n + 1;
            return k;
        }
        if (arg[n] == '\0') {
            *val = NULL;
            return k;
        }
    }
    return -1;
}

static int bad_value(const char *prog, const struct opt *o, const char *val, const char *dflt, char *err, size_t errlen)
{
    return sl_errf(err, errlen, -EINVAL, "%s: %s=%s %s", prog, o->name, val, o->what ? o->what : dflt);
}

/* Stores one value; 0 or -EINVAL with the message. */
static int store(const char *prog, const struct opt *o, const char *val, char *err, size_t errlen)
{
    switch (o->kind) {
    case OPT_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (errno || end == val || *end || v < o->lo || v > o->hi)
            return bad_value(prog, o, val, "is not an integer in range", err, errlen);
        *(int64_t *)o->dst = (int64_t)v;
        return 0;
    }
    case OPT_UINT:
    case OPT_SIZE: {
        uint64_t v;
        const char *p = val;
        bool digits = *p != '\0';
        for (; *p && o->kind == OPT_UINT; p++)
            digits = digits && *p >= '0' && *p <= '9';
        if (!digits || sl_parse_u64(val, true, &v) != 0 || v < (uint64_t)o->lo || v > (uint64_t)o->hi)
            return bad_value(prog, o, val, "is not an integer in range", err, errlen);
        *(uint64_t *)o->dst = v;
        return 0;
    }
    case OPT_LIST: {
        struct opt_list l = {.n = 0};
        const char *p = val;
        for (;;) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(p, &end, 10);
            if (errno || end == p || *p == '-' || *p == '+' || (*end && *end != ',') || l.n == OPT_LIST_MAX ||
                v < (uint64_t)o->lo || v > (uint64_t)o->hi)
                return sl_errf(err, errlen, -EINVAL,
                               "%s: %s=%s wants 1 to %d comma-separated integers in %" PRIu64 "..%" PRIu64, prog,
                               o->name, val, OPT_LIST_MAX, (uint64_t)o->lo, (uint64_t)o->hi);
            l.v[l.n++] = v;
            if (!*end)
                break;
            p = end + 1;
        }
        *(struct opt_list *)o->dst = l;
        return 0;
    }
    case OPT_DOUBLE: {
        double v;
        if (sl_parse_double(val, &v) == 0 && isfinite(v) && v > (double)o->lo && v <= (double)o->hi) {
            *(double *)o->dst = v;
            return 0;
        }
        if (o->what)
            return bad_value(prog, o, val, NULL, err, errlen);
        return sl_errf(err, errlen, -EINVAL, "%s: %s=%s is not a number in (%" PRId64 ", %" PRId64 "]", prog, o->name,
                       val, o->lo, o->hi);
    }
    case OPT_STR:
        if (!*val || strlen(val) >= o->len)
            return sl_errf(err, errlen, -EINVAL, "%s: %s needs a value of 1 to %zu bytes", prog, o->name, o->len - 1);
        memcpy(o->dst, val, strlen(val) + 1);
        return 0;
    case OPT_FN: {
        char why[256] = "";
        if (o->fn(val, o->dst, why, sizeof why) == 0)
            return 0;
        if (o->what || !why[0])
            return bad_value(prog, o, val, "is not valid", err, errlen);
        return sl_errf(err, errlen, -EINVAL, "%s: %s", prog, why);
    }
    case OPT_FLAG:
        break;
    }
    return sl_errf(err, errlen, -EINVAL, "%s: %s: bad option table", prog, o->name);
}

int opt_parse(const char *prog, const struct opt *opts, int nopts, int argc, char **argv, int first, bool *seen,
              const char *unknown_hint, char *err, size_t errlen)
{
    if (seen)
        memset(seen, 0, (size_t)nopts * sizeof *seen);
    for (int i = first; i < argc; i++) {
        const char *arg = argv[i], *val;
        int k = match(opts, nopts, arg, &val);
        if (k < 0)
            return sl_errf(err, errlen, -EINVAL, "%s: unknown argument '%s'%s", prog, arg,
                           unknown_hint ? unknown_hint : "");
        const struct opt *o = &opts[k];
        if (o->kind == OPT_FLAG) {
            if (val)
                return sl_errf(err, errlen, -EINVAL, "%s: %s takes no value", prog, o->name);
            *(bool *)o->dst = true;
        } else {
            if (!val) {
                if (i + 1 >= argc)
                    return sl_errf(err, errlen, -EINVAL, "%s: %s needs a value", prog, arg);
                val = argv[++i];
            }
            int rc = store(prog, o, val, err, errlen);
            if (rc != 0)
                return rc;
        }
        if (seen)
            seen[k] = true;
    }
    return 0;
}

int opt_main(const char *prog, const struct opt *opts, int nopts, int argc, char **argv, bool *seen, const bool *help,
             void (*usage)(FILE *f))
{
    char err[512];
    if (opt_parse(prog, opts, nopts, argc, argv, 1, seen, "; see --help", err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        usage(stderr);
        return 2;
    }
    if (*help) {
        usage(stdout);
        return 0;
    }
    return -1;
}
