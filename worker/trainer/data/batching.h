// Batches: which samples go together (a pure, deterministic planner) and how a batch
// becomes tensors (collate).
#ifndef NIGHTSHIFT_WORKER_TRAINER_DATA_BATCHING_H_
#define NIGHTSHIFT_WORKER_TRAINER_DATA_BATCHING_H_

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "common/format/shard.h"

namespace nightshift::trainer {

struct BatchPlanOptions {
  int64_t batch_size = 32;    // samples per batch, used when max_tokens == 0
  int64_t max_tokens = 0;     // padded tokens (batch size x longest sample) per batch; 0: off
  int64_t pool_batches = 100; // token budget: samples are length-sorted within pools of
                              // about this many batches' worth of tokens
  // > 0: packed rows (language models): samples fill rows of this many tokens by best-fit
  // decreasing (longest first, each into the row it fits most tightly; ties between equal
  // lengths in shuffled order), a batch takes max(1, max_tokens / pack_len) consecutive
  // rows (batch_size rows without a budget), and the batches are shuffled. Collate with
  // packed = true rebuilds the same rows from a batch's samples (next-fit, in order).
  int64_t pack_len = 0;
};

using BatchPlan = std::vector<std::vector<uint32_t>>;  // batches of sample indices

// The batches of one epoch for one rank. Pure function of its arguments: the order
// depends only on (seed, epoch). `lengths` are the (truncated) sample lengths in tokens.
// Fixed batch_size: shuffle, chunk (world 1 keeps the last partial batch). Packed rows:
// see pack_len. Token budget:
// shuffle, sort pools by length, cut greedily to the budget (a sample longer than the
// budget is a batch alone), shuffle the batches. Ranks get batches round-robin, and
// every rank the same count: the largest batches are halved until the count divides by
// the world size, so every sample is seen once per epoch (unless there are fewer
// samples than ranks; then the remainder is dropped).
BatchPlan PlanEpoch(const std::vector<uint32_t>& lengths, const BatchPlanOptions& options,
                    uint64_t seed, int64_t epoch, int rank, int world_size);

// A run resumed mid-epoch on another number of ranks: the batches each of `to_world` ranks
// has done once each of `from_world` ranks did `done` of `epoch` (PlanEpoch's). The deals
// differ (the batches halved to divide by the world size depend on it), so this is the
// prefix of the new global list (batch b of rank r is its r + b x world) that holds
// exactly the samples the old one's first done x from_world batches held; -1 when no
// prefix does, or when it does not end on a step of every rank.
int64_t BatchesDoneOnResize(const std::vector<uint32_t>& lengths, const BatchPlanOptions& options, uint64_t seed,
                            int64_t epoch, int from_world, int64_t done, int to_world);

// Evaluation batches: every sample once, in length order (no shuffle, little padding).
BatchPlan PlanEval(const std::vector<uint32_t>& lengths, const BatchPlanOptions& options);

struct Batch {
  torch::Tensor tokens;    // int64 [B, L], padded with pad_id to the longest sample (row)
  torch::Tensor pad_mask;  // bool [B, L], true at padding positions
  torch::Tensor labels;    // int64 [B] (packed rows: each row's first sample's)
  // Language-model data (a shard without classes): true where the token is a prediction
  // target that counts in the loss: not padding, not a sample's first token, not in its
  // prompt (the shard's label of such a sample is its prompt's length). Undefined for
  // classifier data.
  torch::Tensor target_mask;
  // Packed rows only (else undefined): each position's sample within its row (0, 1, ...;
  // padding has its own) and its position within that sample. int64 [B, L].
  torch::Tensor segments, positions;
  int64_t real_tokens = 0;    // non-pad tokens
  int64_t padded_tokens = 0;  // B x L
  int64_t samples = 0;        // samples (B, unless rows are packed)
  int64_t rows() const { return tokens.size(0); }  // B
};

// Builds the tensors of one batch; samples longer than max_len are truncated. packed: the
// samples fill rows of max_len tokens in order (BatchPlanOptions::pack_len).
Batch Collate(const format::ShardReader& shard, const std::vector<uint32_t>& indices,
              int64_t max_len, int64_t pad_id, bool packed = false);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_DATA_BATCHING_H_
