#include "worker/trainer/config.h"

#include "common/format/spec_limits.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "worker/trainer/activation_checkpoint.h"

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

// One JSON object and its dotted path, for error messages.
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
  Section Sub(const std::string& key) const {
    const json* v = Find(key);
    if (v != nullptr && !v->is_object()) throw ConfigError(Name(key) + " must be an object");
    return Section{v, Name(key)};
  }

  // Integers: JSON numbers or decimal strings (protobuf JSON writes 64-bit ints as strings).
  template <typename T>
  void Int(const std::string& key, T* out, int64_t lo, int64_t hi) const {
    const json* v = Find(key);
    if (v == nullptr) return;
    long double x;
    if (v->is_number_integer() || v->is_number_unsigned()) {
      x = v->is_number_unsigned() ? static_cast<long double>(v->get<uint64_t>())
                                  : static_cast<long double>(v->get<int64_t>());
    } else if (v->is_string()) {
      const std::string s = v->get<std::string>();
      char* end = nullptr;
      errno = 0;
      x = std::strtold(s.c_str(), &end);
      if (s.empty() || *end != '\0' || errno != 0 || x != static_cast<long double>(static_cast<int64_t>(x)))
        throw ConfigError(Name(key) + " must be an integer, got \"" + s + "\"");
    } else {
      throw ConfigError(Name(key) + " must be an integer, got " + v->dump());
    }
    if (x < lo || x > hi)
      throw ConfigError(Name(key) + " must be in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + v->dump());
    *out = static_cast<T>(x);
  }
  void Uint64(const std::string& key, uint64_t* out) const {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (v->is_number_unsigned()) { *out = v->get<uint64_t>(); return; }
    if (v->is_string()) {
      const std::string s = v->get<std::string>();
      char* end = nullptr;
      errno = 0;
      unsigned long long x = std::strtoull(s.c_str(), &end, 10);
      if (!s.empty() && s[0] != '-' && *end == '\0' && errno == 0) { *out = x; return; }
    }
    throw ConfigError(Name(key) + " must be a non-negative integer, got " + v->dump());
  }
  void Double(const std::string& key, double* out, double lo, double hi) const {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_number()) throw ConfigError(Name(key) + " must be a number, got " + v->dump());
    double x = v->get<double>();
    if (!(x >= lo && x <= hi))
      throw ConfigError(Name(key) + " must be in [" + std::to_string(lo) + ", " +
                        std::to_string(hi) + "], got " + v->dump());
    *out = x;
  }
  void Bool(const std::string& key, bool* out) const {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_boolean()) throw ConfigError(Name(key) + " must be true or false, got " + v->dump());
    *out = v->get<bool>();
  }
  void String(const std::string& key, std::string* out) const {
    const json* v = Find(key);
    if (v == nullptr) return;
    if (!v->is_string()) throw ConfigError(Name(key) + " must be a string, got " + v->dump());
    *out = v->get<std::string>();
  }
  // A JobSpec field with its limits from the one table (common/format/spec_limits.h):
  // absent keeps *out (the struct's default, which is the table's); 0 takes the field's
  // fallback where it has one; anything else must be in range.
  template <typename T>
  void Int(const std::string& key, T* out, const format::IntField& f) const {
    int64_t v = static_cast<int64_t>(*out);
    Int(key, &v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
    if (v == 0 && f.fallback != 0) v = f.fallback;
    if (!format::InRange(f, v)) throw ConfigError(Name(key) + " " + format::RangeText(f) + ", got " + std::to_string(v));
    *out = static_cast<T>(v);
  }
  void Double(const std::string& key, double* out, const format::RealField& f) const {
    double v = *out;
    Double(key, &v, -HUGE_VAL, HUGE_VAL);
    if (v == 0 && f.fallback != 0) v = f.fallback;
    if (!format::InRange(f, v)) throw ConfigError(Name(key) + " " + format::RangeText(f) + ", got " + json(v).dump());
    *out = v;
  }
};

namespace L = format::limits;

constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64 = std::numeric_limits<int64_t>::max();

void ParseModel(const Section& model, ModelConfig* out) {
  ModelConfig& m = *out;
  model.String("arch", &m.arch);
  model.String("path", &m.path);
  model.String("init_from", &m.init_from);
  if (m.arch != "transformer_classifier" && m.arch != "gpt_lm" && m.arch != "torchscript")
    throw ConfigError("spec.model.arch must be transformer_classifier, gpt_lm or torchscript, got \"" +
                      m.arch + "\"");
  if (m.arch == "torchscript" && m.path.empty())
    throw ConfigError("spec.model.path is required for model.arch torchscript");
  model.Int("layers", &m.layers, L::kLayers);
  model.Int("d_model", &m.d_model, L::kDModel);
  model.Int("heads", &m.heads, L::kHeads);
  model.Int("ffn", &m.ffn, 0, L::kFfn.max);  // 0: 4 x d_model (below)
  model.Double("dropout", &m.dropout, L::kDropout);
  model.Double("attention_dropout", &m.attention_dropout, L::kAttentionDropout);
  model.Int("max_len", &m.max_len, L::kMaxLen);
  if (m.ffn == 0) m.ffn = 4 * m.d_model;
  if (m.d_model % m.heads != 0)
    throw ConfigError("spec.model.d_model (" + std::to_string(m.d_model) +
                      ") must be divisible by spec.model.heads (" + std::to_string(m.heads) + ")");
}

// spec.train, with its techniques: precision (amp.h), activation checkpointing
// (activation_checkpoint.h) and batching (batching.h).
void ParseTrain(const Section& train, TrainSection* out) {
  TrainSection& t = *out;
  train.Int("epochs", &t.epochs, L::kEpochs);
  train.String("optimizer", &t.optimizer);
  if (t.optimizer.empty()) t.optimizer = "adamw";
  if (t.optimizer != "adamw")
    throw ConfigError("spec.train.optimizer \"" + t.optimizer + "\" is not supported (use adamw)");
  train.Double("lr", &t.lr, L::kLr);
  train.Double("weight_decay", &t.weight_decay, L::kWeightDecay);
  train.Int("warmup_steps", &t.warmup_steps, L::kWarmupSteps);
  train.Uint64("seed", &t.seed);
  train.String("precision", &t.precision);
  if (t.precision.empty()) t.precision = L::kDefaultPrecision;
  if (t.precision != "fp32" && t.precision != "bf16" && t.precision != "fp16")
    throw ConfigError("spec.train.precision must be fp32, bf16 or fp16, got \"" + t.precision + "\"");
  train.Double("grad_clip", &t.grad_clip, L::kGradClip);
  train.String("activation_checkpointing", &t.activation_checkpointing);
  if (t.activation_checkpointing.empty()) t.activation_checkpointing = "none";
  if (std::string err = ParseActivationCheckpointing(t.activation_checkpointing, &t.checkpoint_every_blocks);
      !err.empty())
    throw ConfigError(err);
  train.Int("max_steps", &t.max_steps, L::kMaxSteps);
  train.Int("threads", &t.threads, L::kThreads);

  Section batching = train.Sub("batching");
  batching.Int("batch_size", &t.batch_size, L::kBatchSize);
  batching.Int("prefetch", &t.prefetch, L::kPrefetch);
  if (const json* v = batching.Find("max_tokens")) {
    if (v->is_string() && v->get<std::string>() == "auto") {
      t.max_tokens_auto = true;
    } else if (!(v->is_string() && v->get<std::string>().empty())) {
      batching.Int("max_tokens", &t.max_tokens, L::kMaxTokens);
    }
  }
}

// spec.resources: the device, and data parallelism (ddp.h).
void ParseResources(const Section& resources, TrainConfig* c) {
  DataParallelConfig& dp = c->data_parallel;
  resources.Int("world_size", &dp.world_size, L::kWorldSize.min, L::kWorldSize.max);  // 0 is refused
  resources.Int("timeout_seconds", &dp.timeout_seconds, L::kTimeoutSeconds);
  resources.Int("bucket_mb", &dp.bucket_mb, L::kBucketMb);
  resources.String("device", &c->device);
  if (c->device.empty()) c->device = L::kDefaultDevice;
  if (c->device != "auto" && c->device != "cpu" && c->device != "cuda")
    throw ConfigError("spec.resources.device must be auto, cpu or cuda, got \"" + c->device + "\"");
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
  Section spec{top.Find("spec"), "spec"};
  if (spec.obj == nullptr) throw ConfigError("config.spec is required");
  ParseModel(spec.Sub("model"), &c->model);
  ParseTrain(spec.Sub("train"), &c->train);
  ParseResources(spec.Sub("resources"), c);
  Section ckpt = spec.Sub("checkpoint");
  ckpt.Int("every_steps", &c->checkpoint.every_steps, L::kEverySteps);
  ckpt.Int("every_seconds", &c->checkpoint.every_seconds, L::kEverySeconds);
  ckpt.Int("keep_last", &c->checkpoint.keep_last, L::kKeepLast);
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
  if (err.empty())
    err = read_int("NIGHTSHIFT_FAULT_NAN_LOSS_FROM_STEP", 0, kI64, &r.faults.nan_loss_from_step);
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
