// RoBERTa for sequence classification, as transformers' modeling_roberta.py computes it
// (RobertaForSequenceClassification), with the checkpoint's parameter names:
//
//   roberta.embeddings.{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}
//   roberta.encoder.layer.N.*   (BERT's layers exactly: bert.h)
//   classifier.dense, classifier.out_proj
//
// Differences from BERT: positions count real tokens only and start at padding_idx + 1
// (fairseq's make_positions: a token's position is padding_idx + its 1-based index among
// the row's non-pad tokens; a pad token's is padding_idx), and the position table has
// padding_idx too; there is no pooler: the head reads <s> (h[:, 0]):
// logits = out_proj(Dropout(tanh(dense(Dropout(h[:, 0]))))).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_ROBERTA_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_ROBERTA_H_

#include <torch/torch.h>

#include "worker/trainer/models/hf_weights.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/models/bert.h"

namespace nightshift::trainer::hf {

class RobertaForSequenceClassificationImpl : public SequenceModel {
 public:
  // Throws (PermanentError) when config.json has no pad_token_id: positions need it.
  explicit RobertaForSequenceClassificationImpl(const HfConfig& config);
  // tokens: int64 [B, L]; pad_mask: bool [B, L], true at padding. Returns logits [B, C].
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) override;
  BlockPlan* block_plan() override { return &encoder_->plan; }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() override { return encoder_->layers(); }
  // Names: base prefix "roberta.", head "classifier."; RobertaForMaskedLM's "lm_head." and
  // RobertaModel's pooler (unused by this head, as in transformers) dropped.
  static HfNameRules NameRules(const HfConfig& config);

 private:
  torch::Tensor Embed(const torch::Tensor& tokens);  // [B, L, D]
  HfConfig config_;
  int64_t padding_idx_;
  HfEmbedding word_embeddings_{nullptr}, position_embeddings_{nullptr}, token_type_embeddings_{nullptr};
  torch::nn::LayerNorm embeddings_norm_{nullptr};
  BertEncoder encoder_{nullptr};
  Projection dense_{nullptr}, out_proj_{nullptr};
};
TORCH_MODULE(RobertaForSequenceClassification);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_ROBERTA_H_
