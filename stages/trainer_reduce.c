/* trainer_reduce.c - the trainers' gradient collective and cluster.toml
 * (trainer_reduce.h). */
#include "stages/trainer_reduce.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/toml.h"
#include "core/util.h"

int trainer_cluster_write(const char *run_dir, const struct trainer_cluster *c, char *err, size_t errlen)
{
    char path[PATH_MAX], tmp[PATH_MAX + 16];
    if (sl_path_join(path, sizeof path, run_dir, TRAINER_CLUSTER_FILE) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", run_dir);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "we");
    if (!f)
        return sl_errf(err, errlen, -errno, "%s: %s", tmp, strerror(errno));
    fprintf(f, "# written by gnnlaunch for the trainers of this node (docs/multinode.md)\n");
    fprintf(f, "node = %" PRIu32 "\nnodes = %" PRIu32 "\nrun = \"%s\"\nendpoints = [", c->node, c->nodes, c->run);
    for (uint32_t k = 0; k < c->nodes; k++)
        fprintf(f, "%s\"%s\"", k ? ", " : "", c->endpoints[k]);
    fprintf(f, "]\nunique_id = \"");
    for (int i = 0; i < TRAINER_UNIQUE_ID_BYTES; i++)
        fprintf(f, "%02x", c->unique_id[i]);
    fprintf(f, "\"\n");
    bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        int rc = -errno;
        unlink(tmp);
        return sl_errf(err, errlen, rc ? rc : -EIO, "cannot write %s: %s", path, strerror(rc ? -rc : EIO));
    }
    return 0;
}

static int hexval(char ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

int trainer_cluster_read(const char *run_dir, struct trainer_cluster *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    char path[PATH_MAX], msg[512];
    if (sl_path_join(path, sizeof path, run_dir, TRAINER_CLUSTER_FILE) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s: path too long", run_dir);
    if (access(path, R_OK) != 0)
        return sl_errf(err, errlen, -errno, "%s: %s", path, strerror(errno));
    struct toml_value *root = toml_parse_file(path, msg, sizeof msg);
    if (!root)
        return sl_errf(err, errlen, -EINVAL, "%s", msg);
    int rc = 0;
    const struct toml_value *node = toml_get(root, "node"), *nodes = toml_get(root, "nodes"),
                            *run = toml_get(root, "run"), *eps = toml_get(root, "endpoints"),
                            *uid = toml_get(root, "unique_id");
    if (!node || node->type != TOML_INT || !nodes || nodes->type != TOML_INT || nodes->u.i < 1 ||
        nodes->u.i > NETREDUCE_NODES_MAX || node->u.i < 0 || node->u.i >= nodes->u.i) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: node and nodes must be integers with 0 <= node < nodes <= %u", path,
                     NETREDUCE_NODES_MAX);
        goto out;
    }
    c->node = (uint32_t)node->u.i;
    c->nodes = (uint32_t)nodes->u.i;
    if (run && run->type == TOML_STRING)
        snprintf(c->run, sizeof c->run, "%s", run->u.s);
    if (!eps || eps->type != TOML_ARRAY || eps->u.arr.n != c->nodes) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: endpoints must list one endpoint per node (%" PRIu32 ")", path,
                     c->nodes);
        goto out;
    }
    c->endpoints = calloc(c->nodes, sizeof *c->endpoints);
    if (!c->endpoints) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    for (uint32_t k = 0; k < c->nodes; k++) {
        const struct toml_value *e = eps->u.arr.v[k];
        if (e->type != TOML_STRING || !e->u.s[0] || strlen(e->u.s) >= NETREDUCE_ENDPOINT_MAX) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: endpoints[%" PRIu32 "] is not an endpoint string", path, k);
            goto out;
        }
        snprintf(c->endpoints[k], NETREDUCE_ENDPOINT_MAX, "%s", e->u.s);
    }
    if (!uid || uid->type != TOML_STRING || strlen(uid->u.s) != 2 * TRAINER_UNIQUE_ID_BYTES) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: unique_id must be %d hex digits", path, 2 * TRAINER_UNIQUE_ID_BYTES);
        goto out;
    }
    for (int i = 0; i < TRAINER_UNIQUE_ID_BYTES; i++) {
        int hi = hexval(uid->u.s[2 * i]), lo = hexval(uid->u.s[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            rc = sl_errf(err, errlen, -EINVAL, "%s: unique_id must be %d hex digits", path,
                         2 * TRAINER_UNIQUE_ID_BYTES);
            goto out;
        }
        c->unique_id[i] = (uint8_t)(hi << 4 | lo);
    }
out:
    toml_free(root);
    if (rc)
        trainer_cluster_free(c);
    return rc;
}

void trainer_cluster_free(struct trainer_cluster *c)
{
    if (!c)
        return;
    free(c->endpoints);
    memset(c, 0, sizeof *c);
}

int trainer_reducer_open(struct reducer **out, const struct run_args *a, size_t floats, int (*tick)(void *),
                         void *tick_arg, char *err, size_t errlen)
{
    *out = NULL;
    if (run_world(a) <= 1)
        return 0;
    char name[SHM_NAME_MAX];
    int rc;
    if (a->ranks > 1 && (rc = run_allreduce_segname(name, sizeof name, a->run_id, err, errlen)) != 0)
        return rc;
    struct reducer_params p = {.allreduce_name = a->ranks > 1 ? name : NULL,
                               .floats = floats,
                               .rank = (uint32_t)a->rank,
                               .ranks = (uint32_t)a->ranks,
                               .node = (uint32_t)a->node,
                               .nodes = (uint32_t)a->nodes,
                               .tick = tick,
                               .tick_arg = tick_arg};
    if (a->nodes <= 1)
        return reducer_shm_open(out, &p, err, errlen);
    struct trainer_cluster c;
    if ((rc = trainer_cluster_read(a->run_dir, &c, err, errlen)) != 0)
        return rc;
    if (c.node != (uint32_t)a->node || c.nodes != (uint32_t)a->nodes) {
        rc = sl_errf(err, errlen, -EINVAL, "%s/%s is for node %" PRIu32 " of %" PRIu32 ", not --node=%d of %d",
                     a->run_dir, TRAINER_CLUSTER_FILE, c.node, c.nodes, a->node, a->nodes);
        trainer_cluster_free(&c);
        return rc;
    }
    const char **eps = calloc(c.nodes, sizeof *eps);
    if (!eps) {
        trainer_cluster_free(&c);
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    }
    for (uint32_t k = 0; k < c.nodes; k++)
        eps[k] = c.endpoints[k];
    p.endpoints = eps;
    rc = reducer_net_open(out, &p, err, errlen);
    free(eps);
    trainer_cluster_free(&c);
    return rc;
}
