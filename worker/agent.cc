#include "worker/agent.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "common/format/step_metrics.h"
#include "common/client.h"
#include "common/log.h"
#include "common/status.h"

namespace nightshift {

Agent::Agent(const WorkerOptions& options, FeatureCache* cache, std::unique_ptr<CoordinatorClient> coordinator,
             FileServiceAuth* file_auth)
    : options_(options), cache_(cache), coordinator_(std::move(coordinator)), file_auth_(file_auth),
      gpu_allocator_(options.gpus) {
  // Without a shared checkpoint root, this worker's disk holds its jobs' checkpoints, and
  // copies of others' (checkpoint_copy.h).
  if (options.checkpoint_root.empty()) {
    CheckpointCopier::Options copies{CheckpointRoot(options), [this](const std::string& job) { return IsRunning(job); }};
    // Peers' file services serve TLS when the cluster does, with certificates of its CA.
    ClientOptions to_peers;
    to_peers.tls_ca = options.tls_ca;
    auto credentials = ChannelCredentialsFor(to_peers);
    if (credentials.ok()) copies.credentials = credentials.value();
    copier_ = std::make_unique<CheckpointCopier>(std::move(copies));
  }
}

Agent::~Agent() { StopAll(); }

void Agent::Run(const std::atomic<bool>* stop) {
  while (!*stop && !released_) {
    RunOnce();
    const auto next = std::chrono::steady_clock::now() + std::chrono::milliseconds(registered_ ? interval_ms_ : 500);
    while (!*stop && std::chrono::steady_clock::now() < next && !(registered_ && HeartbeatDueEarly()))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (released_) NS_INFO("worker " << options_.name << ": released: the attempt it served is over");
  NS_INFO("worker " << options_.name << ": shutting down, stopping " << tasks_.size() << " tasks");
  StopAll();
}

void Agent::RunOnce() {
  if (!registered_) {
    registered_ = Register();
    return;
  }
  HeartbeatOnce();
  bool any_finished = false;
  for (const auto& [id, task] : tasks_) any_finished |= task->finished();
  if (any_finished || std::chrono::steady_clock::now() >= next_progress_report_) {
    ReportTasks();
    next_progress_report_ = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  }
}

void Agent::StopAll() {
  // What each task was when the stop came: ranks running (their stop writes a checkpoint),
  // ended (a result of its own), or still preparing (nothing to tell).
  std::map<TaskKey, v1::TaskState> before;
  for (const auto& [id, task] : tasks_) before[id] = task->Snapshot().state();
  for (const auto& [id, task] : tasks_) task->Stop();  // all at once: one grace, not one per task
  if (!options_.allocation.job_id().empty() && registered_ && !released_) {
    // The cluster ended the allocation (its time limit's or a preemption's SIGTERM): the
    // ranks write a checkpoint as they stop. Reported once before leaving, so that the
    // coordinator knows what the attempt achieved when it judges its end (a time slice
    // without a new checkpoint counts a restart). At most the ranks' grace and a call each.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(options_.stop_grace_seconds * 1000) + 2000);
    const auto all_finished = [this] {
      return std::all_of(tasks_.begin(), tasks_.end(), [](const auto& t) { return t.second->finished(); });
    };
    while (!all_finished() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (const auto& [id, task] : tasks_) {
      if (before[id] == v1::TASK_PREPARING) continue;  // as before: the allocation's end tells
      v1::ReportTaskRequest req;
      req.set_name(options_.name);
      *req.mutable_status() = task->Snapshot();
      // Running ranks stopped by the cluster exit 143, a failure to the task: the
      // allocation's end, not this report, says how the attempt ended (a success stays
      // one, and a task that had ended before the stop reports its own result).
      if (before[id] == v1::TASK_RUNNING && req.status().state() == v1::TASK_FAILED)
        req.mutable_status()->set_state(v1::TASK_RUNNING);
      v1::ReportTaskResponse resp;
      if (Status s = coordinator_->ReportTask(req, &resp); !s.ok())
        NS_WARN("worker " << options_.name << ": the stopped " << id.first << "'s last report: " << s.ToString());
    }
  }
  std::map<TaskKey, std::unique_ptr<Task>> stopping;
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    stopping.swap(tasks_);
  }
  stopping.clear();  // each Task's destructor waits for its ranks and joins its thread
}

bool Agent::Register() {
  v1::RegisterRequest req;
  req.set_name(options_.name);
  req.set_slots(Slots());
  req.set_memory_bytes(options_.memory_bytes);
  for (const auto& g : options_.gpus) *req.add_gpus() = g;
  req.set_log_address(options_.log_address);
  if (!options_.allocation.job_id().empty()) *req.mutable_allocation() = options_.allocation;
  for (const auto& [id, task] : tasks_) *req.add_tasks() = task->Snapshot();
  v1::RegisterResponse resp;
  Status s = coordinator_->Register(req, &resp);
  if (!s.ok()) {
    if (register_failures_++ % 20 == 0)
      NS_WARN("worker " << options_.name << ": cannot register with " << options_.coordinator << ": "
                        << s.ToString());
    return false;
  }
  register_failures_ = 0;
  if (file_auth_ != nullptr) file_auth_->SetKey(resp.file_service_key());
  if (resp.heartbeat_interval_ms() > 0) interval_ms_ = resp.heartbeat_interval_ms();
  if (resp.lease_ms() > 0) coordinator_->SetDeadline(CallDeadline(resp.lease_ms()));
  NS_INFO("worker " << options_.name << ": registered with " << options_.coordinator << ", "
                    << Slots() << " slots");
  return true;
}

bool Agent::HeartbeatDueEarly() const {
  const auto now = std::chrono::steady_clock::now();
  if (now < last_heartbeat_ + kEarliest) return false;
  if (follow_up_ && now >= *follow_up_) return true;
  for (const auto& [id, task] : tasks_) {
    const auto sent = evaluations_sent_.find(id);
    if (task->Evaluations() > (sent == evaluations_sent_.end() ? 0 : sent->second)) return true;
  }
  return false;
}

void Agent::HeartbeatOnce() {
  v1::HeartbeatRequest req;
  req.set_name(options_.name);
  // Counted before the snapshots: a count never exceeds what they carry.
  std::map<TaskKey, int64_t> evaluations;
  for (const auto& [id, task] : tasks_) evaluations[id] = task->Evaluations();
  for (const auto& [id, task] : tasks_) *req.add_tasks() = task->Snapshot();
  // The cache report rides along when it changed, and every 30 s regardless.
  const uint64_t cache_version = cache_->version();
  const bool send_cache = cache_version != reported_cache_version_ ||
                          std::chrono::steady_clock::now() >= next_cache_report_;
  if (send_cache) *req.mutable_cache() = cache_->Report();
  if (copier_) {
    // The newest checkpoint of every job folder here, rescanned at most once a second.
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_checkpoint_scan_) {
      held_checkpoints_ = NewestCheckpoints(CheckpointRoot(options_));
      next_checkpoint_scan_ = now + std::chrono::seconds(1);
    }
    for (const auto& h : held_checkpoints_) *req.add_checkpoints() = h;
  }
  v1::HeartbeatResponse resp;
  last_heartbeat_ = std::chrono::steady_clock::now();
  Status s = coordinator_->Heartbeat(req, &resp);
  // The counts are taken as sent even when the call failed (the next heartbeat carries
  // every evaluation again): a coordinator that is down gets the interval's heartbeats,
  // not one per kEarliest.
  follow_up_.reset();
  for (const auto& [id, n] : evaluations)
    if (s.ok() && n > evaluations_sent_[id]) follow_up_ = std::chrono::steady_clock::now() + kFollowUp;
  evaluations_sent_ = std::move(evaluations);
  if (s.code() == Status::kNotFound) {
    registered_ = false;
    return;
  }
  if (!s.ok()) return;
  if (send_cache) {
    reported_cache_version_ = cache_version;
    next_cache_report_ = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  }
  released_ = resp.release() && !options_.allocation.job_id().empty() && tasks_.empty();
  Evict(resp);
  StopTasks(resp);
  for (const auto& j : resp.judged()) {
    auto it = tasks_.find({j.task().job_id(), j.task().attempt()});
    if (it != tasks_.end()) it->second->Judged(j.step());
  }
  for (const auto& a : resp.start()) StartTask(a);
  if (copier_)
    for (const auto& c : resp.copy_checkpoints()) copier_->Request(c);
}

void Agent::Evict(const v1::HeartbeatResponse& resp) {
  if (resp.evict_cache_all()) {
    NS_INFO("worker " << options_.name << ": evicted " << cache_->EvictAll() << " cache entries (operator)");
  }
  for (const auto& key : resp.evict_cache_keys()) {
    Status es = cache_->Evict(key);
    NS_INFO("worker " << options_.name << ": evict " << key << ": " << (es.ok() ? "done" : es.ToString()));
  }
}

void Agent::StopTasks(const v1::HeartbeatResponse& resp) {
  std::set<TaskKey> dump;
  for (const auto& id : resp.dump_stacks()) dump.insert({id.job_id(), id.attempt()});
  for (const auto& id : resp.stop()) {
    auto it = tasks_.find({id.job_id(), id.attempt()});
    if (it == tasks_.end() || it->second->stopping()) continue;
    const bool stacks = dump.count(it->first) > 0;
    NS_INFO("worker " << options_.name << ": stopping " << id.job_id() << " attempt " << id.attempt()
                      << (stacks ? " (hung: dumping stacks first)" : ""));
    it->second->Stop(stacks);
  }
}

void Agent::StartTask(const v1::Assignment& a) {
  TaskKey key{a.task().job_id(), a.task().attempt()};
  if (tasks_.count(key)) return;  // already ours (the assignment is repeated until we report it)
  NS_INFO("worker " << options_.name << ": starting " << a.task().job_id() << " attempt " << a.task().attempt()
                    << ", ranks " << a.first_rank() << ".." << a.first_rank() + a.num_ranks() - 1 << " of "
                    << a.world_size());
  std::vector<int> gpus;
  if (!options_.gpus.empty()) {
    gpus = gpu_allocator_.Take(a.num_ranks());
    if (gpus.empty()) {
      NS_WARN("worker " << options_.name << ": no " << a.num_ranks() << " free GPUs for " << a.task().job_id()
                        << "; will retry");
      return;  // the coordinator repeats the assignment
    }
  }
  Task::FetchCheckpoint fetch;
  if (copier_) fetch = [copier = copier_.get()](const v1::CheckpointCopy& c) { return copier->Fetch(c); };
  auto task = std::make_unique<Task>(options_, a, cache_, gpus, std::move(fetch));
  task->Start();
  std::lock_guard<std::mutex> lock(tasks_mu_);
  tasks_[key] = std::move(task);
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
    Status s = coordinator_->ReportTask(req, &resp);
    if (!s.ok() || !finished) {
      ++it;
      continue;
    }
    NS_INFO("worker " << options_.name << ": " << it->first.first << " attempt " << it->first.second << " "
                      << v1::TaskState_Name(req.status().state()) << " reported");
    std::unique_ptr<Task> done = std::move(it->second);
    {
      std::lock_guard<std::mutex> lock(tasks_mu_);
      it = tasks_.erase(it);
    }
    gpu_allocator_.Release(done->gpus());
    done.reset();  // joins the task's thread (already finished)
  }
}

std::chrono::milliseconds CallDeadline(int lease_ms) {
  return std::chrono::milliseconds(std::clamp(lease_ms / 2, 1000, 30000));
}

int Agent::Slots() const {
  return options_.gpus.empty() ? options_.cpu_slots : static_cast<int>(options_.gpus.size());
}

bool Agent::IsRunning(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(tasks_mu_);
  for (const auto& [id, task] : tasks_)
    if (id.first == job_id && !task->finished()) return true;
  return false;
}

void Agent::CollectMetrics(FamilyBuilder* b) const {
  // Trainer figures by (job, rank), as format::kStepMetrics names them: gauges from the
  // latest step event, counters from the running totals the trainer reports.
  int running = 0;
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    for (const auto& [id, task] : tasks_) {
      running += !task->finished();
      for (const auto& [rank, rec] : task->RankSnapshot()) {
        const FamilyBuilder::Labels labels = {{"job", id.first}, {"rank", std::to_string(rank)}};
        if (!rec.step.event.empty()) {
          for (const format::StepMetric& m : format::kStepMetrics) {
            if (m.prometheus == nullptr) continue;
            if (m.counter) b->Counter(m.prometheus, m.help, labels, rec.step.Number(m.key));
            else if (rec.step.numbers.count(m.key)) b->Gauge(m.prometheus, m.help, labels, rec.step.Number(m.key));
          }
        }
        if (!rec.checkpoint.event.empty()) {
          b->Gauge("nightshift_trainer_checkpoint_seconds", "Time to write the last checkpoint", labels,
                   rec.checkpoint.Number("seconds"));
          b->Gauge("nightshift_trainer_checkpoint_bytes", "Size of the last checkpoint", labels,
                   rec.checkpoint.Number("bytes"));
          b->Gauge("nightshift_trainer_checkpoint_step", "Step of the last checkpoint", labels,
                   rec.checkpoint.Number("step"));
        }
      }
    }
  }
  b->Gauge("nightshift_worker_slots", "Rank slots this worker offers", {}, Slots());
  for (const GpuUsage& g : SampleGpus()) {
    const FamilyBuilder::Labels gpu = {{"gpu", std::to_string(g.index)}};
    b->Gauge("nightshift_gpu_utilization_ratio", "Fraction of time a kernel ran (NVML)", gpu, g.utilization);
    b->Gauge("nightshift_gpu_memory_used_bytes", "GPU memory in use (NVML)", gpu, static_cast<double>(g.memory_used));
    b->Gauge("nightshift_gpu_memory_total_bytes", "GPU memory (NVML)", gpu, static_cast<double>(g.memory_total));
  }
  b->Gauge("nightshift_worker_tasks_running", "Tasks (job attempts) running on this worker", {}, running);
  if (copier_) {
    b->Counter("nightshift_worker_checkpoint_copies_total", "Checkpoints copied here from other workers", {},
               static_cast<double>(copier_->copies()));
    b->Counter("nightshift_worker_checkpoint_copy_bytes_total", "Bytes of the checkpoints copied here", {},
               static_cast<double>(copier_->bytes()));
  }
  const v1::CacheStats s = cache_->Report().stats();
  b->Gauge("nightshift_cache_entries", "Feature-cache entries", {}, static_cast<double>(s.entries()));
  b->Gauge("nightshift_cache_bytes", "Bytes held by the feature cache", {}, static_cast<double>(s.bytes()));
  b->Gauge("nightshift_cache_max_bytes", "Feature-cache budget (0: none)", {}, static_cast<double>(s.max_bytes()));
  b->Counter("nightshift_cache_hits_total", "Feature-cache hits", {}, static_cast<double>(s.hits()));
  b->Counter("nightshift_cache_misses_total", "Feature-cache misses (builds)", {}, static_cast<double>(s.misses()));
  b->Counter("nightshift_cache_evictions_total", "Feature-cache evictions", {}, static_cast<double>(s.evictions()));
  b->Counter("nightshift_cache_build_seconds_total", "Seconds spent building cache entries", {}, s.build_seconds());
  b->Counter("nightshift_cache_build_seconds_saved_total", "Build seconds saved by hits", {}, s.build_seconds_saved());
}

}  // namespace nightshift
