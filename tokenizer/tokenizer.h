// A Hugging Face tokenizer read from its tokenizer.json, giving the ids that the
// `tokenizers` library gives for the same file and text (tests/tokenizer/ checks it on
// every SpamAssassin mail and on a file of hard texts):
//
//   text -> added tokens split out (those matched on the raw text) -> normalizer ->
//   added tokens split out (those matched on the normalized text) -> pre-tokenizer ->
//   model -> truncation -> post-processor (the special tokens)
//
// as `tokenizer(text, truncation=True, max_length=max_len)` in transformers. Single
// texts only (no pairs), ids only (no offsets, no decoding). One of the two kinds of
// TextTokenizer (folder.h; the other is a sentencepiece tokenizer.model): callers that take
// a whole Hugging Face folder use LoadFolder rather than this class.
#ifndef NIGHTSHIFT_TOKENIZER_TOKENIZER_H_
#define NIGHTSHIFT_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/components.h"
#include "tokenizer/folder.h"

namespace nightshift::tokenizer {

// A token of tokenizer.json's `added_tokens`: matched in the text before the model runs.
struct AddedToken {
  int32_t id = 0;
  std::string content;     // as written (UTF-8): what TokenToId answers to
  std::u32string match;    // what is matched in the text: `content`, normalized when `normalized`
  bool single_word = false;  // only where no word character touches it
  bool lstrip = false, rstrip = false;  // takes the whitespace on its left / right
  bool normalized = false;
  bool special = false;
};

class Tokenizer : public TextTokenizer {
 public:
  // From the text of a tokenizer.json; "" or a message naming the key (and value) that is
  // missing or not implemented.
  static Error FromJson(const std::string& json_text, std::unique_ptr<Tokenizer>* out);
  // From a file; messages start with its path.
  static Error Load(const std::string& path, std::unique_ptr<Tokenizer>* out);

  // The ids of `text` (UTF-8; ill-formed bytes read as U+FFFD), special tokens included,
  // at most `max_len` of them (0: no limit): the text's own ids are cut at the end to
  // leave room for the special tokens. Thread-safe.
  std::vector<int32_t> Encode(std::string_view text, size_t max_len = 0) const override;

  // The id of `token`, an added token's or the model's; -1 when neither has it.
  int32_t TokenToId(const std::string& token) const override;
  // The model's vocabulary and the added tokens beyond it: one past the largest id.
  size_t VocabSize() const override;
  // The post-processor's special ids (none without one).
  std::vector<int32_t> IdsBefore() const override;
  std::vector<int32_t> IdsAfter() const override;

 private:
  // A stretch of the text, or an added token already found in it (id >= 0).
  struct Piece {
    std::u32string text;
    int32_t id = -1;
  };
  // Splits the text pieces of *pieces on the added tokens with normalized == `normalized`.
  void SplitOnAddedTokens(bool normalized, std::vector<Piece>* pieces) const;
  void SplitOne(const std::u32string& text, bool normalized, std::vector<Piece>* out) const;

  std::unique_ptr<Normalizer> normalizer_;      // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer_; // may be null: a piece is one word
  std::unique_ptr<Model> model_;
  std::unique_ptr<PostProcessor> post_processor_;  // may be null: no special tokens
  std::vector<AddedToken> added_;
};

}  // namespace nightshift::tokenizer

#endif  // NIGHTSHIFT_TOKENIZER_TOKENIZER_H_
