// The decoders of tokenizer.json, as `tokenizers` (0.23) runs them: each is one step of
// decode_chain, taking the list of tokens (UTF-8 strings, as the vocabulary writes them)
// and giving a new list; Sequence runs its steps in order; the text is the concatenation
// of the last list (Tokenizer::Decode). Per step, what the Rust source does:
//
//   ByteLevel    every token whose characters are all in GPT-2's byte table becomes those
//                bytes, any other token (an added token with a space, say) its own UTF-8;
//                all the bytes are then one token, ill-formed sequences as U+FFFD
//                (String::from_utf8_lossy: one per maximal subpart).
//   Metaspace    the replacement character becomes a space, except in the first token
//                where every one of them is dropped (unless prepend_scheme is "never").
//   Replace      each token with every match of the pattern (a String or a Regex)
//                replaced by `content`.
//   ByteFallback runs of <0xHH> tokens become the string of their bytes when it is valid
//                UTF-8, else one U+FFFD per byte token.
//   Fuse         all tokens joined into one.
//   Strip        each token loses up to `start` leading and `stop` trailing `content`
//                characters.
//   WordPiece    tokens after the first lose the `prefix` or get a space in front; with
//                cleanup, " ." -> "." and the others below, in each token.
//   BPEDecoder   `suffix` becomes a space, at the end of the last token nothing.
#include <memory>
#include <string>
#include <vector>

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

// Every occurrence of `from` (not empty) in *s replaced by `to`, left to right, as Rust's
// str::replace.
void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  std::string out;
  size_t done = 0;
  for (size_t at = s->find(from); at != std::string::npos; at = s->find(from, done)) {
    out.append(*s, done, at - done);
    out += to;
    done = at + from.size();
  }
  if (done == 0) return;
  out.append(*s, done, std::string::npos);
  s->swap(out);
}

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens);
  }

 private:
  const std::vector<std::unique_ptr<Decoder>> steps_;
};

// GPT-2's byte table read backwards: character -> byte (byte_level.cc writes it forwards).
class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const std::string& token : *tokens) {
      const std::u32string chars = DecodeUtf8(token);
      std::string mapped;
      bool all_mapped = true;
      for (char32_t c : chars) {
        const int b = GptCharToByte(c);
        if (b < 0) {
          all_mapped = false;
          break;
        }
        mapped.push_back(static_cast<char>(b));
      }
      bytes += all_mapped ? mapped : token;
    }
    *tokens = {EncodeUtf8(DecodeUtf8(bytes))};  // ill-formed UTF-8 as U+FFFD, as from_utf8_lossy
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_in_first)
      : replacement_(std::move(replacement)), drop_in_first_(drop_in_first) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i)
      ReplaceAll(&(*tokens)[i], replacement_, i == 0 && drop_in_first_ ? "" : " ");
  }

 private:
  const std::string replacement_;  // one character, UTF-8
  const bool drop_in_first_;       // prepend_scheme is not "never"
};

class ReplaceDecoder : public Decoder {
 public:
  // `regex` null: `literal` (not empty) is the pattern.
  ReplaceDecoder(std::string literal, std::unique_ptr<icu::RegexPattern> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      if (regex_ == nullptr) {
        ReplaceAll(&token, literal_, content_);
        continue;
      }
      // Matches are left to right and do not overlap; `content` is literal (no $1).
      const icu::UnicodeString text = icu::UnicodeString::fromUTF8(token);
      UErrorCode status = U_ZERO_ERROR;
      std::unique_ptr<icu::RegexMatcher> m(regex_->matcher(text, status));
      if (U_FAILURE(status)) continue;  // only out of memory: the token stays
      icu::UnicodeString out;
      int32_t done = 0;
      while (m->find(status) && U_SUCCESS(status)) {
        const int32_t start = m->start(status), end = m->end(status);
        out.append(text, done, start - done);
        out.append(icu::UnicodeString::fromUTF8(content_));
        done = end;
      }
      out.append(text, done, text.length() - done);
      token.clear();
      out.toUTF8String(token);
    }
  }

 private:
  const std::string literal_;
  const std::unique_ptr<icu::RegexPattern> regex_;
  const std::string content_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string bytes;  // of the run of <0xHH> tokens before this token
    const auto flush = [&] {
      if (bytes.empty()) return;
      const std::string valid = EncodeUtf8(DecodeUtf8(bytes));
      if (valid == bytes) out.push_back(bytes);  // well-formed: the string as it is
      else out.insert(out.end(), bytes.size(), "\xEF\xBF\xBD");  // else U+FFFD per byte token
      bytes.clear();
    };
    for (std::string& token : *tokens) {
      int byte = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') byte = HexByte(token[3], token[4]);
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens->swap(out);
  }

 private:
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // As u8::from_str_radix(.., 16) on two characters, which takes "+F" for 15.
  static int HexByte(char hi, char lo) {
    if (hi == '+') return HexDigit(lo);
    const int h = HexDigit(hi), l = HexDigit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    *tokens = {std::move(all)};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& token : *tokens) {
      const std::u32string chars = DecodeUtf8(token);
      size_t begin = 0, end = chars.size();
      while (begin < start_ && begin < chars.size() && chars[begin] == content_) ++begin;
      for (size_t n = 0; n < stop_ && end > begin && chars[end - 1] == content_; ++n) --end;
      token = EncodeUtf8(std::u32string_view(chars).substr(begin, end - begin));
    }
  }

 private:
  const char32_t content_;
  const size_t start_, stop_;  // at most this many characters off each end
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& token = (*tokens)[i];
      if (i != 0) {
        if (token.compare(0, prefix_.size(), prefix_) == 0) token.erase(0, prefix_.size());
        else token.insert(0, " ");
      }
      if (cleanup_) CleanUp(&token);
    }
  }

 private:
  // tokenizers' wordpiece::cleanup (it has " do not" -> " don't", which transformers'
  // clean_up_tokenization has not).
  static void CleanUp(std::string* s) {
    static const char* const kPairs[][2] = {{" .", "."},     {" ?", "?"},     {" !", "!"},     {" ,", ","},
                                            {" ' ", "'"},    {" n't", "n't"}, {" 'm", "'m"},   {" do not", " don't"},
                                            {" 's", "'s"},   {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& p : kPairs) ReplaceAll(s, p[0], p[1]);
  }

  const std::string prefix_;
  const bool cleanup_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i)
      if (!suffix_.empty()) ReplaceAll(&(*tokens)[i], suffix_, i + 1 == tokens->size() ? "" : " ");
  }

 private:
  const std::string suffix_;
};

Error ReadString(const Json& config, const char* key, const char* fallback, std::string* out) {
  const auto it = config.find(key);
  if (it == config.end() && fallback != nullptr) {
    *out = fallback;
    return "";
  }
  if (it == config.end() || !it->is_string())
    return std::string("decoder ") + config.value("type", "") + ": \"" + key + "\" must be a string";
  *out = it->get<std::string>();
  return "";
}

Error ReadCount(const Json& config, const char* key, size_t* out) {
  const auto it = config.find(key);
  if (it == config.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
    return std::string("decoder Strip: \"") + key + "\" must be a count (0 or more)";
  *out = it->get<size_t>();
  return "";
}

Error NewMetaspace(const Json& config, std::unique_ptr<Decoder>* out) {
  std::string replacement;
  if (Error e = ReadString(config, "replacement", nullptr, &replacement); !e.empty()) return e;
  if (DecodeUtf8(replacement).size() != 1) return "decoder Metaspace: \"replacement\" must be one character";
  // prepend_scheme, or before it (tokenizers < 0.19) add_prefix_space (true: "always").
  bool drop_in_first = true;
  if (const auto it = config.find("prepend_scheme"); it != config.end()) {
    const std::string s = it->is_string() ? it->get<std::string>() : "";
    if (s != "always" && s != "first" && s != "never")
      return "decoder Metaspace: \"prepend_scheme\" must be \"always\", \"first\" or \"never\", not " + it->dump();
    drop_in_first = s != "never";
  } else if (const auto add = config.find("add_prefix_space"); add != config.end()) {
    if (!add->is_boolean()) return "decoder Metaspace: \"add_prefix_space\" must be true or false";
    drop_in_first = add->get<bool>();
  }
  *out = std::make_unique<MetaspaceDecoder>(replacement, drop_in_first);
  return "";
}

Error NewReplace(const Json& config, std::unique_ptr<Decoder>* out) {
  const auto pattern = config.find("pattern");
  if (pattern == config.end() || !pattern->is_object() || pattern->size() != 1 ||
      !(pattern->contains("String") || pattern->contains("Regex")) || !pattern->begin()->is_string())
    return "decoder Replace: \"pattern\" must be {\"String\": \"...\"} or {\"Regex\": \"...\"}";
  std::string content;
  if (Error e = ReadString(config, "content", nullptr, &content); !e.empty()) return e;
  const std::string source = pattern->begin()->get<std::string>();
  if (pattern->contains("String")) {
    if (source.empty()) return "decoder Replace: an empty String pattern is not implemented";
    *out = std::make_unique<ReplaceDecoder>(source, nullptr, content);
    return "";
  }
  std::string icu_source;
  if (Error e = OnigurumaToIcu(source, &icu_source); !e.empty()) return "decoder Replace: " + e;
  UParseError where{};
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexPattern> regex(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(icu_source), 0, where, status));
  if (U_FAILURE(status))
    return "decoder Replace: ICU cannot compile the pattern " + pattern->dump() + ": " + u_errorName(status);
  *out = std::make_unique<ReplaceDecoder>("", std::move(regex), content);
  return "";
}

Error NewStrip(const Json& config, std::unique_ptr<Decoder>* out) {
  std::string content;
  if (Error e = ReadString(config, "content", nullptr, &content); !e.empty()) return e;
  const std::u32string c = DecodeUtf8(content);
  if (c.size() != 1) return "decoder Strip: \"content\" must be one character";
  size_t start = 0, stop = 0;
  for (Error e : {ReadCount(config, "start", &start), ReadCount(config, "stop", &stop)})
    if (!e.empty()) return e;
  *out = std::make_unique<StripDecoder>(c[0], start, stop);
  return "";
}

Error NewWordPiece(const Json& config, std::unique_ptr<Decoder>* out) {
  std::string prefix;
  if (Error e = ReadString(config, "prefix", "##", &prefix); !e.empty()) return e;
  bool cleanup = true;
  if (const auto it = config.find("cleanup"); it != config.end()) {
    if (!it->is_boolean()) return "decoder WordPiece: \"cleanup\" must be true or false";
    cleanup = it->get<bool>();
  }
  *out = std::make_unique<WordPieceDecoder>(prefix, cleanup);
  return "";
}

}  // namespace

void CleanUpTokenizationSpaces(std::string* text) {
  static const char* const kPairs[][2] = {{" .", "."},     {" ?", "?"},     {" !", "!"},   {" ,", ","},
                                          {" ' ", "'"},    {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"},
                                          {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& p : kPairs) ReplaceAll(text, p[0], p[1]);
}

int GptCharToByte(char32_t c) {
  // The inverse of byte_level.cc's table: printable Latin-1 stands for itself, U+0100 +
  // k for the k-th of the others in increasing order.
  const auto printable = [](uint32_t b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; };
  if (c < 256) return printable(c) ? static_cast<int>(c) : -1;
  if (c >= 256 + 68) return -1;
  uint32_t k = c - 256;
  for (uint32_t b = 0; b < 256; ++b)
    if (!printable(b) && k-- == 0) return static_cast<int>(b);
  return -1;
}

Error NewDecoder(const Json& config, std::unique_ptr<Decoder>* out) {
  if (!config.is_object()) return "decoder: not a JSON object";
  const auto type_it = config.find("type");
  const std::string type = type_it != config.end() && type_it->is_string() ? type_it->get<std::string>() : "";
  if (type == "Sequence") {
    const auto list = config.find("decoders");
    if (list == config.end() || !list->is_array()) return "decoder Sequence: \"decoders\" must be a list";
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const Json& step : *list) {
      steps.emplace_back();
      if (Error e = NewDecoder(step, &steps.back()); !e.empty()) return e;
    }
    *out = std::make_unique<SequenceDecoder>(std::move(steps));
    return "";
  }
  if (type == "ByteLevel") {
    *out = std::make_unique<ByteLevelDecoder>();
    return "";
  }
  if (type == "Metaspace") return NewMetaspace(config, out);
  if (type == "Replace") return NewReplace(config, out);
  if (type == "ByteFallback") {
    *out = std::make_unique<ByteFallbackDecoder>();
    return "";
  }
  if (type == "Fuse") {
    *out = std::make_unique<FuseDecoder>();
    return "";
  }
  if (type == "Strip") return NewStrip(config, out);
  if (type == "WordPiece") return NewWordPiece(config, out);
  if (type == "BPEDecoder") {
    std::string suffix;
    if (Error e = ReadString(config, "suffix", "</w>", &suffix); !e.empty()) return e;
    *out = std::make_unique<BpeDecoder>(suffix);
    return "";
  }
  return "decoder.type '" + type +
         "' is not implemented (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, WordPiece, BPEDecoder, "
         "Sequence)";
}

}  // namespace nightshift::tokenizer
