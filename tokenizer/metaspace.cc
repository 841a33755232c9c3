// The Metaspace pre-tokenizer as `tokenizers` (0.23) runs it, what sentencepiece-converted
// tokenizer.json files use (Llama 2 and Mistral as transformers 5.24 saves them): spaces
// become the replacement character (U+2581 '▁'), one is put in front of the text unless it
// starts with one already or the prepend scheme says not to (always; first: only before
// the stretch that starts the text, not after an added token; never), and with `split`
// the text is cut before each replacement character (MergedWithNext).
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

enum class Prepend { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, Prepend prepend, bool split)
      : replacement_(replacement), prepend_(prepend), split_(split) {}

  void Split(const std::u32string& text, std::vector<std::u32string>* words) const override {
    SplitPiece(text, /*at_start=*/true, words);
  }

  void SplitPiece(const std::u32string& text, bool at_start, std::vector<std::u32string>* words) const override {
    if (text.empty()) return;
    std::u32string word;
    word.reserve(text.size() + 1);
    if (text[0] != U' ' && text[0] != replacement_ &&
        (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && at_start)))
      word.push_back(replacement_);
    for (char32_t c : text) {
      if (c == U' ') c = replacement_;
      if (split_ && c == replacement_ && !word.empty()) {
        words->push_back(std::move(word));
        word.clear();
      }
      word.push_back(c);
    }
    if (!word.empty()) words->push_back(std::move(word));
  }

 private:
  const char32_t replacement_;
  const Prepend prepend_;
  const bool split_;
};

}  // namespace

Error NewMetaspacePreTokenizer(const Json& config, std::unique_ptr<PreTokenizer>* out) {
  if (!config.is_object()) return "Metaspace pre_tokenizer: not a JSON object";
  const auto replacement = config.find("replacement");
  if (replacement == config.end() || !replacement->is_string() ||
      DecodeUtf8(replacement->get<std::string>()).size() != 1)
    return "Metaspace pre_tokenizer: \"replacement\" must be one character";
  // prepend_scheme, or before it (tokenizers < 0.19) add_prefix_space: true is "always".
  Prepend prepend = Prepend::kAlways;
  const auto scheme = config.find("prepend_scheme");
  const auto add_prefix_space = config.find("add_prefix_space");
  if (scheme != config.end()) {
    const std::string s = scheme->is_string() ? scheme->get<std::string>() : "";
    if (s == "always") prepend = Prepend::kAlways;
    else if (s == "first") prepend = Prepend::kFirst;
    else if (s == "never") prepend = Prepend::kNever;
    else return "Metaspace pre_tokenizer: \"prepend_scheme\" must be \"always\", \"first\" or \"never\", not " + scheme->dump();
  } else if (add_prefix_space != config.end()) {
    if (!add_prefix_space->is_boolean()) return "Metaspace pre_tokenizer: \"add_prefix_space\" must be true or false";
    prepend = add_prefix_space->get<bool>() ? Prepend::kAlways : Prepend::kNever;
  }
  bool split = true;
  if (const auto it = config.find("split"); it != config.end()) {
    if (!it->is_boolean()) return "Metaspace pre_tokenizer: \"split\" must be true or false";
    split = it->get<bool>();
  }
  *out = std::make_unique<MetaspacePreTokenizer>(DecodeUtf8(replacement->get<std::string>())[0], prepend, split);
  return "";
}

}  // namespace nightshift::tokenizer
