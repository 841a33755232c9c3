#include "coordinator/coordinator.h"

#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <set>

#include "common/log.h"
#include "common/spec.h"
#include "common/time_util.h"
#include "coordinator/metric_history.h"
#include "coordinator/scheduler.h"

namespace nightshift {
namespace {

std::string JobIdFor(uint64_t seq) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "j-%06" PRIu64, seq);
  return buf;
}

bool IsActive(v1::JobState s) { return s == v1::SCHEDULED || s == v1::RUNNING; }
// The workers are being told to stop the ranks; the placements still hold their slots.
bool IsStopping(v1::JobState s) { return s == v1::PREEMPTED || s == v1::STUCK; }
bool HoldsSlots(v1::JobState s) { return IsActive(s) || IsStopping(s); }

std::string RankRange(const v1::Placement& p) {
  if (p.num_ranks() == 1) return "rank " + std::to_string(p.first_rank());
  return "ranks " + std::to_string(p.first_rank()) + "-" +
         std::to_string(p.first_rank() + p.num_ranks() - 1);
}

// Options give times in seconds, as doubles.
Clock::Duration Seconds(double seconds) {
  return std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double>(seconds));
}

// Whether every placement of the job's current attempt has `flag` set (running, finished).
bool AllPlacements(const v1::Job& job, bool (v1::Placement::*flag)() const) {
  return std::all_of(job.placements().begin(), job.placements().end(),
                     [flag](const v1::Placement& p) { return (p.*flag)(); });
}

// Ranks of the job's current attempt still on `worker` (placed there and not finished).
int RanksOn(const v1::Job& job, const std::string& worker) {
  int ranks = 0;
  for (const auto& p : job.placements())
    if (p.worker() == worker && !p.finished()) ranks += p.num_ranks();
  return ranks;
}

// Takes the report's checkpoint if it is newer; whether it was.
bool TakeCheckpoint(const v1::TaskStatus& status, v1::Job* job) {
  if (status.checkpoint_step() <= job->checkpoint_step()) return false;
  job->set_checkpoint_step(status.checkpoint_step());
  job->set_checkpoint_path(status.checkpoint_path());
  return true;
}

// Seconds a queued job should run once placed: the steps left after its checkpoint at the
// step time its last attempt measured (rank 0's progress outlives the attempt). Unknown
// for a job that has not run yet.
double ExpectedSeconds(const v1::Job& job) {
  const v1::Progress& p = job.progress();
  if (p.total_steps() <= 0 || p.step_seconds() <= 0) return kUnknownSeconds;
  return static_cast<double>(std::max<int64_t>(0, p.total_steps() - job.checkpoint_step())) * p.step_seconds();
}

// An event in the job's current state and attempt.
void AddEvent(v1::Job* job, const google::protobuf::Timestamp& now, const std::string& reason, int64_t step) {
  v1::JobEvent* ev = job->add_events();
  *ev->mutable_time() = now;
  ev->set_state(job->state());
  ev->set_reason(reason);
  ev->set_attempt(job->attempt());
  ev->set_step(step);
}

// A request id is short and plain: it appears in logs and error messages.
Status CheckRequestId(const std::string& id) {
  if (id.size() > 128) return Status::InvalidArgument("request_id: longer than 128 characters");
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != ':' && c != '-')
      return Status::InvalidArgument("request_id: only letters, digits and . _ : - are allowed");
  return Status::OK();
}

// A retried submission: the job it created, if the spec (defaults filled) is the same.
StatusOr<v1::Job> SameSubmission(const v1::Job& job, const v1::JobSpec& spec) {
  if (!google::protobuf::util::MessageDifferencer::Equals(job.spec(), spec))
    return Status::InvalidArgument("request_id: '" + job.request_id() + "' already submitted job " + job.id() +
                                   " with a different spec; use a new request_id for a new job");
  return job;
}

}  // namespace

Coordinator::Coordinator(const CoordinatorOptions& options, std::unique_ptr<JobStore> store)
    : options_(options), store_(std::move(store)), clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      started_(clock_->Now()) {}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(const CoordinatorOptions& options) {
  if (options.data_dir.empty()) return Status::InvalidArgument("--data-dir is required");
  auto store = JobStore::Open(options.data_dir);
  if (!store.ok()) return store.status();
  return Open(options, std::move(store.value()));
}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(const CoordinatorOptions& options,
                                                         std::unique_ptr<JobStore> store) {
  if (options.lease_seconds <= 0) return Status::InvalidArgument("--lease-seconds must be positive");
  std::unique_ptr<Coordinator> c(new Coordinator(options, std::move(store)));
  std::vector<v1::Job> jobs;
  NS_RETURN_IF_ERROR(c->store_->LoadAll(&jobs));
  for (auto& job : jobs) {
    c->next_seq_ = std::max(c->next_seq_, job.submit_seq() + 1);
    c->by_seq_[job.submit_seq()] = job.id();
    if (!job.request_id().empty()) c->by_request_[{job.owner(), job.request_id()}] = job.id();
    JobEntry entry;
    entry.job = std::move(job);
    entry.last_step = entry.job.progress().step();
    entry.last_advance = entry.stopping_since = c->clock_->Now();
    Status history = c->store_->GetMetrics(entry.job.id(), &entry.history);
    if (!history.ok() && history.code() != Status::kNotFound) return history;
    entry.history.set_job_id(entry.job.id());
    c->jobs_[entry.job.id()] = std::move(entry);
  }
  NS_INFO("coordinator: loaded " << jobs.size() << " jobs from " << options.data_dir);
  return c;
}

void Coordinator::Persist(JobEntry* entry, bool sync) {
  if (!store_error_.ok()) return;  // stopped: nothing more is written or told
  entry->version++;
  *entry->job.mutable_updated() = ToTimestamp(clock_->WallNow());
  Status s = store_->Put(entry->job, sync);
  if (!s.ok()) {
    store_error_ = Status::Unavailable("the coordinator stopped after a failed job store write (" + s.message() +
                                       "); restart it once the store is writable");
    NS_ERROR("coordinator: " << store_error_.message());
  }
  changed_.notify_all();
}

void Coordinator::PersistHistory(JobEntry* entry) {
  if (!store_error_.ok()) return;
  entry->history.set_job_id(entry->job.id());
  Status s = store_->PutMetrics(entry->history, /*sync=*/false);
  if (!s.ok()) {
    store_error_ = Status::Unavailable("the coordinator stopped after a failed job store write (" + s.message() +
                                       "); restart it once the store is writable");
    NS_ERROR("coordinator: " << store_error_.message());
  }
}

Status Coordinator::store_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return store_error_;
}

void Coordinator::SetState(JobEntry* entry, v1::JobState state, const std::string& reason,
                           int64_t step) {
  v1::Job& job = entry->job;
  job.set_state(state);
  job.set_reason(reason);
  AddEvent(&job, ToTimestamp(clock_->WallNow()), reason, step);
  if (state == v1::RUNNING) {
    entry->last_step = job.progress().step();
    entry->last_advance = clock_->Now();
  }
  NS_INFO("job " << job.id() << " -> " << v1::JobState_Name(state) << ": " << reason);
  Persist(entry, /*sync=*/true);
}

StatusOr<v1::Job> Coordinator::Submit(v1::JobSpec spec, const std::string& owner, const std::string& request_id) {
  NS_RETURN_IF_ERROR(CheckRequestId(request_id));
  NS_RETURN_IF_ERROR(DefaultAndValidateJobSpec(&spec));
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  if (auto it = by_request_.find({owner, request_id}); !request_id.empty() && it != by_request_.end()) {
    NS_INFO("job " << it->second << ": submitted again with request_id " << request_id);
    return SameSubmission(jobs_.at(it->second).job, spec);
  }
  int unfinished = 0;
  for (const auto& [id, e] : jobs_) unfinished += e.job.owner() == owner && !IsTerminal(e.job.state());
  if (unfinished >= options_.max_jobs_per_user)
    return Status::ResourceExhausted("user '" + owner + "' already has " + std::to_string(unfinished) +
                                     " unfinished jobs (at most " + std::to_string(options_.max_jobs_per_user) +
                                     "); wait for some to end or cancel them");
  JobEntry entry;
  v1::Job& job = entry.job;
  const uint64_t seq = next_seq_;
  job.set_id(JobIdFor(seq));
  job.set_submit_seq(seq);
  job.set_owner(owner);
  job.set_request_id(request_id);
  *job.mutable_spec() = std::move(spec);
  *job.mutable_created() = ToTimestamp(clock_->WallNow());
  *job.mutable_updated() = job.created();
  job.set_state(v1::QUEUED);
  job.set_reason("accepted");
  v1::JobEvent* ev = job.add_events();
  *ev->mutable_time() = job.created();
  ev->set_state(v1::QUEUED);
  ev->set_reason("accepted");
  // The synced write comes before anything else can see the job, and before the answer.
  Status s = store_->Put(job, /*sync=*/true);
  if (!s.ok()) return Status::Unavailable("job not accepted: " + s.message());
  next_seq_++;
  by_seq_[seq] = job.id();
  if (!request_id.empty()) by_request_[{owner, request_id}] = job.id();
  const std::string id = job.id();
  v1::Job copy = job;
  jobs_[id] = std::move(entry);
  NS_INFO("job " << id << " accepted: " << copy.spec().name() << ", world_size "
                 << copy.spec().resources().world_size());
  changed_.notify_all();
  return copy;
}

StatusOr<v1::Job> Coordinator::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("no job " + id);
  return it->second.job;
}

StatusOr<JobPage> Coordinator::List(const JobQuery& query, const std::string* owner) const {
  JobPage page;
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  for (auto it = by_seq_.upper_bound(query.after_seq); it != by_seq_.end(); ++it) {
    const v1::Job& job = jobs_.at(it->second).job;
    if (!query.states.empty() && !query.states.count(job.state())) continue;
    if (owner != nullptr && job.owner() != *owner) continue;
    if (static_cast<int>(page.jobs.size()) >= query.limit) {
      page.next_after_seq = page.jobs.back().submit_seq();
      break;
    }
    page.jobs.push_back(job);
  }
  return page;
}

StatusOr<v1::Job> Coordinator::Cancel(const std::string& id, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("no job " + id);
  JobEntry& entry = it->second;
  if (IsTerminal(entry.job.state()))
    return Status::FailedPrecondition("job " + id + " already ended " +
                                      v1::JobState_Name(entry.job.state()));
  // Its workers are told to stop the ranks at their next heartbeat (reconciliation).
  SetState(&entry, v1::CANCELLED, reason.empty() ? "cancelled by user" : reason);
  NS_RETURN_IF_ERROR(store_error_);  // not written: not cancelled as far as anyone is told
  return entry.job;
}

StatusOr<v1::Job> Coordinator::WaitForChange(const std::string& id, uint64_t* version,
                                             std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  // A real wait (the caller blocks on it), so on real time, not on clock_.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    NS_RETURN_IF_ERROR(store_error_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return Status::NotFound("no job " + id);
    if (it->second.version > *version) {
      *version = it->second.version;
      return it->second.job;
    }
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout)
      return Status::DeadlineExceeded("no change");
  }
}

StatusOr<int> Coordinator::Register(const v1::WorkerInfo& worker) {
  if (worker.name().empty()) return Status::InvalidArgument("name: a worker needs a name");
  if (worker.slots() < 0 || worker.slots() > 1024) return Status::InvalidArgument("slots: must be in [0, 1024]");
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  WorkerEntry& w = workers_[worker.name()];
  const bool known = w.info.state() == v1::WORKER_READY;
  w.info.set_name(worker.name());
  w.info.set_state(v1::WORKER_READY);
  w.info.set_slots(worker.slots());
  w.info.set_log_address(worker.log_address());
  w.info.mutable_gpus()->CopyFrom(worker.gpus());
  *w.info.mutable_last_heartbeat() = ToTimestamp(clock_->WallNow());
  w.last_seen = clock_->Now();
  NS_INFO("worker " << worker.name() << (known ? " re-registered" : " registered") << " with "
                    << worker.slots() << " slots, " << worker.tasks_size() << " running tasks");
  return options_.heartbeat_interval_ms;
}

StatusOr<HeartbeatReply> Coordinator::Heartbeat(const std::string& name, const std::vector<v1::TaskStatus>& tasks,
                                                 const v1::CacheReport* cache,
                                                 const std::vector<v1::HeldCheckpoint>& checkpoints) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  auto wit = workers_.find(name);
  if (wit == workers_.end() || wit->second.info.state() != v1::WORKER_READY)
    return Status::NotFound("worker " + name + " is not registered");
  WorkerEntry& worker = wit->second;
  const Clock::TimePoint now = clock_->Now();
  const double gap = std::chrono::duration<double>(now - worker.last_seen).count();
  worker.heartbeat_gap_seconds =
      worker.heartbeat_gap_seconds == 0 ? gap : 0.8 * worker.heartbeat_gap_seconds + 0.2 * gap;
  worker.last_seen = now;
  *worker.info.mutable_last_heartbeat() = ToTimestamp(clock_->WallNow());
  worker.info.clear_tasks();
  if (cache != nullptr) worker.cache = *cache;
  worker.held.clear();
  for (const auto& h : checkpoints) worker.held[h.job_id()] = h.step();
  HeartbeatReply reply;
  reply.evict_cache_keys.swap(worker.evict_keys);
  reply.evict_cache_all = worker.evict_all;
  worker.evict_all = false;

  std::set<std::pair<std::string, int>> reported;
  for (const auto& status : tasks) {
    reported.insert({status.task().job_id(), status.task().attempt()});
    *worker.info.add_tasks() = status.task();
    HandleTaskStatus(name, status, &reply);
  }
  for (auto& [id, entry] : jobs_) Reconcile(name, reported.count({id, entry.job.attempt()}) > 0, &entry, &reply);
  NS_RETURN_IF_ERROR(store_error_);  // a change this heartbeat caused was not written: not acknowledged
  AddCheckpointCopies(name, now, &reply);
  return reply;
}

std::vector<std::string> Coordinator::NewestHolders(const std::string& job_id) const {
  std::vector<std::string> holders;
  int64_t newest = 0;
  for (const auto& [name, w] : workers_) {
    auto it = w.held.find(job_id);
    if (w.info.state() != v1::WORKER_READY || it == w.held.end() || it->second < newest) continue;
    if (it->second > newest) holders.clear();
    newest = it->second;
    holders.push_back(name);
  }
  return holders;
}

void Coordinator::AddCheckpointCopies(const std::string& target, Clock::TimePoint now, HeartbeatReply* reply) const {
  for (const auto& [id, entry] : jobs_) {
    const v1::Job& job = entry.job;
    if (job.state() != v1::RUNNING || job.placements_size() != 1) continue;
    const std::string& source = job.placements(0).worker();
    auto src = workers_.find(source);
    if (source == target || src == workers_.end() || src->second.info.state() != v1::WORKER_READY ||
        src->second.info.log_address().empty())
      continue;
    auto newest = src->second.held.find(id);
    if (newest == src->second.held.end()) continue;
    // Where the job could resume: ready, uncordoned, not late, with GPUs for a cuda job.
    const bool cuda = job.spec().resources().device() == "cuda";
    const auto could_resume = [&](const WorkerEntry& w) {
      return w.info.state() == v1::WORKER_READY && !w.info.cordoned() && !Late(w, now) &&
             (!cuda || w.info.gpus_size() > 0);
    };
    // The one other worker that keeps a copy (std::map: by name, so the first on ties).
    const std::string* chosen = nullptr;
    int64_t chosen_step = -1;
    for (const auto& [name, w] : workers_) {
      if (name == source || !could_resume(w)) continue;
      auto it = w.held.find(id);
      const int64_t step = it == w.held.end() ? 0 : it->second;
      if (step > chosen_step) chosen = &name, chosen_step = step;
    }
    if (chosen == nullptr || *chosen != target || chosen_step >= newest->second) continue;
    v1::CheckpointCopy& copy = reply->copy_checkpoints.emplace_back();
    copy.set_job_id(id);
    copy.set_step(newest->second);
    copy.set_source_worker(source);
    copy.set_source_address(src->second.info.log_address());
  }
}

void Coordinator::Reconcile(const std::string& worker, bool reported, JobEntry* entry, HeartbeatReply* reply) {
  v1::Job& job = entry->job;
  if (IsStopping(job.state())) {
    if (!reported)
      for (auto& p : *job.mutable_placements())
        if (p.worker() == worker) p.set_finished(true);  // its ranks are gone
    MaybeFinishStopping(entry);
    return;
  }
  if (!IsActive(job.state()) || reported) return;
  for (const auto& p : job.placements()) {
    if (p.worker() != worker || p.finished()) continue;
    if (p.running()) {
      FailAttempt(entry, "worker " + worker + " no longer runs " + RankRange(p) + " (it restarted)",
                  /*user_error=*/false, "worker_restarted");
      return;
    }
    // Ranks off rank 0's worker need the rendezvous address it chooses first.
    if (p.first_rank() != 0 && job.master_addr().empty()) continue;
    v1::Assignment* a = &reply->start.emplace_back();
    a->mutable_task()->set_job_id(job.id());
    a->mutable_task()->set_attempt(job.attempt());
    *a->mutable_spec() = job.spec();
    a->set_first_rank(p.first_rank());
    a->set_num_ranks(p.num_ranks());
    a->set_world_size(job.spec().resources().world_size());
    a->set_master_addr(job.master_addr());
  }
}

Status Coordinator::ReportTask(const std::string& worker, const v1::TaskStatus& status) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  HeartbeatReply ignored;  // stops are told at the next heartbeat
  HandleTaskStatus(worker, status, &ignored);
  return store_error_;  // not written: the worker keeps the result and sends it again
}

void Coordinator::HandleTaskStatus(const std::string& worker, const v1::TaskStatus& status,
                                   HeartbeatReply* reply) {
  const bool alive = status.state() == v1::TASK_PREPARING || status.state() == v1::TASK_RUNNING;
  auto it = jobs_.find(status.task().job_id());
  if (it == jobs_.end() || it->second.job.attempt() != status.task().attempt()) {
    if (alive) reply->stop.push_back(status.task());  // not of the current attempt of a job
    return;
  }
  JobEntry& entry = it->second;
  v1::Placement* part = nullptr;
  for (auto& p : *entry.job.mutable_placements())
    if (p.worker() == worker) part = &p;
  if (IsStopping(entry.job.state())) {
    // Keep the checkpoint written on SIGTERM: the next attempt resumes from it.
    if (TakeCheckpoint(status, &entry.job)) Persist(&entry, /*sync=*/false);
    if (alive) {
      reply->stop.push_back(status.task());
      if (entry.job.state() == v1::STUCK) reply->dump_stacks.push_back(status.task());
    } else if (part != nullptr && !part->finished()) {
      part->set_finished(true);  // here: its ranks are gone
      MaybeFinishStopping(&entry);
    }
    return;
  }
  if (!IsActive(entry.job.state()) || part == nullptr) {
    if (alive) reply->stop.push_back(status.task());
    return;
  }
  const bool changed = TakeReport(worker, status, *part, &entry);
  if (status.state() == v1::TASK_FAILED) {
    FailAttempt(&entry, status.error().empty() ? "task failed on " + worker : status.error(),
                status.user_error());
    return;
  }
  bool written = false;
  if (status.state() == v1::TASK_RUNNING || status.state() == v1::TASK_SUCCEEDED)
    written = PartStarted(&entry, part);
  if (status.state() == v1::TASK_SUCCEEDED) written = PartSucceeded(&entry, part, status) || written;
  if (changed && !written) Persist(&entry, /*sync=*/false);
}

bool Coordinator::TakeReport(const std::string& worker, const v1::TaskStatus& status,
                             const v1::Placement& part, JobEntry* entry) {
  v1::Job& job = entry->job;
  bool changed = TakeCheckpoint(status, &job);
  if (part.first_rank() != 0) return changed;
  changed = TakeResumedStep(status, entry) || changed;
  if (job.master_addr().empty() && !status.master_addr().empty()) {
    job.set_master_addr(status.master_addr());
    changed = true;
  }
  if (!status.cache_key().empty() && job.data_cache().key() != status.cache_key()) {
    v1::DataCacheUse* use = job.mutable_data_cache();
    use->set_worker(worker);
    use->set_key(status.cache_key());
    use->set_hit(status.cache_hit());
    use->set_prepare_seconds(status.prepare_seconds());
    changed = true;
  }
  if (!status.model_path().empty() &&
      (job.model().path() != status.model_path() || job.model().step() != status.model_step() ||
       job.model().worker() != worker)) {
    v1::ModelArtifact* model = job.mutable_model();
    model->set_worker(worker);
    model->set_path(status.model_path());
    model->set_step(status.model_step());
    changed = true;
  }
  bool history = AddEvals(job.attempt(), status.evals(), &entry->history);
  if (status.has_progress()) history = AddTrainPoint(job.attempt(), status.progress(), &entry->history) || history;
  if (history) PersistHistory(entry);
  if (status.has_progress() &&
      (!entry->progress_is_this_attempts || status.progress().step() >= job.progress().step())) {
    *job.mutable_progress() = status.progress();
    if (!entry->progress_is_this_attempts || status.progress().step() > entry->last_step) {
      entry->progress_is_this_attempts = true;
      entry->last_step = status.progress().step();
      entry->last_advance = clock_->Now();
    }
    changed = true;
  }
  return changed;
}

// The step the attempt's trainer says it resumed from is what the record shows: one event
// per attempt (restarts, or a first attempt that found a checkpoint), and the job's
// checkpoint becomes that step when it differs from the newest one reported before (the
// worker that held that one is gone, or its checkpoint was unreadable).
bool Coordinator::TakeResumedStep(const v1::TaskStatus& status, JobEntry* entry) {
  v1::Job& job = entry->job;
  if (!status.has_resumed_step() || (job.attempt() == 0 && status.resumed_step() == 0)) return false;
  for (const auto& ev : job.events())
    if (ev.attempt() == job.attempt() && ev.reason().rfind("attempt ", 0) == 0) return false;  // told already
  const int64_t step = status.resumed_step();
  std::string reason = "attempt " + std::to_string(job.attempt()) +
                       (step > 0 ? " resumed from step " + std::to_string(step) : " started from step 0 (no checkpoint)");
  if (step != job.checkpoint_step()) {
    reason += "; the newest checkpoint reported was step " + std::to_string(job.checkpoint_step());
    job.set_checkpoint_step(step);
    job.clear_checkpoint_path();
  }
  AddEvent(&job, ToTimestamp(clock_->WallNow()), reason, step);
  NS_INFO("job " << job.id() << ": " << reason);
  return true;
}

bool Coordinator::PartStarted(JobEntry* entry, v1::Placement* part) {
  if (part->running()) return false;
  part->set_running(true);
  const v1::Job& job = entry->job;
  if (job.state() != v1::SCHEDULED || !AllPlacements(job, &v1::Placement::running)) return false;
  SetState(entry, v1::RUNNING, "all " + std::to_string(job.spec().resources().world_size()) + " ranks started",
           job.checkpoint_step());
  return true;
}

bool Coordinator::PartSucceeded(JobEntry* entry, v1::Placement* part, const v1::TaskStatus& status) {
  if (part->finished()) return false;
  part->set_finished(true);
  v1::Job& job = entry->job;
  if (part->first_rank() == 0) *job.mutable_metrics() = status.metrics();
  if (AllPlacements(job, &v1::Placement::finished)) {
    SetState(entry, v1::SUCCEEDED, "all ranks finished", job.progress().step());
  } else {
    Persist(entry, /*sync=*/true);
  }
  return true;
}

void Coordinator::FailAttempt(JobEntry* entry, const std::string& error, bool user_error, const char* cause) {
  v1::Job& job = entry->job;
  job.set_error(error);
  const int max_restarts = job.spec().restart().max_restarts();
  if (user_error) {
    SetState(entry, v1::FAILED, error);
    return;
  }
  if (job.restarts() >= max_restarts) {
    SetState(entry, v1::FAILED,
             max_restarts == 0 ? error
                               : "failed after " + std::to_string(max_restarts) + " restarts: " + error);
    return;
  }
  if (options_.observer) options_.observer->JobRestarted(cause);
  job.set_restarts(job.restarts() + 1);
  const double backoff = std::min(60.0, options_.restart_backoff_seconds * std::pow(2.0, job.restarts() - 1));
  // Where it resumes is the next attempt's to say (TakeResumedStep): the newest checkpoint
  // reported may be on a worker that is gone.
  Requeue(entry, Seconds(backoff),
          "restart " + std::to_string(job.restarts()) + " of " + std::to_string(max_restarts) +
              " (newest checkpoint reported: step " + std::to_string(job.checkpoint_step()) + ") after: " + error);
}

void Coordinator::Requeue(JobEntry* entry, Clock::Duration delay, const std::string& reason) {
  v1::Job& job = entry->job;
  job.set_attempt(job.attempt() + 1);
  job.clear_placements();
  job.clear_master_addr();
  job.clear_data_cache();
  entry->progress_is_this_attempts = false;
  entry->not_before = clock_->Now() + delay;
  SetState(entry, v1::QUEUED, reason, job.checkpoint_step());
}

void Coordinator::BeginStopping(JobEntry* entry, v1::JobState state, const std::string& reason) {
  entry->stopping_since = clock_->Now();
  SetState(entry, state, reason, entry->job.progress().step());
}

void Coordinator::MaybeFinishStopping(JobEntry* entry, bool force) {
  v1::Job& job = entry->job;
  if (!IsStopping(job.state())) return;
  if (!force && !AllPlacements(job, &v1::Placement::finished)) return;
  if (job.state() == v1::STUCK) {
    FailAttempt(entry, job.reason(), /*user_error=*/false, "stuck");
    return;
  }
  // Preemption is not a failure: no restart is counted and there is no backoff.
  Requeue(entry, Clock::Duration::zero(),
          "requeued from step " + std::to_string(job.checkpoint_step()) + " after: " + job.reason());
}

int Coordinator::UsedSlots(const std::string& worker) const {
  int used = 0;
  for (const auto& [id, entry] : jobs_)
    if (HoldsSlots(entry.job.state())) used += RanksOn(entry.job, worker);
  return used;
}

bool Coordinator::WorkerGone(const std::string& name, Clock::TimePoint now) const {
  auto it = workers_.find(name);
  if (it == workers_.end()) return now - started_ > Seconds(options_.lease_seconds);
  return it->second.info.state() == v1::WORKER_LOST;
}

// The scheduler's view of now: jobs that may start, workers that accept work, and the
// jobs that hold slots.
struct Coordinator::Snapshot {
  std::vector<SchedJob> pending;
  std::vector<SchedWorker> workers;
  std::vector<SchedRunning> running;
  bool any_late = false;  // some ready worker is Late
};

bool Coordinator::Late(const WorkerEntry& w, Clock::TimePoint now) const {
  const double limit = std::max(2 * options_.heartbeat_interval_ms / 1000.0, 3 * w.heartbeat_gap_seconds);
  return now - w.last_seen > Seconds(std::min(limit, options_.lease_seconds / 2));
}

void Coordinator::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!store_error_.ok()) return;  // stopped (fail-stop, see store_status())
  const Clock::TimePoint now = clock_->Now();
  ExpireLeases(now);
  for (auto& [id, entry] : jobs_) {
    if (IsStopping(entry.job.state())) {
      ReapStopping(&entry, now);
    } else if (in_outage_ || !DetectHang(&entry, now)) {
      FailIfWorkerGone(&entry, now);
    }
  }
  Snapshot snapshot = SnapshotForScheduler(now);
  if (snapshot.pending.empty()) return;
  ScheduleOptions sched_options;
  sched_options.preemption = options_.preemption && !snapshot.any_late;
  ApplySchedule(Schedule(std::move(snapshot.pending), std::move(snapshot.workers), snapshot.running, sched_options));
}

void Coordinator::ExpireLeases(Clock::TimePoint now) {
  // Workers heartbeat every fraction of a second: when none has for half a lease, the
  // silence is this side's (a cut link, a stalled host), and declaring them all lost would
  // restart every running job for nothing. They keep training and keep their results.
  int ready = 0;
  Clock::TimePoint newest = Clock::TimePoint::min();
  for (const auto& [name, w] : workers_) {
    if (w.info.state() != v1::WORKER_READY) continue;
    ++ready;
    newest = std::max(newest, w.last_seen);
  }
  const bool silent = ready >= 2 && now - newest > Seconds(options_.lease_seconds / 2);
  const bool own_outage = silent && now - newest <= Seconds(options_.outage_grace_seconds);
  if (own_outage != in_outage_)
    NS_WARN(own_outage ? "no worker has reached the coordinator for half a lease: treating it as this "
                         "coordinator's outage; no worker is declared lost for up to --outage-grace-seconds"
                       : "workers reach the coordinator again (or the outage grace is over)");
  // When it ends (the first worker is back), every worker gets a full lease to come back
  // too, as after a restart, and hang detection starts over: progress could not reach us.
  if (in_outage_ && !silent) {
    for (auto& [name, w] : workers_) w.last_seen = std::max(w.last_seen, now);
    for (auto& [id, entry] : jobs_) entry.last_advance = now;
  }
  in_outage_ = own_outage;
  if (own_outage) return;
  for (auto& [name, w] : workers_) {
    if (w.info.state() == v1::WORKER_READY && now - w.last_seen > Seconds(options_.lease_seconds)) {
      w.info.set_state(v1::WORKER_LOST);
      NS_WARN("worker " << name << " lost: no heartbeat for " << options_.lease_seconds << " s");
    }
  }
}

void Coordinator::ReapStopping(JobEntry* entry, Clock::TimePoint now) {
  for (auto& p : *entry->job.mutable_placements())
    if (WorkerGone(p.worker(), now)) p.set_finished(true);
  const bool late = now - entry->stopping_since > Seconds(options_.stop_timeout_seconds);
  if (late)
    NS_WARN("job " << entry->job.id() << ": ranks not reported stopped after " << options_.stop_timeout_seconds
                   << " s");
  MaybeFinishStopping(entry, late);
}

bool Coordinator::DetectHang(JobEntry* entry, Clock::TimePoint now) {
  const v1::Job& job = entry->job;
  if (job.state() != v1::RUNNING) return false;
  double limit = job.spec().restart().hang_seconds();
  if (limit <= 0) limit = std::max(300.0, 10 * job.progress().step_seconds());
  const double idle = std::chrono::duration<double>(now - entry->last_advance).count();
  if (idle <= limit) return false;
  BeginStopping(entry, v1::STUCK,
                "stuck: no progress for " + std::to_string(static_cast<int>(idle)) + " s at step " +
                    std::to_string(job.progress().step()) + " (hang_seconds " +
                    std::to_string(static_cast<int>(limit)) + "); stacks in the rank logs");
  return true;
}

void Coordinator::FailIfWorkerGone(JobEntry* entry, Clock::TimePoint now) {
  if (!IsActive(entry->job.state())) return;
  for (const auto& p : entry->job.placements()) {
    if (!WorkerGone(p.worker(), now)) continue;
    FailAttempt(entry, "worker " + p.worker() + " lost: no heartbeat for " +
                           std::to_string(static_cast<int>(options_.lease_seconds)) + " s",
                /*user_error=*/false, "worker_lost");
    return;
  }
}

Coordinator::Snapshot Coordinator::SnapshotForScheduler(Clock::TimePoint now) const {
  Snapshot s;
  for (const auto& [id, entry] : jobs_) {
    const v1::Job& job = entry.job;
    if (job.state() != v1::QUEUED || entry.not_before > now) continue;
    SchedJob j{id, job.spec().resources().world_size(), job.spec().priority(), job.submit_seq()};
    j.owner = job.owner();  // per-user fair share (scheduler.h)
    j.expected_seconds = ExpectedSeconds(job);  // backfill (scheduler.h)
    j.needs_gpu = job.spec().resources().device() == "cuda";
    j.holders = NewestHolders(id);
    s.pending.push_back(std::move(j));
  }
  // A late worker (Late) is not lost yet, but its free slots are offered to nobody: when a
  // rank failed because its peer's worker died, the restart (after the restart backoff, a
  // second by default) must not go back there. Its slots still count in the totals, and
  // nobody is preempted while a worker is late (its free slots may be back in a moment).
  for (const auto& [name, w] : workers_) {
    if (w.info.state() != v1::WORKER_READY || w.info.cordoned()) continue;
    const bool late = Late(w, now);
    s.any_late |= late;
    s.workers.push_back({name, w.info.slots(), late ? 0 : std::max(0, w.info.slots() - UsedSlots(name)),
                         w.info.gpus_size() > 0});
  }
  for (const auto& [id, entry] : jobs_) {
    const v1::Job& job = entry.job;
    if (!HoldsSlots(job.state())) continue;
    SchedRunning r{id, job.spec().priority(), job.submit_seq(), job.owner()};
    for (const auto& p : job.placements())
      if (!p.finished()) r.parts.push_back({p.worker(), p.first_rank(), p.num_ranks()});
    r.stopping = IsStopping(job.state());
    if (job.state() == v1::RUNNING && job.progress().eta_seconds() > 0)
      r.ends_in_seconds = std::max(0.0, job.progress().eta_seconds() - SecondsSince(job.progress().updated()));
    s.running.push_back(std::move(r));
  }
  return s;
}

void Coordinator::ApplySchedule(const ScheduleResult& result) {
  for (const auto& victim_id : result.preempt) {
    JobEntry& victim = jobs_.at(victim_id);
    const v1::Job& holder = jobs_.at(result.reserved_for).job;
    BeginStopping(&victim, v1::PREEMPTED,
                  "preempted by " + holder.id() + " (priority " + std::to_string(holder.spec().priority()) +
                      " > " + std::to_string(victim.job.spec().priority()) + ")");
  }
  for (const auto& [id, parts] : result.placed) Place(&jobs_.at(id), parts);
  for (const auto& [id, reason] : result.waiting) {
    JobEntry& entry = jobs_.at(id);
    if (entry.job.reason() != reason) {
      entry.job.set_reason(reason);
      Persist(&entry, /*sync=*/false);
    }
  }
}

void Coordinator::Place(JobEntry* entry, const std::vector<SchedPart>& parts) {
  v1::Job& job = entry->job;
  std::string where;
  for (const auto& part : parts) {
    v1::Placement* p = job.add_placements();
    p->set_worker(part.worker);
    p->set_first_rank(part.first_rank);
    p->set_num_ranks(part.num_ranks);
    where += (where.empty() ? "" : ", ") + part.worker + " (" + RankRange(*p) + ")";
  }
  if (options_.observer) {
    // Waiting started at the last transition into QUEUED.
    for (int i = job.events_size() - 1; i >= 0; --i) {
      if (job.events(i).state() == v1::QUEUED) {
        options_.observer->JobScheduled(SecondsSince(job.events(i).time(), clock_->WallNow()));
        break;
      }
    }
  }
  SetState(entry, v1::SCHEDULED, "placed on " + where, job.checkpoint_step());
}

StatusOr<std::string> Coordinator::LogAddressOf(const std::string& job_id, int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return Status::NotFound("no job " + job_id);
  const v1::Job& job = it->second.job;
  if (rank < 0 || rank >= job.spec().resources().world_size())
    return Status::InvalidArgument("rank: job " + job_id + " has ranks 0.." +
                                   std::to_string(job.spec().resources().world_size() - 1));
  for (const auto& p : job.placements()) {
    if (rank < p.first_rank() || rank >= p.first_rank() + p.num_ranks()) continue;
    auto w = workers_.find(p.worker());
    if (w == workers_.end() || w->second.info.log_address().empty())
      return Status::Unavailable("worker " + p.worker() + " that ran rank " + std::to_string(rank) +
                                 " of " + job_id + " is not connected");
    return w->second.info.log_address();
  }
  return Status::NotFound("rank " + std::to_string(rank) + " of job " + job_id + " has not been placed yet");
}

StatusOr<v1::JobMetrics> Coordinator::Metrics(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("no job " + id);
  v1::JobMetrics m = it->second.history;
  m.set_job_id(id);
  return m;
}

StatusOr<Coordinator::ModelLocation> Coordinator::ModelOf(const std::string& id, int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound("no job " + id);
  const v1::Job& job = it->second.job;
  const std::string state = v1::JobState_Name(job.state());
  const bool has_model = job.has_model() && !job.model().path().empty();
  if (step == 0 && !has_model)
    return Status::FailedPrecondition("job " + id + " is " + state +
                                      " and has no model yet: the model is exported when the job succeeds");
  if (step > 0 && !has_model && job.checkpoint_step() == 0)
    return Status::FailedPrecondition("job " + id + " is " + state + " and has no checkpoint yet");
  ModelLocation where;
  if (has_model) where.model = job.model();
  for (const auto& p : job.placements())
    if (!has_model && p.first_rank() == 0) where.model.set_worker(p.worker());
  if (step > 0) where.model.set_step(step);
  auto w = workers_.find(where.model.worker());
  if (w == workers_.end() || w->second.info.state() != v1::WORKER_READY || w->second.info.log_address().empty())
    where.worker_error = Status::Unavailable("worker " + where.model.worker() + " that holds the model of job " + id +
                                             " is gone, and the coordinator sees no shared copy (--checkpoint-root)");
  else
    where.worker_address = w->second.info.log_address();
  return where;
}

CoordinatorStats Coordinator::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CoordinatorStats s;
  for (int st = v1::QUEUED; st <= v1::STUCK; ++st)
    s.jobs_by_state[v1::JobState_Name(static_cast<v1::JobState>(st))] = 0;
  s.workers_by_state["READY"] = 0;
  s.workers_by_state["LOST"] = 0;
  for (const auto& [id, entry] : jobs_) {
    const v1::Job& job = entry.job;
    s.jobs_by_state[v1::JobState_Name(job.state())]++;
    if (job.state() == v1::QUEUED) {
      s.queue_length++;
      s.oldest_queued_seconds =
          std::max(s.oldest_queued_seconds, SecondsSince(job.events(job.events_size() - 1).time(), clock_->WallNow()));
    }
  }
  for (const auto& [name, w] : workers_) {
    const bool ready = w.info.state() == v1::WORKER_READY;
    s.workers_by_state[ready ? "READY" : "LOST"]++;
    if (ready) s.slots_total += w.info.slots();
    s.slots_used += UsedSlots(name);
  }
  return s;
}

std::vector<v1::WorkerInfo> Coordinator::ListWorkers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::WorkerInfo> workers;
  for (const auto& [name, w] : workers_) {
    workers.push_back(w.info);
    workers.back().set_used_slots(UsedSlots(name));
  }
  return workers;
}

std::vector<v1::WorkerCache> Coordinator::ListCache(const std::string& worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::WorkerCache> caches;
  for (const auto& [name, w] : workers_) {
    if (!worker.empty() && name != worker) continue;
    v1::WorkerCache& wc = caches.emplace_back();
    wc.set_worker(name);
    *wc.mutable_report() = w.cache;
  }
  return caches;
}

StatusOr<v1::WorkerInfo> Coordinator::Cordon(const std::string& name, bool uncordon) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  auto it = workers_.find(name);
  if (it == workers_.end()) return Status::NotFound("no worker " + name + " (see `nightshift worker list`)");
  it->second.info.set_cordoned(!uncordon);
  if (uncordon) it->second.info.set_draining(false);
  NS_INFO("worker " << name << (uncordon ? " uncordoned" : " cordoned"));
  v1::WorkerInfo info = it->second.info;
  info.set_used_slots(UsedSlots(name));
  return info;
}

StatusOr<v1::WorkerInfo> Coordinator::Drain(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  auto it = workers_.find(name);
  if (it == workers_.end()) return Status::NotFound("no worker " + name + " (see `nightshift worker list`)");
  it->second.info.set_cordoned(true);
  it->second.info.set_draining(true);
  int moved = 0;
  for (auto& [id, entry] : jobs_) {
    if (!IsActive(entry.job.state()) || RanksOn(entry.job, name) == 0) continue;
    BeginStopping(&entry, v1::PREEMPTED, "worker " + name + " is drained");
    ++moved;
  }
  NS_RETURN_IF_ERROR(store_error_);
  NS_INFO("worker " << name << " drained: " << moved << " jobs checkpoint and move");
  v1::WorkerInfo info = it->second.info;
  info.set_used_slots(UsedSlots(name));
  return info;
}

StatusOr<int> Coordinator::EvictCache(const std::string& worker, const std::string& key, bool all) {
  if (key.empty() && !all)
    return Status::InvalidArgument("key: name an entry, or set all");
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(store_error_);
  if (!worker.empty() && !workers_.count(worker)) return Status::NotFound("no worker " + worker);
  int n = 0;
  for (auto& [name, w] : workers_) {
    if (!worker.empty() && name != worker) continue;
    if (all) w.evict_all = true;
    else w.evict_keys.push_back(key);
    ++n;
  }
  return n;
}

}  // namespace nightshift
