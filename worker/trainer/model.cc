#include "worker/trainer/model.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace nightshift::trainer {

namespace F = torch::nn::functional;

TransformerBlockImpl::TransformerBlockImpl(int64_t d_model, int64_t heads, int64_t ffn,
                                           double dropout)
    : heads_(heads), dropout_(dropout) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
  qkv_ = register_module("qkv", torch::nn::Linear(d_model, 3 * d_model));
  proj_ = register_module("proj", torch::nn::Linear(d_model, d_model));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
  fc1_ = register_module("fc1", torch::nn::Linear(d_model, ffn));
  fc2_ = register_module("fc2", torch::nn::Linear(ffn, d_model));
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& attn_bias) {
  const int64_t b = x.size(0), l = x.size(1), d = x.size(2), dh = d / heads_;
  // qkv: [B, L, 3, H, Dh] -> [3, B, H, L, Dh]
  auto qkv = qkv_(ln1_(x)).view({b, l, 3, heads_, dh}).permute({2, 0, 3, 1, 4});
  auto q = qkv[0], k = qkv[1], v = qkv[2];
  auto scores = torch::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(double(dh)));
  auto attn = torch::softmax(scores + attn_bias, -1);                 // [B, H, L, L]
  attn = F::dropout(attn, F::DropoutFuncOptions().p(dropout_).training(is_training()));
  auto y = torch::matmul(attn, v).transpose(1, 2).reshape({b, l, d});  // [B, L, D]
  auto h = x + F::dropout(proj_(y), F::DropoutFuncOptions().p(dropout_).training(is_training()));
  auto f = fc2_(torch::gelu(fc1_(ln2_(h))));
  return h + F::dropout(f, F::DropoutFuncOptions().p(dropout_).training(is_training()));
}

TransformerClassifierImpl::TransformerClassifierImpl(const ModelConfig& m, int64_t vocab_size,
                                                     int64_t num_classes, int64_t pad_id)
    : max_len_(m.max_len), dropout_(m.dropout) {
  tok_emb_ = register_module(
      "tok_emb", torch::nn::Embedding(torch::nn::EmbeddingOptions(vocab_size, m.d_model)
                                          .padding_idx(pad_id)));
  pos_emb_ = register_module("pos_emb", torch::nn::Embedding(m.max_len, m.d_model));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < m.layers; ++i)
    blocks_->push_back(TransformerBlock(m.d_model, m.heads, m.ffn, m.dropout));
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({m.d_model})));
  head_ = register_module("head", torch::nn::Linear(m.d_model, num_classes));
}

torch::Tensor TransformerClassifierImpl::forward(const torch::Tensor& tokens,
                                                 const torch::Tensor& pad_mask) {
  TORCH_CHECK(tokens.size(1) <= max_len_, "batch length ", tokens.size(1),
              " exceeds model.max_len ", max_len_);
  const int64_t l = tokens.size(1);
  auto pos = torch::arange(l, tokens.options());
  auto x = tok_emb_(tokens) + pos_emb_(pos).unsqueeze(0);  // [B, L, D]
  x = F::dropout(x, F::DropoutFuncOptions().p(dropout_).training(is_training()));
  // Additive key-padding bias: -inf removes padded keys from every softmax exactly.
  auto attn_bias = torch::zeros(pad_mask.sizes(), x.options())
                       .masked_fill_(pad_mask, -std::numeric_limits<float>::infinity())
                       .view({pad_mask.size(0), 1, 1, l});
  for (const auto& block : *blocks_) x = block->as<TransformerBlock>()->forward(x, attn_bias);
  auto cls = ln_f_(x.select(1, 0));  // [B, D]
  cls = F::dropout(cls, F::DropoutFuncOptions().p(dropout_).training(is_training()));
  return head_(cls);
}

TransformerClassifier BuildModel(const ModelConfig& model, int64_t vocab_size,
                                 int64_t num_classes, int64_t pad_id) {
  if (model.arch != "transformer_classifier")
    throw std::runtime_error("model.arch " + model.arch + " not supported by this trainer yet");
  return TransformerClassifier(model, vocab_size, num_classes, pad_id);
}

}  // namespace nightshift::trainer
