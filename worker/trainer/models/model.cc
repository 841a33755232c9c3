#include "worker/trainer/models/model.h"

#include <torch/script.h>

#include "common/io/atomic_file.h"
#include "worker/trainer/memory/activation_checkpoint.h"
#include "worker/trainer/models/common.h"
#include "worker/trainer/models/dropout.h"
#include "worker/trainer/models/lm_loss.h"

#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace nightshift::trainer {

namespace F = torch::nn::functional;

namespace {

// Runs the blocks as `plan` says (activation_checkpoint.h); with first_only
// the last block computes position 0 only.
torch::Tensor RunBlocks(torch::nn::ModuleList& blocks, const BlockPlan& plan, torch::Tensor x,
                        const torch::Tensor& attn_bias, bool first_only) {
  for (size_t i = 0; i < blocks->size(); ++i) {
    std::shared_ptr<TransformerBlockImpl> block = blocks->ptr<TransformerBlockImpl>(i);
    const bool first = first_only && i + 1 == blocks->size();
    BlockForward run = [block, first](const torch::Tensor& in, const torch::Tensor& bias) {
      return first ? block->forward_first(in, bias) : block->forward(in, bias);
    };
    x = plan.Run(i, run, x, attn_bias);
  }
  return x;
}

// Additive key-padding bias [B, 1, 1, L]: 0 for tokens, -inf for padding, which removes
// padded keys from every softmax exactly.
torch::Tensor KeyPaddingBias(const torch::Tensor& pad_mask, const torch::TensorOptions& options) {
  return torch::zeros(pad_mask.sizes(), options)
      .masked_fill_(pad_mask, -std::numeric_limits<float>::infinity())
      .view({pad_mask.size(0), 1, 1, pad_mask.size(1)});
}

// A TorchScript module as a SequenceModel (shares its parameter and buffer tensors).
class TorchScriptModel : public SequenceModel {
 public:
  // The file at `path`, read once beneath `roots` (ModelConfig::data_roots).
  TorchScriptModel(const std::string& path, const std::vector<std::string>& roots) {
    std::string bytes;
    if (std::string e = io::ReadFileBeneath(roots, path, uint64_t{1} << 36, &bytes); !e.empty())
      throw std::runtime_error("model.path: " + e);
    try {
      std::istringstream in(bytes);
      module_ = torch::jit::load(in);
    } catch (const c10::Error& e) {
      throw std::runtime_error("model.path " + path + ": cannot load a TorchScript module: " +
                               e.what_without_backtrace());
    }
    auto mangle = [](std::string name) {
      for (size_t at; (at = name.find('.')) != std::string::npos;) name.replace(at, 1, "__");
      return name;
    };
    for (const auto& p : module_.named_parameters(/*recurse=*/true))
      register_parameter(mangle(p.name), p.value, /*requires_grad=*/true);  // all trained
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) register_buffer(mangle(b.name), b.value);
    if (parameters().empty()) throw std::runtime_error("model.path " + path + ": the module has no parameters");
  }
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) override {
    return module_.forward({tokens, pad_mask}).toTensor();
  }
  void train(bool on) override {
    SequenceModel::train(on);
    module_.train(on);
  }
  bool SaveScripted(std::ostream& out) override {
    module_.save(out);  // shares the trained tensors
    return true;
  }

 private:
  torch::jit::Module module_;
};

}  // namespace

namespace hf {

void InitAsBuilt(torch::nn::Module& model, const std::function<void(const torch::Tensor&)>& before) {
  torch::NoGradGuard no_grad;
  std::set<const c10::TensorImpl*> written;
  for (const auto& m : model.modules(/*include_self=*/false)) {
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.get())) {
      before(linear->weight);
      linear->reset_parameters();
    } else if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(m.get())) {
      before(embedding->weight);
      embedding->reset_parameters();
    } else if (!dynamic_cast<torch::nn::LayerNormImpl*>(m.get())) {
      continue;
    }
    for (const torch::Tensor& p : m->parameters(/*recurse=*/false)) written.insert(p.unsafeGetTensorImpl());
  }
  for (const auto& p : model.named_parameters())
    if (!written.count(p.value().unsafeGetTensorImpl()))
      throw std::logic_error("InitAsBuilt: " + p.key() + " is not a linear layer's, an embedding's or a norm's");
}

}  // namespace hf

TransformerBlockImpl::TransformerBlockImpl(int64_t d_model, int64_t heads, int64_t ffn,
                                           double dropout, double attention_dropout, bool causal)
    : heads_(heads), dropout_(dropout), attention_dropout_(attention_dropout), causal_(causal) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
  qkv_ = register_module("qkv", hf::NewLinear(d_model, 3 * d_model));
  proj_ = register_module("proj", hf::NewLinear(d_model, d_model));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d_model})));
  fc1_ = register_module("fc1", hf::NewLinear(d_model, ffn));
  fc2_ = register_module("fc2", hf::NewLinear(ffn, d_model));
}

torch::Tensor TransformerBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& attn_bias) {
  const int64_t b = x.size(0), l = x.size(1), d = x.size(2), dh = d / heads_;
  // qkv: [B, L, 3, H, Dh] -> [3, B, H, L, Dh]
  auto qkv = qkv_(ln1_(x)).view({b, l, 3, heads_, dh}).permute({2, 0, 3, 1, 4});
  return Residuals(x, Attention(qkv[0], qkv[1], qkv[2], attn_bias));
}

torch::Tensor TransformerBlockImpl::forward_first(const torch::Tensor& x, const torch::Tensor& attn_bias) {
  TORCH_CHECK(!causal_, "forward_first is for non-causal blocks");
  const int64_t b = x.size(0), l = x.size(1), d = x.size(2), dh = d / heads_;
  auto n = ln1_(x);
  // Rows [0, D) of the fused projection make queries, [D, 3D) keys and values.
  const torch::Tensor& w = qkv_->weight;
  const torch::Tensor& bias = qkv_->bias;
  auto q = torch::nn::functional::linear(n.narrow(1, 0, 1), w.narrow(0, 0, d), bias.narrow(0, 0, d))
               .view({b, 1, heads_, dh}).transpose(1, 2);                                      // [B, H, 1, Dh]
  auto kv = torch::nn::functional::linear(n, w.narrow(0, d, 2 * d), bias.narrow(0, d, 2 * d))
                .view({b, l, 2, heads_, dh}).permute({2, 0, 3, 1, 4});                         // [2, B, H, L, Dh]
  return Residuals(x.narrow(1, 0, 1), Attention(q, kv[0], kv[1], attn_bias));
}

torch::Tensor TransformerBlockImpl::Residuals(const torch::Tensor& x, const torch::Tensor& attention) {
  const int64_t b = x.size(0), lq = x.size(1), d = x.size(2);
  auto y = attention.transpose(1, 2).reshape({b, lq, d});  // [B, Lq, D]
  auto h = x + Dropout(proj_(y), dropout_, is_training());
  auto f = fc2_(torch::gelu(fc1_(ln2_(h)), causal_ ? "tanh" : "none"));  // GPT-2: tanh
  return h + Dropout(f, dropout_, is_training());
}

// q, k, v: [B, H, L, Dh]; returns [B, H, L, Dh].
torch::Tensor TransformerBlockImpl::Attention(const torch::Tensor& q, const torch::Tensor& k,
                                              const torch::Tensor& v, const torch::Tensor& attn_bias) {
  const bool drop = is_training() && attention_dropout_ > 0;
  if (!drop && !force_explicit_) {
    // Causal: is_causal alone (SDPA takes no mask with it; see the class comment).
    std::optional<torch::Tensor> mask;  // an undefined tensor still counts as a mask
    if (!causal_ && attn_bias.defined()) mask = attn_bias;
    return at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0, /*is_causal=*/causal_);
  }
  const int64_t l = q.size(2);  // queries == keys for causal blocks (forward_first is not)
  torch::Tensor bias = attn_bias;
  if (causal_) {  // [L, L]: -inf above the diagonal, on the batch's device
    auto future = torch::ones({l, l}, q.options().dtype(torch::kBool)).triu(1);
    auto causal_bias = torch::zeros({l, l}, q.options()).masked_fill_(future, -std::numeric_limits<float>::infinity());
    bias = bias.defined() ? bias + causal_bias : causal_bias;
  }
  auto scores = torch::matmul(q, k.transpose(-2, -1)).mul_(1.0 / std::sqrt(double(q.size(3))));
  auto attn = torch::softmax(bias.defined() ? scores + bias : scores, -1);  // [B, H, L, L]
  attn = Dropout(attn, attention_dropout_, is_training());
  return torch::matmul(attn, v);
}

TransformerTrunk::TransformerTrunk(const ModelConfig& m, int64_t vocab_size, int64_t pad_id, bool causal)
    : max_len_(m.max_len), dropout_(m.dropout) {
  tok_emb_ = hf::AddEmbedding(*this, "tok_emb", vocab_size, m.d_model, pad_id);
  pos_emb_ = hf::AddEmbedding(*this, "pos_emb", m.max_len, m.d_model, std::nullopt);
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < m.layers; ++i)
    blocks_->push_back(TransformerBlock(m.d_model, m.heads, m.ffn, m.dropout, m.attention_dropout, causal));
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({m.d_model})));
}

torch::Tensor TransformerTrunk::Embed(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.size(1) <= max_len_, "batch length ", tokens.size(1),
              " exceeds model.max_len ", max_len_);
  auto pos = torch::arange(tokens.size(1), tokens.options());
  auto x = tok_emb_(tokens) + pos_emb_(pos).unsqueeze(0);  // [B, L, D]
  return Dropout(x, dropout_, is_training());
}

void TransformerTrunk::set_force_explicit_attention(bool on) {
  for (size_t i = 0; i < blocks_->size(); ++i) blocks_->ptr<TransformerBlockImpl>(i)->set_force_explicit_attention(on);
}

torch::Tensor TransformerTrunk::Blocks(const torch::Tensor& x, const torch::Tensor& attn_bias, bool first_only) {
  return RunBlocks(blocks_, plan_, x, attn_bias, first_only);
}

TransformerClassifierImpl::TransformerClassifierImpl(const ModelConfig& m, int64_t vocab_size,
                                                     int64_t num_classes, int64_t pad_id)
    : TransformerTrunk(m, vocab_size, pad_id, /*causal=*/false), mean_pooling_(m.pooling == "mean") {
  if (m.pooling != "cls" && m.pooling != "mean")
    throw std::runtime_error("model.pooling: unknown pooling '" + m.pooling + "' (expected cls or mean)");
  head_ = register_module("head", hf::NewLinear(m.d_model, num_classes));
}

torch::Tensor TransformerClassifierImpl::forward(const torch::Tensor& tokens,
                                                 const torch::Tensor& pad_mask) {
  auto x = Embed(tokens);
  auto attn_bias = KeyPaddingBias(pad_mask, x.options());
  torch::Tensor pooled;  // [B, D]
  if (mean_pooling_) {     // the mean of the final norm over each row's real tokens
    auto real = (~pad_mask).unsqueeze(-1).to(x.scalar_type());            // [B, L, 1]
    auto h = FinalNorm(Blocks(x, attn_bias));                               // [B, L, D]
    pooled = (h * real).sum(1) / real.sum(1).clamp_min(1);
  } else {  // cls: only the first position of the last block is read, so it computes that alone
    pooled = FinalNorm(Blocks(x, attn_bias, /*first_only=*/true).select(1, 0));
  }
  return head_(Dropout(pooled, dropout(), is_training()));
}

GptLMImpl::GptLMImpl(const ModelConfig& m, int64_t vocab_size, int64_t pad_id)
    : TransformerTrunk(m, vocab_size, pad_id, /*causal=*/true) {
  (void)vocab_size;  // the head is tok_emb's weight (tied, as GPT-2's)
}

torch::Tensor GptLMImpl::forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) {
  auto x = Embed(tokens);
  // The blocks are causal; the key-padding bias [B, 1, 1, L] is used by the explicit
  // attention path only. Padding is at the end of a row, so every query row keeps key 0.
  auto attn_bias = KeyPaddingBias(pad_mask, x.options());
  return torch::nn::functional::linear(FinalNorm(Blocks(x, attn_bias)), token_embedding());  // [B, L, V]
}

TransformerClassifier BuildModel(const ModelConfig& model, int64_t vocab_size,
                                 int64_t num_classes, int64_t pad_id) {
  if (model.arch != "transformer_classifier")
    throw std::invalid_argument("BuildModel makes a transformer_classifier, not model.arch " + model.arch +
                                ": use BuildSequenceModel");
  return TransformerClassifier(model, vocab_size, num_classes, pad_id);
}

}  // namespace nightshift::trainer

namespace nightshift::trainer {

std::shared_ptr<SequenceModel> BuildSequenceModel(const ModelConfig& model, int64_t vocab_size,
                                                  int64_t num_classes, int64_t pad_id) {
  if (model.arch == "transformer_classifier")
    return BuildModel(model, vocab_size, num_classes, pad_id).ptr();
  if (model.arch == "gpt_lm") return GptLM(model, vocab_size, pad_id).ptr();
  if (model.arch == "torchscript") {
    if (model.path.empty()) throw std::runtime_error("model.arch torchscript needs model.path");
    return std::make_shared<TorchScriptModel>(model.path, model.data_roots);
  }
  throw std::runtime_error("model.arch " + model.arch +
                           " is not supported (use transformer_classifier, gpt_lm or torchscript)");
}

double TrainingFlopsPerToken(int64_t non_embedding_params, const ModelConfig& m, double seq_len) {
  const double p = double(non_embedding_params);
  if (m.arch == "torchscript") return 6.0 * p;
  const double d = m.d_model, attention = 12.0 * d * seq_len;  // per token and block
  // The Hugging Face encoders' layers have our block's parameters, and their heads too
  // read position 0 alone.
  const bool first_only = (m.arch == "pretrained" && !m.pretrained_decoder) ||
                          (m.arch == "transformer_classifier" && m.pooling != "mean");
  if (!first_only) return 6.0 * p + m.layers * attention;
  const double block = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + 2.0 * d * m.ffn + m.ffn + d;  // 2 LN, qkv, proj, ffn
  const double kv = 2 * d * d + 2 * d;  // the last block's key and value projections
  const double per_row_params = p - (m.layers - 1) * block - kv;  // rest of the last block, final norm, head
  const double per_token = 6.0 * ((m.layers - 1) * block + kv) + (m.layers - 1) * attention;
  return per_token + (6.0 * per_row_params + attention) / std::max(seq_len, 1.0);
}

namespace {

// Next-token targets [B * (L - 1)] (L >= 2): token t + 1 where NextTokenTargets counts it, else -100.
torch::Tensor FlatNextTokenTargets(const Batch& batch) {
  const int64_t l = batch.tokens.size(1);
  return batch.tokens.narrow(1, 1, l - 1).reshape({-1}).masked_fill(NextTokenTargets(batch).logical_not().reshape({-1}), -100);
}

// What the chunked head and loss take (lm_loss.h): the hidden states of the positions among
// 0 .. L - 2 whose next token counts, as [N, D], the head's weight and their targets [N]
// (no copy when every position counts); undefined when the model has no
// HiddenAndHead. `*hidden_out`: the whole hidden states (for an empty result's zero).
struct FlatNextToken {
  torch::Tensor hidden, head, targets;
};
FlatNextToken FlatNextTokenInputs(SequenceModel& model, const Batch& batch, torch::Tensor* hidden_out) {
  auto [hidden, head] = model.HiddenAndHead(batch.tokens, batch.pad_mask, batch.positions, batch.segments);
  *hidden_out = hidden;
  const int64_t l = batch.tokens.size(1);
  if (!hidden.defined() || l < 2) return {};
  torch::Tensor flat = hidden.narrow(1, 0, l - 1).reshape({-1, hidden.size(2)}), targets = FlatNextTokenTargets(batch);
  // A frozen head kept in half precision (model.base_precision) computes in it.
  if (!head.requires_grad() && head.scalar_type() != flat.scalar_type()) flat = flat.to(head.scalar_type());
  // Only the positions that count go through the head: padding and prompts cost no LM-head
  // FLOPs (the head is most of a small decoder's: 58% of the benchmark's Llama).
  const torch::Tensor counted = targets.ne(-100).nonzero().squeeze(1);
  if (counted.size(0) < targets.size(0)) {
    flat = flat.index_select(0, counted);
    targets = targets.index_select(0, counted);
  }
  return {flat, head, targets};
}

}  // namespace

LossSum ComputeLossSum(const torch::Tensor& logits, const Batch& batch, bool next_token) {
  auto sum = F::CrossEntropyFuncOptions().reduction(torch::kSum);
  if (!next_token) return {F::cross_entropy(logits.to(torch::kFloat), batch.labels, sum), batch.samples};
  const int64_t l = logits.size(1), v = logits.size(2);
  TORCH_CHECK(l == batch.tokens.size(1), "language-model logits must be [B, L, V]");
  if (l < 2) return {logits.sum().to(torch::kFloat) * 0, 0};
  auto pred = logits.narrow(1, 0, l - 1).reshape({-1, v}).to(torch::kFloat);
  return {F::cross_entropy(pred, FlatNextTokenTargets(batch), sum.ignore_index(-100)), LossCount(batch, true)};
}

torch::Tensor NextTokenTargets(const Batch& batch) {
  const int64_t l = batch.tokens.size(1);
  if (batch.target_mask.defined()) return batch.target_mask.narrow(1, 1, l - 1);
  return batch.pad_mask.narrow(1, 1, l - 1).logical_not();
}

int64_t LossCount(const Batch& batch, bool next_token) {
  if (!next_token) return batch.samples;
  if (batch.tokens.size(1) < 2) return 0;
  return NextTokenTargets(batch).sum().item<int64_t>();
}

LossSum NextTokenLossSum(SequenceModel& model, const Batch& batch) {
  torch::Tensor hidden;
  const FlatNextToken in = FlatNextTokenInputs(model, batch, &hidden);
  if (!hidden.defined()) return ComputeLossSum(Logits(model, batch), batch, true);
  if (!in.hidden.defined()) return {hidden.sum().to(torch::kFloat) * 0, 0};  // rows of one token
  // Every position FlatNextTokenInputs keeps counts: no second pass over the batch's mask.
  return {LinearCrossEntropySum(in.hidden, in.head, in.targets), in.targets.size(0)};
}

bool NextTokenEvalSums(SequenceModel& model, const Batch& batch, LmEvalSums* sums) {
  if (batch.tokens.size(1) < 2) return false;  // nothing to predict (not run twice)
  torch::Tensor hidden;
  const FlatNextToken in = FlatNextTokenInputs(model, batch, &hidden);
  if (!in.hidden.defined()) return false;
  *sums = LinearCrossEntropyEval(in.hidden, in.head, in.targets);
  return true;
}

torch::Tensor Logits(SequenceModel& model, const Batch& batch) {
  if (batch.segments.defined()) return model.forward_packed(batch.tokens, batch.positions, batch.segments);
  return model.forward(batch.tokens, batch.pad_mask);
}

}  // namespace nightshift::trainer
