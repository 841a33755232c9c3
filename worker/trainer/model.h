// The models the trainer trains, behind one interface (SequenceModel):
// - transformer_classifier: BERT-style encoder, pre-LN: each block computes
//     x = x + Dropout(Attention(LayerNorm(x)))   x = x + Dropout(FFN(LayerNorm(x)))
//   and a final LayerNorm follows the last block; the first (CLS/bos) position is pooled.
// - gpt_lm: the same blocks with a causal mask (position t sees positions <= t), a final
//   LayerNorm and a vocabulary head: logits [B, L, V]; position t predicts token t + 1.
// - torchscript: a module loaded from model.path whose forward(tokens, pad_mask) returns
//   logits ([B, C] for classification data, [B, L, V] for language-model data).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODEL_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODEL_H_

#include <torch/torch.h>

#include "worker/trainer/batching.h"
#include "worker/trainer/config.h"

namespace nightshift::trainer {

// One encoder block: its own module so activation checkpointing can wrap it.
class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t d_model, int64_t heads, int64_t ffn, double dropout);
  // x: float [B, L, D]; attn_bias: float [B, 1, 1, L], 0 for tokens, -inf for padding.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& attn_bias);

 private:
  int64_t heads_;
  double dropout_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(TransformerBlock);

// What the loop needs of a model: logits from tokens and a padding mask.
class SequenceModel : public torch::nn::Module {
 public:
  // tokens: int64 [B, L]; pad_mask: bool [B, L], true at padding (at the end of a row).
  virtual torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) = 0;
  // Checkpoint every N-th block's activations (activation_checkpoint.h); 0: none.
  // Models without built-in blocks (torchscript) ignore it.
  virtual void set_activation_checkpointing(int every_n_blocks) { (void)every_n_blocks; }
};

// What the built-in architectures share: token + position embeddings, the blocks and a
// final LayerNorm, registered in this order (tok_emb, pos_emb, blocks, ln_f) before the
// subclass's head, so parameter order and checkpoint names are the same for both.
class TransformerTrunk : public SequenceModel {
 public:
  void set_activation_checkpointing(int every_n_blocks) override { checkpoint_every_ = every_n_blocks; }

 protected:
  TransformerTrunk(const ModelConfig& model, int64_t vocab_size, int64_t pad_id);
  // Embeddings of `tokens` [B, L] with dropout: [B, L, D]. Checks L <= max_len.
  torch::Tensor Embed(const torch::Tensor& tokens);
  // The blocks, activation-checkpointed as set.
  torch::Tensor Blocks(const torch::Tensor& x, const torch::Tensor& attn_bias);
  torch::Tensor FinalNorm(const torch::Tensor& x) { return ln_f_(x); }
  double dropout() const { return dropout_; }

 private:
  int checkpoint_every_ = 0;
  int64_t max_len_;
  double dropout_;
  torch::nn::Embedding tok_emb_{nullptr}, pos_emb_{nullptr};
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
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(TransformerClassifier);

// The GPT-style decoder language model (see the top of the file).
class GptLMImpl : public TransformerTrunk {
 public:
  GptLMImpl(const ModelConfig& model, int64_t vocab_size, int64_t pad_id);
  // Returns logits [B, L, V].
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& pad_mask) override;

 private:
  torch::nn::Linear head_{nullptr};
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

// The objective. Classification: logits [B, C] against batch.labels, one term per
// sample. Next-token (language models): logits [B, L, V]; position t predicts token
// t + 1; positions whose target is padding count nothing.
struct LossSum {
  torch::Tensor sum;  // float scalar: the sum of the per-term cross-entropies
  int64_t count = 0;  // terms (samples or predicted tokens): the mean is sum / count
};
LossSum ComputeLossSum(const torch::Tensor& logits, const Batch& batch, bool next_token);
int64_t LossCount(const Batch& batch, bool next_token);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODEL_H_
