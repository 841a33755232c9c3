// Task: one worker's part of one attempt of a job: prepare the data, start a trainer
// per local rank, follow their progress lines, and end SUCCEEDED or FAILED with the
// failing rank's error. Runs on its own thread; the agent reads snapshots of it. The
// processes are the Supervisor's, the reading of their lines the ProgressAggregator's.
#ifndef NIGHTSHIFT_WORKER_TASK_H_
#define NIGHTSHIFT_WORKER_TASK_H_

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "nightshift/v1/cluster.pb.h"
#include "worker/feature_cache.h"
#include "worker/progress_aggregator.h"
#include "worker/supervisor.h"
#include "worker/worker_options.h"

namespace nightshift {

class Task {
 public:
  using RankRecords = ProgressAggregator::RankRecords;

  // Copies a checkpoint into this worker's own checkpoint folder (CheckpointCopier::Fetch).
  using FetchCheckpoint = std::function<Status(const v1::CheckpointCopy&)>;

  // `cache` outlives the task. `gpus`: one GPU index per local rank (empty on CPU).
  // `fetch`: null with a shared checkpoint root (nothing is fetched there).
  Task(const WorkerOptions& options, const v1::Assignment& assignment, FeatureCache* cache,
       std::vector<int> gpus = {}, FetchCheckpoint fetch = nullptr);
  const std::vector<int>& gpus() const { return gpus_; }
  ~Task();  // stops the ranks and joins the thread
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  void Start();
  // Asks the ranks to stop (SIGTERM: they checkpoint and exit), SIGKILL after the grace.
  // `dump_stacks`: the ranks are hung; write each one's thread stacks (gdb, else
  // /proc/PID/task/*/stack) to its log, then SIGKILL them.
  void Stop(bool dump_stacks = false) { supervisor_.Stop(dump_stacks); }
  // Once Stop was called or a rank failed (which stops the others).
  bool stopping() const { return supervisor_.stopping(); }
  // The coordinator judged the job's evaluations up to `step` and it goes on
  // (HeartbeatResponse.judged): written to JudgedFile() for ranks waiting at a rung
  // (Assignment.await_steps or await_epochs; nothing without). Agent's thread.
  void Judged(int64_t step);

  v1::TaskStatus Snapshot() const;
  // ProgressAggregator::evaluations (any thread).
  int64_t Evaluations() const;
  // The latest "step" and "checkpoint" progress records of each local rank (for metrics),
  // by global rank.
  std::map<int, RankRecords> RankSnapshot() const;
  bool finished() const;
  // True once per batch of new progress since the last call.
  bool TakeProgressDirty() { return progress_dirty_.exchange(false); }

 private:
  // An ASHA trial: its ranks wait at rungs (Assignment.await_steps or await_epochs).
  bool WaitsAtRungs() const { return assignment_.await_steps_size() + assignment_.await_epochs_size() > 0; }
  void Run();
  std::string JobDir() const;      // the attempt's folder on this worker
  std::string JudgedFile() const;  // in it: the last judged step (config.judged_file)
  // Why this worker will not run the assignment (a user error); "" when it will.
  std::string Refusal() const;
  // Gets the data from the cache, built there when missing; on success fills *data (the
  // trainer config's "data" section) and returns "", else the error.
  std::string Prepare(const std::string& job_dir, nlohmann::json* data, bool* user_error);
  // Runs nightshift-prepare into `build_dir` (see worker/data_prep.h for why a process).
  Status BuildData(const PrepOptions& options, const std::string& build_dir, const std::string& job_dir);
  void RunRanks(const std::string& config_path, const std::string& job_dir);
  // Without a shared checkpoint root, before the ranks start: sets aside the job's local
  // checkpoints the coordinator does not vouch for (Assignment.verified_checkpoints) and
  // fetches the newest vouched one when told to; what it did, for the job's events ("":
  // nothing to tell).
  std::string CheckLocalCheckpoints(const std::string& dir);
  void OnProgressLine(int rank, const std::string& line);
  void Finish(v1::TaskState state, const std::string& error, bool user_error);

  // Constant after construction.
  const WorkerOptions options_;
  const v1::Assignment assignment_;
  FeatureCache* const cache_;
  const std::vector<int> gpus_;
  const FetchCheckpoint fetch_;

  Supervisor supervisor_;              // the task's processes
  std::shared_ptr<CacheLease> lease_;  // the task's thread only: its data stays in the cache while it runs

  mutable std::mutex mu_;
  v1::TaskStatus status_;        // GUARDED_BY(mu_): all but what progress_ fills in
  ProgressAggregator progress_;  // GUARDED_BY(mu_)
  std::atomic<bool> progress_dirty_{false};
  std::atomic<int64_t> judged_{0};  // the step last written to JudgedFile()
  std::thread thread_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_TASK_H_
