#include "worker/trainer/optim/amp.h"

#include <cmath>

namespace nightshift::trainer {

std::string CheckPrecision(const std::string& precision, const torch::Device& device) {
  if (precision == "fp32" || precision == "bf16") return "";
  if (precision == "fp16") {
    if (device.is_cuda()) return "";
    return "spec.train.precision fp16 needs a CUDA device (LibTorch has no fp16 autocast on the "
           "CPU); use bf16 or fp32 on the CPU";
  }
  return "spec.train.precision must be fp32, bf16 or fp16, got \"" + precision + "\"";
}

AutocastRegion::AutocastRegion(const std::string& precision, const torch::Device& device) {
  if (precision == "fp32") return;
  const at::ScalarType dtype = precision == "fp16" ? at::kHalf : at::kBFloat16;
  previous_ = compat::GetAutocastState();
  compat::AutocastState next = previous_;
  if (device.is_cuda()) {
    next.cuda_enabled = true;
    next.cuda_dtype = dtype;
  } else {
    next.cpu_enabled = true;
    next.cpu_dtype = dtype;
  }
  compat::SetAutocastState(next);
  compat::IncrementAutocastNesting();
  active_ = true;
}

AutocastRegion::~AutocastRegion() {
  if (!active_) return;
  if (compat::DecrementAutocastNesting() == 0) compat::ClearAutocastCache();
  compat::SetAutocastState(previous_);
}

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(options.enabled ? options.init_scale : 1.0) {}

torch::Tensor GradScaler::Scale(const torch::Tensor& loss) const {
  return options_.enabled ? loss * scale_ : loss;
}

bool GradScaler::UnscaleAndCheckFinite(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return true;
  const double inv_scale = options_.enabled ? 1.0 / scale_ : 1.0;
  // ATen's fused kernel (CUDA, and the CPU since 2.x): one pass that multiplies every
  // gradient by inv_scale and sets found_inf when any element is inf or NaN.
  torch::NoGradGuard no_grad;
  auto found_inf = torch::zeros({1}, grads[0].options().dtype(torch::kFloat));
  auto inv = torch::full({1}, inv_scale, grads[0].options().dtype(torch::kFloat));
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
  return found_inf.item<float>() == 0.0f;
}

void GradScaler::Update(bool found_non_finite) {
  if (!options_.enabled) return;
  // Same rule as at::_amp_update_scale_; the state is two host numbers (the step is
  // skipped on the host anyway), so plain arithmetic serves every device.
  if (found_non_finite) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= options_.growth_interval) {
    const double grown = scale_ * options_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

void GradScaler::Restore(double scale, int64_t growth_tracker) {
  if (!options_.enabled) return;
  scale_ = scale;
  growth_tracker_ = growth_tracker;
}

NanGuard::Action NanGuard::Observe(bool loss_finite) {
  if (loss_finite) {
    consecutive_ = 0;
    return Action::kStep;
  }
  ++skipped_steps_;
  if (++consecutive_ < max_consecutive_) return Action::kSkip;
  consecutive_ = 0;
  if (rollbacks_ > 0) return Action::kFail;
  ++rollbacks_;
  return Action::kRollBack;
}

}  // namespace nightshift::trainer
