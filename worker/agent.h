// Agent: the worker's side of the worker protocol. Registers, heartbeats the tasks it
// holds, starts and stops tasks as the coordinator answers, and reports progress and
// results. A final result is re-sent until the coordinator acknowledges it, so a
// coordinator restart loses no result.
#ifndef NIGHTSHIFT_WORKER_AGENT_H_
#define NIGHTSHIFT_WORKER_AGENT_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/metrics.h"
#include "nightshift/v1/cluster.grpc.pb.h"
#include "worker/gpu_inventory.h"
#include "worker/task.h"

namespace nightshift {

class Agent {
 public:
  Agent(const WorkerOptions& options, FeatureCache* cache);
  // Runs until *stop becomes true; then stops every task.
  void Run(const std::atomic<bool>* stop);

  // Rank slots offered: one per GPU, else --cpu-slots.
  int Slots() const;

  // Whether a task of `job_id` is still running here (any thread).
  bool IsRunning(const std::string& job_id) const;

  // Prometheus families for the worker, its tasks' ranks and its cache (any thread).
  void CollectMetrics(FamilyBuilder* b) const;

 private:
  bool Register();
  void HeartbeatOnce();
  void ReportTasks();

  const WorkerOptions options_;
  FeatureCache* const cache_;        // not owned; outlives the agent
  GpuAllocator gpu_allocator_;       // the GPUs not held by a task
  uint64_t reported_cache_version_ = 0;
  std::chrono::steady_clock::time_point next_cache_report_{};
  std::unique_ptr<v1::WorkerService::Stub> stub_;
  bool registered_ = false;
  int interval_ms_ = 250;
  // Tasks by (job id, attempt). Only the agent thread changes the map, under tasks_mu_;
  // it reads it without the lock, other threads (metrics) with it.
  mutable std::mutex tasks_mu_;
  std::map<std::pair<std::string, int>, std::unique_ptr<Task>> tasks_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_AGENT_H_
