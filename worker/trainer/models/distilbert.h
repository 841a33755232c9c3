// DistilBERT for sequence classification, as transformers' modeling_distilbert.py computes
// it (DistilBertForSequenceClassification), with the checkpoint's parameter names:
//
//   distilbert.embeddings.{word_embeddings, position_embeddings, LayerNorm}
//   distilbert.transformer.layer.N.attention.{q_lin, k_lin, v_lin, out_lin}
//   distilbert.transformer.layer.N.sa_layer_norm
//   distilbert.transformer.layer.N.ffn.{lin1, lin2}, distilbert.transformer.layer.N.output_layer_norm
//   pre_classifier, classifier
//
// Differences from BERT: no token types, no pooler; LayerNorm eps is always 1e-12; the
// attention output has no dropout of its own before its residual (the feed-forward's
// has): h = LN(x + out_lin(Attention(x))), out = LN(h + Dropout(lin2 gelu(lin1 h)));
// logits = classifier(Dropout(relu(pre_classifier(h[:, 0])))).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_DISTILBERT_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_DISTILBERT_H_

#include <torch/torch.h>

#include "worker/trainer/models/hf_weights.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/models/model.h"

namespace nightshift::trainer::hf {

// One layer (modeling_distilbert.py's TransformerBlock).
class DistilBertLayerImpl : public torch::nn::Module {
 public:
  explicit DistilBertLayerImpl(const HfConfig& config);
  // x: [B, L, D]; bias: [B, 1, 1, L] additive key-padding bias. Returns [B, L, D].
  // As BertLayer's (bert.h): first_only computes position 0 alone past keys and values.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& bias, bool first_only = false);

 private:
  int64_t heads_;
  double dropout_, attention_dropout_;
  Projection q_lin_{nullptr}, k_lin_{nullptr}, v_lin_{nullptr}, out_lin_{nullptr};
  torch::nn::LayerNorm sa_layer_norm_{nullptr};
  Projection lin1_{nullptr}, lin2_{nullptr};
  torch::nn::LayerNorm output_layer_norm_{nullptr};
};
TORCH_MODULE(DistilBertLayer);

class DistilBertForSequenceClassificationImpl : public SequenceModel {
 public:
  explicit DistilBertForSequenceClassificationImpl(const HfConfig& config);
  // tokens: int64 [B, L]; pad_mask: bool [B, L], true at padding. Returns logits [B, C].
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) override;
  BlockPlan* block_plan() override { return &plan_; }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() override { return layer_->children(); }
  // Names: base prefix "distilbert.", head "pre_classifier." and "classifier.";
  // DistilBertForMaskedLM's vocab_transform / vocab_layer_norm / vocab_projector dropped.
  static HfNameRules NameRules(const HfConfig& config);

 private:
  HfConfig config_;
  BlockPlan plan_;
  HfEmbedding word_embeddings_{nullptr}, position_embeddings_{nullptr};
  torch::nn::LayerNorm embeddings_norm_{nullptr};
  torch::nn::ModuleList layer_;
  Projection pre_classifier_{nullptr}, classifier_{nullptr};
};
TORCH_MODULE(DistilBertForSequenceClassification);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_DISTILBERT_H_
