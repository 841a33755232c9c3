#include "worker/trainer/models/pretrained.h"

#include "worker/trainer/errors.h"
#include "worker/trainer/models/bert.h"
#include "worker/trainer/models/distilbert.h"
#include "worker/trainer/models/roberta.h"

namespace nightshift::trainer::hf {
namespace {

HfNameRules NameRules(const HfConfig& c) {
  if (c.model_type == "bert") return BertForSequenceClassificationImpl::NameRules(c);
  if (c.model_type == "roberta") return RobertaForSequenceClassificationImpl::NameRules(c);
  return DistilBertForSequenceClassificationImpl::NameRules(c);
}

// The folder's config with the job's options applied; *new_head: the labels differ, so
// the folder's head does not fit them.
HfConfig WithOptions(HfConfig c, const ClassifierOptions& options, bool* new_head) {
  *new_head = !options.labels.empty() && options.labels != c.labels;
  if (*new_head) c.labels = options.labels;
  if (options.dropout >= 0) c.hidden_dropout = c.classifier_dropout = options.dropout;
  if (options.attention_dropout >= 0) c.attention_dropout = options.attention_dropout;
  return c;
}

ClassifierOptions JobOptions(const TrainConfig& config) {
  ClassifierOptions options;
  options.labels = config.data.class_names;
  options.dropout = config.model.dropout;  // -1: the folder's
  if (config.model.attention_dropout > 0) options.attention_dropout = config.model.attention_dropout;
  return options;
}

}  // namespace

std::string ClassifierClassName(const std::string& model_type) {
  if (model_type == "bert") return "BertForSequenceClassification";
  if (model_type == "roberta") return "RobertaForSequenceClassification";
  if (model_type == "distilbert") return "DistilBertForSequenceClassification";
  throw PermanentError("model_type \"" + model_type + "\" is not supported (bert, roberta, distilbert)");
}

std::shared_ptr<SequenceModel> BuildClassifier(const HfConfig& c) {
  if (c.model_type == "bert") return BertForSequenceClassification(c).ptr();
  if (c.model_type == "roberta") return RobertaForSequenceClassification(c).ptr();
  if (c.model_type == "distilbert") return DistilBertForSequenceClassification(c).ptr();
  throw PermanentError("model_type \"" + c.model_type + "\" is not supported (bert, roberta, distilbert)");
}

std::shared_ptr<SequenceModel> LoadClassifier(const std::string& dir, const ClassifierOptions& options,
                                              HfConfig* config, const std::vector<std::string>& roots) {
  bool new_head = false;
  const HfConfig c = WithOptions(ReadHfConfig(dir, roots), options, &new_head);
  const HfWeights weights = HfWeights::Open(dir, roots);  // every header checked before the model is built
  HfNameRules rules = NameRules(c);
  if (new_head) rules.ignored.insert(rules.ignored.end(), rules.head.begin(), rules.head.end());
  std::shared_ptr<SequenceModel> model = BuildClassifier(c);
  LoadHfWeights(weights, rules, *model);
  if (config != nullptr) *config = c;
  return model;
}

int64_t MaxRowLength(const HfConfig& c) {
  if (c.model_type == "roberta") return c.max_position_embeddings - c.pad_token_id.value_or(0) - 1;
  return c.max_position_embeddings;
}

std::string ResolvePretrained(TrainConfig* config) {
  ModelConfig& m = config->model;
  if (m.arch != "pretrained") return "";
  HfConfig c;
  try {
    c = ReadHfConfig(m.pretrained, m.data_roots);
  } catch (const PermanentError& e) {
    return std::string("model.pretrained: ") + e.what();
  }
  const std::string file = m.pretrained + "/config.json";
  const bool distil = c.model_type == "distilbert";
  struct Size {
    const char* field;
    int* spec;
    int64_t value;
    const char* key;
  };
  const Size sizes[] = {{"model.layers", &m.layers, c.num_hidden_layers, distil ? "n_layers" : "num_hidden_layers"},
                        {"model.d_model", &m.d_model, c.hidden_size, distil ? "dim" : "hidden_size"},
                        {"model.heads", &m.heads, c.num_attention_heads, distil ? "n_heads" : "num_attention_heads"},
                        {"model.ffn", &m.ffn, c.intermediate_size, distil ? "hidden_dim" : "intermediate_size"}};
  for (const Size& s : sizes) {
    if (*s.spec != 0 && *s.spec != s.value)
      return std::string(s.field) + ": " + std::to_string(*s.spec) + " differs from " + file + "'s " + s.key + " " +
             std::to_string(s.value) + " (leave it out to take the folder's)";
    *s.spec = static_cast<int>(s.value);
  }
  if (m.max_len > MaxRowLength(c))
    return "model.max_len: " + std::to_string(m.max_len) + " is longer than " + file + "'s max_position_embeddings " +
           std::to_string(c.max_position_embeddings) + " allows (" + std::to_string(MaxRowLength(c)) + " tokens)";
  if (config->data.vocab_size > c.vocab_size)
    return "model.pretrained: the tokenizer has " + std::to_string(config->data.vocab_size) + " tokens but " + file +
           "'s vocab_size is " + std::to_string(c.vocab_size);
  return "";
}

std::shared_ptr<SequenceModel> JobClassifier(const TrainConfig& config, bool load_weights) {
  const ModelConfig& m = config.model;
  if (load_weights) return LoadClassifier(m.pretrained, JobOptions(config), nullptr, m.data_roots);
  bool new_head = false;
  return BuildClassifier(WithOptions(ReadHfConfig(m.pretrained, m.data_roots), JobOptions(config), &new_head));
}

}  // namespace nightshift::trainer::hf
