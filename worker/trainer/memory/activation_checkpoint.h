// Activation checkpointing: run a transformer block so that autograd keeps only the
// block's input (and its attention bias), not the activations inside the block; the
// backward pass runs the block's forward again (with gradients) and backpropagates
// through that recompute.
//
// Invariants:
// - Gradients equal those of the plain block: the recompute restores the CPU generator
//   state (and the CUDA one of the input's device, in CUDA builds) that the forward saw,
//   so dropout draws the same masks, and re-applies the forward's autocast state.
// - The generator state after backward is what it was before the recompute (the
//   recompute does not consume random numbers of later steps).
// - Only the block input is tracked by autograd (LibTorch tracks Tensor arguments only);
//   when it does not require grad, a detached copy that does is used, because without an
//   input requiring grad LibTorch builds no graph node and the block's parameters would
//   get no gradient.
// - Without grad mode (evaluation) the block runs plainly.
// Memory: saves one [B, L, D] tensor per checkpointed block instead of all of its
// intermediates (about (8 + 2 * heads * L / D + 2 * ffn / D) of those); costs one more
// block forward in backward.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MEMORY_ACTIVATION_CHECKPOINT_H_
#define NIGHTSHIFT_WORKER_TRAINER_MEMORY_ACTIVATION_CHECKPOINT_H_

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace nightshift::trainer {

// One block's forward: x [B, L, D], attn_bias (what the model's blocks take beside x: an
// additive bias broadcastable to [B, H, L, L], or a decoder's packed spans) -> [B, L, D].
using BlockForward = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& attn_bias)>;

// A block whose parameters live sharded across ranks (resources.sharding full,
// parallel/fully_sharded.h): gathered around each run of the block; once its backward
// has accumulated every parameter's gradient, the owner reduces them and frees the
// parameters itself. All three are collectives (every rank calls them in the same order).
class BlockParams {
 public:
  virtual ~BlockParams() = default;
  virtual void Prefetch() = 0;  // starts gathering them for the next Acquire (no wait)
  virtual void Acquire() = 0;   // the block's parameters are whole after it
  virtual void Release() = 0;   // their memory is freed (the shard stays)
};

// Runs `block` with activation checkpointing (see above). attn_bias may be undefined (a
// causal block without padding); the block then gets it undefined. With `params`, they
// are acquired around the forward and around the recompute, and `before` (the block that
// runs its backward next, or null) is prefetched as the recompute starts.
torch::Tensor CheckpointedBlockForward(BlockForward block, const torch::Tensor& x, const torch::Tensor& attn_bias,
                                       BlockParams* params = nullptr, BlockParams* before = nullptr);

// Whether block `index` (0-based) is checkpointed when every `every_n_blocks`-th block is
// (blocks N-1, 2N-1, ...; 0: none, 1: all).
inline bool IsCheckpointedBlock(int every_n_blocks, int64_t index) {
  return every_n_blocks > 0 && (index + 1) % every_n_blocks == 0;
}

// How a model runs its blocks: every N-th checkpointed and, with sharded parameters
// (one BlockParams per block, not owned), every block gathered around each run: around
// its forward, and, with gradients on, again just before its backward (a hook on its
// output; autograd's saved tensors refer to the parameters' storage, which the gather
// fills again) or around its recompute when it is checkpointed. Communication overlaps
// computation as FSDP's prefetching does: the next block's gather starts before a
// block's forward, the previous block's before a block's backward (or recompute).
struct BlockPlan {
  int checkpoint_every = 0;
  std::vector<BlockParams*> sharded;  // empty, or one per block
  // Block `index`; `cached`: a KV-cache step (never checkpointed).
  torch::Tensor Run(size_t index, const BlockForward& block, const torch::Tensor& x, const torch::Tensor& attn_bias,
                    bool cached = false) const;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MEMORY_ACTIVATION_CHECKPOINT_H_
