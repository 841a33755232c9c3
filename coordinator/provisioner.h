// Provisioner: the coordinator's side of a cluster that allocates (--cluster slurm). Each
// pass lists the cluster's allocations of ours and the coordinator's unfinished jobs, and
// brings them together:
// - a QUEUED job past its restart backoff with no allocation for its current attempt gets
//   one (AllocationRequest: ceil(world_size / ranks_per_node) nodes, the ranks spread
//   evenly, GPUs for a cuda job, the in-allocation worker as each node's command);
// - what the cluster says of an allocation (pending and why, running where) is noted on
//   its job (Coordinator::NoteAllocation), so `job describe` shows it;
// - an allocation that ended before its attempt did ends the attempt
//   (Coordinator::AllocationEnded: preempted or timed out: a new attempt, no restart
//   counted; node failure: a restart, the next allocation excluding those nodes; refused
//   (the worker's bad-spec exit): the job fails; any other end: a restart); one the
//   cluster stopped listing ends as the cluster's records say (ClusterAllocator::Lookup:
//   Slurm's accounting), or, with no record of it, as any other end; while the records
//   are unreachable (Unavailable) or still show it running (accounting lags), it waits
//   for them up to ProvisionerOptions::record_wait_seconds, noted UNLISTED on the job
//   (kAllocationUnlisted: its lost workers fail nothing meanwhile). One pending again while
//   its attempt runs (Kueue suspended it, Slurm requeued it) as preempted;
// - an allocation whose attempt is over (the job finished, was cancelled or moved to a
//   new attempt) is cancelled: at once while pending, after
//   ProvisionerOptions::release_grace_seconds while running (its workers, released, end
//   it themselves first).
// Nothing is submitted while the cluster cannot be listed, and an allocation of the
// current attempt that the cluster lists is adopted, so a coordinator restart between a
// submission and its record submits nothing twice. The workers' side: the scheduler
// places an attempt only on its allocation's workers (scheduler.h), which exit when told
// `release`.
//
// Thread-safety: one thread calls Pass; the Coordinator is thread-safe.
#ifndef NIGHTSHIFT_COORDINATOR_PROVISIONER_H_
#define NIGHTSHIFT_COORDINATOR_PROVISIONER_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "coordinator/allocation_tokens.h"
#include "coordinator/cluster_allocator.h"
#include "coordinator/coordinator.h"

namespace nightshift {

struct ProvisionerOptions {
  int ranks_per_node = 8;  // the cluster's nodes' GPUs (or the ranks a CPU node runs)
  // The in-allocation worker and the operator's flags for it (--data-root, --work-dir,
  // --checkpoint-root, --token-file, ...); the provisioner adds --coordinator,
  // --allocation-job, --allocation-attempt and --cpu-slots.
  std::vector<std::string> worker_command;
  std::string coordinator_address;  // HOST:PORT the workers dial
  // With a token file: each request carries its attempt's token (not owned; null in
  // insecure mode).
  const AllocationTokens* tokens = nullptr;
  // How long an allocation that left the cluster's list may wait for its record to say
  // how it ended, from the first pass that missed it; asked each pass until then, after
  // which it counts as any other end.
  double record_wait_seconds = 300;
  // How long a running allocation whose attempt is over may take to end on its own (its
  // workers exit when told to release) before it is cancelled.
  double release_grace_seconds = 10;
  const Clock* clock = Clock::Real();  // not owned; outlives the provisioner
};

class Provisioner {
 public:
  // Neither is owned; both must outlive this.
  Provisioner(ProvisionerOptions options, Coordinator* coordinator, ClusterAllocator* cluster);

  // One pass; the first error met (the cluster unreachable, the store failed), after
  // doing what could be done.
  Status Pass();

  // The allocation asked for one attempt of a job.
  AllocationRequest RequestFor(const AllocationNeed& need) const;

 private:
  Status Follow(const AllocationNeed& need, const Allocation& a);
  // Whether `a` runs as the user the cluster runs allocations of its job as (`owner`'s; or,
  // null, its job's owner as the coordinator has it: a job is not deleted while the
  // cluster lists an allocation of it, Coordinator::NoteClusterListing): another user's
  // job named like ours is neither followed nor cancelled.
  bool RunsAsSubmitted(const Allocation& a, const std::string* owner) const;
  Status Start(const AllocationNeed& need);

  const ProvisionerOptions options_;
  Coordinator* const coordinator_;   // not owned
  ClusterAllocator* const cluster_;  // not owned
  // The jobs asked for with every node: a request without the nodes that failed under
  // their allocations (job.excluded_nodes) was impossible. Until a node fails again.
  std::set<std::string> every_node_;
  std::set<std::string> cancelled_;  // allocations already cancelled (not cancelled again)
  // Allocations unlisted with no ended record: when a pass first missed each (from the
  // job's ClusterAllocation.unlisted_since after a restart).
  std::map<std::string, Clock::TimePoint> unrecorded_;
  // Running allocations whose attempts are over: when a pass first saw each so.
  std::map<std::string, Clock::TimePoint> over_since_;
  // An allocation of `need` the cluster no longer lists: followed to the end its record
  // says, waited for, or ended as gone.
  Status Unlisted(const AllocationNeed& need);
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_PROVISIONER_H_
