// The cluster under the coordinator (--cluster slurm; kubernetes is planned): it
// allocates the nodes of each attempt of a job, with its own queue, fair share, limits,
// preemption and backfill deciding when. One interface for every such cluster:
// SlurmCluster (slurm.h) is one, the tests' fakes are others. The coordinator's side of
// the bargain is coordinator/provisioner.h.
#ifndef NIGHTSHIFT_COORDINATOR_CLUSTER_ALLOCATOR_H_
#define NIGHTSHIFT_COORDINATOR_CLUSTER_ALLOCATOR_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace nightshift {

// One attempt of one job, as an allocation of `nodes` nodes, each running `node_command`
// once (the in-allocation worker, which starts that node's ranks).
struct AllocationRequest {
  std::string job_id;  // the coordinator's
  int attempt = 0;
  int priority = 0;
  std::string owner;   // who submitted the job ("" in insecure mode)
  int nodes = 1;
  int gpus_per_node = 0;          // GPUs (Slurm: --gres=gpu:N)
  int cpus_per_node = 0;          // CPUs for the node's worker and ranks; 0: the cluster's default
  double memory_gb_per_node = 0;  // 0: the cluster's default
  int time_limit_minutes = 0;     // 0: the partition's
  std::string exclude_nodes;      // nodes not to use (the cluster's host list), after a node failed
  std::vector<std::string> node_command;
  // The attempt's worker token (allocation_tokens.h), for the nodes' environment as
  // NIGHTSHIFT_ALLOCATION_TOKEN and never their command line; "" in insecure mode.
  std::string token;
};

// An allocation of ours as the cluster lists it.
struct Allocation {
  enum class Phase { kPending, kRunning, kEnded };
  // How an ended allocation ended, for the attempt it served.
  enum class End {
    kDone,       // its steps exited (completed, failed, cancelled): said by the workers, if they ran it
    kPreempted,  // the cluster took it back: preemption
    kTimeLimit,  // its time limit (resources.time_limit_minutes) ended it
    kNodeFail,   // a node failed
    kRefused,    // failed for what a retry meets again (the worker refused its flags): the job's error
  };
  std::string id;      // the cluster's
  std::string job_id;  // the coordinator's, and the attempt it serves
  int attempt = 0;
  Phase phase = Phase::kPending;
  End end = End::kDone;
  std::string state;   // as the cluster names it (PENDING, RUNNING, PREEMPTED, ...)
  std::string reason;  // why it is pending, as the cluster says
  std::string nodes;   // its nodes, in the cluster's notation
  std::string failed_nodes;  // once ended kNodeFail: those of its nodes the cluster has down ("": unknown)
  int exit_code = 0;   // once ended
  std::string user;    // the cluster user it runs as ("": the cluster does not say)
};

class ClusterAllocator {
 public:
  virtual ~ClusterAllocator() = default;
  virtual const char* name() const = 0;  // "slurm"
  // The cluster's id for the new allocation. INVALID_ARGUMENT for a request the cluster
  // can never run (the job's error), UNAVAILABLE for the rest (try again later).
  virtual StatusOr<std::string> Submit(const AllocationRequest& request) = 0;
  // Ends an allocation, pending or running; one the cluster no longer knows is no error.
  virtual Status Cancel(const std::string& id) = 0;
  // Every allocation of ours the cluster still lists (an ended one stays listed a while).
  virtual StatusOr<std::vector<Allocation>> List() = 0;
  // How an allocation that is no longer listed ended, where the cluster keeps records of
  // ended ones (Slurm's accounting: sacct). NOT_FOUND where it keeps none or has none of it.
  virtual StatusOr<Allocation> Lookup(const std::string& id) {
    return Status::NotFound(std::string(name()) + " keeps no record of allocation " + id + " once it ended");
  }
  // Whether an ended allocation stays until Cancel deletes it (a Kubernetes Job, with its
  // Service and Secret), rather than leaving the list by itself (Slurm's MinJobAge).
  virtual bool KeepsEndedAllocations() const { return false; }
  // The cluster user an allocation of a job of `owner` runs as (Submit's), as List names it
  // (Allocation::user): List may show any user's allocations named as ours, and only those
  // that run as this are ours. "": List shows ours alone (Kubernetes: our namespace's).
  virtual std::string RunsAs(const std::string& owner) const { return ""; }
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_CLUSTER_ALLOCATOR_H_
