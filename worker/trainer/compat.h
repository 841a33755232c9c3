// The one place for LibTorch version differences. The trainer supports LibTorch 2.11 to
// 2.14 (the PyTorch wheel: 2.14.1 in CI, 2.11 on the GPU node); Debian's 1.13 is no
// longer supported. Between 2.11 and 2.14 none of the APIs used here changed, so this
// header holds the version check and thin wrappers that name what the trainer relies on.
#ifndef NIGHTSHIFT_WORKER_TRAINER_COMPAT_H_
#define NIGHTSHIFT_WORKER_TRAINER_COMPAT_H_

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/version.h>

#include <utility>

#define NIGHTSHIFT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||             \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

static_assert(NIGHTSHIFT_TORCH_AT_LEAST(2, 11),
              "nightshift-trainer needs LibTorch 2.11 or newer (scripts/install-deps.sh installs 2.14.1)");

namespace nightshift::trainer::compat {

// The whole autocast state of this thread (CPU and CUDA), to record and re-apply
// (activation checkpointing re-applies the forward's state in its recompute).
struct AutocastState {
  bool cpu_enabled = false;
  at::ScalarType cpu_dtype = at::kBFloat16;
  bool cuda_enabled = false;
  at::ScalarType cuda_dtype = at::kHalf;
};

inline AutocastState GetAutocastState() {
  AutocastState s;
  s.cpu_enabled = at::autocast::is_autocast_enabled(at::kCPU);
  s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  s.cuda_enabled = at::autocast::is_autocast_enabled(at::kCUDA);
  s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  return s;
}

inline void SetAutocastState(const AutocastState& s) {
  at::autocast::set_autocast_enabled(at::kCPU, s.cpu_enabled);
  at::autocast::set_autocast_dtype(at::kCPU, s.cpu_dtype);
  at::autocast::set_autocast_enabled(at::kCUDA, s.cuda_enabled);
  at::autocast::set_autocast_dtype(at::kCUDA, s.cuda_dtype);
}

// Autocast nesting (the cast cache is cleared when the outermost region exits).
inline int IncrementAutocastNesting() { return at::autocast::increment_nesting(); }
inline int DecrementAutocastNesting() { return at::autocast::decrement_nesting(); }
inline void ClearAutocastCache() { at::autocast::clear_cache(); }

// The base class of c10d's Gloo and NCCL groups (ProcessGroup dispatches over these).
using C10dBackend = c10d::Backend;

// An owning pointer to an autograd node: std::shared_ptr in older releases,
// c10::intrusive_ptr in 2.14; whatever grad_accumulator() returns.
using NodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const at::Tensor&>()));

// Human-readable LibTorch version, for the start event and log.
inline const char* TorchVersion() { return TORCH_VERSION; }

}  // namespace nightshift::trainer::compat

#endif  // NIGHTSHIFT_WORKER_TRAINER_COMPAT_H_
