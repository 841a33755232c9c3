// Progress lines: the contract between a trainer and its worker. The trainer writes one
// JSON object per line to the file descriptor named by NIGHTSHIFT_PROGRESS_FD (stdout
// when unset); the worker parses them. Objects are flat: string keys, values that are
// numbers or strings. Standard library only.
//
// Every line has "event". Events and their keys (units in the names):
//   start       world_size, rank, resumed_step, num_parameters, train_samples, val_samples,
//               total_steps, blas_gflops, peak_flops (MFU's denominator: the device's
//               dense peak, or the measured GEMM rate on the CPU), non_embedding_parameters,
//               max_tokens (the token budget, probed when the spec says auto; 0: fixed
//               batch_size), batch_size, device (string), torch_version (string)
//   step        the numbers of format::kStepMetrics (step_metrics.h: names, units,
//               meanings), and precision (string: fp32, bf16, fp16)
//   eval        step, epoch, val_loss, val_accuracy, val_f1 (two classes), val_perplexity
//   checkpoint  step, path (string), bytes, seconds
//   export      step, path (string: the model folder, worker/trainer/checkpoint/export.h), seconds
//   warning     message (string)
//   done        step, and the final metrics (val_*; val_perplexity for language
//               models, else null), train_seconds
//   error       message (string): the reason the trainer is about to exit non-zero;
//               permanent: 1 when every restart would meet it again (it then exits with
//               kTrainerExitPermanent)
#ifndef NIGHTSHIFT_COMMON_FORMAT_PROGRESS_H_
#define NIGHTSHIFT_COMMON_FORMAT_PROGRESS_H_

#include <map>
#include <string>

namespace nightshift::format {

// The trainer's exit code for an error every restart would meet again: the worker
// reports it as a user error and the coordinator fails the job instead of restarting it.
inline constexpr int kTrainerExitPermanent = 3;

struct ProgressRecord {
  std::string event;
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> strings;

  double Number(const std::string& key, double fallback = 0) const {
    auto it = numbers.find(key);
    return it == numbers.end() ? fallback : it->second;
  }
  std::string String(const std::string& key) const {
    auto it = strings.find(key);
    return it == strings.end() ? std::string() : it->second;
  }
};

// One line of JSON, without the trailing newline. Non-finite numbers are written as
// null (JSON has no NaN) and read back as NaN.
std::string FormatProgressLine(const ProgressRecord& record);

// Returns "" on success, else what is wrong with the line (never throws, never crashes
// on any input).
std::string ParseProgressLine(const std::string& line, ProgressRecord* record);

}  // namespace nightshift::format

#endif  // NIGHTSHIFT_COMMON_FORMAT_PROGRESS_H_
