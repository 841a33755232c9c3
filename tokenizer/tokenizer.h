// A Hugging Face tokenizer read from its tokenizer.json, giving the ids that the
// `tokenizers` library gives for the same file and text (tests/tokenizer/ checks it on
// every SpamAssassin mail and on a file of hard texts):
//
//   text -> added tokens split out (those matched on the raw text) -> normalizer ->
//   added tokens split out (those matched on the normalized text) -> pre-tokenizer ->
//   model -> truncation -> post-processor (the special tokens)
//
// as `tokenizer(text, truncation=True, max_length=max_len)` in transformers. Single
// texts only (no pairs), ids only (no offsets). And back (Decode):
//
//   ids -> tokens (an added token's content, else the model's; special ones left out when
//   asked; unknown ids skipped) -> decoder (decoders.cc) -> clean_up_tokenization_spaces
//
// as `tokenizer.decode(ids, skip_special_tokens=...)`. One of the two kinds of
// TextTokenizer (folder.h; the other is a sentencepiece tokenizer.model): callers that take
// a whole Hugging Face folder use LoadFolder rather than this class.
#ifndef NIGHTSHIFT_TOKENIZER_TOKENIZER_H_
#define NIGHTSHIFT_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/components.h"
#include "tokenizer/folder.h"

namespace nightshift::tokenizer {

// A token of tokenizer.json's `added_tokens`: matched in the text before the model runs.
struct AddedToken {
  int32_t id = 0;
  std::string content;     // as written (UTF-8): what TokenToId answers to
  std::u32string match;    // what is matched in the text: `content`, normalized when `normalized`
  std::string decoded;     // what Decode gives for it: `match` in UTF-8 (so `tokenizers` 0.23's id_to_token)
  bool single_word = false;  // only where no word character touches it
  bool lstrip = false, rstrip = false;  // takes the whitespace on its left / right
  bool normalized = false;
  bool special = false;
};

// What tokenizer_config.json and the caller add to tokenizer.json (LoadFolder fills it).
struct TokenizerOptions {
  // transformers' clean_up_tokenization_spaces: after decoding, " ." -> "." and the like.
  // transformers 5.24 applies it only when the model is not BPE (a WordPiece folder whose
  // tokenizer_config.json says true); false is its default, and ours.
  bool clean_up_tokenization_spaces = false;
  // Named at the start of CanDecode()'s message (the tokenizer.json file).
  std::string source = "tokenizer.json";
};

class Tokenizer : public TextTokenizer {
 public:
  // From the text of a tokenizer.json; "" or a message naming the key (and value) that is
  // missing or not implemented. A decoder we do not implement is not an error here (the
  // ids still are right): CanDecode() says it.
  static Error FromJson(const std::string& json_text, std::unique_ptr<Tokenizer>* out,
                        const TokenizerOptions& options = {});
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

  // folder.h. Without a decoder in tokenizer.json the tokens are joined with spaces, as
  // `tokenizers` joins them.
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const override;
  Error CanDecode() const override { return decoder_error_; }

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
  std::unordered_map<int32_t, size_t> added_by_id_;  // id -> index in added_
  std::unordered_set<std::string> special_;          // the contents of the special added tokens
  std::unique_ptr<Decoder> decoder_;  // may be null: tokens joined with spaces
  Error decoder_error_;               // "" or why Decode cannot run (decoder_ is then null)
  bool clean_up_ = false;             // clean_up_tokenization_spaces, and the model is not BPE
};

}  // namespace nightshift::tokenizer

#endif  // NIGHTSHIFT_TOKENIZER_TOKENIZER_H_
