// A training run's parts, composed once before the loop by BuildRun and owned by Run;
// the loop (train.cc) calls them and holds no state of its own besides RunPosition.
//
// BuildRun, in order: device and precision checks, threads and the BLAS rate, the data
// shards, the model and optimizer, the resume from the newest checkpoint (refused when it
// belongs to another configuration), the data-parallel group (every rank starts from
// rank 0's parameters at rank 0's position), the token budget (max_tokens: auto probes
// it once; a resumed run keeps its own), the step count, and the `start` event.
// Everything it throws (std::runtime_error) names the field or file at fault.
#ifndef NIGHTSHIFT_WORKER_TRAINER_RUN_H_
#define NIGHTSHIFT_WORKER_TRAINER_RUN_H_

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/format/shard.h"
#include "worker/trainer/optim/amp.h"
#include "worker/trainer/optim/schedule.h"
#include "worker/trainer/data/batching.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/config.h"
#include "worker/trainer/data/data_loader.h"
#include "worker/trainer/parallel/ddp.h"
#include "worker/trainer/parallel/fully_sharded.h"
#include "worker/trainer/parallel/sharded_adamw.h"
#include "worker/trainer/device.h"
#include "worker/trainer/fault_injection.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/memory/oom.h"
#include "worker/trainer/position.h"
#include "worker/trainer/progress_sink.h"
#include "worker/trainer/parallel/step_agreement.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {

// The batches of one optimizer step: train.accumulate_steps of them (fewer at an epoch's
// end), and their sums.
struct StepBatches {
  std::vector<Batch> batches;
  int64_t real_tokens = 0, padded_tokens = 0, samples = 0;
};

class Run {
 public:
  using Clock = std::chrono::steady_clock;

  // Not owned: cfg, rank and progress outlive the run.
  Run(const TrainConfig& cfg, const RankInfo& rank, ProgressSink& progress);

  // ---- what the loop calls, in loop order
  // Opens epoch position.epoch's batches from position.batch_in_epoch on.
  void OpenEpoch();
  bool EpochDone() const { return position.batch_in_epoch >= static_cast<int64_t>(epoch_plan_.size()); }
  bool StepLimitReached() const { return cfg.train.max_steps > 0 && position.step >= cfg.train.max_steps; }
  // The next step's batches, on the device; *wait_seconds: the time spent waiting for them.
  StepBatches NextBatches(double* wait_seconds);
  // Sets the schedule's learning rate for the step about to run (scaled by lr_scale).
  double SetLearningRate();
  // What this rank wants of the step about to run (StepIntent: stop, checkpoint, poison).
  StepIntent Intent() const;
  // Forward and backward of the batch (micro-batches after an out-of-memory error), ending
  // in the step's one collective; agreement.decision() holds what the ranks decided.
  MicroBatchResult ForwardBackward(const StepBatches& step);
  // Clears the model's gradients and the optimizer's.
  void ZeroGrad();
  // Sharded: reduce-scatters the gradients first (the optimizer's shard holds them then;
  // fully sharded blocks reduced theirs in backward).
  // fp16: unscales and checks the gradients (an overflow skips the step and backs the
  // scale off); clips; steps the optimizer.
  void ClipAndStep();
  // Position after a trained (or skipped) step of `step`'s batches.
  void Advance(const StepBatches& step);
  // Back to the newest complete checkpoint with half the learning rate (NaN guard).
  void RollBack();
  // Data parallel: every rank calls it; the writers (WritesCheckpoints) write. Nothing
  // when this step was saved already (or is the one the run resumed from).
  void SaveCheckpoint();
  // Whether this rank writes checkpoint_dir: rank 0 when it is shared
  // (cfg.checkpoint_dir_shared), else the first rank on each worker (local rank 0).
  bool WritesCheckpoints() const;
  // Whether eval.every_steps asks for an evaluation after this step.
  bool EvalDue() const { return cfg.eval_every_steps > 0 && position.step % cfg.eval_every_steps == 0; }
  // The validation split; an `eval` event. Then, with `track`, train.early_stopping's
  // bookkeeping (sets stop_early) and export.best's (a better value is checkpointed at
  // once and kept).
  void Evaluate(bool track = true);
  // After the evaluation at one of cfg.await_steps (an ASHA trial's rung; not its last
  // step): waits, polling cfg.judged_file, until it holds this step or more (the sweep let
  // the trial go on) or a stop is requested (it paused the trial), for at most
  // cfg.await_seconds; then the ranks agree (one collective): if any was asked to stop,
  // every rank saves a checkpoint of this step and the run stops here. Whether it stops.
  // `epoch_end`: after an epoch's end's evaluation (position.epoch already counts that
  // epoch), at one of cfg.await_epochs instead.
  bool AwaitJudgement(bool epoch_end = false);
  // Once, before the first step. A run resumed from an early stop (its export cut short)
  // stops again (stop_early); from a step whose due evaluation never ran (a stop saved
  // before it), that evaluation runs now, then AwaitJudgement. Whether to stop.
  bool CatchUp();
  // After the last step: evaluates and saves unless done at this step, exports the model
  // (rank 0: checkpoint_dir/model, export.h, that of the best step with export.best; an
  // `export` event); the `done` event (with the early stop's reason).
  void Finish();
  void Export(const std::function<void(const torch::Tensor&)>& before = {});  // before: ExportModel's
  double TrainSeconds() const;
  // The loss of a batch, summed over its samples or predicted tokens (the mean is sum /
  // LossCount), its forward in the run's precision.
  torch::Tensor BatchLossSum(const Batch& batch);

  // ---- the parts (constant after BuildRun unless noted)
  const TrainConfig& cfg;
  const RankInfo& rank;
  ProgressSink& progress;
  torch::Device device = torch::kCPU;
  int threads = 1;
  double blas_gflops = 0, peak_flops = 0;  // peak: MFU's denominator, FLOP/s
  format::ShardReader train_shard, val_shard;
  std::vector<uint32_t> train_lengths, val_lengths;  // tokens per sample, cut at max_len
  BatchPlanOptions plan_options;
  BatchPlan val_plan;
  bool next_token = false;  // language modelling (gpt_lm, or data without classes)
  std::shared_ptr<SequenceModel> model;
  hf::AttachedAdapter adapter;  // model.adapter: what AttachLora adapted (empty without one)
  int64_t num_parameters = 0, non_embedding_parameters = 0;
  std::unique_ptr<torch::optim::AdamW> optimizer;  // a FusedAdamW (fused_adamw.h)
  ShardedAdamW* sharded = nullptr;  // resources.sharding optimizer: `optimizer` as its type; else null
  FullyShardedAdamW* full = nullptr;  // resources.sharding full: likewise
  std::unique_ptr<CheckpointManager> checkpoints;
  std::string fingerprint;  // RunFingerprint of this configuration
  std::unique_ptr<GradientSync> ddp;  // null: one rank
  std::unique_ptr<GradScaler> scaler;
  NanGuard nan_guard;
  FaultInjector faults;
  std::unique_ptr<StepAgreement> agreement;
  std::unique_ptr<MicroBatchRunner> micro_batches;
  BatchStager stage_batch;
  int64_t total_steps = 0;
  RunPosition position;   // changes every step
  EvalMetrics last_eval;  // changes every evaluation
  int64_t oom_recoveries = 0;
  int64_t stand_ins = 0;  // MicroBatchResult::stand_ins, summed
  std::string stop_early;  // why train.early_stopping ended the run ("": it did not)

 private:
  void TrackBest();           // export.best
  void TrackEarlyStopping();  // train.early_stopping
  void StopIfPatienceRanOut();  // sets stop_early when the count reached the patience
  // Data parallel, once any rank has recovered from an out-of-memory error, and at every
  // step on a GPU: every rank takes rank 0's generators (CPU, accelerator), as the ranks
  // drew dropout's seeds in different numbers (their micro-batches, stand-ins, a failed
  // attempt's forward) or, on a GPU, advanced its generator by their batches' sizes; so
  // the state a writer saves is every rank's, and a resume goes on exactly. One broadcast.
  void AgreeGenerators();
  // Every rank's micro-batch size for the checkpoint (RunPosition::micro_batch_tokens):
  // one all-reduce, only once some rank has recovered (empty before).
  std::vector<int64_t> MicroBatchTokensOfRanks();
  friend std::unique_ptr<Run> BuildRun(const TrainConfig&, const RankInfo&, ProgressSink&);

  Clock::time_point started_ = Clock::now();
  double seconds_before_ = 0;  // train_seconds of earlier attempts
  int64_t last_saved_step_ = -1, last_eval_step_ = -1;
  BatchPlan epoch_plan_;
  std::unique_ptr<BatchPrefetcher> loader_;  // reads epoch_plan_
};

std::unique_ptr<Run> BuildRun(const TrainConfig& cfg, const RankInfo& rank, ProgressSink& progress);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_RUN_H_
