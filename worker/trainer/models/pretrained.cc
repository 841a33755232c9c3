#include "worker/trainer/models/pretrained.h"

#include "worker/trainer/errors.h"
#include "worker/trainer/models/bert.h"
#include "worker/trainer/models/common.h"
#include "worker/trainer/models/distilbert.h"
#include "worker/trainer/models/gpt2.h"
#include "worker/trainer/models/llama.h"
#include "worker/trainer/models/mistral.h"
#include "worker/trainer/models/qwen2.h"
#include "worker/trainer/models/roberta.h"

namespace nightshift::trainer::hf {
namespace {

// The base model's name in the checkpoint (decoders).
std::string DecoderBase(const HfConfig& c) { return c.model_type == "gpt2" ? "transformer" : "model"; }

HfNameRules NameRules(const HfConfig& c, const std::string& task) {
  if (c.decoder()) return DecoderModelImpl::NameRules(c, task, DecoderBase(c));
  if (c.model_type == "bert") return BertForSequenceClassificationImpl::NameRules(c);
  if (c.model_type == "roberta") return RobertaForSequenceClassificationImpl::NameRules(c);
  return DistilBertForSequenceClassificationImpl::NameRules(c);
}

// The folder's config with the job's options applied; *new_head: the labels differ, so
// the folder's head does not fit them.
HfConfig WithOptions(HfConfig c, const PretrainedOptions& options, bool* new_head) {
  *new_head = options.task == "classification" && !options.labels.empty() && options.labels != c.labels;
  if (*new_head) c.labels = options.labels;
  if (options.dropout >= 0) c.hidden_dropout = c.classifier_dropout = c.embedding_dropout = options.dropout;
  if (options.attention_dropout >= 0) c.attention_dropout = options.attention_dropout;
  return c;
}

PretrainedOptions JobOptions(const TrainConfig& config) {
  PretrainedOptions options;
  options.task = config.model.task.empty() ? "classification" : config.model.task;
  options.labels = config.data.class_names;
  options.dropout = config.model.dropout;  // -1: the folder's
  if (config.model.attention_dropout > 0) options.attention_dropout = config.model.attention_dropout;
  if (!config.model.adapter.type.empty() && (config.model.base_precision == "bf16" || config.model.base_precision == "fp16"))
    options.base_dtype = config.model.base_precision == "bf16" ? torch::kBFloat16 : torch::kFloat16;
  return options;
}

}  // namespace

std::string PretrainedClassName(const std::string& model_type, const std::string& task) {
  // model_type -> transformers' prefix of its classes
  static const std::map<std::string, std::string> kPrefix = {
      {"bert", "Bert"}, {"roberta", "Roberta"}, {"distilbert", "DistilBert"}, {"gpt2", "GPT2"},
      {"llama", "Llama"}, {"mistral", "Mistral"}, {"qwen2", "Qwen2"}};
  const auto it = kPrefix.find(model_type);
  if (it == kPrefix.end())
    throw PermanentError("model_type \"" + model_type + "\" is not supported (bert, roberta, distilbert, gpt2, llama, mistral, qwen2)");
  if (task == "classification") return it->second + "ForSequenceClassification";
  const bool decoder = model_type == "gpt2" || model_type == "llama" || model_type == "mistral" || model_type == "qwen2";
  if (task != "causal_lm" || !decoder)
    throw PermanentError("model.task " + task + " is not available for model_type \"" + model_type +
                         "\" (" + (decoder ? "classification or causal_lm" : "classification only: an encoder") + ")");
  return model_type == "gpt2" ? "GPT2LMHeadModel" : it->second + "ForCausalLM";
}

std::shared_ptr<SequenceModel> BuildPretrained(const HfConfig& c, const std::string& task) {
  PretrainedClassName(c.model_type, task);  // throws for what we do not build
  if (c.model_type == "gpt2") return DecoderModel(c, task, DecoderBase(c), Gpt2Model(c).ptr()).ptr();
  if (c.model_type == "llama") return DecoderModel(c, task, DecoderBase(c), LlamaModel(c).ptr()).ptr();
  if (c.model_type == "mistral") return DecoderModel(c, task, DecoderBase(c), MistralModel(c).ptr()).ptr();
  if (c.model_type == "qwen2") return DecoderModel(c, task, DecoderBase(c), Qwen2Model(c).ptr()).ptr();
  if (c.model_type == "bert") return BertForSequenceClassification(c).ptr();
  if (c.model_type == "roberta") return RobertaForSequenceClassification(c).ptr();
  return DistilBertForSequenceClassification(c).ptr();
}

std::shared_ptr<SequenceModel> LoadPretrained(const std::string& dir, const PretrainedOptions& options,
                                              HfConfig* config, const std::vector<std::string>& roots,
                                              DeferredWeights* later) {
  bool new_head = false;
  const HfConfig c = WithOptions(ReadHfConfig(dir, roots), options, &new_head);
  const HfWeights weights = HfWeights::Open(dir, roots);  // every header checked before the model is built
  HfNameRules rules = NameRules(c, options.task);
  if (new_head) rules.ignored.insert(rules.ignored.end(), rules.head.begin(), rules.head.end());
  std::shared_ptr<SequenceModel> model;
  {
    DeferInit unwritten;  // LoadHfWeights writes every parameter, or throws
    model = BuildPretrained(c, options.task);
    if (options.base_dtype != torch::kFloat32) BuildFrozenBaseIn(*model, options.base_dtype, rules.head);
  }
  if (later != nullptr) {
    later->weights = weights;
    later->rules = rules;
    later->rules.written = InitNewHead(weights, rules, *model);  // its draws before an adapter's
  } else {
    LoadHfWeights(weights, rules, *model);
  }
  if (config != nullptr) *config = c;
  return model;
}

int64_t MaxRowLength(const HfConfig& c) {
  if (c.model_type == "roberta") return c.max_position_embeddings - c.pad_token_id.value_or(0) - 1;
  if (c.sliding_window) return std::min(c.max_position_embeddings, *c.sliding_window);
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
  try {
    PretrainedClassName(c.model_type, m.task.empty() ? "classification" : m.task);
  } catch (const PermanentError& e) {
    return std::string("model.task: ") + e.what();
  }
  if (c.IsLlamaFamily() && m.dropout > 0)
    return "model.dropout: " + c.model_type + " has no dropout but on the attention probabilities: leave it out, "
           "and set model.attention_dropout for that";
  const bool distil = c.model_type == "distilbert", gpt2 = c.model_type == "gpt2";
  m.pretrained_decoder = c.decoder();
  struct Size {
    const char* field;
    int* spec;
    int64_t value;
    const char* key;
  };
  const Size sizes[] = {
      {"model.layers", &m.layers, c.num_hidden_layers, distil ? "n_layers" : gpt2 ? "n_layer" : "num_hidden_layers"},
      {"model.d_model", &m.d_model, c.hidden_size, distil ? "dim" : gpt2 ? "n_embd" : "hidden_size"},
      {"model.heads", &m.heads, c.num_attention_heads, distil ? "n_heads" : gpt2 ? "n_head" : "num_attention_heads"},
      {"model.ffn", &m.ffn, c.intermediate_size, distil ? "hidden_dim" : gpt2 ? "n_inner" : "intermediate_size"}};
  for (const Size& s : sizes) {
    if (*s.spec != 0 && *s.spec != s.value)
      return std::string(s.field) + ": " + std::to_string(*s.spec) + " differs from " + file + "'s " + s.key + " " +
             std::to_string(s.value) + " (leave it out to take the folder's)";
    *s.spec = static_cast<int>(s.value);
  }
  const bool window = c.sliding_window && *c.sliding_window < c.max_position_embeddings;
  if (m.max_len > MaxRowLength(c))
    return "model.max_len: " + std::to_string(m.max_len) + " is longer than " + file + "'s " +
           (window ? "sliding_window " + std::to_string(*c.sliding_window)
                   : (gpt2 ? "n_positions " : "max_position_embeddings ") + std::to_string(c.max_position_embeddings)) +
           " allows (" + std::to_string(MaxRowLength(c)) + " tokens)";
  if (config->data.vocab_size > c.vocab_size)
    return "model.pretrained: the tokenizer has " + std::to_string(config->data.vocab_size) + " tokens but " + file +
           "'s vocab_size is " + std::to_string(c.vocab_size);
  return "";
}

AdapterConfig JobAdapter(const ModelConfig& m) {
  if (!m.adapter.init_from.empty()) return ReadPeftAdapterConfig(m.adapter.init_from, m.data_roots);
  AdapterConfig a;
  a.lora.r = m.adapter.r;
  a.lora.alpha = m.adapter.alpha;
  a.lora.dropout = m.adapter.dropout;
  a.lora.rslora = m.adapter.rslora;
  a.target_modules = m.adapter.target_modules;
  a.modules_to_save = m.adapter.modules_to_save;
  return a;
}

std::shared_ptr<SequenceModel> JobModel(const TrainConfig& config, bool load_weights, AttachedAdapter* attached,
                                        DeferredWeights* later) {
  const ModelConfig& m = config.model;
  const PretrainedOptions options = JobOptions(config);
  HfConfig c;
  std::shared_ptr<SequenceModel> model;
  if (!load_weights) later = nullptr;
  if (load_weights) {
    model = LoadPretrained(m.pretrained, options, &c, m.data_roots, later);
  } else {
    bool new_head = false;
    c = WithOptions(ReadHfConfig(m.pretrained, m.data_roots), options, &new_head);
    model = BuildPretrained(c, options.task);
  }
  if (m.adapter.type.empty()) return model;
  const AttachedAdapter a = AttachLora(*model, c, options.task, JobAdapter(m));
  if (load_weights && !m.adapter.init_from.empty()) LoadPeftAdapter(m.adapter.init_from, *model, m.data_roots);
  if (later != nullptr)  // the base loads after: not over the adapter (its folder: every trainable tensor)
    for (const auto& p : model->named_parameters())
      if (p.value().requires_grad() && (!m.adapter.init_from.empty() || p.key().find(".lora_") != std::string::npos))
        later->rules.written.insert(p.key());
  if (options.base_dtype != torch::kFloat32) {
    torch::NoGradGuard no_grad;  // what trains is float32 (a projection in modules_to_save)
    for (auto& p : model->named_parameters()) {
      if (!p.value().requires_grad() || p.value().scalar_type() == torch::kFloat32) continue;
      // loaded later: rounded as a load into its dtype would have
      if (later != nullptr) later->rules.round_through[p.key()] = p.value().scalar_type();
      p.value().set_data(p.value().to(torch::kFloat32));
    }
    CastFrozenBase(*model, options.base_dtype);  // the rest: the head's, or built unloaded
  }
  if (attached != nullptr) *attached = a;
  return model;
}

}  // namespace nightshift::trainer::hf
