#include "worker/trainer/models/bert.h"

#include "worker/trainer/models/dropout.h"
#include "worker/trainer/models/common.h"

namespace nightshift::trainer::hf {

BertLayerImpl::BertLayerImpl(const HfConfig& c)
    : heads_(c.num_attention_heads), hidden_dropout_(c.hidden_dropout), attention_dropout_(c.attention_dropout) {
  const int64_t d = c.hidden_size, ffn = c.intermediate_size;
  auto attention = Holder(*this, "attention");
  auto self = Holder(*attention, "self");
  query_ = AddLinear(*self, "query", d, d);
  key_ = AddLinear(*self, "key", d, d);
  value_ = AddLinear(*self, "value", d, d);
  auto attention_output = Holder(*attention, "output");
  attention_dense_ = AddLinear(*attention_output, "dense", d, d);
  attention_norm_ = AddLayerNorm(*attention_output, "LayerNorm", d, c.layer_norm_eps);
  intermediate_ = AddLinear(*Holder(*this, "intermediate"), "dense", d, ffn);
  auto output = Holder(*this, "output");
  output_dense_ = AddLinear(*output, "dense", ffn, d);
  output_norm_ = AddLayerNorm(*output, "LayerNorm", d, c.layer_norm_eps);
}

torch::Tensor BertLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& bias, bool first_only) {
  const bool training = is_training();
  const torch::Tensor xq = first_only ? x.narrow(1, 0, 1) : x;  // the positions computed
  auto a = Attention(query_(xq), key_(x), value_(x), bias, heads_, attention_dropout_, training);
  auto h = attention_norm_(Dropout(attention_dense_(a), hidden_dropout_, training) + xq);  // BertSelfOutput
  auto i = torch::gelu(intermediate_(h));                                                 // erf GELU
  return output_norm_(Dropout(output_dense_(i), hidden_dropout_, training) + h);           // BertOutput
}

BertEncoderImpl::BertEncoderImpl(const HfConfig& c) {
  layer_ = register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer_->push_back(BertLayer(c));
}

torch::Tensor BertEncoderImpl::forward(const torch::Tensor& x, const torch::Tensor& bias) {
  return RunLayers<BertLayerImpl>(layer_, plan, x, bias);
}

BertForSequenceClassificationImpl::BertForSequenceClassificationImpl(const HfConfig& c) : config_(c) {
  const int64_t d = c.hidden_size;
  auto bert = Holder(*this, "bert");
  auto embeddings = Holder(*bert, "embeddings");
  word_embeddings_ = AddEmbedding(*embeddings, "word_embeddings", c.vocab_size, d, c.pad_token_id);
  position_embeddings_ = AddEmbedding(*embeddings, "position_embeddings", c.max_position_embeddings, d, std::nullopt);
  token_type_embeddings_ = AddEmbedding(*embeddings, "token_type_embeddings", c.type_vocab_size, d, std::nullopt);
  embeddings_norm_ = AddLayerNorm(*embeddings, "LayerNorm", d, c.layer_norm_eps);
  encoder_ = bert->register_module("encoder", BertEncoder(c));
  pooler_ = AddLinear(*Holder(*bert, "pooler"), "dense", d, d);
  classifier_ = AddLinear(*this, "classifier", d, static_cast<int64_t>(c.labels.size()));
}

// BertEmbeddings: (word + token type 0) + position, LayerNorm, dropout.
torch::Tensor BertForSequenceClassificationImpl::Embed(const torch::Tensor& tokens) {
  const int64_t l = tokens.size(1);
  CheckLength(l, config_.max_position_embeddings);
  auto positions = torch::arange(l, tokens.options());
  auto x = word_embeddings_(tokens) + token_type_embeddings_->weight[0];  // [B, L, D]
  x = x + position_embeddings_(positions);
  return Dropout(embeddings_norm_(x), config_.hidden_dropout, is_training());
}

torch::Tensor BertForSequenceClassificationImpl::forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) {
  auto x = Embed(tokens);
  auto h = encoder_(x, KeyPaddingBias(pad_mask, x.options()));            // [B, 1, D]
  auto pooled = torch::tanh(pooler_(h.select(1, 0)));                      // BertPooler: [B, D]
  return classifier_(Dropout(pooled, config_.classifier_dropout, is_training()));  // [B, C]
}

HfNameRules BertForSequenceClassificationImpl::NameRules(const HfConfig& c) {
  return HfNameRules{"bert.", {"classifier."}, {"cls.", "bert.embeddings.position_ids"}, c.initializer_range};
}

}  // namespace nightshift::trainer::hf
