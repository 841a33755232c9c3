// What the Hugging Face decoders (gpt2.cc, llama.cc) share: causal attention with grouped
// key/value heads and a key/value cache, the two heads (...ForCausalLM's vocabulary
// projection, ...ForSequenceClassification's score of the last token) around a trunk, and
// greedy generation. Everything that differs between the architectures is in their files.
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_DECODER_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_DECODER_H_

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/trainer/models/hf_config.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/models/hf_weights.h"
#include "worker/trainer/models/model.h"

namespace nightshift::trainer::hf {

// The keys and values a decoder has computed so far, per layer [B, Hkv, T, Dh]: a new token
// attends over them instead of recomputing the prefix. Empty: nothing computed yet.
struct KvCache {
  std::vector<torch::Tensor> keys, values;
  int64_t length() const { return keys.empty() ? 0 : keys[0].size(2); }
};

// Packed rows (several samples in one row, batching.h): per position, the sample's own
// position (0 at each sample's start) and a segment number; attention stays inside a
// segment (a block-diagonal causal mask). Undefined tensors: one sample per row.
struct Segments {
  torch::Tensor positions;  // int64 [B, L]
  torch::Tensor ids;        // int64 [B, L]
  bool defined() const { return ids.defined(); }
  // The segments as spans: int64 [S, 3] on the CPU, (row, start, length) in row order,
  // covering every position. A segment's positions are contiguous (Collate packs them so,
  // its padding a segment of its own): query t sees key s when s <= t in its span.
  torch::Tensor Spans() const;
};

// Causal attention of q [B, H, Lq, Dh] over k, v [B, Hkv, L, Dh] (L >= Lq; the queries are
// the last Lq positions), Hkv dividing H (each key/value head serves H / Hkv query heads).
// spans: packed rows' segments (Segments::Spans; Lq == L), attended one span at a time, as
// flash-attention's variable-length kernels do (a block-diagonal mask would compute every
// query against every key of its row), or undefined: causal over the whole row.
// Dropout p on the probabilities in training (explicit path on the CPU, as common.h's
// Attention; SDPA otherwise). Returns [B, Lq, H * Dh].
torch::Tensor CausalAttention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, const torch::Tensor& spans,
                              double p, bool training);

// Appends k, v [B, Hkv, Lq, Dh] to layer `layer` of `cache` (when set) and returns the
// layer's keys and values so far.
std::pair<torch::Tensor, torch::Tensor> CacheKv(KvCache* cache, size_t layer, const torch::Tensor& k,
                                                const torch::Tensor& v);

// A decoder's base model (GPT2Model, LlamaModel): tokens in, final hidden states out.
class DecoderTrunk : public torch::nn::Module {
 public:
  // tokens: int64 [B, L], the positions after cache->length() (cache may be null: from 0);
  // segments: packed rows (undefined: none). Returns [B, L, D], the final norm applied.
  virtual torch::Tensor forward(const torch::Tensor& tokens, const Segments& segments, KvCache* cache) = 0;
  virtual torch::Tensor token_embedding() = 0;  // [V, D]: the tied vocabulary head
  virtual std::vector<std::shared_ptr<torch::nn::Module>> layers() = 0;  // in order
  BlockPlan plan;  // how the layers run (activation_checkpoint.h)
};

// model.task: causal_lm (...ForCausalLM, GPT2LMHeadModel) or classification
// (...ForSequenceClassification).
class DecoderModelImpl : public SequenceModel {
 public:
  // `trunk` is registered under `base` ("transformer", "model"); the head is "lm_head"
  // (untied causal LM), the embedding (tied) or "score" (classification, no bias).
  DecoderModelImpl(const HfConfig& config, const std::string& task, const std::string& base,
                   std::shared_ptr<DecoderTrunk> trunk);
  // Causal LM: logits [B, L, V] (position t predicts token t + 1). Classification: [B, C],
  // the score of each row's last token that is not pad_token_id (transformers' rule; with
  // no pad_token_id, the last token pad_mask leaves).
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) override;
  // Causal LM on packed rows: as forward, attention and positions kept inside segments.
  torch::Tensor forward_packed(const torch::Tensor& tokens, const torch::Tensor& positions,
                               const torch::Tensor& segments) override;
  // Causal LM: the trunk's hidden states and the head's weight (lm_head, or the tied
  // embedding), for the chunked loss (model.h); classification: undefined.
  std::pair<torch::Tensor, torch::Tensor> HiddenAndHead(const torch::Tensor& tokens, const torch::Tensor& pad_mask,
                                                        const torch::Tensor& positions,
                                                        const torch::Tensor& segments) override;
  // Causal LM: the logits [B, L, V] of `tokens` continuing `cache` (which grows by L).
  torch::Tensor forward_cached(const torch::Tensor& tokens, KvCache* cache);
  BlockPlan* block_plan() override { return &trunk_->plan; }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() override { return trunk_->layers(); }
  bool causal_lm() const { return causal_lm_; }

  // Names: base prefix "<base>.", head "lm_head." or "score."; the other task's head and
  // the buffers old checkpoints saved are dropped.
  static HfNameRules NameRules(const HfConfig& config, const std::string& task, const std::string& base);

 private:
  torch::Tensor Head(const torch::Tensor& h);  // [.., D] -> [.., V] or [.., C]
  HfConfig config_;
  bool causal_lm_;
  std::shared_ptr<DecoderTrunk> trunk_;
  Projection head_{nullptr};  // lm_head or score; null: tied to the embedding
};
TORCH_MODULE(DecoderModel);

// Picks the next token from the last position's logits [V] (float): argmax (greedy) by default.
using TokenPicker = std::function<int64_t(const torch::Tensor& logits)>;

// Continuation of `prompt` by `max_new_tokens` tokens (fewer when one of `stop` is produced;
// it is included), as model.generate: the prompt runs once, then each new token alone over
// the key/value cache. With the default picker, greedy: model.generate(do_sample=False).
// use_cache false recomputes the whole sequence for every token (the benchmark's baseline;
// the same tokens). The model should be in evaluation mode.
std::vector<int64_t> Generate(DecoderModelImpl& model, const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                              const std::vector<int64_t>& stop, bool use_cache = true, TokenPicker pick = nullptr);

}  // namespace nightshift::trainer::hf

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_DECODER_H_
