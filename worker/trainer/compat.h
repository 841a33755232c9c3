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

// The whole autocast state of this thread (both device types), to record and re-apply
// (activation checkpointing re-applies the forward's state in its recompute).
struct AutocastState {
  bool cpu_enabled = false;
  at::ScalarType cpu_dtype = at::kBFloat16;
  bool cuda_enabled = false;
  at::ScalarType cuda_dtype = at::kHalf;
};

inline AutocastState GetAutocastState() {
  AutocastState s;
#if NIGHTSHIFT_TORCH_AT_LEAST(2, 4)
  s.cpu_enabled = at::autocast::is_autocast_enabled(at::kCPU);
  s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  s.cuda_enabled = at::autocast::is_autocast_enabled(at::kCUDA);
  s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
#else
  s.cpu_enabled = at::autocast::is_cpu_enabled();
  s.cpu_dtype = at::autocast::get_autocast_cpu_dtype();
  s.cuda_enabled = at::autocast::is_enabled();
  s.cuda_dtype = at::autocast::get_autocast_gpu_dtype();
#endif
  return s;
}

inline void SetAutocastState(const AutocastState& s) {
  SetCpuAutocast(s.cpu_enabled, s.cpu_dtype);
  SetCudaAutocast(s.cuda_enabled, s.cuda_dtype);
}

// Autocast nesting (the cast cache is cleared when the outermost region exits).
inline int IncrementAutocastNesting() { return at::autocast::increment_nesting(); }
inline int DecrementAutocastNesting() { return at::autocast::decrement_nesting(); }
inline void ClearAutocastCache() { at::autocast::clear_cache(); }

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
