// Coordinator: the cluster's state and every decision on it. The gRPC services only
// translate to and from these calls; the scheduler decides placements; the job store
// persists. All state is guarded by one mutex: the cluster is small (hundreds of
// workers), and one lock makes every transition atomic and easy to reason about.
//
// A façade over its parts, which hold the state and make the transitions, under its lock:
// JobTable (job_table.h: records, persistence, events, watchers), WorkerRegistry
// (worker_registry.h: registration, leases, lateness, cordons), Attempts (attempts.h: the
// lifecycle of an attempt), TaskReports (task_reports.h: what workers report), and Placer
// (placer.h: the scheduler's snapshot and result, checkpoint copies).
//
// Durability: a job is in the store (synced write) before Submit returns, and every
// state change is written synced before the lock is released. Progress updates are
// written unsynced: losing the last one in a crash costs nothing that was promised.
#ifndef NIGHTSHIFT_COORDINATOR_COORDINATOR_H_
#define NIGHTSHIFT_COORDINATOR_COORDINATOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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

class Attempts;
class JobTable;
class Placer;
class TaskReports;
class WorkerRegistry;

// Told about events that metrics count (implemented in coordinator/metrics.h).
class CoordinatorObserver {
 public:
  virtual ~CoordinatorObserver() = default;
  virtual void JobScheduled(double queue_wait_seconds) = 0;
  virtual void JobRestarted(const std::string& reason) = 0;  // worker_lost, rank_failed, ...
  // A stored record did not parse at start and was moved aside (common/job_store.h);
  // `key`: its store key ("job/<id>", "metrics/<id>").
  virtual void RecordMovedAside(const std::string& key) = 0;
  // A worker claimed `n` checkpoints that no record vouches for (Placer::JudgeClaims).
  virtual void CheckpointClaimsIgnored(int n) = 0;
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
  bool release = false;  // to a worker of an allocation whose attempt is over: exit
  std::vector<v1::TaskJudged> judged;  // see HeartbeatResponse.judged
};

// What an unfinished job needs from the cluster under the coordinator (--cluster slurm):
// an allocation for its current attempt. See Coordinator::AllocationNeeds.
struct AllocationNeed {
  std::string job_id;
  int attempt = 0;
  v1::JobState state = v1::QUEUED;
  bool may_start = false;            // QUEUED and past its restart backoff
  v1::JobSpec spec;
  std::string owner;
  v1::ClusterAllocation allocation;  // as last noted (job.allocation)
  std::string excluded_nodes;        // job.excluded_nodes: nodes its allocations avoid
};

// How an allocation ended, as far as the attempt it served is concerned.
enum class AllocationEnd {
  kPreempted,  // the cluster took it back (preemption): a new attempt, no restart counted
  // Its time limit ended it: a new attempt, no restart counted when the attempt committed
  // a checkpoint past the one it resumed from; one that did not (a slice shorter than
  // set-up and a step) counts a restart, so such slices end in FAILED, not for ever.
  kTimeLimit,
  kNodeFail,   // a node failed: a restart (counted), away from that node
  kOther,      // ended before the attempt did (its workers exited or never came): a restart (counted)
};

// ClusterAllocation.state of an allocation the cluster no longer lists and whose end its
// records do not show yet: the provisioner waits for them (a bounded time) to end the
// attempt as they say. Meanwhile the attempt's lost workers (the cluster killed them)
// fail nothing by themselves, so a preemption the records are late to show (or that
// happened while the coordinator was down) is not counted as a restart.
inline constexpr char kAllocationUnlisted[] = "UNLISTED";

// Who registers a worker, as the service saw the call.
struct RegistrationSource {
  std::string peer_host;  // IP the call came from ("" when unknown: no address rules)
  // An admin's (or insecure mode's) call: may set any log address. A worker token's call
  // must come from the host of the log address it registers.
  bool admin = true;
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
  // --cluster slurm: the cluster allocates every attempt; its ranks run only on the
  // workers started in that allocation (WorkerInfo.allocation), which are told to exit
  // once the attempt is over. false (--cluster agents): our own workers, our scheduler.
  bool cluster_allocates = false;
  double forget_workers_after_seconds = 86400;  // a worker LOST this long is forgotten
  // The highest spec.priority a user (role user) may submit; admins may go above it.
  // Priorities are ordered within [-1000000, 1000000] (common/spec_rules/spec_rules.h).
  int max_user_priority = 100;
  // Another owner's running job is preemptible only below this priority (the best-effort
  // class); a user's priority preempts that user's own lower-priority jobs only. Default
  // 0: jobs with a negative priority are best-effort, preemptible by anyone's.
  int preemptible_below = 0;
  double stop_timeout_seconds = 60;     // a PREEMPTED or STUCK job whose workers have not
                                        // reported its ranks gone by then is requeued anyway
  // Finished jobs (SUCCEEDED, FAILED, CANCELLED) are removed, with their history, this
  // many days after they finished (their last event, on the clock's time of day, which
  // survives restarts); 0: kept until `job delete`.
  double retain_finished_days = 30;
  // --mlflow-uri: a finished job is removed (retention, `job delete`) only once its run on
  // the tracking server is complete (job.tracked_run ended, or given up), so no run is
  // left RUNNING there for a job nobody can report any more.
  bool tracking = false;
  // Called when a report (ReportTask, Heartbeat) brought an ASHA sweep's trial new evaluations:
  // the sweep runner's cue to judge them now rather than at its next poll. Called under
  // the coordinator's lock: it must not call the coordinator. May be empty.
  std::function<void()> on_trial_evaluation;
  CoordinatorObserver* observer = nullptr;  // not owned; may be null
  Clock* clock = nullptr;                   // not owned; null: Clock::Real()
};

// Options give times in seconds, as doubles; the clock's intervals are Clock::Durations.
inline Clock::Duration Seconds(double seconds) {
  return std::chrono::duration_cast<Clock::Duration>(std::chrono::duration<double>(seconds));
}

class Coordinator {
 public:
  // Opens the store and loads every job. Jobs that were SCHEDULED or RUNNING keep their
  // placements: their workers have one lease to come back and report them. A record that
  // does not parse does not stop it: it is moved aside, logged and told to the observer.
  static StatusOr<std::unique_ptr<Coordinator>> Open(const CoordinatorOptions& options);
  // The same over a given store (tests: a store that fails); options.data_dir unused.
  static StatusOr<std::unique_ptr<Coordinator>> Open(const CoordinatorOptions& options,
                                                     std::unique_ptr<JobStore> store);
  ~Coordinator();

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
  // `reason`: at most limits::kCancelReasonBytes (INVALID_ARGUMENT naming reason).
  StatusOr<v1::Job> Cancel(const std::string& id, const std::string& reason);
  // Removes a finished job (record, history, request id) at once: owner or admin, checked
  // by the caller. FAILED_PRECONDITION naming the state for a job that has not finished.
  Status Delete(const std::string& id);
  // Returns the job once its version is above *version (and sets *version), or
  // DEADLINE_EXCEEDED after `timeout` with no change, or NOT_FOUND.
  StatusOr<v1::Job> WaitForChange(const std::string& id, uint64_t* version,
                                  std::chrono::milliseconds timeout) const;

  // WorkerService.
  // A worker (re)introduces itself: `worker` carries its name, slots, GPUs, log address
  // and the tasks it still runs from before; the rest is the coordinator's. Returns the
  // heartbeat interval to tell it, in milliseconds, and the fresh secret its file service
  // is to accept. `from`: who calls (WorkerRegistry::Register says what is refused).
  struct Registered {
    int heartbeat_interval_ms = 0;
    std::string file_service_key;
  };
  StatusOr<Registered> Register(const v1::WorkerInfo& worker, const RegistrationSource& from = {});
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
  //
  // Every string and list a worker sends is checked against coordinator/limits.h
  // (INVALID_ARGUMENT naming the field; a long task error is truncated instead).
  StatusOr<HeartbeatReply> Heartbeat(const std::string& worker, std::vector<v1::TaskStatus> tasks,
                                     const v1::CacheReport* cache = nullptr,
                                     const std::vector<v1::HeldCheckpoint>& checkpoints = {});
  // Progress, or the end of a task, between heartbeats (limited as Heartbeat's tasks are).
  Status ReportTask(const std::string& worker, v1::TaskStatus status);

  CoordinatorStats Stats() const;
  double lease_seconds() const { return options_.lease_seconds; }
  int max_user_priority() const { return options_.max_user_priority; }

  // The job's metric history (every evaluation, the downsampled training curve), per
  // attempt; empty attempts before the first report.
  StatusOr<v1::JobMetrics> Metrics(const std::string& id) const;
  // How far reporting the job to the tracking server got (coordinator/tracking.h): kept in
  // job.tracked_run, written unsynced (a point sent again after a crash adds nothing
  // there). NOT_FOUND for a job deleted meanwhile.
  Status NoteTracked(const std::string& id, const v1::TrackedRun& run);

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
    std::string worker_key;  // its file_service_key
    Status worker_error;
  };
  StatusOr<ModelLocation> ModelOf(const std::string& id, int64_t step = 0) const;

  // The file service of the worker that runs (or last ran) `rank` of a job.
  struct FileService {
    std::string address;
    std::string key;  // its file_service_key: `authorization: Bearer <key>`
  };
  StatusOr<FileService> LogAddressOf(const std::string& job_id, int rank) const;

  // Sweeps (issue 45; coordinator/sweeps.h decides their trials). `spec` as LoadSweepSpec
  // checked it; the record is written synced before this returns.
  // request_id as for Submit: a retry gets the sweep the first call made.
  StatusOr<v1::Sweep> SubmitSweep(v1::SweepSpec spec, const std::string& owner, const std::string& request_id = "");
  StatusOr<v1::Sweep> GetSweep(const std::string& id) const;
  // `owner` non-null: only that user's; in submit order, those submitted after `after_seq`,
  // at most `limit`.
  std::vector<v1::Sweep> ListSweeps(const std::string* owner = nullptr, uint64_t after_seq = 0,
                                    size_t limit = SIZE_MAX) const;
  // The RUNNING sweeps (the runner's pass: ended ones are not copied).
  std::vector<v1::Sweep> RunningSweeps() const;
  // CANCELLED, and every unfinished trial job cancelled with it.
  StatusOr<v1::Sweep> CancelSweep(const std::string& id);
  // The sweep runner's write: trials, events, best trial, state and reason. A sweep that
  // ended meanwhile (cancelled) keeps its record; trials made since are added cancelled.
  Status UpdateSweep(const v1::Sweep& sweep);
  // A trial: Submit with the sweep's id on the job, and its rungs, from the one synced write
  // that accepts it (request_id makes it idempotent);
  // FAILED_PRECONDITION once the sweep is not RUNNING (CancelSweep cancels every
  // unfinished job with its id, so none runs on after it).
  // `await`: its ASHA rungs, by steps (Job.await_steps) or, with `by_epochs`, by epochs.
  StatusOr<v1::Job> SubmitTrial(v1::JobSpec spec, const std::string& owner, const std::string& request_id,
                                const std::string& sweep_id, const std::vector<int64_t>& await = {},
                                bool by_epochs = false);
  // The sweep judged the trial's evaluations up to `step` and the trial goes on
  // (Job.judged_step; never lowered). Its waiting ranks hear it in their next heartbeat.
  Status Judged(const std::string& id, int64_t step);
  // Holds a job: not placed while held (job.held_by says why); an active one is stopped
  // first (as preempted: its ranks checkpoint, no restart counted); under --cluster
  // slurm|kubernetes a queued one with an allocation for its attempt moves to a new attempt,
  // so that allocation is cancelled rather than left idle. Release lets it be
  // placed again: it resumes from its checkpoint. Both do nothing to a finished job, or
  // to one already so.
  Status Hold(const std::string& id, const std::string& why);
  Status Release(const std::string& id);

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
  // Forget a worker now (NOT_FOUND if unknown): its running jobs restart elsewhere, and
  // the name may register again from any host (a worker token still binds it).
  Status RemoveWorker(const std::string& name);

  // The cluster under the coordinator (coordinator/provisioner.h calls these; --cluster
  // slurm). Every unfinished job, its current attempt and its allocation as last noted.
  std::vector<AllocationNeed> AllocationNeeds() const;
  // What the cluster says of the allocation of `allocation.attempt()` of a job: recorded
  // in job.allocation (an event when its id or state changes; its pending reason becomes
  // the job's reason at the next scheduling pass). Ignored for a finished job or another
  // attempt than the current one.
  Status NoteAllocation(const std::string& job_id, const v1::ClusterAllocation& allocation);
  // The allocation of the job's current attempt ended before the attempt did: the attempt
  // ends as `how` says (`detail` in the reason). Ignored for a finished job or another
  // attempt than the current one.
  Status AllocationEnded(const std::string& job_id, const v1::ClusterAllocation& allocation, AllocationEnd how,
                         const std::string& detail);
  // The cluster refuses the current attempt's allocation as one it can never run (more
  // nodes than it has, an unknown partition): the job fails with `error`, not retried.
  Status AllocationRefused(const std::string& job_id, int attempt, const std::string& error);
  // The jobs the cluster lists an allocation of (pending, running, or an ended one it
  // keeps until we remove it), and those a pass may submit one for: a finished job among
  // them is neither deleted nor removed at its retention's end, as its record holds the
  // owner its allocation was submitted as (the provisioner cancels it as that user's).
  // Until a first pass has told, every job is taken as listed (after a restart).
  void NoteClusterListing(std::set<std::string> job_ids);

  // One pass of the control loop, at clock time Now(): remove finished jobs past their
  // retention; expire worker leases; requeue
  // stopping jobs whose ranks are gone (or late); mark hung jobs STUCK; fail attempts on
  // lost workers; then hand a snapshot to Schedule() and apply its result (preempt,
  // place, say why the others wait). Called periodically by the daemon (and by tests).
  void Tick();

 private:
  Coordinator(const CoordinatorOptions& options, std::unique_ptr<JobStore> store);

  // Constant after construction.
  const CoordinatorOptions options_;
  Clock* const clock_;  // not owned

  // The parts (coordinator/*.h), each not thread-safe: every call into them, and every
  // access to what they return, is made with mu_ held, so that each transition (a
  // heartbeat, a report, a Tick) is atomic across all of them. The pointers are constant
  // after construction and never null; what they point to is guarded.
  mutable std::mutex mu_;
  // NoteClusterListing's jobs; none yet: every job (cluster_allocates only). GUARDED_BY(mu_)
  std::optional<std::set<std::string>> cluster_listed_;
  bool unread_queue_warned_ = false;  // a retention deferred for an unread queue, said once. GUARDED_BY(mu_)
  // Whether the cluster may still list an allocation of job `id` (see NoteClusterListing).
  bool ClusterMayList(const std::string& id) const;
  const std::unique_ptr<JobTable> jobs_;            // PT_GUARDED_BY(mu_)
  const std::unique_ptr<WorkerRegistry> workers_;   // PT_GUARDED_BY(mu_)
  const std::unique_ptr<Attempts> attempts_;        // PT_GUARDED_BY(mu_)
  const std::unique_ptr<TaskReports> reports_;      // PT_GUARDED_BY(mu_)
  const std::unique_ptr<Placer> placer_;            // PT_GUARDED_BY(mu_)
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_COORDINATOR_H_
