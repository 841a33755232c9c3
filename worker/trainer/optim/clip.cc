#include "worker/trainer/optim/clip.h"

#include <algorithm>
#include <cmath>

namespace nightshift::trainer {

double ClipGradNorm(const std::vector<torch::Tensor>& tensors, double max_norm,
                    const std::function<double(double)>& sum_over_ranks) {
  torch::NoGradGuard no_grad;
  constexpr int64_t kChunk = int64_t{1} << 22;  // values squared at a time: a bounded copy
  double sum = 0;
  for (const torch::Tensor& t : tensors) {
    const torch::Tensor& g = t.grad();
    if (!g.defined()) continue;
    const torch::Tensor flat = g.reshape({-1});
    for (int64_t at = 0; at < flat.numel(); at += kChunk)
      sum += flat.narrow(0, at, std::min(kChunk, flat.numel() - at)).square().sum(torch::kFloat64).item<double>();
  }
  if (sum_over_ranks) sum = sum_over_ranks(sum);
  const double norm = std::sqrt(sum);
  const double coef = max_norm / (norm + 1e-6);
  if (coef < 1.0)
    for (const torch::Tensor& t : tensors)
      if (t.grad().defined()) const_cast<torch::Tensor&>(t).mutable_grad().mul_(coef);
  return norm;
}

}  // namespace nightshift::trainer
