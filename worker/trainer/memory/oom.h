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
//   runs out of memory: that sample cannot fit (on every rank at once, when on any); or,
//   in lockstep, with a PermanentError (below). A
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
// - Lockstep (sharding full, OomOptions::lockstep): every micro-batch's forward and
//   backward are collectives (the blocks' gathers and reductions), so every rank runs the
//   same number of micro-batches, and one that runs out of memory in the middle of them
//   must still issue the rest before it can vote. Before an attempt whose batches any
//   rank may have cut (after a recovery), the ranks agree on the largest count; a rank with
//   fewer micro-batches runs stand-ins for the rest (StandIn: two tokens of its last
//   micro-batch's first row), their loss weighed 0 (the step function is told), so their
//   gradients add exact zeros. A rank whose attempt runs out of memory catches up: it
//   clears what the attempt left (zero_grad, release_memory), then runs the attempt again
//   on stand-ins (one of each of its micro-batches, with the same `last`) with the
//   collectives it had issued skipped
//   (Lockstep::skip), so it issues each of the attempt's collectives once, as the other
//   ranks do, and votes with them. The sequence of collectives must not depend on the
//   data (it depends on the blocks, the micro-batch count and `last`). The rerun computes
//   on blocks whose skipped gathers left them unwritten, and its reductions add that to
//   every rank's gradients: harmless, as every rank clears them for the retry. Running out
//   of memory again while catching up, or a rerun that issues fewer collectives than were
//   skipped, is a PermanentError (errors.h): the other ranks are left in a collective until
//   its timeout.
// Units: tokens are padded tokens (rows x longest row).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MEMORY_OOM_H_
#define NIGHTSHIFT_WORKER_TRAINER_MEMORY_OOM_H_

#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
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

// A process group as a lockstep catch-up needs it (ProcessGroup, ddp.h, behind these).
struct Lockstep {
  std::function<int64_t(int64_t)> most;  // the largest of every rank's value (a collective)
  std::function<int64_t()> issued;       // collectives this rank has issued so far
  std::function<void(int64_t)> skip;     // the next n return at once, unissued (0: none)
  std::function<int64_t()> skipping;     // of those n, not reached yet
};

// The catch-up (see the header comment): `rerun` (the attempt again, on stand-ins, after
// clearing what it left) with the attempt's first `issued` collectives skipped. What
// `rerun` throws is rethrown, an out-of-memory error as a PermanentError naming `what`
// ("a training step"); so is a rerun that issued fewer than `issued`.
void CatchUp(const Lockstep& lockstep, int64_t issued, const std::string& what, const std::function<void()>& rerun);

struct OomOptions {
  // The ranks' decision after an attempt, given this rank's answers (it ran out of
  // memory; it did so with one sample per micro-batch; the attempt's loss, meaningless
  // after an out-of-memory error). The trainer passes StepAgreement::Vote
  // (step_agreement.h), the step's one collective; default: the local answers.
  std::function<OomVote(bool local_oom, bool local_unsplittable, double loss)> vote =
      [](bool oom, bool unsplittable, double) { return OomVote{oom, unsplittable}; };
  // Called after an out-of-memory attempt, before the retry (e.g. empty CUDA caches).
  std::function<void()> release_memory = [] {};
  // Sharding full: the ranks run in lockstep (see the header comment); unset: each rank
  // cuts its own batches and its micro-batches issue no collective before the last.
  std::optional<Lockstep> lockstep;
};

// What Run() did with one batch.
struct MicroBatchResult {
  double loss = 0;            // sum of the step function's returns (the batch's mean loss)
  int64_t micro_batches = 1;  // micro-batches of the final, successful attempt
  int64_t oom_recoveries = 0; // out-of-memory attempts survived in this batch
  int64_t stand_ins = 0;      // lockstep: stand-ins of the final attempt (to another rank's count)
};

// Rows [begin, end) of `batch`, trimmed to their longest sample (padding at the end).
Batch SliceBatch(const Batch& batch, int64_t begin, int64_t end);
// Lockstep's stand-in for a micro-batch: its first row cut to its first two tokens (the same
// blocks and collectives as any micro-batch, at almost no memory or time).
Batch StandIn(const Batch& batch);
// `pieces` (1 <= pieces <= batch.samples) contiguous slices with sizes as even as possible.
std::vector<Batch> SplitBatch(const Batch& batch, int64_t pieces);

class MicroBatchRunner {
 public:
  // forward_backward(micro, last, stand_in): forward, the micro-batch's weighted loss,
  // backward; returns that weighted loss's value. `last`: the attempt's final micro-batch
  // (the one whose backward may synchronise gradients). `stand_in` (lockstep only): a
  // stand-in, whose loss must be weighed 0. zero_grad(): clears the gradients.
  using StepFn = std::function<double(const Batch& micro, bool last, bool stand_in)>;

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

  // Padded tokens per micro-batch since the last recovery; 0: whole batches. Under data
  // parallelism every rank's is 0 or none is (every rank cuts after any rank's recovery).
  int64_t micro_batch_tokens() const { return micro_batch_tokens_; }
  // A resumed run's: what the checkpoint kept (RunPosition::micro_batch_tokens).
  void Resume(int64_t micro_batch_tokens) { micro_batch_tokens_ = micro_batch_tokens; }
  int64_t total_recoveries() const { return total_recoveries_; }

 private:
  // Lockstep: pads `micro` with stand-ins to the ranks' largest count (`stand_ins` of
  // them at its end), when a rank may have cut its batches (`cut`).
  void AgreeCount(bool cut, std::vector<Batch>* micro, size_t* stand_ins) const;
  // Lockstep, after this rank's attempt on `micro` ran out of memory having issued
  // `issued` collectives: clears it and reruns it on stand-ins, those skipped.
  void CatchUp(const std::vector<Batch>& micro, int64_t issued, const StepFn& forward_backward,
               const std::function<void()>& zero_grad) const;

  const OomOptions options_;
  int64_t micro_batch_tokens_ = 0;
  int64_t total_recoveries_ = 0;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MEMORY_OOM_H_
