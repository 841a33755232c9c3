// A Hugging Face model folder's config.json read into the fields our architectures use.
// Standard library and nlohmann-json only (no LibTorch), so that it can be fuzzed and
// tested on its own; the trainer reads it through ReadHfConfig (hf_weights.h).
#ifndef NIGHTSHIFT_WORKER_TRAINER_MODELS_HF_CONFIG_H_
#define NIGHTSHIFT_WORKER_TRAINER_MODELS_HF_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace nightshift::trainer {

// config.json, as transformers' config classes read it (their defaults for absent keys).
// DistilBERT's own names (dim, n_layers, n_heads, hidden_dim, activation, dropout,
// attention_dropout, seq_classif_dropout) land in the BERT-named fields, and so do GPT-2's
// (n_embd, n_layer, n_head, n_inner, n_positions, layer_norm_epsilon, resid_pdrop,
// attn_pdrop) and the Llama family's (rms_norm_eps).
struct HfConfig {
  std::string model_type;  // encoders: bert | roberta | distilbert; decoders: gpt2 | llama | mistral | qwen2
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;              // d_model (DistilBERT: dim)
  int64_t num_hidden_layers = 0;        // DistilBERT: n_layers
  int64_t num_attention_heads = 0;      // DistilBERT: n_heads
  int64_t intermediate_size = 0;        // feed-forward width (DistilBERT: hidden_dim)
  int64_t max_position_embeddings = 0;  // rows of the position table
  int64_t type_vocab_size = 0;          // rows of the token-type table (DistilBERT: none, 0)
  double layer_norm_eps = 1e-12;        // DistilBERT: always 1e-12
  std::optional<int64_t> pad_token_id;  // the embeddings' padding_idx (no gradient on its row)
  double hidden_dropout = 0.1;          // hidden_dropout_prob (DistilBERT: dropout)
  double attention_dropout = 0.1;       // attention_probs_dropout_prob (DistilBERT: attention_dropout)
  double classifier_dropout = 0.1;      // classifier_dropout, else hidden_dropout (DistilBERT: seq_classif_dropout)
  double initializer_range = 0.02;      // std of a new head's weights
  std::vector<std::string> labels;      // id2label in index order ("LABEL_i" when absent; 2 by default)

  // Decoders only.
  double embedding_dropout = 0;          // GPT-2's embd_pdrop (after the embeddings)
  int64_t num_key_value_heads = 0;       // grouped-query attention: heads of keys and values
  int64_t head_dim = 0;                  // width of one head (Llama family's head_dim; else hidden / heads)
  double rope_theta = 10000;             // rotary position base (rope_parameters.rope_theta or rope_theta)
  bool tie_word_embeddings = false;      // the LM head is the token embedding (GPT-2: always)
  bool qkv_bias = false, o_bias = false;  // attention projections' biases (Qwen2: q, k, v; attention_bias: all)
  bool mlp_bias = false;                 // the feed-forward projections' biases (Llama's mlp_bias)
  std::optional<int64_t> sliding_window;  // Mistral / Qwen2: keys further back are not seen
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;    // eos_token_id: one id or a list (generation stops at any)

  bool decoder() const { return model_type == "gpt2" || IsLlamaFamily(); }
  bool IsLlamaFamily() const { return model_type == "llama" || model_type == "mistral" || model_type == "qwen2"; }
};

// config.json's text -> *out. "" or what is wrong, starting with `path` (the file, for
// the message) and naming the key and the value: not a JSON object, an unsupported
// model_type or a value we do not implement (hidden_act / activation other than gelu,
// position_embedding_type other than absolute, is_decoder, a rope_scaling / rope_type
// other than default, GPT-2's activation_function other than the tanh GELU, ...), a size
// that is not one.
std::string ParseHfConfig(const std::string& text, const std::string& path, HfConfig* out);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MODELS_HF_CONFIG_H_
