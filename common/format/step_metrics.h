// The numbers of a trainer's `step` progress event (progress.h): the one list of their
// names, units and meanings. The trainer's step events carry exactly these keys (its test
// checks both ways), the worker exports each one that has a Prometheus name (gauges from
// the latest step event, counters from the running totals the trainer reports), and the
// dashboard test requires every trainer series a dashboard queries to be one of them.
// Standard library only: the trainer uses it.
#ifndef NIGHTSHIFT_COMMON_FORMAT_STEP_METRICS_H_
#define NIGHTSHIFT_COMMON_FORMAT_STEP_METRICS_H_

#include <cstring>

namespace nightshift::format {

struct StepMetric {
  const char* key;         // the key in the step event
  const char* prometheus;  // the worker's metric name; nullptr: not exported
  bool counter;            // a running total since the trainer started (else a gauge)
  const char* help;        // what it is, with its unit
};

inline constexpr StepMetric kStepMetrics[] = {
    {"step", "nightshift_trainer_step", false, "Optimizer steps done"},
    {"epoch", "nightshift_trainer_epoch", false, "Current epoch (0-based)"},
    {"total_steps", nullptr, false, "Optimizer steps the run will take"},
    {"loss", "nightshift_trainer_loss", false, "Training loss (mean over the steps since the last event)"},
    {"lr", "nightshift_trainer_learning_rate", false, "Learning rate"},
    {"tokens_per_second", "nightshift_trainer_tokens_per_second", false,
     "Real (non-padding) tokens trained per second"},
    {"mfu", "nightshift_trainer_mfu_ratio", false,
     "Model FLOPs utilisation: tokens/s x training FLOPs per token / the device's dense peak"},
    {"samples_per_second", "nightshift_trainer_samples_per_second", false, "Samples trained per second"},
    {"step_seconds", "nightshift_trainer_step_seconds", false, "Seconds per optimizer step"},
    {"data_wait_seconds", "nightshift_trainer_data_wait_seconds", false, "Seconds per step spent waiting for data"},
    {"padding_efficiency", "nightshift_trainer_padding_efficiency_ratio", false, "Real tokens / padded tokens"},
    {"batch_samples", nullptr, false, "Samples in the last batch"},
    {"batch_padded_tokens", nullptr, false, "Padded tokens (rows x longest row) of the last batch"},
    {"host_rss_bytes", "nightshift_trainer_host_rss_bytes", false, "Host resident memory of the rank, bytes"},
    {"memory_peak_bytes", "nightshift_trainer_memory_peak_bytes", false,
     "Peak memory, bytes (the device allocator's on CUDA, the host resident set's on the CPU)"},
    {"memory_allocated_bytes", "nightshift_trainer_device_memory_allocated_bytes", false,
     "Device memory allocated, bytes (0 on the CPU)"},
    {"memory_reserved_bytes", "nightshift_trainer_device_memory_reserved_bytes", false,
     "Device memory reserved by the caching allocator, bytes (0 on the CPU)"},
    {"allreduce_seconds", "nightshift_trainer_allreduce_seconds", false,
     "Seconds per step from the first gradient all-reduce launch to the last completion (data parallel)"},
    {"allreduce_hidden_fraction", "nightshift_trainer_allreduce_hidden_ratio", false,
     "Share of the all-reduce time that ran before backward ended (data parallel)"},
    {"skipped_steps", "nightshift_trainer_skipped_steps_total", true,
     "Steps not applied: non-finite loss or fp16 gradient overflow"},
    {"oom_recoveries", "nightshift_trainer_oom_recoveries_total", true,
     "Batches split into micro-batches after an out-of-memory error"},
    {"micro_batches", nullptr, false, "Micro-batches of the last batch"},
    {"stand_ins", nullptr, true,
     "Micro-batches of one row weighed 0, run to match another rank's count (sharding full, after a split)"},
    {"grad_scale", nullptr, false, "fp16 loss scale (1 otherwise)"},
};

// The entry for `key`, or nullptr.
inline const StepMetric* FindStepMetric(const char* key) {
  for (const StepMetric& m : kStepMetrics)
    if (std::strcmp(m.key, key) == 0) return &m;
  return nullptr;
}

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_STEP_METRICS_H_
