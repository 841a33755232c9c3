#include "common/spec.h"

#include "common/format/spec_limits.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

namespace nightshift {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

struct FieldError {
  std::string field;
  std::string message;
};

std::string LineOf(const YAML::Node& node) {
  return "line " + std::to_string(node.Mark().line + 1);
}

// Sets the scalar `field` of `message` from `value`, refusing text of the wrong type or
// out of the field's type's range.
Status SetScalar(const YAML::Node& value, const std::string& field_path, const FieldDescriptor* field,
                 Message* message) {
  const Reflection* refl = message->GetReflection();
  const std::string text = value.Scalar();
  auto bad = [&](const char* what) {
    return Status::InvalidArgument(field_path + " (" + LineOf(value) + "): '" + text +
                                   "' is not " + what);
  };
  errno = 0;
  char* end = nullptr;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64: {
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE) return bad("an integer");
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_INT32) {
        if (v < INT32_MIN || v > INT32_MAX) return bad("a 32-bit integer");
        refl->SetInt32(message, field, static_cast<int32_t>(v));
      } else {
        refl->SetInt64(message, field, v);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64: {
      if (!text.empty() && text[0] == '-') return bad("a non-negative integer");
      unsigned long long v = std::strtoull(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || errno == ERANGE) return bad("a non-negative integer");
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32) {
        if (v > UINT32_MAX) return bad("a 32-bit integer");
        refl->SetUInt32(message, field, static_cast<uint32_t>(v));
      } else {
        refl->SetUInt64(message, field, v);
      }
      break;
    }
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      double v = std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0' || !std::isfinite(v)) return bad("a finite number");
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) refl->SetDouble(message, field, v);
      else refl->SetFloat(message, field, static_cast<float>(v));
      break;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      if (text == "true") refl->SetBool(message, field, true);
      else if (text == "false") refl->SetBool(message, field, false);
      else return bad("true or false");
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      refl->SetString(message, field, text);
      break;
    case FieldDescriptor::CPPTYPE_ENUM: {
      const auto* ev = field->enum_type()->FindValueByName(text);
      if (ev == nullptr) return bad("a known value");
      refl->SetEnum(message, field, ev);
      break;
    }
    default:
      return Status::InvalidArgument(field_path + ": unsupported field type");
  }
  return Status::OK();
}

// `key` names no field of `desc`: the error lists the ones it could have named.
Status UnknownField(const Descriptor* desc, const std::string& field_path, const YAML::Node& key) {
  std::string known;
  for (int i = 0; i < desc->field_count(); ++i) known += (i ? ", " : "") + desc->field(i)->name();
  return Status::InvalidArgument(field_path + " (" + LineOf(key) + "): unknown field; known fields here: " + known);
}

// Sets `message` from a YAML mapping, recording each field's line in `lines`.
Status FillMessage(const YAML::Node& node, const std::string& path, Message* message,
                   std::map<std::string, int>* lines) {
  const std::string where = path.empty() ? "the spec" : path;
  if (!node.IsMap()) {
    return Status::InvalidArgument(where + " (" + LineOf(node) + "): expected a mapping of fields");
  }
  const Descriptor* desc = message->GetDescriptor();
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string field_path = path.empty() ? key : path + "." + key;
    const FieldDescriptor* field = desc->FindFieldByName(key);
    if (field == nullptr) field = desc->FindFieldByCamelcaseName(key);
    if (field == nullptr) return UnknownField(desc, field_path, kv.first);
    (*lines)[field_path] = kv.first.Mark().line + 1;
    const YAML::Node& value = kv.second;
    if (value.IsNull()) continue;
    if (field->is_repeated()) {
      return Status::InvalidArgument(field_path + ": lists are not supported here");
    }
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      NS_RETURN_IF_ERROR(
          FillMessage(value, field_path, message->GetReflection()->MutableMessage(message, field), lines));
      continue;
    }
    if (!value.IsScalar()) {
      return Status::InvalidArgument(field_path + " (" + LineOf(value) + "): expected a single value");
    }
    NS_RETURN_IF_ERROR(SetScalar(value, field_path, field, message));
  }
  return Status::OK();
}

Status Invalid(const std::string& field, const std::string& message) {
  return Status::InvalidArgument(field + ": " + message);
}


// What the YAML loader cannot produce but a SubmitJobRequest.spec can: fields this
// coordinator does not know (a newer client's), and strings with control characters or
// of unbounded length. Checked for every message and string field, recursively.
Status CheckFieldsAndStrings(const Message& message, const std::string& path) {
  const Reflection* refl = message.GetReflection();
  if (!refl->GetUnknownFields(message).empty())
    return Invalid(path.empty() ? "spec" : path, "has fields this coordinator does not know");
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string field_path = path.empty() ? field->name() : path + "." + field->name();
    if (field->is_repeated()) return Invalid(field_path, "lists are not supported here");
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      NS_RETURN_IF_ERROR(CheckFieldsAndStrings(refl->GetMessage(message, field), field_path));
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      const std::string value = refl->GetString(message, field);
      if (value.size() > 4096) return Invalid(field_path, "longer than 4096 bytes");
      for (unsigned char c : value)
        if (c < 0x20 || c == 0x7f) return Invalid(field_path, "contains a control character");
    }
  }
  return Status::OK();
}

bool Finite(double v) { return std::isfinite(v); }

namespace L = format::limits;
using format::WithDefault;

// Range checks against the one table of limits (common/format/spec_limits.h).
Status IntIn(const format::IntField& f, int64_t v, const std::string& note = "") {
  if (format::InRange(f, v)) return Status::OK();
  return Invalid(f.name, format::RangeText(f) + note + ", got " + std::to_string(v));
}
Status RealIn(const format::RealField& f, double v, const std::string& note = "") {
  if (Finite(v) && format::InRange(f, v)) return Status::OK();
  return Invalid(f.name, format::RangeText(f) + note);
}

}  // namespace

int64_t MaxTokensOf(const v1::BatchingSpec& batching) {
  const std::string& s = batching.max_tokens();
  if (s.empty()) return 0;
  if (s == "auto") return -1;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (*end != '\0' || v < L::kMaxTokens.min || v > L::kMaxTokens.max || !std::isdigit(static_cast<unsigned char>(s[0])))
    return -2;  // invalid; validation reports it
  return v;
}

namespace {

// One function per spec section: each fills the section's defaults, then checks it, in
// the order its errors are reported (the first one found is the one returned).

Status DefaultAndValidateModel(v1::ModelSpec* m) {
  static const std::set<std::string> kArchs = {"transformer_classifier", "gpt_lm", "torchscript"};
  if (m->arch().empty()) return Invalid("model.arch", "missing (one of transformer_classifier, gpt_lm, torchscript)");
  if (!kArchs.count(m->arch()))
    return Invalid("model.arch", "unknown architecture '" + m->arch() +
                                     "' (expected transformer_classifier, gpt_lm or torchscript)");
  if (m->arch() == "torchscript" && m->path().empty())
    return Invalid("model.path", "required when model.arch is torchscript");
  m->set_layers(static_cast<int32_t>(WithDefault(L::kLayers, m->layers())));
  m->set_d_model(static_cast<int32_t>(WithDefault(L::kDModel, m->d_model())));
  m->set_heads(static_cast<int32_t>(WithDefault(L::kHeads, m->heads())));
  if (m->ffn() == 0) m->set_ffn(4 * m->d_model());
  m->set_max_len(static_cast<int32_t>(WithDefault(L::kMaxLen, m->max_len())));
  if (!m->has_dropout()) m->set_dropout(L::kDefaultDropout);
  NS_RETURN_IF_ERROR(IntIn(L::kLayers, m->layers()));
  NS_RETURN_IF_ERROR(IntIn(L::kDModel, m->d_model()));
  if (m->heads() < 1 || m->d_model() % m->heads() != 0)
    return Invalid("model.heads", "must be positive and divide model.d_model (" +
                                      std::to_string(m->d_model()) + ")");
  NS_RETURN_IF_ERROR(IntIn(L::kFfn, m->ffn()));
  NS_RETURN_IF_ERROR(RealIn(L::kDropout, m->dropout()));
  NS_RETURN_IF_ERROR(RealIn(L::kAttentionDropout, m->attention_dropout()));
  return IntIn(L::kMaxLen, m->max_len());
}

Status DefaultAndValidateTokenizer(v1::TokenizerSpec* tok) {
  if (tok->type().empty()) tok->set_type("sentencepiece");
  if (tok->type() != "sentencepiece")
    return Invalid("data.tokenizer.type", "unknown tokenizer '" + tok->type() + "' (expected sentencepiece)");
  if (tok->vocab_size() == 0) tok->set_vocab_size(8000);
  if (tok->vocab_size() < 16 || tok->vocab_size() > 1000000)
    return Invalid("data.tokenizer.vocab_size", "must be in [16, 1000000]");
  return Status::OK();
}

// A gpt_lm has no labels, so a jsonl file's label_field gets no default for it.
Status DefaultAndValidateData(const v1::ModelSpec& m, v1::DataSpec* d) {
  if (d->path().empty()) return Invalid("data.path", "missing: the folder or file with the training data");
  if (d->format().empty()) d->set_format("text_dir");
  if (d->format() != "text_dir" && d->format() != "jsonl")
    return Invalid("data.format", "unknown format '" + d->format() + "' (expected text_dir or jsonl)");
  if (d->format() == "jsonl") {
    if (d->text_field().empty()) d->set_text_field("text");
    if (d->label_field().empty() && m.arch() != "gpt_lm") d->set_label_field("label");
  }
  if (d->validation_fraction() == 0) d->set_validation_fraction(0.2);
  if (!Finite(d->validation_fraction()) || d->validation_fraction() < 0 || d->validation_fraction() >= 1)
    return Invalid("data.validation_fraction", "must be in [0, 1)");
  if (d->max_samples() < 0 || d->max_samples() > (int64_t{1} << 40))
    return Invalid("data.max_samples", "must be in [0, 2^40] (0: all)");
  if (d->text_field().size() > 256) return Invalid("data.text_field", "longer than 256 characters");
  if (d->label_field().size() > 256) return Invalid("data.label_field", "longer than 256 characters");
  return DefaultAndValidateTokenizer(d->mutable_tokenizer());
}

// none, full or every_N with N in [1, 9999].
bool IsActivationCheckpointing(const std::string& ac) {
  return ac == "none" || ac == "full" ||
         (ac.rfind("every_", 0) == 0 && ac.size() > 6 && ac.size() <= 10 &&
          ac.find_first_not_of("0123456789", 6) == std::string::npos && std::atoi(ac.c_str() + 6) >= 1);
}

// Either a token budget (max_tokens, at least one whole sample of the model's max_len)
// or a batch size, defaulted only when there is no budget.
Status DefaultAndValidateBatching(const v1::ModelSpec& m, v1::BatchingSpec* b) {
  b->set_prefetch(static_cast<int32_t>(WithDefault(L::kPrefetch, b->prefetch())));
  NS_RETURN_IF_ERROR(IntIn(L::kPrefetch, b->prefetch()));
  const int64_t max_tokens = MaxTokensOf(*b);
  if (max_tokens == -2)
    return Invalid("train.batching.max_tokens", "'" + b->max_tokens() + "' is not a positive integer or auto");
  if (max_tokens == 0) b->set_batch_size(static_cast<int32_t>(WithDefault(L::kBatchSize, b->batch_size())));
  if (b->batch_size() != 0) NS_RETURN_IF_ERROR(IntIn(L::kBatchSize, b->batch_size()));
  if (max_tokens > 0 && max_tokens < m.max_len())
    return Invalid("train.batching.max_tokens", "must be at least model.max_len (" +
                                                    std::to_string(m.max_len()) + ") so every sample fits");
  return Status::OK();
}

Status DefaultAndValidateTrain(const v1::ModelSpec& m, v1::TrainSpec* t) {
  t->set_epochs(static_cast<int32_t>(WithDefault(L::kEpochs, t->epochs())));
  NS_RETURN_IF_ERROR(IntIn(L::kEpochs, t->epochs()));
  if (t->optimizer().empty()) t->set_optimizer("adamw");
  if (t->optimizer() != "adamw") return Invalid("train.optimizer", "unknown optimizer '" + t->optimizer() + "' (expected adamw)");
  t->set_lr(WithDefault(L::kLr, t->lr()));
  NS_RETURN_IF_ERROR(RealIn(L::kLr, t->lr(), " (0: the default)"));
  if (!t->has_weight_decay()) t->set_weight_decay(L::kDefaultWeightDecay);
  NS_RETURN_IF_ERROR(RealIn(L::kWeightDecay, t->weight_decay()));
  if (!t->has_warmup_steps()) t->set_warmup_steps(L::kDefaultWarmupSteps);
  NS_RETURN_IF_ERROR(IntIn(L::kWarmupSteps, t->warmup_steps()));
  if (t->seed() == 0) t->set_seed(1234);
  if (t->precision().empty()) t->set_precision(L::kDefaultPrecision);
  if (t->precision() != "fp32" && t->precision() != "bf16" && t->precision() != "fp16")
    return Invalid("train.precision", "unknown precision '" + t->precision() + "' (expected fp32, bf16 or fp16)");
  if (!t->has_grad_clip()) t->set_grad_clip(L::kDefaultGradClip);
  NS_RETURN_IF_ERROR(RealIn(L::kGradClip, t->grad_clip(), " (0 disables clipping)"));
  if (t->activation_checkpointing().empty()) t->set_activation_checkpointing("none");
  if (!IsActivationCheckpointing(t->activation_checkpointing()))
    return Invalid("train.activation_checkpointing",
                   "'" + t->activation_checkpointing() + "' is not none, full or every_N");
  NS_RETURN_IF_ERROR(IntIn(L::kMaxSteps, t->max_steps(), " (0: no limit)"));
  NS_RETURN_IF_ERROR(IntIn(L::kThreads, t->threads(), " (0: all cores / local ranks)"));
  return DefaultAndValidateBatching(m, t->mutable_batching());
}

Status DefaultAndValidateResources(v1::ResourceSpec* r) {
  if (!r->has_world_size()) r->set_world_size(static_cast<int32_t>(L::kWorldSize.fallback));  // an explicit 0 is refused
  NS_RETURN_IF_ERROR(IntIn(L::kWorldSize, r->world_size()));
  r->set_timeout_seconds(static_cast<int32_t>(WithDefault(L::kTimeoutSeconds, r->timeout_seconds())));
  NS_RETURN_IF_ERROR(IntIn(L::kTimeoutSeconds, r->timeout_seconds()));
  if (r->device().empty()) r->set_device(L::kDefaultDevice);
  if (r->device() != "auto" && r->device() != "cpu" && r->device() != "cuda")
    return Invalid("resources.device", "unknown device '" + r->device() + "' (expected auto, cpu or cuda)");
  r->set_bucket_mb(static_cast<int32_t>(WithDefault(L::kBucketMb, r->bucket_mb())));
  return IntIn(L::kBucketMb, r->bucket_mb());
}

Status DefaultAndValidateCheckpoint(v1::CheckpointSpec* c) {
  if (!c->has_every_steps()) c->set_every_steps(L::kDefaultEverySteps);
  NS_RETURN_IF_ERROR(IntIn(L::kEverySteps, c->every_steps(), " (0 disables)"));
  NS_RETURN_IF_ERROR(IntIn(L::kEverySeconds, c->every_seconds(), " (30 days; 0 disables)"));
  c->set_keep_last(static_cast<int32_t>(WithDefault(L::kKeepLast, c->keep_last())));
  return IntIn(L::kKeepLast, c->keep_last());
}

// restart and priority: read by the coordinator only, they have no defaults to fill.
Status ValidateScheduling(const v1::JobSpec& spec) {
  if (spec.restart().max_restarts() < 0 || spec.restart().max_restarts() > 1000)
    return Invalid("restart.max_restarts", "must be in [0, 1000]");
  if (spec.restart().hang_seconds() < 0 || spec.restart().hang_seconds() > 604800)
    return Invalid("restart.hang_seconds", "must be in [0, 604800] (0: max(300, 10x the step time))");
  if (spec.priority() < -1000000 || spec.priority() > 1000000)
    return Invalid("priority", "must be in [-1000000, 1000000]");
  return Status::OK();
}

}  // namespace

Status DefaultAndValidateJobSpec(v1::JobSpec* spec) {
  NS_RETURN_IF_ERROR(CheckFieldsAndStrings(*spec, ""));
  if (spec->name().empty()) spec->set_name("job");
  if (spec->name().size() > 128) return Invalid("name", "longer than 128 characters");
  NS_RETURN_IF_ERROR(DefaultAndValidateModel(spec->mutable_model()));
  NS_RETURN_IF_ERROR(DefaultAndValidateData(spec->model(), spec->mutable_data()));
  NS_RETURN_IF_ERROR(DefaultAndValidateTrain(spec->model(), spec->mutable_train()));
  NS_RETURN_IF_ERROR(DefaultAndValidateResources(spec->mutable_resources()));
  NS_RETURN_IF_ERROR(DefaultAndValidateCheckpoint(spec->mutable_checkpoint()));
  return ValidateScheduling(*spec);
}

StatusOr<v1::JobSpec> LoadJobSpec(const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    return Status::InvalidArgument("spec does not parse as YAML or JSON: line " +
                                   std::to_string(e.mark.line + 1) + ", column " +
                                   std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) return Status::InvalidArgument("spec is empty");
  v1::JobSpec spec;
  std::map<std::string, int> lines;
  try {
    NS_RETURN_IF_ERROR(FillMessage(root, "", &spec, &lines));
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument("spec: line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
  Status s = DefaultAndValidateJobSpec(&spec);
  if (!s.ok()) {
    const std::string& msg = s.message();
    std::string field = msg.substr(0, msg.find(':'));
    auto it = lines.find(field);
    if (it != lines.end())
      return Status::InvalidArgument(field + " (line " + std::to_string(it->second) + ")" +
                                     msg.substr(field.size()));
    return s;
  }
  return spec;
}

}  // namespace nightshift
