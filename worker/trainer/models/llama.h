// Llama, as transformers' modeling_llama.py computes it
// (LlamaForCausalLM, LlamaForSequenceClassification; decoder.h adds the heads), with the
// checkpoint's names:
//
//   model.embed_tokens
//   model.layers.N.input_layernorm, model.layers.N.self_attn.{q_proj, k_proj, v_proj, o_proj}
//   model.layers.N.post_attention_layernorm, model.layers.N.mlp.{gate_proj, up_proj, down_proj}
//   model.norm                                   lm_head (or embed_tokens, tied); score
//
// Pre-norm layers with RMSNorm (computed in float32): x = x + o(Attention(rope(q), rope(k),
// v)), x = x + down(silu(gate(h)) * up(h)); rotary positions with base rope_theta rotate
// the two halves of each head (rotate_half); grouped-query attention: num_key_value_heads
// key/value heads serve num_attention_heads query heads. No dropout but attention_dropout.
// Mistral (mistral.h) and Qwen2 (qwen2.h) are this model with a flag or two of config.json.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_LLAMA_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_LLAMA_H_

#include <torch/torch.h>

#include "worker/trainer/models/decoder.h"
#include "worker/trainer/models/lora.h"

namespace nightshift::trainer::hf {

class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t d, double eps);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  double eps_;
  torch::Tensor weight_;
};
TORCH_MODULE(RmsNorm);

class LlamaLayerImpl : public torch::nn::Module {
 public:
  explicit LlamaLayerImpl(const HfConfig& config);
  // x [B, L, D]; rope: cos and sin stacked, [2, B or 1, 1, L, Dh]; spans: packed rows'
  // segments (decoder.h Segments::Spans) or undefined (causal).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& rope, const torch::Tensor& spans, KvCache* cache,
                        size_t layer);

 private:
  int64_t heads_, kv_heads_, head_dim_;
  double attention_dropout_;
  RmsNorm input_layernorm_{nullptr}, post_attention_layernorm_{nullptr};
  Projection q_proj_{nullptr}, k_proj_{nullptr}, v_proj_{nullptr}, o_proj_{nullptr};
  Projection gate_proj_{nullptr}, up_proj_{nullptr}, down_proj_{nullptr};
};
TORCH_MODULE(LlamaLayer);

// The trunk of every model of the Llama family: a sliding window (Mistral, Qwen2) only
// matters for rows longer than it, which forward refuses.
class LlamaModelImpl : public DecoderTrunk {
 public:
  explicit LlamaModelImpl(const HfConfig& config);
  torch::Tensor forward(const torch::Tensor& tokens, const Segments& segments, KvCache* cache) override;
  torch::Tensor token_embedding() override { return embed_tokens_->weight; }
  std::vector<std::shared_ptr<torch::nn::Module>> layers() override { return layers_->children(); }

 private:
  HfConfig config_;
  torch::Tensor inv_freq_;  // [Dh / 2]: rope_theta^(-2i / Dh), float32 (not a parameter or buffer)
  HfEmbedding embed_tokens_{nullptr};
  torch::nn::ModuleList layers_;
  RmsNorm norm_{nullptr};
};
TORCH_MODULE(LlamaModel);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_LLAMA_H_
