#include "worker/trainer/device.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

#ifdef NIGHTSHIFT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace nightshift::trainer {
namespace {

#ifdef NIGHTSHIFT_WITH_CUDA
// The caching allocator's peak of allocated bytes on one device.
class CudaMemoryMeter : public MemoryMeter {
 public:
  explicit CudaMemoryMeter(c10::DeviceIndex index) : index_(index) {}
  void ResetPeak() override {
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(index_);
  }
  int64_t PeakBytes() override {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(index_).allocated_bytes[0].peak;
  }

 private:
  const c10::DeviceIndex index_;
};

Batch CopyToCuda(Batch batch, const torch::Device& device) {
  batch.tokens = batch.tokens.pin_memory().to(device, /*non_blocking=*/true);
  batch.pad_mask = batch.pad_mask.pin_memory().to(device, /*non_blocking=*/true);
  batch.labels = batch.labels.pin_memory().to(device, /*non_blocking=*/true);
  for (torch::Tensor* t : {&batch.target_mask, &batch.segments, &batch.positions})
    if (t->defined()) *t = t->pin_memory().to(device, /*non_blocking=*/true);
  return batch;
}
#endif

}  // namespace

bool BuiltWithCuda() {
#ifdef NIGHTSHIFT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int VisibleCudaDevices() {
#ifdef NIGHTSHIFT_WITH_CUDA
  if (torch::cuda::is_available()) return static_cast<int>(torch::cuda::device_count());
#endif
  return 0;
}

std::string PickDevice(const std::string& requested, int local_rank, torch::Device* device) {
  const std::string r = requested.empty() ? "auto" : requested;
  if (r != "auto" && r != "cpu" && r != "cuda")
    return "spec.resources.device must be auto, cpu or cuda, got \"" + r + "\"";
  const int gpus = r == "cpu" ? 0 : VisibleCudaDevices();
  if (r == "cuda" && gpus == 0) {
    if (!BuiltWithCuda())
      return "spec.resources.device is cuda but this nightshift-trainer was built against a CPU-only "
             "LibTorch; rebuild it against a CUDA LibTorch or use device auto or cpu";
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return std::string("spec.resources.device is cuda but this machine shows the trainer no GPU (") +
           (visible != nullptr ? "CUDA_VISIBLE_DEVICES=\"" + std::string(visible) + "\"" : "no driver or no device") +
           "); run it on a GPU worker or use device auto or cpu";
  }
  *device = gpus > 0 ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus))
                     : torch::Device(torch::kCPU);
  return "";
}

BatchStager NewBatchStager(const torch::Device& device) {
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) {
    // One side stream for this loader; copies on it overlap the training stream's work.
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
    return [device, side](Batch batch) {
      c10::cuda::CUDAStreamGuard guard(side);
      batch = CopyToCuda(std::move(batch), device);
      side.synchronize();  // this (loader) thread waits, not the training stream
      // Blocks allocated on the side stream are used by the training (default) stream:
      // the allocator must not hand them out again before that stream is done with them.
      const c10::Stream training = c10::cuda::getDefaultCUDAStream(device.index());
      batch.tokens.record_stream(training);
      batch.pad_mask.record_stream(training);
      batch.labels.record_stream(training);
      for (torch::Tensor* t : {&batch.target_mask, &batch.segments, &batch.positions})
        if (t->defined()) t->record_stream(training);
      return batch;
    };
  }
#endif
  (void)device;
  return [](Batch batch) { return batch; };
}

Batch ToDevice(Batch batch, const torch::Device& device) {
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) return CopyToCuda(std::move(batch), device);
#endif
  (void)device;
  return batch;
}

DeviceMemory GetDeviceMemory(const torch::Device& device) {
  DeviceMemory m;
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    m.allocated = stats.allocated_bytes[0].current;  // [0]: all pools together
    m.reserved = stats.reserved_bytes[0].current;
    m.peak = stats.allocated_bytes[0].peak;
  }
#endif
  (void)device;
  return m;
}

int64_t PeakMemoryBytes(const torch::Device& device) {
  if (device.is_cpu()) return std::max<int64_t>(0, ProcBytes("/proc/self/status", "VmHWM:"));
  return GetDeviceMemory(device).peak;
}

std::unique_ptr<MemoryMeter> NewMemoryMeter(const torch::Device& device) {
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) return std::make_unique<CudaMemoryMeter>(device.index());
#endif
  (void)device;
  return NewHostMemoryMeter();
}

int64_t MemoryLimit(const torch::Device& device, int64_t limit_bytes, int local_ranks) {
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) {
    if (limit_bytes > 0) return limit_bytes;
    return static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
  }
#endif
  (void)device;
  return HostMemoryLimit(limit_bytes, local_ranks);
}

double PeakFlops(const torch::Device& device, const std::string& precision, double measured_cpu_flops) {
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) {
    // Dense (no sparsity) datasheet peaks, SXM parts: {name fragment, 16-bit, fp32}.
    struct Peak { const char* name; double half, single; };
    static constexpr Peak kPeaks[] = {
        {"H200", 989.4e12, 66.9e12}, {"H100", 989.4e12, 66.9e12}, {"A100", 312e12, 19.5e12},
        {"L40S", 362e12, 91.6e12},   {"L4", 121e12, 30.3e12},     {"A10", 125e12, 31.2e12}};
    const std::string name = at::cuda::getDeviceProperties(device.index())->name;
    for (const Peak& p : kPeaks)
      if (name.find(p.name) != std::string::npos) return precision == "fp32" ? p.single : p.half;
    return std::numeric_limits<double>::quiet_NaN();
  }
#endif
  (void)device;
  (void)precision;
  return measured_cpu_flops;
}

void ReleaseCachedMemory(const torch::Device& device) {
#ifdef NIGHTSHIFT_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  (void)device;
}

}  // namespace nightshift::trainer
