// Placer: where jobs' ranks and checkpoints go. For ranks it is the scheduler's I/O: it
// takes the snapshot of jobs and workers that Schedule() decides on (scheduler.h) and
// applies the result (preempt, place, say why the others wait). For checkpoints without
// shared storage it finds the workers holding a job's newest one (placed first on a
// restart) and plans the copy that keeps a second worker able to resume a job whose ranks
// all sit on one worker.
//
// Lock discipline: not thread-safe, and holds no mutex of its own. Every method requires
// the Coordinator's mutex held; the JobTable, WorkerRegistry and Attempts it is given are
// guarded by that same mutex.
#ifndef NIGHTSHIFT_COORDINATOR_PLACER_H_
#define NIGHTSHIFT_COORDINATOR_PLACER_H_

#include <string>
#include <vector>

#include "common/clock.h"
#include "coordinator/attempts.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_table.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"

namespace nightshift {

class Placer {
 public:
  // The scheduler's view of now: jobs that may start, workers that accept work, and the
  // jobs that hold slots.
  struct Snapshot {
    std::vector<SchedJob> pending;
    std::vector<SchedWorker> workers;
    std::vector<SchedRunning> running;
    bool any_late = false;  // some ready worker is Late
  };

  // `jobs`, `workers` and `attempts` are not owned and must outlive this.
  Placer(JobTable* jobs, const WorkerRegistry* workers, Attempts* attempts);

  // One scheduling pass at clock time `now`: the snapshot, Schedule(), its result applied.
  // Preemption only if `options.preemption` and no worker is late.
  void SchedulingPass(Clock::TimePoint now, ScheduleOptions options);
  Snapshot SnapshotForScheduler(Clock::TimePoint now) const;
  void ApplySchedule(const ScheduleResult& result);

  // The ready workers whose own disk holds the job's newest checkpoint (none reported: empty).
  std::vector<std::string> NewestHolders(const std::string& job_id) const;
  // The copies `target` should make, added to reply->copy_checkpoints: of each RUNNING job
  // whose ranks all sit on one other worker, that worker's newest checkpoint, if `target`
  // is the one other worker to keep a copy (ready, uncordoned, not late, with GPUs for a
  // cuda job; the one holding the job's newest copy already, else the first by name) and
  // does not hold that step yet.
  void AddCheckpointCopies(const std::string& target, Clock::TimePoint now, HeartbeatReply* reply) const;

 private:
  JobTable* const jobs_;                 // not owned
  const WorkerRegistry* const workers_;  // not owned
  Attempts* const attempts_;             // not owned
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_PLACER_H_
