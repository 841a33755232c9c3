// What the Hugging Face encoders (bert.cc, roberta.cc, distilbert.cc) truly share: named
// holder modules (so parameter names are the checkpoint's: attention.self.query.weight),
// the key-padding bias, attention (SDPA, or explicit with our dropout) and the layer
// stack's checkpointing.
// Everything that differs between the architectures is in their own files.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_COMMON_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_COMMON_H_

#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "worker/trainer/memory/activation_checkpoint.h"
#include "worker/trainer/models/dropout.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/errors.h"

namespace nightshift::trainer::hf {

// An empty module registered under `name`: a level of the checkpoint's name tree
// ("attention", "self") that holds submodules and no code.
inline std::shared_ptr<torch::nn::Module> Holder(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>(name));
}

// While one is alive on this thread, NewLinear, AddEmbedding and the decoders' own large
// parameters are allocated but not written (torch::empty: their pages are not resident
// until written), for LoadPretrained, which then fills every parameter (a view of the
// folder's mapping, a copy, or a new head's initialisation; hf_weights.h) or fails. So
// ranks that share a folder's mapping never hold a private copy of the model while they
// build it. Outside one, LibTorch's initialisation (a model from scratch, a resume).
class DeferInit {
 public:
  DeferInit() : previous_(active_) { active_ = true; }
  ~DeferInit() { active_ = previous_; }
  DeferInit(const DeferInit&) = delete;
  DeferInit& operator=(const DeferInit&) = delete;
  static bool active() { return active_; }

 private:
  static inline thread_local bool active_ = false;
  bool previous_;
};

// A model from scratch built under DeferInit (its constructors' random draws not made),
// written as its constructors would have written it: each linear layer's and embedding's
// reset_parameters() in the modules' order, which is the order they were built in, so
// from the generator's state at the build the draws are the eager build's (norms are
// written at construction and draw nothing). before(p) runs before p is written (sharding
// full cuts each block as this passes it: FullyShardedAdamW::ShardBefore). Throws if a
// parameter is of another kind of module (it would stay unwritten).
void InitAsBuilt(torch::nn::Module& model, const std::function<void(const torch::Tensor&)>& before);

// `t` (a parameter) reallocated unwritten with `shape`.
inline void Unwritten(torch::Tensor& t, c10::IntArrayRef shape) {
  torch::NoGradGuard no_grad;
  t.set_data(torch::empty(shape, t.options()));
}

// A projection (lora.h: a Linear that may carry a LoRA update).
inline Projection NewLinear(int64_t in, int64_t out, bool bias = true) {
  if (!DeferInit::active()) return Projection(torch::nn::LinearOptions(in, out).bias(bias));
  Projection linear(torch::nn::LinearOptions(1, 1).bias(bias));
  linear->options.in_features(in).out_features(out);
  Unwritten(linear->weight, {out, in});
  if (bias) Unwritten(linear->bias, {out});
  return linear;
}

inline Projection AddLinear(torch::nn::Module& parent, const std::string& name, int64_t in, int64_t out) {
  return parent.register_module(name, NewLinear(in, out));
}

inline torch::nn::LayerNorm AddLayerNorm(torch::nn::Module& parent, const std::string& name, int64_t d, double eps) {
  return parent.register_module(name, torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(eps)));
}

inline HfEmbedding AddEmbedding(torch::nn::Module& parent, const std::string& name, int64_t rows, int64_t d,
                                std::optional<int64_t> padding_idx) {
  auto options = torch::nn::EmbeddingOptions(rows, d);
  if (padding_idx) options.padding_idx(*padding_idx);  // no gradient reaches that row, as in torch
  if (!DeferInit::active()) return parent.register_module(name, HfEmbedding(options));
  HfEmbedding embedding(torch::nn::EmbeddingOptions(1, d));
  embedding->options = options;
  Unwritten(embedding->weight, {rows, d});
  return parent.register_module(name, embedding);
}

// Additive key-padding bias [B, 1, 1, L] from pad_mask [B, L] (true at padding): 0 for
// tokens, -inf for padding (transformers adds the dtype's minimum; both give padded keys
// a probability of exactly 0, and every row keeps its first, real, key).
inline torch::Tensor KeyPaddingBias(const torch::Tensor& pad_mask, const torch::TensorOptions& options) {
  return torch::zeros(pad_mask.sizes(), options)
      .masked_fill_(pad_mask, -std::numeric_limits<float>::infinity())
      .view({pad_mask.size(0), 1, 1, pad_mask.size(1)});
}

// Multi-head attention of projected queries q [B, Lq, D] over keys and values k, v
// [B, L, D] with `heads` heads: softmax(q k^T / sqrt(D / heads) + bias) v, dropout p on
// the probabilities in training. Returns [B, Lq, D].
//
// Two paths, as the native blocks have (model.h): SDPA (fused kernels; never materialises
// the [B, H, Lq, L] probabilities), unless dropout applies to them on the CPU. There SDPA
// falls back to its unfused form with ATen's dropout, whose serial bernoulli_ mask is
// slow and kept for backward; the explicit path draws it with dropout.h's counter-based
// mask instead (recomputed from its seed, and RNG-exact under activation checkpointing).
inline torch::Tensor Attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& bias, int64_t heads, double p, bool training) {
  const int64_t b = q.size(0), d = q.size(2), dh = d / heads;
  auto split = [&](const torch::Tensor& t) { return t.view({b, t.size(1), heads, dh}).transpose(1, 2); };  // [B, H, L, Dh]
  torch::Tensor y;
  if (training && p > 0 && q.device().is_cpu()) {
    auto scores = torch::matmul(split(q), split(k).transpose(-2, -1)).mul_(1.0 / std::sqrt(double(dh)));
    if (bias.defined()) scores = scores + bias;
    y = torch::matmul(Dropout(torch::softmax(scores, -1), p, true), split(v));
  } else {
    std::optional<torch::Tensor> mask;
    if (bias.defined()) mask = bias;
    y = at::scaled_dot_product_attention(split(q), split(k), split(v), mask, training ? p : 0.0);
  }
  return y.transpose(1, 2).reshape({b, q.size(1), d});
}

// Runs `layers` (a ModuleList of modules with forward(x, bias, first_only)) in order,
// checkpointing every N-th layer's activations (activation_checkpoint.h; 0: none). The
// heads read position 0 alone, so the last layer computes past its keys and values that
// position only: the result is [B, 1, D], equal to the whole stack's output at position 0.
template <typename LayerImpl>
torch::Tensor RunLayers(torch::nn::ModuleList& layers, const BlockPlan& plan, torch::Tensor x, const torch::Tensor& bias) {
  for (size_t i = 0; i < layers->size(); ++i) {
    std::shared_ptr<LayerImpl> layer = layers->ptr<LayerImpl>(i);
    const bool first_only = i + 1 == layers->size();
    BlockForward run = [layer, first_only](const torch::Tensor& in, const torch::Tensor& b) {
      return layer->forward(in, b, first_only);
    };
    x = plan.Run(i, run, x, bias);
  }
  return x;
}

// Throws naming the config key when a batch is longer than the position table.
inline void CheckLength(int64_t positions_needed, int64_t max_position_embeddings) {
  if (positions_needed > max_position_embeddings)
    throw PermanentError("a batch needs position " + std::to_string(positions_needed - 1) +
                         ", beyond config.json's max_position_embeddings " + std::to_string(max_position_embeddings) +
                         ": lower max_len");
}

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_COMMON_H_
