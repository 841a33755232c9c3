// Where a run stands: everything, besides the model's and the optimizer's tensors, that
// a checkpoint must hold to continue the run exactly. The loop owns one; the checkpoint
// manager saves and restores it whole (checkpoint.h, manifest version 2).
#ifndef NIGHTSHIFT_WORKER_TRAINER_POSITION_H_
#define NIGHTSHIFT_WORKER_TRAINER_POSITION_H_

#include <cstdint>
#include <string>
#include <vector>

namespace nightshift::trainer {

// fp16's dynamic loss scale (amp.h GradScaler); saved for every precision.
struct ScalerState {
  double scale = 65536.0;      // GradScalerOptions' initial scale
  int64_t growth_tracker = 0;  // finite steps in a row since the scale last changed
};

// The NaN guard's counts (optim/amp.h NanGuard), so a streak of non-finite losses and its
// one roll-back go on across a resume as in an uninterrupted run. (Its skipped steps are
// not: they are a counter of the trainer process, nightshift_trainer_skipped_steps_total.)
struct NanGuardState {
  int consecutive = 0;  // non-finite losses in a row so far
  int rollbacks = 0;    // roll-backs so far (one, then a streak fails the run)
};

struct RunPosition {
  int64_t step = 0;            // optimizer steps done (skipped ones included)
  int64_t epoch = 0;           // current epoch, 0-based
  int64_t batch_in_epoch = 0;  // batches of that epoch's plan already trained, per rank
  // The ranks of the run that wrote it (0: a checkpoint older than this field, taken as
  // the resuming run's). Rank r trains the epoch's global batches r, r + world_size, ...;
  // another world size deals other batches, and goes on after the same samples
  // (BatchesDoneOnResize).
  int64_t world_size = 0;
  double lr_scale = 1.0;       // multiplies the schedule; each NaN roll-back halves it
  // Optimizer steps taken: the schedule's step, as transformers' Trainer steps its
  // scheduler only when the optimizer stepped (an fp16 overflow, or a non-finite loss the
  // NaN guard skips, does not advance the rate). Below `step` by the skipped steps.
  int64_t lr_steps = 0;
  ScalerState scaler;
  NanGuardState nan_guard;
  // Padded tokens per batch the run trains with; with max_tokens: auto, what the probe
  // chose, so a resumed run keeps its batches. 0: fixed batch_size, or not probed yet.
  int64_t max_tokens = 0;
  // Sharding full with resources.accumulate_gradients auto: what was chosen (whole or
  // sharded), so a resumed run sums in the same order. "": not chosen (or not asked).
  std::string accumulate_gradients;
  // After an out-of-memory error: each rank's padded tokens per micro-batch since its
  // last recovery (MicroBatchRunner::micro_batch_tokens, index = rank), so a resumed run
  // cuts its batches as the uninterrupted run would. Empty: no rank has recovered.
  std::vector<int64_t> micro_batch_tokens;
  double train_seconds = 0;    // wall time of training so far, every attempt included
  int64_t tokens_seen = 0;     // real (unpadded) training tokens so far, this rank
  std::string rng_cpu;         // the CPU generator's state (bytes): dropout continues exactly
  std::string rng_device;      // the accelerator's (GetDeviceRngState; "" on the CPU)
  std::string fingerprint;     // RunFingerprint() of the run that wrote it ("": not checked)
  int attempt = -1;            // the job attempt that wrote it (-1: written before fencing)
  // export.best: the step of the best evaluation so far and its value (-1: none yet).
  int64_t best_step = -1;
  double best_metric = 0;
  // The step of the last evaluation (-1: none). Below `step` when a stop saved before an
  // evaluation eval.every_steps asked for at it: the resumed run evaluates first.
  int64_t evaluated_step = -1;
  // train.early_stopping: the best value of its metric so far (has_stop_best: one was
  // seen) and the evaluations since one improved on it by more than min_delta.
  bool has_stop_best = false;
  double stop_best = 0;
  int64_t evals_without_improvement = 0;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_POSITION_H_
