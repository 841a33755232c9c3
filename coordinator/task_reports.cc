#include "coordinator/task_reports.h"

#include <chrono>

#include "common/log.h"
#include "coordinator/checkpoint_records.h"
#include "coordinator/metric_history.h"

namespace nightshift {
namespace {

// Takes the report's checkpoint if it is newer, and records `worker` (placed on the
// attempt: its writer) as holding it (checkpoint_records.h); whether the job changed.
bool TakeCheckpoint(const std::string& worker, const v1::TaskStatus& status, v1::Job* job) {
  const bool recorded =
      RecordHolder(job, worker, status.checkpoint_step(), status.checkpoint_manifest_sha256());
  if (status.checkpoint_step() <= job->checkpoint_step()) return recorded;
  job->set_checkpoint_step(status.checkpoint_step());
  job->set_checkpoint_path(status.checkpoint_path());
  return true;
}

}  // namespace

TaskReports::TaskReports(Clock* clock, JobTable* jobs, Attempts* attempts)
    : clock_(clock), jobs_(jobs), attempts_(attempts) {}

void TaskReports::Handle(const std::string& worker, const v1::TaskStatus& status, HeartbeatReply* reply) {
  const bool alive = status.state() == v1::TASK_PREPARING || status.state() == v1::TASK_RUNNING;
  JobEntry* found = jobs_->Find(status.task().job_id());
  if (found == nullptr || found->job.attempt() != status.task().attempt()) {
    if (alive) reply->stop.push_back(status.task());  // not of the current attempt of a job
    return;
  }
  JobEntry& entry = *found;
  v1::Placement* part = nullptr;
  for (auto& p : *entry.job.mutable_placements())
    if (p.worker() == worker) part = &p;
  if (IsStopping(entry.job.state())) {
    // Keep the checkpoint written on SIGTERM: the next attempt resumes from it.
    // (from a worker the attempt is placed on: no other may set where it resumes from)
    if (part != nullptr && TakeCheckpoint(worker, status, &entry.job)) jobs_->Persist(&entry, /*sync=*/false);
    if (alive) {
      reply->stop.push_back(status.task());
      if (entry.job.state() == v1::STUCK) reply->dump_stacks.push_back(status.task());
    } else if (part != nullptr && !part->finished()) {
      // Ranks that all exited 0 trained their last step: the report is the attempt's
      // results (model, progress, evaluations), taken as a running job's are.
      if (status.state() == v1::TASK_SUCCEEDED) TakeReport(worker, status, *part, &entry);
      attempts_->PartGone(&entry, part, status);  // here: its ranks are gone; written
    }
    return;
  }
  if (!IsActive(entry.job.state()) || part == nullptr) {
    if (alive) reply->stop.push_back(status.task());
    return;
  }
  const bool changed = TakeReport(worker, status, *part, &entry);
  if (alive && entry.job.await_steps_size() + entry.job.await_epochs_size() > 0 && entry.job.judged_step() > 0) {  // its ranks may be waiting
    v1::TaskJudged& judged = reply->judged.emplace_back();
    *judged.mutable_task() = status.task();
    judged.set_step(entry.job.judged_step());
  }
  if (status.state() == v1::TASK_FAILED) {
    attempts_->FailAttempt(&entry, status.error().empty() ? "task failed on " + worker : status.error(),
                           status.user_error());
    return;
  }
  bool written = false;
  if (status.state() == v1::TASK_RUNNING || status.state() == v1::TASK_SUCCEEDED)
    written = attempts_->PartStarted(&entry, part);
  if (status.state() == v1::TASK_SUCCEEDED) written = attempts_->PartSucceeded(&entry, part, status) || written;
  if (changed && !written) jobs_->Persist(&entry, /*sync=*/false);
}

void TaskReports::Reconcile(const std::string& worker, bool reported, JobEntry* entry, HeartbeatReply* reply) {
  v1::Job& job = entry->job;
  if (IsStopping(job.state())) {
    if (!reported)
      for (auto& p : *job.mutable_placements())
        if (p.worker() == worker) p.set_finished(true);  // its ranks are gone
    attempts_->MaybeFinishStopping(entry);
    return;
  }
  if (!IsActive(job.state()) || reported) return;
  for (const auto& p : job.placements()) {
    if (p.worker() != worker || p.finished()) continue;
    if (p.running()) {
      attempts_->FailAttempt(entry, "worker " + worker + " no longer runs " + RankRange(p) + " (it restarted)",
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
    a->mutable_await_steps()->CopyFrom(job.await_steps());
    a->mutable_await_epochs()->CopyFrom(job.await_epochs());
  }
}

bool TaskReports::TakeReport(const std::string& worker, const v1::TaskStatus& status, const v1::Placement& part,
                             JobEntry* entry) {
  v1::Job& job = entry->job;
  // Where rank 0 resumed from is weighed against the checkpoints of the attempts before,
  // so before this report's own: a late first report may carry newer ones already.
  bool changed = part.first_rank() == 0 && TakeResumedStep(status, entry);
  changed = TakeCheckpoint(worker, status, &job) || changed;
  changed = TakeCheckpointCheck(worker, status, &job) || changed;
  changed = TakeStopReason(status, &job) || changed;
  if (part.first_rank() != 0) return changed;
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
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_->WallNow().time_since_epoch()).count();
  bool history = AddEvals(job.attempt(), status.evals(), now_ms, &entry->history);
  if (history && !job.sweep_id().empty() && !trial_evaluated_) {
    // Only ASHA judges evaluations as they come; random and grid act on trials' ends.
    auto sweep = jobs_->sweeps().find(job.sweep_id());
    trial_evaluated_ = sweep != jobs_->sweeps().end() && sweep->second.spec().method() == "asha";
  }
  if (status.has_progress())
    history = AddTrainPoint(job.attempt(), status.progress(), now_ms, &entry->history) || history;
  if (history) jobs_->PersistHistory(entry);
  if (status.has_progress() &&
      (!entry->progress_is_this_attempts || status.progress().step() >= job.progress().step())) {
    *job.mutable_progress() = status.progress();
    entry->progress_at = clock_->Now();
    if (!entry->progress_is_this_attempts || status.progress().step() > entry->last_step) {
      entry->progress_is_this_attempts = true;
      entry->last_step = status.progress().step();
      entry->last_advance = clock_->Now();
    }
    changed = true;
  }
  return changed;
}

// What `worker` did with the job's local checkpoints before starting its ranks (set
// unvouched ones aside, fetched the newest): one event per attempt and worker.
bool TaskReports::TakeCheckpointCheck(const std::string& worker, const v1::TaskStatus& status, v1::Job* job) {
  if (status.checkpoint_check().empty()) return false;
  const std::string reason = "worker " + worker + ": " + status.checkpoint_check();
  for (const auto& ev : job->events())
    if (ev.attempt() == job->attempt() && ev.reason() == reason) return false;  // told already
  jobs_->AddEvent(job, reason, job->checkpoint_step());
  NS_WARN("job " << job->id() << ": " << reason);
  return true;
}

// Why the trainer ended early (train.early_stopping): one event per attempt.
bool TaskReports::TakeStopReason(const v1::TaskStatus& status, v1::Job* job) {
  if (status.stop_reason().empty()) return false;
  for (const auto& ev : job->events())
    if (ev.attempt() == job->attempt() && ev.reason() == status.stop_reason()) return false;  // told already
  jobs_->AddEvent(job, status.stop_reason(), status.progress().step());
  NS_INFO("job " << job->id() << ": " << status.stop_reason());
  return true;
}

const v1::JobEvent* ResumedEvent(const v1::Job& job) {
  for (const auto& ev : job.events())
    if (ev.attempt() == job.attempt() && ev.reason().rfind("attempt ", 0) == 0) return &ev;
  return nullptr;
}

// The step the attempt's trainer says it resumed from is what the record shows: one event
// per attempt (restarts, or a first attempt that found a checkpoint), and the job's
// checkpoint becomes that step when it differs from the newest one reported before (the
// worker that held that one is gone, or its checkpoint was unreadable).
bool TaskReports::TakeResumedStep(const v1::TaskStatus& status, JobEntry* entry) {
  v1::Job& job = entry->job;
  if (!status.has_resumed_step() || (job.attempt() == 0 && status.resumed_step() == 0)) return false;
  if (ResumedEvent(job) != nullptr) return false;  // told already
  const int64_t step = status.resumed_step();
  std::string reason = "attempt " + std::to_string(job.attempt()) +
                       (step > 0 ? " resumed from step " + std::to_string(step) : " started from step 0 (no checkpoint)");
  if (step != job.checkpoint_step()) {
    reason += "; the newest checkpoint reported was step " + std::to_string(job.checkpoint_step());
    job.set_checkpoint_step(step);
    job.clear_checkpoint_path();
  }
  jobs_->AddEvent(&job, reason, step);
  NS_INFO("job " << job.id() << ": " << reason);
  return true;
}

}  // namespace nightshift
