// The `step` events: each step's figures summed into a window and reported as means at
// most about twice a second (and after the attempt's first step, at each epoch's end,
// before an evaluation, at max_steps and when a stop was requested: a run's last step is
// always reported), with a log line at most every 10 s. The keys are those
// of common/format/step_metrics.h, which the worker exports; a test checks both ways.
#ifndef NIGHTSHIFT_WORKER_TRAINER_STEP_REPORT_H_
#define NIGHTSHIFT_WORKER_TRAINER_STEP_REPORT_H_

#include <chrono>
#include <cstdint>

#include "worker/trainer/run.h"

namespace nightshift::trainer {

class StepReporter {
 public:
  explicit StepReporter(const Run& run);  // not owned; outlives the reporter

  // After a step of `batch` (run.position already advanced): `lr` it ran with, seconds
  // it waited for data and took in all.
  void Add(const StepBatches& batch, const MicroBatchResult& fb, double lr, double wait_seconds, double step_seconds);

 private:
  void Emit(const StepBatches& last, const MicroBatchResult& fb, double lr);

  const Run& run_;
  const int64_t first_step_;  // the attempt's first step is reported at once
  struct Window {             // sums since the last event
    int64_t steps = 0, tokens = 0, padded = 0, samples = 0;
    double seconds = 0, wait = 0, loss = 0;
    double allreduce = 0, allreduce_hidden = 0;  // data parallel: seconds, fraction
  } window_;
  std::chrono::steady_clock::time_point last_report_, last_log_;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_STEP_REPORT_H_
