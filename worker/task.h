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

namespace nightshift {

struct WorkerOptions {
  std::string coordinator;       // HOST:PORT of the coordinator
  std::string token;             // bearer token for the coordinator (role worker); empty: none
  std::string token_file;        // or a file holding it (else env NIGHTSHIFT_TOKEN)
  std::string tls_ca;            // PEM CA of the coordinator's certificate; empty: plaintext
  std::string tls_cert, tls_key; // this worker's certificate and key (mutual TLS); optional
  // Data (data.path, model.path) must resolve inside one of these real paths; empty: anywhere.
  std::vector<std::string> data_roots;
  std::string name;              // unique worker name
  std::string work_dir;          // data cache, job configs and rank logs
  std::string checkpoint_root;   // <root>/<job id>/ holds a job's checkpoints; default <work_dir>/checkpoints
  std::string advertise_host = "127.0.0.1";  // address other workers reach rank 0 on
  std::string trainer_path;      // default: nightshift-trainer beside this binary
  int cpu_slots = 1;             // ranks this worker runs at once (no GPUs)
  std::vector<v1::GpuInfo> gpus; // found at start (NVML); one slot each when present
  int prep_threads = 2;          // threads for tokenization
  int64_t cache_max_bytes = 0;   // feature cache budget; 0: none
  double stop_grace_seconds = 10;  // SIGTERM, then SIGKILL after this long
  int64_t log_max_bytes = 64 << 20;  // a rank log rotates past this size
  int log_keep = 3;                  // rotated rank logs kept (rank-R.log.1 .. .N)
  std::string log_listen = "127.0.0.1:0";  // WorkerLogService address (port 0: pick one)
  std::string log_address;       // where the coordinator reaches it (set once it listens)
};

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
