#include "worker/trainer/memory/oom.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include <c10/util/Exception.h>

#include "worker/trainer/errors.h"

namespace nightshift::trainer {
namespace {

int64_t PiecesFor(const Batch& batch, int64_t token_budget) {
  if (token_budget <= 0) return 1;
  return std::clamp<int64_t>((batch.padded_tokens + token_budget - 1) / token_budget, 1, batch.rows());
}

}  // namespace

bool IsOutOfMemory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  if (c10_error == nullptr) return false;
  const std::string& m = c10_error->msg();
  return m.find("can't allocate memory") != std::string::npos ||
         m.find("out of memory") != std::string::npos;
}

Batch SliceBatch(const Batch& batch, int64_t begin, int64_t end) {
  const int64_t n = end - begin;
  torch::Tensor mask = batch.pad_mask.narrow(0, begin, n);
  const torch::Tensor real = mask.logical_not();
  const int64_t l = std::max<int64_t>(1, real.sum(1).max().item<int64_t>());
  Batch out;
  auto rows = [&](const torch::Tensor& t) { return t.defined() ? t.narrow(0, begin, n).narrow(1, 0, l).contiguous() : t; };
  out.tokens = rows(batch.tokens);
  out.pad_mask = mask.narrow(1, 0, l).contiguous();
  out.labels = batch.labels.narrow(0, begin, n).contiguous();
  out.target_mask = rows(batch.target_mask);
  out.segments = rows(batch.segments);
  out.positions = rows(batch.positions);
  out.real_tokens = real.sum().item<int64_t>();
  out.padded_tokens = n * l;
  // Packed rows hold several samples: those starting in the slice.
  out.samples = out.positions.defined() ? out.positions.eq(0).logical_and(real.narrow(1, 0, l)).sum().item<int64_t>() : n;
  return out;
}

std::vector<Batch> SplitBatch(const Batch& batch, int64_t pieces) {
  if (pieces <= 1) return {batch};
  pieces = std::min(pieces, batch.rows());
  std::vector<Batch> out;
  for (int64_t i = 0; i < pieces; ++i)
    out.push_back(SliceBatch(batch, i * batch.rows() / pieces, (i + 1) * batch.rows() / pieces));
  return out;
}

MicroBatchResult MicroBatchRunner::Run(const Batch& batch, const StepFn& forward_backward,
                                       const std::function<void()>& zero_grad) {
  return Run(std::vector<Batch>{batch}, forward_backward, zero_grad);
}

MicroBatchResult MicroBatchRunner::Run(const std::vector<Batch>& batches, const StepFn& forward_backward,
                                       const std::function<void()>& zero_grad) {
  MicroBatchResult result;
  // pieces[i]: how many micro-batches batch i is cut into.
  std::vector<int64_t> pieces;
  std::vector<Batch> micro;
  for (const Batch& batch : batches) {
    int64_t n = PiecesFor(batch, micro_batch_tokens_);
    std::vector<Batch> cut = SplitBatch(batch, n);
    // Uneven lengths: cut finer until every micro-batch is within the budget that fit.
    while (micro_batch_tokens_ > 0 && n < batch.rows() &&
           std::any_of(cut.begin(), cut.end(), [&](const Batch& m) { return m.padded_tokens > micro_batch_tokens_; }))
      cut = SplitBatch(batch, n = std::min(n * 2, batch.rows()));
    pieces.push_back(n);
    micro.insert(micro.end(), cut.begin(), cut.end());
  }
  for (;;) {
    zero_grad();
    double loss = 0;
    int64_t largest = 0;
    bool oom = false;
    try {
      for (size_t i = 0; i < micro.size(); ++i) {
        const Batch& m = micro[i];
        largest = std::max(largest, m.padded_tokens);
        loss += forward_backward(m, i + 1 == micro.size());
      }
    } catch (const std::exception& e) {
      if (!IsOutOfMemory(e)) throw;
      if (!options_.split)
        throw PermanentError(
            "out of memory in a training step under resources.sharding: full (micro-batches of up to " +
            std::to_string(largest) + " padded tokens): full does not split a batch and retry it in place (its "
            "ranks are inside the blocks' collectives); lower train.batching.max_tokens or batch_size, or let "
            "train.batching.max_tokens: auto probe it in lockstep, or use train.activation_checkpointing or more "
            "ranks (" + e.what() + ")");
      oom = true;
    }
    bool at_one_sample = true;
    for (size_t i = 0; i < batches.size(); ++i) at_one_sample = at_one_sample && pieces[i] >= batches[i].rows();
    const bool unsplittable = oom && at_one_sample;
    const OomVote vote = options_.vote(oom, unsplittable, loss);
    if (!vote.any_oom) {
      result.loss = loss;
      result.micro_batches = static_cast<int64_t>(micro.size());
      if (result.oom_recoveries > 0) micro_batch_tokens_ = largest;  // later batches: this size
      return result;
    }
    zero_grad();
    options_.release_memory();
    if (vote.any_unsplittable)
      throw std::runtime_error(
          (unsplittable ? "out of memory with a single sample per micro-batch (" + std::to_string(largest) +
                              " padded tokens)"
                        : std::string("another rank ran out of memory with a single sample per micro-batch")) +
          ": that sample cannot fit; lower model.max_len, the model size, or use activation_checkpointing: full");
    micro.clear();
    for (size_t i = 0; i < batches.size(); ++i) {
      pieces[i] = std::min(pieces[i] * 2, batches[i].rows());
      const std::vector<Batch> cut = SplitBatch(batches[i], pieces[i]);
      micro.insert(micro.end(), cut.begin(), cut.end());
    }
    ++result.oom_recoveries;
    ++total_recoveries_;
  }
}

}  // namespace nightshift::trainer
