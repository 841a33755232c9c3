// Where a rank trains, and what its device memory looks like. All CUDA-only code of the
// trainer's placement lives in device.cc behind NIGHTSHIFT_WITH_CUDA; a CPU build (the
// default, Debian's LibTorch) always trains on the CPU.
#ifndef NIGHTSHIFT_WORKER_TRAINER_DEVICE_H_
#define NIGHTSHIFT_WORKER_TRAINER_DEVICE_H_

#include <torch/torch.h>

#include "worker/trainer/batching.h"

namespace nightshift::trainer {

// cuda:<local_rank mod device count> when this is a CUDA build and a GPU is visible,
// else the CPU.
torch::Device PickDevice(int local_rank);

// The batch's tensors on `device` (pinned host memory and non-blocking copies on CUDA).
Batch ToDevice(Batch batch, const torch::Device& device);

struct DeviceMemory {
  int64_t allocated = 0, reserved = 0, peak = 0;  // bytes; all 0 on the CPU
};
DeviceMemory GetDeviceMemory(const torch::Device& device);

// Frees cached blocks so a retry after an out-of-memory error starts clean (CUDA only).
void ReleaseCachedMemory(const torch::Device& device);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_DEVICE_H_
