// TaskReports: what workers report about their tasks (in heartbeats and ReportTask),
// taken into the job records: rank 0's rendezvous address, data-cache use, progress,
// evaluations and exported model; newer checkpoints; a part that started, succeeded or
// failed (through Attempts); and, from a heartbeat, the parts it did not list (Reconcile).
// A report of a task that is not part of a job's current attempt changes nothing and has
// the task stopped.
//
// Lock discipline: not thread-safe, and holds no mutex of its own. Every method requires
// the Coordinator's mutex held; the JobTable and Attempts it is given are guarded by that
// same mutex. Changes are written through the JobTable; a caller checks its store_error()
// before acknowledging the report.
#ifndef NIGHTSHIFT_COORDINATOR_TASK_REPORTS_H_
#define NIGHTSHIFT_COORDINATOR_TASK_REPORTS_H_

#include <string>
#include <utility>

#include "common/clock.h"
#include "coordinator/attempts.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_table.h"
#include "nightshift/v1/cluster.pb.h"

namespace nightshift {

// The current attempt's "attempt N resumed from step S" (or "... started from step 0")
// event, which TaskReports writes once from rank 0's first report; null before it.
const v1::JobEvent* ResumedEvent(const v1::Job& job);

class TaskReports {
 public:
  // `clock`, `jobs` and `attempts` are not owned and must outlive this.
  TaskReports(Clock* clock, JobTable* jobs, Attempts* attempts);

  // One task's status from `worker`. A status of a task that is not a part of a job's
  // current attempt, or of a job that is not active, has its task stopped (added to
  // reply->stop; a STUCK job's also to reply->dump_stacks).
  void Handle(const std::string& worker, const v1::TaskStatus& status, HeartbeatReply* reply);
  // The job's parts on `worker`, given whether its heartbeat listed the job's current
  // attempt: a stopping job's unlisted parts are gone; an active job's unlisted parts
  // are started (added to reply->start), or fail the attempt if they ran before.
  void Reconcile(const std::string& worker, bool reported, JobEntry* entry, HeartbeatReply* reply);
  // Whether a report since the last call brought an ASHA sweep's trial evaluations it
  // had not (the sweep runner has something to judge); clears it.
  bool TakeTrialEvaluated() { return std::exchange(trial_evaluated_, false); }

 private:
  // Takes rank 0's rendezvous address, data-cache use and progress, and any newer
  // checkpoint, from the report on `part`; whether anything changed (not yet written).
  bool TakeReport(const std::string& worker, const v1::TaskStatus& status, const v1::Placement& part,
                  JobEntry* entry);
  bool TakeResumedStep(const v1::TaskStatus& status, JobEntry* entry);
  bool TakeCheckpointCheck(const std::string& worker, const v1::TaskStatus& status, v1::Job* job);
  bool TakeStopReason(const v1::TaskStatus& status, v1::Job* job);

  Clock* const clock_;          // not owned
  JobTable* const jobs_;        // not owned
  Attempts* const attempts_;    // not owned
  bool trial_evaluated_ = false;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_TASK_REPORTS_H_
