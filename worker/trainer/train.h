// The training run: build, then for each step batch, forward, backward, (all-reduce),
// clip, step, report, checkpoint; evaluate every epoch. Used by main and by the tests.
#ifndef NIGHTSHIFT_WORKER_TRAINER_TRAIN_H_
#define NIGHTSHIFT_WORKER_TRAINER_TRAIN_H_

#include <cstdint>

#include "worker/trainer/data/batching.h"
#include "worker/trainer/config.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/progress_sink.h"

namespace nightshift::trainer {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;      // an `error` event was emitted first
inline constexpr int kExitStopped = 143;  // SIGTERM: checkpoint saved, then exit (128 + 15)
inline constexpr int kExitPermanent = format::kTrainerExitPermanent;  // errors.h; "permanent": 1 first

// Trains (resuming from the newest complete checkpoint in config.checkpoint_dir) and
// returns an exit code above. Never throws: errors become an `error` event, a stderr
// line and kExitError.
int RunTraining(const TrainConfig& config, const RankInfo& rank, ProgressSink& progress);

// SIGTERM sets a flag (nothing else in the handler); the loop checks it after each step.
void InstallStopSignalHandler();
void RequestStop();       // what the handler does (async-signal-safe); tests call it
void ClearStopRequest();  // tests
bool StopRequested();

class ProcessGroup;

struct EvalMetrics {
  double loss = 0;      // mean cross-entropy per sample
  double accuracy = 0;  // in [0, 1]
  double f1 = 0;        // F1 of class 1 (two classes only, else NaN)
  double perplexity = 0;  // exp(loss) for language models, else NaN
  int64_t samples = 0;
};

// Evaluates without gradients in eval mode (restores train mode after). Classifiers:
// loss per sample, accuracy, F1. Language models (next_token): loss per predicted token,
// next-token accuracy, perplexity. With a process group, rank r evaluates batches r,
// r + size, ... and the sums are all-reduced: every rank returns the whole set's metrics.
// `lockstep`: every rank runs the same number of forwards (a model whose blocks gather
// their sharded parameters runs collectives in each): a rank out of batches runs its
// first one again, uncounted.
EvalMetrics Evaluate(SequenceModel& model, const format::ShardReader& shard, const BatchPlan& plan,
                     int64_t max_len, int64_t pad_id, int64_t num_classes, bool next_token = false,
                     ProcessGroup* group = nullptr, bool lockstep = false);

// Best of a few 1024x1024 float matmuls, in GFLOP/s.
double MeasureBlasGflops();

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_TRAIN_H_
