// WordPiece, as `tokenizers`' models/wordpiece: greedy longest-match-first over the
// vocabulary, the pieces after the first looked up with the continuing-subword prefix
// ("##"); a word that cannot be split that way entirely, or that is longer than
// max_input_chars_per_word characters, is the one unknown token.
#include "tokenizer/components.h"

#include "tokenizer/unicode.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <unordered_map>

namespace nightshift::tokenizer {
namespace {

class WordPiece : public Model {
 public:
  // `vocab`: token (UTF-8) -> id; `unk_id` is in it.
  WordPiece(std::unordered_map<std::string, int32_t> vocab, int32_t unk_id,
            const std::string& prefix, size_t max_chars)
      : vocab_(std::move(vocab)), unk_id_(unk_id), max_chars_(max_chars) {
    BuildPieces(prefix);
    for (const auto& [token, id] : vocab_) tokens_.emplace(id, &token);
  }

  void Tokenize(const std::u32string& word, std::vector<int32_t>* ids) const override {
    if (word.size() > max_chars_) {
      ids->push_back(unk_id_);
      return;
    }
    const size_t first = ids->size();
    for (size_t start = 0; start < word.size();) {
      const auto& pieces = start == 0 ? first_pieces_ : next_pieces_;
      const size_t longest = start == 0 ? longest_first_ : longest_next_;
      size_t end = std::min(word.size(), start + longest);
      int32_t id = -1;
      for (; end > start; --end) {
        const auto it = pieces.find(std::u32string_view(word).substr(start, end - start));
        if (it != pieces.end()) {
          id = it->second;
          break;
        }
      }
      if (id < 0) {  // no piece starts here: the whole word is unknown
        ids->resize(first);
        ids->push_back(unk_id_);
        return;
      }
      ids->push_back(id);
      start = end;
    }
  }

  int32_t TokenToId(const std::string& token) const override {
    const auto it = vocab_.find(token);
    return it == vocab_.end() ? -1 : it->second;
  }

  const std::string* IdToToken(int32_t id) const override {
    const auto it = tokens_.find(id);
    return it == tokens_.end() ? nullptr : it->second;
  }

  size_t VocabSize() const override { return vocab_.size(); }

 private:
  using Pieces = std::unordered_map<std::u32string_view, int32_t>;

  // A word's first piece is any token; a later one is a token that starts with the
  // prefix, looked up without it (so no prefixed string is built per lookup).
  void BuildPieces(const std::string& prefix) {
    const std::u32string prefix32 = DecodeUtf8(prefix);
    std::vector<std::pair<size_t, size_t>> spans;  // of each token in text_
    for (const auto& [token, id] : vocab_) {
      spans.emplace_back(text_.size(), 0);
      text_ += DecodeUtf8(token);
      spans.back().second = text_.size() - spans.back().first;
    }
    // text_ is complete: views into it stay valid from here on.
    size_t i = 0;
    for (const auto& [token, id] : vocab_) {
      const std::u32string_view piece = std::u32string_view(text_).substr(
          spans[i].first, spans[i].second);
      ++i;
      first_pieces_.emplace(piece, id);
      longest_first_ = std::max(longest_first_, piece.size());
      if (piece.substr(0, prefix32.size()) == prefix32) {
        next_pieces_.emplace(piece.substr(prefix32.size()), id);
        longest_next_ = std::max(longest_next_, piece.size() - prefix32.size());
      }
    }
  }

  // Constant after construction.
  const std::unordered_map<std::string, int32_t> vocab_;
  const int32_t unk_id_;
  const size_t max_chars_;  // longer words (in code points) are unknown
  std::unordered_map<int32_t, const std::string*> tokens_;  // id -> its token in vocab_
  std::u32string text_;     // every token, decoded, end to end
  Pieces first_pieces_;     // token -> id
  Pieces next_pieces_;      // token less the prefix -> id, for tokens with the prefix
  size_t longest_first_ = 0, longest_next_ = 0;  // code points
};

Error ReadString(const Json& config, const char* key, std::string* value) {
  const auto it = config.find(key);
  if (it == config.end()) return std::string("WordPiece: missing key \"") + key + "\"";
  if (!it->is_string()) {
    return std::string("WordPiece: \"") + key + "\" must be a string, not " + it->dump();
  }
  *value = it->get<std::string>();
  return "";
}

Error ReadVocab(const Json& config, std::unordered_map<std::string, int32_t>* vocab) {
  const auto it = config.find("vocab");
  if (it == config.end()) return "WordPiece: missing key \"vocab\"";
  if (!it->is_object()) return "WordPiece: \"vocab\" must be an object of token: id";
  for (const auto& [token, id] : it->items()) {
    if (!id.is_number_unsigned() ||
        id.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return "WordPiece: \"vocab\" id of \"" + token + "\" must be an id >= 0, not " +
             id.dump();
    }
    vocab->emplace(token, id.get<int32_t>());
  }
  return "";
}

}  // namespace

Error NewWordPiece(const Json& config, std::unique_ptr<Model>* out) {
  std::string unk_token, prefix;
  std::unordered_map<std::string, int32_t> vocab;
  Error error = ReadString(config, "unk_token", &unk_token);
  if (error.empty()) error = ReadString(config, "continuing_subword_prefix", &prefix);
  if (error.empty()) error = ReadVocab(config, &vocab);
  if (!error.empty()) return error;
  const auto max_chars = config.find("max_input_chars_per_word");
  if (max_chars == config.end()) return "WordPiece: missing key \"max_input_chars_per_word\"";
  if (!max_chars->is_number_unsigned()) {
    return "WordPiece: \"max_input_chars_per_word\" must be a count >= 0, not " +
           max_chars->dump();
  }
  // The reference fails the encoding of any word it cannot split when the unknown token
  // has no id; we cannot fail later, so we refuse the file now.
  const auto unk = vocab.find(unk_token);
  if (unk == vocab.end()) {
    return "WordPiece: unk_token \"" + unk_token + "\" is not in \"vocab\"";
  }
  const int32_t unk_id = unk->second;
  *out = std::make_unique<WordPiece>(std::move(vocab), unk_id, prefix,
                                     max_chars->get<size_t>());
  return "";
}

}  // namespace nightshift::tokenizer
