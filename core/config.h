/* config.h - the training configuration: one TOML file plus `--set`
 * overrides, checked against a schema before anything starts.
 *
 * Every key has a type, a default, a range and a line of documentation in
 * one table (config.c); docs/config.md is generated from that table
 * (`config_write_reference`) and a test keeps the two equal. Errors name
 * the file, line and column, or the `--set` argument, and suggest the
 * closest valid key for unknown ones. Relative paths are taken relative to
 * the current directory, as on a command line. */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The deepest model a config may ask for (model.layers); a sampled batch
 * holds one block per layer (ipc/batch.h) and a model one layer per block
 * (ops/model.h), so this one number bounds all three. */
#define MODEL_LAYERS_MAX 8

/* model.kind: the model the trainer builds (ops/model.h), or a link-
 * prediction model over learnt node embeddings (ops/kge.h, docs/link.md),
 * which gnnlaunch trains in memory (launcher/link.c) on a link dataset. */
enum model_kind { MODEL_SAGE = 0, MODEL_GCN = 1, MODEL_GAT = 2, MODEL_MLP = 3, MODEL_DISTMULT = 4, MODEL_COMPLEX = 5 };
static inline bool model_kind_is_link(enum model_kind k)
{
    return k == MODEL_DISTMULT || k == MODEL_COMPLEX;
}
/* link.loss, link.sides, link.init, link.eval (stages/link.h) */
enum link_loss_key { LINK_LOSS_SOFTMAX = 0, LINK_LOSS_LOGISTIC = 1, LINK_LOSS_MARGIN = 2 };
enum link_sides_key { LINK_SIDES_KEY_BOTH = 0, LINK_SIDES_KEY_TAIL = 1, LINK_SIDES_KEY_PYG = 2 };
enum link_init_key { LINK_INIT_KEY_XAVIER = 0, LINK_INIT_KEY_UNIFORM = 1 };
enum link_eval_key { LINK_EVAL_FILTERED = 0, LINK_EVAL_RAW = 1 };
/* model.activation: after every layer but the last. */
enum model_activation { MODEL_ACT_RELU = 0, MODEL_ACT_ELU = 1 };
/* model.aggr: GraphSAGE's neighbour aggregation. */
enum model_aggr { MODEL_AGGR_MEAN = 0, MODEL_AGGR_SUM = 1, MODEL_AGGR_MAX = 2 };
/* model.encoder: link prediction's node encoder (docs/link.md, "The GNN
 * encoder"): the learnt embeddings as they are, or GraphSAGE over sampled
 * neighbourhoods with the learnt embeddings as its input. */
enum model_encoder { MODEL_ENCODER_NONE = 0, MODEL_ENCODER_SAGE = 1 };
/* model.gcn_norm: whose degrees GCN's normalisation uses. */
enum gcn_norm { GCN_NORM_BLOCK = 0, GCN_NORM_GRAPH = 1 };

/* pipeline.io: how the extractor reads feature rows (stages/extract.h). */
enum extract_io { EXTRACT_IO_DIRECT = 0, EXTRACT_IO_BUFFERED = 1, EXTRACT_IO_MMAP = 2 };
/* pipeline.cache_policy: how the feature buffer picks a row to evict
 * (stages/featbuf_policy.h, docs/architecture.md "Cache policies"). */
enum cache_policy {
    CACHE_POLICY_LRU = 0,
    CACHE_POLICY_LOOKAHEAD = 1,        /* farthest next use in pipeline.lookahead sampled batches */
    CACHE_POLICY_STATIC = 2,           /* hot set (pipeline.hot_fraction) pinned, the rest LRU */
    CACHE_POLICY_LOOKAHEAD_STATIC = 3, /* hot set pinned, the rest lookahead */
    CACHE_POLICY_AUTO = 4,             /* lookahead when the features do not fit the buffer, else lru */
};
/* pipeline.topology: how the sampler reaches indices.bin (stages/sampler.h;
 * docs/architecture.md, "Topology"). gnnlaunch resolves AUTO to MEMORY or
 * CACHE from its memory plan before the stages start. */
enum topology_mode { TOPOLOGY_AUTO = 0, TOPOLOGY_MEMORY = 1, TOPOLOGY_MMAP = 2, TOPOLOGY_CACHE = 3 };
/* pipeline.mode: where a run's batches come from (docs/packed.md). ONLINE:
 * sampled as the run goes, rows read from features.bin; PACKED: read from
 * the pack gnnprep pack wrote (pipeline.pack); PARTITIONS: sampled and
 * extracted within the buffer states of a partitioned layout
 * (docs/partitions.md). More modes go at the end
 * (and in config.c's pipeline_modes). */
enum pipeline_mode { PIPELINE_ONLINE = 0, PIPELINE_PACKED = 1, PIPELINE_PARTITIONS = 2 };
/* pipeline.partition_fill: how MariusGNN's one-state rule (core/partorder.h)
 * fills the buffer's slots beside the training partitions: auto (first for
 * a layout made with gnnprep partition --order neighbours, else random),
 * random others each epoch (MariusGNN), or the first partitions. */
enum partition_fill { PARTITION_FILL_AUTO = 0, PARTITION_FILL_RANDOM = 1, PARTITION_FILL_FIRST = 2 };
/* pipeline.partition_eval: where the partition mode samples and extracts
 * evaluation batches: auto (buffer when a layout ordered by neighbours allows it), inside the
 * buffer state (stages/schedule_partitions.h says when that is possible),
 * or on the whole graph with rows read from features.bin. */
enum partition_eval { PARTITION_EVAL_AUTO = 0, PARTITION_EVAL_BUFFER = 1, PARTITION_EVAL_GRAPH = 2 };
/* train.optimizer: how weight decay enters Adam (ops_adam). */
enum optimizer { OPTIMIZER_ADAM = 0, OPTIMIZER_ADAMW = 1 };

/* train.on_nonfinite: what the trainer does with a batch whose loss or
 * gradient is NaN or infinite (docs/training.md). */
enum config_nonfinite { CONFIG_NONFINITE_FAIL = 0, CONFIG_NONFINITE_SKIP = 1 };
enum lr_schedule { LR_CONSTANT = 0, LR_STEP = 1, LR_COSINE = 2 };
enum early_stop_metric { EARLY_STOP_VAL_ACC = 0, EARLY_STOP_VAL_LOSS = 1, EARLY_STOP_VALID_MRR = 2 };

/* pipeline.warm_start: whether the extractor fills the feature buffer with
 * one sequential pass over features.bin at launch (stages/warm.h). */
enum config_warm { CONFIG_WARM_AUTO = 0, CONFIG_WARM_ON = 1, CONFIG_WARM_OFF = 2 };

/* Room for a "given" flag per schema key (config.c checks the table fits). */
#define CONFIG_KEYS_MAX 128

struct config {
    struct {
        char path[4096];
    } dataset;
    struct {
        enum model_kind kind;
        int64_t layers;
        int64_t hidden;
        int64_t fanouts[MODEL_LAYERS_MAX]; /* -1 = all neighbours */
        int64_t n_fanouts;
        double dropout;
        double input_dropout;
        double attention_dropout;
        enum model_activation activation;
        enum gcn_norm gcn_norm;
        enum model_aggr aggr;
        int64_t heads;
        int64_t out_heads;
        enum model_encoder encoder; /* link prediction: none, or a GNN over sampled neighbourhoods */
    } model;
    struct {
        int64_t epochs;
        int64_t batch_size;
        double lr;
        enum optimizer optimizer;
        double weight_decay;
        int64_t seed;
        int64_t eval_every;
        char checkpoint_dir[4096]; /* "" until gnnlaunch resolves it */
        enum config_nonfinite on_nonfinite;
        enum lr_schedule lr_schedule;
        int64_t warmup_steps;
        int64_t lr_step_epochs;
        double lr_gamma;
        double lr_min;
        double grad_clip;               /* 0: off */
        int64_t early_stop_patience;    /* 0: off */
        enum early_stop_metric early_stop_metric;
        int64_t keep_last;              /* 0: every epoch's checkpoint */
    } train;
    struct {
        int64_t ranks;
        int64_t samplers;
        int64_t trainer_threads; /* 0: auto */
        int64_t extractors;
        int64_t extract_queue;
        int64_t train_queue;
        int64_t feature_buffer_mb;
        int64_t staging_mb;
        int64_t io_depth;
        enum extract_io io;
        enum topology_mode topology;
        int64_t neighbour_cache_mb; /* 0: auto (sized by gnnlaunch's memory plan) */
        bool ordered;
        enum config_warm warm_start;
        bool huge_pages; /* the warm start makes the rows' memory 2 MiB pages (stages/warm.h) */
        double stall_timeout_s; /* 0: never */
        enum cache_policy cache_policy;
        int64_t lookahead;    /* batches hinted ahead (lookahead policies) */
        int64_t lookahead_mb; /* the lookahead policy's hint log, at most */
        double hot_fraction;  /* slots pinned to the hot set (static policies) */
        char trace_rows[4096]; /* "" or the row trace's base path (FILE.rank<R>) */
        enum pipeline_mode mode;
        char pack[4096]; /* PIPELINE_PACKED: the pack's directory */
        /* PIPELINE_PARTITIONS (docs/partitions.md): the layout parts.P (0: the
         * dataset's only one), the buffer's c (0: auto-tuned; gnnlaunch
         * writes the value it chose into the run's configuration) and the
         * ordering (enum po_order's values) */
        int64_t partitions, buffer_partitions;
        int partition_order;
        int partition_fill; /* enum partition_fill */
        int partition_eval; /* enum partition_eval */
    } pipeline;
    struct { /* link prediction (model.kind = distmult | complex; docs/link.md) */
        enum link_loss_key loss;
        double margin;
        int64_t negatives;
        int64_t chunk;
        double degree_frac;
        enum link_sides_key sides;
        enum link_init_key init;
        double init_scale;
        enum link_eval_key eval;
        bool eval_heads;
        int64_t eval_sampled;
        double encoder_lr; /* model.encoder = "sage": Adam's learning rate for its weights */
    } link;
    /* given[i]: schema key i was set by the file or a --set, whatever its
     * value (a default written out explicitly counts as given); read it
     * through config_given(). */
    bool given[CONFIG_KEYS_MAX];
};

/* Fills every key with its default (dataset.path empty). */
void config_defaults(struct config *c);

/* Loads path (if non-NULL), then applies each `section.key=value` of sets
 * in order, then checks the whole (required keys, ranges, layers vs
 * fanouts). 0, or -EINVAL with one message in err; -ENOENT etc. when the
 * file cannot be read. */
int config_load(struct config *c, const char *path, const char *const *sets, int nsets, char *err, size_t errlen);

/* Whether key `name` ("pipeline.feature_buffer_mb") was given by the
 * config file or a --set in the last config_load, even with its default
 * value; false for a default and for an unknown name. gnnlaunch sizes
 * the memory keys a user left unset (docs/architecture.md, "Memory"). */
bool config_given(const struct config *c, const char *name);

/* Marks key `name` given (or not): what a caller that chooses a value on
 * the user's behalf records. -EINVAL for an unknown name. */
int config_set_given(struct config *c, const char *name, bool given);

/* Writes the key reference as markdown (docs/config.md). */
void config_write_reference(FILE *f);

/* Writes the effective configuration as TOML (for logs and checkpoints). */
void config_write_toml(const struct config *c, FILE *f);

/* The schema's keys one by one (i < config_key_count()): its name
 * ("model.hidden") and c's value as plain text (strings and choices
 * unquoted, lists as "[10, 5]", "auto"); what checkpoints record as
 * metadata fields. */
size_t config_key_count(void);
const char *config_key_name(size_t i);
void config_key_text(const struct config *c, size_t i, char *buf, size_t len);

/* The run identity's text: one line `section.key = VALUE` (VALUE as TOML)
 * for every key that decides what a run computes (the model, batch size,
 * learning rate, seed, ranks; with pipeline.mode = "partitions" also the
 * partition keys, p, c, order, fill and evaluation), in a fixed order.
 * Keys that only say how fast, where or how long (epochs, paths, queue
 * sizes, timeouts) are not in it, so a run resumed with more epochs or
 * other queue sizes is the same run. Truncated to len (always ends in a
 * NUL); returns the length it needs. */
size_t config_run_text(const struct config *c, char *buf, size_t len);

/* A run's identity: XXH3-64 of config_run_text and the dataset's identity
 * (dataset_meta_identity). Checkpoints record it (docs/checkpoints.md). */
uint64_t config_run_identity(const struct config *c, uint64_t dataset_id);

/* Compares two run texts key by key: writes "key: A -> B" for every key
 * whose value differs (or is only in one), separated by "; ", into out;
 * returns how many keys differ. */
int config_run_diff(const char *a, const char *b, char *out, size_t len);

/* "fail", "skip-batch"; "?" when out of range. */
const char *config_nonfinite_name(enum config_nonfinite v);

/* "sage", "gcn", "gat", "mlp"; "?" when out of range. */
const char *model_kind_name(enum model_kind k);
/* "direct", "buffered", "mmap"; "unknown" when out of range. */
const char *extract_io_name(enum extract_io io);
const char *cache_policy_name(enum cache_policy p);
/* pipeline.topology's spelling of m. */
const char *topology_mode_name(enum topology_mode m);
/* pipeline.mode's spelling of m; "unknown" when out of range. */
const char *pipeline_mode_name(enum pipeline_mode m);
/* pipeline.partition_fill's spelling of f ("?" out of range), and the
 * value a name denotes, or -1. */
const char *partition_fill_name(int f);
int partition_fill_parse(const char *s);
const char *partition_eval_name(int e); /* pipeline.partition_eval's, as above */
int partition_eval_parse(const char *s);
/* The mode a name denotes, or -1. */
int extract_io_parse(const char *s);

/* "[10, -1, 5]": model.fanouts as written in a config, into buf (truncated
 * to len); returns buf. */
const char *config_fanouts_str(const int64_t *f, int64_t n, char *buf, size_t len);

#endif
