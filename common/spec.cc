#include "common/spec.h"

#include "common/spec_rules/spec_rules.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <type_traits>
#include <variant>

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
  std::map<const FieldDescriptor*, int> given;  // each field's line here: YAML allows a key once
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string field_path = path.empty() ? key : path + "." + key;
    const FieldDescriptor* field = desc->FindFieldByName(key);
    if (field == nullptr) field = desc->FindFieldByCamelcaseName(key);
    if (field == nullptr) return UnknownField(desc, field_path, kv.first);
    const auto [first, fresh] = given.emplace(field, kv.first.Mark().line + 1);
    if (!fresh)  // yaml-cpp keeps both: the later would win silently (grad_clip beside gradClip too)
      return Status::InvalidArgument(field_path + " (" + LineOf(kv.first) + "): given twice (first on line " +
                                     std::to_string(first->second) + ")");
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
// coordinator does not know (a newer client's), and lists. Checked for every message,
// recursively; the strings' rules are the spec's own (spec_rules::ApplySpecRules).
Status CheckKnownFields(const Message& message, const std::string& path) {
  const Reflection* refl = message.GetReflection();
  if (!refl->GetUnknownFields(message).empty())
    return Invalid(path.empty() ? "spec" : path, "has fields this coordinator does not know");
  std::vector<const FieldDescriptor*> fields;
  refl->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string field_path = path.empty() ? field->name() : path + "." + field->name();
    if (field->is_repeated()) return Invalid(field_path, "lists are not supported here");
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE)
      NS_RETURN_IF_ERROR(CheckKnownFields(refl->GetMessage(message, field), field_path));
  }
  return Status::OK();
}

// The message that holds the field at `path` (e.g. "train.batching.prefetch"), creating
// the messages on the way, and that field (null where the JobSpec has none).
std::pair<Message*, const FieldDescriptor*> Locate(Message* root, const std::string& path) {
  Message* message = root;
  size_t from = 0;
  for (size_t dot; (dot = path.find('.', from)) != std::string::npos; from = dot + 1) {
    const FieldDescriptor* sub = message->GetDescriptor()->FindFieldByName(path.substr(from, dot - from));
    if (sub == nullptr || sub->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return {message, nullptr};
    message = message->GetReflection()->MutableMessage(message, sub);
  }
  return {message, message->GetDescriptor()->FindFieldByName(path.substr(from))};
}

// The spec's fields as the rules take them: a field with presence (`optional`) when it
// is set; a plain one when it is not 0 or "" (proto3 cannot tell those from absent).
spec_rules::SpecValues ValuesOf(v1::JobSpec spec) {
  spec_rules::SpecValues values;
  for (const spec_rules::SpecField& f : spec_rules::SpecFields()) {
    auto [message, field] = Locate(&spec, f.path);
    if (field == nullptr) continue;  // the field-walk test keeps table and proto equal
    const Reflection* refl = message->GetReflection();
    if (field->has_presence() && !refl->HasField(*message, field)) continue;
    spec_rules::SpecValues::Value value;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: value = int64_t{refl->GetInt32(*message, field)}; break;
      case FieldDescriptor::CPPTYPE_INT64: value = int64_t{refl->GetInt64(*message, field)}; break;
      case FieldDescriptor::CPPTYPE_UINT64: value = uint64_t{refl->GetUInt64(*message, field)}; break;
      case FieldDescriptor::CPPTYPE_DOUBLE: value = refl->GetDouble(*message, field); break;
      case FieldDescriptor::CPPTYPE_STRING: value = refl->GetString(*message, field); break;
      case FieldDescriptor::CPPTYPE_BOOL: value = int64_t{refl->GetBool(*message, field)}; break;
      default: continue;
    }
    const bool zero = std::visit([](const auto& x) { return x == std::decay_t<decltype(x)>{}; }, value);
    if (field->has_presence() || !zero) values.Set(f, std::move(value));
  }
  return values;
}

// Writes every value the rules resolved back into the spec.
void WriteValues(const spec_rules::SpecValues& values, v1::JobSpec* spec) {
  for (const spec_rules::SpecField& f : spec_rules::SpecFields()) {
    if (!values.Has(f)) continue;
    auto [message, field] = Locate(spec, f.path);
    if (field == nullptr) continue;
    const Reflection* refl = message->GetReflection();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32: refl->SetInt32(message, field, static_cast<int32_t>(values.Int(f))); break;
      case FieldDescriptor::CPPTYPE_INT64: refl->SetInt64(message, field, values.Int(f)); break;
      case FieldDescriptor::CPPTYPE_UINT64: refl->SetUInt64(message, field, values.Uint(f)); break;
      case FieldDescriptor::CPPTYPE_DOUBLE: refl->SetDouble(message, field, values.Real(f)); break;
      case FieldDescriptor::CPPTYPE_STRING: refl->SetString(message, field, values.Text(f)); break;
      case FieldDescriptor::CPPTYPE_BOOL: refl->SetBool(message, field, values.Int(f) != 0); break;
      default: break;
    }
  }
}

}  // namespace

Status DefaultAndValidateJobSpec(v1::JobSpec* spec) {
  NS_RETURN_IF_ERROR(CheckKnownFields(*spec, ""));
  spec_rules::SpecValues values = ValuesOf(*spec);
  if (std::optional<spec_rules::SpecError> e = spec_rules::ApplySpecRules(&values))
    return Status::InvalidArgument(e->Text());
  WriteValues(values, spec);
  return Status::OK();
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
