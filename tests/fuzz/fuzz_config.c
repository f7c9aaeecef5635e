/* fuzz_config.c - libFuzzer target for the training configuration
 * (config_load in core/config.c: the TOML file, then `--set`
 * overrides, then the schema's checks). The input is the config file, then
 * up to 8 `--set` arguments, separated by NUL bytes.
 *
 * Beyond memory safety: a configuration that loads must survive a round
 * trip. gnnlaunch writes the effective configuration as TOML into every
 * checkpoint (config_write_toml), so writing an accepted config and
 * loading that text again must give back exactly the same values. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "core/config.h"

#define MAX_SETS 8

static void same(const struct config *a, const struct config *b)
{
    /* both started from config_defaults (a memset), so padding and the
     * bytes after each string's NUL are zero in both */
    if (memcmp(a, b, sizeof *a) != 0) {
        fprintf(stderr, "fuzz_config: the configuration changed in a write/load round trip\n");
        config_write_toml(a, stderr);
        config_write_toml(b, stderr);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* split: file NUL set NUL set ... (each piece its own NUL-terminated copy) */
    char *copy = malloc(size + 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    copy[size] = 0;
    const char *sets[MAX_SETS];
    int nsets = 0;
    size_t file_len = strlen(copy);
    for (size_t at = file_len + 1; at <= size && nsets < MAX_SETS; at += strlen(copy + at) + 1)
        sets[nsets++] = copy + at;

    char path[64], err[2048];
    int fd = fuzz_file((const uint8_t *)copy, file_len, path, sizeof path);
    static struct config c, back;
    int rc = config_load(&c, path, sets, nsets, err, sizeof err);
    close(fd);
    if (rc == 0) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
            abort();
        config_write_toml(&c, f);
        fclose(f);
        char path2[64];
        int fd2 = fuzz_file((const uint8_t *)text, len, path2, sizeof path2);
        if (config_load(&back, path2, NULL, 0, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_config: an accepted configuration, written out, is refused: %s\n%s\n", err, text);
            abort();
        }
        close(fd2);
        same(&c, &back);
        free(text);
    } else if (!err[0]) {
        fprintf(stderr, "fuzz_config: refused (%d) without a message\n", rc);
        abort();
    }
    free(copy);
    return 0;
}
