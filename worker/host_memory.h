// The memory a worker's ranks may use together, which it tells the coordinator
// (RegisterRequest.memory_bytes) for the scheduler's check of resources.memory_gb per
// slot (scheduler.h).
#ifndef NIGHTSHIFT_WORKER_HOST_MEMORY_H_
#define NIGHTSHIFT_WORKER_HOST_MEMORY_H_

#include <cstdint>
#include <string>

namespace nightshift {

// The host's MemTotal, or the lowest cgroup limit on the way from this process's cgroup up
// to the root where that is lower (v2's `memory.max`, v1's memory controller's
// `memory.limit_in_bytes`: a worker in a container, or in a Slurm or Kubernetes
// allocation, sees its own limit); 0 when none can be read.
// `proc` and `cgroup_root` are where /proc and /sys/fs/cgroup are (tests pass folders).
int64_t HostMemoryBytes(const std::string& proc = "/proc", const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_HOST_MEMORY_H_
