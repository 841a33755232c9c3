// The models the trainer trains, behind one interface (SequenceModel):
// - transformer_classifier: BERT-style encoder, pre-LN: each block computes
//     x = x + Dropout(Attention(LayerNorm(x)))   x = x + Dropout(FFN(LayerNorm(x)))
//   and a final LayerNorm follows the last block; model.pooling cls pools the first
//   (CLS/bos) position, mean the mean over the row's real tokens.
// - gpt_lm: GPT-2 exactly: the same blocks with a causal mask (position t sees positions
//   <= t) and tanh-approximate GELU, a final LayerNorm and the token embedding as the
//   vocabulary head (tied): logits [B, L, V]; position t predicts token t + 1. The
//   classifier's blocks use exact GELU.
// - torchscript: a module loaded from model.path whose forward(tokens, pad_mask) returns
//   logits ([B, C] for classification data, [B, L, V] for language-model data).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_MODEL_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_MODEL_H_

#include <torch/torch.h>

#include <stdexcept>

#include "worker/trainer/data/batching.h"
#include "worker/trainer/memory/activation_checkpoint.h"
#include "worker/trainer/config.h"
#include "worker/trainer/models/lm_loss.h"
#include "worker/trainer/models/lora.h"

namespace nightshift::trainer {

// One pre-LN block: its own module so activation checkpointing can wrap it.
//
// Attention takes one of two paths with the same result (tests compare them):
// - fused: at::scaled_dot_product_attention (LibTorch's flash-attention kernel on the CPU,
//   fused kernels on CUDA), which never materialises the [B, H, L, L] scores. Taken
//   whenever no dropout is applied to the attention probabilities (attention_dropout 0,
//   or evaluation), since the fused kernels have no dropout of their own on the CPU;
// - explicit: scores, additive bias, softmax, our dropout (dropout.h), times V. Taken for
//   attention_dropout > 0 in training.
// A causal block (gpt_lm) lets position t see keys <= t. The fused path then ignores the
// padding bias: padding sits at the end of a row, so a real query never reaches a padded
// key, and padded positions contribute nothing to the loss.
class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t d_model, int64_t heads, int64_t ffn, double dropout,
                       double attention_dropout, bool causal);
  // x: float [B, L, D]; attn_bias: float [B, 1, 1, L], 0 for tokens, -inf for padding
  // (undefined: no padding).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& attn_bias);
  // The block's output at position 0 only, [B, 1, D]: equal to forward(x, attn_bias)
  // narrowed to position 0, but keys and values are the only per-position work (the
  // query, attention, projection and feed-forward run for position 0 alone). For a
  // non-causal block whose other outputs nobody reads (the classifier's last block).
  torch::Tensor forward_first(const torch::Tensor& x, const torch::Tensor& attn_bias);
  // For tests and benchmarks: always take the explicit path (false: as described above).
  void set_force_explicit_attention(bool on) { force_explicit_ = on; }

 private:
  torch::Tensor Attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& attn_bias);
  // The residual attention and feed-forward branches on h [B, Lq, D] given the attention
  // output y [B, H, Lq, Dh].
  torch::Tensor Residuals(const torch::Tensor& x, const torch::Tensor& y);
  int64_t heads_;
  double dropout_, attention_dropout_;
  bool causal_, force_explicit_ = false;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  hf::Projection qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(TransformerBlock);

// What the loop needs of a model: logits from tokens and a padding mask.
class SequenceModel : public torch::nn::Module {
 public:
  // tokens: int64 [B, L]; pad_mask: bool [B, L], true at padding (at the end of a row).
  virtual torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) = 0;
  // Packed rows (batching.h Batch::segments): positions and segments int64 [B, L];
  // attention stays inside a segment. Only the Hugging Face decoders (models/decoder.h)
  // take them; the others throw.
  virtual torch::Tensor forward_packed(const torch::Tensor& tokens, const torch::Tensor& positions,
                                       const torch::Tensor& segments) {
    (void)tokens, (void)positions, (void)segments;
    throw std::runtime_error("this model does not take packed rows (train.batching.rows: padded)");
  }
  // A language model whose head is a plain vocabulary projection: the final hidden states
  // [B, L, D] (of packed rows when segments is defined) and the head's weight [V, D], for
  // NextTokenLossSum's chunked loss. Others: undefined tensors (the loss takes the logits).
  virtual std::pair<torch::Tensor, torch::Tensor> HiddenAndHead(const torch::Tensor& tokens,
                                                                const torch::Tensor& pad_mask,
                                                                const torch::Tensor& positions,
                                                                const torch::Tensor& segments) {
    (void)tokens, (void)pad_mask, (void)positions, (void)segments;
    return {};
  }
  // How the transformer blocks run (activation_checkpoint.h: which are checkpointed,
  // which have sharded parameters), and the block modules, in order. Models without
  // built-in blocks (torchscript): null and none.
  virtual BlockPlan* block_plan() { return nullptr; }
  virtual std::vector<std::shared_ptr<torch::nn::Module>> blocks() { return {}; }
  // Checkpoint every N-th block's activations; 0: none.
  void set_activation_checkpointing(int every_n_blocks) {
    if (BlockPlan* plan = block_plan()) plan->checkpoint_every = every_n_blocks;
  }
  // torchscript: writes the (trained) TorchScript module and returns true; others: false.
  virtual bool SaveScripted(std::ostream& out) {
    (void)out;
    return false;
  }
};

// What the built-in architectures share: token + position embeddings, the blocks and a
// final LayerNorm, registered in this order (tok_emb, pos_emb, blocks, ln_f) before the
// subclass's head, so parameter order and checkpoint names are the same for both.
class TransformerTrunk : public SequenceModel {
 public:
  BlockPlan* block_plan() override { return &plan_; }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() override { return blocks_->children(); }
  // Every block takes the explicit attention path (tests, benchmarks).
  void set_force_explicit_attention(bool on);

 protected:
  TransformerTrunk(const ModelConfig& model, int64_t vocab_size, int64_t pad_id, bool causal);
  // Embeddings of `tokens` [B, L] with dropout: [B, L, D]. Checks L <= max_len.
  torch::Tensor Embed(const torch::Tensor& tokens);
  // The blocks, activation-checkpointed as set. first_only: the last block computes
  // position 0 only (forward_first), and the result is [B, 1, D].
  torch::Tensor Blocks(const torch::Tensor& x, const torch::Tensor& attn_bias, bool first_only = false);
  torch::Tensor FinalNorm(const torch::Tensor& x) { return ln_f_(x); }
  const torch::Tensor& token_embedding() const { return tok_emb_->weight; }  // [V, D]
  double dropout() const { return dropout_; }

 private:
  BlockPlan plan_;
  int64_t max_len_;
  double dropout_;
  hf::HfEmbedding tok_emb_{nullptr}, pos_emb_{nullptr};
  torch::nn::ModuleList blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
};

class TransformerClassifierImpl : public TransformerTrunk {
 public:
  TransformerClassifierImpl(const ModelConfig& model, int64_t vocab_size, int64_t num_classes,
                            int64_t pad_id);
  // tokens: int64 [B, L]; pad_mask: bool [B, L], true at padding. Returns logits [B, C].
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) override;

 private:
  bool mean_pooling_;  // model.pooling mean: every position of the last block is computed
  hf::Projection head_{nullptr};
};
TORCH_MODULE(TransformerClassifier);

// The GPT-style decoder language model (see the top of the file).
class GptLMImpl : public TransformerTrunk {
 public:
  GptLMImpl(const ModelConfig& model, int64_t vocab_size, int64_t pad_id);
  // Returns logits [B, L, V].
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) override;
};
TORCH_MODULE(GptLM);

// The built-in classifier (model.arch transformer_classifier; throws for other archs).
TransformerClassifier BuildModel(const ModelConfig& model, int64_t vocab_size,
                                 int64_t num_classes, int64_t pad_id);

// The model named by model.arch: transformer_classifier, gpt_lm or torchscript (loaded
// from model.path; its parameters and buffers become this module's, names with '.'
// replaced by "__", so checkpoints and the optimizer see them). Throws with the reason.
std::shared_ptr<SequenceModel> BuildSequenceModel(const ModelConfig& model, int64_t vocab_size,
                                                  int64_t num_classes, int64_t pad_id);

// Training FLOPs per token (forward and backward) that the model needs, as torchtitan and
// PaLM count them: 6 x non-embedding parameters (2 FLOPs per weight forward, 4 backward)
// + 12 x layers x d_model x seq_len (attention scores and their product with V, forward
// and backward), where seq_len is the length a token attends over (a batch's row length).
// The classifier's last block (pooling cls; every arch pretrained encoder, whose layers have
// the same parameters) runs only keys and values per token; the rest
// of it, the final norm and the head run once per row (forward_first), so they count
// 1/seq_len.
// torchscript models count 6 x parameters only (their shape is unknown).
double TrainingFlopsPerToken(int64_t non_embedding_params, const ModelConfig& model, double seq_len);

// The objective. Classification: logits [B, C] against batch.labels, one term per
// sample. Next-token (language models): logits [B, L, V]; position t predicts token
// t + 1; only targets NextTokenTargets marks count.
struct LossSum {
  torch::Tensor sum;  // float scalar: the sum of the per-term cross-entropies
  int64_t count = 0;  // terms (samples or predicted tokens): the mean is sum / count
};
LossSum ComputeLossSum(const torch::Tensor& logits, const Batch& batch, bool next_token);
int64_t LossCount(const Batch& batch, bool next_token);
// bool [B, L - 1]: whether token t + 1 is a target that counts (batch.target_mask; without
// one, every token that is not padding).
torch::Tensor NextTokenTargets(const Batch& batch);

// The model's logits for a batch: forward_packed for packed rows, else forward.
torch::Tensor Logits(SequenceModel& model, const Batch& batch);

// Training's next-token loss: ComputeLossSum(Logits(model, batch), batch, true), but where
// the model gives HiddenAndHead (the Hugging Face decoders), the head and loss run a chunk
// of tokens at a time and the logits are never whole (lm_loss.h).
LossSum NextTokenLossSum(SequenceModel& model, const Batch& batch);
// Evaluation's counterpart (no gradients): where the model gives HiddenAndHead and rows
// are at least 2 tokens long, fills `sums` (loss sum, correct next-token argmaxes) a chunk
// at a time and returns true; otherwise false (the caller takes the logits).
bool NextTokenEvalSums(SequenceModel& model, const Batch& batch, LmEvalSums* sums);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_MODEL_H_
