// The parts of a Hugging Face `tokenizers` pipeline, as tokenizer.json configures them:
// normalizer -> pre-tokenizer -> model -> post-processor, and back from ids to text the
// decoder. Each is a small class built
// from its JSON object; tokenizer.h strings them together. Text is handled as Unicode
// code points (std::u32string); nothing here needs offsets, only ids, so the alignment
// bookkeeping of `tokenizers`' NormalizedString is not kept.
//
// Each New* function builds one component from its tokenizer.json object (the `type`
// already checked by the caller) or returns a message naming the key that is missing or
// has a value we do not implement. Unicode facts (categories, normalisation forms, case
// mapping) come from ICU (unicode.h); none is written by hand.
#ifndef NIGHTSHIFT_TOKENIZER_COMPONENTS_H_
#define NIGHTSHIFT_TOKENIZER_COMPONENTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nightshift::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::u32string* text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the words of `text` to *words, in order (a word may be empty: it is dropped).
  virtual void Split(const std::u32string& text, std::vector<std::u32string>* words) const = 0;
  // As Split, for a stretch of the text that starts it (at_start) or that follows an added
  // token: only Metaspace's prepend_scheme "first" tells them apart.
  virtual void SplitPiece(const std::u32string& text, bool at_start, std::vector<std::u32string>* words) const {
    (void)at_start;
    Split(text, words);
  }
};

class Model {
 public:
  virtual ~Model() = default;
  // Appends the ids of one pre-tokenized word.
  virtual void Tokenize(const std::u32string& word, std::vector<int32_t>* ids) const = 0;
  // The id of a token of the vocabulary (UTF-8); -1 when it has none.
  virtual int32_t TokenToId(const std::string& token) const = 0;
  // The token of `id` (UTF-8, as the vocabulary writes it); null when no token has it.
  virtual const std::string* IdToToken(int32_t id) const = 0;
  virtual size_t VocabSize() const = 0;
};

// Adds the special tokens around one sequence (we tokenize single texts, never pairs).
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // How many ids Process adds (truncation leaves room for them).
  virtual size_t AddedCount() const = 0;
  virtual std::vector<int32_t> Process(const std::vector<int32_t>& ids) const = 0;
  // The ids Process puts before and after the sequence.
  virtual std::vector<int32_t> Before() const = 0;
  virtual std::vector<int32_t> After() const = 0;
};

// One step of turning tokens back into text (`tokenizers`' Decoder::decode_chain): the
// tokens of the ids (UTF-8, as the vocabulary writes them) in, a new list out; the text
// is the concatenation of what the last step gives.
class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
};

using Json = nlohmann::json;
using Error = std::string;  // "" or what is wrong

// Each by its tokenizer.json `type` (tokenizer.cc dispatches; `Sequence` is there too).
// normalizers.cc: BertNormalizer, Lowercase, NFD, NFC, NFKD, NFKC, StripAccents.
Error NewNormalizer(const Json& config, std::unique_ptr<Normalizer>* out);
// bert_pre_tokenizer.cc: BertPreTokenizer, Whitespace, WhitespaceSplit.
Error NewBertPreTokenizer(const Json& config, std::unique_ptr<PreTokenizer>* out);
// byte_level.cc: ByteLevel (GPT-2's regular expression when use_regex, the byte-to-
// character map, add_prefix_space).
Error NewByteLevelPreTokenizer(const Json& config, std::unique_ptr<PreTokenizer>* out);
// split.cc: Split (a Regex or String pattern, the five behaviors, invert), as Llama 3 and
// Qwen2 put before a ByteLevel without regex.
Error NewSplitPreTokenizer(const Json& config, std::unique_ptr<PreTokenizer>* out);
// An Oniguruma expression (as tokenizer.json holds it) written for ICU: \s and \S as the
// White_Space property; escapes that mean something else in ICU are an error.
Error OnigurumaToIcu(const std::string& pattern, std::string* out);
// metaspace.cc: Metaspace (replacement, prepend_scheme always / first / never, split).
Error NewMetaspacePreTokenizer(const Json& config, std::unique_ptr<PreTokenizer>* out);
// wordpiece.cc
Error NewWordPiece(const Json& config, std::unique_ptr<Model>* out);
// bpe.cc
Error NewBpe(const Json& config, std::unique_ptr<Model>* out);
// decoders.cc: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, WordPiece,
// BPEDecoder and Sequence (dispatched there: a decoder `type` we lack is an error naming it).
Error NewDecoder(const Json& config, std::unique_ptr<Decoder>* out);
// transformers 5.24's clean_up_tokenization on a decoded text (" ." -> ".", " n't" ->
// "n't", ...: WordPiece's cleanup without " do not"). Not a decoder of tokenizer.json:
// tokenizer_config.json's clean_up_tokenization_spaces turns it on (tokenizer.h).
void CleanUpTokenizationSpaces(std::string* text);
// The byte that GPT-2's byte table writes as `c` (byte_level.cc); -1 for any other character.
int GptCharToByte(char32_t c);
// folder.cc: the decoder transformers 5.24's LlamaTokenizer puts on its pipeline, for the
// tokenizer.json and the tokenizer.model of a Llama folder alike.
Json LlamaDecoderJson(bool add_prefix_space);
// tokenizer_config.json's boolean `key`; `fallback` when absent, null or not a boolean.
bool ConfigFlag(const Json& config, const char* key, bool fallback);
// post_processors.cc: BertProcessing, RobertaProcessing, TemplateProcessing, ByteLevel
// (a no-op for ids), Sequence.
Error NewPostProcessor(const Json& config, std::unique_ptr<PostProcessor>* out);

}  // namespace nightshift::tokenizer

#endif  // NIGHTSHIFT_TOKENIZER_COMPONENTS_H_
