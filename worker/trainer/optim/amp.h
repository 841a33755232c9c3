// Mixed precision: autocast regions, the fp16 gradient scaler and the NaN guard.
//
// Precision (spec.train.precision):
//   fp32  no autocast.
//   bf16  autocast to bfloat16 on the CPU and on CUDA; no scaler (bf16 has fp32's range).
//   fp16  autocast to float16 on CUDA only, with the GradScaler. CheckPrecision() refuses
//         fp16 on the CPU before the run: LibTorch's CPU fp16 autocast exists since 2.x
//         but CPUs without fp16 FMA units run it slower than fp32, and the scaler's
//         purpose (tensor-core fp16 without underflow) is a GPU one.
// The forward pass and the loss run inside an AutocastRegion; backward runs outside (its
// ops follow the forward's dtypes). Parameters, gradients and optimizer state stay fp32.
#ifndef NIGHTSHIFT_WORKER_TRAINER_OPTIM_AMP_H_
#define NIGHTSHIFT_WORKER_TRAINER_OPTIM_AMP_H_

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "worker/trainer/compat.h"
#include "worker/trainer/position.h"

namespace nightshift::trainer {

// "" when `precision` can run on `device`, else the reason (names the spec field).
std::string CheckPrecision(const std::string& precision, const torch::Device& device);

// Autocast on `device` for the region's lifetime (nothing for fp32). Nests: the cast
// cache is cleared when the outermost region ends; the previous state is restored.
class AutocastRegion {
 public:
  AutocastRegion(const std::string& precision, const torch::Device& device);
  ~AutocastRegion();
  AutocastRegion(const AutocastRegion&) = delete;
  AutocastRegion& operator=(const AutocastRegion&) = delete;

 private:
  bool active_ = false;
  compat::AutocastState previous_;
};

struct GradScalerOptions {
  bool enabled = false;            // fp16 only; disabled: Scale is the identity
  double init_scale = 65536.0;     // 2^16: the loss multiplier at the start
  double growth_factor = 2.0;      // scale *= this after growth_interval finite steps
  double backoff_factor = 0.5;     // scale *= this after a step with a non-finite gradient
  int64_t growth_interval = 2000;  // consecutive finite steps before the scale grows
};

// Loss scaling for fp16 (as torch.cuda.amp.GradScaler): backward runs on loss * scale so
// small gradients do not flush to zero; before the step the gradients are divided by the
// scale, and a step whose gradients hold inf/NaN is skipped and the scale backs off.
// Invariants: the scale only changes in Update(); a skipped step leaves the parameters
// untouched. Unscaling and the finite check are ATen's fused
// _amp_foreach_non_finite_check_and_unscale_ kernel, on CUDA and on the CPU.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options);

  bool enabled() const { return options_.enabled; }
  torch::Tensor Scale(const torch::Tensor& loss) const;
  // Divides every defined gradient by the scale, in place; returns whether all are
  // finite. Disabled: only checks.
  bool UnscaleAndCheckFinite(const std::vector<torch::Tensor>& parameters);
  // After each optimizer step or skip: back off on a non-finite gradient, grow after
  // growth_interval finite steps in a row.
  void Update(bool found_non_finite);

  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }  // finite steps in a row
  void Restore(double scale, int64_t growth_tracker);          // from a checkpoint

 private:
  const GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
};

// What to do after a step's loss is known, for every precision: a non-finite loss skips
// the step; `max_consecutive` non-finite losses in a row roll back to the last complete
// checkpoint (with the learning rate halved), and doing so again after a roll-back fails.
class NanGuard {
 public:
  enum class Action { kStep, kSkip, kRollBack, kFail };
  explicit NanGuard(int max_consecutive = 5) : max_consecutive_(max_consecutive) {}

  Action Observe(bool loss_finite);
  int64_t skipped_steps() const { return skipped_steps_; }  // steps not applied (all causes)
  void CountSkipped() { ++skipped_steps_; }                 // a skip for another reason (fp16)
  int rollbacks() const { return rollbacks_; }
  int max_consecutive() const { return max_consecutive_; }
  NanGuardState state() const { return {consecutive_, rollbacks_}; }
  void Restore(const NanGuardState& s) {
    consecutive_ = s.consecutive;
    rollbacks_ = s.rollbacks;
  }

 private:
  const int max_consecutive_;
  int consecutive_ = 0;
  int rollbacks_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_OPTIM_AMP_H_
