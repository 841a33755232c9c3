// JobTable: the coordinator's job records, in memory and in the JobStore. It numbers and
// indexes jobs (by id, by submit order, by the owner's request id), writes every change
// through to the store, stamps events with the coordinator's clock, and wakes the
// watchers of a job when its record changes.
//
// Lock discipline: not thread-safe, and holds no mutex of its own. Every method requires
// the Coordinator's mutex held; WaitForChange takes that mutex's lock and releases it
// only while it waits. The returned JobEntry pointers stay valid while the lock is held
// and until Remove or RemoveFinishedBefore (finished jobs only) is called.
//
// Bounded: finished jobs (and ended sweeps) are removed (Remove: `job delete`; RemoveFinishedBefore: the
// retention period), with their history and request id, from memory and the store; job
// ids are never handed out again (JobStore::Delete keeps the highest number).
//
// Fail-stop: after the first failed write store_error() says why and nothing more is
// written or notified; callers check it before acting and before answering.
#ifndef NIGHTSHIFT_COORDINATOR_JOB_TABLE_H_
#define NIGHTSHIFT_COORDINATOR_JOB_TABLE_H_

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/job_store.h"
#include "common/status.h"
#include "coordinator/coordinator.h"
#include "nightshift/v1/jobs.pb.h"

namespace nightshift {

inline bool IsActive(v1::JobState s) { return s == v1::SCHEDULED || s == v1::RUNNING; }
// The workers are being told to stop the ranks; the placements still hold their slots.
inline bool IsStopping(v1::JobState s) { return s == v1::PREEMPTED || s == v1::STUCK; }
inline bool HoldsSlots(v1::JobState s) { return IsActive(s) || IsStopping(s); }

// "rank 3" or "ranks 0-3": a placement's ranks in messages.
std::string RankRange(const v1::Placement& p);

// Whether every placement of the job's current attempt has `flag` set (running, finished).
inline bool AllPlacements(const v1::Job& job, bool (v1::Placement::*flag)() const) {
  return std::all_of(job.placements().begin(), job.placements().end(),
                     [flag](const v1::Placement& p) { return (p.*flag)(); });
}

// Ranks of the job's current attempt still on `worker` (placed there and not finished).
int RanksOn(const v1::Job& job, const std::string& worker);

// A job as the coordinator holds it: the stored record and what is rebuilt on Open.
struct JobEntry {
  v1::Job job;
  uint64_t version = 1;                // bumped on every change; WatchJob waits on it
  Clock::TimePoint not_before{};       // restart backoff: not placed before this
  int64_t last_step = -1;              // rank 0's step when it last advanced
  Clock::TimePoint last_advance{};     // when it last advanced (or the attempt started)
  Clock::TimePoint progress_at{};      // when job.progress was taken: its eta counts from then
  bool progress_is_this_attempts = true;  // false from a requeue until the new attempt
                                          // reports: its replay restarts below the old step
  Clock::TimePoint stopping_since{};   // when it became PREEMPTED or STUCK
  v1::JobMetrics history;              // stored apart (JobStore::PutMetrics)
  // Copies of its checkpoint ordered to other workers (Placer::AddCheckpointCopies), by
  // target: step and manifest digest. In memory only: after a restart a copy is ordered
  // again, and the copier answers at once for a step it holds.
  std::map<std::string, std::pair<int64_t, std::string>> copies_ordered;
};

class JobTable {
 public:
  // `clock` is not owned and must outlive the table.
  JobTable(std::unique_ptr<JobStore> store, Clock* clock);

  // Loads every job and its metric history from the store; how many jobs. Loaded jobs
  // count as advancing (and, if stopping, as stopping) from now. Records that do not
  // parse are moved aside by the store and listed in moved_aside(); their job numbers
  // stay taken. A history that does not parse is moved aside too, and starts empty.
  StatusOr<size_t> Load();
  // The store keys of the records Load moved aside ("job/<id>", "metrics/<id>").
  const std::vector<std::string>& moved_aside() const { return moved_aside_; }

  // OK, or the first failed write (UNAVAILABLE, with the store's message).
  const Status& store_error() const { return store_error_; }

  // A request id is short and plain: it appears in logs and error messages.
  static Status CheckRequestId(const std::string& id);
  // A new QUEUED job, written synced before anything else can see it (UNAVAILABLE when
  // that write fails: not accepted, nothing changed). With a `request_id` the owner
  // already submitted, that job as it is now (INVALID_ARGUMENT for another spec).
  // RESOURCE_EXHAUSTED when `owner` has `max_unfinished` unfinished jobs already.
  // `base`: fields the job has from that first write on besides those Submit sets (id,
  // owner, request id, spec, state, times, events: set over it); a sweep's trial carries
  // its sweep_id and rungs so, and no crash leaves it outside its sweep. Empty for a plain
  // job; ignored for a retry, whose job is returned as it is.
  StatusOr<v1::Job> Submit(v1::JobSpec spec, const std::string& owner, const std::string& request_id,
                           int max_unfinished, v1::Job base = v1::Job());

  // Null, or NOT_FOUND, when there is no such job.
  JobEntry* Find(const std::string& id);
  const JobEntry* Find(const std::string& id) const;
  StatusOr<const JobEntry*> Get(const std::string& id) const;
  StatusOr<JobEntry*> Get(const std::string& id);

  // Every job, by id.
  std::map<std::string, JobEntry>& entries() { return jobs_; }
  const std::map<std::string, JobEntry>& entries() const { return jobs_; }

  // One page in submit order (see JobQuery); `owner` non-null: only that user's jobs.
  JobPage List(const JobQuery& query, const std::string* owner) const;

  // Waits, with `lock` (on the Coordinator's mutex) released meanwhile, until the job's
  // version is above *version; see Coordinator::WaitForChange.
  StatusOr<v1::Job> WaitForChange(std::unique_lock<std::mutex>& lock, const std::string& id, uint64_t* version,
                                  std::chrono::milliseconds timeout) const;

  // A state change: the job's state and reason, an event at `step`, written synced. Entering
  // RUNNING restarts hang detection.
  void SetState(JobEntry* entry, v1::JobState state, const std::string& reason, int64_t step = 0);
  // An event in the job's current state and attempt, at the clock's time of day (not written).
  void AddEvent(v1::Job* job, const std::string& reason, int64_t step) const;
  // Writes the record (version and updated time bumped) and wakes its watchers; on failure
  // sets store_error().
  void Persist(JobEntry* entry, bool sync);
  // Writes the metric history, unsynced; on failure sets store_error().
  void PersistHistory(JobEntry* entry);

  // Removes a finished job from memory and the store (synced), with its history and its
  // request id; `entry` is invalid afterwards. On a failed write sets store_error() and
  // keeps the job.
  void Remove(JobEntry* entry);
  // Removes every finished job that finished (its last event) before `cutoff`, a time of
  // day: the retention period; then every ended sweep whose last event is before it. How
  // many of both. A job `keep` holds to (its tracking run not complete, an allocation the
  // cluster still lists) stays; `keep` is asked of jobs past the cutoff only.
  int RemoveFinishedBefore(std::chrono::system_clock::time_point cutoff,
                           const std::function<bool(const v1::Job&)>& keep = nullptr);
  // Whether the tracking server has all of `job` it will get: its run ended, or given up.
  static bool TrackingComplete(const v1::Job& job) {
    return job.tracked_run().ended() || !job.tracked_run().error().empty();
  }

  // Slots on `worker` held by jobs (active or stopping).
  int UsedSlots(const std::string& worker) const;

  // Sweeps (loaded by Load, by id). A new one is numbered s-000001, s-000002, ...
  std::map<std::string, v1::Sweep>& sweeps() { return sweeps_; }
  const std::map<std::string, v1::Sweep>& sweeps() const { return sweeps_; }
  // A new sweep, RUNNING, written (synced) before it is returned; a failed write sets
  // store_error() and adds nothing. With a `request_id` the owner used before (checked
  // by CheckRequestId), the sweep that made (same spec) or INVALID_ARGUMENT (another),
  // as Submit does for jobs.
  StatusOr<v1::Sweep> SubmitSweep(v1::SweepSpec spec, const std::string& owner, const std::string& request_id);
  // Writes the sweep (updated time stamped, and every event without a time), synced; on
  // failure sets store_error().
  void PersistSweep(v1::Sweep* sweep);
  // An event on the sweep at the clock's time of day (not written).
  void AddSweepEvent(v1::Sweep* sweep, const std::string& text) const;

 private:
  void CheckWrite(const Status& write);  // a failed write sets store_error_
  Status LoadHistory(JobEntry* entry);   // from the store; one that does not parse starts empty

  const std::unique_ptr<JobStore> store_;
  Clock* const clock_;  // not owned

  mutable std::condition_variable changed_;  // notified on every job change
  std::map<std::string, JobEntry> jobs_;     // by id
  std::map<uint64_t, std::string> by_seq_;   // submit order
  // (owner, request_id) -> job id, rebuilt from the job records on Load.
  std::map<std::pair<std::string, std::string>, std::string> by_request_;
  uint64_t next_seq_ = 1;
  std::vector<std::string> moved_aside_;  // by Load
  std::map<std::string, v1::Sweep> sweeps_;  // by id
  // (owner, request_id) -> sweep id, as by_request_ for jobs.
  std::map<std::pair<std::string, std::string>, std::string> sweep_by_request_;
  uint64_t next_sweep_seq_ = 1;
  Status store_error_;  // the first failed write
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_JOB_TABLE_H_
