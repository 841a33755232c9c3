// Mistral, as transformers' modeling_mistral.py computes it: Llama's layers and names
// (llama.h) with grouped-query attention by default (num_key_value_heads 8) and a sliding
// attention window (config.json's sliding_window, default 4096; null: none). Keys further
// back than the window are not seen; rows longer than the window are refused (max_len is
// checked against it before training), so the window never cuts a row we train on.
// hf_config.cc reads the keys (ReadLlamaFields).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_MISTRAL_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_MISTRAL_H_

#include "worker/trainer/models/llama.h"

namespace nightshift::trainer::hf {

class MistralModelImpl : public LlamaModelImpl {
 public:
  explicit MistralModelImpl(const HfConfig& config);  // config.model_type "mistral"
};
TORCH_MODULE(MistralModel);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_MISTRAL_H_
