#include "worker/trainer/lm_loss.h"

#include <algorithm>

namespace nightshift::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t chunk) {
    const int64_t n = hidden.size(0);
    torch::Tensor lse = torch::empty({n}, hidden.options().dtype(torch::kFloat));
    torch::Tensor sum = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    torch::ScalarType type = hidden.scalar_type();
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t len = std::min(chunk, n - at);
      // Under an autocast region the matmul runs in its dtype: recorded for backward.
      torch::Tensor z = torch::matmul(hidden.narrow(0, at, len), weight.t());
      type = z.scalar_type();
      z = z.to(torch::kFloat);
      torch::Tensor t = targets.narrow(0, at, len);
      torch::Tensor counted = t.ne(-100);
      torch::Tensor chunk_lse = z.logsumexp(-1);
      torch::Tensor picked = z.gather(1, t.clamp_min(0).unsqueeze(1)).squeeze(1);
      sum += ((chunk_lse - picked) * counted).sum();
      lse.narrow(0, at, len).copy_(chunk_lse);
    }
    ctx->save_for_backward({hidden, weight, targets, lse});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["type"] = static_cast<int64_t>(type);
    return sum;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &hidden = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3];
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const auto type = static_cast<torch::ScalarType>(ctx->saved_data["type"].toInt());
    const torch::Tensor grad = grad_outputs[0].to(torch::kFloat);  // d(loss sum)
    const int64_t n = hidden.size(0);
    torch::Tensor grad_hidden = torch::empty(hidden.sizes(), hidden.options());
    torch::Tensor grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat));
    const torch::Tensor w = weight.to(type);
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t len = std::min(chunk, n - at);
      torch::Tensor t = targets.narrow(0, at, len);
      // d loss / d z = (softmax(z) - one_hot(target)) per counted token, in place.
      const torch::Tensor h = hidden.narrow(0, at, len).to(type);
      torch::Tensor dz = torch::matmul(h, w.t()).to(torch::kFloat);  // the chunk's logits again
      dz.sub_(lse.narrow(0, at, len).unsqueeze(1)).exp_();
      dz.scatter_add_(1, t.clamp_min(0).unsqueeze(1), torch::full({len, 1}, -1.0, dz.options()));
      dz.mul_((t.ne(-100).to(torch::kFloat) * grad).unsqueeze(1));
      const torch::Tensor dz_t = dz.to(type);
      grad_hidden.narrow(0, at, len).copy_(torch::matmul(dz_t, w));
      grad_weight.add_(torch::matmul(dz_t.t(), h));
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor LinearCrossEntropySum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t chunk_tokens) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "LinearCrossEntropySum: hidden [N, D] and weight [V, D]");
  const int64_t chunk = chunk_tokens > 0 ? chunk_tokens
                                         : std::max<int64_t>(1, kChunkBytes / (weight.size(0) * int64_t{4}));
  if (hidden.size(0) == 0) return (hidden.sum() * 0 + weight.sum() * 0).to(torch::kFloat);
  return LinearCrossEntropy::apply(hidden, weight, targets, chunk);
}

}  // namespace nightshift::trainer
