#include "coordinator/attempts.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/log.h"
#include "common/time_util.h"

namespace nightshift {

Attempts::Attempts(const CoordinatorOptions& options, Clock* clock, JobTable* jobs, const WorkerRegistry* workers)
    : options_(options), clock_(clock), jobs_(jobs), workers_(workers) {}

void Attempts::Place(JobEntry* entry, const std::vector<SchedPart>& parts) {
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
  jobs_->SetState(entry, v1::SCHEDULED, "placed on " + where, job.checkpoint_step());
}

bool Attempts::PartStarted(JobEntry* entry, v1::Placement* part) {
  if (part->running()) return false;
  part->set_running(true);
  const v1::Job& job = entry->job;
  if (job.state() != v1::SCHEDULED || !AllPlacements(job, &v1::Placement::running)) return false;
  jobs_->SetState(entry, v1::RUNNING, "all " + std::to_string(job.spec().resources().world_size()) + " ranks started",
                  job.checkpoint_step());
  return true;
}

void Attempts::TakeSuccess(JobEntry* entry, v1::Placement* part, const v1::TaskStatus& status) {
  part->set_finished(true);
  part->set_succeeded(true);
  if (part->first_rank() == 0) *entry->job.mutable_metrics() = status.metrics();
}

bool Attempts::PartSucceeded(JobEntry* entry, v1::Placement* part, const v1::TaskStatus& status) {
  if (part->finished()) return false;
  TakeSuccess(entry, part, status);  // a stop that comes before the other parts end still counts it
  v1::Job& job = entry->job;
  if (AllPlacements(job, &v1::Placement::finished)) {
    jobs_->SetState(entry, v1::SUCCEEDED, "all ranks finished", job.progress().step());
  } else {
    jobs_->Persist(entry, /*sync=*/true);
  }
  return true;
}

void Attempts::FailAttempt(JobEntry* entry, const std::string& error, bool user_error, const char* cause) {
  v1::Job& job = entry->job;
  job.set_error(error);
  const int max_restarts = job.spec().restart().max_restarts();
  if (user_error) {
    jobs_->SetState(entry, v1::FAILED, error);
    return;
  }
  if (job.restarts() >= max_restarts) {
    jobs_->SetState(entry, v1::FAILED,
                    max_restarts == 0 ? error
                                      : "failed after " + std::to_string(max_restarts) + " restarts: " + error);
    return;
  }
  if (options_.observer) options_.observer->JobRestarted(cause);
  job.set_restarts(job.restarts() + 1);
  const double backoff = std::min(60.0, options_.restart_backoff_seconds * std::pow(2.0, job.restarts() - 1));
  // Where it resumes is the next attempt's to say (TaskReports::TakeResumedStep): the
  // newest checkpoint reported may be on a worker that is gone.
  Requeue(entry, Seconds(backoff),
          "restart " + std::to_string(job.restarts()) + " of " + std::to_string(max_restarts) +
              " (newest checkpoint reported: step " + std::to_string(job.checkpoint_step()) + ") after: " + error);
}

void Attempts::Requeue(JobEntry* entry, Clock::Duration delay, const std::string& reason) {
  v1::Job& job = entry->job;
  job.set_attempt(job.attempt() + 1);
  job.clear_placements();
  job.clear_master_addr();
  job.clear_data_cache();
  entry->progress_is_this_attempts = false;
  entry->not_before = clock_->Now() + delay;
  jobs_->SetState(entry, v1::QUEUED, reason, job.checkpoint_step());
}

void Attempts::BeginStopping(JobEntry* entry, v1::JobState state, const std::string& reason) {
  entry->stopping_since = clock_->Now();
  jobs_->SetState(entry, state, reason, entry->job.progress().step());
}

void Attempts::PartGone(JobEntry* entry, v1::Placement* part, const v1::TaskStatus& status) {
  part->set_finished(true);
  if (status.state() == v1::TASK_SUCCEEDED) TakeSuccess(entry, part, status);
  const uint64_t version = entry->version;
  MaybeFinishStopping(entry);
  // Written before the worker drops the task (the report is acknowledged): after a
  // coordinator restart, Reconcile would take an unreported part for a stopped one.
  if (entry->version == version) jobs_->Persist(entry, /*sync=*/true);
}

void Attempts::MaybeFinishStopping(JobEntry* entry, bool force) {
  v1::Job& job = entry->job;
  if (!IsStopping(job.state())) return;
  if (!force && !AllPlacements(job, &v1::Placement::finished)) return;
  if (!job.placements().empty() && AllPlacements(job, &v1::Placement::succeeded)) {
    // A requeue would discard the finished work (a paused sweep trial's, say) or rerun
    // nothing; the hold is moot once the job ends.
    job.clear_held_by();
    jobs_->SetState(entry, v1::SUCCEEDED, "all ranks finished before the stop took effect (" + job.reason() + ")",
                    job.progress().step());
    return;
  }
  if (job.state() == v1::STUCK) {
    FailAttempt(entry, job.reason(), /*user_error=*/false, "stuck");
    return;
  }
  // Preemption is not a failure: no restart is counted and there is no backoff.
  Requeue(entry, Clock::Duration::zero(),
          "requeued from step " + std::to_string(job.checkpoint_step()) + " after: " + job.reason());
}

void Attempts::ReapStopping(JobEntry* entry, Clock::TimePoint now) {
  for (auto& p : *entry->job.mutable_placements())
    if (workers_->Gone(p.worker(), now)) p.set_finished(true);
  const bool late = now - entry->stopping_since > Seconds(options_.stop_timeout_seconds);
  if (late)
    NS_WARN("job " << entry->job.id() << ": ranks not reported stopped after " << options_.stop_timeout_seconds
                   << " s");
  MaybeFinishStopping(entry, late);
}

namespace {

// The attempt's allocation left the cluster's list and the provisioner awaits its record
// (kAllocationUnlisted): its end decides the attempt's, not its workers' silence. Only
// while a provisioner runs (a coordinator restarted without --cluster leaves the mark).
bool AwaitingAllocationRecord(const v1::Job& job, bool cluster_allocates) {
  return cluster_allocates && job.allocation().attempt() == job.attempt() &&
         job.allocation().state() == kAllocationUnlisted;
}

}  // namespace

bool Attempts::DetectHang(JobEntry* entry, Clock::TimePoint now) {
  const v1::Job& job = entry->job;
  if (job.state() != v1::RUNNING || AwaitingAllocationRecord(job, options_.cluster_allocates)) return false;
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

void Attempts::FailIfWorkerGone(JobEntry* entry, Clock::TimePoint now) {
  if (!IsActive(entry->job.state()) || AwaitingAllocationRecord(entry->job, options_.cluster_allocates)) return;
  for (const auto& p : entry->job.placements()) {
    if (!workers_->Gone(p.worker(), now)) continue;
    FailAttempt(entry, "worker " + p.worker() + " lost: no heartbeat for " +
                           std::to_string(static_cast<int>(options_.lease_seconds)) + " s",
                /*user_error=*/false, "worker_lost");
    return;
  }
}

}  // namespace nightshift
