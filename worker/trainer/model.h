// The built-in BERT-style encoder classifier, pre-LN: each block computes
//   x = x + Dropout(Attention(LayerNorm(x)))   x = x + Dropout(FFN(LayerNorm(x)))
// and a final LayerNorm follows the last block; the first (CLS/bos) position is pooled.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODEL_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODEL_H_

#include <torch/torch.h>

#include "worker/trainer/config.h"

namespace nightshift::trainer {

// One encoder block: its own module so activation checkpointing can wrap it.
class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t d_model, int64_t heads, int64_t ffn, double dropout);
  // x: float [B, L, D]; attn_bias: float [B, 1, 1, L], 0 for tokens, -inf for padding.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& attn_bias);

 private:
  int64_t heads_;
  double dropout_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(TransformerBlock);

class TransformerClassifierImpl : public torch::nn::Module {
 public:
  TransformerClassifierImpl(const ModelConfig& model, int64_t vocab_size, int64_t num_classes,
                            int64_t pad_id);
  // tokens: int64 [B, L]; pad_mask: bool [B, L], true at padding. Returns logits [B, C].
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask);

 private:
  int64_t max_len_;
  double dropout_;
  torch::nn::Embedding tok_emb_{nullptr}, pos_emb_{nullptr};
  torch::nn::ModuleList blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(TransformerClassifier);

// Builds the model named by model.arch; throws for architectures not built yet.
TransformerClassifier BuildModel(const ModelConfig& model, int64_t vocab_size,
                                 int64_t num_classes, int64_t pad_id);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODEL_H_
