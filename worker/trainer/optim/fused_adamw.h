// AdamW whose step is ATen's fused kernel (_fused_adamw_, CPU and CUDA): one pass over
// each parameter, its gradient and its two moments, where torch::optim::AdamW makes about
// seven passes and temporaries per parameter (PyTorch's own CPU default, foreach and fused
// off, does the same). The update is AdamW's (decoupled weight decay, bias-corrected
// moments), equal up to rounding; the state is AdamW's own (AdamWParamState: step,
// exp_avg, exp_avg_sq), so checkpoints are the same files and either class resumes the
// other's. With amsgrad, AdamW's own step runs.
#ifndef NIGHTSHIFT_WORKER_TRAINER_OPTIM_FUSED_ADAMW_H_
#define NIGHTSHIFT_WORKER_TRAINER_OPTIM_FUSED_ADAMW_H_

#include <torch/torch.h>

namespace nightshift::trainer {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_OPTIM_FUSED_ADAMW_H_
