#include "worker/trainer/models/gpt2.h"

#include "worker/trainer/memory/activation_checkpoint.h"
#include "worker/trainer/models/dropout.h"
#include "worker/trainer/models/common.h"

namespace nightshift::trainer::hf {

Gpt2BlockImpl::Gpt2BlockImpl(const HfConfig& c)
    : heads_(c.num_attention_heads), hidden_dropout_(c.hidden_dropout), attention_dropout_(c.attention_dropout) {
  const int64_t d = c.hidden_size;
  ln_1_ = AddLayerNorm(*this, "ln_1", d, c.layer_norm_eps);
  auto attn = Holder(*this, "attn");
  c_attn_ = attn->register_module("c_attn", Conv1D(d, 3 * d));
  c_proj_ = attn->register_module("c_proj", Conv1D(d, d));
  ln_2_ = AddLayerNorm(*this, "ln_2", d, c.layer_norm_eps);
  auto mlp = Holder(*this, "mlp");
  c_fc_ = mlp->register_module("c_fc", Conv1D(d, c.intermediate_size));
  mlp_proj_ = mlp->register_module("c_proj", Conv1D(c.intermediate_size, d));
}

torch::Tensor Gpt2BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& spans, KvCache* cache, size_t layer) {
  const bool training = is_training();
  const int64_t b = x.size(0), l = x.size(1), d = x.size(2), dh = d / heads_;
  auto qkv = c_attn_(ln_1_(x)).split(d, -1);
  auto heads = [&](const torch::Tensor& t) { return t.view({b, l, heads_, dh}).transpose(1, 2); };  // [B, H, L, Dh]
  auto [k, v] = CacheKv(cache, layer, heads(qkv[1]), heads(qkv[2]));
  auto a = CausalAttention(heads(qkv[0]), k, v, spans, attention_dropout_, training);
  auto h = x + Dropout(c_proj_(a), hidden_dropout_, training);
  auto m = mlp_proj_(torch::gelu(c_fc_(ln_2_(h)), "tanh"));
  return h + Dropout(m, hidden_dropout_, training);
}

Gpt2ModelImpl::Gpt2ModelImpl(const HfConfig& c) : config_(c) {
  wte_ = AddEmbedding(*this, "wte", c.vocab_size, c.hidden_size, std::nullopt);
  wpe_ = AddEmbedding(*this, "wpe", c.max_position_embeddings, c.hidden_size, std::nullopt);
  h_ = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) h_->push_back(Gpt2Block(c));
  ln_f_ = AddLayerNorm(*this, "ln_f", c.hidden_size, c.layer_norm_eps);
}

torch::Tensor Gpt2ModelImpl::forward(const torch::Tensor& tokens, const Segments& segments, KvCache* cache) {
  const int64_t start = cache ? cache->length() : 0, l = tokens.size(1);
  CheckLength(start + l, config_.max_position_embeddings);
  auto positions = segments.defined() ? segments.positions : torch::arange(start, start + l, tokens.options());
  auto x = Dropout(wte_(tokens) + wpe_(positions), config_.embedding_dropout, is_training());
  const torch::Tensor spans = segments.defined() ? segments.Spans() : torch::Tensor();
  for (size_t i = 0; i < h_->size(); ++i) {
    std::shared_ptr<Gpt2BlockImpl> block = h_->ptr<Gpt2BlockImpl>(i);
    BlockForward run = [block, cache, i](const torch::Tensor& in, const torch::Tensor& m) {
      return block->forward(in, m, cache, i);
    };
    x = plan.Run(i, run, x, spans, /*cached=*/cache != nullptr);
  }
  return ln_f_(x);
}

}  // namespace nightshift::trainer::hf
