// Qwen2, as transformers' modeling_qwen2.py computes it: Llama's layers and names (llama.h)
// with biases on q_proj, k_proj and v_proj (not o_proj, not the MLP), vocab_size 151936 by
// default, and a sliding window only when config.json's use_sliding_window is true (rows
// longer than it are refused). hf_config.cc reads the keys (ReadLlamaFields).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_QWEN2_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_QWEN2_H_

#include "worker/trainer/models/llama.h"

namespace nightshift::trainer::hf {

class Qwen2ModelImpl : public LlamaModelImpl {
 public:
  explicit Qwen2ModelImpl(const HfConfig& config);  // config.model_type "qwen2"
};
TORCH_MODULE(Qwen2Model);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_QWEN2_H_
