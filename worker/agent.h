// Agent: the worker's side of the worker protocol. Registers, heartbeats the tasks it
// holds (and, without a shared checkpoint root, the checkpoints its disk holds), starts
// and stops tasks and copies checkpoints as the coordinator answers, and reports progress and
// results. A final result is re-sent until the coordinator acknowledges it, so a
// coordinator restart loses no result.
#ifndef NIGHTSHIFT_WORKER_AGENT_H_
#define NIGHTSHIFT_WORKER_AGENT_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "worker/checkpoint_copy.h"
#include "worker/coordinator_client.h"
#include "worker/gpu_inventory.h"
#include "worker/task.h"
#include "worker/file_service.h"
#include "worker/worker_options.h"

namespace nightshift {

// How long each call to the coordinator may take given its lease: half of it, 1 to 30 s.
// A call that would take longer ends and the next heartbeat tries again, still in the lease.
std::chrono::milliseconds CallDeadline(int lease_ms);

class Agent {
 public:
  // `cache` is not owned and outlives the agent. `file_auth` (not owned; may be null)
  // gets the key of each registration (the file service's credentials).
  Agent(const WorkerOptions& options, FeatureCache* cache, std::unique_ptr<CoordinatorClient> coordinator,
        FileServiceAuth* file_auth = nullptr);
  ~Agent();  // stops every task and waits for it

  // Runs until *stop becomes true (or, in an allocation, the coordinator releases it), a
  // RunOnce per heartbeat interval; then stops every task.
  void Run(const std::atomic<bool>* stop);
  // Whether the coordinator told this worker of an allocation to exit (its attempt is over).
  bool released() const { return released_; }
  // One turn: register until that succeeds; after that, one heartbeat (whose answer
  // starts, stops and evicts), then the tasks' reports: results as soon as they are
  // known (until acknowledged), progress at most once a second.
  void RunOnce();

  // Whether the next heartbeat should go before the interval is up: a task has an
  // evaluation the coordinator has not had (an ASHA sweep judges its trials by them, and
  // a trial it pauses trains on until the stop arrives: issue 45), or kFollowUp has passed
  // since a heartbeat that carried one (the coordinator's sweep runner has decided by
  // then: the stop comes back in its answer; a failed heartbeat asks for no follow-up).
  // Never sooner than kEarliest after the last heartbeat.
  bool HeartbeatDueEarly() const;
  static constexpr std::chrono::milliseconds kFollowUp{150}, kEarliest{50};

  // Rank slots offered: one per GPU, else --cpu-slots.
  int Slots() const;

  // Whether a task of `job_id` is still running here (any thread).
  bool IsRunning(const std::string& job_id) const;

  // Prometheus families for the worker, its tasks' ranks and its cache (any thread).
  void CollectMetrics(FamilyBuilder* b) const;

 private:
  using TaskKey = std::pair<std::string, int>;  // job id, attempt

  bool Register();
  void HeartbeatOnce();
  void Evict(const v1::HeartbeatResponse& response);
  void StopTasks(const v1::HeartbeatResponse& response);
  void StartTask(const v1::Assignment& assignment);
  void ReportTasks();
  void StopAll();

  // Constant after construction.
  const WorkerOptions options_;
  FeatureCache* const cache_;
  const std::unique_ptr<CoordinatorClient> coordinator_;
  FileServiceAuth* const file_auth_;  // not owned; may be null

  // The agent's thread only.
  GpuAllocator gpu_allocator_;  // the GPUs not held by a task
  uint64_t reported_cache_version_ = 0;
  std::chrono::steady_clock::time_point next_cache_report_{};
  std::chrono::steady_clock::time_point next_progress_report_{};
  bool registered_ = false;
  bool released_ = false;
  int register_failures_ = 0;  // in a row; every 20th is logged
  int interval_ms_ = 250;      // between heartbeats, as the coordinator says
  std::vector<v1::HeldCheckpoint> held_checkpoints_;  // as of the last scan
  std::map<TaskKey, int64_t> evaluations_sent_;        // each task's, as of the last heartbeat
  std::optional<std::chrono::steady_clock::time_point> follow_up_;  // HeartbeatDueEarly
  std::chrono::steady_clock::time_point last_heartbeat_{};          // the last call, ok or not
  std::chrono::steady_clock::time_point next_checkpoint_scan_{};

  // Only the agent thread changes the map, under tasks_mu_; it reads it without the
  // lock, other threads (metrics, log service) with it.
  mutable std::mutex tasks_mu_;
  std::map<TaskKey, std::unique_ptr<Task>> tasks_;

  // Without a shared checkpoint root: copies other workers' checkpoints here (null with
  // one). Declared last: destroyed (its thread joined) first, as it calls IsRunning.
  std::unique_ptr<CheckpointCopier> copier_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_AGENT_H_
