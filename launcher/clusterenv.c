/* clusterenv.c - flags of a multi-node run from torchrun's and SLURM's
 * environment (clusterenv.h). */
#include "launcher/clusterenv.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

int clusterenv_first_host(const char *list, char *out, size_t len)
{
    if (!list || !len)
        return -EINVAL;
    size_t o = 0, i = 0;
    /* the name up to the first ',' (at bracket depth 0) or '[' */
    for (; list[i] && list[i] != ',' && list[i] != '['; i++) {
        unsigned char c = (unsigned char)list[i];
        if (!(isalnum(c) || c == '-' || c == '.' || c == '_') || o + 1 >= len)
            return -EINVAL;
        out[o++] = (char)c;
    }
    if (list[i] == '[') { /* the first number of the first range, padding kept */
        if (o == 0)
            return -EINVAL; /* no name before the range */
        i++;
        size_t digits = 0;
        for (; isdigit((unsigned char)list[i]); i++, digits++) {
            if (o + 1 >= len)
                return -EINVAL;
            out[o++] = list[i];
        }
        if (!digits || (list[i] != '-' && list[i] != ',' && list[i] != ']'))
            return -EINVAL;
        while (list[i] && list[i] != ']')
            i++;
        if (list[i] != ']')
            return -EINVAL;
        for (i++; list[i] && list[i] != ','; i++) { /* a suffix after the brackets */
            unsigned char c = (unsigned char)list[i];
            if (!(isalnum(c) || c == '-' || c == '.' || c == '_') || o + 1 >= len)
                return -EINVAL;
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
    return o ? 0 : -EINVAL;
}

/* The first of names that get() knows (non-empty), or NULL; *which = its name. */
static const char *first_set(const char *(*get)(const char *), const char *const *names, const char **which)
{
    for (size_t k = 0; names[k]; k++) {
        const char *v = get(names[k]);
        if (v && *v) {
            *which = names[k];
            return v;
        }
    }
    return NULL;
}

static int env_long(const char *name, const char *v, long min, long *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < min)
        return sl_errf(err, errlen, -EINVAL, "environment variable %s = '%s' is not a number >= %ld; unset it or give "
                       "the flag", name, v, min);
    *out = x;
    return 0;
}

/* Appends "FLAG VALUE (WHERE)" to said, comma separated. */
static void say(char *said, size_t len, const char *flag, const char *value, const char *where)
{
    size_t used = strlen(said);
    if (used + 1 < len)
        snprintf(said + used, len - used, "%s%s %s (%s)", used ? ", " : "", flag, value, where);
}

int clusterenv_resolve(const struct clusterenv *e, const char *(*get)(const char *name), long *nodes, long *node,
                       char *master, size_t cap, char *said, size_t said_len, char *err, size_t errlen)
{
    static const char *const nodes_vars[] = {"NNODES", "WORLD_SIZE", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", NULL};
    static const char *const rank_vars[] = {"NODE_RANK", "GROUP_RANK", "SLURM_NODEID", NULL};
    const char *which = NULL, *v;
    int rc;
    said[0] = '\0';
    master[0] = '\0';
    if (e->master && (e->addr || e->port))
        return sl_errf(err, errlen, -EINVAL, "--master HOST:PORT and --master-addr/--master-port say the same thing; "
                       "give one of them");
    *nodes = e->nodes > 0 ? e->nodes : 1;
    if (e->nodes <= 0 && (v = first_set(get, nodes_vars, &which))) {
        if ((rc = env_long(which, v, 1, nodes, err, errlen)) != 0)
            return rc;
        say(said, said_len, "--nodes", v, which);
    }
    *node = e->node;
    if (e->node < 0 && *nodes > 1 && (v = first_set(get, rank_vars, &which))) {
        if ((rc = env_long(which, v, 0, node, err, errlen)) != 0)
            return rc;
        say(said, said_len, "--node-rank", v, which);
    }
    if (e->master) {
        snprintf(master, cap, "%s", e->master);
        return 0;
    }
    if (*nodes <= 1 && !e->addr && !e->port)
        return 0; /* one node: no address needed, none taken */
    char host[256] = "", from[160] = "";
    const char *port = e->port;
    if (e->addr) {
        snprintf(host, sizeof host, "%s", e->addr);
    } else if ((v = get("MASTER_ADDR")) && *v) {
        snprintf(host, sizeof host, "%s", v);
        snprintf(from, sizeof from, "MASTER_ADDR");
    } else if ((v = get("SLURM_JOB_NODELIST")) && *v) {
        if (clusterenv_first_host(v, host, sizeof host) != 0)
            return sl_errf(err, errlen, -EINVAL, "SLURM_JOB_NODELIST = '%s' is not a node list gnnlaunch can read; "
                           "give --master HOST:PORT", v);
        snprintf(from, sizeof from, "the first host of SLURM_JOB_NODELIST");
    } else {
        return 0; /* cluster_check says what is missing */
    }
    if (!port && (v = get("MASTER_PORT")) && *v) {
        port = v;
        snprintf(from + strlen(from), sizeof from - strlen(from), "%sMASTER_PORT", from[0] ? " and " : "");
    } else if (!port) {
        port = CLUSTERENV_DEFAULT_PORT;
        snprintf(from + strlen(from), sizeof from - strlen(from), "%sport %s by default", from[0] ? ", " : "",
                 CLUSTERENV_DEFAULT_PORT);
    }
    int n = snprintf(master, cap, "%s:%s", host, port);
    if (n < 0 || (size_t)n >= cap)
        return sl_errf(err, errlen, -EINVAL, "the master address %s:%s is too long", host, port);
    if (from[0])
        say(said, said_len, "--master", master, from);
    return 0;
}
