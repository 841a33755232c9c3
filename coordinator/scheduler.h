// Scheduler: pure placement decisions over in-memory state. No I/O, no clock, no locks:
// the coordinator hands it a snapshot (queued jobs, workers that accept new work, the
// jobs running now with their estimated end) and applies what it returns.
//
// Policy, in order:
// - Priority classes: higher priority first. Within one priority, per-user fair share:
//   the next job comes from the owner who holds the fewest slots (running plus placed in
//   this pass), FIFO among that owner's jobs and on ties.
// - Gang: all of a job's ranks are placed at once or none are. A job that fits on one
//   worker goes to the worker with the fewest free slots that fits (best fit, keeps big
//   holes for big jobs); otherwise onto the workers with the most free slots first, so
//   it spans as few workers as possible. Either way, workers that hold the job's newest
//   checkpoint on their own disk (SchedJob::holders) come first.
// - A job that needs more slots than the whole cluster has is skipped with a reason and
//   holds nothing up.
// - Memory: a job's rank goes only to a worker whose memory per slot
//   (SchedWorker::memory_gb_per_slot) holds its resources.memory_gb; a job some workers
//   cannot hold counts only the others' slots, as a GPU job counts only GPU workers', and
//   waits naming resources.memory_gb and the most any worker has per slot when none can.
//   The first such job (or GPU job) that waits while enough of those slots exist keeps
//   their free slots from the jobs after it in the pass, and, while no job holds the
//   reservation, preempts as below, choosing only among the jobs on those workers and
//   counting only their slots there.
// - Backfill with a reservation (EASY backfill): the first job that cannot be placed
//   gets a reservation at the earliest time enough slots free up, computed from the
//   running jobs' estimated ends (unknown = never, as far as the plan goes). A later job
//   may start ahead of it only if it fits in the free slots now and either is expected
//   to end before the reservation time or fits in the slots the reservation does not
//   need at that time. So large jobs are never starved, and small jobs still use holes.
// - Preemption: if the reservation holder (or the first GPU or memory_gb job that waits,
//   above) has a higher priority than some running jobs
//   and enough slots would free up by stopping them, the scheduler names the fewest,
//   lowest-priority such jobs in `preempt`. It does not place the holder in the same
//   pass: the victims must stop first (they are passed back as `stopping`). Across
//   owners, a job preempts only jobs below the best-effort class
//   (ScheduleOptions::preemptible_below): one user's priority orders that user's own
//   jobs, and cannot stop another user's work above that class.
#ifndef NIGHTSHIFT_COORDINATOR_SCHEDULER_H_
#define NIGHTSHIFT_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace nightshift {

// A duration or time from now that nobody can estimate.
constexpr double kUnknownSeconds = std::numeric_limits<double>::infinity();

struct SchedWorker {
  std::string name;
  int total_slots = 0;
  int free_slots = 0;
  bool gpus = false;  // its slots are GPUs (jobs with resources.device cuda go only here)
  std::string reserved_for;  // a job id: a worker of that job's allocation, for it alone
  // The memory one rank here may use, GiB: the worker's memory over its slots. 0: unknown
  // (or sized by the cluster for its job: an allocation's worker), where any job fits.
  double memory_gb_per_slot = 0;
};

struct SchedJob {
  std::string id;
  int world_size = 1;
  int priority = 0;
  uint64_t submit_seq = 0;
  std::string owner;                          // fair share is per owner ("" is one owner)
  double expected_seconds = kUnknownSeconds;  // run time once started, if known
  bool needs_gpu = false;  // resources.device cuda: placed on GPU workers only; such a job
                           // waits without a reservation when they are full (it keeps
                           // their free slots and may preempt: above)
  double memory_gb = 0;    // resources.memory_gb, per rank (0: none): placed where it fits
                           // per slot; waits as a GPU job does when some workers lack it
  // Workers whose own disk holds the job's newest checkpoint (no shared checkpoint root):
  // preferred, so that a rank there resumes from it and sends it to the others.
  std::vector<std::string> holders;
  // Placed only on workers reserved for it (the cluster allocates each attempt); while
  // they lack its slots it waits with `allocation_wait` as the reason.
  bool allocated_only = false;
  std::string allocation_wait;
};

struct SchedPart {
  std::string worker;
  int first_rank = 0;
  int num_ranks = 0;
};

// A job that holds slots now.
struct SchedRunning {
  std::string id;
  int priority = 0;
  uint64_t submit_seq = 0;
  std::string owner;
  std::vector<SchedPart> parts;               // only parts on workers passed in count
  double ends_in_seconds = kUnknownSeconds;   // from its progress ETA; unknown: never
  bool stopping = false;  // already told to stop (preempted, drained): frees its slots
                          // soon and is never chosen as a victim again
};

struct ScheduleOptions {
  bool preemption = true;
  // Running jobs of another owner are preemptible only when their priority is below this
  // (the admin-set best-effort class, --preemptible-below); a job of the same owner is
  // preemptible by any of that owner's higher-priority jobs.
  int preemptible_below = 0;
};

struct ScheduleResult {
  std::map<std::string, std::vector<SchedPart>> placed;  // job id -> parts, rank order
  std::map<std::string, std::string> waiting;            // job id -> why it waits
  std::vector<std::string> preempt;   // running jobs to stop (checkpoint and requeue)
  std::map<std::string, std::string> preempted_by;  // each of those -> the job it stops for
  std::string reserved_for;           // the job holding the reservation; "" if none
  double reserved_in_seconds = 0;     // when its slots should be free (kUnknownSeconds)
};

ScheduleResult Schedule(std::vector<SchedJob> jobs, std::vector<SchedWorker> workers,
                        const std::vector<SchedRunning>& running = {},
                        const ScheduleOptions& options = {});

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_SCHEDULER_H_
