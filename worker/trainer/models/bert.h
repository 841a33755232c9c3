// BERT for sequence classification, as transformers' modeling_bert.py computes it
// (BertForSequenceClassification), with the checkpoint's parameter names:
//
//   bert.embeddings.{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}
//   bert.encoder.layer.N.attention.self.{query, key, value}
//   bert.encoder.layer.N.attention.output.{dense, LayerNorm}
//   bert.encoder.layer.N.intermediate.dense, bert.encoder.layer.N.output.{dense, LayerNorm}
//   bert.pooler.dense, classifier
//
// Post-LN layers: h = LN(x + Dropout(Attention(x))), out = LN(h + Dropout(W2 gelu(W1 h))),
// erf GELU; learned absolute positions 0..L-1; every token is of type 0 (one sentence);
// pooled = tanh(pooler.dense(h[:, 0])); logits = classifier(Dropout(pooled)).
// Only h[:, 0] is read, so the last layer computes that position alone past its keys and
// values (common.h RunLayers): the same logits and gradients, less work per token.
// RoBERTa (roberta.h) uses the same layers (BertEncoder) under its own embeddings and head.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_BERT_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_BERT_H_

#include <torch/torch.h>

#include "worker/trainer/models/hf_weights.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/models/model.h"

namespace nightshift::trainer::hf {

// One post-LN layer (BertLayer).
class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const HfConfig& config);
  // x: [B, L, D]; bias: [B, 1, 1, L] additive key-padding bias. Returns [B, L, D]; with
  // first_only, [B, 1, D]: position 0 alone (its keys and values still from every position).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& bias, bool first_only = false);

 private:
  int64_t heads_;
  double hidden_dropout_, attention_dropout_;
  Projection query_{nullptr}, key_{nullptr}, value_{nullptr}, attention_dense_{nullptr};
  torch::nn::LayerNorm attention_norm_{nullptr};
  Projection intermediate_{nullptr}, output_dense_{nullptr};
  torch::nn::LayerNorm output_norm_{nullptr};
};
TORCH_MODULE(BertLayer);

// encoder.layer.0 .. N-1 (BertEncoder).
class BertEncoderImpl : public torch::nn::Module {
 public:
  explicit BertEncoderImpl(const HfConfig& config);
  // Position 0 of the last layer's output: [B, 1, D] (what the heads read).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& bias);
  BlockPlan plan;  // how the layers run (activation_checkpoint.h)
  std::vector<std::shared_ptr<torch::nn::Module>> layers() { return layer_->children(); }

 private:
  torch::nn::ModuleList layer_;
};
TORCH_MODULE(BertEncoder);

class BertForSequenceClassificationImpl : public SequenceModel {
 public:
  explicit BertForSequenceClassificationImpl(const HfConfig& config);
  // tokens: int64 [B, L]; pad_mask: bool [B, L], true at padding. Returns logits [B, C].
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) override;
  BlockPlan* block_plan() override { return &encoder_->plan; }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() override { return encoder_->layers(); }
  // Names: base prefix "bert.", head "classifier."; BertForPreTraining's "cls." heads dropped.
  static HfNameRules NameRules(const HfConfig& config);

 private:
  torch::Tensor Embed(const torch::Tensor& tokens);  // [B, L, D]
  HfConfig config_;
  HfEmbedding word_embeddings_{nullptr}, position_embeddings_{nullptr}, token_type_embeddings_{nullptr};
  torch::nn::LayerNorm embeddings_norm_{nullptr};
  BertEncoder encoder_{nullptr};
  Projection pooler_{nullptr}, classifier_{nullptr};
};
TORCH_MODULE(BertForSequenceClassification);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_BERT_H_
