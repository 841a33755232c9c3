#include "worker/agent.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "common/grpc_status.h"
#include "common/log.h"
#include "common/status.h"

namespace nightshift {
namespace {
std::unique_ptr<grpc::ClientContext> ContextWithDeadline(int seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  return ctx;
}
}  // namespace

Agent::Agent(const WorkerOptions& options, FeatureCache* cache)
    : options_(options),
      cache_(cache),
      stub_(v1::WorkerService::NewStub(
          grpc::CreateChannel(options.coordinator, grpc::InsecureChannelCredentials()))) {}

bool Agent::Register() {
  v1::RegisterRequest req;
  req.set_name(options_.name);
  req.set_slots(options_.cpu_slots);
  for (const auto& [id, task] : tasks_) *req.add_tasks() = task->Snapshot();
  v1::RegisterResponse resp;
  auto ctx = ContextWithDeadline(5);
  grpc::Status s = stub_->Register(ctx.get(), req, &resp);
  if (!s.ok()) {
    static int failures = 0;
    if (failures++ % 20 == 0)
      NS_WARN("worker " << options_.name << ": cannot register with " << options_.coordinator << ": "
                        << GrpcErrorString(s));
    return false;
  }
  if (resp.heartbeat_interval_ms() > 0) interval_ms_ = resp.heartbeat_interval_ms();
  NS_INFO("worker " << options_.name << ": registered with " << options_.coordinator << ", "
                    << options_.cpu_slots << " slots");
  return true;
}

void Agent::HeartbeatOnce() {
  v1::HeartbeatRequest req;
  req.set_name(options_.name);
  for (const auto& [id, task] : tasks_) *req.add_tasks() = task->Snapshot();
  // The cache report rides along when it changed, and every 30 s regardless.
  const uint64_t cache_version = cache_->version();
  const bool send_cache = cache_version != reported_cache_version_ ||
                          std::chrono::steady_clock::now() >= next_cache_report_;
  if (send_cache) {
    *req.mutable_cache() = cache_->Report();
  }
  v1::HeartbeatResponse resp;
  auto ctx = ContextWithDeadline(5);
  grpc::Status s = stub_->Heartbeat(ctx.get(), req, &resp);
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    registered_ = false;
    return;
  }
  if (!s.ok()) return;
  if (send_cache) {
    reported_cache_version_ = cache_version;
    next_cache_report_ = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  }
  if (resp.evict_cache_all()) {
    NS_INFO("worker " << options_.name << ": evicted " << cache_->EvictAll() << " cache entries (operator)");
  }
  for (const auto& key : resp.evict_cache_keys()) {
    Status es = cache_->Evict(key);
    NS_INFO("worker " << options_.name << ": evict " << key << ": " << (es.ok() ? "done" : es.ToString()));
  }
  for (const auto& id : resp.stop()) {
    auto it = tasks_.find({id.job_id(), id.attempt()});
    if (it != tasks_.end()) {
      NS_INFO("worker " << options_.name << ": stopping " << id.job_id() << " attempt " << id.attempt());
      it->second->Stop();
    }
  }
  for (const auto& a : resp.start()) {
    auto key = std::make_pair(a.task().job_id(), a.task().attempt());
    if (tasks_.count(key)) continue;  // already ours (the assignment is repeated until we report it)
    NS_INFO("worker " << options_.name << ": starting " << a.task().job_id() << " attempt " << a.task().attempt()
                      << ", ranks " << a.first_rank() << ".." << a.first_rank() + a.num_ranks() - 1
                      << " of " << a.world_size());
    auto task = std::make_unique<Task>(options_, a, cache_);
    task->Start();
    tasks_[key] = std::move(task);
  }
}

void Agent::ReportTasks() {
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    Task* task = it->second.get();
    const bool finished = task->finished();
    if (!task->TakeProgressDirty() && !finished) {
      ++it;
      continue;
    }
    v1::ReportTaskRequest req;
    req.set_name(options_.name);
    *req.mutable_status() = task->Snapshot();
    v1::ReportTaskResponse resp;
    auto ctx = ContextWithDeadline(5);
    grpc::Status s = stub_->ReportTask(ctx.get(), req, &resp);
    if (s.ok() && finished) {
      NS_INFO("worker " << options_.name << ": " << it->first.first << " attempt " << it->first.second << " "
                        << v1::TaskState_Name(req.status().state()) << " reported");
      it = tasks_.erase(it);  // joins the task's thread (already done)
      continue;
    }
    ++it;
  }
}

void Agent::Run(const std::atomic<bool>* stop) {
  auto next_report = std::chrono::steady_clock::now();
  while (!*stop) {
    if (!registered_) {
      registered_ = Register();
    } else {
      HeartbeatOnce();
      // Progress at most once a second; results as soon as they are known.
      bool any_finished = false;
      for (const auto& [id, task] : tasks_) any_finished |= task->finished();
      if (any_finished || std::chrono::steady_clock::now() >= next_report) {
        ReportTasks();
        next_report = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(registered_ ? interval_ms_ : 500));
  }
  NS_INFO("worker " << options_.name << ": shutting down, stopping " << tasks_.size() << " tasks");
  tasks_.clear();
}

}  // namespace nightshift
