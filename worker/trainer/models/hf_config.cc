#include "worker/trainer/models/hf_config.h"

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/format/json_depth.h"
#include "common/format/shard.h"
#include "worker/trainer/errors.h"

namespace nightshift::trainer {
namespace {

using nlohmann::json;

// config.json's value of `key`, or `fallback` when it is absent or null (transformers'
// config classes take their defaults then). A value of the wrong type names the key.
template <typename T>
T Get(const json& c, const std::string& path, const std::string& key, T fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  const json& v = c[key];
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
  else ok = v.is_string();
  if (!ok) throw PermanentError(path + ": " + key + " is " + v.dump() + ", not a value of the expected type");
  return v.get<T>();
}

void Require(bool ok, const std::string& path, const std::string& key, const json& value, const std::string& why) {
  if (!ok) throw PermanentError(path + ": " + key + " " + value.dump() + " is not supported: " + why);
}

// The value `key` must have (when present) for the architectures we implement.
void RequireValue(const json& c, const std::string& path, const std::string& key, const json& supported) {
  if (c.contains(key) && !c[key].is_null() && c[key] != supported)
    throw PermanentError(path + ": " + key + " " + c[key].dump() + " is not supported (only " + supported.dump() + ")");
}

// id2label {"0": name, ...} in index order; num_labels when there is none (transformers
// writes id2label always; very old configs had num_labels); 2 when neither.
std::vector<std::string> Labels(const json& c, const std::string& path) {
  std::vector<std::string> labels;
  if (c.contains("id2label") && !c["id2label"].is_null()) {
    const json& m = c["id2label"];
    if (!m.is_object() || m.empty()) throw PermanentError(path + ": id2label is not a non-empty object");
    if (m.size() > format::kMaxClasses)
      throw PermanentError(path + ": id2label has " + std::to_string(m.size()) + " labels, more than the " +
                           std::to_string(format::kMaxClasses) + " a classifier may have");
    labels.resize(m.size());
    for (const auto& [key, name] : m.items()) {
      size_t used = 0;
      long index = -1;
      try { index = std::stol(key, &used); } catch (const std::exception&) {}
      if (used != key.size() || index < 0 || index >= static_cast<long>(m.size()) || !name.is_string())
        throw PermanentError(path + ": id2label key \"" + key + "\" is not an index 0.." +
                             std::to_string(m.size() - 1) + " with a label name");
      labels[index] = name.get<std::string>();
    }
    return labels;
  }
  const int64_t n = Get<int64_t>(c, path, "num_labels", 2);
  if (n < 1) throw PermanentError(path + ": num_labels " + std::to_string(n) + " is not a count of labels");
  // Each label gets a name here and a row in the head: 10^11 of them is no model's.
  if (n > static_cast<int64_t>(format::kMaxClasses))
    throw PermanentError(path + ": num_labels " + std::to_string(n) + " is more than the " +
                         std::to_string(format::kMaxClasses) + " labels a classifier may have");
  for (int64_t i = 0; i < n; ++i) labels.push_back("LABEL_" + std::to_string(i));
  return labels;
}

// BertConfig / RobertaConfig (the same fields; RoBERTa's defaults differ in the ids only).
void ReadBertFields(const json& c, const std::string& path, HfConfig* h) {
  const bool roberta = h->model_type == "roberta";
  h->vocab_size = Get<int64_t>(c, path, "vocab_size", roberta ? 50265 : 30522);
  h->hidden_size = Get<int64_t>(c, path, "hidden_size", 768);
  h->num_hidden_layers = Get<int64_t>(c, path, "num_hidden_layers", 12);
  h->num_attention_heads = Get<int64_t>(c, path, "num_attention_heads", 12);
  h->intermediate_size = Get<int64_t>(c, path, "intermediate_size", 3072);
  h->max_position_embeddings = Get<int64_t>(c, path, "max_position_embeddings", 512);
  h->type_vocab_size = Get<int64_t>(c, path, "type_vocab_size", 2);
  h->layer_norm_eps = Get<double>(c, path, "layer_norm_eps", 1e-12);
  h->hidden_dropout = Get<double>(c, path, "hidden_dropout_prob", 0.1);
  h->attention_dropout = Get<double>(c, path, "attention_probs_dropout_prob", 0.1);
  h->classifier_dropout = Get<double>(c, path, "classifier_dropout", h->hidden_dropout);
  RequireValue(c, path, "hidden_act", "gelu");  // erf GELU; gelu_new etc. are other functions
  RequireValue(c, path, "position_embedding_type", "absolute");
  RequireValue(c, path, "is_decoder", false);
  RequireValue(c, path, "add_cross_attention", false);
  Require(h->type_vocab_size >= 1, path, "type_vocab_size", h->type_vocab_size, "token type 0 needs a row");
}

void ReadDistilBertFields(const json& c, const std::string& path, HfConfig* h) {
  h->vocab_size = Get<int64_t>(c, path, "vocab_size", 30522);
  h->hidden_size = Get<int64_t>(c, path, "dim", 768);
  h->num_hidden_layers = Get<int64_t>(c, path, "n_layers", 6);
  h->num_attention_heads = Get<int64_t>(c, path, "n_heads", 12);
  h->intermediate_size = Get<int64_t>(c, path, "hidden_dim", 4 * 768);
  h->max_position_embeddings = Get<int64_t>(c, path, "max_position_embeddings", 512);
  h->type_vocab_size = 0;
  h->layer_norm_eps = 1e-12;  // fixed in modeling_distilbert.py
  h->hidden_dropout = Get<double>(c, path, "dropout", 0.1);
  h->attention_dropout = Get<double>(c, path, "attention_dropout", 0.1);
  h->classifier_dropout = Get<double>(c, path, "seq_classif_dropout", 0.2);
  RequireValue(c, path, "activation", "gelu");
  // sinusoidal_pos_embds only changes how transformers initialises the position table; a
  // checkpoint holds the table either way, and transformers 5 trains it either way.
  (void)Get<bool>(c, path, "sinusoidal_pos_embds", false);
}

// GPT2Config. Its head is always the token embedding in transformers' GPT2LMHeadModel
// unless tie_word_embeddings says otherwise.
void ReadGpt2Fields(const json& c, const std::string& path, HfConfig* h) {
  h->vocab_size = Get<int64_t>(c, path, "vocab_size", 50257);
  h->hidden_size = Get<int64_t>(c, path, "n_embd", 768);
  h->num_hidden_layers = Get<int64_t>(c, path, "n_layer", 12);
  h->num_attention_heads = Get<int64_t>(c, path, "n_head", 12);
  h->intermediate_size = Get<int64_t>(c, path, "n_inner", 4 * h->hidden_size);
  h->max_position_embeddings = Get<int64_t>(c, path, "n_positions", 1024);
  h->layer_norm_eps = Get<double>(c, path, "layer_norm_epsilon", 1e-5);
  h->hidden_dropout = Get<double>(c, path, "resid_pdrop", 0.1);
  h->embedding_dropout = Get<double>(c, path, "embd_pdrop", 0.1);
  h->attention_dropout = Get<double>(c, path, "attn_pdrop", 0.1);
  h->classifier_dropout = 0;  // GPT2ForSequenceClassification's score has none
  h->tie_word_embeddings = Get<bool>(c, path, "tie_word_embeddings", true);
  h->qkv_bias = h->o_bias = h->mlp_bias = true;
  const std::string act = Get<std::string>(c, path, "activation_function", "gelu_new");
  Require(act == "gelu_new" || act == "gelu_pytorch_tanh", path, "activation_function", act,
          "only the tanh GELU (gelu_new, gelu_pytorch_tanh)");
  RequireValue(c, path, "scale_attn_weights", true);
  RequireValue(c, path, "scale_attn_by_inverse_layer_idx", false);
  RequireValue(c, path, "add_cross_attention", false);
}

// The rotary base: transformers 5's rope_parameters, or the older rope_theta / rope_scaling
// keys. Only the plain rotation is implemented.
void ReadRope(const json& c, const std::string& path, HfConfig* h) {
  h->rope_theta = Get<double>(c, path, "rope_theta", 10000.0);
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    const json& r = c[key];
    if (!r.is_object()) throw PermanentError(path + ": " + key + " is " + r.dump() + ", not an object");
    for (const char* type_key : {"rope_type", "type"})
      if (r.contains(type_key) && r[type_key] != "default")
        throw PermanentError(path + ": " + key + "." + type_key + " " + r[type_key].dump() +
                             " is not supported (only \"default\": no scaling)");
    if (r.contains("rope_theta")) h->rope_theta = Get<double>(r, path + ": " + key, "rope_theta", h->rope_theta);
  }
  Require(h->rope_theta > 0, path, "rope_theta", h->rope_theta, "the rotary base must be positive");
}

// LlamaConfig, MistralConfig, Qwen2Config: RMSNorm, rotary positions, SwiGLU, grouped-query
// attention. Qwen2 has biases on q, k, v (not o); Llama's attention_bias puts them on all four.
void ReadLlamaFields(const json& c, const std::string& path, HfConfig* h) {
  const std::string& t = h->model_type;
  h->vocab_size = Get<int64_t>(c, path, "vocab_size", t == "qwen2" ? 151936 : 32000);
  h->hidden_size = Get<int64_t>(c, path, "hidden_size", 4096);
  h->num_hidden_layers = Get<int64_t>(c, path, "num_hidden_layers", 32);
  h->num_attention_heads = Get<int64_t>(c, path, "num_attention_heads", 32);
  h->num_key_value_heads = Get<int64_t>(c, path, "num_key_value_heads", t == "mistral" ? 8 : h->num_attention_heads);
  h->intermediate_size = Get<int64_t>(c, path, "intermediate_size", t == "llama" ? 11008 : t == "mistral" ? 14336 : 22016);
  h->max_position_embeddings =
      Get<int64_t>(c, path, "max_position_embeddings", t == "llama" ? 2048 : t == "mistral" ? 131072 : 32768);
  h->head_dim = Get<int64_t>(c, path, "head_dim", h->num_attention_heads > 0 ? h->hidden_size / h->num_attention_heads : 0);
  h->layer_norm_eps = Get<double>(c, path, "rms_norm_eps", 1e-6);
  h->hidden_dropout = h->classifier_dropout = 0;  // these models have attention dropout only
  h->attention_dropout = Get<double>(c, path, "attention_dropout", 0.0);
  h->tie_word_embeddings = Get<bool>(c, path, "tie_word_embeddings", false);
  if (t == "qwen2") {
    h->qkv_bias = true;
    if (Get<bool>(c, path, "use_sliding_window", false)) h->sliding_window = Get<int64_t>(c, path, "sliding_window", 4096);
  } else {
    h->qkv_bias = h->o_bias = Get<bool>(c, path, "attention_bias", false);
    h->mlp_bias = Get<bool>(c, path, "mlp_bias", false);
    if (t == "mistral" && !(c.contains("sliding_window") && c["sliding_window"].is_null()))
      h->sliding_window = Get<int64_t>(c, path, "sliding_window", 4096);
  }
  RequireValue(c, path, "hidden_act", "silu");
  RequireValue(c, path, "pretraining_tp", 1);
  ReadRope(c, path, h);
}

// eos_token_id: an id or a list of them (Llama 3 lists several).
std::vector<int64_t> EosIds(const json& c, const std::string& path) {
  if (!c.contains("eos_token_id") || c["eos_token_id"].is_null()) return {};
  const json& e = c["eos_token_id"];
  if (!e.is_array()) return {Get<int64_t>(c, path, "eos_token_id", 0)};
  std::vector<int64_t> ids;
  for (const json& id : e) {
    if (!id.is_number_integer()) throw PermanentError(path + ": eos_token_id " + e.dump() + " is not a list of ids");
    ids.push_back(id.get<int64_t>());
  }
  return ids;
}

HfConfig Parse(const json& c, const std::string& path) {
  HfConfig h;
  h.model_type = Get<std::string>(c, path, "model_type", "");
  if (h.model_type == "bert" || h.model_type == "roberta") ReadBertFields(c, path, &h);
  else if (h.model_type == "distilbert") ReadDistilBertFields(c, path, &h);
  else if (h.model_type == "gpt2") ReadGpt2Fields(c, path, &h);
  else if (h.IsLlamaFamily()) ReadLlamaFields(c, path, &h);
  else
    throw PermanentError(path + ": model_type \"" + h.model_type +
                         "\" is not supported (bert, roberta, distilbert, gpt2, llama, mistral, qwen2)");
  h.initializer_range = Get<double>(c, path, "initializer_range", 0.02);
  if (h.decoder()) {  // no padding id unless config.json names one
    if (c.contains("pad_token_id") && !c["pad_token_id"].is_null()) h.pad_token_id = Get<int64_t>(c, path, "pad_token_id", 0);
    if (c.contains("bos_token_id") && !c["bos_token_id"].is_null()) h.bos_token_id = Get<int64_t>(c, path, "bos_token_id", 0);
    h.eos_token_ids = EosIds(c, path);
  } else {
    h.pad_token_id = Get<int64_t>(c, path, "pad_token_id", h.model_type == "roberta" ? 1 : 0);
    if (c.contains("pad_token_id") && c["pad_token_id"].is_null()) h.pad_token_id.reset();
  }
  h.labels = Labels(c, path);
  RequireValue(c, path, "problem_type", "single_label_classification");
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", h.vocab_size}, {"hidden size", h.hidden_size}, {"layers", h.num_hidden_layers},
      {"attention heads", h.num_attention_heads}, {"feed-forward size", h.intermediate_size},
      {"max_position_embeddings", h.max_position_embeddings}};
  // The trainer takes each as an int (model.layers, model.d_model, ...): one past it would wrap.
  for (const auto& [key, value] : sizes)
    if (value < 1 || value > std::numeric_limits<int32_t>::max())
      throw PermanentError(path + ": " + key + " " + std::to_string(value) + " is not a size");
  if (h.IsLlamaFamily()) {
    for (const auto& [key, value] : {std::pair<const char*, int64_t>{"num_key_value_heads", h.num_key_value_heads},
                                     {"head_dim", h.head_dim}})
      if (value < 1 || value > 65536) throw PermanentError(path + ": " + key + " " + std::to_string(value) + " is not a size");
    if (h.num_attention_heads % h.num_key_value_heads != 0)
      throw PermanentError(path + ": num_attention_heads " + std::to_string(h.num_attention_heads) +
                           " is not a multiple of num_key_value_heads " + std::to_string(h.num_key_value_heads));
    if (h.head_dim % 2 != 0) throw PermanentError(path + ": head_dim " + std::to_string(h.head_dim) + " is odd (rotary pairs)");
  } else if (h.hidden_size % h.num_attention_heads != 0)
    throw PermanentError(path + ": hidden size " + std::to_string(h.hidden_size) + " is not a multiple of the " +
                         std::to_string(h.num_attention_heads) + " attention heads");
  if (h.pad_token_id && (*h.pad_token_id < 0 || *h.pad_token_id >= h.vocab_size))
    throw PermanentError(path + ": pad_token_id " + std::to_string(*h.pad_token_id) + " is outside the vocabulary");
  return h;
}

}  // namespace

std::string ParseHfConfig(const std::string& text, const std::string& path, HfConfig* out) {
  if (!format::JsonDepthWithin(text))
    return path + ": nests deeper than " + std::to_string(format::kMaxJsonDepth) + " levels";
  const json c = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!c.is_object()) return path + ": not a JSON object";
  try {
    *out = Parse(c, path);
  } catch (const PermanentError& e) {  // the helpers above throw; values from here on
    return e.what();
  }
  return "";
}

}  // namespace nightshift::trainer
