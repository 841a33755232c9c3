// The one collective of a training step (besides the gradients' own all-reduce, and under
// sharding full, after an out-of-memory recovery, oom.h's agreement on a micro-batch count).
//
// After each forward/backward attempt MicroBatchRunner (oom.h) calls Vote: it finishes
// this rank's gradient synchronisation (or, after an out-of-memory error, discards it),
// so every rank issues the same collectives, then one all-reduce of every flag tells
// each rank what the ranks decided together:
//   - retry in micro-batches: some rank ran out of memory (and fail: some rank ran out
//     with one sample per micro-batch);
//   - the loss was finite on every rank (one rank's NaN reaches every gradient);
//   - stop after this step: a SIGTERM reached some rank;
//   - checkpoint after this step: one is due on some rank.
// A step's decision is the one of its last attempt, the one no rank ran out of memory in.
// One rank (no GradientSync): the same decisions from the local answers, no collective.
#ifndef NIGHTSHIFT_WORKER_TRAINER_PARALLEL_STEP_AGREEMENT_H_
#define NIGHTSHIFT_WORKER_TRAINER_PARALLEL_STEP_AGREEMENT_H_

#include "worker/trainer/parallel/ddp.h"
#include "worker/trainer/memory/oom.h"

namespace nightshift::trainer {

// What this rank wants of the step, known before it runs.
struct StepIntent {
  bool poison_loss = false;  // fault injection: count the loss as not finite
  bool stop = false;         // a stop was requested (SIGTERM)
  bool save = false;         // a checkpoint is due after this step
};

// What every rank decided, the same on all of them.
struct StepDecision {
  bool loss_finite = true;
  bool stop = false;
  bool save = false;
};

class StepAgreement {
 public:
  explicit StepAgreement(GradientSync* sync) : sync_(sync) {}  // not owned; null: one rank

  // Before the step's first attempt.
  void Begin(const StepIntent& local) { intent_ = local; }
  // MicroBatchRunner's vote (OomOptions::vote), called once per attempt on every rank.
  OomVote Vote(bool local_oom, bool local_unsplittable, double loss);

  const StepDecision& decision() const { return decision_; }  // after the step's last attempt
  const SyncStats& sync_stats() const { return stats_; }      // the last attempt's all-reduce

 private:
  GradientSync* const sync_;
  StepIntent intent_;
  StepDecision decision_;
  SyncStats stats_;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_PARALLEL_STEP_AGREEMENT_H_
