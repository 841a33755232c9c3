// ProgressAggregator: folds the progress records of a task's ranks (the trainers' lines,
// common/format/progress.h) into what the agent reports: the task's progress, latest
// checkpoint and final metrics, for which the lowest local rank speaks; and per rank
// its latest step and checkpoint records (the metrics endpoint) and its last error.
// Not thread-safe: the task holds it under its mutex.
#ifndef NIGHTSHIFT_WORKER_PROGRESS_AGGREGATOR_H_
#define NIGHTSHIFT_WORKER_PROGRESS_AGGREGATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/format/progress.h"
#include "nightshift/v1/cluster.pb.h"

namespace nightshift {

class ProgressAggregator {
 public:
  struct RankRecords {
    format::ProgressRecord step, checkpoint;  // the latest of each; event empty: none yet
  };

  static constexpr int kMaxEvals = 256;

  explicit ProgressAggregator(int first_rank) : first_rank_(first_rank) {}

  // Folds in one record of global rank `rank`. True when what the agent reports of the
  // task changed (a record of the first rank).
  bool Add(int rank, const format::ProgressRecord& record);

  // Sets the fields of *status that come from the ranks: progress (left unset before
  // the first "start" or "step"), checkpoint_step, checkpoint_path, metrics (val_*
  // and train_seconds of "eval" and "done"), evals (every "eval", the last kMaxEvals) and
  // model_path, model_step (the "export" event: the exported model folder).
  void Fill(v1::TaskStatus* status) const;

  const std::map<int, RankRecords>& ranks() const { return ranks_; }  // by global rank
  // How many "eval" records the first rank sent (all of them, not only the kept ones).
  int64_t evaluations() const { return evaluations_; }
  // The message of the rank's last "error" event; empty if it sent none.
  std::string LastError(int rank) const;

 private:
  const int first_rank_;
  v1::Progress progress_;  // eta derived; `updated` is when the last step or start came
  int64_t checkpoint_step_ = 0;
  std::optional<int64_t> resumed_step_;  // rank 0's "start": where this attempt resumed
  std::string checkpoint_path_;
  std::map<std::string, double> metrics_;
  std::vector<v1::EvalPoint> evals_;  // in order, at most kMaxEvals
  int64_t evaluations_ = 0;
  std::string model_path_;
  int64_t model_step_ = 0;
  std::string stop_reason_;  // the "done" event's (train.early_stopping)
  std::map<int, RankRecords> ranks_;
  std::map<int, std::string> last_errors_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_PROGRESS_AGGREGATOR_H_
