/* partorder.h - the order of a partition buffer over one epoch: which
 * partitions are in memory, state after state, and which training
 * targets each state trains (MariusGNN §3, §5; Marius §4.1), plus the
 * auto-tuning of the number of partitions and of the buffer from a memory
 * budget (MariusGNN §6). A pure module: no I/O, no threads, no clocks.
 *
 * Terms. The nodes are split into p physical partitions (gnnprep
 * partition). A buffer of c slots holds c of them. An epoch is a sequence
 * of buffer states S_0, S_1, ...; the run loads S_0 whole, and every later
 * state differs from the one before in the partitions it loads ("swaps").
 * Targets (training nodes) are assigned each to exactly one state that
 * holds its partition; the state trains those (X_i of the paper) and its
 * sampler sees only the nodes of the partitions in the buffer.
 *
 * Slots. A state is c slots, slot j holding a partition or PO_EMPTY. A
 * partition never moves between slots while it stays in the buffer, so a
 * swap is a slot whose partition changed to a new one: the buffer loads
 * exactly the slots that differ from the state before, into those slots.
 * No partition is in two slots of a state: a state never exceeds c.
 *
 * Coverage. PO_COVER_NODES: every partition is in at least one state
 * (node classification: a target can train only where its partition is
 * in memory; MariusGNN §5.2). PO_COVER_PAIRS: every pair of partitions is
 * in one state together (every edge bucket can be seen, the goal of BETA
 * and COMET for link prediction). The swaps either needs at least:
 *   nodes  p - c
 *   pairs  ceil((p(p-1)/2 - c(c-1)/2) / (c-1))        (Marius eq. 2)
 *
 * Orderings (enum po_order; po_order_name/po_order_parse, extend both):
 *   comet  MariusGNN. With the targets in the first k partitions and
 *          k < c (node coverage): one state per epoch, partitions 0..k-1
 *          plus c-k others drawn at random; no swaps inside the epoch.
 *          (po_params.fixed_parts f keeps 0..f-1 in instead of 0..k-1:
 *          with f = c the state is partitions 0..c-1 every epoch, which a
 *          layout ordered by neighbourhood fills with the training nodes'
 *          nearest neighbours.)
 *          Otherwise the p physical partitions are grouped at random into
 *          l logical partitions of g = ceil(p/l) or g-1 physical ones,
 *          the buffer holds c_l = floor(c/g) logical ones, and the states
 *          swap one whole logical partition at a time: for nodes, a random
 *          logical partition in the buffer leaves for one that has not
 *          been in yet, until all have been; for pairs, BETA over the
 *          logical partitions. Each target goes to a state drawn uniformly
 *          among those holding its partition (randomised deferred
 *          assignment), so the states train balanced, uncorrelated sets.
 *   beta   Marius's IO-greedy baseline: Algorithm 3 over the physical
 *          partitions in id order (for nodes, cut off once every
 *          partition has been in), and each target trains in the first
 *          state that holds its partition (greedy, immediate).
 *
 * Determinism. A plan is a function of struct po_params only (the seed
 * included; a run derives one seed per epoch); the assignment adds the
 * targets and their partitions, each target's draw depending on the seed
 * and its id, never on the order the targets come in. */
#ifndef SLUICE_CORE_PARTORDER_H
#define SLUICE_CORE_PARTORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PO_EMPTY UINT32_MAX
/* Bounds on p and c: a plan's states * c table stays small (p^2 for BETA). */
#define PO_MAX_PARTS 65536u

enum po_order {
    PO_ORDER_COMET = 0,
    PO_ORDER_BETA,
    PO_ORDERS /* count; new orderings go above */
};
const char *po_order_name(enum po_order o);           /* "comet", "beta"; "?" */
int po_order_parse(const char *s, enum po_order *out); /* 0 or -EINVAL */

enum po_cover { PO_COVER_NODES = 0, PO_COVER_PAIRS };
const char *po_cover_name(enum po_cover c); /* "nodes", "pairs" */

struct po_params {
    uint32_t parts;       /* p >= 1 */
    uint32_t slots;       /* c, 1..p (pairs: 2..p unless p = 1) */
    uint32_t logical;     /* l for comet, 1..p; 0 = MariusGNN's rule (c_l = 2 logical in the buffer) */
    uint32_t train_parts; /* k: the targets are in partitions [0, k); p (or 0) when spread over all */
    uint32_t fixed_parts; /* the k < c rule: partitions [0, min(max(k, f), c)) are in the state, the rest
                             drawn at random; 0 (or k) = MariusGNN's rule, c = the first c partitions
                             (pipeline.partition_fill = "first"). Ignored outside the rule. */
    enum po_order order;
    enum po_cover cover;
    uint64_t seed;
};

struct po_plan {
    uint32_t parts, slots;
    uint32_t logical, logical_slots; /* l and c_l as used (comet; beta: p and c) */
    uint32_t group;                  /* g: physical partitions per logical one, at most */
    bool single;                     /* the k < c rule: one state, all targets */
    uint32_t states;                 /* |S| */
    uint32_t *slot;                  /* (states, slots): slot[s * slots + j], PO_EMPTY = free */
    uint64_t swaps;                  /* partitions loaded after S_0, counted as the states were made */
    uint64_t first_loads;            /* partitions in S_0 */
    /* Filled by po_plan_assign: the targets of state s are
     * targets[target_off[s] .. target_off[s + 1]), in the order given. */
    uint64_t *target_off;            /* (states + 1) */
    uint64_t *targets;               /* (n) */
    uint64_t ntargets;
};

/* Builds the states of one epoch. 0, -EINVAL (bad parameters; err says
 * which) or -ENOMEM. Frees nothing of an earlier plan: call po_plan_free. */
int po_plan_build(struct po_plan *pl, const struct po_params *pp, char *err, size_t errlen);
/* Assigns n targets (ids targets[i] in partition part[i] < p) to states as
 * the ordering says. -EINVAL if a partition is out of range or in no
 * state (the k < c rule with a target outside [0, k)). */
int po_plan_assign(struct po_plan *pl, enum po_order order, uint64_t seed, const uint64_t *targets,
                   const uint32_t *part, uint64_t n, char *err, size_t errlen);
void po_plan_free(struct po_plan *pl); /* accepts a zeroed or half-built plan */

/* Partition of slot j of state s. */
static inline uint32_t po_slot(const struct po_plan *pl, uint32_t s, uint32_t j) { return pl->slot[(uint64_t)s * pl->slots + j]; }
/* Partitions state s loads: its slots that differ from state s-1 (all of
 * S_0's non-empty slots for s = 0). */
uint32_t po_state_loads(const struct po_plan *pl, uint32_t s);
/* Partitions in next's S_0 that are not in prev's last state: what a
 * buffer that keeps prev's last state loads to start the next epoch. */
uint64_t po_epoch_carry_loads(const struct po_plan *prev, const struct po_plan *next);

/* Swaps the ordering makes for these parameters, computed without
 * building the plan (po_plan_build's count is the same number). */
uint64_t po_expected_swaps(const struct po_params *pp);
/* Lower bounds on the swaps of any ordering with p partitions and c slots. */
uint64_t po_lower_bound_nodes(uint32_t p, uint32_t c);
uint64_t po_lower_bound_pairs(uint32_t p, uint32_t c); /* Marius eq. 2; 0 when c >= p; needs c >= 2 */
/* Marius eq. 3: the swaps of BETA over p partitions with c slots. */
uint64_t po_beta_swaps(uint32_t p, uint32_t c);
/* The logical partitions MariusGNN's rule picks: the fewest l with
 * floor(c / ceil(p/l)) >= 2 (c_l = 2), or p when c < 2... */
uint32_t po_auto_logical(uint32_t p, uint32_t c);

/* ---- auto-tuning (MariusGNN §6) ---- */
struct po_tune_in {
    uint64_t nodes, edges;
    uint64_t row_bytes;     /* bytes a node's features take in a partition (the row stride) */
    uint64_t edge_bytes;    /* bytes an edge takes in a bucket */
    uint32_t edge_copies;   /* sorted copies of the in-buffer edges kept (MariusGNN: 2; Sluice's CSC: 1) */
    uint64_t train_nodes;   /* targets, packed into the first partitions */
    uint64_t mem_bytes;     /* the budget for the buffer (CPU of the paper) */
    uint64_t reserve_bytes; /* kept free for working memory (F of the paper) */
    uint64_t min_read;      /* D: the smallest read that still streams (paper: the block size) */
    enum po_cover cover;
    uint32_t parts;         /* p to use; 0: MariusGNN's rule below */
};
struct po_tune {
    uint32_t parts, slots, logical, logical_slots, train_parts;
    uint64_t part_bytes;   /* PO = NO / p */
    uint64_t bucket_bytes; /* EBO = EO / p^2 */
    uint64_t buffer_bytes; /* c * PO + copies * c^2 * EBO */
    bool in_memory;        /* everything fits: p = c, one state */
};
/* p = min(NO/D, sqrt(EO/D)) (at least 2, at most PO_MAX_PARTS; or in->parts
 * when given), then the
 * largest c <= p with c*PO + copies*c^2*EBO + F <= CPU, then l by
 * po_auto_logical. -ENOSPC when not even the least buffer fits (err says
 * how much it needs). */
int po_tune(const struct po_tune_in *in, struct po_tune *out, char *err, size_t errlen);

#endif
