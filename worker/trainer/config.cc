#include "worker/trainer/config.h"

#include "common/spec_rules/spec_rules.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>


namespace nightshift::trainer {
namespace {

using nlohmann::json;

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string CamelCase(const std::string& snake) {
  std::string out;
  bool upper = false;
  for (char c : snake) {
    if (c == '_') { upper = true; continue; }
    out.push_back(upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    upper = false;
  }
  return out;
}

// Integers: JSON numbers or decimal strings (protobuf JSON writes 64-bit ints as strings).
int64_t IntOf(const json& v, const std::string& name) {
  if (v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= INT64_MAX)) return v.get<int64_t>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && *end == '\0' && errno == 0) return n;
  }
  throw ConfigError(name + ": must be an integer, got " + v.dump());
}

uint64_t UintOf(const json& v, const std::string& name) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(s.c_str(), &end, 10);
    if (!s.empty() && s[0] != '-' && *end == '\0' && errno == 0) return n;
  }
  throw ConfigError(name + ": must be a non-negative integer, got " + v.dump());
}

// One JSON object of the config outside the spec, and its dotted path, for errors.
struct Section {
  const json* obj;  // null when the section is absent (all defaults)
  std::string path;

  const json* Find(const std::string& key) const {
    if (obj == nullptr) return nullptr;
    for (const std::string& k : {key, CamelCase(key)}) {
      auto it = obj->find(k);
      if (it != obj->end() && !it->is_null()) return &*it;
    }
    return nullptr;
  }
  std::string Name(const std::string& key) const { return path + "." + key; }

  template <typename T>
  void Int(const std::string& key, T* out, int64_t lo, int64_t hi) const {
    const json* v = Find(key);
    if (v == nullptr) return;
    const int64_t x = IntOf(*v, Name(key));
    if (x < lo || x > hi)
      throw ConfigError(Name(key) + ": must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                        "], got " + v->dump());
    *out = static_cast<T>(x);
  }
  void Bool(const std::string& key, bool* out) const {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_boolean()) throw ConfigError(Name(key) + ": must be true or false, got " + v->dump());
    *out = v->get<bool>();
  }
  void String(const std::string& key, std::string* out) const {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_string()) throw ConfigError(Name(key) + ": must be a string, got " + v->dump());
    *out = v->get<std::string>();
  }
  void Strings(const std::string& key, std::vector<std::string>* out) const {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_array()) throw ConfigError(Name(key) + ": must be a list of strings, got " + v->dump());
    out->clear();
    for (const json& s : *v) {
      if (!s.is_string()) throw ConfigError(Name(key) + ": must be a list of strings, got " + v->dump());
      out->push_back(s.get<std::string>());
    }
  }
};

namespace L = spec_rules::limits;

constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64 = std::numeric_limits<int64_t>::max();

std::string SnakeCase(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (std::isupper(static_cast<unsigned char>(c))) {
      out.push_back('_');
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Whether `path` is a message of the JobSpec ("train.batching"), not a field.
bool IsSpecSection(const std::string& path) {
  for (const spec_rules::SpecField& f : spec_rules::SpecFields())
    if (std::string(f.path).rfind(path + ".", 0) == 0) return true;
  return false;
}

// One JSON value of the spec as its row's type: protobuf JSON writes 64-bit integers as
// strings, so integers may be decimal strings too.
spec_rules::SpecValues::Value SpecValue(const spec_rules::SpecField& f, const json& v, const std::string& name) {
  switch (f.type) {
    case spec_rules::FieldType::kInt: return IntOf(v, name);
    case spec_rules::FieldType::kUint: return UintOf(v, name);
    case spec_rules::FieldType::kReal:
      if (v.is_number()) return v.get<double>();
      throw ConfigError(name + ": must be a number, got " + v.dump());
    case spec_rules::FieldType::kString:
      if (v.is_string()) return v.get<std::string>();
      throw ConfigError(name + ": must be a string, got " + v.dump());
    case spec_rules::FieldType::kBool:
      if (v.is_boolean()) return int64_t{v.get<bool>()};
      throw ConfigError(name + ": must be true or false, got " + v.dump());
  }
  throw ConfigError(name + ": unsupported field type");
}

// The spec object, key by key (snake_case or lowerCamelCase), into values by the rules'
// table; a key the JobSpec does not have is refused, as the coordinator refuses it.
void ReadSpec(const json& obj, const std::string& path, spec_rules::SpecValues* values) {
  for (const auto& [key, value] : obj.items()) {
    const std::string field = path.empty() ? SnakeCase(key) : path + "." + SnakeCase(key);
    if (value.is_null()) continue;
    const spec_rules::SpecField* row = spec_rules::FindSpecField(field);
    if (row == nullptr && IsSpecSection(field)) {
      if (!value.is_object()) throw ConfigError("spec." + field + ": must be an object, got " + value.dump());
      ReadSpec(value, field, values);
    } else if (row == nullptr) {
      throw ConfigError("spec." + field + ": unknown field");
    } else {
      values->Set(*row, SpecValue(*row, value, "spec." + field));
    }
  }
}

// "a, b,c" -> {"a", "b", "c"}: a list field's items, trimmed, empty ones dropped.
std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ',') {
      const size_t b = item.find_first_not_of(' '), e = item.find_last_not_of(' ');
      if (b != std::string::npos) out.push_back(item.substr(b, e - b + 1));
      item.clear();
    } else {
      item += text[i];
    }
  }
  return out;
}

void TakeModel(const spec_rules::SpecValues& v, ModelConfig* out) {
  ModelConfig& m = *out;
  m.arch = v.Text(L::kArch);
  m.path = v.Text(L::kPath);
  m.init_from = v.Text(L::kInitFrom);
  m.pretrained = v.Text(L::kPretrained);
  m.task = v.Text(L::kTask);
  m.pooling = v.Text(L::kPooling);
  m.adapter.type = v.Text(L::kAdapterType);
  m.adapter.r = static_cast<int>(v.Int(L::kAdapterR));
  m.adapter.alpha = v.Real(L::kAdapterAlpha);
  m.adapter.dropout = v.Real(L::kAdapterDropout);
  m.adapter.target_modules = SplitList(v.Text(L::kAdapterTargets));
  m.adapter.modules_to_save = SplitList(v.Text(L::kAdapterModulesToSave));
  m.adapter.init_from = v.Text(L::kAdapterInitFrom);
  m.adapter.rslora = v.Int(L::kAdapterRslora) != 0;
  m.base_precision = v.Text(L::kBasePrecision);
  m.layers = static_cast<int>(v.Int(L::kLayers));
  m.d_model = static_cast<int>(v.Int(L::kDModel));
  m.heads = static_cast<int>(v.Int(L::kHeads));
  m.ffn = static_cast<int>(v.Int(L::kFfn));
  m.dropout = v.Has(L::kDropout) ? v.Real(L::kDropout) : -1;  // absent only with model.pretrained
  m.attention_dropout = v.Real(L::kAttentionDropout);
  m.max_len = static_cast<int>(v.Int(L::kMaxLen));
}

void TakeTrain(const spec_rules::SpecValues& v, TrainSection* out) {
  TrainSection& t = *out;
  t.epochs = static_cast<int>(v.Int(L::kEpochs));
  t.optimizer = v.Text(L::kOptimizer);
  t.lr = v.Real(L::kLr);
  t.weight_decay = v.Real(L::kWeightDecay);
  t.warmup_steps = static_cast<int>(v.Int(L::kWarmupSteps));
  t.seed = v.Uint(L::kSeed);
  t.batch_size = static_cast<int>(v.Int(L::kBatchSize));
  const int64_t max_tokens = spec_rules::ParseMaxTokens(v.Text(L::kMaxTokens));  // valid: the rules checked it
  t.max_tokens_auto = max_tokens == -1;
  t.max_tokens = std::max<int64_t>(max_tokens, 0);
  t.prefetch = static_cast<int>(v.Int(L::kPrefetch));
  t.rows = v.Text(L::kRows);
  t.precision = v.Text(L::kPrecision);
  t.grad_clip = v.Real(L::kGradClip);
  t.activation_checkpointing = v.Text(L::kActivationCheckpointing);
  t.checkpoint_every_blocks = spec_rules::ActivationCheckpointEvery(t.activation_checkpointing);
  t.max_steps = v.Int(L::kMaxSteps);
  t.threads = static_cast<int>(v.Int(L::kThreads));
  t.accumulate_steps = static_cast<int>(v.Int(L::kAccumulateSteps));
  t.schedule = v.Text(L::kSchedule);
  t.early_stopping.metric = v.Text(L::kEarlyStoppingMetric);
  t.early_stopping.patience = static_cast<int>(v.Int(L::kEarlyStoppingPatience));
  t.early_stopping.min_delta = v.Real(L::kEarlyStoppingMinDelta);
}

// The resolved spec into the trainer's structs.
void TakeSpec(const spec_rules::SpecValues& v, TrainConfig* c) {
  TakeModel(v, &c->model);
  TakeTrain(v, &c->train);
  c->eval_every_steps = v.Int(L::kEvalEverySteps);
  c->export_best = v.Text(L::kExportBest);
  c->export_merge = v.Int(L::kExportMerge) != 0;
  c->data_parallel.world_size = static_cast<int>(v.Int(L::kWorldSize));
  c->data_parallel.timeout_seconds = static_cast<int>(v.Int(L::kTimeoutSeconds));
  c->data_parallel.bucket_mb = static_cast<int>(v.Int(L::kBucketMb));
  c->data_parallel.sharding = v.Text(L::kSharding);
  c->data_parallel.reduce_bf16 = v.Text(L::kReducePrecision) == "bf16";
  c->data_parallel.accumulate_gradients = v.Text(L::kAccumulateGradients);
  c->device = v.Text(L::kDevice);
  c->checkpoint.every_steps = static_cast<int>(v.Int(L::kEverySteps));
  c->checkpoint.every_seconds = static_cast<int>(v.Int(L::kEverySeconds));
  c->checkpoint.keep_last = static_cast<int>(v.Int(L::kKeepLast));
}

void ParseData(const Section& data, const ModelConfig& m, DataConfig* out) {
  DataConfig& d = *out;
  data.String("train_shard", &d.train_shard);
  data.String("val_shard", &d.val_shard);
  data.String("tokenizer_model", &d.tokenizer_model);
  if (d.train_shard.empty()) throw ConfigError("data.train_shard is required");
  if (d.val_shard.empty()) throw ConfigError("data.val_shard is required");
  data.Int("vocab_size", &d.vocab_size, 1, kI32);
  data.Int("num_classes", &d.num_classes, 0, kI32);
  data.Int("pad_id", &d.pad_id, 0, kI32);
  data.Int("bos_id", &d.bos_id, 0, kI32);
  data.Int("eos_id", &d.eos_id, 0, kI32);
  if (d.vocab_size == 0) throw ConfigError("data.vocab_size is required");
  if (d.pad_id >= d.vocab_size || d.bos_id >= d.vocab_size)
    throw ConfigError("data.pad_id and data.bos_id must be below data.vocab_size (" +
                      std::to_string(d.vocab_size) + ")");
  if (const json* names = data.Find("class_names")) {
    if (!names->is_array()) throw ConfigError("data.class_names must be an array of strings");
    for (const json& n : *names) {
      if (!n.is_string()) throw ConfigError("data.class_names must be an array of strings");
      d.class_names.push_back(n.get<std::string>());
    }
  }
  if (m.arch == "transformer_classifier" && d.num_classes < 2)
    throw ConfigError("data.num_classes must be at least 2 for a classifier, got " +
                      std::to_string(d.num_classes));
}

void Parse(const json& root, TrainConfig* c) {
  if (!root.is_object()) throw ConfigError("config must be a JSON object");
  Section top{&root, "config"};
  top.String("job_id", &c->job_id);
  top.Int("attempt", &c->attempt, 0, kI32);
  top.String("checkpoint_dir", &c->checkpoint_dir);
  if (c->checkpoint_dir.empty()) throw ConfigError("config.checkpoint_dir is required");
  top.Bool("checkpoint_dir_shared", &c->checkpoint_dir_shared);
  top.Strings("data_roots", &c->model.data_roots);
  for (const auto& [key, into] : {std::pair{"await_steps", &c->await_steps}, std::pair{"await_epochs", &c->await_epochs}}) {
    const json* list = top.Find(key);
    if (list == nullptr) continue;
    if (!list->is_array()) throw ConfigError(top.Name(key) + " must be a list of numbers");
    for (const json& n : *list) into->push_back(IntOf(n, top.Name(key)));
    std::sort(into->begin(), into->end());
  }
  top.String("judged_file", &c->judged_file);
  if (!(c->await_steps.empty() && c->await_epochs.empty()) && c->judged_file.empty())
    throw ConfigError("config.await_steps and await_epochs need config.judged_file");
  top.Int("await_seconds", &c->await_seconds, 0, 3600);
  const json* spec = top.Find("spec");
  if (spec == nullptr) throw ConfigError("config.spec is required");
  if (!spec->is_object()) throw ConfigError("config.spec must be an object");
  spec_rules::SpecValues values;
  ReadSpec(*spec, "", &values);
  if (std::optional<spec_rules::SpecError> e = spec_rules::ApplySpecRules(&values)) throw ConfigError("spec." + e->Text());
  TakeSpec(values, c);
  Section data{top.Find("data"), "data"};
  if (data.obj == nullptr) throw ConfigError("config.data is required");
  ParseData(data, c->model, &c->data);
}

}  // namespace

std::string ParseTrainConfig(const std::string& json_text, TrainConfig* config) {
  TrainConfig c;
  try {
    Parse(json::parse(json_text), &c);
  } catch (const json::exception& e) {
    return std::string("config is not valid JSON: ") + e.what();
  } catch (const ConfigError& e) {
    return std::string("config: ") + e.what();
  }
  *config = std::move(c);
  return "";
}

std::string LoadTrainConfig(const std::string& path, TrainConfig* config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot read config file " + path;
  std::ostringstream text;
  text << in.rdbuf();
  std::string err = ParseTrainConfig(text.str(), config);
  return err.empty() ? "" : path + ": " + err;
}

std::string ReadRankInfo(RankInfo* info) {
  RankInfo r;
  auto read_int = [](const char* name, int64_t lo, int64_t hi, auto* out) -> std::string {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return "";
    char* end = nullptr;
    errno = 0;
    long long x = std::strtoll(v, &end, 10);
    if (*end != '\0' || errno != 0 || x < lo || x > hi)
      return std::string("environment variable ") + name + "=\"" + v + "\" is not an integer in [" +
             std::to_string(lo) + ", " + std::to_string(hi) + "]";
    *out = static_cast<std::remove_pointer_t<decltype(out)>>(x);
    return "";
  };
  std::string err;
  if (err.empty()) err = read_int("RANK", 0, kI32, &r.rank);
  if (err.empty()) err = read_int("WORLD_SIZE", 1, kI32, &r.world_size);
  if (err.empty()) err = read_int("LOCAL_RANK", 0, kI32, &r.local_rank);
  if (err.empty()) err = read_int("LOCAL_WORLD_SIZE", 1, kI32, &r.local_world_size);
  if (err.empty()) err = read_int("MASTER_PORT", 0, 65535, &r.master_port);
  if (err.empty()) err = read_int("NIGHTSHIFT_FAULT_ABORT_AT_STEP", 0, kI64, &r.faults.abort_at_step);
  if (err.empty())
    err = read_int("NIGHTSHIFT_FAULT_OOM_ABOVE_TOKENS", 0, kI64, &r.faults.oom_above_tokens);
  int64_t in_backward = 0;
  if (err.empty()) err = read_int("NIGHTSHIFT_FAULT_OOM_IN_BACKWARD", 0, 1, &in_backward);
  r.faults.oom_in_backward = in_backward != 0;
  if (err.empty())
    err = read_int("NIGHTSHIFT_FAULT_PROBE_OOM_ABOVE_TOKENS", 0, kI64, &r.faults.probe_oom_above_tokens);
  if (err.empty())
    err = read_int("NIGHTSHIFT_FAULT_NAN_LOSS_FROM_STEP", 0, kI64, &r.faults.nan_loss_from_step);
  if (err.empty()) err = read_int("NIGHTSHIFT_FAULT_NAN_LOSSES", 0, kI64, &r.faults.nan_losses);
  if (err.empty()) err = read_int("NIGHTSHIFT_MEMORY_LIMIT_BYTES", 0, kI64, &r.memory_limit_bytes);
  if (!err.empty()) return err;
  if (err.empty()) err = read_int("TORCHELASTIC_RESTART_COUNT", 0, kI32, &r.restart_count);
  if (!err.empty()) return err;
  if (const char* a = std::getenv("MASTER_ADDR")) r.master_addr = a;
  if (const char* s = std::getenv("TORCHELASTIC_USE_AGENT_STORE")) r.use_agent_store = std::string(s) == "True";
  if (r.rank >= r.world_size)
    return "RANK (" + std::to_string(r.rank) + ") must be below WORLD_SIZE (" +
           std::to_string(r.world_size) + ")";
  *info = r;
  return "";
}

}  // namespace nightshift::trainer
