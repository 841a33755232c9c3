// The tokenizer of a Hugging Face model folder, whichever kind it is:
//
// - tokenizer.json (tokenizer.h): BERT, DistilBERT (WordPiece), RoBERTa, GPT-2, Llama 3,
//   Qwen2 (byte-level BPE), Llama 2 / Mistral as transformers 5.24 saves them (Metaspace,
//   BPE with byte_fallback), and any other file built from the components we implement;
// - tokenizer.model (sentencepiece_tokenizer.cc): Llama 2, Mistral and other folders whose
//   tokenizer_config.json names LlamaTokenizer(Fast), read with the sentencepiece library
//   and run as transformers 5.24's LlamaTokenizer runs it (see there for the settings read
//   from tokenizer_config.json and the one corner that differs).
//
// LoadFolder reads tokenizer.model when the folder has one, else tokenizer.json. Either
// way Encode gives the ids of transformers' AutoTokenizer(folder)(text, truncation=True,
// max_length=max_len), and Decode the text of its tok.decode(ids, skip_special_tokens=...)
// (tests/tokenizer/equality_test.py checks both on SpamAssassin mails, a file of hard texts
// and ids that no text gives).
#ifndef NIGHTSHIFT_TOKENIZER_FOLDER_H_
#define NIGHTSHIFT_TOKENIZER_FOLDER_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nightshift::tokenizer {

using Error = std::string;  // "" or what is wrong (as components.h)

// What a tokenizer does for its callers (data preparation, nightshift-predict): text to
// ids, and ids back to text.
class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  // The ids of `text` (UTF-8; ill-formed bytes read as U+FFFD), special tokens included, at
  // most `max_len` of them (0: no limit): the text's own ids are cut at the end to leave
  // room for the special tokens. Thread-safe.
  virtual std::vector<int32_t> Encode(std::string_view text, size_t max_len = 0) const = 0;
  // The id of `token` (UTF-8, as the vocabulary writes it); -1 when there is none.
  virtual int32_t TokenToId(const std::string& token) const = 0;
  // One past the largest id (the model's vocabulary and any added tokens).
  virtual size_t VocabSize() const = 0;
  // The special ids Encode puts before and after a text's own ids: [CLS] / [SEP] for
  // BERT, <s> / </s> for RoBERTa, <|begin_of_text|> / none for Llama 3, <s> / none for
  // Llama 2 (</s> too with add_eos_token), none / none for GPT-2 and Qwen2.
  virtual std::vector<int32_t> IdsBefore() const = 0;
  virtual std::vector<int32_t> IdsAfter() const = 0;

  // The text of `ids` (UTF-8), as transformers 5.24's AutoTokenizer(folder).decode(ids,
  // skip_special_tokens=...) gives it for this folder: each id's token (an added token's
  // content, else the model's), special tokens left out when `skip_special_tokens`, then
  // the folder's decoder (and clean_up_tokenization_spaces where transformers applies it).
  // Ids that no token has (negative, >= VocabSize(), a hole in the vocabulary) are
  // skipped, as `tokenizers` skips them: generated ids can be anything, and one bad id
  // should not cost the text. Bytes that do not form UTF-8 (a character split across the
  // end of `ids`, byte tokens alone) come out as U+FFFD, as in the reference.
  // Precondition: CanDecode() is "" (checked once after loading); otherwise Decode throws
  // std::logic_error with CanDecode()'s message. Thread-safe.
  virtual std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const = 0;
  // "" when Decode works, else why not (a tokenizer.json whose decoder type we do not
  // implement: encoding still works, so loading such a folder succeeds).
  virtual Error CanDecode() const = 0;
};

// The tokenizer file LoadFolder reads: <folder>/tokenizer.model when it exists, else
// <folder>/tokenizer.json (whether or not that exists). Inline, as the next one, so that
// the worker's libraries that must not link sentencepiece (a gRPC process) can call them.
inline std::string FolderTokenizerFile(const std::string& folder) {
  std::error_code ec;
  const std::string model = folder + "/tokenizer.model";
  return std::filesystem::exists(model, ec) ? model : folder + "/tokenizer.json";
}

// The files of `folder` that decide its ids, for cache keys and copies: the tokenizer
// file, and for a sentencepiece folder its tokenizer_config.json and tokenizer.json
// (which give its settings, its special tokens and the ids around a text) when it has them.
inline std::vector<std::string> FolderTokenizerInputs(const std::string& folder) {
  std::vector<std::string> files = {FolderTokenizerFile(folder)};
  std::error_code ec;
  if (files[0] != folder + "/tokenizer.model") return files;
  for (const char* name : {"/tokenizer_config.json", "/tokenizer.json"})
    if (std::filesystem::exists(folder + name, ec)) files.push_back(folder + name);
  return files;
}

// Loads the folder's tokenizer (above). Messages start with the file's path.
Error LoadFolder(const std::string& folder, std::unique_ptr<TextTokenizer>* out);

// A sentencepiece folder: <folder>/tokenizer.model with <folder>/tokenizer_config.json's
// settings (absent: LlamaTokenizer's defaults). sentencepiece_tokenizer.cc.
Error LoadSentencePieceFolder(const std::string& folder, std::unique_ptr<TextTokenizer>* out);

}  // namespace nightshift::tokenizer

#endif  // NIGHTSHIFT_TOKENIZER_FOLDER_H_
