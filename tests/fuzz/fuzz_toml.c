/* fuzz_toml.c - libFuzzer target for the TOML parser (core/toml.c):
 * whole documents and single `--set` values. Any crash, leak, overflow or
 * undefined behaviour is a bug; the parser must reject, never misbehave.
 * A document that parses must also have every value reachable by the path
 * lookup of its keys (a cheap consistency check). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/toml.h"

static void walk(const struct toml_value *v, int depth)
{
    if (depth > 200)
        abort(); /* the parser bounds nesting; deeper trees are a bug */
    if (v->type == TOML_TABLE) {
        for (size_t i = 0; i < v->u.tab.n; i++) {
            if (toml_get(v, v->u.tab.kv[i].key) == NULL)
                abort();
            walk(v->u.tab.kv[i].val, depth + 1);
        }
    } else if (v->type == TOML_ARRAY) {
        for (size_t i = 0; i < v->u.arr.n; i++)
            walk(v->u.arr.v[i], depth + 1);
    } else if (v->type == TOML_STRING && v->u.s == NULL) {
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    struct toml_value *v = toml_parse((const char *)data, size, "fuzz.toml", err, sizeof err);
    if (v) {
        walk(v, 0);
        toml_free(v);
    } else if (strncmp(err, "fuzz.toml:", 10) != 0) {
        abort(); /* every rejection says where */
    }
    if (size < 256) {
        char buf[256];
        memcpy(buf, data, size);
        buf[size] = '\0';
        toml_free(toml_parse_value(buf, err, sizeof err));
    }
    return 0;
}
