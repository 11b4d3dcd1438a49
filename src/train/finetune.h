/* The pieces of `transmuter finetune` that do not need gradients of the graph: the loss
 * on the logits (mean cross-entropy and its gradient, as PyTorch computes them) and
 * the run dump that bench/finetune/compare.py compares with PyTorch's. Internal (tm__).
 *
 * The command (tools/finetune.c) trains on the value-and-gradient plans' own loss
 * (TM_LOSS_CROSS_ENTROPY); tm__cross_entropy computes the same in double (for
 * bench/finetune/replay.c and the tests). With
 * --dump it calls tm__dump_step before each update and tm__dump_finish at the end. */
#ifndef TM_TRAIN_FINETUNE_H
#define TM_TRAIN_FINETUNE_H

#include "../core/tensor.h"

/* loss = mean over the batch of -log softmax(logits[b])[labels[b]], as
 * torch.nn.functional.cross_entropy with its defaults; logits (B, C) float32 or float64,
 * labels (B,) int64 in [0, C). When dlogits is not NULL (a tensor of logits' dtype and
 * shape) it receives d loss / d logits = (softmax(logits) - onehot(labels)) / B.
 * Computed in double, log-sum-exp shifted by the row maximum. */
tm_status tm__cross_entropy(const tm_tensor *logits, const tm_tensor *labels, double *loss,
                            tm_tensor *dlogits, tm_error *err);

/* The run dump, in the layout bench/finetune/README.md describes:
 *   DIR/grads/NNNN/NAME.npy  the gradient of each parameter at step NNNN (from 0)
 *   DIR/loss.npy, DIR/lr.npy the loss before each step's update and the lr it used (float64)
 *   DIR/params/NAME.npy      the parameters after the last step
 * NAME is the parameter's name with bytes outside [A-Za-z0-9._-] written %XX. */
tm_status tm__dump_step(const char *dir, int64_t step, int n, const char *const *names,
                        const tm_tensor *const *grads, tm_error *err);
tm_status tm__dump_finish(const char *dir, int64_t steps, const double *loss, const double *lr,
                          int n, const char *const *names, const tm_tensor *const *params,
                          tm_error *err);

#endif
