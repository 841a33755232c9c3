// Every post-processor `tokenizers` has, for one sequence, puts special tokens before and
// after the ids, so one class holds them all: Bert and Roberta processing (cls, sep),
// TemplateProcessing (its `single` template), ByteLevel (nothing, for ids) and a Sequence
// of these (each wraps what the one before it made).
#include <cstdint>
#include <limits>
#include <string>

#include "tokenizer/components.h"

namespace nightshift::tokenizer {
namespace {

class SpecialsAround : public PostProcessor {
 public:
  size_t AddedCount() const override { return before_.size() + after_.size(); }
  std::vector<int32_t> Process(const std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out = before_;
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), after_.begin(), after_.end());
    return out;
  }
  std::vector<int32_t> Before() const override { return before_; }
  std::vector<int32_t> After() const override { return after_; }
  // This one applied after `inner`.
  void Wrap(const SpecialsAround& inner) {
    before_.insert(before_.end(), inner.before_.begin(), inner.before_.end());
    after_.insert(after_.begin(), inner.after_.begin(), inner.after_.end());
  }

  std::vector<int32_t> before_, after_;
};

// A token id: an integer from 0 to 2^31-1 (what the model's vocabulary holds).
bool IsId(const Json& v) {
  return v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max());
}

// The string at `key` of `object`; "" when it is not an object or has none. (Json::value
// would throw on either.)
std::string StringAt(const Json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

// ["[CLS]", 101] -> 101.
Error TokenId(const Json& config, const char* key, int32_t* id) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_array() || it->size() != 2 || !IsId((*it)[1]))
    return std::string("post_processor.") + key + ": expected [token, id]";
  *id = static_cast<int32_t>((*it)[1].get<uint64_t>());
  return "";
}

Error Template(const Json& config, SpecialsAround* out) {
  const Json single = config.value("single", Json());
  const Json specials = config.value("special_tokens", Json::object());
  if (!single.is_array()) return "post_processor.single: missing";
  bool seen_sequence = false;
  for (const Json& item : single) {
    if (item.is_object() && item.contains("Sequence")) {
      if (StringAt(item["Sequence"], "id") != "A" || seen_sequence)
        return "post_processor.single: only one sequence, A, is implemented: " + item.dump();
      seen_sequence = true;
      continue;
    }
    const std::string name = item.is_object() && item.contains("SpecialToken") ? StringAt(item["SpecialToken"], "id") : "";
    auto special = specials.find(name);
    if (name.empty() || special == specials.end() || !special->is_object() || !special->contains("ids") ||
        !(*special)["ids"].is_array())
      return "post_processor.single: '" + item.dump() + "' names no entry of special_tokens";
    std::vector<int32_t>& side = seen_sequence ? out->after_ : out->before_;
    for (const Json& id : (*special)["ids"]) {
      if (!IsId(id))
        return "post_processor.special_tokens: '" + name + "' has the id " + id.dump() + ", not one from 0 to 2^31-1";
      side.push_back(static_cast<int32_t>(id.get<uint64_t>()));
    }
  }
  if (!seen_sequence) return "post_processor.single: no Sequence A";
  return "";
}

Error Build(const Json& config, SpecialsAround* out) {
  if (!config.is_object()) return "post_processor: not an object: " + config.dump();
  const std::string type = StringAt(config, "type");
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    int32_t cls = 0, sep = 0;
    if (Error e = TokenId(config, "cls", &cls); !e.empty()) return e;
    if (Error e = TokenId(config, "sep", &sep); !e.empty()) return e;
    out->before_ = {cls};
    out->after_ = {sep};
    return "";
  }
  if (type == "TemplateProcessing") return Template(config, out);
  if (type == "ByteLevel") return "";
  if (type == "Sequence") {
    for (const Json& part : config.value("processors", Json::array())) {
      SpecialsAround inner;
      if (Error e = Build(part, &inner); !e.empty()) return e;
      inner.Wrap(*out);  // `part` runs after what is already in *out
      *out = std::move(inner);
    }
    return "";
  }
  return "post_processor.type: '" + type + "' is not implemented";
}

}  // namespace

Error NewPostProcessor(const Json& config, std::unique_ptr<PostProcessor>* out) {
  auto p = std::make_unique<SpecialsAround>();
  if (Error e = Build(config, p.get()); !e.empty()) return e;
  *out = std::move(p);
  return "";
}

}  // namespace nightshift::tokenizer
