// GPT-2 as transformers' modeling_gpt2.py computes it (GPT2LMHeadModel,
// GPT2ForSequenceClassification; decoder.h adds the heads), with the checkpoint's names:
//
//   transformer.{wte, wpe}                        token and learned position embeddings
//   transformer.h.N.ln_1, transformer.h.N.attn.{c_attn, c_proj}
//   transformer.h.N.ln_2, transformer.h.N.mlp.{c_fc, c_proj}
//   transformer.ln_f                              lm_head: wte (tied); score: [C, D], no bias
//
// Pre-LN blocks: x = x + Dropout(c_proj(Attention(ln_1(x)))), x = x + Dropout(MLP(ln_2(x)))
// with the tanh GELU; dropout embd_pdrop after the embeddings, attn_pdrop on the attention
// probabilities, resid_pdrop on both branches. Its projections are Conv1D: weights stored
// [in, out] (the transpose of a Linear's), kept so here, so names and shapes are the file's.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_GPT2_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_GPT2_H_

#include <torch/torch.h>

#include "worker/trainer/models/decoder.h"
#include "worker/trainer/models/lora.h"  // Conv1D

namespace nightshift::trainer::hf {

class Gpt2BlockImpl : public torch::nn::Module {
 public:
  explicit Gpt2BlockImpl(const HfConfig& config);
  // x [B, L, D]; spans: packed rows' segments (decoder.h Segments::Spans) or undefined (causal).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& spans, KvCache* cache, size_t layer);

 private:
  int64_t heads_;
  double hidden_dropout_, attention_dropout_;
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  Conv1D c_attn_{nullptr}, c_proj_{nullptr}, c_fc_{nullptr}, mlp_proj_{nullptr};
};
TORCH_MODULE(Gpt2Block);

class Gpt2ModelImpl : public DecoderTrunk {
 public:
  explicit Gpt2ModelImpl(const HfConfig& config);
  torch::Tensor forward(const torch::Tensor& tokens, const Segments& segments, KvCache* cache) override;
  torch::Tensor token_embedding() override { return wte_->weight; }
  std::vector<std::shared_ptr<torch::nn::Module>> layers() override { return h_->children(); }

 private:
  HfConfig config_;
  HfEmbedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::ModuleList h_;
  torch::nn::LayerNorm ln_f_{nullptr};
};
TORCH_MODULE(Gpt2Model);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_GPT2_H_
