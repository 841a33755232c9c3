// resources.sharding: full. ZeRO stage 3 (FSDP's FULL_SHARD): the trainable parameters,
// their gradients and AdamW's state all cut across the data-parallel ranks, on the
// ProcessGroup of ddp.h.
//
// Units. The trainable parameters, in the model's order, are grouped into units: each
// transformer block's parameters form one (SequenceModel::blocks), and the runs of
// parameters outside any block (embeddings before the blocks; final norm and head after)
// form the others, which stay whole on every rank ("resident", as FSDP's root unit).
// A unit's parameters, each starting at a multiple of `align` values, make one padded
// flat range of world_size x shard_numel values; rank r owns [r * shard_numel, (r + 1) *
// shard_numel) as its shard: a float32 tensor that is the optimizer's parameter (a fused
// AdamW over every unit's shard: moments for 1/N of the values).
//
// Memory. A unit's parameters are views of one storage of its padded range. A block's
// storage is freed (set to 0 bytes, the tensors keep their shapes) except while the block
// runs: BlockPlan (activation_checkpoint.h) acquires it around the block's forward and
// again just before the block's backward (a hook on the block's output; autograd's saved
// tensors refer to the same storage, filled again), or around its recompute when the block
// is activation-checkpointed. When autograd has accumulated the gradient of the block's
// last parameter (a post-accumulate hook on each counts them), they are reduce-scattered
// into the shards' gradients (summed over micro-batches) and freed with the parameters.
// So a rank holds the shards, the resident units whole, and the parameters and gradients
// of the blocks between their backward's start and end (one at a time, and the next one's
// parameters being gathered), beside the activations the blocks saved.
//
// Overlap, as FSDP's prefetching: a block's forward starts the next block's all-gather
// before it computes, a block's backward (or recompute) the previous block's, and a
// block's gradient reduce-scatter runs on while the next block's backward computes (one
// at a time; finished before the next one starts). So up to two blocks are whole at once.
//
// A step, on every rank in the same order:
//   backward          blocks last to first: all-gather, (recompute,) backward,
//                     reduce-scatter (sum / world_size: DDP's average), free
//   ReduceGradients   the resident units' gradients, accumulated locally, reduce-scattered
//   clipping          optim/clip.h on the shards (their padding is zero, and so is its
//                     gradient), the norm summed over ranks
//   step()            fused AdamW on the shards; the resident units all-gathered
// Every parameter equals DDP's after each step up to the order of sums.
//
// An adapter's frozen base (AddFrozen). A block's frozen parameters (LoRA's base weights,
// its norms) are cut across the ranks as its trainable ones are, one flat range per dtype
// (a bf16 base's own): gathered and freed with the block's trainable unit, never reduced
// and not in the optimizer or the checkpoints. One difference: after the block's backward
// they stay whole until the next block's parameters are acquired (that is after the
// gradient of this block's input, the last thing that reads them) or the backward ends,
// since a node that reads a frozen weight only for its input's gradient (the block's first
// norm) may run after the last trainable gradient was accumulated. Acquiring the next block
// frees them before that block prefetches the one after, so up to two blocks' frozen
// parameters are whole at once, as with the trainable ones. Frozen parameters outside the blocks
// (embeddings, a frozen head), or of a block with nothing trainable, stay whole.
//
// Compute copies (GatherInDtype): under autocast, what autocast would cast (a
// projection's weight and bias) is gathered as its bf16/fp16 copy for a training step.
//
// Whole and sharded. Create leaves every parameter whole and as it was; Shard() takes each
// rank's shards from them and frees the blocks. The trainer cuts the model as it is built
// (a pretrained folder's base, or a model from scratch as its draws are made, a block at a
// time: ShardBefore), before resuming: a resume or roll-back to a checkpoint of sharding full
// gathers nothing (LoadShards reads each rank's shards). Unshard() gathers every block
// again (on rank 0 only, for the export), and Shard() frees them after; a checkpoint
// written without sharding full, whose model.pt holds the blocks whole, is loaded after
// Reopen() (at start-up and in a roll-back), which gathers nothing.
//
// Checkpoints. The shards' state is written as one file per unit and rank,
// optimizer-shard-{unit x world + rank}-of-{units x world}.pt, each holding its values of
// the flat layout of checkpoint/optimizer_shards.h (a unit's values of one rank are one
// range there: the padding is left out), so any run, sharded or not, on any number of
// ranks, reads them back (ReadFlatRanges). A block's files hold its parameters' values
// too, and model.pt the rest of the model (ParametersInShards): saving gathers no block.
#ifndef NIGHTSHIFT_WORKER_TRAINER_PARALLEL_FULLY_SHARDED_H_
#define NIGHTSHIFT_WORKER_TRAINER_PARALLEL_FULLY_SHARDED_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/checkpoint/optimizer_shards.h"
#include "worker/trainer/memory/activation_checkpoint.h"
#include "worker/trainer/optim/fused_adamw.h"
#include "worker/trainer/parallel/ddp.h"

namespace nightshift::trainer {

class FullyShardedAdamW : public FusedAdamW, public ShardedOptimizerState {
 public:
  // `params`: the trainable parameters in the model's order (contiguous float32 on one
  // device); block_of[i]: the block params[i] belongs to, or -1. No collective.
  static std::unique_ptr<FullyShardedAdamW> Create(std::vector<torch::Tensor> params, const std::vector<int64_t>& block_of,
                                                   torch::optim::AdamWOptions options, int rank, int world_size,
                                                   int64_t align = 64);
  ~FullyShardedAdamW() override;
  // Not owned; must outlive every collective below.
  void set_group(ProcessGroup* group) { group_ = group; }
  // Gradients reduce-scattered as bf16 (resources.reduce_precision), the result float32.
  void set_reduce_bf16(bool on) { reduce_bf16_ = on; }
  // Compute copies (FSDP's param_dtype), for a run under autocast to `dtype`: low[i] for
  // the params[i] of Create that autocast casts to it wherever they are used (a
  // projection's weight and bias: models/lora.h's CastByAutocast). While compute_gathers
  // is on (a training step's forward and backward), a block's low parameters are gathered
  // in `dtype` (each rank casts its float32 shard; half the bytes on the wire and whole),
  // and its others (norms, a Conv1D's bias) in float32 beside them; the parameters are
  // views of those, so the step computes exactly what autocast's casts of float32
  // parameters compute, and autograd saves these copies instead of casts of its own
  // (which it would keep for every block until its backward). Their gradients come in
  // `dtype` and are reduced as float32 (or bf16) as before. Off (an evaluation, the
  // export, Unshard), blocks are gathered in float32. Once, before the first gather.
  void GatherInDtype(torch::ScalarType dtype, const std::vector<bool>& low);
  void set_compute_gathers(bool on) { compute_gathers_ = on; }
  // Gradient accumulation with the blocks' gradients whole (resources.accumulate_gradients):
  // HoldGradients() gives each block a float32 buffer of its whole gradients (allocated
  // now: held_bytes() on every rank); while holding is on (a step's micro-batches before
  // its last), a block's backward adds its gradients there instead of reduce-scattering
  // them, and the next reduction (the last micro-batch's) reduces their sum with its own
  // once: DDP's order of sums. No collective.
  void HoldGradients();
  void set_holding(bool on) { holding_ = on; }
  // Before clearing the gradients of a step not taken or retried (after Settle): drops the
  // held sums and what a backward that did not end counted of its blocks' gradients, and
  // frees the blocks a forward or backward that did not end (an out-of-memory error) left
  // whole. No collective.
  void DropAccumulated();
  int64_t held_bytes() const;  // the buffers HoldGradients allocates (or did)
  bool holds_gradients() const;
  // The frozen parameters (params[i] in block block_of[i], or -1) of the blocks that have
  // trainable ones, sharded from the next Shard() on; before Shard(), once. Returns how
  // many values that cuts. No collective.
  int64_t AddFrozen(const std::vector<torch::Tensor>& params, const std::vector<int64_t>& block_of, int64_t align = 64);
  // One entry per block of the model's `num_blocks` (null for a block without trainable
  // parameters): BlockPlan::sharded.
  std::vector<BlockParams*> block_params(int64_t num_blocks) const;

  // No collective: the shards from the whole parameters (equal on every rank), then the
  // blocks freed.
  void Shard();
  // No collective. Sharding as the weights load, before the first Shard(): cuts, in order,
  // each block not cut yet before the one that holds `param` (its shards taken, then
  // freed); Shard() cuts the rest. So a load that writes the parameters in the model's
  // order, calling this before each, holds one block whole at a time (and nothing
  // written of the blocks after it: models/common.h's DeferInit).
  void ShardBefore(const torch::Tensor& param);
  // No collective. Every block's trainable unit allocated whole again, unwritten, for a
  // load that writes all of them (a checkpoint written without sharding full, at start-up
  // and in a roll-back); Shard() cuts them again. An adapter's frozen base stays cut
  // (no checkpoint holds it). The whole model is on this rank for that time.
  void Reopen();
  // No collective. The same for a load that writes the parameters in the model's order,
  // a block at a time (model.init_from at start-up): ReopenFor(p), before writing p, cuts
  // the block reopened last (its shard taken from what the load wrote) and allocates the
  // block that holds p whole, unwritten, if it was not yet; EndReopen() cuts the last and
  // takes the resident units' shards from what the load wrote into them. The load must
  // write every trainable parameter of each block it reopens (std::logic_error for one of
  // a block already cut again); a block it does not reach keeps its shards. One block is
  // whole at a time. Sharded, before and after.
  void ReopenFor(const torch::Tensor& param);
  void EndReopen();
  // No collective. Every unit, shard and moment onto `device` (the parameters stay the same
  // tensors): a model built and cut on the host, then placed, is never whole on the device
  // (sharded: a freed block's parameters pass through it one at a time, unwritten).
  void MoveTo(torch::Device device);
  // Collectives (every rank, same order; throw on a communication error).
  // Unshard: every block gathered whole again; with `only_rank` >= 0 only on that rank
  // (the export's writer): the others free each block as soon as its gather ends and
  // stay sharded.
  void Unshard(int only_rank = -1);
  // The export's walk, a block at a time (the blocks sharded): GatherFor(p) gathers, in
  // order, each block not walked yet up to the one that holds p, freeing the one before
  // (p outside the blocks: nothing); EndWalk() walks the rest the same way and frees the
  // last. So the writer (rank 0, which calls GatherFor before reading each parameter) and
  // the others (EndWalk alone) make the same gathers, and hold one block whole at a time.
  void GatherFor(const torch::Tensor& param);
  void EndWalk();
  void ReduceGradients();
  // Ends every collective under way (gathers, reductions: a reduction adds to its shard's
  // gradient); frees the frozen units left whole by the last backward. Before clearing
  // the gradients of a step that was not taken.
  void Settle();
  torch::Tensor step(LossClosure closure = nullptr) override;
  void ExchangeShards(ShardSink* sink) override;
  std::vector<torch::Tensor> ParametersInShards() const override;  // the blocks'
  bool ParametersFreed() const override { return sharded_; }

  // No collective. Whole (before Shard(), or after Unshard()) the load has written every
  // parameter model.pt holds and this reads the moments (and value_ranges' values, the
  // rest: ShardedOptimizerState); sharded, it also reads the blocks' values into
  // their shards (the blocks stay freed) and cuts the resident units' shards from the
  // values the load wrote (a roll-back that gathers nothing).
  std::vector<torch::Tensor> LoadShards(const std::string& dir, const std::vector<std::string>& shards,
                                        const Ranges& value_ranges) override;
  const std::vector<torch::Tensor>& shards() const { return shards_; }
  // This rank's bytes: its shards (float32), the resident units whole, and the largest
  // block whole (parameters; their gradients the same).
  int64_t shard_bytes() const;
  int64_t resident_bytes() const;
  int64_t largest_block_bytes() const;
  // The largest block's parameters as a training step gathers them (GatherInDtype), with
  // the buffers its gather holds until it ends.
  int64_t largest_gathered_bytes() const;
  int64_t state_bytes() const { return 2 * shard_bytes(); }
  // The frozen units' bytes: their parameters whole, this rank's shards of them, the
  // largest block's (all of its dtypes, padded) gathered, and what a rank holds at most:
  // its shards and two blocks gathered (one, if there is only one).
  struct FrozenBytes {
    int64_t whole = 0, shards = 0, largest_block = 0, held = 0;
  };
  FrozenBytes frozen_bytes() const;

 private:
  class Unit;
  FullyShardedAdamW(std::vector<std::unique_ptr<Unit>> units, std::vector<torch::Tensor> shards,
                    torch::optim::AdamWOptions options, int rank, int world_size, int64_t total);

  // Up to two freed blocks' memory, for the next gathers of their size (a block is
  // gathered two or three times a step: no allocation and page faults each time).
  void KeepSpare(size_t bytes, c10::DataPtr memory) const;
  size_t spare_cap_ = 2;  // 2 x the storages a block has (its trainable unit and frozen ones)
  c10::DataPtr TakeSpare(size_t bytes) const;
  // Likewise up to two blocks' gradient-reduction buffers (the block's gradients laid out
  // flat, reduce-scattered; one reduction runs beside the next block's backward): a block's
  // is filled every backward, and allocated afresh glibc would map and fault it in each
  // time. The resident units' (embeddings, head: once a step) are not kept.
  torch::Tensor TakeReduceBuffer(int64_t numel, const torch::TensorOptions& options) const;
  void KeepReduceBuffer(torch::Tensor buffer) const;
  mutable std::vector<torch::Tensor> reduce_spare_;
  // One block's gradient reduction runs beside the next block's backward: `unit` starts
  // its own, the one under way (its own earlier one too) is finished first.
  void Reducing(Unit* unit) const;
  mutable Unit* reducing_ = nullptr;
  // The block whose backward ended with its frozen units whole (Unit::Accumulated); freed
  // when another block is acquired.
  mutable Unit* frozen_left_ = nullptr;
  void FreeFrozenLeft(const Unit* acquiring) const;
  mutable std::vector<std::pair<size_t, c10::DataPtr>> spare_;  // before units_: outlives their storages' use

  const std::vector<std::unique_ptr<Unit>> units_;
  const std::vector<torch::Tensor> shards_;  // units_[i]'s shard: the optimizer's parameters
  const int rank_, world_size_;
  const int64_t total_;  // trainable values, unpadded
  ProcessGroup* group_ = nullptr;
  bool sharded_ = false;
  bool reduce_bf16_ = false;
  bool compute_gathers_ = false;
  bool holding_ = false;
  // LoadShards while sharded: the blocks' shards from the files' values (`values`: each
  // block's range of this rank, in order), the resident units' from their parameters.
  void LoadShardValues(const std::vector<FlatAdamState>& values);
  // The walk: gathers the blocks among units_[walk_, end), each freeing the one before.
  void WalkTo(size_t end);
  size_t cut_ = 0;           // ShardBefore: the blocks before this unit are cut
  size_t reopen_ = 0;        // ReopenFor: the next unit it may reopen
  Unit* reopened_ = nullptr; // the block it reopened last, whole until cut
  void CutReopened();
  size_t walk_ = 0;          // the next unit the walk may gather
  Unit* walked_ = nullptr;   // the block it gathered last, whole until the next
};

// A training step's forward and backward: the blocks gathered as compute copies
// (GatherInDtype) in its scope. `full` may be null (nothing sharded fully).
class ComputeGathers {
 public:
  explicit ComputeGathers(FullyShardedAdamW* full) : full_(full) {
    if (full_) full_->set_compute_gathers(true);
  }
  ~ComputeGathers() {
    if (full_) full_->set_compute_gathers(false);
  }
  ComputeGathers(const ComputeGathers&) = delete;
  ComputeGathers& operator=(const ComputeGathers&) = delete;

 private:
  FullyShardedAdamW* full_;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_PARALLEL_FULLY_SHARDED_H_
