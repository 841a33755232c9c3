#include "worker/trainer/models/distilbert.h"

#include "worker/trainer/models/dropout.h"
#include "worker/trainer/models/common.h"

namespace nightshift::trainer::hf {

DistilBertLayerImpl::DistilBertLayerImpl(const HfConfig& c)
    : heads_(c.num_attention_heads), dropout_(c.hidden_dropout), attention_dropout_(c.attention_dropout) {
  const int64_t d = c.hidden_size, ffn = c.intermediate_size;
  auto attention = Holder(*this, "attention");
  q_lin_ = AddLinear(*attention, "q_lin", d, d);
  k_lin_ = AddLinear(*attention, "k_lin", d, d);
  v_lin_ = AddLinear(*attention, "v_lin", d, d);
  out_lin_ = AddLinear(*attention, "out_lin", d, d);
  sa_layer_norm_ = AddLayerNorm(*this, "sa_layer_norm", d, c.layer_norm_eps);
  auto ffn_holder = Holder(*this, "ffn");
  lin1_ = AddLinear(*ffn_holder, "lin1", d, ffn);
  lin2_ = AddLinear(*ffn_holder, "lin2", ffn, d);
  output_layer_norm_ = AddLayerNorm(*this, "output_layer_norm", d, c.layer_norm_eps);
}

torch::Tensor DistilBertLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& bias, bool first_only) {
  const bool training = is_training();
  const torch::Tensor xq = first_only ? x.narrow(1, 0, 1) : x;  // the positions computed
  auto a = out_lin_(Attention(q_lin_(xq), k_lin_(x), v_lin_(x), bias, heads_, attention_dropout_, training));
  auto h = sa_layer_norm_(a + xq);
  auto f = Dropout(lin2_(torch::gelu(lin1_(h))), dropout_, training);  // FFN, erf GELU
  return output_layer_norm_(f + h);
}

DistilBertForSequenceClassificationImpl::DistilBertForSequenceClassificationImpl(const HfConfig& c) : config_(c) {
  const int64_t d = c.hidden_size;
  auto distilbert = Holder(*this, "distilbert");
  auto embeddings = Holder(*distilbert, "embeddings");
  word_embeddings_ = AddEmbedding(*embeddings, "word_embeddings", c.vocab_size, d, c.pad_token_id);
  position_embeddings_ = AddEmbedding(*embeddings, "position_embeddings", c.max_position_embeddings, d, std::nullopt);
  embeddings_norm_ = AddLayerNorm(*embeddings, "LayerNorm", d, c.layer_norm_eps);
  layer_ = Holder(*distilbert, "transformer")->register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer_->push_back(DistilBertLayer(c));
  pre_classifier_ = AddLinear(*this, "pre_classifier", d, d);
  classifier_ = AddLinear(*this, "classifier", d, static_cast<int64_t>(c.labels.size()));
}

torch::Tensor DistilBertForSequenceClassificationImpl::forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) {
  const bool training = is_training();
  const int64_t l = tokens.size(1);
  CheckLength(l, config_.max_position_embeddings);
  // Embeddings: word + position 0..L-1, LayerNorm, dropout.
  auto x = word_embeddings_(tokens) + position_embeddings_(torch::arange(l, tokens.options()));
  x = Dropout(embeddings_norm_(x), config_.hidden_dropout, training);  // [B, L, D]
  auto h = RunLayers<DistilBertLayerImpl>(layer_, plan_, x, KeyPaddingBias(pad_mask, x.options()));  // [B, 1, D]
  auto pooled = torch::relu(pre_classifier_(h.select(1, 0)));          // [B, D]
  return classifier_(Dropout(pooled, config_.classifier_dropout, training));  // [B, C]
}

HfNameRules DistilBertForSequenceClassificationImpl::NameRules(const HfConfig& c) {
  return HfNameRules{"distilbert.", {"pre_classifier.", "classifier."},
                     {"vocab_transform.", "vocab_layer_norm.", "vocab_projector.", "distilbert.embeddings.position_ids"},
                     c.initializer_range};
}

}  // namespace nightshift::trainer::hf
