// The GPUs of a worker, found through NVML loaded at run time (dlopen of
// libnvidia-ml.so.1), so the worker needs no CUDA to build or run; without a driver it
// finds none. One rank slot per GPU; each rank sees only its own GPU
// (CUDA_VISIBLE_DEVICES).
#ifndef NIGHTSHIFT_WORKER_GPU_INVENTORY_H_
#define NIGHTSHIFT_WORKER_GPU_INVENTORY_H_

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "nightshift/v1/cluster.pb.h"

namespace nightshift {

// Index, name and memory of every GPU NVML sees; empty without NVML or GPUs.
std::vector<v1::GpuInfo> DiscoverGpus();

struct GpuUsage {
  int index = 0;
  double utilization = 0;     // fraction of time a kernel ran, [0, 1]
  int64_t memory_used = 0;    // bytes
  int64_t memory_total = 0;   // bytes
};
// Current utilisation and memory of every GPU; empty without NVML.
std::vector<GpuUsage> SampleGpus();

// Hands out GPU indices to tasks; thread-safe.
class GpuAllocator {
 public:
  explicit GpuAllocator(const std::vector<v1::GpuInfo>& gpus);
  // n free indices (lowest first), or an empty vector when fewer are free.
  std::vector<int> Take(int n);
  void Release(const std::vector<int>& indices);
  int free_count() const;

 private:
  mutable std::mutex mu_;
  std::set<int> free_;  // GUARDED_BY(mu_)
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_WORKER_GPU_INVENTORY_H_
