/* config.c - configuration schema, loading, overrides and validation
 * (see config.h). The schema table below is the single source of truth for
 * key names, types, defaults, ranges and documentation. */
#include "core/config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "core/partition.h"
#include "core/toml.h"
#include "core/util.h"

/* K_AUTOINT: an integer in [min, max], or the string "auto", stored as 0. */
typedef enum ktype { K_STR, K_INT, K_FLOAT, K_BOOL, K_ENUM, K_INTLIST, K_AUTOINT } ktype;

static const char *const model_kinds[] = {"sage", "gcn", "gat", "mlp", "distmult", "complex", NULL};
static const char *const link_losses[] = {"softmax", "logistic", "margin", NULL};
static const char *const link_sides[] = {"both", "tail", "pyg", NULL};
static const char *const link_inits[] = {"xavier", "uniform", NULL};
static const char *const link_evals[] = {"filtered", "raw", NULL};
static const char *const io_modes[] = {"direct", "buffered", "mmap", NULL};
static const char *const cache_policies[] = {"lru", "lookahead", "static", "lookahead-static", "auto", NULL};
static const char *const topology_modes[] = {"auto", "memory", "mmap", "cache", NULL};
static const char *const optimizers[] = {"adam", "adamw", NULL};
static const char *const activations[] = {"relu", "elu", NULL};
static const char *const gcn_norms[] = {"block", "graph", NULL};
static const char *const encoders[] = {"none", "sage", NULL};
static const char *const aggrs[] = {"mean", "sum", "max", NULL};
static const char *const nonfinite_modes[] = {"fail", "skip-batch", NULL};
static const char *const warm_modes[] = {"auto", "on", "off", NULL};
static const char *const lr_schedules[] = {"constant", "step", "cosine", NULL};
static const char *const early_stop_metrics[] = {"val_acc", "val_loss", "valid_mrr", NULL};
/* pipeline.mode, in enum pipeline_mode's order (add a mode at the end of both) */
static const char *const pipeline_modes[] = {"online", "packed", "partitions", NULL};
/* pipeline.partition_order, in enum po_order's order (core/partorder.h) */
static const char *const partition_orders[] = {"comet", "beta", NULL};
/* pipeline.partition_fill, in enum partition_fill's order */
static const char *const partition_fills[] = {"auto", "random", "first", NULL};
/* pipeline.partition_eval, in enum partition_eval's order */
static const char *const partition_evals[] = {"auto", "buffer", "graph", NULL};

typedef struct key {
    const char *name;             /* "section.key" */
    ktype type;
    size_t off;                   /* offset of the field in struct config */
    const char *def;              /* default, as TOML text ("" = none: required) */
    double min, max;              /* inclusive range for numbers (and list items) */
    const char *const *choices;   /* K_ENUM */
    const char *doc;
} key;

#define OFF(f) offsetof(struct config, f)
#define BIG 9.2e18

static const key keys[] = {
    {"dataset.path", K_STR, OFF(dataset.path), "", 0, 0, NULL,
     "Dataset directory made by gnnprep (relative to the current directory). Required."},

    {"model.kind", K_ENUM, OFF(model.kind), "\"sage\"", 0, 0, model_kinds,
     "GraphSAGE (mean aggregator), GCN, GAT (multi-head attention) or a feature-only MLP; or, on a link-prediction "
     "dataset, DistMult or ComplEx over learnt node embeddings of model.hidden floats (the [link] keys; "
     "docs/link.md)."},
    {"model.layers", K_INT, OFF(model.layers), "3", 1, MODEL_LAYERS_MAX, NULL,
     "Number of GNN layers. When only `fanouts` is given, layers = its length."},
    {"model.hidden", K_INT, OFF(model.hidden), "256", 1, 65536, NULL,
     "Hidden dimension of every layer but the last; for distmult and complex, the floats of an embedding (complex: "
     "real then imaginary halves, PyG's hidden_channels = half of it)."},
    {"model.fanouts", K_INTLIST, OFF(model.fanouts), "[10, 10, 10]", -1, 1e6, NULL,
     "Neighbours sampled per node at each hop, first entry = the targets' neighbours, as PyG's num_neighbors "
     "(-1 = all). One per layer; "
     "when only `layers` is given, every layer samples 10."},
    {"model.dropout", K_FLOAT, OFF(model.dropout), "0.5", 0, 0.95, NULL, "Dropout probability on hidden activations."},
    {"model.input_dropout", K_FLOAT, OFF(model.input_dropout), "0", 0, 0.95, NULL,
     "Dropout probability on the input features, before the first layer (PyG's examples: F.dropout(x) first)."},
    {"model.attention_dropout", K_FLOAT, OFF(model.attention_dropout), "0", 0, 0.95, NULL,
     "GAT: dropout probability on the attention coefficients after the softmax (PyG: GATConv's dropout)."},
    {"model.activation", K_ENUM, OFF(model.activation), "\"relu\"", 0, 0, activations,
     "Activation after every layer but the last: relu, or elu (alpha 1; PyG's GAT example)."},
    {"model.aggr", K_ENUM, OFF(model.aggr), "\"mean\"", 0, 0, aggrs,
     "GraphSAGE's neighbour aggregation, as SAGEConv's aggr: mean, sum or max (per feature; tied sources share "
     "the gradient). Only sage."},
    {"model.gcn_norm", K_ENUM, OFF(model.gcn_norm), "\"graph\"", 0, 0, gcn_norms,
     "GCN's degrees: of the whole graph (the default; as PyG's GCNConv on the full graph, so a checkpoint "
     "reproduces it: the sampler sends each node's in-degree), or of the sampled block (as DGL's GraphConv on a "
     "block; evaluation then depends on the fanouts and the batch size)."},
    {"model.encoder", K_ENUM, OFF(model.encoder), "\"none\"", 0, 0, encoders,
     "distmult and complex only: the node encoder under the decoder. none scores the learnt embeddings themselves; "
     "sage runs GraphSAGE (model.layers layers of model.hidden, model.fanouts neighbours sampled per hop, "
     "model.aggr, model.activation between layers, no dropout) over the training graph with the learnt embeddings "
     "as its input, and the decoder scores its output (MariusGNN; docs/link.md, \"The GNN encoder\")."},
    {"model.heads", K_INT, OFF(model.heads), "4", 1, 64, NULL,
     "Attention heads (GAT only); `hidden` must be a multiple of it."},
    {"model.out_heads", K_INT, OFF(model.out_heads), "0", 0, 64, NULL,
     "Heads of GAT's last layer, whose outputs are averaged (PyG: the last GATConv's heads, concat=False). "
     "0: model.heads."},

    {"train.epochs", K_INT, OFF(train.epochs), "10", 1, 1e6, NULL, "Passes over the training split."},
    {"train.batch_size", K_INT, OFF(train.batch_size), "1000", 1, 1e7, NULL, "Target nodes per mini-batch (per rank)."},
    {"train.lr", K_FLOAT, OFF(train.lr), "0.003", 1e-9, 10, NULL,
     "Learning rate: Adam's, or Adagrad's for distmult and complex (Marius and PyG's KGE examples use about 0.1)."},
    {"train.optimizer", K_ENUM, OFF(train.optimizer), "\"adam\"", 0, 0, optimizers,
     "adam: torch.optim.Adam (weight decay added to the gradient); adamw: torch.optim.AdamW (decoupled weight "
     "decay)."},
    {"train.weight_decay", K_FLOAT, OFF(train.weight_decay), "0", 0, 1, NULL,
     "Weight decay, as the optimizer's weight_decay in PyTorch (PyG's examples: 5e-4 with adam)."},
    {"train.seed", K_INT, OFF(train.seed), "0", 0, BIG, NULL,
     "Seed for initialisation, shuffling, sampling and dropout."},
    {"train.eval_every", K_INT, OFF(train.eval_every), "1", 1, 1e6, NULL,
     "Evaluate validation accuracy every this many epochs (and after the last)."},
    {"train.checkpoint_dir", K_STR, OFF(train.checkpoint_dir), "\"\"", 0, 0, NULL,
     "Where checkpoints go (epoch-NNNNNN.safetensors, one per epoch; relative to the current directory). "
     "Empty: checkpoints/<run name>, the run name being --run-name or the config file's name without .toml."},
    {"train.on_nonfinite", K_ENUM, OFF(train.on_nonfinite), "\"fail\"", 0, 0, nonfinite_modes,
     "A training batch whose loss or gradient is NaN or infinite: \"fail\" stops the run (exit 3) naming the epoch, "
     "the batch and any input rows that are not finite, before a checkpoint is written from it; \"skip-batch\" "
     "leaves the parameters as they were, counts the batch as skipped (a warning, and the epoch line) and trains "
     "on."},

    {"train.lr_schedule", K_ENUM, OFF(train.lr_schedule), "\"constant\"", 0, 0, lr_schedules,
     "Learning rate per step after the warm-up: constant (train.lr); step (train.lr x lr_gamma every "
     "lr_step_epochs epochs, as torch's StepLR); cosine (from train.lr down to lr_min over the remaining steps of "
     "the run, as CosineAnnealingLR stepped per batch)."},
    {"train.warmup_steps", K_INT, OFF(train.warmup_steps), "0", 0, 1e9, NULL,
     "Steps whose learning rate rises linearly to the schedule's: step i (from 0) uses (i + 1) / warmup_steps "
     "of it. 0: none."},
    {"train.lr_step_epochs", K_INT, OFF(train.lr_step_epochs), "30", 1, 1e6, NULL,
     "lr_schedule = \"step\": epochs between two decays (StepLR's step_size)."},
    {"train.lr_gamma", K_FLOAT, OFF(train.lr_gamma), "0.1", 0, 1, NULL,
     "lr_schedule = \"step\": the factor of each decay (StepLR's gamma)."},
    {"train.lr_min", K_FLOAT, OFF(train.lr_min), "0", 0, 10, NULL,
     "lr_schedule = \"cosine\": the learning rate of the run's last step (CosineAnnealingLR's eta_min); at most "
     "train.lr."},
    {"train.grad_clip", K_FLOAT, OFF(train.grad_clip), "0", 0, 1e12, NULL,
     "Largest L2 norm of the gradient a step applies (over every parameter, after the sum over ranks), as "
     "torch.nn.utils.clip_grad_norm_: a larger one is scaled down to it. 0: no clipping."},
    {"train.early_stop_patience", K_INT, OFF(train.early_stop_patience), "0", 0, 1e6, NULL,
     "Stop after this many evaluations in a row without a better early_stop_metric; the final line then gives "
     "the test accuracy (link prediction: test MRR and hits) of the best epoch (the test split is evaluated with "
     "every validation) and "
     "best.safetensors is that epoch's checkpoint. 0: train every epoch."},
    {"train.early_stop_metric", K_ENUM, OFF(train.early_stop_metric), "\"val_acc\"", 0, 0, early_stop_metrics,
     "What early stopping and best.safetensors follow: val_acc (higher is better) or val_loss (lower is better); "
     "link prediction (model.kind = \"distmult\" or \"complex\") follows valid_mrr (higher is better), its only choice."},
    {"train.keep_last", K_INT, OFF(train.keep_last), "0", 0, 1e6, NULL,
     "Checkpoints kept: the newest this many epoch-N files (best.safetensors and latest.safetensors stay valid "
     "whatever is removed). 0: keep every epoch's."},

    {"pipeline.ranks", K_INT, OFF(pipeline.ranks), "1", 1, 1024, NULL,
     "Data-parallel ranks with --cpu. gnnlaunch --gpus N runs N ranks, one per GPU (N x K with --ranks-per-gpu K), "
     "whatever this says (a different value is noted and ignored)."},
    {"pipeline.samplers", K_INT, OFF(pipeline.samplers), "2", 1, 256, NULL, "Sampler threads per rank."},
    {"pipeline.trainer_threads", K_AUTOINT, OFF(pipeline.trainer_threads), "\"auto\"", 1, 256, NULL,
     "Compute threads of each rank's trainer (BLAS and the CPU operators). auto: the rank's share of the online "
     "CPUs (all of them for one rank). Any count gives the same bits."},
    {"pipeline.extractors", K_INT, OFF(pipeline.extractors), "2", 1, 256, NULL,
     "Extractor threads per rank, each with its own io_uring."},
    {"pipeline.extract_queue", K_INT, OFF(pipeline.extract_queue), "8", 1, 4096, NULL,
     "Sampled batches waiting for extraction (ring queue capacity, per rank)."},
    {"pipeline.train_queue", K_INT, OFF(pipeline.train_queue), "4", 1, 4096, NULL,
     "Extracted batches waiting for the trainer (ring queue capacity, per rank)."},
    {"pipeline.feature_buffer_mb", K_INT, OFF(pipeline.feature_buffer_mb), "1024", 1, 1e8, NULL,
     "Feature buffer per rank in MiB (GPU memory, or host memory with --cpu)."},
    {"pipeline.staging_mb", K_INT, OFF(pipeline.staging_mb), "64", 1, 1e7, NULL,
     "Staging buffer for direct I/O in MiB, shared by all ranks."},
    {"pipeline.io_depth", K_INT, OFF(pipeline.io_depth), "64", 1, 4096, NULL,
     "Reads in flight per extractor thread (io_uring queue depth)."},
    {"pipeline.io", K_ENUM, OFF(pipeline.io), "\"direct\"", 0, 0, io_modes,
     "How feature rows are read: io_uring with O_DIRECT, io_uring through the page cache, or a memory map."},
    {"pipeline.topology", K_ENUM, OFF(pipeline.topology), "\"auto\"", 0, 0, topology_modes,
     "How each rank's sampler reaches the graph's in-neighbour lists (indices.bin). memory: read whole into memory "
     "at start with large sequential reads (its size per rank). mmap: mapped, pages faulted in on first use and "
     "evicted under memory pressure. cache: Ginex's neighbour cache of pipeline.neighbour_cache_mb, the lists of the "
     "nodes with the highest out/in-degree ratio, the rest read with direct I/O per hop. auto: memory when the "
     "memory plan has room for it, else cache sized by the plan (docs/architecture.md, \"Topology\"). memory and "
     "cache also read labels.bin into memory (4 bytes a node per rank); mmap maps it."},
    {"pipeline.neighbour_cache_mb", K_AUTOINT, OFF(pipeline.neighbour_cache_mb), "\"auto\"", 1, 1e8, NULL,
     "Neighbour cache per rank in MiB with pipeline.topology = \"cache\": its index (8 bytes a node) and the "
     "cached lists. auto: what gnnlaunch's memory plan leaves for it."},
    {"pipeline.ordered", K_BOOL, OFF(pipeline.ordered), "false", 0, 0, NULL,
     "Deliver batches to the trainer in sampling order (reproducible runs) instead of as they complete."},
    {"pipeline.warm_start", K_ENUM, OFF(pipeline.warm_start), "\"auto\"", 0, 0, warm_modes,
     "Fill the feature buffer at launch with one sequential pass of large direct reads over features.bin, "
     "overlapped with the first batches, instead of one random read per row (docs/architecture.md, \"Warm "
     "start\"). auto: when every row fits in the feature buffer (in host memory or on a GPU), or else the hot set "
     "a static cache policy pins; on: every row, and a run where they do not fit stops before it starts; off: "
     "never."},
    {"pipeline.huge_pages", K_BOOL, OFF(pipeline.huge_pages), "true", 0, 0, NULL,
     "Let the warm start turn the feature rows' memory into 2 MiB pages (MADV_COLLAPSE, Linux 6.1+) just ahead of "
     "its reads, so the trainer's random row reads miss the TLB less (docs/architecture.md, \"Warm start\"). It "
     "costs start-up time where the host backs guest memory slowly (0.3-0.5 s per GiB on a 2-core VM): false keeps "
     "small pages. Rows on a GPU are not affected."},
    {"pipeline.stall_timeout_s", K_FLOAT, OFF(pipeline.stall_timeout_s), "120", 0, 1e6, NULL,
     "A stage whose heartbeat is older than this many seconds while work waits for it (it is stopped, or stuck) "
     "stops the run (exit 3) naming the stage, rank, pid and how long it was silent. A stage's start-up before "
     "its first batch is not counted. 0: never."},
    {"pipeline.cache_policy", K_ENUM, OFF(pipeline.cache_policy), "\"auto\"", 0, 0, cache_policies,
     "How the feature buffer picks the row to evict (docs/architecture.md, \"Cache policies\"): auto (lookahead "
     "when the buffer holds fewer rows than the dataset has nodes, else lru: bench/results/"
     "cache-policy-2026-11-25.md); lru (the least recently released row); lookahead (the row whose next use in the next pipeline.lookahead sampled batches is "
     "farthest, or absent: the sampler runs that far ahead to tell it); static (the pipeline.hot_fraction of "
     "the slots with the highest out-degree nodes pinned at start, PaGraph's rule, the rest lru); "
     "lookahead-static (the same hot set pinned, the rest lookahead)."},
    {"pipeline.lookahead", K_INT, OFF(pipeline.lookahead), "32", 1, 4096, NULL,
     "Batches the sampler announces to a lookahead policy ahead of the one it samples, as far as "
     "pipeline.lookahead_mb holds their rows (each batch is sampled twice: once to announce it, once for real)."},
    {"pipeline.lookahead_mb", K_INT, OFF(pipeline.lookahead_mb), "64", 1, 1e6, NULL,
     "Most MiB of the lookahead policy's hint log (12 bytes per announced row; the window's rows beyond it are "
     "not announced). It lives in the feature buffer's shared memory, beside 4 bytes per node."},
    {"pipeline.hot_fraction", K_FLOAT, OFF(pipeline.hot_fraction), "0.5", 0, 0.95, NULL,
     "Share of the feature buffer's slots (less the extraction reserve) pinned to the hot set by the static "
     "policies."},
    {"pipeline.mode", K_ENUM, OFF(pipeline.mode), "\"online\"", 0, 0, pipeline_modes,
     "Where batches come from (docs/packed.md): online (the sampler samples each batch as the run goes and the "
     "extractor reads each row where features.bin has it) or packed (batches sampled ahead by gnnprep pack: the "
     "sampler reads them from pipeline.pack, the extractor reads each batch's rows from its chunk in a few large "
     "reads and keeps the pack's hot tier pinned in the feature buffer; the same batches, fixed by the pack) or "
     "partitions (docs/partitions.md: an epoch is a sequence of partition buffer states read whole from the layout "
     "gnnprep partition wrote; training batches are sampled among the nodes in the buffer and their rows copied out "
     "of it, evaluation batches are sampled and read as online). For model.kind = distmult | complex, partitions "
     "keeps the node embeddings out of core (docs/link.md, \"Out of core\")."},
    {"pipeline.pack", K_STR, OFF(pipeline.pack), "\"\"", 0, 0, NULL,
     "The pack a run with pipeline.mode = \"packed\" reads (a directory gnnprep pack wrote for this dataset and "
     "these sampling keys; relative to the current directory)."},
    {"pipeline.partitions", K_AUTOINT, OFF(pipeline.partitions), "\"auto\"", 0, PARTS_MAX, NULL,
     "pipeline.mode = \"partitions\" (docs/partitions.md): the layout DATASET/parts.P that gnnprep partition "
     "wrote, by its P; \"auto\" (or 0): the dataset's only layout. Link prediction: the node table's partitions "
     "(2 .. nodes; \"auto\": 16), written by the run itself."},
    {"pipeline.buffer_partitions", K_AUTOINT, OFF(pipeline.buffer_partitions), "\"auto\"", 0, PARTS_MAX, NULL,
     "pipeline.mode = \"partitions\": the partitions the buffer holds at once (c, at most P); \"auto\" (or 0): "
     "the largest c whose partitions fit half of what the memory plan leaves for buffers, as gnnprep "
     "partition-plan tunes it (MariusGNN section 6). Link prediction: 2 .. P; \"auto\": the most whose partitions, "
     "with a spare, fit half the memory limit."},
    {"pipeline.partition_order", K_ENUM, OFF(pipeline.partition_order), "\"comet\"", 0, 0, partition_orders,
     "pipeline.mode = \"partitions\": the order of the buffer states, comet (MariusGNN; one state per epoch "
     "when the training partitions fit the buffer) or beta (Marius's IO-greedy baseline). Link prediction: beta "
     "for the embeddings alone (comet refused); with model.encoder = \"sage\" comet (edge buckets drawn among "
     "the states that hold them) or beta."},
    {"pipeline.partition_fill", K_ENUM, OFF(pipeline.partition_fill), "\"auto\"", 0, 0, partition_fills,
     "pipeline.mode = \"partitions\", comet with the training partitions fitting the buffer (one state an "
     "epoch): the slots beside the training partitions hold random others, drawn again each epoch "
     "(MariusGNN), or the first partitions, the same every epoch (no reads after the first state); "
     "\"auto\": first for a layout made with gnnprep partition --order neighbours (which puts the "
     "training nodes' nearest neighbours there), else random."},
    {"pipeline.partition_eval", K_ENUM, OFF(pipeline.partition_eval), "\"auto\"", 0, 0, partition_evals,
     "pipeline.mode = \"partitions\": where validation and test batches are sampled and extracted: "
     "\"buffer\", inside the epoch's buffer state (neighbours among the nodes in memory, rows copied from the "
     "buffer, no read of features.bin; needs a layout made with gnnprep partition --eval-first and one state "
     "an epoch holding its eval_parts), \"graph\", on the whole graph with rows read from features.bin as "
     "online; \"auto\": buffer when the layout and the buffer allow it and the layout was made with --order "
     "neighbours (elsewhere in-buffer evaluation sees too few neighbours), else graph."},
    {"pipeline.trace_rows", K_STR, OFF(pipeline.trace_rows), "\"\"", 0, 0, NULL,
     "Records the rows each rank's extractor requests, batch by batch, into FILE.rank<R> (binary, "
     "stages/cachesim.h) for `gnnprep cache-sim`. Empty: no trace."},

    {"link.loss", K_ENUM, OFF(link.loss), "\"softmax\"", 0, 0, link_losses,
     "distmult/complex: softmax (cross-entropy of each positive among its chunk's negatives, Marius), logistic "
     "(softplus of every positive and negative score, PyG's ComplEx) or margin (max(0, link.margin - positive + "
     "negative) per pair, PyG's DistMult)."},
    {"link.margin", K_FLOAT, OFF(link.margin), "1", 0, 1e6, NULL, "link.loss = \"margin\": the margin."},
    {"link.negatives", K_INT, OFF(link.negatives), "100", 1, 1e6, NULL,
     "Negative nodes per chunk of positives, shared by the chunk's positives (Marius's batched negatives)."},
    {"link.chunk", K_INT, OFF(link.chunk), "100", 1, 1e7, NULL, "Positives sharing one set of negatives."},
    {"link.degree_frac", K_FLOAT, OFF(link.degree_frac), "0.5", 0, 1, NULL,
     "Share of negatives drawn in proportion to training degree (an endpoint of a random training triple); the "
     "rest are uniform nodes."},
    {"link.sides", K_ENUM, OFF(link.sides), "\"both\"", 0, 0, link_sides,
     "What negatives replace: both heads and tails (Marius), tails only, or pyg (one uniform negative per "
     "positive, heads in the batch's first half, tails in its second: PyG's KGEModel.loss; link.negatives and "
     "link.chunk are then 1)."},
    {"link.init", K_ENUM, OFF(link.init), "\"xavier\"", 0, 0, link_inits,
     "Embedding initialisation: xavier (torch's xavier_uniform_ per table, as PyG) or uniform in "
     "+-link.init_scale."},
    {"link.init_scale", K_FLOAT, OFF(link.init_scale), "0.001", 0, 1e3, NULL, "link.init = \"uniform\": the bound."},
    {"link.eval", K_ENUM, OFF(link.eval), "\"filtered\"", 0, 0, link_evals,
     "Ranking of validation and test answers: filtered (other known answers from any split left out) or raw."},
    {"link.eval_heads", K_BOOL, OFF(link.eval_heads), "false", 0, 0, NULL,
     "Rank heads as well as tails (MRR and Hits over both directions, as Marius reports); false: tails only, as "
     "PyG's KGEModel.test."},
    {"link.eval_sampled", K_INT, OFF(link.eval_sampled), "0", 0, 1e7, NULL,
     "Rank each answer among this many uniformly drawn nodes instead of all nodes (for graphs too large to rank "
     "fully). 0: all nodes."},
    {"link.encoder_lr", K_FLOAT, OFF(link.encoder_lr), "0.01", 1e-9, 10, NULL,
     "model.encoder = \"sage\": the learning rate of Adam (torch's defaults otherwise) on the encoder's weights; "
     "the node and relation embeddings keep Adagrad at train.lr."},
};

/* The keys that decide what a run computes: its identity (config_run_text). */
static const char *const run_keys[] = {
    "model.kind",        "model.layers",      "model.hidden",     "model.fanouts",  "model.dropout",
    "model.input_dropout", "model.attention_dropout", "model.activation", "model.gcn_norm", "model.aggr", "model.heads",
    "model.out_heads",   "train.batch_size",  "train.lr",         "train.optimizer", "train.weight_decay",
    "train.seed",        "train.lr_schedule", "train.warmup_steps", "train.lr_step_epochs", "train.lr_gamma",
    "train.lr_min",      "train.grad_clip",   "pipeline.ranks", "link.loss", "link.margin", "link.negatives",
    "link.chunk", "link.degree_frac", "link.sides", "link.init", "link.init_scale"};
/* pipeline.mode = "partitions" changes what a run computes (each epoch
 * trains on the subgraphs its buffer states hold), so its keys join the
 * run text in that mode only: an online or packed run (the same samples
 * as online) keeps the identity it had before partitions existed. The
 * launcher resolves "auto" before the identity is taken, so the text
 * holds the p and c the run used. Likewise the link encoder's keys, only
 * with an encoder: a run without one keeps the identity it had before. */
static const char *const run_keys_partitions[] = {"pipeline.mode",           "pipeline.partitions",
                                                  "pipeline.buffer_partitions", "pipeline.partition_order",
                                                  "pipeline.partition_fill", "pipeline.partition_eval"};
static const char *const run_keys_encoder[] = {"model.encoder", "link.encoder_lr"};

#define NKEYS (sizeof keys / sizeof keys[0])
_Static_assert(NKEYS <= CONFIG_KEYS_MAX, "raise CONFIG_KEYS_MAX: one given flag per key");
static const char *const sections[] = {"dataset", "model", "train", "pipeline", "link"};

const char *partition_fill_name(int f) { return (unsigned)f < 3 ? partition_fills[f] : "?"; }
int partition_fill_parse(const char *s)
{
    for (int i = 0; s && partition_fills[i]; i++)
        if (!strcmp(s, partition_fills[i]))
            return i;
    return -1;
}
const char *partition_eval_name(int e) { return (unsigned)e < 3 ? partition_evals[e] : "?"; }
int partition_eval_parse(const char *s)
{
    for (int i = 0; s && partition_evals[i]; i++)
        if (!strcmp(s, partition_evals[i]))
            return i;
    return -1;
}
const char *model_kind_name(enum model_kind k) { return (unsigned)k < 6 ? model_kinds[k] : "?"; }
const char *config_nonfinite_name(enum config_nonfinite v) { return (unsigned)v < 2 ? nonfinite_modes[v] : "?"; }
const char *extract_io_name(enum extract_io io) { return (unsigned)io < 3 ? io_modes[io] : "unknown"; }
const char *cache_policy_name(enum cache_policy p) { return (unsigned)p < 5 ? cache_policies[p] : "unknown"; }
const char *topology_mode_name(enum topology_mode m) { return (unsigned)m < 4 ? topology_modes[m] : "unknown"; }
const char *pipeline_mode_name(enum pipeline_mode m)
{
    return (unsigned)m < SL_ARRAY_LEN(pipeline_modes) - 1 ? pipeline_modes[m] : "unknown";
}

int extract_io_parse(const char *s)
{
    for (int k = 0; s && io_modes[k]; k++)
        if (!strcmp(s, io_modes[k]))
            return k;
    return -1;
}

/* ---- suggestions ---- */

/* Closest of names[0..n) to s, or NULL when nothing is close. */
static const char *closest(const char *s, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t bd = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        size_t d = sl_edit_distance(s, names[i]);
        /* also match the key part alone: "fanout" vs "model.fanouts" */
        const char *dot = strchr(names[i], '.');
        if (dot && !strchr(s, '.'))
            d = SL_MIN(d, sl_edit_distance(s, dot + 1));
        if (d < bd) {
            bd = d;
            best = names[i];
        }
    }
    size_t limit = SL_MAX((size_t)2, strlen(s) / 3);
    return bd <= limit ? best : NULL;
}

static const char *closest_key(const char *s)
{
    const char *names[NKEYS];
    for (size_t i = 0; i < NKEYS; i++)
        names[i] = keys[i].name;
    return closest(s, names, NKEYS);
}

static const key *find_key(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].name, name))
            return &keys[i];
    return NULL;
}

bool config_given(const struct config *c, const char *name)
{
    const key *k = find_key(name);
    return k && c->given[k - keys];
}

int config_set_given(struct config *c, const char *name, bool given)
{
    const key *k = find_key(name);
    if (!k)
        return -EINVAL;
    c->given[k - keys] = given;
    return 0;
}

/* ---- setting values ---- */

typedef struct where {
    const char *file;   /* config file, or NULL for --set */
    const char *arg;    /* the --set argument */
} where;

/* Formats "FILE:LINE:COL: " or "--set ARG: " in front of a message. */
static int fail_at(const where *w, const struct toml_value *v, char *err, size_t errlen, const char *fmt, ...)
    SL_PRINTF(5, 6);
static int fail_at(const where *w, const struct toml_value *v, char *err, size_t errlen, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (w->file)
        return sl_errf(err, errlen, -EINVAL, "%s:%d:%d: %s", w->file, v ? v->line : 1, v ? v->col : 1, msg);
    if (w->arg)
        return sl_errf(err, errlen, -EINVAL, "--set %s: %s", w->arg, msg);
    return sl_errf(err, errlen, -EINVAL, "default of %s", msg); /* a bug in the table */
}

static const char *choices_list(const char *const *ch, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0; ch[i]; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s\"%s\"", i ? ", " : "", ch[i]);
    return buf;
}

static int set_number(const key *k, const struct toml_value *v, const where *w, double *out, char *err, size_t errlen)
{
    double x;
    if (v->type == TOML_INT)
        x = (double)v->u.i;
    else if (v->type == TOML_FLOAT && k->type == K_FLOAT)
        x = v->u.f;
    else
        return fail_at(w, v, err, errlen, "%s must be %s, not %s", k->name,
                       k->type == K_FLOAT ? "a number" : "an integer", toml_type_name(v->type));
    if (!isfinite(x) || x < k->min || x > k->max)
        return fail_at(w, v, err, errlen, "%s = %g is outside its range [%g, %g]", k->name, x, k->min, k->max);
    *out = x;
    return 0;
}

static int set_key(struct config *c, const key *k, const struct toml_value *v, const where *w, char *err, size_t errlen)
{
    char *field = (char *)c + k->off;
    double x;
    int rc;
    switch (k->type) {
    case K_STR:
        if (v->type != TOML_STRING)
            return fail_at(w, v, err, errlen, "%s must be a string, not %s", k->name, toml_type_name(v->type));
        if (strlen(v->u.s) >= sizeof c->dataset.path)
            return fail_at(w, v, err, errlen, "%s is longer than %zu bytes", k->name, sizeof c->dataset.path - 1);
        strcpy(field, v->u.s);
        return 0;
    case K_AUTOINT:
        if (v->type == TOML_STRING && !strcmp(v->u.s, "auto")) {
            *(int64_t *)field = 0;
            return 0;
        }
        if (v->type != TOML_INT)
            return fail_at(w, v, err, errlen, "%s must be \"auto\" or an integer, not %s", k->name,
                           toml_type_name(v->type));
        if ((rc = set_number(k, v, w, &x, err, errlen)) < 0)
            return rc;
        *(int64_t *)field = (int64_t)x;
        return 0;
    case K_INT:
        if ((rc = set_number(k, v, w, &x, err, errlen)) < 0)
            return rc;
        *(int64_t *)field = v->u.i;
        return 0;
    case K_FLOAT:
        if ((rc = set_number(k, v, w, &x, err, errlen)) < 0)
            return rc;
        *(double *)field = x;
        return 0;
    case K_BOOL:
        if (v->type != TOML_BOOL)
            return fail_at(w, v, err, errlen, "%s must be true or false, not %s", k->name, toml_type_name(v->type));
        *(bool *)field = v->u.b;
        return 0;
    case K_ENUM: {
        char buf[256];
        if (v->type != TOML_STRING)
            return fail_at(w, v, err, errlen, "%s must be one of %s", k->name, choices_list(k->choices, buf, sizeof buf));
        for (int i = 0; k->choices[i]; i++)
            if (!strcmp(v->u.s, k->choices[i])) {
                *(int *)field = i;
                return 0;
            }
        size_t n = 0;
        while (k->choices[n])
            n++;
        const char *near = closest(v->u.s, k->choices, n);
        return fail_at(w, v, err, errlen, "%s = \"%s\" is not one of %s%s%s%s", k->name, v->u.s,
                       choices_list(k->choices, buf, sizeof buf), near ? "; did you mean \"" : "", near ? near : "",
                       near ? "\"?" : "");
    }
    case K_INTLIST: {
        if (v->type != TOML_ARRAY || v->u.arr.n == 0 || v->u.arr.n > MODEL_LAYERS_MAX)
            return fail_at(w, v, err, errlen, "%s must be an array of 1 to %d integers, like [10, 10]", k->name,
                           MODEL_LAYERS_MAX);
        int64_t *arr = (int64_t *)field;
        for (size_t i = 0; i < v->u.arr.n; i++) {
            const struct toml_value *e = v->u.arr.v[i];
            if (e->type != TOML_INT || e->u.i == 0 || e->u.i < (int64_t)k->min || e->u.i > (int64_t)k->max)
                return fail_at(w, e, err, errlen, "%s[%zu] must be a positive integer or -1 (all neighbours)", k->name, i);
            arr[i] = e->u.i;
        }
        c->model.n_fanouts = (int64_t)v->u.arr.n;
        return 0;
    }
    }
    return -EINVAL;
}

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    where w = {0};
    for (size_t i = 0; i < NKEYS; i++) {
        if (!keys[i].def[0])
            continue;
        struct toml_value *v = toml_parse_value(keys[i].def, NULL, 0);
        if (!v || set_key(c, &keys[i], v, &w, NULL, 0) < 0)
            abort(); /* the schema's own default is invalid: a bug */
        toml_free(v);
    }
}

/* ---- loading ---- */

typedef struct seen {
    bool layers, fanouts;
} seen;

/* Records that k was given (config_given) and notes layers/fanouts. */
static void note_seen(struct config *c, seen *s, const key *k)
{
    c->given[k - keys] = true;
    if (k == find_key("model.layers"))
        s->layers = true;
    if (k == find_key("model.fanouts"))
        s->fanouts = true;
}

/* Names that PyTorch Geometric, DGL and OGB scripts use (matched on the
 * part after the section, so any section), and what does the job here. */
static const struct {
    const char *name, *say;
} pyg_names[] = {
    {"hidden_channels", "model.hidden"},
    {"hidden_dim", "model.hidden"},
    {"num_layers", "model.layers (or model.fanouts, one entry per layer)"},
    {"num_neighbors", "model.fanouts"},
    {"num_heads", "model.heads (model.out_heads for the last layer)"},
    {"aggr", "model.aggr (GraphSAGE: mean, sum or max)"},
    {"learning_rate", "train.lr"},
    {"num_epochs", "train.epochs"},
    {"runs", "train.seed, one run per seed (--set train.seed=N)"},
    {"num_workers", "pipeline.samplers and pipeline.extractors (the loader's workers are stages here)"},
    {"batchsize", "train.batch_size"},
    {"wd", "train.weight_decay"},
    {"device", "gnnlaunch --gpus N or --cpu (not a config key)"},
};

static int unknown_key(const where *w, const struct toml_value *v, const char *name, char *err, size_t errlen)
{
    const char *dot = strchr(name, '.'), *tail = dot ? dot + 1 : name;
    for (size_t i = 0; i < SL_ARRAY_LEN(pyg_names); i++)
        if (!strcmp(tail, pyg_names[i].name))
            return fail_at(w, v, err, errlen, "unknown key %s; PyG's %s is %s here", name, pyg_names[i].name,
                           pyg_names[i].say);
    const char *near = closest_key(name);
    if (near)
        return fail_at(w, v, err, errlen, "unknown key %s; did you mean %s?", name, near);
    return fail_at(w, v, err, errlen, "unknown key %s (docs/config.md lists every key)", name);
}

static int load_file(struct config *c, const char *path, seen *s, char *err, size_t errlen)
{
    struct toml_value *root = toml_parse_file(path, err, errlen);
    if (!root)
        return strstr(err, "cannot open") ? -ENOENT : -EINVAL;
    where w = {.file = path};
    int rc = 0;
    for (size_t i = 0; i < root->u.tab.n && rc == 0; i++) {
        const char *sec = root->u.tab.kv[i].key;
        const struct toml_value *tab = root->u.tab.kv[i].val;
        bool known = false;
        for (size_t j = 0; j < SL_ARRAY_LEN(sections); j++)
            known |= !strcmp(sec, sections[j]);
        if (!known || tab->type != TOML_TABLE) {
            if (tab->type != TOML_TABLE) {
                rc = unknown_key(&w, tab, sec, err, errlen);
            } else {
                const char *near = closest(sec, sections, SL_ARRAY_LEN(sections));
                rc = fail_at(&w, tab, err, errlen, "unknown section [%s]%s%s%s", sec, near ? "; did you mean [" : "",
                             near ? near : "", near ? "]?" : " (sections: dataset, model, train, pipeline)");
            }
            break;
        }
        for (size_t j = 0; j < tab->u.tab.n && rc == 0; j++) {
            char name[512];
            snprintf(name, sizeof name, "%s.%s", sec, tab->u.tab.kv[j].key);
            const struct toml_value *v = tab->u.tab.kv[j].val;
            const key *k = find_key(name);
            if (!k || (v->type == TOML_TABLE)) {
                rc = unknown_key(&w, v, name, err, errlen);
                break;
            }
            rc = set_key(c, k, v, &w, err, errlen);
            note_seen(c, s, k);
        }
    }
    toml_free(root);
    return rc;
}

static int apply_set(struct config *c, const char *arg, seen *s, char *err, size_t errlen)
{
    where w = {.arg = arg};
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return fail_at(&w, NULL, err, errlen, "expected section.key=value, like --set train.lr=0.01");
    char name[256];
    size_t n = (size_t)(eq - arg);
    if (n >= sizeof name)
        return fail_at(&w, NULL, err, errlen, "key is too long");
    memcpy(name, arg, n);
    name[n] = '\0';
    const key *k = find_key(name);
    if (!k)
        return unknown_key(&w, NULL, name, err, errlen);
    char perr[512];
    struct toml_value *v = toml_parse_value(eq + 1, perr, sizeof perr);
    if (!v)
        return fail_at(&w, NULL, err, errlen, "bad value: %s", perr[0] ? perr : "empty");
    int rc = set_key(c, k, v, &w, err, errlen);
    toml_free(v);
    note_seen(c, s, k);
    return rc;
}

static int validate(struct config *c, const seen *s, const char *path, char *err, size_t errlen)
{
    const char *src = path ? path : "the configuration";
    if (!c->dataset.path[0])
        return sl_errf(err, errlen, -EINVAL, "%s: dataset.path is required; add [dataset] path = \"DIR\" or "
                       "--set dataset.path=DIR", src);
    if (s->fanouts && !s->layers) {
        c->model.layers = c->model.n_fanouts;
    } else if (s->layers && !s->fanouts) {
        for (int64_t i = 0; i < c->model.layers; i++)
            c->model.fanouts[i] = 10;
        c->model.n_fanouts = c->model.layers;
    } else if (c->model.n_fanouts != c->model.layers) {
        return sl_errf(err, errlen, -EINVAL, "%s: model.layers = %" PRId64 " but model.fanouts has %" PRId64
                       " entries; give one fanout per layer", src, c->model.layers, c->model.n_fanouts);
    }
    if (c->model.kind == MODEL_GAT && c->model.hidden % c->model.heads)
        return sl_errf(err, errlen, -EINVAL, "%s: model.hidden = %" PRId64 " is not a multiple of model.heads = %" PRId64
                       " (GAT concatenates the heads)", src, c->model.hidden, c->model.heads);
    if (c->model.kind == MODEL_COMPLEX && c->model.hidden % 2)
        return sl_errf(err, errlen, -EINVAL, "%s: model.hidden = %" PRId64 " is odd; complex embeddings hold real and "
                       "imaginary halves, so it must be even", src, c->model.hidden);
    if (c->model.encoder != MODEL_ENCODER_NONE && !model_kind_is_link(c->model.kind))
        return sl_errf(err, errlen, -EINVAL, "%s: model.encoder = \"sage\" puts a GNN under a link-prediction "
                       "decoder, so it needs model.kind = \"distmult\" or \"complex\", not \"%s\" (a node-classification "
                       "model is a GNN already: drop model.encoder)", src, model_kind_name(c->model.kind));
    if (c->pipeline.mode == PIPELINE_PACKED && !c->pipeline.pack[0])
        return sl_errf(err, errlen, -EINVAL, "%s: pipeline.mode = \"packed\" needs pipeline.pack, the directory "
                       "gnnprep pack wrote; add it or --set pipeline.pack=DIR", src);
    if (c->pipeline.partitions > 0 && c->pipeline.buffer_partitions > c->pipeline.partitions)
        return sl_errf(err, errlen, -EINVAL, "%s: pipeline.buffer_partitions = %" PRId64 " is above pipeline.partitions "
                       "= %" PRId64 "; the buffer holds at most every partition", src, c->pipeline.buffer_partitions,
                       c->pipeline.partitions);
    if (c->train.lr_schedule == LR_COSINE && c->train.lr_min > c->train.lr)
        return sl_errf(err, errlen, -EINVAL, "%s: train.lr_min = %g is above train.lr = %g; the cosine schedule falls "
                       "from train.lr to train.lr_min", src, c->train.lr_min, c->train.lr);
    return 0;
}

int config_load(struct config *c, const char *path, const char *const *sets, int nsets, char *err, size_t errlen)
{
    config_defaults(c);
    seen s = {0};
    int rc = 0;
    if (path)
        rc = load_file(c, path, &s, err, errlen);
    for (int i = 0; rc == 0 && i < nsets; i++)
        rc = apply_set(c, sets[i], &s, err, errlen);
    if (rc == 0)
        rc = validate(c, &s, path, err, errlen);
    return rc;
}

/* ---- writing ---- */

static const char *type_doc(const key *k)
{
    switch (k->type) {
    case K_STR: return "string";
    case K_INT: return "integer";
    case K_AUTOINT: return "integer or \"auto\"";
    case K_FLOAT: return "float";
    case K_BOOL: return "boolean";
    case K_ENUM: return "string";
    case K_INTLIST: return "array of integers";
    }
    return "?";
}

void config_write_reference(FILE *f)
{
    fprintf(f, "# Configuration reference\n\n"
               "<!-- Generated from the schema in core/config.c by\n"
               "     `build/tests/test_config --write-reference docs/config.md`; a test keeps it in sync. -->\n\n"
               "A run is configured by one TOML file (`gnnlaunch CONFIG`) plus overrides\n"
               "(`--set section.key=value`, where value is TOML: `--set model.fanouts=[15,10]`,\n"
               "`--set train.lr=0.01`; a bare word is a string: `--set model.kind=gat`).\n"
               "Overrides apply in order after the file. Unknown keys, wrong types and values\n"
               "out of range are errors naming the file, line and column (or the `--set`\n"
               "argument) and suggesting the closest valid key; the names PyTorch Geometric\n"
               "scripts use (`hidden_channels`, `num_layers`, `num_neighbors`, `learning_rate`,\n"
               "`num_workers`, ...) are answered with the key that does the job here.\n"
               "Relative paths are relative to the current directory.\n");
    for (size_t s = 0; s < SL_ARRAY_LEN(sections); s++) {
        fprintf(f, "\n## [%s]\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n", sections[s]);
        for (size_t i = 0; i < NKEYS; i++) {
            const key *k = &keys[i];
            size_t sl = strlen(sections[s]);
            if (strncmp(k->name, sections[s], sl) || k->name[sl] != '.')
                continue;
            char allowed[256] = "";
            if (k->type == K_ENUM)
                choices_list(k->choices, allowed, sizeof allowed);
            else if (k->type == K_INT || k->type == K_FLOAT || k->type == K_INTLIST)
                snprintf(allowed, sizeof allowed, k->max >= BIG ? "%g .. " : "%g .. %g", k->min, k->max);
            else if (k->type == K_AUTOINT)
                snprintf(allowed, sizeof allowed, "\"auto\", %g .. %g", k->min, k->max);
            else if (k->type == K_BOOL)
                snprintf(allowed, sizeof allowed, "true, false");
            if (k->type == K_INTLIST)
                snprintf(allowed, sizeof allowed, "1..%d items, each -1 or 1 .. %g", MODEL_LAYERS_MAX, k->max);
            fprintf(f, "| `%s` | %s | %s | %s | %s |\n", k->name + sl + 1, type_doc(k),
                    k->def[0] ? k->def : "(required)", allowed, k->doc);
        }
    }
}

/* A TOML basic string: quote and backslash escaped, and every control
 * character (which TOML forbids raw in a string) as a four-digit u-escape,
 * so the text loads back to the same bytes. */
static void write_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04X", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void value_text(const struct config *c, const key *k, char *buf, size_t len);

/* Every key of the table, in its order, one [section] per prefix: a new
 * key is written (and so reaches the stages) without a line here. */
void config_write_toml(const struct config *c, FILE *f)
{
    const char *section = "";
    size_t section_len = 0;
    for (size_t i = 0; i < SL_ARRAY_LEN(keys); i++) {
        const key *k = &keys[i];
        const char *dot = strchr(k->name, '.');
        size_t n = (size_t)(dot - k->name);
        if (n != section_len || strncmp(k->name, section, n)) {
            fprintf(f, "%s[%.*s]\n", i ? "\n" : "", (int)n, k->name);
            section = k->name, section_len = n;
        }
        fprintf(f, "%s = ", dot + 1);
        if (k->type == K_STR) {
            write_str(f, (const char *)c + k->off);
        } else {
            char v[512];
            value_text(c, k, v, sizeof v);
            fputs(v, f);
        }
        fputc('\n', f);
    }
}

const char *config_fanouts_str(const int64_t *f, int64_t n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int64_t k = 0; k < n && used + 1 < len; k++) {
        int w = snprintf(buf + used, len - used, "%s%" PRId64, k ? ", " : "[", f[k]);
        used += w > 0 ? (size_t)w : 0;
    }
    if (used + 1 < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

/* ---- run identity ---- */

/* Key k's value in c as TOML text. */
static void value_text(const struct config *c, const key *k, char *buf, size_t len)
{
    const char *field = (const char *)c + k->off;
    switch (k->type) {
    case K_STR:
        snprintf(buf, len, "\"%s\"", field);
        return;
    case K_INT:
        snprintf(buf, len, "%" PRId64, *(const int64_t *)field);
        return;
    case K_AUTOINT:
        if (*(const int64_t *)field == 0)
            snprintf(buf, len, "\"auto\"");
        else
            snprintf(buf, len, "%" PRId64, *(const int64_t *)field);
        return;
    case K_FLOAT: { /* the shortest text that reads back as the same double */
        double x = *(const double *)field;
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, len, "%.*g", prec, x);
            if (strtod(buf, NULL) == x)
                break;
        }
        return;
    }
    case K_BOOL:
        snprintf(buf, len, "%s", *(const bool *)field ? "true" : "false");
        return;
    case K_ENUM: {
        int i = *(const int *)field, n = 0;
        while (k->choices[n])
            n++;
        snprintf(buf, len, "\"%s\"", i >= 0 && i < n ? k->choices[i] : "?");
        return;
    }
    case K_INTLIST:
        config_fanouts_str((const int64_t *)field, c->model.n_fanouts, buf, len);
        return;
    }
    snprintf(buf, len, "?");
}

size_t config_key_count(void)
{
    return NKEYS;
}

const char *config_key_name(size_t i)
{
    return i < NKEYS ? keys[i].name : NULL;
}

void config_key_text(const struct config *c, size_t i, char *buf, size_t len)
{
    if (!len)
        return;
    buf[0] = '\0';
    if (i >= NKEYS)
        return;
    const key *k = &keys[i];
    if (k->type == K_STR) {
        snprintf(buf, len, "%s", (const char *)c + k->off);
        return;
    }
    value_text(c, k, buf, len);
    size_t n = strlen(buf);
    if (n >= 2 && buf[0] == '"' && buf[n - 1] == '"') { /* a choice or "auto": the word alone */
        memmove(buf, buf + 1, n - 2);
        buf[n - 2] = '\0';
    }
}

size_t config_run_text(const struct config *c, char *buf, size_t len)
{
    size_t used = 0;
    if (len)
        buf[0] = '\0';
    const bool parts = c->pipeline.mode == PIPELINE_PARTITIONS, enc = c->model.encoder != MODEL_ENCODER_NONE;
    const size_t n0 = SL_ARRAY_LEN(run_keys), n1 = n0 + (enc ? SL_ARRAY_LEN(run_keys_encoder) : 0),
                 n = n1 + (parts ? SL_ARRAY_LEN(run_keys_partitions) : 0);
    for (size_t i = 0; i < n; i++) {
        const key *k = find_key(i < n0 ? run_keys[i] : i < n1 ? run_keys_encoder[i - n0] : run_keys_partitions[i - n1]);
        char v[256];
        value_text(c, k, v, sizeof v);
        int w = snprintf(used < len ? buf + used : NULL, used < len ? len - used : 0, "%s = %s\n", k->name, v);
        used += w > 0 ? (size_t)w : 0;
    }
    return used;
}

uint64_t config_run_identity(const struct config *c, uint64_t dataset_id)
{
    char text[4096];
    size_t n = config_run_text(c, text, sizeof text);
    uint8_t id[8];
    for (int i = 0; i < 8; i++)
        id[i] = (uint8_t)(dataset_id >> (8 * i)); /* little endian, whatever the host */
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, text, SL_MIN(n, sizeof text - 1));
    XXH3_64bits_update(st, id, sizeof id);
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* The value of `name` in a run text (a line "name = VALUE"), into v; false
 * when absent. */
static bool run_text_value(const char *text, const char *name, char *v, size_t len)
{
    size_t n = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, n) || strncmp(p + n, " = ", 3))
            continue;
        const char *s = p + n + 3, *e = strchr(s, '\n');
        size_t m = e ? (size_t)(e - s) : strlen(s);
        snprintf(v, len, "%.*s", (int)SL_MIN(m, len - 1), s);
        return true;
    }
    return false;
}

int config_run_diff(const char *a, const char *b, char *out, size_t len)
{
    int ndiff = 0;
    size_t used = 0;
    if (len)
        out[0] = '\0';
    /* every key named in either text, in a's order then b's new ones */
    const char *texts[2] = {a, b};
    for (int t = 0; t < 2; t++)
        for (const char *p = texts[t]; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
            const char *eq = strstr(p, " = "), *nl = strchr(p, '\n');
            if (!eq || (nl && eq > nl))
                continue;
            char name[128], va[256], vb[256];
            snprintf(name, sizeof name, "%.*s", (int)SL_MIN((size_t)(eq - p), sizeof name - 1), p);
            if (t == 1 && run_text_value(a, name, va, sizeof va))
                continue; /* compared in the first pass */
            bool ha = run_text_value(a, name, va, sizeof va), hb = run_text_value(b, name, vb, sizeof vb);
            if (ha && hb && !strcmp(va, vb))
                continue;
            ndiff++;
            int w = snprintf(used < len ? out + used : NULL, used < len ? len - used : 0, "%s%s: %s -> %s",
                             ndiff > 1 ? "; " : "", name, ha ? va : "(absent)", hb ? vb : "(absent)");
            used += w > 0 ? (size_t)w : 0;
        }
    return ndiff;
}
