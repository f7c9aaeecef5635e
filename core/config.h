/* config.h - the training configuration: one TOML file plus `--set`
 * overrides, checked against a schema before anything starts.
 *
 * Every key has a type, a default, a range and a line of documentation in
 * one table (config.c); docs/config.md is generated from that table
 * (`sl_config_write_reference`) and a test keeps the two equal. Errors name
 * the file, line and column, or the `--set` argument, and suggest the
 * closest valid key for unknown ones. Relative paths are taken relative to
 * the current directory, as on a command line. */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SL_MAX_LAYERS 8

typedef enum sl_model_kind { SL_MODEL_SAGE, SL_MODEL_GCN, SL_MODEL_GAT, SL_MODEL_MLP } sl_model_kind;
typedef enum sl_io_mode { SL_IO_DIRECT, SL_IO_BUFFERED, SL_IO_MMAP } sl_io_mode;

typedef struct sl_config {
    struct {
        char path[4096];
    } dataset;
    struct {
        sl_model_kind kind;
        int64_t layers;
        int64_t hidden;
        int64_t fanouts[SL_MAX_LAYERS]; /* -1 = all neighbours */
        int64_t n_fanouts;
        double dropout;
        int64_t heads;
    } model;
    struct {
        int64_t epochs;
        int64_t batch_size;
        double lr;
        int64_t seed;
        int64_t eval_every;
        char checkpoint_dir[4096]; /* "" until gnnlaunch resolves it */
    } train;
    struct {
        int64_t ranks;
        int64_t samplers;
        int64_t extractors;
        int64_t extract_queue;
        int64_t train_queue;
        int64_t feature_buffer_mb;
        int64_t staging_mb;
        int64_t io_depth;
        sl_io_mode io;
        bool ordered;
    } pipeline;
} sl_config;

/* Fills every key with its default (dataset.path empty). */
void sl_config_defaults(sl_config *c);

/* Loads path (if non-NULL), then applies each `section.key=value` of sets
 * in order, then checks the whole (required keys, ranges, layers vs
 * fanouts). 0, or -EINVAL with one message in err; -ENOENT etc. when the
 * file cannot be read. */
int sl_config_load(sl_config *c, const char *path, const char *const *sets, int nsets, char *err, size_t errlen);

/* Writes the key reference as markdown (docs/config.md). */
void sl_config_write_reference(FILE *f);

/* Writes the effective configuration as TOML (for logs and checkpoints). */
void sl_config_write_toml(const sl_config *c, FILE *f);

const char *sl_model_kind_name(sl_model_kind k);
const char *sl_io_mode_name(sl_io_mode m);

/* "[10, -1, 5]": model.fanouts as written in a config, into buf (truncated
 * to len); returns buf. */
const char *sl_fanouts_str(const int64_t *f, int64_t n, char *buf, size_t len);

#endif
