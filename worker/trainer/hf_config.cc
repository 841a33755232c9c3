#include "worker/trainer/hf_config.h"

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

HfConfig Parse(const json& c, const std::string& path) {
  HfConfig h;
  h.model_type = Get<std::string>(c, path, "model_type", "");
  if (h.model_type == "bert" || h.model_type == "roberta") ReadBertFields(c, path, &h);
  else if (h.model_type == "distilbert") ReadDistilBertFields(c, path, &h);
  else throw PermanentError(path + ": model_type \"" + h.model_type + "\" is not supported (bert, roberta, distilbert)");
  h.initializer_range = Get<double>(c, path, "initializer_range", 0.02);
  h.pad_token_id = Get<int64_t>(c, path, "pad_token_id", h.model_type == "roberta" ? 1 : 0);
  if (c.contains("pad_token_id") && c["pad_token_id"].is_null()) h.pad_token_id.reset();
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
  if (h.hidden_size % h.num_attention_heads != 0)
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
