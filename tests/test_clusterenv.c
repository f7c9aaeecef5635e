/* test_clusterenv.c - a multi-node run's flags from torchrun's and SLURM's
 * environment (launcher/clusterenv.h): which variable wins, flags over
 * the environment, SLURM node lists, and malformed values. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "launcher/clusterenv.h"

/* The environment of a case: NAME=VALUE entries, NULL-terminated. */
static const char *const *g_env;

static const char *get(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; g_env && g_env[i]; i++)
        if (!strncmp(g_env[i], name, n) && g_env[i][n] == '=')
            return g_env[i] + n + 1;
    return NULL;
}

struct got {
    long nodes, node;
    char master[300], said[512], err[512];
    int rc;
};

static struct got resolve(const struct clusterenv *e, const char *const *env)
{
    struct got g;
    g_env = env;
    g.rc = clusterenv_resolve(e, get, &g.nodes, &g.node, g.master, sizeof g.master, g.said, sizeof g.said, g.err,
                              sizeof g.err);
    return g;
}

static const struct clusterenv none = {.node = -1};

static void test_nothing(void **state)
{
    (void)state;
    struct got g = resolve(&none, (const char *[]){"HOME=/root", NULL});
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.nodes, 1);
    assert_int_equal(g.node, -1);
    assert_string_equal(g.master, "");
    assert_string_equal(g.said, "");
}

static void test_torchrun(void **state)
{
    (void)state;
    struct got g = resolve(&none, (const char *[]){"NNODES=4", "NODE_RANK=2", "MASTER_ADDR=10.0.0.1",
                                                    "MASTER_PORT=1234", "WORLD_SIZE=32", NULL});
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.nodes, 4); /* NNODES before WORLD_SIZE */
    assert_int_equal(g.node, 2);
    assert_string_equal(g.master, "10.0.0.1:1234");
    assert_string_equal(g.said, "--nodes 4 (NNODES), --node-rank 2 (NODE_RANK), --master 10.0.0.1:1234 (MASTER_ADDR "
                                "and MASTER_PORT)");
    /* WORLD_SIZE alone, the default port */
    g = resolve(&none, (const char *[]){"WORLD_SIZE=2", "GROUP_RANK=1", "MASTER_ADDR=h", NULL});
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.nodes, 2);
    assert_int_equal(g.node, 1);
    assert_string_equal(g.master, "h:" CLUSTERENV_DEFAULT_PORT);
}

static void test_slurm(void **state)
{
    (void)state;
    struct got g = resolve(&none, (const char *[]){"SLURM_NNODES=3", "SLURM_NODEID=0",
                                                    "SLURM_JOB_NODELIST=gpu[007-009]", NULL});
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.nodes, 3);
    assert_int_equal(g.node, 0);
    assert_string_equal(g.master, "gpu007:29500");
    char host[64];
    assert_int_equal(clusterenv_first_host("a1,b2", host, sizeof host), 0);
    assert_string_equal(host, "a1");
    assert_int_equal(clusterenv_first_host("n[3,5-7],m[1-2]", host, sizeof host), 0);
    assert_string_equal(host, "n3");
    assert_int_equal(clusterenv_first_host("rack[1-2]-ib", host, sizeof host), 0);
    assert_string_equal(host, "rack1-ib");
    assert_int_equal(clusterenv_first_host("x.example.org", host, sizeof host), 0);
    assert_string_equal(host, "x.example.org");
    const char *bad[] = {"", "[1-2]", "n[", "n[a-b]", "n[1-2", "a b", "n]1["};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (clusterenv_first_host(bad[i], host, sizeof host) != -EINVAL)
            fail_msg("'%s' was read as a node list (%s)", bad[i], host);
    g = resolve(&none, (const char *[]){"SLURM_NNODES=2", "SLURM_NODEID=1", "SLURM_JOB_NODELIST=n[", NULL});
    assert_int_equal(g.rc, -EINVAL);
    assert_non_null(strstr(g.err, "SLURM_JOB_NODELIST = 'n['"));
}

static void test_flags_win(void **state)
{
    (void)state;
    const char *env[] = {"NNODES=4", "NODE_RANK=2", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=1234", NULL};
    struct clusterenv e = {.nodes = 2, .node = 1, .master = "m:9"};
    struct got g = resolve(&e, env);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.nodes, 2);
    assert_int_equal(g.node, 1);
    assert_string_equal(g.master, "m:9");
    assert_string_equal(g.said, "");
    /* half of the address from a flag, the other half from the environment */
    e = (struct clusterenv){.node = -1, .port = "77"};
    g = resolve(&e, env);
    assert_string_equal(g.master, "10.0.0.1:77");
    assert_non_null(strstr(g.said, "--master 10.0.0.1:77 (MASTER_ADDR)"));
    e = (struct clusterenv){.node = -1, .addr = "z"};
    g = resolve(&e, env);
    assert_string_equal(g.master, "z:1234");
    /* one node: no rank or address is taken */
    e = (struct clusterenv){.nodes = 1, .node = -1};
    g = resolve(&e, env);
    assert_int_equal(g.nodes, 1);
    assert_int_equal(g.node, -1);
    assert_string_equal(g.master, "");
}

static void test_errors(void **state)
{
    (void)state;
    struct got g = resolve(&none, (const char *[]){"NNODES=two", NULL});
    assert_int_equal(g.rc, -EINVAL);
    assert_non_null(strstr(g.err, "NNODES = 'two' is not a number >= 1"));
    g = resolve(&none, (const char *[]){"NNODES=2", "NODE_RANK=-1", NULL});
    assert_int_equal(g.rc, -EINVAL);
    assert_non_null(strstr(g.err, "NODE_RANK = '-1'"));
    struct clusterenv e = {.node = -1, .master = "a:1", .addr = "b"};
    g = resolve(&e, (const char *[]){NULL});
    assert_int_equal(g.rc, -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing), cmocka_unit_test(test_torchrun), cmocka_unit_test(test_slurm),
        cmocka_unit_test(test_flags_win), cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
