#include "common/spec_rules/spec_rules.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace nightshift::spec_rules {
namespace L = limits;

const std::vector<SpecField>& SpecFields() {
  static const std::vector<SpecField> kFields = {
      L::kName,
      L::kArch, L::kLayers, L::kDModel, L::kHeads, L::kFfn, L::kDropout, L::kMaxLen, L::kPath,
      L::kAttentionDropout, L::kInitFrom, L::kPretrained, L::kTask, L::kPooling,
      L::kAdapterType, L::kAdapterR, L::kAdapterAlpha, L::kAdapterDropout, L::kAdapterTargets,
      L::kAdapterModulesToSave, L::kAdapterInitFrom, L::kAdapterRslora, L::kBasePrecision,
      L::kFormat, L::kDataPath, L::kValidationFraction, L::kTokenizerType, L::kVocabSize, L::kTextField,
      L::kLabelField, L::kCompletionField, L::kMaxSamples,
      L::kEpochs, L::kOptimizer, L::kLr, L::kWeightDecay, L::kWarmupSteps, L::kSeed, L::kBatchSize,
      L::kMaxTokens, L::kPrefetch, L::kRows, L::kPrecision, L::kGradClip, L::kActivationCheckpointing, L::kMaxSteps,
      L::kThreads, L::kAccumulateSteps, L::kSchedule, L::kEarlyStoppingMetric, L::kEarlyStoppingPatience,
      L::kEarlyStoppingMinDelta,
      L::kWorldSize, L::kTimeoutSeconds, L::kBucketMb, L::kDevice, L::kMemoryGb, L::kSharding, L::kReducePrecision,
      L::kAccumulateGradients, L::kTimeLimitMinutes, L::kEverySteps, L::kEverySeconds, L::kKeepLast,
      L::kMaxRestarts, L::kHangSeconds, L::kPriority,
      L::kEvalEverySteps, L::kExportBest, L::kExportMerge};
  return kFields;
}

const SpecField* FindSpecField(const std::string& path) {
  for (const SpecField& f : SpecFields())
    if (path == f.path) return &f;
  return nullptr;
}

int64_t ParseMaxTokens(const std::string& text) {
  if (text.empty()) return 0;
  if (text == "auto") return -1;
  if (text.find_first_not_of("0123456789") != std::string::npos || text.size() > 15) return -2;
  const int64_t v = std::strtoll(text.c_str(), nullptr, 10);
  return v >= 1 && v <= static_cast<int64_t>(L::kTwo40) ? v : -2;
}

int ActivationCheckpointEvery(const std::string& text) {
  if (text == "none") return 0;
  if (text == "full") return 1;
  const std::string digits = text.rfind("every_", 0) == 0 ? text.substr(6) : "";
  if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  const int n = std::atoi(digits.c_str());
  return n >= 1 ? n : -1;
}

namespace {

using Error = std::optional<SpecError>;

std::string Num(double x) {  // 0.001, 1e+06, 65536: the shortest that reads back
  std::ostringstream out;
  out.precision(15);
  out << x;
  return out.str();
}

Error Invalid(const SpecField& f, const std::string& message) { return SpecError{f.path, message}; }

std::string RangeText(const SpecField& f) {
  return "must be in [" + Num(f.min) + ", " + Num(f.max) + (f.max_exclusive ? ")" : "]") + f.note;
}

// "a|b|c" -> "a, b or c".
std::string ChoicesText(const std::string& choices) {
  std::string out = choices;
  const size_t last = out.rfind('|');
  if (last != std::string::npos) out.replace(last, 1, " or ");
  for (size_t at; (at = out.find('|')) != std::string::npos;) out.replace(at, 1, ", ");
  return out;
}


// Fills the default of `f` where it is absent (or, for kFallback, 0).
void FillDefault(const SpecField& f, SpecValues* v) {
  if (f.type == FieldType::kString) {
    if (v->Text(f).empty() && *f.text_default != '\0') v->Set(f, std::string(f.text_default));
    return;
  }
  if (f.type == FieldType::kBool) return;  // absent: false
  const bool zero = f.type == FieldType::kInt ? v->Int(f) == 0 : f.type == FieldType::kUint ? v->Uint(f) == 0 : v->Real(f) == 0;
  if ((!v->Has(f) && f.absent != Absent::kZero) || (f.absent == Absent::kFallback && zero)) {
    if (f.type == FieldType::kInt) v->Set(f, static_cast<int64_t>(f.fallback));
    else if (f.type == FieldType::kUint) v->Set(f, static_cast<uint64_t>(f.fallback));
    else v->Set(f, f.fallback);
  }
}

// Checks `f` against its row: range, choices, length.
Error Check(const SpecField& f, const SpecValues& v) {
  switch (f.type) {
    case FieldType::kInt: {
      const int64_t x = v.Int(f);
      if (x < f.min || x > f.max) return Invalid(f, RangeText(f) + ", got " + std::to_string(x));
      return std::nullopt;
    }
    case FieldType::kReal: {
      const double x = v.Real(f);  // false for NaN
      if (!(x >= f.min && (f.max_exclusive ? x < f.max : x <= f.max)))
        return Invalid(f, RangeText(f) + ", got " + Num(x));
      return std::nullopt;
    }
    case FieldType::kUint:
    case FieldType::kBool:
      return std::nullopt;
    case FieldType::kString: {
      const std::string x = v.Text(f);
      if (*f.choices != '\0' && !IsOneOf(f.choices, x))
        return Invalid(f, "unknown " + std::string(f.noun) + " '" + x + "' (expected " + ChoicesText(f.choices) + ")");
      if (x.size() > f.max) return Invalid(f, "longer than " + Num(f.max) + " bytes");
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// Fills the defaults of `fields`, then checks them, in order.
Error Resolve(std::initializer_list<SpecField> fields, SpecValues* v) {
  for (const SpecField& f : fields) FillDefault(f, v);
  for (const SpecField& f : fields)
    if (Error e = Check(f, *v)) return e;
  return std::nullopt;
}

// What any string must be, whatever its field: a line of text, at most 4096 bytes.
Error CheckStrings(const SpecValues& v) {
  for (const SpecField& f : SpecFields()) {
    if (f.type != FieldType::kString) continue;
    const std::string x = v.Text(f);
    if (x.size() > 4096) return Invalid(f, "longer than 4096 bytes");
    for (unsigned char c : x)
      if (c < 0x20 || c == 0x7f) return Invalid(f, "contains a control character");
  }
  return std::nullopt;
}

// One function per spec section: each fills the section's defaults, then checks it.

// Whether any model.adapter field but the type is set.
bool AdapterFieldSet(const SpecValues& v) {
  for (const SpecField& f : {L::kAdapterTargets, L::kAdapterModulesToSave, L::kAdapterInitFrom})
    if (!v.Text(f).empty()) return true;
  return v.Int(L::kAdapterR) != 0 || v.Real(L::kAdapterAlpha) != 0 || v.Real(L::kAdapterDropout) != 0 ||
         v.Int(L::kAdapterRslora) != 0;
}

// model.adapter (with model.pretrained only): its settings take their defaults when the
// type is set, and are refused without it.
Error Adapter(SpecValues* v) {
  if (v->Text(L::kAdapterType).empty()) {
    if (AdapterFieldSet(*v)) return Invalid(L::kAdapterType, "missing (lora) while other model.adapter fields are set");
    return std::nullopt;
  }
  return Resolve({L::kAdapterType, L::kAdapterR, L::kAdapterAlpha, L::kAdapterDropout, L::kAdapterTargets,
                  L::kAdapterModulesToSave, L::kAdapterInitFrom, L::kAdapterRslora},
                 v);
}

// model.pretrained: config.json holds the sizes, so those left absent stay 0 ("as
// config.json has them") and the trainer compares those that are set; an absent dropout
// (or attention_dropout 0) keeps config.json's.
Error Pretrained(SpecValues* v) {
  if (v->Text(L::kPretrained).empty())
    return Invalid(L::kPretrained, "required when model.arch is pretrained (a Hugging Face model folder)");
  if (!v->Text(L::kInitFrom).empty())
    return Invalid(L::kInitFrom, "not with model.pretrained, which names the weights to start from");
  if (!v->Text(L::kPath).empty()) return Invalid(L::kPath, "only for model.arch torchscript");
  if (!v->Text(L::kPooling).empty())
    return Invalid(L::kPooling, "not with model.pretrained: its head pools as transformers' does");
  if (v->Text(L::kTask).empty()) v->Set(L::kTask, std::string("classification"));
  for (const SpecField& f : {L::kLayers, L::kDModel, L::kHeads, L::kFfn})
    if (v->Int(f) != 0)
      if (Error e = Check(f, *v)) return e;
  if (v->Has(L::kDropout))
    if (Error e = Check(L::kDropout, *v)) return e;
  if (Error e = Adapter(v)) return e;
  if (const std::string base = v->Text(L::kBasePrecision); !base.empty()) {
    if (Error e = Check(L::kBasePrecision, *v)) return e;
    if (base != "fp32" && v->Text(L::kAdapterType).empty())
      return Invalid(L::kBasePrecision, "only with model.adapter (a full fine-tune trains every weight in float32)");
  }
  return Resolve({L::kTask, L::kAttentionDropout, L::kMaxLen}, v);
}

Error Model(SpecValues* v) {
  if (!v->Text(L::kPretrained).empty() && v->Text(L::kArch).empty()) v->Set(L::kArch, std::string("pretrained"));
  const std::string arch = v->Text(L::kArch);
  if (arch.empty()) return Invalid(L::kArch, "missing (one of " + ChoicesText(L::kArch.choices) + ")");
  if (Error e = Check(L::kArch, *v)) return e;
  if (arch == "pretrained") return Pretrained(v);
  if (!v->Text(L::kPretrained).empty())
    return Invalid(L::kArch, "must be absent or pretrained with model.pretrained (config.json names the architecture)");
  if (!v->Text(L::kTask).empty()) return Invalid(L::kTask, "only with model.pretrained");
  if (!v->Text(L::kAdapterType).empty() || AdapterFieldSet(*v))
    return Invalid(L::kAdapterType, "only with model.pretrained (an adapter trains on a Hugging Face model)");
  if (!v->Text(L::kBasePrecision).empty())
    return Invalid(L::kBasePrecision, "only with model.pretrained and model.adapter");
  if (arch == "transformer_classifier") {
    if (Error e = Resolve({L::kPooling}, v)) return e;
  } else if (!v->Text(L::kPooling).empty()) {
    return Invalid(L::kPooling, "only for model.arch transformer_classifier");
  }
  if (arch == "torchscript" && v->Text(L::kPath).empty())
    return Invalid(L::kPath, "required when model.arch is torchscript");
  for (const SpecField& f : {L::kLayers, L::kDModel, L::kHeads}) FillDefault(f, v);
  if (v->Int(L::kFfn) == 0) v->Set(L::kFfn, 4 * v->Int(L::kDModel));
  if (Error e = Resolve({L::kLayers, L::kDModel}, v)) return e;
  const int64_t heads = v->Int(L::kHeads), d_model = v->Int(L::kDModel);
  if (heads < 1 || heads > L::kHeads.max || d_model % heads != 0)
    return Invalid(L::kHeads, "must be positive and divide model.d_model (" + std::to_string(d_model) + ")");
  return Resolve({L::kFfn, L::kDropout, L::kAttentionDropout, L::kMaxLen}, v);
}

// Language models (gpt_lm, model.task causal_lm) have no labels, so a jsonl file's
// label_field gets no default for them; prompt / completion pairs are theirs alone.
Error Data(SpecValues* v) {
  if (v->Text(L::kDataPath).empty())
    return Invalid(L::kDataPath, "missing: the folder or file with the training data");
  if (Error e = Resolve({L::kFormat}, v)) return e;
  const bool lm = v->Text(L::kArch) == "gpt_lm" || v->Text(L::kTask) == "causal_lm";
  if (v->Text(L::kFormat) == "jsonl") {
    if (v->Text(L::kTextField).empty()) v->Set(L::kTextField, std::string("text"));
    if (v->Text(L::kLabelField).empty() && !lm) v->Set(L::kLabelField, std::string("label"));
  }
  if (!v->Text(L::kCompletionField).empty()) {
    if (v->Text(L::kTask) != "causal_lm") return Invalid(L::kCompletionField, "only with model.task causal_lm");
    if (v->Text(L::kFormat) != "jsonl") return Invalid(L::kCompletionField, "only with data.format jsonl");
    if (v->Text(L::kCompletionField) == v->Text(L::kTextField))
      return Invalid(L::kCompletionField, "must differ from data.text_field (the prompt)");
  }
  // A pretrained model's tokenizer is its folder's tokenizer.json; the others train one.
  const bool pretrained = v->Text(L::kArch) == "pretrained";
  const std::string tokenizer = v->Text(L::kTokenizerType);
  if (tokenizer.empty()) v->Set(L::kTokenizerType, std::string(pretrained ? "pretrained" : "sentencepiece"));
  if (pretrained && tokenizer == "sentencepiece")
    return Invalid(L::kTokenizerType, "must be absent or pretrained with model.pretrained (its folder's tokenizer.json)");
  if (!pretrained && tokenizer == "pretrained") return Invalid(L::kTokenizerType, "pretrained needs model.pretrained");
  return Resolve({L::kValidationFraction, L::kMaxSamples, L::kTextField, L::kLabelField, L::kCompletionField,
                  L::kTokenizerType, L::kVocabSize},
                 v);
}

// Either a token budget (max_tokens, at least one whole sample of the model's max_len)
// or a batch size.
Error Batching(SpecValues* v) {
  if (Error e = Resolve({L::kPrefetch}, v)) return e;
  const std::string text = v->Text(L::kMaxTokens);
  const int64_t max_tokens = ParseMaxTokens(text);
  if (max_tokens == -2) return Invalid(L::kMaxTokens, "'" + text + "' is not a positive integer or auto");
  if (Error e = Resolve({L::kBatchSize}, v)) return e;
  const int64_t max_len = v->Int(L::kMaxLen);
  if (max_tokens > 0 && max_tokens < max_len)
    return Invalid(L::kMaxTokens, "must be at least model.max_len (" + std::to_string(max_len) + ") so every sample fits");
  const bool causal_lm = v->Text(L::kTask) == "causal_lm";
  if (v->Text(L::kRows).empty()) v->Set(L::kRows, std::string(causal_lm ? "packed" : "padded"));
  if (Error e = Resolve({L::kRows}, v)) return e;
  if (v->Text(L::kRows) == "packed" && !causal_lm)
    return Invalid(L::kRows, "packed only with model.task causal_lm (a classifier reads one sample per row)");
  return std::nullopt;
}

// train.early_stopping: its settings take their defaults when the metric is set, and are
// refused without it.
Error EarlyStopping(SpecValues* v) {
  if (v->Text(L::kEarlyStoppingMetric).empty()) {
    if (v->Int(L::kEarlyStoppingPatience) != 0 || v->Real(L::kEarlyStoppingMinDelta) != 0)
      return Invalid(L::kEarlyStoppingMetric, "missing while other train.early_stopping fields are set");
    return std::nullopt;
  }
  return Resolve({L::kEarlyStoppingMetric, L::kEarlyStoppingPatience, L::kEarlyStoppingMinDelta}, v);
}

Error Train(SpecValues* v) {
  if (Error e = Resolve({L::kEpochs, L::kOptimizer, L::kLr, L::kWeightDecay, L::kWarmupSteps, L::kSeed,
                         L::kPrecision, L::kGradClip, L::kActivationCheckpointing},
                        v))
    return e;
  const std::string ac = v->Text(L::kActivationCheckpointing);
  if (ActivationCheckpointEvery(ac) < 0)
    return Invalid(L::kActivationCheckpointing, "'" + ac + "' is not none, full or every_N (N in [1, 9999])");
  if (Error e = Resolve({L::kMaxSteps, L::kThreads, L::kAccumulateSteps, L::kSchedule}, v)) return e;
  if (Error e = EarlyStopping(v)) return e;
  return Batching(v);
}

}  // namespace

bool IsOneOf(const char* choices, const std::string& value) {
  const std::string all = std::string("|") + choices + "|";
  return all.find("|" + value + "|") != std::string::npos;
}

std::optional<SpecError> ApplySpecRules(SpecValues* v) {
  if (Error e = CheckStrings(*v)) return e;
  if (Error e = Resolve({L::kName}, v)) return e;
  if (Error e = Model(v)) return e;
  if (Error e = Data(v)) return e;
  if (Error e = Train(v)) return e;
  if (Error e = Resolve({L::kWorldSize, L::kTimeoutSeconds, L::kDevice, L::kBucketMb, L::kMemoryGb, L::kSharding,
                         L::kReducePrecision, L::kAccumulateGradients, L::kTimeLimitMinutes},
                        v))
    return e;
  if (v->Text(L::kSharding) == "full" && v->Text(L::kArch) == "torchscript")  // parallel/fully_sharded.h
    return Invalid(L::kSharding, "full shards a model's transformer blocks; a torchscript model has none (use optimizer)");
  if (Error e = Resolve({L::kEverySteps, L::kEverySeconds, L::kKeepLast}, v)) return e;
  if (Error e = Resolve({L::kMaxRestarts, L::kHangSeconds, L::kPriority}, v)) return e;
  if (Error e = Resolve({L::kEvalEverySteps}, v)) return e;
  if (!v->Text(L::kExportBest).empty())
    if (Error e = Check(L::kExportBest, *v)) return e;
  if (v->Int(L::kExportMerge) != 0 && v->Text(L::kAdapterType).empty())
    return Invalid(L::kExportMerge, "only with model.adapter (a full fine-tune's export is already the whole model)");
  return std::nullopt;
}

}  // namespace nightshift::spec_rules
