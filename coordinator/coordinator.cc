#include "coordinator/coordinator.h"

#include <algorithm>
#include <random>
#include <set>

#include "common/log.h"
#include "common/spec.h"
#include "common/time_util.h"
#include "common/crypto/sha256.h"
#include "coordinator/attempts.h"
#include "coordinator/job_table.h"
#include "coordinator/limits.h"
#include "coordinator/placer.h"
#include "coordinator/task_reports.h"
#include "coordinator/worker_registry.h"

namespace nightshift {
namespace {

// 32 random bytes from the OS, as 64 hex digits.
std::string RandomKey() {
  std::random_device os;  // /dev/urandom on Linux
  unsigned char bytes[32];
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(os());
  return crypto::ToHex(bytes, sizeof(bytes));
}

}  // namespace

Coordinator::Coordinator(const CoordinatorOptions& options, std::unique_ptr<JobStore> store)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      jobs_(std::make_unique<JobTable>(std::move(store), clock_)),
      workers_(std::make_unique<WorkerRegistry>(options_, clock_)),
      attempts_(std::make_unique<Attempts>(options_, clock_, jobs_.get(), workers_.get())),
      reports_(std::make_unique<TaskReports>(clock_, jobs_.get(), attempts_.get())),
      placer_(std::make_unique<Placer>(jobs_.get(), workers_.get(), attempts_.get(), options.cluster_allocates)) {}

Coordinator::~Coordinator() = default;

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(const CoordinatorOptions& options) {
  if (options.data_dir.empty()) return Status::InvalidArgument("--data-dir is required");
  auto store = JobStore::Open(options.data_dir);
  if (!store.ok()) return store.status();
  return Open(options, std::move(store.value()));
}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(const CoordinatorOptions& options,
                                                         std::unique_ptr<JobStore> store) {
  if (options.lease_seconds <= 0) return Status::InvalidArgument("--lease-seconds must be positive");
  if (options.retain_finished_days < 0) return Status::InvalidArgument("--retain-finished-days must not be negative");
  std::unique_ptr<Coordinator> c(new Coordinator(options, std::move(store)));
  auto loaded = c->jobs_->Load();
  if (!loaded.ok()) return loaded.status();
  // The store logged each one, naming its key.
  if (options.observer != nullptr)
    for (const std::string& key : c->jobs_->moved_aside()) options.observer->RecordMovedAside(key);
  NS_INFO("coordinator: loaded " << loaded.value() << " jobs from " << options.data_dir);
  return c;
}

Status Coordinator::store_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_->store_error();
}

StatusOr<v1::Job> Coordinator::Submit(v1::JobSpec spec, const std::string& owner, const std::string& request_id) {
  NS_RETURN_IF_ERROR(JobTable::CheckRequestId(request_id));
  NS_RETURN_IF_ERROR(DefaultAndValidateJobSpec(&spec));
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  return jobs_->Submit(std::move(spec), owner, request_id, options_.max_jobs_per_user);
}

StatusOr<v1::Job> Coordinator::SubmitTrial(v1::JobSpec spec, const std::string& owner, const std::string& request_id,
                                           const std::string& sweep_id, const std::vector<int64_t>& await,
                                           bool by_epochs) {
  NS_RETURN_IF_ERROR(JobTable::CheckRequestId(request_id));
  NS_RETURN_IF_ERROR(DefaultAndValidateJobSpec(&spec));
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto sweep = jobs_->sweeps().find(sweep_id);
  if (sweep == jobs_->sweeps().end() || sweep->second.state() != v1::RUNNING)
    return Status::FailedPrecondition("sweep " + sweep_id + " is not running: no new trial");
  // Tagged in the write that accepts it: a crash never leaves an accepted trial outside its
  // sweep (missed by CancelSweep, placed with no rungs for its ranks to wait at).
  v1::Job trial;
  trial.set_sweep_id(sweep_id);
  (by_epochs ? trial.mutable_await_epochs() : trial.mutable_await_steps())->Assign(await.begin(), await.end());
  StatusOr<v1::Job> job =
      jobs_->Submit(std::move(spec), owner, request_id, options_.max_jobs_per_user, std::move(trial));
  if (!job.ok() || job->sweep_id() == sweep_id) return job;
  // Found by its request id without the tag: written by an older coordinator, which tagged
  // a trial in a second write and crashed before it. Tagged now.
  JobEntry* entry = jobs_->Find(job->id());
  entry->job.set_sweep_id(sweep_id);
  (by_epochs ? entry->job.mutable_await_epochs() : entry->job.mutable_await_steps())->Assign(await.begin(), await.end());
  jobs_->Persist(entry, /*sync=*/true);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  return entry->job;
}

Status Coordinator::Judged(const std::string& id, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  JobEntry* entry = jobs_->Find(id);
  if (entry == nullptr || IsTerminal(entry->job.state()) || step <= entry->job.judged_step()) return Status::OK();
  entry->job.set_judged_step(step);
  jobs_->Persist(entry, /*sync=*/false);  // lost in a crash: the ranks' wait runs out, or the next judgement
  return jobs_->store_error();
}

StatusOr<v1::Sweep> Coordinator::SubmitSweep(v1::SweepSpec spec, const std::string& owner,
                                             const std::string& request_id) {
  NS_RETURN_IF_ERROR(JobTable::CheckRequestId(request_id));
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  return jobs_->SubmitSweep(std::move(spec), owner, request_id);
}

StatusOr<v1::Sweep> Coordinator::GetSweep(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto it = jobs_->sweeps().find(id);
  if (it == jobs_->sweeps().end()) return Status::NotFound("no sweep " + id);
  return it->second;
}

std::vector<v1::Sweep> Coordinator::ListSweeps(const std::string* owner, uint64_t after_seq, size_t limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<const v1::Sweep*> found;
  for (const auto& [id, sweep] : jobs_->sweeps())
    if ((owner == nullptr || sweep.owner() == *owner) && sweep.submit_seq() > after_seq) found.push_back(&sweep);
  std::sort(found.begin(), found.end(), [](const v1::Sweep* a, const v1::Sweep* b) { return a->submit_seq() < b->submit_seq(); });
  std::vector<v1::Sweep> out;
  for (size_t i = 0; i < found.size() && i < limit; ++i) out.push_back(*found[i]);
  return out;
}

std::vector<v1::Sweep> Coordinator::RunningSweeps() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::Sweep> out;
  for (const auto& [id, sweep] : jobs_->sweeps())
    if (sweep.state() == v1::RUNNING) out.push_back(sweep);
  return out;
}

StatusOr<v1::Sweep> Coordinator::CancelSweep(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto it = jobs_->sweeps().find(id);
  if (it == jobs_->sweeps().end()) return Status::NotFound("no sweep " + id);
  v1::Sweep& sweep = it->second;
  if (IsTerminal(sweep.state()))
    return Status::FailedPrecondition("sweep " + id + " already ended " + v1::JobState_Name(sweep.state()));
  // Every unfinished job of the sweep, listed in its record or not yet (a trial the runner
  // made in the pass now running).
  for (auto& [job_id, entry] : jobs_->entries())
    if (entry.job.sweep_id() == id && !IsTerminal(entry.job.state()))
      jobs_->SetState(&entry, v1::CANCELLED, "sweep " + id + " cancelled");
  for (v1::Trial& trial : *sweep.mutable_trials())
    if (trial.state() == v1::TRIAL_RUNNING || trial.state() == v1::TRIAL_PAUSED) trial.set_state(v1::TRIAL_CANCELLED);
  sweep.set_state(v1::CANCELLED);
  sweep.set_reason("cancelled by user");
  jobs_->AddSweepEvent(&sweep, "cancelled by user");
  jobs_->PersistSweep(&sweep);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  return sweep;
}

Status Coordinator::UpdateSweep(const v1::Sweep& update) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto it = jobs_->sweeps().find(update.id());
  if (it == jobs_->sweeps().end()) return Status::NotFound("no sweep " + update.id());
  v1::Sweep& sweep = it->second;
  if (!IsTerminal(sweep.state())) {
    sweep = update;
  } else {  // cancelled meanwhile: that stands (its events too); trials made since are cancelled
    for (int i = sweep.trials_size(); i < update.trials_size(); ++i) {
      v1::Trial* trial = sweep.add_trials();
      *trial = update.trials(i);
      trial->set_state(v1::TRIAL_CANCELLED);
    }
  }
  jobs_->PersistSweep(&sweep);
  return jobs_->store_error();
}

Status Coordinator::Hold(const std::string& id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto found = jobs_->Get(id);
  if (!found.ok()) return found.status();
  JobEntry* entry = found.value();
  if (IsTerminal(entry->job.state()) || !entry->job.held_by().empty()) return Status::OK();
  entry->job.set_held_by(why);
  if (IsActive(entry->job.state()))
    attempts_->BeginStopping(entry, v1::PREEMPTED, why);  // ranks checkpoint and stop; then QUEUED, held
  else if (entry->job.state() == v1::QUEUED && options_.cluster_allocates)
    // A new attempt: the provisioner cancels this one's allocation, even one it is
    // submitting now or adopts after a restart, unrecorded yet (its record comes too late).
    // A restart's backoff still runs.
    attempts_->Requeue(entry, std::max(Clock::Duration::zero(), entry->not_before - clock_->Now()), why);
  else if (entry->job.state() == v1::QUEUED)
    jobs_->SetState(entry, v1::QUEUED, why, entry->job.checkpoint_step());
  else
    jobs_->Persist(entry, /*sync=*/true);  // stopping already: requeued held
  return jobs_->store_error();
}

Status Coordinator::Release(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto found = jobs_->Get(id);
  if (!found.ok()) return found.status();
  JobEntry* entry = found.value();
  if (IsTerminal(entry->job.state()) || entry->job.held_by().empty()) return Status::OK();
  const std::string why = entry->job.held_by();
  entry->job.clear_held_by();
  jobs_->AddEvent(&entry->job, "released: " + why.substr(0, why.find(':')) + " resumes it", entry->job.checkpoint_step());
  jobs_->Persist(entry, /*sync=*/true);
  return jobs_->store_error();
}

StatusOr<v1::Job> Coordinator::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto entry = jobs_->Get(id);
  if (!entry.ok()) return entry.status();
  return entry.value()->job;
}

StatusOr<JobPage> Coordinator::List(const JobQuery& query, const std::string* owner) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  return jobs_->List(query, owner);
}

StatusOr<v1::Job> Coordinator::Cancel(const std::string& id, const std::string& reason) {
  NS_RETURN_IF_ERROR(CheckCancelReason(reason));
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto found = jobs_->Get(id);
  if (!found.ok()) return found.status();
  JobEntry& entry = *found.value();
  if (IsTerminal(entry.job.state()))
    return Status::FailedPrecondition("job " + id + " already ended " +
                                      v1::JobState_Name(entry.job.state()));
  // Its workers are told to stop the ranks at their next heartbeat (reconciliation).
  jobs_->SetState(&entry, v1::CANCELLED, reason.empty() ? "cancelled by user" : reason);
  NS_RETURN_IF_ERROR(jobs_->store_error());  // not written: not cancelled as far as anyone is told
  return entry.job;
}

Status Coordinator::Delete(const std::string& id) {
  NS_RETURN_IF_ERROR(CheckJobId(id));
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto found = jobs_->Get(id);
  if (!found.ok()) return found.status();
  const v1::JobState state = found.value()->job.state();
  if (!IsTerminal(state))
    return Status::FailedPrecondition("job " + id + " is " + v1::JobState_Name(state) +
                                      ": only a finished job can be deleted; cancel it first");
  if (options_.tracking && !JobTable::TrackingComplete(found.value()->job))
    return Status::FailedPrecondition("job " + id + ": its MLflow run is not complete yet (the tracking server has "
                                      "not taken its last metrics and final state); try again once it has");
  if (ClusterMayList(id))
    return Status::FailedPrecondition(
        "job " + id + ": the cluster still lists an allocation of it (being cancelled), or its queue has not been "
        "read since the coordinator started; try again once it has left the queue");
  jobs_->Remove(found.value());
  return jobs_->store_error();  // not written: not deleted
}

StatusOr<v1::Job> Coordinator::WaitForChange(const std::string& id, uint64_t* version,
                                             std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return jobs_->WaitForChange(lock, id, version, timeout);
}

StatusOr<Coordinator::Registered> Coordinator::Register(const v1::WorkerInfo& worker, const RegistrationSource& from) {
  NS_RETURN_IF_ERROR(WorkerRegistry::CheckRegistration(worker));
  Registered registered;
  registered.heartbeat_interval_ms = options_.heartbeat_interval_ms;
  registered.file_service_key = RandomKey();
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  NS_RETURN_IF_ERROR(workers_->Register(worker, from, registered.file_service_key));
  return registered;
}

StatusOr<HeartbeatReply> Coordinator::Heartbeat(const std::string& name, std::vector<v1::TaskStatus> tasks,
                                                 const v1::CacheReport* cache,
                                                 const std::vector<v1::HeldCheckpoint>& checkpoints) {
  NS_RETURN_IF_ERROR(LimitHeartbeat(name, &tasks, cache, checkpoints));
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  const Clock::TimePoint now = clock_->Now();
  HeartbeatReply reply;
  NS_RETURN_IF_ERROR(workers_->Heartbeat(name, now, tasks, cache, checkpoints, &reply));
  std::set<std::pair<std::string, int>> reported;
  for (const auto& status : tasks) {
    reported.insert({status.task().job_id(), status.task().attempt()});
    reports_->Handle(name, status, &reply);
  }
  if (reports_->TakeTrialEvaluated() && options_.on_trial_evaluation) options_.on_trial_evaluation();
  const int ignored = placer_->JudgeClaims(name);  // after the reports: they record what ran here
  if (ignored > 0 && options_.observer != nullptr) options_.observer->CheckpointClaimsIgnored(ignored);
  for (auto& [id, entry] : jobs_->entries())
    reports_->Reconcile(name, reported.count({id, entry.job.attempt()}) > 0, &entry, &reply);
  NS_RETURN_IF_ERROR(jobs_->store_error());  // a change this heartbeat caused was not written: not acknowledged
  for (v1::Assignment& a : reply.start) placer_->AddResumeSources(&a);
  placer_->AddCheckpointCopies(name, now, &reply);
  // A worker of an allocation whose attempt is over, with no rank left: its allocation
  // ends when it exits, and the nodes go back to the cluster.
  const WorkerEntry* w = workers_->Find(name);
  reply.release = w != nullptr && w->info.has_allocation() && tasks.empty() && reply.start.empty() &&
                  !placer_->ServesCurrentAttempt(w->info);
  return reply;
}

void Coordinator::NoteClusterListing(std::set<std::string> job_ids) {
  std::lock_guard<std::mutex> lock(mu_);
  cluster_listed_ = std::move(job_ids);
}

bool Coordinator::ClusterMayList(const std::string& id) const {
  return options_.cluster_allocates && (!cluster_listed_ || cluster_listed_->count(id) > 0);
}

std::vector<AllocationNeed> Coordinator::AllocationNeeds() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AllocationNeed> needs;
  const Clock::TimePoint now = clock_->Now();
  for (const auto& [id, entry] : jobs_->entries()) {
    const v1::Job& job = entry.job;
    if (IsTerminal(job.state())) continue;
    needs.push_back({id, job.attempt(), job.state(), job.state() == v1::QUEUED && entry.not_before <= now && job.held_by().empty(), job.spec(),
                     job.owner(), job.allocation(), job.excluded_nodes()});
  }
  return needs;
}

namespace {

// The job's entry if the allocation is of its current attempt and it has not finished.
JobEntry* CurrentAttempt(JobTable* jobs, const std::string& job_id, int attempt) {
  JobEntry* entry = jobs->Find(job_id);
  if (entry == nullptr || IsTerminal(entry->job.state()) || entry->job.attempt() != attempt) return nullptr;
  return entry;
}

// The step the job's current attempt started from: what its trainer said it resumed from
// (TaskReports::TakeResumedStep's "attempt N ..." event), else the newest checkpoint when
// the attempt began (its first event: queued, or the job accepted).
int64_t ResumedStep(const v1::Job& job) {
  if (const v1::JobEvent* resumed = ResumedEvent(job)) return resumed->step();
  for (const auto& ev : job.events())
    if (ev.attempt() == job.attempt()) return ev.step();
  return 0;
}

std::string Describe(const v1::ClusterAllocation& a) {
  return a.cluster() + " job " + a.id() + " " + a.state() + (a.nodes().empty() ? "" : " on " + a.nodes());
}

}  // namespace

Status Coordinator::NoteAllocation(const std::string& job_id, const v1::ClusterAllocation& allocation) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  JobEntry* entry = CurrentAttempt(jobs_.get(), job_id, allocation.attempt());
  if (entry == nullptr) return Status::OK();
  v1::ClusterAllocation& known = *entry->job.mutable_allocation();
  if (known.SerializeAsString() == allocation.SerializeAsString()) return Status::OK();
  const bool event = known.id() != allocation.id() || known.state() != allocation.state();
  known = allocation;
  if (event) jobs_->AddEvent(&entry->job, Describe(allocation), entry->job.checkpoint_step());
  jobs_->Persist(entry, /*sync=*/event);
  return jobs_->store_error();
}

Status Coordinator::AllocationEnded(const std::string& job_id, const v1::ClusterAllocation& allocation,
                                    AllocationEnd how, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  JobEntry* entry = CurrentAttempt(jobs_.get(), job_id, allocation.attempt());
  if (entry == nullptr) return Status::OK();
  *entry->job.mutable_allocation() = allocation;
  const std::string what = Describe(allocation) + (detail.empty() ? "" : ": " + detail);
  switch (how) {
    case AllocationEnd::kPreempted:
      attempts_->Requeue(entry, Clock::Duration::zero(), "the cluster took the allocation back (" + what + ")");
      break;
    case AllocationEnd::kTimeLimit:
      // Held or preempted by the coordinator meanwhile: its stop, not the slice, ended it.
      if (IsStopping(entry->job.state()) || entry->job.checkpoint_step() > ResumedStep(entry->job)) {
        attempts_->Requeue(entry, Clock::Duration::zero(), "the allocation's time limit ended it (" + what + ")");
      } else {
        attempts_->FailAttempt(entry,
                               "resources.time_limit_minutes: attempt " + std::to_string(allocation.attempt()) +
                                   " reached its time limit without a new checkpoint (still step " +
                                   std::to_string(entry->job.checkpoint_step()) +
                                   "): a slice must leave time for set-up and a checkpoint; give more minutes (" +
                                   what + ")",
                               /*user_error=*/false, "time_limit");
      }
      break;
    case AllocationEnd::kNodeFail: {
      // Kept with the attempt's end (the same write): its next allocations avoid them, across
      // restarts. A Slurm hostlist ("n[1-2]") each; joined by commas, still one.
      const std::string& failed = allocation.failed_nodes();
      const std::string excluded = entry->job.excluded_nodes();
      if (!failed.empty() && ("," + excluded + ",").find("," + failed + ",") == std::string::npos)
        entry->job.set_excluded_nodes(excluded + (excluded.empty() ? "" : ",") + failed);
      attempts_->FailAttempt(entry, "a node of the allocation failed (" + what + ")", /*user_error=*/false,
                             "node_fail");
      break;
    }
    case AllocationEnd::kOther:
      attempts_->FailAttempt(entry, "the allocation ended before the attempt did (" + what + ")",
                             /*user_error=*/false, "allocation_ended");
      break;
  }
  return jobs_->store_error();
}

Status Coordinator::AllocationRefused(const std::string& job_id, int attempt, const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  JobEntry* entry = CurrentAttempt(jobs_.get(), job_id, attempt);
  if (entry == nullptr) return Status::OK();
  attempts_->FailAttempt(entry, error, /*user_error=*/true);
  return jobs_->store_error();
}

Status Coordinator::ReportTask(const std::string& worker, v1::TaskStatus status) {
  NS_RETURN_IF_ERROR(CheckSize("name", worker, limits::kWorkerNameBytes));
  NS_RETURN_IF_ERROR(LimitTaskStatus("status", &status));
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  HeartbeatReply ignored;  // stops are told at the next heartbeat
  reports_->Handle(worker, status, &ignored);
  if (reports_->TakeTrialEvaluated() && options_.on_trial_evaluation) options_.on_trial_evaluation();
  return jobs_->store_error();  // not written: the worker keeps the result and sends it again
}

void Coordinator::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!jobs_->store_error().ok()) return;  // stopped (fail-stop, see store_status())
  if (options_.retain_finished_days > 0)
    jobs_->RemoveFinishedBefore(clock_->WallNow() - std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                        Seconds(options_.retain_finished_days * 86400)),
                                [&](const v1::Job& job) {
                                  if (options_.cluster_allocates && !cluster_listed_ && !unread_queue_warned_) {
                                    unread_queue_warned_ = true;
                                    NS_WARN("coordinator: finished jobs past their retention are kept until the "
                                            "cluster's queue is read (the provisioner has not listed it since start)");
                                  }
                                  return (options_.tracking && !JobTable::TrackingComplete(job)) ||
                                         ClusterMayList(job.id());
                                });
  const Clock::TimePoint now = clock_->Now();
  // After our own outage hang detection starts over: progress could not reach us.
  if (workers_->ExpireLeases(now))
    for (auto& [id, entry] : jobs_->entries()) entry.last_advance = now;
  for (auto& [id, entry] : jobs_->entries()) {
    if (IsStopping(entry.job.state())) {
      attempts_->ReapStopping(&entry, now);
    } else if (workers_->in_outage() || !attempts_->DetectHang(&entry, now)) {
      attempts_->FailIfWorkerGone(&entry, now);
    }
  }
  ScheduleOptions scheduling;
  scheduling.preemption = options_.preemption;
  scheduling.preemptible_below = options_.preemptible_below;
  placer_->SchedulingPass(now, scheduling);
}

StatusOr<Coordinator::FileService> Coordinator::LogAddressOf(const std::string& job_id, int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto entry = jobs_->Get(job_id);
  if (!entry.ok()) return entry.status();
  const v1::Job& job = entry.value()->job;
  if (rank < 0 || rank >= job.spec().resources().world_size())
    return Status::InvalidArgument("rank: job " + job_id + " has ranks 0.." +
                                   std::to_string(job.spec().resources().world_size() - 1));
  for (const auto& p : job.placements()) {
    if (rank < p.first_rank() || rank >= p.first_rank() + p.num_ranks()) continue;
    const WorkerEntry* w = workers_->Find(p.worker());
    if (w == nullptr || w->info.log_address().empty())
      return Status::Unavailable("worker " + p.worker() + " that ran rank " + std::to_string(rank) +
                                 " of " + job_id + " is not connected");
    return FileService{w->info.log_address(), w->file_key};
  }
  return Status::NotFound("rank " + std::to_string(rank) + " of job " + job_id + " has not been placed yet");
}

StatusOr<v1::JobMetrics> Coordinator::Metrics(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto entry = jobs_->Get(id);
  if (!entry.ok()) return entry.status();
  v1::JobMetrics m = entry.value()->history;
  m.set_job_id(id);
  return m;
}

Status Coordinator::NoteTracked(const std::string& id, const v1::TrackedRun& run) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto entry = jobs_->Get(id);
  if (!entry.ok()) return entry.status();
  *entry.value()->job.mutable_tracked_run() = run;
  jobs_->Persist(entry.value(), /*sync=*/false);
  return jobs_->store_error();
}

StatusOr<Coordinator::ModelLocation> Coordinator::ModelOf(const std::string& id, int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto entry = jobs_->Get(id);
  if (!entry.ok()) return entry.status();
  const v1::Job& job = entry.value()->job;
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
  const WorkerEntry* w = workers_->Find(where.model.worker());
  if (w == nullptr || w->info.state() != v1::WORKER_READY || w->info.log_address().empty())
    where.worker_error = Status::Unavailable("worker " + where.model.worker() + " that holds the model of job " + id +
                                             " is gone, and the coordinator sees no shared copy (--checkpoint-root)");
  else
    where.worker_address = w->info.log_address(), where.worker_key = w->file_key;
  return where;
}

CoordinatorStats Coordinator::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  CoordinatorStats s;
  for (int st = v1::QUEUED; st <= v1::STUCK; ++st)
    s.jobs_by_state[v1::JobState_Name(static_cast<v1::JobState>(st))] = 0;
  s.workers_by_state["READY"] = 0;
  s.workers_by_state["LOST"] = 0;
  for (const auto& [id, entry] : jobs_->entries()) {
    const v1::Job& job = entry.job;
    s.jobs_by_state[v1::JobState_Name(job.state())]++;
    if (job.state() == v1::QUEUED) {
      s.queue_length++;
      s.oldest_queued_seconds =
          std::max(s.oldest_queued_seconds, SecondsSince(job.events(job.events_size() - 1).time(), clock_->WallNow()));
    }
  }
  for (const auto& [name, w] : workers_->entries()) {
    const bool ready = w.info.state() == v1::WORKER_READY;
    s.workers_by_state[ready ? "READY" : "LOST"]++;
    if (ready) s.slots_total += w.info.slots();
    s.slots_used += jobs_->UsedSlots(name);
  }
  return s;
}

std::vector<v1::WorkerInfo> Coordinator::ListWorkers() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::WorkerInfo> workers;
  for (const auto& [name, w] : workers_->entries()) {
    workers.push_back(w.info);
    workers.back().set_used_slots(jobs_->UsedSlots(name));
  }
  return workers;
}

std::vector<v1::WorkerCache> Coordinator::ListCache(const std::string& worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  return workers_->ListCache(worker);
}

StatusOr<v1::WorkerInfo> Coordinator::Cordon(const std::string& name, bool uncordon) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto info = workers_->Cordon(name, uncordon);
  if (info.ok()) info->set_used_slots(jobs_->UsedSlots(name));
  return info;
}

Status Coordinator::RemoveWorker(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  return workers_->Remove(name);  // the next Tick fails its attempts (Gone)
}

StatusOr<v1::WorkerInfo> Coordinator::Drain(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  auto info = workers_->MarkDraining(name);
  if (!info.ok()) return info;
  int moved = 0;
  for (auto& [id, entry] : jobs_->entries()) {
    if (!IsActive(entry.job.state()) || RanksOn(entry.job, name) == 0) continue;
    attempts_->BeginStopping(&entry, v1::PREEMPTED, "worker " + name + " is drained");
    ++moved;
  }
  NS_RETURN_IF_ERROR(jobs_->store_error());
  NS_INFO("worker " << name << " drained: " << moved << " jobs checkpoint and move");
  info->set_used_slots(jobs_->UsedSlots(name));
  return info;
}

StatusOr<int> Coordinator::EvictCache(const std::string& worker, const std::string& key, bool all) {
  if (key.empty() && !all)
    return Status::InvalidArgument("key: name an entry, or set all");
  NS_RETURN_IF_ERROR(CheckSize("key", key, limits::kCacheKeyBytes));
  std::lock_guard<std::mutex> lock(mu_);
  NS_RETURN_IF_ERROR(jobs_->store_error());
  return workers_->QueueEviction(worker, key, all);
}

}  // namespace nightshift
