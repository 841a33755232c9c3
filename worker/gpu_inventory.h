// The GPUs of a worker, found through NVML loaded at run time (dlopen of
// libnvidia-ml.so.1), so the worker needs no CUDA to build or run; without a driver it
// finds none. One rank slot per GPU; each rank sees only its own GPU
// (CUDA_VISIBLE_DEVICES).
#ifndef NIGHTSHIFT_WORKER_GPU_INVENTORY_H_
#define NIGHTSHIFT_WORKER_GPU_INVENTORY_H_

#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "nightshift/v1/cluster.pb.h"

namespace nightshift {

// The NVML calls the inventory makes (the real ones come from libnvidia-ml.so.1; tests
// pass fakes). Each returns NVML's status: 0 is success.
struct NvmlMemory {
  unsigned long long total = 0, free = 0, used = 0;  // bytes (nvmlMemory_t's layout)
};
struct NvmlUtilization {
  unsigned int gpu = 0, memory = 0;  // percent of time (nvmlUtilization_t's layout)
};
struct NvmlApi {
  std::function<int(unsigned int* count)> count;
  std::function<int(unsigned int index, void** device)> handle;
  std::function<int(void* device, char* name, unsigned int length)> name;
  std::function<int(void* device, NvmlMemory* memory)> memory;
  std::function<int(void* device, NvmlUtilization* utilization)> utilization;
};

struct GpuUsage {
  int index = 0;
  double utilization = 0;     // fraction of time a kernel ran, [0, 1]
  int64_t memory_used = 0;    // bytes
  int64_t memory_total = 0;   // bytes
};

// Index, name and memory of every GPU that `nvml` answers for (a device whose handle
// fails is left out); empty when the count fails.
std::vector<v1::GpuInfo> DiscoverGpus(const NvmlApi& nvml);
// Current utilisation and memory of the same GPUs.
std::vector<GpuUsage> SampleGpus(const NvmlApi& nvml);

// The same through the machine's NVML; empty without a driver or GPUs.
std::vector<v1::GpuInfo> DiscoverGpus();

// The GPUs of `all` that CUDA_VISIBLE_DEVICES (`visible`; null: unset, all of them)
// names by index, as Slurm's gres plugin sets it for an allocation; NVML's indices are
// the PCI order, which ranks are given (CUDA_DEVICE_ORDER=PCI_BUS_ID). An empty value
// hides every GPU, as it does from CUDA. INVALID_ARGUMENT naming the variable for an entry
// that is not an index of `all` (UUIDs are not read).
StatusOr<std::vector<v1::GpuInfo>> VisibleGpus(const std::vector<v1::GpuInfo>& all, const char* visible);
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
