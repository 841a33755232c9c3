#include "tokenizer/tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "common/format/json_depth.h"
#include "tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void Normalize(std::u32string* text) const override {
    for (const auto& part : parts_) part->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

// Each pre-tokenizer splits every word the one before it made.
class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void Split(const std::u32string& text, std::vector<std::u32string>* words) const override {
    SplitPiece(text, /*at_start=*/true, words);
  }

  // The first word of each step starts where the text does (an approximation when a step
  // drops the text's start: a Split that removes it).
  void SplitPiece(const std::u32string& text, bool at_start, std::vector<std::u32string>* words) const override {
    std::vector<std::u32string> current = {text}, next;
    for (const auto& part : parts_) {
      next.clear();
      for (size_t i = 0; i < current.size(); ++i)
        if (!current[i].empty()) part->SplitPiece(current[i], at_start && i == 0, &next);
      current.swap(next);
    }
    for (std::u32string& word : current)
      if (!word.empty()) words->push_back(std::move(word));
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

std::string TypeOf(const Json& config) {
  auto it = config.find("type");
  return it != config.end() && it->is_string() ? it->get<std::string>() : "";
}

Error BuildNormalizer(const Json& config, std::unique_ptr<Normalizer>* out) {
  if (config.is_null()) return "";
  if (!config.is_object()) return "normalizer: not an object";
  if (TypeOf(config) != "Sequence") return NewNormalizer(config, out);
  std::vector<std::unique_ptr<Normalizer>> parts;
  for (const Json& part : config.value("normalizers", Json::array())) {
    parts.emplace_back();
    if (Error e = BuildNormalizer(part, &parts.back()); !e.empty()) return e;
    if (parts.back() == nullptr) parts.pop_back();
  }
  *out = std::make_unique<SequenceNormalizer>(std::move(parts));
  return "";
}

Error BuildPreTokenizer(const Json& config, std::unique_ptr<PreTokenizer>* out) {
  if (config.is_null()) return "";
  const std::string type = TypeOf(config);
  if (type == "BertPreTokenizer" || type == "Whitespace" || type == "WhitespaceSplit")
    return NewBertPreTokenizer(config, out);
  if (type == "ByteLevel") return NewByteLevelPreTokenizer(config, out);
  if (type == "Split") return NewSplitPreTokenizer(config, out);
  if (type == "Metaspace") return NewMetaspacePreTokenizer(config, out);
  if (type != "Sequence") return "pre_tokenizer.type: '" + type + "' is not implemented";
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  for (const Json& part : config.value("pretokenizers", Json::array())) {
    parts.emplace_back();
    if (Error e = BuildPreTokenizer(part, &parts.back()); !e.empty()) return e;
    if (parts.back() == nullptr) parts.pop_back();
  }
  *out = std::make_unique<SequencePreTokenizer>(std::move(parts));
  return "";
}

bool IsBpe(const Json& model) {
  const std::string type = TypeOf(model);
  return type == "BPE" || (type.empty() && model.contains("merges"));
}

Error BuildModel(const Json& config, std::unique_ptr<Model>* out) {
  if (!config.is_object()) return "model: missing";
  const std::string type = TypeOf(config);
  if (type == "WordPiece") return NewWordPiece(config, out);
  if (IsBpe(config)) return NewBpe(config, out);
  return "model.type: '" + type + "' is not implemented (WordPiece, BPE)";
}

// Rust regex's \w, which `tokenizers` uses for single_word tokens.
bool IsWordChar(char32_t c) {
  const UChar32 u = static_cast<UChar32>(c);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL) ||
         (U_GET_GC_MASK(u) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

bool IsSpace(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

// An added token's flag `key`: `fallback` when absent. (Json::value would throw on a
// value that is not a boolean.)
Error ReadFlag(const Json& t, const char* key, bool fallback, bool* out) {
  const auto it = t.find(key);
  if (it == t.end()) {
    *out = fallback;
    return "";
  }
  if (!it->is_boolean()) return std::string("added_tokens: \"") + key + "\" is not true or false: " + t.dump();
  *out = it->get<bool>();
  return "";
}

Error ReadAddedTokens(const Json& list, const Normalizer* normalizer, std::vector<AddedToken>* out) {
  if (list.is_null()) return "";
  if (!list.is_array()) return "added_tokens: not a list";
  for (const Json& t : list) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_unsigned() ||
        t["id"].get<uint64_t>() > static_cast<uint64_t>(INT32_MAX) || !t.contains("content") ||
        !t["content"].is_string())
      return "added_tokens: an entry without an id (0 to 2^31-1) and a content: " + t.dump();
    AddedToken a;
    a.id = static_cast<int32_t>(t["id"].get<uint64_t>());
    a.content = t["content"].get<std::string>();
    a.match = DecodeUtf8(a.content);
    for (Error e : {ReadFlag(t, "single_word", false, &a.single_word), ReadFlag(t, "lstrip", false, &a.lstrip),
                    ReadFlag(t, "rstrip", false, &a.rstrip), ReadFlag(t, "special", false, &a.special)})
      if (!e.empty()) return e;
    if (Error e = ReadFlag(t, "normalized", !a.special, &a.normalized); !e.empty()) return e;
    if (a.normalized && normalizer != nullptr) normalizer->Normalize(&a.match);
    a.decoded = EncodeUtf8(a.match);
    if (!a.content.empty()) out->push_back(std::move(a));  // the reference ignores empty ones
  }
  return "";
}

}  // namespace

Error Tokenizer::FromJson(const std::string& json_text, std::unique_ptr<Tokenizer>* out,
                         const TokenizerOptions& options) {
  if (!format::JsonDepthWithin(json_text))
    return "nests deeper than " + std::to_string(format::kMaxJsonDepth) + " levels";
  const Json doc = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return "not a JSON object";
  auto t = std::unique_ptr<Tokenizer>(new Tokenizer());
  if (Error e = BuildNormalizer(doc.value("normalizer", Json()), &t->normalizer_); !e.empty()) return e;
  if (Error e = BuildPreTokenizer(doc.value("pre_tokenizer", Json()), &t->pre_tokenizer_); !e.empty()) return e;
  if (Error e = BuildModel(doc.value("model", Json()), &t->model_); !e.empty()) return e;
  const Json post = doc.value("post_processor", Json());
  if (!post.is_null())
    if (Error e = NewPostProcessor(post, &t->post_processor_); !e.empty()) return e;
  if (Error e = ReadAddedTokens(doc.value("added_tokens", Json()), t->normalizer_.get(), &t->added_); !e.empty())
    return e;
  for (size_t i = 0; i < t->added_.size(); ++i) {
    t->added_by_id_[t->added_[i].id] = i;  // the last of an id wins, as in `tokenizers`' map
    if (t->added_[i].special) t->special_.insert(t->added_[i].content);
  }
  // A decoder we lack leaves encoding as it is: the folder loads, Decode says why not.
  if (const Json decoder = doc.value("decoder", Json()); !decoder.is_null())
    if (Error e = NewDecoder(decoder, &t->decoder_); !e.empty()) {
      t->decoder_.reset();
      t->decoder_error_ = options.source + ": cannot decode: " + e;
    }
  t->clean_up_ = options.clean_up_tokenization_spaces && !IsBpe(doc.value("model", Json()));
  *out = std::move(t);
  return "";
}

Error Tokenizer::Load(const std::string& path, std::unique_ptr<Tokenizer>* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return path + ": cannot be read";
  std::ostringstream text;
  text << in.rdbuf();
  TokenizerOptions options;
  options.source = path;
  Error e = FromJson(text.str(), out, options);
  return e.empty() ? "" : path + ": " + e;
}

// As `tokenizers`' AddedVocabulary::find_matches: the leftmost, then longest, added
// token; the search goes on after it whether it is taken or not (a single_word token
// touching a word character is not); lstrip and rstrip take the whitespace beside it.
void Tokenizer::SplitOne(const std::u32string& text, bool normalized, std::vector<Piece>* out) const {
  size_t done = 0;  // text before this is in *out
  for (size_t i = 0; i < text.size();) {
    const AddedToken* best = nullptr;
    for (const AddedToken& t : added_)
      if (t.normalized == normalized && !t.match.empty() && text.compare(i, t.match.size(), t.match) == 0 &&
          (best == nullptr || t.match.size() > best->match.size()))
        best = &t;
    if (best == nullptr) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + best->match.size();
    i = stop;
    if (best->single_word && ((start > 0 && IsWordChar(text[start - 1])) || (stop < text.size() && IsWordChar(text[stop]))))
      continue;
    if (best->lstrip)
      while (start > done && IsSpace(text[start - 1])) --start;
    if (best->rstrip)
      while (stop < text.size() && IsSpace(text[stop])) ++stop;
    if (done < start) out->push_back({text.substr(done, start - done), -1});
    out->push_back({U"", best->id});
    done = i = stop;
  }
  if (done < text.size()) out->push_back({text.substr(done), -1});
}

void Tokenizer::SplitOnAddedTokens(bool normalized, std::vector<Piece>* pieces) const {
  std::vector<Piece> out;
  for (Piece& p : *pieces) {
    if (p.id >= 0) out.push_back(std::move(p));
    else SplitOne(p.text, normalized, &out);
  }
  pieces->swap(out);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, size_t max_len) const {
  std::vector<Piece> pieces = {{DecodeUtf8(text), -1}};
  SplitOnAddedTokens(/*normalized=*/false, &pieces);
  if (normalizer_ != nullptr)
    for (Piece& p : pieces)
      if (p.id < 0) normalizer_->Normalize(&p.text);
  SplitOnAddedTokens(/*normalized=*/true, &pieces);
  std::vector<int32_t> ids;
  std::vector<std::u32string> words;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (p.id >= 0) {
      ids.push_back(p.id);
      continue;
    }
    words.clear();
    if (pre_tokenizer_ != nullptr) pre_tokenizer_->SplitPiece(p.text, /*at_start=*/i == 0, &words);
    else words.push_back(p.text);
    for (const std::u32string& word : words)
      if (!word.empty()) model_->Tokenize(word, &ids);
  }
  if (post_processor_ == nullptr) {
    if (max_len > 0 && ids.size() > max_len) ids.resize(max_len);
    return ids;
  }
  const size_t added = post_processor_->AddedCount();
  if (max_len > 0 && ids.size() + added > max_len) ids.resize(max_len > added ? max_len - added : 0);
  return post_processor_->Process(ids);
}

int32_t Tokenizer::TokenToId(const std::string& token) const {
  for (const AddedToken& t : added_)
    if (t.content == token) return t.id;
  return model_->TokenToId(token);
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  if (!decoder_error_.empty()) throw std::logic_error(decoder_error_);
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    // As `tokenizers`: the added token of the id (normalized when it is matched so), else
    // the model's; special is a property of the token's text (a model token equal to a
    // special one is left out too).
    const auto added = added_by_id_.find(id);
    const std::string* token = added != added_by_id_.end() ? &added_[added->second].decoded : model_->IdToToken(id);
    if (token == nullptr) continue;  // no token has this id: skipped
    if (skip_special_tokens && special_.count(*token) > 0) continue;
    tokens.push_back(*token);
  }
  std::string text;
  if (decoder_ == nullptr) {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i > 0 ? " " : "") + tokens[i];
  } else {
    decoder_->DecodeChain(&tokens);
    for (const std::string& t : tokens) text += t;
  }
  if (clean_up_) CleanUpTokenizationSpaces(&text);
  return text;
}

std::vector<int32_t> Tokenizer::IdsBefore() const {
  return post_processor_ == nullptr ? std::vector<int32_t>{} : post_processor_->Before();
}

std::vector<int32_t> Tokenizer::IdsAfter() const {
  return post_processor_ == nullptr ? std::vector<int32_t>{} : post_processor_->After();
}

size_t Tokenizer::VocabSize() const {
  size_t size = model_->VocabSize();
  for (const AddedToken& t : added_) size = std::max(size, static_cast<size_t>(t.id) + 1);
  return size;
}

}  // namespace nightshift::tokenizer
