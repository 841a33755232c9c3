// Fault injection for tests, in one place and off by default. A rank's plan comes from
// its environment (ReadRankInfo, config.h: NIGHTSHIFT_FAULT_*) or from a test; with the
// default plan (all zeros) every hook returns at once and changes nothing.
#ifndef NIGHTSHIFT_WORKER_TRAINER_FAULT_INJECTION_H_
#define NIGHTSHIFT_WORKER_TRAINER_FAULT_INJECTION_H_

#include <cstdint>

namespace nightshift::trainer {

// Steps are 1-based (the step about to run is step + 1 of RunPosition); 0 means off.
struct FaultPlan {
  int64_t abort_at_step = 0;       // NIGHTSHIFT_FAULT_ABORT_AT_STEP: abort() before it runs
  int64_t oom_above_tokens = 0;    // NIGHTSHIFT_FAULT_OOM_ABOVE_TOKENS: a micro-batch of more
                                   // padded tokens runs out of memory before its forward
  bool oom_in_backward = false;    // NIGHTSHIFT_FAULT_OOM_IN_BACKWARD=1: instead, halfway through
                                   // its backward (as the trainer computes the gradient of its
                                   // middle trainable parameter: InBackward); the same for
                                   // probe_oom_above_tokens's probes
  int64_t nan_loss_from_step = 0;  // NIGHTSHIFT_FAULT_NAN_LOSS_FROM_STEP: the loss of this
                                   // step and every later one counts as not finite
  int64_t nan_losses = 0;          // NIGHTSHIFT_FAULT_NAN_LOSSES: only the first this many
                                   // of those (0: all); a roll-back's steps run clean after
  int64_t probe_oom_above_tokens = 0;  // NIGHTSHIFT_FAULT_PROBE_OOM_ABOVE_TOKENS: a probe of
                                       // max_tokens auto of more padded tokens runs out of
                                       // memory as its backward ends (after its collectives)
};

class FaultInjector {
 public:
  explicit FaultInjector(FaultPlan plan = {}) : plan_(plan) {}

  // Kills the process (abort(), as a crash would) before step `step` runs.
  void BeforeStep(int64_t step) const;
  // Throws the c10::OutOfMemoryError an allocator would, before a micro-batch's forward
  // (oom_above_tokens). Called before every micro-batch: it is the one InBackward judges.
  void BeforeMicroBatch(int64_t padded_tokens) const;
  // Before every max_tokens auto probe: the one InBackward judges next (nothing thrown).
  void BeforeProbe(int64_t padded_tokens) const;
  // The same error, thrown from within the backward (oom_in_backward) of the micro-batch or
  // probe seen last: the trainer calls it from a gradient hook.
  void InBackward() const;
  bool oom_in_backward() const {
    return plan_.oom_in_backward && (plan_.oom_above_tokens > 0 || plan_.probe_oom_above_tokens > 0);
  }
  // The same after a max_tokens auto probe's backward (probe_oom_above_tokens).
  void AfterProbe(int64_t padded_tokens) const;
  // Whether step `step`'s loss is to be treated as not finite (asked once a step).
  bool PoisonsLoss(int64_t step) const {
    if (plan_.nan_loss_from_step <= 0 || step < plan_.nan_loss_from_step) return false;
    return plan_.nan_losses <= 0 || poisoned_++ < plan_.nan_losses;
  }

 private:
  FaultPlan plan_;
  mutable int64_t poisoned_ = 0;  // losses poisoned so far (nan_losses)
  mutable int64_t tokens_ = 0;   // the micro-batch or probe seen last,
  mutable bool probing_ = false; // a probe
};

// The out-of-memory error injection throws (a c10::OutOfMemoryError naming the limit).
[[noreturn]] void ThrowInjectedOutOfMemory(int64_t padded_tokens, int64_t limit,
                                           const char* variable = "NIGHTSHIFT_FAULT_OOM_ABOVE_TOKENS");

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_FAULT_INJECTION_H_
