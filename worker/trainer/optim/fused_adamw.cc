#include "worker/trainer/optim/fused_adamw.h"

#include <map>
#include <string>
#include <vector>

namespace nightshift::trainer {
namespace {

// The tensors of one _fused_adamw_ call: the kernel takes lists of one device and dtype.
struct Bucket {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<float> steps;  // each parameter's step count after this step
};

}  // namespace

torch::Tensor FusedAdamW::step(LossClosure closure) {
  for (const auto& group : param_groups())
    if (static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad())
      return torch::optim::AdamW::step(std::move(closure));
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::map<std::string, Bucket> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "FusedAdamW: sparse gradients are not supported");
      auto& slot = state()[p.unsafeGetTensorImpl()];
      if (!slot) {  // as AdamW::step initialises it
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(s);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      Bucket& b = buckets[p.device().str() + "/" + c10::toString(p.scalar_type())];
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.exp_avgs.push_back(s.exp_avg());
      b.exp_avg_sqs.push_back(s.exp_avg_sq());
      b.steps.push_back(static_cast<float>(s.step()));
    }
    for (auto& [key, b] : buckets) {
      // The kernel reads each step from a float tensor on the parameters' device.
      const auto steps = torch::tensor(b.steps).to(b.params[0].device()).unbind(0);
      at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(),
                        std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                        /*amsgrad=*/false, /*maximize=*/false);
    }
  }
  return loss;
}

}  // namespace nightshift::trainer
