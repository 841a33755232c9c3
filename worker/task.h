// Task: one worker's part of one attempt of a job: prepare the data, start a trainer
// per local rank, follow their progress lines, and end SUCCEEDED or FAILED with the
// failing rank's error. Runs on its own thread; the agent reads snapshots of it.
#ifndef NIGHTSHIFT_WORKER_TASK_H_
#define NIGHTSHIFT_WORKER_TASK_H_

#include <sys/types.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/format/progress.h"
#include "nightshift/v1/cluster.pb.h"
#include "worker/feature_cache.h"
#include "worker/worker_options.h"

namespace nightshift {

class Task {
 public:
  // `cache` outlives the task. `gpus`: one GPU index per local rank (empty on CPU).
  Task(const WorkerOptions& options, const v1::Assignment& assignment, FeatureCache* cache,
       std::vector<int> gpus = {});
  const std::vector<int>& gpus() const { return gpus_; }
  ~Task();  // stops the ranks and joins the thread
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  void Start();
  // Asks the ranks to stop (SIGTERM: they checkpoint and exit), SIGKILL after the grace.
  // `dump_stacks`: the ranks are hung; write each one's thread stacks (gdb, else
  // /proc/PID/task/*/stack) to its log, then SIGKILL them.
  void Stop(bool dump_stacks = false);
  bool stopping() const { return stopping_; }

  v1::TaskStatus Snapshot() const;
  // The latest "step" and "checkpoint" progress records of each local rank (for metrics).
  struct RankRecords {
    format::ProgressRecord step, checkpoint;
  };
  std::map<int, RankRecords> RankSnapshot() const;
  bool finished() const;
  // True once per batch of new progress since the last call.
  bool TakeProgressDirty() { return progress_dirty_.exchange(false); }

 private:
  void Run();
  // Runs nightshift-prepare; on success fills *data (the trainer config's "data"
  // section) and returns "", else the error.
  std::string Prepare(const std::string& job_dir, nlohmann::json* data, bool* user_error);
  void RunRanks(const std::string& config_path, const std::string& job_dir);
  void Finish(v1::TaskState state, const std::string& error, bool user_error);
  void SignalRanks(int sig);

  // Constant after construction.
  const WorkerOptions options_;
  const v1::Assignment assignment_;
  FeatureCache* const cache_;
  const std::vector<int> gpus_;
  std::shared_ptr<CacheLease> lease_;  // the task's data stays in the cache while it runs

  mutable std::mutex mu_;
  v1::TaskStatus status_;         // GUARDED_BY(mu_)
  std::vector<pid_t> pids_;       // GUARDED_BY(mu_), running ranks
  std::map<int, RankRecords> rank_records_;  // GUARDED_BY(mu_), by global rank
  std::atomic<bool> stopping_{false};
  std::atomic<bool> dump_stacks_{false};
  std::atomic<bool> progress_dirty_{false};
  std::thread thread_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_TASK_H_
