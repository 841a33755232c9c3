// Where a rank trains, how batches get there, and what its device memory looks like.
// All CUDA-only code of the trainer's placement lives in device.cc behind
// NIGHTSHIFT_WITH_CUDA (defined when the LibTorch found at build time has CUDA); a build
// against a CPU LibTorch always trains on the CPU.
#ifndef NIGHTSHIFT_WORKER_TRAINER_DEVICE_H_
#define NIGHTSHIFT_WORKER_TRAINER_DEVICE_H_

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "worker/trainer/data/batching.h"
#include "worker/trainer/memory/memory_probe.h"

namespace nightshift::trainer {

// Whether this trainer was compiled with CUDA support, and how many devices it sees.
bool BuiltWithCuda();
int VisibleCudaDevices();

// spec.resources.device: "auto" (a GPU when one is visible, else the CPU), "cpu" or
// "cuda". A GPU rank uses cuda:<local_rank mod visible devices>. Returns "" and sets
// *device, or the reason the request cannot be met (naming the field), e.g. "cuda" on a
// machine without a visible GPU or with a CPU-only build.
std::string PickDevice(const std::string& requested, int local_rank, torch::Device* device);

// Moves a collated (host) batch to the device. On the CPU it is the identity. On CUDA it
// pins the batch and copies it with non-blocking copies on a side stream, then waits for
// that copy on the calling thread (a background thread: the data loader), so the
// training stream never waits for a host-to-device copy; the caching allocator is told
// that the training stream uses the tensors.
using BatchStager = std::function<Batch(Batch)>;
BatchStager NewBatchStager(const torch::Device& device);

// The batch on `device` from the calling thread (evaluation): pinned and non-blocking
// on the current stream on CUDA; the identity on the CPU.
Batch ToDevice(Batch batch, const torch::Device& device);

struct DeviceMemory {
  int64_t allocated = 0, reserved = 0, peak = 0;  // bytes of the caching allocator; 0 on the CPU
};
DeviceMemory GetDeviceMemory(const torch::Device& device);

// Peak memory of this rank, for step events: the caching allocator's peak on CUDA,
// the process's peak resident set (VmHWM) on the CPU.
int64_t PeakMemoryBytes(const torch::Device& device);

// For max_tokens: auto. On CUDA: a meter of the caching allocator's peak allocated
// bytes (reset with resetPeakStats), and the device's total memory as the limit
// (`limit_bytes` > 0 overrides it). On the CPU: the host meter and HostMemoryLimit.
std::unique_ptr<MemoryMeter> NewMemoryMeter(const torch::Device& device);
int64_t MemoryLimit(const torch::Device& device, int64_t limit_bytes, int local_ranks);

// The dense peak FLOP/s that MFU divides by. CUDA: the datasheet figure of the device's
// model for `precision` (bf16/fp16: tensor cores; fp32: without TF32, LibTorch's default),
// NaN for a model not in the table. CPU: `measured_cpu_flops` (the GEMM rate the
// trainer measures at start, fp32, whatever the precision).
double PeakFlops(const torch::Device& device, const std::string& precision, double measured_cpu_flops);

// Frees cached blocks so a retry after an out-of-memory error starts clean (CUDA only).
void ReleaseCachedMemory(const torch::Device& device);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_DEVICE_H_
