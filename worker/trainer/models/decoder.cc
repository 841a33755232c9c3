#include "worker/trainer/models/decoder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "worker/trainer/models/dropout.h"
#include "worker/trainer/models/common.h"

namespace nightshift::trainer::hf {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Each of the Hkv heads of k [B, Hkv, L, Dh] repeated for its H / Hkv query heads, in
// transformers' order (repeat_kv): [B, H, L, Dh].
torch::Tensor RepeatKv(const torch::Tensor& k, int64_t heads) {
  const int64_t b = k.size(0), hkv = k.size(1), l = k.size(2), dh = k.size(3);
  if (hkv == heads) return k;
  return k.unsqueeze(2).expand({b, hkv, heads / hkv, l, dh}).reshape({b, heads, l, dh});
}

// The causal mask of the last lq of l positions: query i sees keys <= l - lq + i. [Lq, L].
torch::Tensor CausalBias(int64_t lq, int64_t l, const torch::TensorOptions& options) {
  return torch::full({lq, l}, kNegInf, options).triu(l - lq + 1);
}

}  // namespace

torch::Tensor Segments::Spans() const {
  const torch::Tensor cpu = ids.to(torch::kCPU).contiguous();
  const int64_t rows = cpu.size(0), l = cpu.size(1);
  const int64_t* id = cpu.data_ptr<int64_t>();
  std::vector<int64_t> spans;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t s = 0, e; s < l; s = e) {
      for (e = s + 1; e < l && id[r * l + e] == id[r * l + s];) ++e;
      spans.insert(spans.end(), {r, s, e - s});
    }
  return torch::tensor(spans, torch::kLong).view({-1, 3});
}

namespace {

// The additive mask [B, 1, L, L] of spans (Segments::Spans): 0 where query t may see key
// s (s <= t, same span), -inf elsewhere.
torch::Tensor SpanMask(const torch::Tensor& spans, int64_t b, int64_t l, const torch::TensorOptions& options) {
  torch::Tensor mask = torch::full({b, 1, l, l}, kNegInf, options);
  const auto span = spans.accessor<int64_t, 2>();
  for (int64_t i = 0; i < spans.size(0); ++i)
    mask[span[i][0]][0].narrow(0, span[i][1], span[i][2]).narrow(1, span[i][1], span[i][2]).copy_(
        CausalBias(span[i][2], span[i][2], options));
  return mask;
}

// Causal SDPA inside each span, its outputs side by side again: [B, H, L, Dh]. Cut by
// unbind and split_with_sizes, whose backward is one stack or cat (a narrow's would be a
// zero tensor of the whole input per span).
torch::Tensor SpanAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& spans, double drop) {
  const auto span = spans.accessor<int64_t, 2>();
  const std::vector<torch::Tensor> q_rows = q.unbind(0), k_rows = k.unbind(0), v_rows = v.unbind(0);
  std::vector<torch::Tensor> rows;
  for (int64_t i = 0; i < spans.size(0);) {
    const int64_t r = span[i][0];
    std::vector<int64_t> lengths;
    for (; i < spans.size(0) && span[i][0] == r; ++i) lengths.push_back(span[i][2]);
    const auto qs = q_rows[r].split_with_sizes(lengths, 1), ks = k_rows[r].split_with_sizes(lengths, 1),
               vs = v_rows[r].split_with_sizes(lengths, 1);
    std::vector<torch::Tensor> parts;
    for (size_t j = 0; j < lengths.size(); ++j)
      parts.push_back(at::scaled_dot_product_attention(qs[j].unsqueeze(0), ks[j].unsqueeze(0), vs[j].unsqueeze(0),
                                                       std::nullopt, drop, /*is_causal=*/true).squeeze(0));
    rows.push_back(torch::cat(parts, 1));
  }
  return torch::stack(rows, 0);
}

}  // namespace

torch::Tensor CausalAttention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, const torch::Tensor& spans,
                              double p, bool training) {
  const int64_t b = q.size(0), heads = q.size(1), lq = q.size(2), dh = q.size(3), l = k.size(2);
  TORCH_CHECK(!spans.defined() || lq == l, "CausalAttention: packed rows without a cache");
  k = RepeatKv(k, heads);
  v = RepeatKv(v, heads);
  torch::Tensor y;
  if (training && p > 0 && q.device().is_cpu()) {  // our dropout (common.h's Attention says why)
    auto scores = torch::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(double(dh)));
    if (spans.defined()) scores = scores + SpanMask(spans, b, l, scores.options());
    else if (lq > 1) scores = scores + CausalBias(lq, l, scores.options());
    y = torch::matmul(Dropout(torch::softmax(scores, -1), p, true), v);
  } else {
    const double drop = training ? p : 0.0;
    if (spans.defined()) y = SpanAttention(q, k, v, spans, drop);
    else if (lq == l) y = at::scaled_dot_product_attention(q, k, v, std::nullopt, drop, /*is_causal=*/true);
    else if (lq == 1) y = at::scaled_dot_product_attention(q, k, v, std::nullopt, drop);
    else y = at::scaled_dot_product_attention(q, k, v, CausalBias(lq, l, q.options()), drop);
  }
  return y.transpose(1, 2).reshape({b, lq, heads * dh});
}

std::pair<torch::Tensor, torch::Tensor> CacheKv(KvCache* cache, size_t layer, const torch::Tensor& k,
                                                const torch::Tensor& v) {
  if (cache == nullptr) return {k, v};
  if (cache->keys.size() <= layer) {
    cache->keys.push_back(k);
    cache->values.push_back(v);
  } else {
    cache->keys[layer] = torch::cat({cache->keys[layer], k}, 2);
    cache->values[layer] = torch::cat({cache->values[layer], v}, 2);
  }
  return {cache->keys[layer], cache->values[layer]};
}

DecoderModelImpl::DecoderModelImpl(const HfConfig& c, const std::string& task, const std::string& base,
                                   std::shared_ptr<DecoderTrunk> trunk)
    : config_(c), causal_lm_(task == "causal_lm"), trunk_(register_module(base, std::move(trunk))) {
  const int64_t d = c.hidden_size;
  if (!causal_lm_)
    head_ = register_module("score", NewLinear(d, int64_t(c.labels.size()), /*bias=*/false));
  else if (!c.tie_word_embeddings)
    head_ = register_module("lm_head", NewLinear(d, c.vocab_size, /*bias=*/false));
}

torch::Tensor DecoderModelImpl::Head(const torch::Tensor& h) {
  if (head_) return head_(h);
  const torch::Tensor tied = trunk_->token_embedding();  // a frozen half-precision table computes in it
  if (tied.scalar_type() == h.scalar_type()) return torch::nn::functional::linear(h, tied);
  return torch::nn::functional::linear(h.to(tied.scalar_type()), tied).to(h.scalar_type());
}

torch::Tensor DecoderModelImpl::forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) {
  const torch::Tensor h = trunk_->forward(tokens, Segments{}, nullptr);  // [B, L, D]
  if (causal_lm_) return Head(h);
  torch::Tensor last;  // [B]
  if (config_.pad_token_id) {  // the rightmost token that is not the padding id (transformers)
    auto positions = torch::arange(tokens.size(1), tokens.options());
    last = (positions * tokens.ne(*config_.pad_token_id)).argmax(-1);
  } else {
    last = pad_mask.logical_not().sum(1).sub(1).clamp_min(0);
  }
  return Head(h.index({torch::arange(tokens.size(0), tokens.options()), last}));  // [B, C]
}

torch::Tensor DecoderModelImpl::forward_packed(const torch::Tensor& tokens, const torch::Tensor& positions,
                                               const torch::Tensor& segments) {
  if (!causal_lm_) throw std::runtime_error("packed rows are for model.task causal_lm");
  return Head(trunk_->forward(tokens, Segments{positions, segments}, nullptr));
}

std::pair<torch::Tensor, torch::Tensor> DecoderModelImpl::HiddenAndHead(const torch::Tensor& tokens,
                                                                        const torch::Tensor& pad_mask,
                                                                        const torch::Tensor& positions,
                                                                        const torch::Tensor& segments) {
  (void)pad_mask;  // causal: padding at the ends of rows is never attended to by real tokens
  if (!causal_lm_) return {};
  const Segments packed = segments.defined() ? Segments{positions, segments} : Segments{};
  return {trunk_->forward(tokens, packed, nullptr), head_ ? head_->weight : trunk_->token_embedding()};
}

torch::Tensor DecoderModelImpl::forward_cached(const torch::Tensor& tokens, KvCache* cache) {
  return Head(trunk_->forward(tokens, Segments{}, cache));
}

HfNameRules DecoderModelImpl::NameRules(const HfConfig& c, const std::string& task, const std::string& base) {
  HfNameRules rules{base + ".", {}, {}, c.initializer_range};
  if (task == "causal_lm") {
    if (c.tie_word_embeddings) rules.ignored.push_back("lm_head.");  // some files hold the tied copy too
    else rules.head.push_back("lm_head.");
    rules.ignored.push_back("score.");
  } else {
    rules.head.push_back("score.");
    rules.ignored.push_back("lm_head.");
  }
  // GPT-2 files of transformers 3/4 hold the causal-mask buffers.
  if (c.model_type == "gpt2") rules.ignored_suffixes = {".attn.bias", ".attn.masked_bias"};
  return rules;
}

std::vector<int64_t> Generate(DecoderModelImpl& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const std::vector<int64_t>& stop, bool use_cache, TokenPicker pick) {
  torch::NoGradGuard no_grad;
  if (!pick) pick = [](const torch::Tensor& logits) { return logits.argmax().item<int64_t>(); };
  std::vector<int64_t> sequence = prompt, generated;
  const torch::Device device = model.parameters().front().device();
  auto row = [&](const std::vector<int64_t>& ids) { return torch::tensor(ids, torch::kLong).view({1, -1}).to(device); };
  KvCache cache;
  torch::Tensor logits = model.forward_cached(row(prompt), use_cache ? &cache : nullptr);
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t next = pick(logits[0][-1].to(torch::kCPU, torch::kFloat));
    generated.push_back(next);
    sequence.push_back(next);
    if (std::find(stop.begin(), stop.end(), next) != stop.end() || i + 1 == max_new_tokens) break;
    logits = use_cache ? model.forward_cached(row({next}), &cache) : model.forward_cached(row(sequence), nullptr);
  }
  return generated;
}

}  // namespace nightshift::trainer::hf
