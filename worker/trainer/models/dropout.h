// Dropout for CPU tensors that is fast and keeps no mask.
//
// LibTorch 1.13's CPU dropout draws its mask with a serial Mersenne-Twister bernoulli_
// (about 300 ms for one [32, 4, 512, 512] attention tensor on two cores: a quarter of a
// training step of the demo model) and keeps the mask for backward. Here each element's
// keep/drop decision is a hash of (seed, element index) (SplitMix64, a counter-based
// generator), computed in parallel and recomputed in backward from the seed, so nothing
// but the seed is saved.
//
// Invariants:
// - The seed is one 64-bit draw from LibTorch's default CPU generator (mixed with the
//   stream below), so the masks are a pure function of that generator's state: manual_seed,
//   checkpointed RNG state (exact resume) and activation checkpointing's RNG restore all
//   keep working unchanged.
// - Same distribution as F::dropout: each element is kept with probability 1 - p (to
//   2^-24) and scaled by 1 / (1 - p); the draws differ from F::dropout's.
// - CUDA tensors (and p outside (0, 1), or eval mode) go to F::dropout / identity.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_DROPOUT_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_DROPOUT_H_

#include <torch/torch.h>

namespace nightshift::trainer {

torch::Tensor Dropout(const torch::Tensor& input, double p, bool training);

// Mixed into every mask's seed from now on (process-wide; default 0). Data-parallel ranks
// start from the same generator state and draw in step, so the trainer sets its rank
// here: otherwise every rank would drop the same elements.
void SetDropoutStream(uint64_t stream);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_DROPOUT_H_
