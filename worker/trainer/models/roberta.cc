#include "worker/trainer/models/roberta.h"

#include "worker/trainer/models/dropout.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/models/common.h"

namespace nightshift::trainer::hf {

RobertaForSequenceClassificationImpl::RobertaForSequenceClassificationImpl(const HfConfig& c)
    : config_(c), padding_idx_(c.pad_token_id.value_or(-1)) {
  if (!c.pad_token_id) throw PermanentError("config.json: a roberta model needs a pad_token_id (its positions start after it)");
  const int64_t d = c.hidden_size;
  auto roberta = Holder(*this, "roberta");
  auto embeddings = Holder(*roberta, "embeddings");
  word_embeddings_ = AddEmbedding(*embeddings, "word_embeddings", c.vocab_size, d, padding_idx_);
  position_embeddings_ = AddEmbedding(*embeddings, "position_embeddings", c.max_position_embeddings, d, padding_idx_);
  token_type_embeddings_ = AddEmbedding(*embeddings, "token_type_embeddings", c.type_vocab_size, d, std::nullopt);
  embeddings_norm_ = AddLayerNorm(*embeddings, "LayerNorm", d, c.layer_norm_eps);
  encoder_ = roberta->register_module("encoder", BertEncoder(c));
  auto classifier = Holder(*this, "classifier");  // RobertaClassificationHead
  dense_ = AddLinear(*classifier, "dense", d, d);
  out_proj_ = AddLinear(*classifier, "out_proj", d, static_cast<int64_t>(c.labels.size()));
}

// RobertaEmbeddings: positions from the token ids (create_position_ids_from_input_ids:
// like transformers, a pad *id* inside a row counts as padding here), (word + token type
// 0) + position, LayerNorm, dropout.
torch::Tensor RobertaForSequenceClassificationImpl::Embed(const torch::Tensor& tokens) {
  auto real = tokens.ne(padding_idx_).to(torch::kLong);                   // [B, L] 1 for tokens
  auto positions = torch::cumsum(real, 1).mul_(real).add_(padding_idx_);  // [B, L]
  CheckLength(padding_idx_ + 1 + tokens.size(1), config_.max_position_embeddings);
  auto x = word_embeddings_(tokens) + token_type_embeddings_->weight[0];
  x = x + position_embeddings_(positions);
  return Dropout(embeddings_norm_(x), config_.hidden_dropout, is_training());
}

torch::Tensor RobertaForSequenceClassificationImpl::forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) {
  auto x = Embed(tokens);
  auto h = encoder_(x, KeyPaddingBias(pad_mask, x.options()));  // [B, 1, D]
  const bool training = is_training();
  const double p = config_.classifier_dropout;
  auto s = Dropout(h.select(1, 0), p, training);                 // <s>: [B, D]
  s = Dropout(torch::tanh(dense_(s)), p, training);
  return out_proj_(s);                                            // [B, C]
}

HfNameRules RobertaForSequenceClassificationImpl::NameRules(const HfConfig& c) {
  return HfNameRules{"roberta.", {"classifier."}, {"lm_head.", "roberta.pooler.", "roberta.embeddings.position_ids"},
                     c.initializer_range};
}

}  // namespace nightshift::trainer::hf
