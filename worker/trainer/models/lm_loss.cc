#include "worker/trainer/models/lm_loss.h"

#include <algorithm>

namespace nightshift::trainer {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Forward computes the loss and, when an input needs one, the gradients of the loss sum
// (Liger's order: each chunk's logits are made once, turned into their gradient in place
// and multiplied out at once, so nothing is recomputed); backward scales them by the
// incoming gradient (a scalar).
struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t chunk) {
    // A frozen head (an adapter's base) gets no [V, D] gradient: neither its memory nor its matmuls.
    const bool grad_h = hidden.requires_grad(), grad_w = weight.requires_grad(), grads = grad_h || grad_w;
    const int64_t n = hidden.size(0);
    torch::Tensor sum = torch::zeros({}, hidden.options().dtype(torch::kFloat));
    torch::Tensor grad_hidden, grad_weight;
    if (grad_h) grad_hidden = torch::empty(hidden.sizes(), hidden.options());
    if (grad_w) grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat));
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t len = std::min(chunk, n - at);
      const torch::Tensor h = hidden.narrow(0, at, len);
      // Under an autocast region the matmul runs in its dtype; the softmax in float32.
      torch::Tensor z = torch::matmul(h, weight.t());
      const torch::ScalarType type = z.scalar_type();
      z = z.to(torch::kFloat);
      const torch::Tensor t = targets.narrow(0, at, len);
      const torch::Tensor counted = t.ne(-100).to(torch::kFloat);
      const torch::Tensor lse = z.logsumexp(-1);
      const torch::Tensor index = t.clamp_min(0).unsqueeze(1);
      sum += ((lse - z.gather(1, index).squeeze(1)) * counted).sum();
      if (!grads) continue;
      // d loss / d z = softmax(z) - one_hot(target) per counted token, in place.
      z.sub_(lse.unsqueeze(1)).exp_();
      z.scatter_add_(1, index, torch::full({len, 1}, -1.0, z.options()));
      z.mul_(counted.unsqueeze(1));
      // The gradient matmuls in the forward's dtype, but float32 for fp16: unlike autograd's
      // path, dz is not yet multiplied by the loss scale here, and fp16 would flush its
      // small probabilities to zero (bf16 has float32's range).
      const torch::ScalarType grad_type = type == torch::kHalf ? torch::kFloat : type;
      const torch::Tensor dz = z.to(grad_type);
      if (grad_h) grad_hidden.narrow(0, at, len).copy_(torch::matmul(dz, weight.to(grad_type)));
      // Accumulated in place where the dtypes allow (a [V, D] temporary per chunk would
      // be written, read and freed again: 65 MB a chunk at a vocabulary of 32,000).
      if (!grad_w) continue;
      if (grad_type == torch::kFloat) grad_weight.addmm_(dz.t(), h.to(torch::kFloat));
      else grad_weight.add_(torch::matmul(dz.t(), h.to(grad_type)));
    }
    ctx->save_for_backward({grad_hidden, grad_weight});
    ctx->saved_data["weight_type"] = static_cast<int64_t>(weight.scalar_type());
    return sum;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor grad = grad_outputs[0];  // d(objective) / d(loss sum): a scalar
    const auto weight_type = static_cast<torch::ScalarType>(ctx->saved_data["weight_type"].toInt());
    torch::Tensor grad_hidden = saved[0].defined() ? saved[0] * grad.to(saved[0].scalar_type()) : torch::Tensor();
    torch::Tensor grad_weight = saved[1].defined() ? (saved[1] * grad.to(torch::kFloat)).to(weight_type) : torch::Tensor();
    return {grad_hidden, grad_weight, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

int64_t ChunkTokens(const torch::Tensor& hidden, const torch::Tensor& weight, int64_t chunk_tokens) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "LinearCrossEntropySum: hidden [N, D] and weight [V, D]");
  return chunk_tokens > 0 ? chunk_tokens : std::max<int64_t>(1, kChunkBytes / (weight.size(0) * int64_t{4}));
}

torch::Tensor LinearCrossEntropySum(const torch::Tensor& hidden, const torch::Tensor& weight,
                                    const torch::Tensor& targets, int64_t chunk_tokens) {
  const int64_t chunk = ChunkTokens(hidden, weight, chunk_tokens);
  if (hidden.size(0) == 0) return (hidden.sum() * 0 + weight.sum() * 0).to(torch::kFloat);
  return LinearCrossEntropy::apply(hidden, weight, targets, chunk);
}

LmEvalSums LinearCrossEntropyEval(const torch::Tensor& hidden, const torch::Tensor& weight,
                                  const torch::Tensor& targets, int64_t chunk_tokens) {
  const int64_t chunk = ChunkTokens(hidden, weight, chunk_tokens), n = hidden.size(0);
  torch::NoGradGuard no_grad;
  LmEvalSums sums;
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t len = std::min(chunk, n - at);
    const torch::Tensor z = torch::matmul(hidden.narrow(0, at, len), weight.t()).to(torch::kFloat);
    const torch::Tensor t = targets.narrow(0, at, len);
    const torch::Tensor counted = t.ne(-100);
    const torch::Tensor loss = z.logsumexp(-1) - z.gather(1, t.clamp_min(0).unsqueeze(1)).squeeze(1);
    sums.loss_sum += (loss * counted).sum().item<double>();
    sums.correct += (z.argmax(-1).eq(t) & counted).sum().item<int64_t>();
  }
  return sums;
}

}  // namespace nightshift::trainer
