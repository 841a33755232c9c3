#include "worker/trainer/models/llama.h"

#include "worker/trainer/memory/activation_checkpoint.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/models/common.h"

namespace nightshift::trainer::hf {
namespace {

Projection AddProjection(torch::nn::Module& parent, const std::string& name, int64_t in, int64_t out, bool bias) {
  return parent.register_module(name, NewLinear(in, out, bias));
}

// x [B, H, L, Dh] rotated: x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1).
torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  auto halves = x.chunk(2, -1);
  return x * cos + torch::cat({-halves[1], halves[0]}, -1) * sin;
}

}  // namespace

RmsNormImpl::RmsNormImpl(int64_t d, double eps) : eps_(eps) { weight_ = register_parameter("weight", torch::ones({d})); }

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  auto h = x.to(torch::kFloat);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight_ * h.to(x.scalar_type());
}

LlamaLayerImpl::LlamaLayerImpl(const HfConfig& c)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim),
      attention_dropout_(c.attention_dropout) {
  const int64_t d = c.hidden_size, q = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
  input_layernorm_ = register_module("input_layernorm", RmsNorm(d, c.layer_norm_eps));
  auto attn = Holder(*this, "self_attn");
  q_proj_ = AddProjection(*attn, "q_proj", d, q, c.qkv_bias);
  k_proj_ = AddProjection(*attn, "k_proj", d, kv, c.qkv_bias);
  v_proj_ = AddProjection(*attn, "v_proj", d, kv, c.qkv_bias);
  o_proj_ = AddProjection(*attn, "o_proj", q, d, c.o_bias);
  post_attention_layernorm_ = register_module("post_attention_layernorm", RmsNorm(d, c.layer_norm_eps));
  auto mlp = Holder(*this, "mlp");
  gate_proj_ = AddProjection(*mlp, "gate_proj", d, c.intermediate_size, c.mlp_bias);
  up_proj_ = AddProjection(*mlp, "up_proj", d, c.intermediate_size, c.mlp_bias);
  down_proj_ = AddProjection(*mlp, "down_proj", c.intermediate_size, d, c.mlp_bias);
}

torch::Tensor LlamaLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& rope, const torch::Tensor& spans,
                                      KvCache* cache, size_t layer) {
  const int64_t b = x.size(0), l = x.size(1);
  auto h = AsProjectionInput(input_layernorm_(x), q_proj_->weight);
  auto heads = [&](const torch::Tensor& t, int64_t n) { return t.view({b, l, n, head_dim_}).transpose(1, 2); };
  const torch::Tensor cos = rope[0].to(x.scalar_type()), sin = rope[1].to(x.scalar_type());
  auto q = Rotate(heads(q_proj_(h), heads_), cos, sin);
  auto [k, v] = CacheKv(cache, layer, Rotate(heads(k_proj_(h), kv_heads_), cos, sin), heads(v_proj_(h), kv_heads_));
  auto out = x + o_proj_(CausalAttention(q, k, v, spans, attention_dropout_, is_training()));
  h = AsProjectionInput(post_attention_layernorm_(out), gate_proj_->weight);
  return out + down_proj_(torch::silu(gate_proj_(h)) * up_proj_(h));
}

LlamaModelImpl::LlamaModelImpl(const HfConfig& c) : config_(c) {
  inv_freq_ = 1.0 / torch::pow(c.rope_theta, torch::arange(0, c.head_dim, 2, torch::kLong).to(torch::kFloat) / double(c.head_dim));
  embed_tokens_ = AddEmbedding(*this, "embed_tokens", c.vocab_size, c.hidden_size, c.pad_token_id);
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers_->push_back(LlamaLayer(c));
  norm_ = register_module("norm", RmsNorm(c.hidden_size, c.layer_norm_eps));
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& tokens, const Segments& segments, KvCache* cache) {
  const int64_t start = cache ? cache->length() : 0, l = tokens.size(1);
  if (config_.sliding_window && start + l > *config_.sliding_window)
    throw PermanentError("a sequence of " + std::to_string(start + l) + " tokens is longer than config.json's sliding_window " +
                         std::to_string(*config_.sliding_window) + ", which is not implemented: lower max_len");
  auto positions = segments.defined() ? segments.positions : torch::arange(start, start + l, tokens.options()).unsqueeze(0);
  auto freqs = positions.to(torch::kFloat).unsqueeze(-1) * inv_freq_.to(tokens.device());  // [B or 1, L, Dh / 2]
  auto angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);                               // [B or 1, 1, L, Dh]
  const torch::Tensor rope = torch::stack({angles.cos(), angles.sin()});
  auto x = embed_tokens_(tokens);
  const torch::Tensor spans = segments.defined() ? segments.Spans() : torch::Tensor();
  for (size_t i = 0; i < layers_->size(); ++i) {
    std::shared_ptr<LlamaLayerImpl> layer = layers_->ptr<LlamaLayerImpl>(i);
    BlockForward run = [layer, rope, cache, i](const torch::Tensor& in, const torch::Tensor& m) {
      return layer->forward(in, rope, m, cache, i);
    };
    x = plan.Run(i, run, x, spans, /*cached=*/cache != nullptr);
  }
  return norm_(x);
}

}  // namespace nightshift::trainer::hf
