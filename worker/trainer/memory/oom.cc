#include "worker/trainer/memory/oom.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

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

Batch StandIn(const Batch& batch) {
  Batch one = SliceBatch(batch, 0, 1);
  const int64_t l = std::min<int64_t>(one.tokens.size(1), 2);
  auto cut = [&](const torch::Tensor& t) { return t.defined() ? t.narrow(1, 0, l).contiguous() : t; };
  one.tokens = cut(one.tokens);
  one.pad_mask = cut(one.pad_mask);
  one.target_mask = cut(one.target_mask);
  one.segments = cut(one.segments);
  one.positions = cut(one.positions);
  one.real_tokens = one.pad_mask.logical_not().sum().item<int64_t>();
  one.padded_tokens = l;
  one.samples = 1;
  return one;
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
    size_t stand_ins = 0;
    AgreeCount(micro_batch_tokens_ > 0 || result.oom_recoveries > 0, &micro, &stand_ins);
    zero_grad();
    double loss = 0;
    int64_t largest = 0;
    bool oom = false;
    const int64_t issued = options_.lockstep ? options_.lockstep->issued() : 0;
    try {
      for (size_t i = 0; i < micro.size(); ++i) {
        const bool stand_in = i + stand_ins >= micro.size();
        if (!stand_in) largest = std::max(largest, micro[i].padded_tokens);
        const double weighted = forward_backward(micro[i], i + 1 == micro.size(), stand_in);
        if (!stand_in) loss += weighted;
      }
    } catch (const std::exception& e) {
      if (!IsOutOfMemory(e)) throw;
      oom = true;
      if (options_.lockstep) CatchUp(micro, options_.lockstep->issued() - issued, forward_backward, zero_grad);
    }
    bool at_one_sample = true;
    for (size_t i = 0; i < batches.size(); ++i) at_one_sample = at_one_sample && pieces[i] >= batches[i].rows();
    const bool unsplittable = oom && at_one_sample;
    const OomVote vote = options_.vote(oom, unsplittable, loss);
    if (!vote.any_oom) {
      result.loss = loss;
      result.micro_batches = static_cast<int64_t>(micro.size() - stand_ins);
      result.stand_ins = static_cast<int64_t>(stand_ins);
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

void MicroBatchRunner::AgreeCount(bool cut, std::vector<Batch>* micro, size_t* stand_ins) const {
  *stand_ins = 0;
  if (!options_.lockstep || !cut) return;  // uncut: every rank runs one per batch
  const int64_t most = options_.lockstep->most(static_cast<int64_t>(micro->size()));
  if (static_cast<int64_t>(micro->size()) >= most) return;
  const Batch stand_in = StandIn(micro->back());
  for (; static_cast<int64_t>(micro->size()) < most; ++*stand_ins) micro->push_back(stand_in);
}

void MicroBatchRunner::CatchUp(const std::vector<Batch>& micro, int64_t issued, const StepFn& forward_backward,
                               const std::function<void()>& zero_grad) const {
  trainer::CatchUp(*options_.lockstep, issued, "a training step", [&] {
    zero_grad();  // waits for what the attempt left under way (issued: the others issue it too), frees it
    options_.release_memory();
    for (size_t i = 0; i < micro.size(); ++i) forward_backward(StandIn(micro[i]), i + 1 == micro.size(), true);
  });
}

void CatchUp(const Lockstep& lockstep, int64_t issued, const std::string& what, const std::function<void()>& rerun) {
  try {
    lockstep.skip(issued);
    rerun();
  } catch (const std::exception& e) {
    lockstep.skip(0);
    if (!IsOutOfMemory(e)) throw;  // a lost peer, say: as it is
    throw PermanentError("resources.sharding: full: out of memory in " + what +
                         ", then again while issuing its remaining collectives on stand-ins of two tokens (" + e.what() +
                         "): a block's parameters do not fit beside what it holds; a smaller model or more ranks");
  }
  const int64_t left = lockstep.skipping();
  lockstep.skip(0);
  if (left != 0)
    throw PermanentError("resources.sharding: full: after an out-of-memory error in " + what + " its rerun issued " +
                         std::to_string(issued - left) + " of the " + std::to_string(issued) +
                         " collectives it had issued: its collectives depend on its data");
}

}  // namespace nightshift::trainer
