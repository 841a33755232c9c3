// Coordinator: the cluster's state and every decision on it. The gRPC services only
// translate to and from these calls; the scheduler decides placements; the job store
// persists. All state is guarded by one mutex: the cluster is small (hundreds of
// workers), and one lock makes every transition atomic and easy to reason about.
//
// Durability: a job is in the store (synced write) before Submit returns, and every
// state change is written synced before the lock is released. Progress updates are
// written unsynced: losing the last one in a crash costs nothing that was promised.
#ifndef NIGHTSHIFT_COORDINATOR_COORDINATOR_H_
#define NIGHTSHIFT_COORDINATOR_COORDINATOR_H_

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/job_state.h"
#include "common/job_store.h"
#include "common/status.h"
#include "common/clock.h"
#include "nightshift/v1/admin.pb.h"
#include "nightshift/v1/cluster.pb.h"
#include "nightshift/v1/jobs.pb.h"

namespace nightshift {

struct SchedPart;
struct ScheduleResult;

// Told about events that metrics count (implemented in coordinator/metrics.h).
class CoordinatorObserver {
 public:
  virtual ~CoordinatorObserver() = default;
  virtual void JobScheduled(double queue_wait_seconds) = 0;
  virtual void JobRestarted(const std::string& reason) = 0;  // worker_lost, rank_failed, ...
};

// A snapshot for gauges.
struct CoordinatorStats {
  std::map<std::string, int> jobs_by_state;     // every state, zeros included
  int queue_length = 0;
  double oldest_queued_seconds = 0;
  std::map<std::string, int> workers_by_state;
  int slots_total = 0, slots_used = 0;
};

// Which jobs List returns: one page, in submit order.
struct JobQuery {
  std::set<v1::JobState> states;  // empty: every state
  int limit = 100;                // at most this many jobs; must be at least 1
  uint64_t after_seq = 0;         // only jobs with a larger submit_seq (0: from the first)
};

struct JobPage {
  std::vector<v1::Job> jobs;      // in submit order
  uint64_t next_after_seq = 0;    // after_seq for the next page; 0: none follows
};

// What a worker is told in answer to its heartbeat.
struct HeartbeatReply {
  std::vector<v1::Assignment> start;          // parts to start
  std::vector<v1::TaskId> stop;               // tasks to stop: SIGTERM, checkpoint, exit
  std::vector<v1::TaskId> dump_stacks;        // of `stop`, the hung ones: stacks first, then kill
  std::vector<std::string> evict_cache_keys;  // queued by EvictCache
  bool evict_cache_all = false;
  std::vector<v1::CheckpointCopy> copy_checkpoints;  // see Heartbeat
};

struct CoordinatorOptions {
  std::string data_dir;                 // RocksDB job store lives here; required
  double lease_seconds = 10;            // a worker silent this long is lost...
  // ...unless no worker at all reached the coordinator for half a lease (with two or
  // more registered): that is the coordinator's own outage (its host cut off), not theirs,
  // and nobody is declared lost until every worker has been silent this long; 0: off.
  double outage_grace_seconds = 600;
  int heartbeat_interval_ms = 250;      // told to workers at registration
  double restart_backoff_seconds = 1;   // delay before the first restart; doubles, max 60
  int max_jobs_per_user = 1000;         // unfinished jobs (queued or running) one owner may have
  bool preemption = true;               // higher-priority jobs may preempt lower ones
  double stop_timeout_seconds = 60;     // a PREEMPTED or STUCK job whose workers have not
                                        // reported its ranks gone by then is requeued anyway
  CoordinatorObserver* observer = nullptr;  // not owned; may be null
  Clock* clock = nullptr;                   // not owned; null: Clock::Real()
};

class Coordinator {
 public:
  // Opens the store and loads every job. Jobs that were SCHEDULED or RUNNING keep their
  // placements: their workers have one lease to come back and report them.
  static StatusOr<std::unique_ptr<Coordinator>> Open(const CoordinatorOptions& options);
  // The same over a given store (tests: a store that fails); options.data_dir unused.
  static StatusOr<std::unique_ptr<Coordinator>> Open(const CoordinatorOptions& options,
                                                     std::unique_ptr<JobStore> store);

  // Fail-stop on the store: every change is written synced or not at all. After the
  // first failed write the coordinator accepts nothing more: every call except Stats,
  // ListWorkers and ListCache returns UNAVAILABLE with the store's error (the call whose
  // change failed included, so its caller is never told it happened; workers re-send
  // their results), Tick does nothing, and store_status() says why, so the daemon stops
  // with the reason. A restart rebuilds the state from what is on disk.
  Status store_status() const;

  // JobService.
  // `owner`: the submitting user (empty in insecure mode); RESOURCE_EXHAUSTED when the
  // owner already has max_jobs_per_user unfinished jobs. `request_id` (may be empty):
  // the client's id of this submission (SubmitJobRequest.request_id); when the owner
  // already submitted it, returns that job as it is now and creates none (the same spec,
  // after defaults, else INVALID_ARGUMENT naming request_id).
  StatusOr<v1::Job> Submit(v1::JobSpec spec, const std::string& owner = "", const std::string& request_id = "");
  StatusOr<v1::Job> Get(const std::string& id) const;
  // `owner` non-null: only that user's jobs.
  StatusOr<JobPage> List(const JobQuery& query, const std::string* owner = nullptr) const;
  StatusOr<v1::Job> Cancel(const std::string& id, const std::string& reason);
  // Returns the job once its version is above *version (and sets *version), or
  // DEADLINE_EXCEEDED after `timeout` with no change, or NOT_FOUND.
  StatusOr<v1::Job> WaitForChange(const std::string& id, uint64_t* version,
                                  std::chrono::milliseconds timeout) const;

  // WorkerService.
  // A worker (re)introduces itself: `worker` carries its name, slots, GPUs, log address
  // and the tasks it still runs from before; the rest is the coordinator's. Returns the
  // heartbeat interval to tell it, in milliseconds.
  StatusOr<int> Register(const v1::WorkerInfo& worker);
  // `tasks`: every task the worker holds; `cache`: its feature cache, if it changed
  // (null otherwise); `checkpoints`: the newest checkpoint of each job on its own disk
  // (none with a shared checkpoint root). NOT_FOUND for a worker that is not registered.
  //
  // Checkpoints without shared storage: restarts are placed on the workers that hold the
  // job's newest checkpoint first (SchedJob::holders). A RUNNING job whose ranks all sit
  // on one worker has that worker's newest checkpoint copied to one other ready,
  // uncordoned worker: the one holding the job's newest copy already, else the first by
  // name. That worker is told (copy_checkpoints) in each heartbeat reply until it reports
  // the step. Nothing of it is stored: it is rebuilt from the heartbeats.
  StatusOr<HeartbeatReply> Heartbeat(const std::string& worker, const std::vector<v1::TaskStatus>& tasks,
                                     const v1::CacheReport* cache = nullptr,
                                     const std::vector<v1::HeldCheckpoint>& checkpoints = {});
  // Progress, or the end of a task, between heartbeats.
  Status ReportTask(const std::string& worker, const v1::TaskStatus& status);

  CoordinatorStats Stats() const;
  double lease_seconds() const { return options_.lease_seconds; }

  // The job's metric history (every evaluation, the downsampled training curve), per
  // attempt; empty attempts before the first report.
  StatusOr<v1::JobMetrics> Metrics(const std::string& id) const;

  // Where the model of a job is: step 0, its final export, FAILED_PRECONDITION naming the
  // job's state when it has none; step N, the kept checkpoint at N, which the worker that
  // holds the job's checkpoints (the final model's, else rank 0's of the latest attempt)
  // exports on request; FAILED_PRECONDITION when the job has reported no checkpoint.
  // `worker_address` is the log service address of that worker, or, when it is gone,
  // empty with `worker_error` UNAVAILABLE naming it (a shared checkpoint root may still
  // have the folder). `model.step` is the step asked for (the final model's for 0).
  struct ModelLocation {
    v1::ModelArtifact model;
    std::string worker_address;
    Status worker_error;
  };
  StatusOr<ModelLocation> ModelOf(const std::string& id, int64_t step = 0) const;

  // The log service address of the worker that runs (or last ran) `rank` of a job.
  StatusOr<std::string> LogAddressOf(const std::string& job_id, int rank) const;

  // AdminService.
  std::vector<v1::WorkerInfo> ListWorkers() const;
  // `worker` empty: every worker's.
  std::vector<v1::WorkerCache> ListCache(const std::string& worker) const;
  // Queues an eviction of entry `key` (or, with `all`, of every entry not in use) for the
  // next heartbeats of `worker` (empty: every worker); returns how many workers.
  StatusOr<int> EvictCache(const std::string& worker, const std::string& key, bool all);
  // Cordon (or uncordon) a worker: no new placements there. NOT_FOUND for an unknown name.
  StatusOr<v1::WorkerInfo> Cordon(const std::string& name, bool uncordon);
  // Cordon, and preempt the jobs running there so they checkpoint and move.
  StatusOr<v1::WorkerInfo> Drain(const std::string& name);

  // One pass of the control loop, at clock time Now(): expire worker leases; requeue
  // stopping jobs whose ranks are gone (or late); mark hung jobs STUCK; fail attempts on
  // lost workers; then hand a snapshot to Schedule() and apply its result (preempt,
  // place, say why the others wait). Called periodically by the daemon (and by tests).
  void Tick();

 private:
  struct JobEntry {
    v1::Job job;
    uint64_t version = 1;                // bumped on every change; WatchJob waits on it
    Clock::TimePoint not_before{};       // restart backoff: not placed before this
    int64_t last_step = -1;              // rank 0's step when it last advanced
    Clock::TimePoint last_advance{};     // when it last advanced (or the attempt started)
    bool progress_is_this_attempts = true;  // false from a requeue until the new attempt
                                            // reports: its replay restarts below the old step
    Clock::TimePoint stopping_since{};   // when it became PREEMPTED or STUCK
    v1::JobMetrics history;              // stored apart (JobStore::PutMetrics)
  };
  struct WorkerEntry {
    v1::WorkerInfo info;
    Clock::TimePoint last_seen;
    v1::CacheReport cache;                 // as of the last heartbeat that carried one
    std::vector<std::string> evict_keys;   // queued for the next heartbeat
    bool evict_all = false;
    std::map<std::string, int64_t> held;   // job id -> newest checkpoint on its disk
    double heartbeat_gap_seconds = 0;      // its usual time between heartbeats (moving average)
  };

  Coordinator(const CoordinatorOptions& options, std::unique_ptr<JobStore> store);

  struct Snapshot;  // the scheduler's input (coordinator.cc)

  // All below require mu_ held.
  void SetState(JobEntry* entry, v1::JobState state, const std::string& reason, int64_t step = 0);
  bool TakeResumedStep(const v1::TaskStatus& status, JobEntry* entry);
  void Persist(JobEntry* entry, bool sync);  // on failure sets store_error_
  void PersistHistory(JobEntry* entry);      // unsynced; on failure sets store_error_
  int UsedSlots(const std::string& worker) const;
  // The ready workers whose own disk holds the job's newest checkpoint (none reported: empty).
  std::vector<std::string> NewestHolders(const std::string& job_id) const;
  // The copies `worker` should make (see Heartbeat), added to reply->copy_checkpoints.
  void AddCheckpointCopies(const std::string& worker, Clock::TimePoint now, HeartbeatReply* reply) const;
  // Whether `w` is late: silent for three of its usual heartbeat gaps (two heartbeat
  // intervals at least, half a lease at most). Not lost, but offered no new work.
  bool Late(const WorkerEntry& w, Clock::TimePoint now) const;
  // Whether `name` is gone: LOST, or still unknown one lease after we started (after our
  // own restart, workers get one lease to register again).
  bool WorkerGone(const std::string& name, Clock::TimePoint now) const;

  // Worker reports. A status of a task that is not a part of a job's current attempt, or
  // of a job that is not active, has its task stopped (added to reply->stop).
  void HandleTaskStatus(const std::string& worker, const v1::TaskStatus& status, HeartbeatReply* reply);
  // Takes rank 0's rendezvous address, data-cache use and progress, and any newer
  // checkpoint, from the report on `part`; whether anything changed (not yet written).
  bool TakeReport(const std::string& worker, const v1::TaskStatus& status, const v1::Placement& part,
                  JobEntry* entry);
  // A part's ranks started / succeeded; the job is RUNNING / SUCCEEDED once all parts are.
  // Whether the job was written.
  bool PartStarted(JobEntry* entry, v1::Placement* part);
  bool PartSucceeded(JobEntry* entry, v1::Placement* part, const v1::TaskStatus& status);
  // The job's parts on `worker`, given whether its heartbeat listed the job's current
  // attempt: a stopping job's unlisted parts are gone; an active job's unlisted parts
  // are started (added to reply->start), or fail the attempt if they ran before.
  void Reconcile(const std::string& worker, bool reported, JobEntry* entry, HeartbeatReply* reply);

  // Attempts. `cause` classifies retryable failures for metrics: worker_lost,
  // worker_restarted, rank_failed, stuck.
  void FailAttempt(JobEntry* entry, const std::string& error, bool user_error,
                   const char* cause = "rank_failed");
  // Ends the current attempt (placements released) and queues the next, not to be placed
  // before `delay` from now; it resumes from the job's checkpoint.
  void Requeue(JobEntry* entry, Clock::Duration delay, const std::string& reason);
  // PREEMPTED or STUCK: placements are held and the workers are told to stop the ranks.
  void BeginStopping(JobEntry* entry, v1::JobState state, const std::string& reason);
  // Once every part of a stopping job is gone (or `force`): requeued, as a restart if STUCK.
  void MaybeFinishStopping(JobEntry* entry, bool force = false);

  // The steps of Tick, in order.
  void ExpireLeases(Clock::TimePoint now);                      // silent workers are LOST
  void ReapStopping(JobEntry* entry, Clock::TimePoint now);     // parts on gone workers; stop timeout
  bool DetectHang(JobEntry* entry, Clock::TimePoint now);       // RUNNING -> STUCK; whether it did
  void FailIfWorkerGone(JobEntry* entry, Clock::TimePoint now); // an active part on a gone worker
  Snapshot SnapshotForScheduler(Clock::TimePoint now) const;
  void ApplySchedule(const ScheduleResult& result);             // preempt, place, say why others wait
  void Place(JobEntry* entry, const std::vector<SchedPart>& parts);  // -> SCHEDULED

  // Constant after construction.
  const CoordinatorOptions options_;
  const std::unique_ptr<JobStore> store_;
  Clock* const clock_;  // not owned
  const Clock::TimePoint started_;
  bool in_outage_ = false;  // ExpireLeases: no worker reached us for half a lease

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;       // notified on every job change
  std::map<std::string, JobEntry> jobs_;          // GUARDED_BY(mu_), by id
  std::map<uint64_t, std::string> by_seq_;        // GUARDED_BY(mu_), submit order
  std::map<std::string, WorkerEntry> workers_;    // GUARDED_BY(mu_), by name
  // GUARDED_BY(mu_): (owner, request_id) -> job id, rebuilt from the job records on Open.
  std::map<std::pair<std::string, std::string>, std::string> by_request_;
  uint64_t next_seq_ = 1;                         // GUARDED_BY(mu_)
  Status store_error_;                            // GUARDED_BY(mu_): the first failed write
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_COORDINATOR_H_
