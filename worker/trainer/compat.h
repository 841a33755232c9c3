// The one place for LibTorch version differences (1.13 on Debian, 2.x on GPU nodes).
#ifndef NIGHTSHIFT_WORKER_TRAINER_COMPAT_H_
#define NIGHTSHIFT_WORKER_TRAINER_COMPAT_H_

#include <ATen/autocast_mode.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#define NIGHTSHIFT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||             \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace nightshift::trainer::compat {

// Autocast on the CPU (bf16); the 1.13 names became deprecated wrappers in 2.4.
inline void SetCpuAutocast(bool enabled, at::ScalarType dtype) {
#if NIGHTSHIFT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCPU, enabled);
  at::autocast::set_autocast_dtype(at::kCPU, dtype);
#else
  at::autocast::set_cpu_enabled(enabled);
  at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}

// Autocast on CUDA (bf16 or fp16).
inline void SetCudaAutocast(bool enabled, at::ScalarType dtype) {
#if NIGHTSHIFT_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  at::autocast::set_enabled(enabled);
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

// The base class of c10d's Gloo and NCCL groups: ProcessGroup in 1.13, Backend in 2.x
// (where ProcessGroup became a dispatcher over backends). Both have the collectives
// (broadcast, allreduce, barrier) with the same signatures and return c10d::Work.
#if TORCH_VERSION_MAJOR >= 2
using C10dBackend = c10d::Backend;
#else
using C10dBackend = c10d::ProcessGroup;
#endif

// Human-readable LibTorch version, for the start log.
inline const char* TorchVersion() { return TORCH_VERSION; }

}  // namespace nightshift::trainer::compat

#endif  // NIGHTSHIFT_WORKER_TRAINER_COMPAT_H_
