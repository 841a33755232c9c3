// The JobSpec's rules, in one place: every field's default, limits and the rules across
// fields, applied by one function (ApplySpecRules) to plain values. Two front ends fill
// those values and take the result: the coordinator's from the protobuf
// (common/spec.cc, on submit) and the trainer's from JSON (worker/trainer/config.cc; the
// trainer also runs alone under torchrun). Neither has rules of its own, so they cannot
// drift; tests/common/spec_contract_test.cc feeds the same specs through both.
// Standard library only (the trainer links it).
//
// Absent and zero: proto3 cannot tell a plain field's 0 (or "") from its absence, so for
// those the rules treat both alike; `optional` fields (Absent::kDefault) keep an explicit
// 0. Every field of the JobSpec has a row in SpecFields(); a test walks the proto and
// fails on a field without one.
#ifndef NIGHTSHIFT_COMMON_SPEC_RULES_SPEC_RULES_H_
#define NIGHTSHIFT_COMMON_SPEC_RULES_SPEC_RULES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace nightshift::spec_rules {

enum class FieldType { kInt, kUint, kReal, kString, kBool };  // int32/int64, uint64, double, string, bool
// (a bool is held as the int64 0 or 1)

// What an absent field becomes.
enum class Absent {
  kZero,      // 0 (or ""); 0 is an ordinary value
  kFallback,  // `fallback`; an explicit 0 too (0 means "the default")
  kDefault,   // `fallback`; an explicit 0 is kept (an `optional` field in the proto)
};

// One field of the JobSpec. Numbers are checked against [min, max] (max excluded where
// max_exclusive) once defaults are filled; strings against `choices` when it is set, and
// against max bytes.
struct SpecField {
  const char* path;  // the JobSpec path, e.g. "model.layers"
  FieldType type;
  Absent absent;
  double fallback;           // numbers: the default (see Absent)
  const char* text_default;  // strings: the default; "": none
  double min, max;           // numbers: the range; strings: max is the length in bytes
  bool max_exclusive;
  const char* choices;  // strings: "a|b|c", the values allowed; "": any
  const char* noun;     // strings with choices: "unknown <noun> 'x' (expected a, b or c)"
  const char* note;     // appended to a range error, e.g. " (0 disables)"
};

constexpr SpecField Int(const char* path, Absent absent, double fallback, double min, double max,
                        const char* note = "") {
  return {path, FieldType::kInt, absent, fallback, "", min, max, false, "", "", note};
}
constexpr SpecField Real(const char* path, Absent absent, double fallback, double min, double max,
                         bool max_exclusive, const char* note = "") {
  return {path, FieldType::kReal, absent, fallback, "", min, max, max_exclusive, "", "", note};
}
constexpr SpecField Bool(const char* path) {
  return {path, FieldType::kBool, Absent::kZero, 0, "", 0, 1, false, "", "", ""};
}
constexpr SpecField Text(const char* path, const char* text_default, const char* choices = "",
                         const char* noun = "", double max_bytes = 4096) {
  return {path, FieldType::kString, Absent::kZero, 0, text_default, 0, max_bytes, false, choices, noun, ""};
}

// One row per field, in the proto's order. What a field means is its comment in
// spec.proto, once; a row holds only the numbers and choices (docs/spec.md shows both).
namespace limits {
constexpr double kTwo40 = 1099511627776.0;  // 2^40
inline constexpr SpecField kName = Text("name", "job", "", "", 128);
// model
inline constexpr SpecField kArch =
    Text("model.arch", "", "transformer_classifier|gpt_lm|torchscript|pretrained", "architecture");
inline constexpr SpecField kLayers = Int("model.layers", Absent::kFallback, 2, 1, 128);
inline constexpr SpecField kDModel = Int("model.d_model", Absent::kFallback, 128, 1, 65536);
inline constexpr SpecField kHeads = Int("model.heads", Absent::kFallback, 4, 1, 65536);
inline constexpr SpecField kFfn = Int("model.ffn", Absent::kFallback, 0, 1, 1 << 20);
inline constexpr SpecField kDropout = Real("model.dropout", Absent::kDefault, 0.1, 0, 1, true);
inline constexpr SpecField kMaxLen = Int("model.max_len", Absent::kFallback, 512, 2, 1 << 16);
inline constexpr SpecField kPath = Text("model.path", "");
inline constexpr SpecField kAttentionDropout = Real("model.attention_dropout", Absent::kZero, 0, 0, 1, true);
inline constexpr SpecField kInitFrom = Text("model.init_from", "");
inline constexpr SpecField kPretrained = Text("model.pretrained", "");
inline constexpr SpecField kTask = Text("model.task", "", "classification|causal_lm", "task");
inline constexpr SpecField kPooling = Text("model.pooling", "cls", "cls|mean", "pooling");
inline constexpr SpecField kAdapterType = Text("model.adapter.type", "", "lora", "adapter type");
inline constexpr SpecField kAdapterR = Int("model.adapter.r", Absent::kFallback, 8, 1, 4096);
inline constexpr SpecField kAdapterAlpha = Real("model.adapter.alpha", Absent::kFallback, 8, 0, 1e6, false);
inline constexpr SpecField kAdapterDropout = Real("model.adapter.dropout", Absent::kZero, 0, 0, 1, true);
inline constexpr SpecField kAdapterTargets = Text("model.adapter.target_modules", "");
inline constexpr SpecField kAdapterModulesToSave = Text("model.adapter.modules_to_save", "");
inline constexpr SpecField kAdapterInitFrom = Text("model.adapter.init_from", "");
inline constexpr SpecField kAdapterRslora = Bool("model.adapter.rslora");
inline constexpr SpecField kBasePrecision = Text("model.base_precision", "", "fp32|bf16|fp16", "precision");
// data
inline constexpr SpecField kFormat = Text("data.format", "text_dir", "text_dir|jsonl", "format");
inline constexpr SpecField kDataPath = Text("data.path", "");
inline constexpr SpecField kValidationFraction =
    Real("data.validation_fraction", Absent::kFallback, 0.2, 0, 1, true);
inline constexpr SpecField kTokenizerType = Text("data.tokenizer.type", "", "sentencepiece|pretrained", "tokenizer");
inline constexpr SpecField kVocabSize = Int("data.tokenizer.vocab_size", Absent::kFallback, 8000, 16, 1000000);
inline constexpr SpecField kTextField = Text("data.text_field", "", "", "", 256);
inline constexpr SpecField kLabelField = Text("data.label_field", "", "", "", 256);
inline constexpr SpecField kCompletionField = Text("data.completion_field", "", "", "", 256);
inline constexpr SpecField kMaxSamples = Int("data.max_samples", Absent::kZero, 0, 0, kTwo40, " (0: all)");
// train
inline constexpr SpecField kEpochs = Int("train.epochs", Absent::kFallback, 1, 1, 100000);
inline constexpr SpecField kOptimizer = Text("train.optimizer", "adamw", "adamw", "optimizer");
inline constexpr SpecField kLr = Real("train.lr", Absent::kFallback, 1e-3, 0, 10, false, " (0: the default)");
inline constexpr SpecField kWeightDecay = Real("train.weight_decay", Absent::kDefault, 0.01, 0, 10, false);
inline constexpr SpecField kWarmupSteps = Int("train.warmup_steps", Absent::kDefault, 100, 0, 1e9);
inline constexpr SpecField kSeed = {"train.seed", FieldType::kUint, Absent::kFallback, 1234, "", 0, 0, false, "", "", ""};
inline constexpr SpecField kBatchSize = Int("train.batching.batch_size", Absent::kFallback, 32, 1, 1 << 20);
inline constexpr SpecField kMaxTokens = Text("train.batching.max_tokens", "");
inline constexpr SpecField kPrefetch = Int("train.batching.prefetch", Absent::kFallback, 2, 1, 64);
inline constexpr SpecField kRows = Text("train.batching.rows", "", "packed|padded", "rows layout");
inline constexpr SpecField kPrecision = Text("train.precision", "fp32", "fp32|bf16|fp16", "precision");
inline constexpr SpecField kGradClip = Real("train.grad_clip", Absent::kDefault, 1.0, 0, 1e6, false, " (0 disables clipping)");
inline constexpr SpecField kActivationCheckpointing = Text("train.activation_checkpointing", "none");
inline constexpr SpecField kMaxSteps = Int("train.max_steps", Absent::kZero, 0, 0, kTwo40, " (0: no limit)");
inline constexpr SpecField kThreads = Int("train.threads", Absent::kZero, 0, 0, 1024, " (0: all cores / local ranks)");
inline constexpr SpecField kAccumulateSteps = Int("train.accumulate_steps", Absent::kFallback, 1, 1, 65536);
inline constexpr SpecField kSchedule = Text("train.schedule", "linear", "linear|cosine|constant", "schedule");
inline constexpr const char* kMetrics = "val_loss|val_accuracy|val_f1|val_perplexity";
inline constexpr SpecField kEarlyStoppingMetric = Text("train.early_stopping.metric", "", kMetrics, "metric");
inline constexpr SpecField kEarlyStoppingPatience = Int("train.early_stopping.patience", Absent::kFallback, 1, 1, 1e6);
inline constexpr SpecField kEarlyStoppingMinDelta = Real("train.early_stopping.min_delta", Absent::kZero, 0, 0, 1e9, false);
// resources
inline constexpr SpecField kWorldSize = Int("resources.world_size", Absent::kDefault, 1, 1, 4096);
inline constexpr SpecField kTimeoutSeconds = Int("resources.timeout_seconds", Absent::kFallback, 300, 1, 86400);
inline constexpr SpecField kBucketMb = Int("resources.bucket_mb", Absent::kFallback, 25, 1, 1024);
inline constexpr SpecField kDevice = Text("resources.device", "auto", "auto|cpu|cuda", "device");
inline constexpr SpecField kSharding = Text("resources.sharding", "none", "none|optimizer|full", "sharding");
inline constexpr SpecField kReducePrecision = Text("resources.reduce_precision", "fp32", "fp32|bf16", "precision");
inline constexpr SpecField kMemoryGb = Real("resources.memory_gb", Absent::kZero, 0, 0, 65536, false, " (0: no limit)");
inline constexpr SpecField kTimeLimitMinutes =
    Int("resources.time_limit_minutes", Absent::kZero, 0, 0, 525600, " (0: the cluster's default)");
inline constexpr SpecField kAccumulateGradients =
    Text("resources.accumulate_gradients", "auto", "auto|sharded|whole", "gradient accumulation");
// checkpoint
inline constexpr SpecField kEverySteps = Int("checkpoint.every_steps", Absent::kDefault, 200, 0, 1e9, " (0 disables)");
inline constexpr SpecField kEverySeconds =
    Int("checkpoint.every_seconds", Absent::kZero, 0, 0, 30 * 86400, " (30 days; 0 disables)");
inline constexpr SpecField kKeepLast = Int("checkpoint.keep_last", Absent::kFallback, 3, 1, 1000);
// restart and priority: read by the coordinator only
inline constexpr SpecField kMaxRestarts = Int("restart.max_restarts", Absent::kZero, 0, 0, 1000, " (0: no restarts)");
inline constexpr SpecField kHangSeconds =
    Int("restart.hang_seconds", Absent::kZero, 0, 0, 604800, " (0: max(300, 10x the step time))");
inline constexpr SpecField kPriority = Int("priority", Absent::kZero, 0, -1000000, 1000000);
// eval
inline constexpr SpecField kEvalEverySteps = Int("eval.every_steps", Absent::kZero, 0, 0, 1e9, " (0: every epoch's end)");
// export
inline constexpr SpecField kExportBest = Text("export.best", "", kMetrics, "metric");
inline constexpr SpecField kExportMerge = Bool("export.merge");
}  // namespace limits

// Every row above, in the proto's field order.
const std::vector<SpecField>& SpecFields();
// The row of `path`; null when the JobSpec has no such field.
const SpecField* FindSpecField(const std::string& path);

// The values of one spec, by path. A front end sets what its input has, of the row's
// type (an int32 is an int64 here); the getters read 0 or "" for an absent field.
class SpecValues {
 public:
  using Value = std::variant<int64_t, uint64_t, double, std::string>;

  void Set(const SpecField& f, Value v) { values_[f.path] = std::move(v); }
  bool Has(const SpecField& f) const { return values_.count(f.path) != 0; }
  int64_t Int(const SpecField& f) const { return Get<int64_t>(f); }
  uint64_t Uint(const SpecField& f) const { return Get<uint64_t>(f); }
  double Real(const SpecField& f) const { return Get<double>(f); }
  std::string Text(const SpecField& f) const { return Get<std::string>(f); }
  const std::map<std::string, Value>& all() const { return values_; }

 private:
  template <typename T>
  T Get(const SpecField& f) const {
    auto it = values_.find(f.path);
    if (it == values_.end()) return T{};
    const T* v = std::get_if<T>(&it->second);
    return v == nullptr ? T{} : *v;  // a front end's type error reads as absent
  }
  std::map<std::string, Value> values_;
};

struct SpecError {
  std::string field;    // the JobSpec path
  std::string message;  // what is wrong, without the path
  std::string Text() const { return field + ": " + message; }
};

// Fills every default, then checks each field and the rules across fields, section by
// section in the proto's order; the first error found is returned (nullopt: valid). On
// success every field with a default or a value is set in *values.
std::optional<SpecError> ApplySpecRules(SpecValues* values);

// Whether `value` is one of `choices` ("a|b|c", a row's choices; "" is none of them).
bool IsOneOf(const char* choices, const std::string& value);

// train.batching.max_tokens: > 0 a fixed budget, 0 none (batch_size), -1 "auto", -2 not
// a positive integer in range or auto.
int64_t ParseMaxTokens(const std::string& text);

// train.activation_checkpointing: 0 none, 1 full, N every_N (N in [1, 9999]); -1 invalid.
int ActivationCheckpointEvery(const std::string& text);

}  // namespace nightshift::spec_rules

#endif  // NIGHTSHIFT_COMMON_SPEC_RULES_SPEC_RULES_H_
