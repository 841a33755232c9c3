// Gradient clipping by the global L2 norm, as torch::nn::utils::clip_grad_norm_ does it
// (coefficient max_norm / (norm + 1e-6), applied when below 1), with the squares summed in
// float64: the coefficient is then the same to the last bit of float32 whether the
// gradients are whole on one rank or cut across ranks (parallel/sharded_adamw.h), where
// float32 norms of different cuts differ in their last bits, and Adam turns such bits in
// the gradients of parameters whose true gradient is zero (an attention key's bias) into
// visible steps.
#ifndef NIGHTSHIFT_WORKER_TRAINER_OPTIM_CLIP_H_
#define NIGHTSHIFT_WORKER_TRAINER_OPTIM_CLIP_H_

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace nightshift::trainer {

// Clips the .grad() of `tensors` (those without one are skipped) to a global norm of at
// most max_norm and returns the norm before clipping. sum_over_ranks: when the tensors are
// this rank's share of the gradients, turns this rank's sum of squares into every rank's.
double ClipGradNorm(const std::vector<torch::Tensor>& tensors, double max_norm,
                    const std::function<double(double)>& sum_over_ranks = nullptr);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_OPTIM_CLIP_H_
