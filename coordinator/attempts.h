// Attempts: the lifecycle of a job's attempt, as transitions of its record.
//
//   QUEUED --Place--> SCHEDULED --PartStarted (all parts)--> RUNNING
//     --PartSucceeded (all parts)--> SUCCEEDED
//   SCHEDULED/RUNNING --FailAttempt--> QUEUED (Requeue: next attempt, backoff) or FAILED
//   SCHEDULED/RUNNING --BeginStopping--> PREEMPTED or STUCK (placements held, ranks told to
//     stop) --PartGone (each part)--> MaybeFinishStopping (all parts gone, or the stop
//     timeout)--> QUEUED, or SUCCEEDED when every part's ranks trained their last step
//     before the stop took effect (their work kept, not requeued)
//
// Each attempt has a growing number (job.attempt) that fences the older ones: a report
// of an older attempt changes nothing. The checks that Tick runs on every job
// (ReapStopping, DetectHang, FailIfWorkerGone) are here too: they only start transitions.
//
// Lock discipline: not thread-safe, and holds no mutex of its own. Every method requires
// the Coordinator's mutex held; the JobTable and WorkerRegistry it is given are guarded
// by that same mutex.
#ifndef NIGHTSHIFT_COORDINATOR_ATTEMPTS_H_
#define NIGHTSHIFT_COORDINATOR_ATTEMPTS_H_

#include <string>
#include <vector>

#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_table.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"

namespace nightshift {

class Attempts {
 public:
  // Uses options.restart_backoff_seconds, stop_timeout_seconds, lease_seconds (in
  // messages) and observer. `clock`, `jobs` and `workers` are not owned and must outlive
  // this.
  Attempts(const CoordinatorOptions& options, Clock* clock, JobTable* jobs, const WorkerRegistry* workers);

  // The scheduler placed the job's ranks: SCHEDULED, and its queue wait is observed.
  void Place(JobEntry* entry, const std::vector<SchedPart>& parts);
  // A part's ranks started / succeeded; the job is RUNNING / SUCCEEDED once all parts are.
  // Whether the job was written.
  bool PartStarted(JobEntry* entry, v1::Placement* part);
  bool PartSucceeded(JobEntry* entry, v1::Placement* part, const v1::TaskStatus& status);

  // The current attempt failed: FAILED for a user error or with no restarts left, else
  // requeued after the restart backoff (doubling per restart, at most 60 s). `cause`
  // classifies retryable failures for metrics: worker_lost, worker_restarted,
  // rank_failed, stuck.
  void FailAttempt(JobEntry* entry, const std::string& error, bool user_error,
                   const char* cause = "rank_failed");
  // Ends the current attempt (placements released) and queues the next, not to be placed
  // before `delay` from now; it resumes from the job's checkpoint.
  void Requeue(JobEntry* entry, Clock::Duration delay, const std::string& reason);
  // PREEMPTED or STUCK: placements are held and the workers are told to stop the ranks.
  void BeginStopping(JobEntry* entry, v1::JobState state, const std::string& reason);
  // A stopping job's part ended: `status` is its last report (TASK_SUCCEEDED: every rank
  // exited 0, having trained every step; the part's metrics are kept if it holds rank 0).
  void PartGone(JobEntry* entry, v1::Placement* part, const v1::TaskStatus& status);
  // Once every part of a stopping job is gone (or `force`): SUCCEEDED if every part
  // succeeded, else requeued, as a restart if STUCK.
  void MaybeFinishStopping(JobEntry* entry, bool force = false);

  // Tick's checks of one job, at clock time `now`.
  void ReapStopping(JobEntry* entry, Clock::TimePoint now);     // parts on gone workers; stop timeout
  // Neither fires while the attempt's allocation awaits its record (kAllocationUnlisted):
  // the provisioner ends the attempt as the cluster's records say.
  bool DetectHang(JobEntry* entry, Clock::TimePoint now);       // RUNNING -> STUCK; whether it did
  void FailIfWorkerGone(JobEntry* entry, Clock::TimePoint now); // an active part on a gone worker

 private:
  // The part's ranks all exited 0: finished and succeeded, its metrics the job's if it
  // holds rank 0 (PartSucceeded, and PartGone while stopping).
  void TakeSuccess(JobEntry* entry, v1::Placement* part, const v1::TaskStatus& status);

  const CoordinatorOptions options_;
  Clock* const clock_;                    // not owned
  JobTable* const jobs_;                  // not owned
  const WorkerRegistry* const workers_;   // not owned
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_ATTEMPTS_H_
