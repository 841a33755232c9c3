// resources.sharding: optimizer. AdamW's state and update cut across the data-parallel
// ranks: ZeRO stage 2 (DeepSpeed's name; FSDP's SHARD_GRAD_OP keeps the parameters whole
// the same way), on the ProcessGroup of ddp.h.
//
// Layout. The trainable parameters in the model's order, each starting at a multiple of
// `align` values (zeros between), form one padded flat range, cut into world_size shards
// of shard_numel values (a multiple of `align`); rank r owns [r * shard_numel, (r + 1) *
// shard_numel). Its pieces are the slices of the parameters that range covers: views of
// the parameters' own storage, and the only tensors this optimizer (a FusedAdamW over the
// pieces) updates and keeps moments for: 8 bytes per value it owns, 1/world_size of DDP's.
// The alignment (FSDP pads the same way) makes each piece start and end where the
// vectorised kernels' blocks do in the whole parameter, so one thread's update of a value
// is bit for bit the unsharded one. Without padding, the values a rank owns are the range
// [begin(), end()) of checkpoint/optimizer_shards.h's flat layout (the parameters end to
// end), which is how its checkpoint files name them.
//
// A step, on every rank in the same order:
//   backward          each rank's gradients accumulate in param.grad(), whole and local
//                     (the GradientSync of a sharded run holds no parameters: no hook,
//                     no all-reduce; accumulation needs no sync at all until the step)
//   ReduceGradients   reduce-scatter (sum / world_size: DDP's average), in chunks of
//                     chunk_bytes: each rank keeps its shard's averaged gradient (the
//                     pieces' .grad()), and the whole gradients are freed
//   clipping          optim/clip.h on the pieces, its norm from every shard's sum of
//                     squares (ProcessGroup::SumOverRanks: one all-reduce)
//   step()            ATen's fused AdamW on the pieces, then the updated shards are
//                     all-gathered into every rank's parameters, in chunks
// Every parameter ends each step equal on every rank to DDP's (sum orders aside).
// zero_grad() is torch::optim::Optimizer's (not virtual): it clears the pieces only; the
// run clears the model's gradients itself (model->zero_grad()).
#ifndef NIGHTSHIFT_WORKER_TRAINER_PARALLEL_SHARDED_ADAMW_H_
#define NIGHTSHIFT_WORKER_TRAINER_PARALLEL_SHARDED_ADAMW_H_

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/optim/fused_adamw.h"
#include "worker/trainer/parallel/ddp.h"

namespace nightshift::trainer {

class ShardedAdamW : public FusedAdamW, public ShardedOptimizerState {
 public:
  // `params`: the trainable parameters in the model's order (contiguous float32 tensors on
  // one device). No collective until set_group: a resume may load state before the group
  // exists.
  static std::unique_ptr<ShardedAdamW> Create(std::vector<torch::Tensor> params, torch::optim::AdamWOptions options,
                                              int rank, int world_size, int64_t chunk_bytes, int64_t align = 64);
  // Not owned; must outlive every collective below.
  void set_group(ProcessGroup* group) { group_ = group; }
  // Gradients reduce-scattered as bf16 (resources.reduce_precision), the result float32.
  void set_reduce_bf16(bool on) { reduce_bf16_ = on; }

  // Collectives (every rank, same order; throw on a communication error).
  void ReduceGradients();
  torch::Tensor step(LossClosure closure = nullptr) override;
  void ExchangeShards(ShardSink* sink) override;

  // No collective.
  std::vector<torch::Tensor> LoadShards(const std::string& dir, const std::vector<std::string>& shards,
                                        const Ranges& value_ranges) override;
  const std::vector<torch::Tensor>& pieces() const { return pieces_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  int64_t total() const { return total_; }
  // Bytes of optimizer state this rank holds (exp_avg and exp_avg_sq of its shard).
  int64_t state_bytes() const { return 2 * (end_ - begin_) * 4; }

 private:
  struct Layout;
  ShardedAdamW(Layout layout, torch::optim::AdamWOptions options);
  // Copies [begin, end) of the padded flat range of the parameters (values, or gradients
  // with `grads`; zeros in the padding and for absent gradients) into dst, or back from src.
  void Gather(int64_t begin, int64_t end, bool grads, torch::Tensor dst) const;
  void Scatter(int64_t begin, int64_t end, const torch::Tensor& src);
  int64_t ChunkNumel() const;
  // Points the pieces at their parameters' storage again: loading a checkpoint or an
  // export into the model (Tensor::set_) gives a parameter new storage, which views made
  // before would no longer see.
  void Rebind();

  const std::vector<torch::Tensor> params_;
  const std::vector<int64_t> offsets_;  // params_[i] starts at offsets_[i] of the padded range
  const std::vector<torch::Tensor> pieces_;
  const std::vector<int64_t> piece_at_;  // where pieces_[i] starts in this rank's padded shard
  // pieces_[i] is params_[piece_param_[i]] from value piece_offset_[i] on.
  const std::vector<int64_t> piece_param_, piece_offset_;
  const int rank_, world_size_;
  const int64_t total_, shard_numel_, begin_, end_, chunk_bytes_;  // begin_, end_, total_: unpadded
  ProcessGroup* group_ = nullptr;
  bool reduce_bf16_ = false;
  torch::Tensor shard_grad_;  // [shard_numel]: the reduce-scatter's output, during ReduceGradients
};

// A collective: rank `from`'s shard file `name`, whose bytes `write` produces on that rank
// (its optimizer's own tensors, no copy of the state), to every rank's `sink` (null:
// none), in broadcasts of up to 64 MiB.
void StreamShardFile(ProcessGroup& group, int from, const std::string& name,
                     const std::function<void(const std::function<void(const char*, size_t)>&)>& write,
                     ShardedOptimizerState::ShardSink* sink);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_PARALLEL_SHARDED_ADAMW_H_
