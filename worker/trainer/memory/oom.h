// OOM resilience: runs one batch's forward and backward, and when that runs out of memory,
// runs it again as micro-batches with gradient accumulation (halving the micro-batch size
// until it fits), then keeps the smaller micro-batches for later batches.
//
// Invariants:
// - Same update as the unsplit batch: the step function weighs each micro-batch's loss
//   by its share of the batch (the loss is a mean over samples or tokens, so the caller
//   divides each micro-batch's loss sum by the whole batch's count); gradients are
//   cleared before every attempt, so a failed attempt leaves nothing behind.
// - The batch plan (and so the data order and exact resume) never changes; only how a
//   batch is cut into micro-batches does. A micro-batch is a contiguous run of the
//   batch's rows, trimmed to its longest sample.
// - Fails (std::runtime_error with the reason) only when a micro-batch of one sample
//   runs out of memory: that sample cannot fit (on every rank at once, when on any). A
//   rank already at one sample per micro-batch that retries for another rank reruns as
//   it is.
// - Data parallel: every rank calls `vote` exactly once per attempt (success or not),
//   in the same order, so ranks agree on retrying; a rank whose attempt succeeded
//   retries too when another failed. The step function is told which micro-batch is the
//   attempt's last, so only that one synchronises gradients (NoSync for the others); the
//   vote finishes (or, after an out-of-memory error, discards) that synchronisation before
//   voting, so every rank enters the same collectives whether its attempt failed or not
//   (StepAgreement in step_agreement.h). Ranks may cut their batches into different numbers of
//   micro-batches.
// Units: tokens are padded tokens (rows x longest row).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MEMORY_OOM_H_
#define NIGHTSHIFT_WORKER_TRAINER_MEMORY_OOM_H_

#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

#include "worker/trainer/data/batching.h"

namespace nightshift::trainer {

// Whether `e` is an out-of-memory error: c10::OutOfMemoryError (CUDA), or a c10::Error
// whose message says "can't allocate memory" / "out of memory" (the CPU allocator).
bool IsOutOfMemory(const std::exception& e);

// What the ranks decided after an attempt.
struct OomVote {
  bool any_oom = false;           // some rank ran out of memory: every rank retries
  bool any_unsplittable = false;  // some rank ran out with one sample per micro-batch: all fail
};

struct OomOptions {
  // The ranks' decision after an attempt, given this rank's answers (it ran out of
  // memory; it did so with one sample per micro-batch; the attempt's loss, meaningless
  // after an out-of-memory error). The trainer passes StepAgreement::Vote
  // (step_agreement.h), the step's one collective; default: the local answers.
  std::function<OomVote(bool local_oom, bool local_unsplittable, double loss)> vote =
      [](bool oom, bool unsplittable, double) { return OomVote{oom, unsplittable}; };
  // Called after an out-of-memory attempt, before the retry (e.g. empty CUDA caches).
  std::function<void()> release_memory = [] {};
  // Whether a batch that ran out of memory is split and retried in place. Off under
  // sharding full, whose ranks are inside the blocks' collectives when one runs out (the
  // others go on with them, so a vote cannot be reached): the error is then a
  // PermanentError (errors.h) naming what to change, thrown at once, so the ranks fail
  // together instead of waiting out the collective timeout, and no restart meets the same
  // batch again.
  bool split = true;
};

// What Run() did with one batch.
struct MicroBatchResult {
  double loss = 0;            // sum of the step function's returns (the batch's mean loss)
  int64_t micro_batches = 1;  // micro-batches of the final, successful attempt
  int64_t oom_recoveries = 0; // out-of-memory attempts survived in this batch
};

// Rows [begin, end) of `batch`, trimmed to their longest sample (padding at the end).
Batch SliceBatch(const Batch& batch, int64_t begin, int64_t end);
// `pieces` (1 <= pieces <= batch.samples) contiguous slices with sizes as even as possible.
std::vector<Batch> SplitBatch(const Batch& batch, int64_t pieces);

class MicroBatchRunner {
 public:
  // forward_backward(micro, last): forward, the micro-batch's weighted loss, backward;
  // returns that weighted loss's value. `last`: the attempt's final micro-batch (the one
  // whose backward may synchronise gradients). zero_grad(): clears the gradients.
  using StepFn = std::function<double(const Batch& micro, bool last)>;

  explicit MicroBatchRunner(OomOptions options) : options_(std::move(options)) {}

  // Runs the batch (see the header comment). Rethrows errors other than out-of-memory.
  MicroBatchResult Run(const Batch& batch, const StepFn& forward_backward,
                       const std::function<void()>& zero_grad);
  // The batches of one optimizer step (train.accumulate_steps of them) as one: each is cut
  // as a batch alone would be, and the step function is called on all their micro-batches
  // in order, `last` only on the very last (no gradient synchronisation before it).
  // unsplittable: every batch is at one sample per micro-batch.
  MicroBatchResult Run(const std::vector<Batch>& batches, const StepFn& forward_backward,
                       const std::function<void()>& zero_grad);

  // Padded tokens per micro-batch since the last recovery; 0: whole batches.
  int64_t micro_batch_tokens() const { return micro_batch_tokens_; }
  int64_t total_recoveries() const { return total_recoveries_; }

 private:
  const OomOptions options_;
  int64_t micro_batch_tokens_ = 0;
  int64_t total_recoveries_ = 0;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MEMORY_OOM_H_
