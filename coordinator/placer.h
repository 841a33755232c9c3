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

#include <map>
#include <set>
#include <string>
#include <tuple>
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
  // `allocated_only`: every job runs on workers of its own allocation (--cluster slurm).
  Placer(JobTable* jobs, const WorkerRegistry* workers, Attempts* attempts, bool allocated_only = false);

  // Whether a worker of an allocation (WorkerInfo.allocation) still serves its job: the
  // job is unfinished, at the attempt the allocation was made for, and that allocation is
  // the one recorded for the attempt (job.allocation: the same cluster id).
  bool ServesCurrentAttempt(const v1::WorkerInfo& worker) const;

  // One scheduling pass at clock time `now`: the snapshot, Schedule(), its result applied.
  // Preemption only if `options.preemption` and no worker is late.
  void SchedulingPass(Clock::TimePoint now, ScheduleOptions options);
  Snapshot SnapshotForScheduler(Clock::TimePoint now) const;
  void ApplySchedule(const ScheduleResult& result);

  // The ready workers whose own disk holds the job's newest checkpoint among the claims
  // the job's records vouch for (checkpoint_records.h); none: empty.
  std::vector<std::string> NewestHolders(const std::string& job_id) const;
  // Judges the checkpoint claims `worker` made in its last heartbeat (WorkerEntry.held):
  // a claim that matches a copy ordered to it (AddCheckpointCopies), or of a step newer
  // than every record from a worker that wrote the job's checkpoints, becomes a record
  // (checkpoint_records.h); a claim its job's records vouch for counts; so does, for now, a newer step of a job
  // whose current attempt runs on it (its trainer's report of the step may follow the
  // heartbeat's scan of the disk). Every other claim is ignored, and the number of those
  // not ignored at its previous heartbeat already is returned (to be logged and counted).
  int JudgeClaims(const std::string& worker);
  // Fills what `a`'s worker needs to resume the job from a checkpoint the coordinator
  // vouches for: every recorded digest, and where to fetch the newest recorded step from
  // when no worker of the attempt holds it (a ready worker whose claim to it is vouched).
  void AddResumeSources(v1::Assignment* a) const;
  // The copies `target` should make, added to reply->copy_checkpoints: of each RUNNING job
  // whose ranks all sit on one other worker, that worker's newest checkpoint, if `target`
  // is the one other worker to keep a copy (ready, uncordoned, not late, with GPUs for a
  // cuda job; the one holding the job's newest copy already, else the first by name) and
  // does not hold that step yet.
  // Each copy is remembered (the job's copies_ordered) until `target` claims the step.
  // None under a cluster (allocated_only): its workers are other jobs' allocations.
  void AddCheckpointCopies(const std::string& target, Clock::TimePoint now, HeartbeatReply* reply);

 private:
  JobTable* const jobs_;                 // not owned
  const WorkerRegistry* const workers_;  // not owned
  Attempts* const attempts_;             // not owned
  const bool allocated_only_;
  // The step `name` holds of `job`, if the job's records vouch for its claim; else 0.
  int64_t VouchedStep(const v1::Job& job, const std::string& name, const WorkerEntry& w) const;
  // Per worker, the claims (job, step, digest) ignored at its last heartbeat.
  std::map<std::string, std::set<std::tuple<std::string, int64_t, std::string>>> ignored_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_PLACER_H_
