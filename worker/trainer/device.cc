#include "worker/trainer/device.h"

#ifdef NIGHTSHIFT_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace nightshift::trainer {

torch::Device PickDevice(int local_rank) {
#ifdef NIGHTSHIFT_WITH_CUDA
  if (torch::cuda::is_available()) {
    const int count = static_cast<int>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
  }
#endif
  (void)local_rank;
  return torch::Device(torch::kCPU);
}

Batch ToDevice(Batch batch, const torch::Device& device) {
  if (device.is_cpu()) return batch;
  // Pinned host memory lets the copy run asynchronously on the current stream.
  batch.tokens = batch.tokens.pin_memory().to(device, /*non_blocking=*/true);
  batch.pad_mask = batch.pad_mask.pin_memory().to(device, /*non_blocking=*/true);
  batch.labels = batch.labels.pin_memory().to(device, /*non_blocking=*/true);
  return batch;
}

DeviceMemory GetDeviceMemory(const torch::Device& device) {
  DeviceMemory m;
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    m.allocated = stats.allocated_bytes[0].current;
    m.reserved = stats.reserved_bytes[0].current;
    m.peak = stats.allocated_bytes[0].peak;
  }
#endif
  (void)device;
  return m;
}

void ReleaseCachedMemory(const torch::Device& device) {
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  (void)device;
}

}  // namespace nightshift::trainer
