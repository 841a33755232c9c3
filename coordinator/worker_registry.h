// WorkerRegistry: the workers the coordinator knows, by name, and what their heartbeats
// last said: slots and GPUs, leases (READY until silent for a lease, then LOST), lateness,
// cordons, the feature cache, the checkpoints on their own disks, and the cache
// evictions queued for them. It knows nothing of jobs: the slots a worker has in use are
// the JobTable's to count.
//
// Lock discipline: not thread-safe, and holds no mutex of its own. Every method requires
// the Coordinator's mutex held. Pointers it returns stay valid while the lock is held
// (workers are removed only by Remove and ExpireLeases).
#ifndef NIGHTSHIFT_COORDINATOR_WORKER_REGISTRY_H_
#define NIGHTSHIFT_COORDINATOR_WORKER_REGISTRY_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "coordinator/coordinator.h"
#include "nightshift/v1/admin.pb.h"
#include "nightshift/v1/cluster.pb.h"

namespace nightshift {

struct WorkerEntry {
  v1::WorkerInfo info;
  Clock::TimePoint last_seen;
  v1::CacheReport cache;                 // as of the last heartbeat that carried one
  std::vector<std::string> evict_keys;   // queued for the next heartbeat
  bool evict_all = false;
  std::map<std::string, int64_t> held;   // job id -> newest checkpoint on its disk
  std::map<std::string, std::string> held_manifest;  // job id -> that checkpoint's manifest SHA-256
  double heartbeat_gap_seconds = 0;      // its usual time between heartbeats (moving average)
  std::string peer_host;                 // the address it registered from ("" in tests)
  std::string file_key;                  // what its WorkerFileService accepts (never listed)
};


class WorkerRegistry {
 public:
  // Uses options.lease_seconds, outage_grace_seconds and heartbeat_interval_ms. `clock` is
  // not owned and must outlive the registry.
  WorkerRegistry(const CoordinatorOptions& options, Clock* clock);

  // What a worker says about itself on registration, checked (INVALID_ARGUMENT), sizes
  // against coordinator/limits.h.
  static Status CheckRegistration(const v1::WorkerInfo& worker);
  // A worker (re)introduces itself: READY, with a fresh lease and `file_key`. Cordons, the
  // cache report and queued evictions of a known name are kept. Refused:
  //   PERMISSION_DENIED  a worker token's log address not on the host it calls from;
  //   FAILED_PRECONDITION the name is READY, registered from another host: its lease must
  //                      end first, or an admin Remove it (a stolen name cannot take over
  //                      a live worker's jobs, logs and checkpoints).
  Status Register(const v1::WorkerInfo& worker, const RegistrationSource& from, const std::string& file_key);
  // Forgets a worker now (NOT_FOUND if unknown): its tasks count as lost, as when its
  // lease ends, and the name may register again from anywhere.
  Status Remove(const std::string& name);
  // A heartbeat from `name` at clock time `now` (NOT_FOUND unless it is READY): renews its
  // lease, records the tasks it listed, its cache report (if it sent one) and the
  // checkpoints it holds, and hands the evictions queued for it to `reply`.
  Status Heartbeat(const std::string& name, Clock::TimePoint now, const std::vector<v1::TaskStatus>& tasks,
                   const v1::CacheReport* cache, const std::vector<v1::HeldCheckpoint>& checkpoints,
                   HeartbeatReply* reply);

  // Every worker, by name.
  const std::map<std::string, WorkerEntry>& entries() const { return workers_; }
  // Null when unknown.
  const WorkerEntry* Find(const std::string& name) const;

  // Whether `w` is late: silent for three of its usual heartbeat gaps (two heartbeat
  // intervals at least, half a lease at most). Not lost, but offered no new work.
  bool Late(const WorkerEntry& w, Clock::TimePoint now) const;
  // Whether `name` is gone: LOST, or still unknown one lease after we began serving (the
  // first registration or ExpireLeases, a tick: after our own restart, workers get one
  // lease to register again, counted from then, not from our start: a large store may
  // load for longer than a lease). Not before either.
  bool Gone(const std::string& name, Clock::TimePoint now) const;

  // Forgets workers LOST for options.forget_workers_after_seconds. Marks READY workers
  // silent for a lease LOST, unless no worker at all reached us for
  // half a lease (two or more registered): that is our own outage, and nobody is declared
  // lost until every worker has been silent for outage_grace_seconds. Returns true when
  // such an outage ended in this pass: every worker then has a full lease again, and the
  // caller restarts hang detection (progress could not reach us).
  bool ExpireLeases(Clock::TimePoint now);
  // Whether the last ExpireLeases found us in our own outage.
  bool in_outage() const { return in_outage_; }

  // No new placements on a cordoned worker; uncordoning also ends a drain. NOT_FOUND for
  // an unknown name. Return the worker as it is now (used_slots unset).
  StatusOr<v1::WorkerInfo> Cordon(const std::string& name, bool uncordon);
  StatusOr<v1::WorkerInfo> MarkDraining(const std::string& name);  // cordoned and draining
  // Queues an eviction of `key` (or, with `all`, of every entry not in use) for the next
  // heartbeat of `worker` (empty: of every worker); how many workers. NOT_FOUND for an
  // unknown name.
  StatusOr<int> QueueEviction(const std::string& worker, const std::string& key, bool all);
  // The cache reports of `worker` (empty: of every worker).
  std::vector<v1::WorkerCache> ListCache(const std::string& worker) const;

 private:
  StatusOr<WorkerEntry*> Known(const std::string& name);  // NOT_FOUND naming the list command

  // Constant after construction.
  const CoordinatorOptions options_;
  Clock* const clock_;  // not owned

  std::optional<Clock::TimePoint> serving_since_;  // see Gone

  std::map<std::string, WorkerEntry> workers_;  // by name
  bool in_outage_ = false;  // ExpireLeases: no worker reached us for half a lease
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_WORKER_REGISTRY_H_
