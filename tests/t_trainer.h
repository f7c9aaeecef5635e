/* t_trainer.h - test helpers for the trainer backends
 * (stages/trainer_backend.h), shared by test_trainer_cuda_shim.c (the CUDA
 * backend built on the host against the CPU backend, bit for bit) and
 * test_trainer_cuda.c (the same on a device, within GEMM tolerance): a
 * random graph with feature rows in a feature buffer of slots (f32 or
 * f16, rows at a permuted slot per node), batches sampled from it with
 * their aliases filled as an extractor would, training and evaluation
 * steps as trainer_main.c makes them, checkpoints written and read as
 * trainer_main.c does (every tensor, adam.m.<name>, adam.v.<name>), and a
 * comparison of float arrays that is exact (memcmp) at zero tolerance.
 * Uses cmocka: failures end the calling test. */
#ifndef SLUICE_T_TRAINER_H
#define SLUICE_T_TRAINER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/batch.h"
#include "ops/model.h"
#include "stages/featbuf.h"
#include "stages/trainer_backend.h"
#include "t_batch.h"

#define T_TR_BATCHES 6
#define T_TR_DIM 12    /* feature width */
#define T_TR_CLASSES 5 /* t_csc_random's labels: 0 .. 4, a few -1 */

struct t_tr_data {
    struct t_csc g;
    struct featbuf fb; /* only rows, stride, row_bytes and nslots are set */
    bool f16;
    void *slot[T_TR_BATCHES];
    struct batch_view v[T_TR_BATCHES];
};

/* A graph of 500 nodes, its rows (f16 or f32) and T_TR_BATCHES batches of
 * 24 targets with fanouts {5, 3}, all from seed. */
void t_tr_data_make(struct t_tr_data *d, bool f16, uint64_t seed);
void t_tr_data_free(struct t_tr_data *d);

/* A backend configuration over d: 2 layers, hidden 8, gat 2 heads. */
struct trainer_backend_config t_tr_config(const struct t_tr_data *d, enum model_kind kind, float dropout,
                                          uint64_t seed);

/* Creates a backend; fails the test on error. */
struct trainer_backend *t_tr_create(const struct trainer_backend_ops *ops, const struct trainer_backend_config *c);

/* One batch as trainer_main.c handles it: gather, forward (train: dropout
 * from seed), and for training batches backward (when labelled) and
 * step(false, 1). out gets the loss. */
void t_tr_batch(const struct trainer_backend_ops *ops, struct trainer_backend *b, const struct batch_view *v,
                bool train, uint64_t seed, struct trainer_loss *out);

/* ops->state(b), checked (n = model_param_count). */
void t_tr_state(const struct trainer_backend_ops *ops, struct trainer_backend *b, const struct model_config *mc,
                struct trainer_state *s);

/* Fails unless a and b (n floats) agree: bit for bit when abs_tol and
 * rel_tol are 0, else |a - b| <= abs_tol + rel_tol |b| everywhere; what
 * names the arrays in the message. Returns the largest |a - b|. */
double t_tr_close(const float *a, const float *b, size_t n, double abs_tol, double rel_tol, const char *what);

/* Both losses agree (loss within the tolerances, counts exactly). */
void t_tr_loss_close(const struct trainer_loss *a, const struct trainer_loss *b, double rel_tol, const char *what);

/* Writes backend b's parameters and Adam state to path as trainer_main.c
 * does, and loads path into backend b (state, copy by name, state_loaded). */
void t_tr_ckpt_save(const struct trainer_backend_ops *ops, struct trainer_backend *b, const struct model_config *mc,
                    const char *path);
void t_tr_ckpt_load(const struct trainer_backend_ops *ops, struct trainer_backend *b, const struct model_config *mc,
                    const char *path);

#endif
