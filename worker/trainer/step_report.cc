#include "worker/trainer/step_report.h"

#include <algorithm>

#include "worker/trainer/memory/memory_probe.h"

namespace nightshift::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

}  // namespace

StepReporter::StepReporter(const Run& run)
    : run_(run), first_step_(run.position.step), last_report_(Clock::now()), last_log_(Clock::now()) {}

void StepReporter::Add(const StepBatches& batch, const MicroBatchResult& fb, double lr, double wait_seconds,
                       double step_seconds) {
  const SyncStats& sync = run_.agreement->sync_stats();
  window_.steps++;
  window_.tokens += batch.real_tokens;
  window_.padded += batch.padded_tokens;
  window_.samples += batch.samples;
  window_.seconds += step_seconds;
  window_.wait += wait_seconds;
  window_.allreduce += sync.allreduce_seconds;
  window_.allreduce_hidden += sync.hidden_fraction;
  window_.loss += fb.loss;
  const int64_t step = run_.position.step;
  if (run_.progress.wants_steps() &&
      (step == first_step_ + 1 || run_.EpochDone() || run_.EvalDue() || run_.StepLimitReached() ||
       Seconds(last_report_) >= 0.5 || StopRequested()))
    Emit(batch, fb, lr);
}

void StepReporter::Emit(const StepBatches& last, const MicroBatchResult& fb, double lr) {
  const Window& w = window_;
  const RunPosition& pos = run_.position;
  const double mean_loss = w.loss / w.steps;
  const double tokens_per_second = w.tokens / w.seconds;
  const double row_len = double(w.padded) / double(std::max<int64_t>(w.samples, 1));
  const double mfu =
      tokens_per_second * TrainingFlopsPerToken(run_.non_embedding_parameters, run_.cfg.model, row_len) /
      run_.peak_flops;
  const DeviceMemory memory = GetDeviceMemory(run_.device);
  run_.progress.Emit(format::ProgressRecord{
      "step",
      {{"step", double(pos.step)}, {"epoch", double(pos.epoch)}, {"total_steps", double(run_.total_steps)},
       {"loss", mean_loss}, {"lr", lr},
       {"tokens_per_second", tokens_per_second}, {"mfu", mfu},
       {"samples_per_second", w.samples / w.seconds},
       {"step_seconds", w.seconds / w.steps},
       {"data_wait_seconds", w.wait / w.steps},
       {"padding_efficiency", double(w.tokens) / double(w.padded)},
       {"batch_samples", double(last.samples)}, {"batch_padded_tokens", double(last.padded_tokens)},
       {"host_rss_bytes", double(std::max<int64_t>(0, ProcBytes("/proc/self/status", "VmRSS:")))},
       {"memory_peak_bytes", double(PeakMemoryBytes(run_.device))},
       {"memory_allocated_bytes", double(memory.allocated)},
       {"memory_reserved_bytes", double(memory.reserved)},
       {"allreduce_seconds", w.allreduce / w.steps},
       {"allreduce_hidden_fraction", w.allreduce_hidden / w.steps},
       {"skipped_steps", double(run_.nan_guard.skipped_steps())},
       {"oom_recoveries", double(run_.oom_recoveries)}, {"micro_batches", double(fb.micro_batches)},
       {"stand_ins", double(run_.stand_ins)},
       {"grad_scale", run_.scaler->scale()}},
      {{"precision", run_.cfg.train.precision}}});
  if (Seconds(last_log_) >= 10 || pos.step == first_step_ + 1) {
    Log("step %lld/%lld epoch %lld loss %.4f lr %.3g %.0f tokens/s MFU %.3f", static_cast<long long>(pos.step),
        static_cast<long long>(run_.total_steps), static_cast<long long>(pos.epoch), mean_loss, lr,
        tokens_per_second, mfu);
    last_log_ = Clock::now();
  }
  window_ = Window{};
  last_report_ = Clock::now();
}

}  // namespace nightshift::trainer
