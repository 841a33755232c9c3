// The pipeline around the components: added tokens found on the raw text and on the
// normalized text (lstrip, rstrip, single_word), truncation that leaves room for the
// special tokens, the post-processor. Expected ids are what `tokenizers` 0.23.3 gives for
// the same tokenizer.json (Tokenizer.from_file(...).encode(text).ids, with
// enable_truncation(n) for the truncated ones). And back: ids to text.
#include "tokenizer/tokenizer.h"

#include <climits>
#include <stdexcept>

#include <gtest/gtest.h>

namespace nightshift::tokenizer {
namespace {

const char* kTokenizerJson = R"json({"version": "1.0", "truncation": null, "padding": null,
 "added_tokens": [
  {"id": 0, "content": "[PAD]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
  {"id": 1, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
  {"id": 2, "content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
  {"id": 3, "content": "[SEP]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
  {"id": 4, "content": "<mask>", "single_word": false, "lstrip": true, "rstrip": false, "normalized": false, "special": true},
  {"id": 13, "content": "Hello", "single_word": true, "lstrip": false, "rstrip": true, "normalized": true, "special": false}],
 "normalizer": {"type": "Lowercase"},
 "pre_tokenizer": {"type": "WhitespaceSplit"},
 "post_processor": {"type": "TemplateProcessing",
   "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
   "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}, "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
 "decoder": null,
 "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
   "vocab": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "<mask>": 4, "a": 5, "b": 6, "ab": 7, "##b": 8, "##c": 9, "world": 10, "x": 11, "hello": 12}}}
)json";

std::unique_ptr<Tokenizer> Load(const std::string& text = kTokenizerJson) {
  std::unique_ptr<Tokenizer> t;
  EXPECT_EQ(Tokenizer::FromJson(text, &t), "");
  return t;
}

TEST(TokenizerTest, IdsAreTheReferences) {
  const std::unique_ptr<Tokenizer> t = Load();
  ASSERT_NE(t, nullptr);
  const std::pair<const char*, std::vector<int32_t>> cases[] = {
      {"ab abc world", {2, 7, 7, 9, 10, 3}},
      {"HELLO world", {2, 13, 10, 3}},        // a normalized added token, matched lowercased
      {"xHello world", {2, 1, 10, 3}},        // single_word: not inside a word
      {"Hello   world", {2, 13, 10, 3}},      // rstrip takes the spaces
      {"a [SEP]b", {2, 5, 3, 6, 3}},          // a special token in the text is that token
      {"a   <mask> b", {2, 5, 4, 6, 3}},      // lstrip
      {"x<mask>", {2, 11, 4, 3}},
      {"[CLS][CLS]", {2, 2, 2, 3}},
      {"", {2, 3}},
      {"abc abc abc abc", {2, 7, 9, 7, 9, 7, 9, 7, 9, 3}},
  };
  for (const auto& [text, ids] : cases) EXPECT_EQ(t->Encode(text), ids) << text;
}

TEST(TokenizerTest, TruncationLeavesRoomForTheSpecialTokens) {
  const std::unique_ptr<Tokenizer> t = Load();
  EXPECT_EQ(t->Encode("ab abc world x", 4), (std::vector<int32_t>{2, 7, 7, 3}));
  EXPECT_EQ(t->Encode("ab abc world x", 2), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(t->Encode("ab abc world x", 0).size(), 7u);  // no limit
}

TEST(TokenizerTest, VocabularyAndTokenIds) {
  const std::unique_ptr<Tokenizer> t = Load();
  EXPECT_EQ(t->VocabSize(), 14u);  // the model's 13 and the added "Hello" at 13
  EXPECT_EQ(t->TokenToId("[SEP]"), 3);
  EXPECT_EQ(t->TokenToId("world"), 10);
  EXPECT_EQ(t->TokenToId("Hello"), 13);  // an added token by what it says, not its normalized form
  EXPECT_EQ(t->TokenToId("hello"), 12);  // the model's
  EXPECT_EQ(t->TokenToId("absent"), -1);
}

TEST(TokenizerTest, WhatIsNotImplementedIsNamed) {
  std::unique_ptr<Tokenizer> t;
  std::string text = kTokenizerJson;
  text.replace(text.find("WhitespaceSplit"), 15, "UnicodeScripts");
  EXPECT_EQ(Tokenizer::FromJson(text, &t), "pre_tokenizer.type: 'UnicodeScripts' is not implemented");
  text = kTokenizerJson;
  text.replace(text.find(R"("type": "WordPiece")"), 19, R"("type": "Unigram")");
  EXPECT_EQ(Tokenizer::FromJson(text, &t), "model.type: 'Unigram' is not implemented (WordPiece, BPE)");
  EXPECT_EQ(Tokenizer::FromJson("[1]", &t), "not a JSON object");
  EXPECT_EQ(Tokenizer::Load("/nonexistent/tokenizer.json", &t), "/nonexistent/tokenizer.json: cannot be read");
}

// tokenizer.json comes from a user's model.pretrained folder: an added token whose flag
// is not a boolean (what tokenizer_fuzz found: "normalized": 4 threw out of FromJson and
// ended the process) or whose id is negative or past an int32 is an error naming it.
TEST(TokenizerTest, AnAddedTokenOfTheWrongShapeIsAnErrorNotAnException) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("normalized": false, "special": true},)", R"("normalized": 4, "special": true},)"},
      {R"("lstrip": true, "rstrip": false)", R"("lstrip": 1, "rstrip": false)"},
      {R"("single_word": true)", R"("single_word": "yes")"},
      {R"("normalized": true, "special": false)", R"("normalized": null, "special": false)"},
      {R"("normalized": true, "special": false)", R"("normalized": true, "special": [])"},
      {R"({"id": 13, "content": "Hello")", R"({"id": -1, "content": "Hello")"},
      {R"({"id": 13, "content": "Hello")", R"({"id": 4294967309, "content": "Hello")"},
  };
  for (const auto& [from, to] : cases) {
    std::string text = kTokenizerJson;
    ASSERT_NE(text.find(from), std::string::npos) << from;
    text.replace(text.find(from), from.size(), to);
    std::unique_ptr<Tokenizer> t;
    Error e;
    ASSERT_NO_THROW(e = Tokenizer::FromJson(text, &t)) << to;
    EXPECT_EQ(e.rfind("added_tokens: ", 0), 0u) << to << " -> " << e;
    EXPECT_EQ(t, nullptr);
  }
}

// Decode: the expected texts are what `tokenizers` 0.23.3 gives (Tokenizer.from_str(...)
// .decode(ids, skip_special_tokens=...)) for kTokenizerJson and the changes named.
TEST(TokenizerTest, DecodeIsTheReferences) {
  const std::unique_ptr<Tokenizer> t = Load();
  ASSERT_EQ(t->CanDecode(), "");
  // No decoder: the tokens joined with spaces; the added "Hello" (normalized) decodes as
  // the normalizer wrote it; 99 and 14 are no token's: skipped.
  const std::vector<int32_t> ids = {2, 5, 7, 9, 13, 12, 3, 99, 14};
  EXPECT_EQ(t->Decode(ids), "a ab ##c hello hello");
  EXPECT_EQ(t->Decode(ids, /*skip_special_tokens=*/false), "[CLS] a ab ##c hello hello [SEP]");
  EXPECT_EQ(t->Decode({4, 10, 8, 1}), "world ##b");
  EXPECT_EQ(t->Decode({4, 10, 8, 1}, false), "<mask> world ##b [UNK]");
  EXPECT_EQ(t->Decode({}), "");
  // Negative ids, which Python cannot pass to `tokenizers` (u32), are skipped as well.
  EXPECT_EQ(t->Decode({-1, 5, INT32_MIN, INT32_MAX}), "a");

  std::string text = kTokenizerJson;
  text.replace(text.find(R"("decoder": null)"), 15, R"("decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true})");
  const std::unique_ptr<Tokenizer> wp = Load(text);
  EXPECT_EQ(wp->Decode(ids), "a abc hello hello");
  EXPECT_EQ(wp->Decode(ids, false), "[CLS] a abc hello hello [SEP]");
  EXPECT_EQ(wp->Decode({4, 10, 8, 1}), "worldb");
  EXPECT_EQ(wp->Decode({4, 10, 8, 1}, false), "<mask> worldb [UNK]");
}

// `tokenizers` leaves out a token whose text is a special token's content: a special
// token that is normalized decodes normalized, and so is not left out ("[cls]"), nor is a
// model token equal to a normalized special one ("hello" for the special "Hello").
TEST(TokenizerTest, SpecialIsATokensTextAsInTheReference) {
  std::string text = kTokenizerJson;
  const std::string cls = R"("content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false)";
  text.replace(text.find(cls), cls.size(),
               R"("content": "[CLS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true)");
  const std::string hello = R"("normalized": true, "special": false})";
  text.replace(text.find(hello), hello.size(), R"("normalized": true, "special": true})");
  const std::unique_ptr<Tokenizer> t = Load(text);
  EXPECT_EQ(t->Decode({2, 5, 13, 12}), "[cls] a hello hello");
  EXPECT_EQ(t->Decode({2, 5, 13, 12}, false), "[cls] a hello hello");
}

// transformers 5.24 applies clean_up_tokenization_spaces (tokenizer_config.json) after the
// decoder, and only when the model is not BPE.
TEST(TokenizerTest, CleanUpTokenizationSpacesIsTransformers) {
  std::string text = kTokenizerJson;
  text.replace(text.find(R"("hello": 12})"), 12, R"("hello": 12, ".": 14, "'": 15, "s": 16})");
  TokenizerOptions clean;
  clean.clean_up_tokenization_spaces = true;
  std::unique_ptr<Tokenizer> plain, cleaned;
  ASSERT_EQ(Tokenizer::FromJson(text, &plain), "");
  ASSERT_EQ(Tokenizer::FromJson(text, &cleaned, clean), "");
  EXPECT_EQ(plain->Decode({5, 14, 15, 16, 10}), "a . ' s world");
  EXPECT_EQ(cleaned->Decode({5, 14, 15, 16, 10}), "a.'s world");
  // A BPE model: transformers skips the clean-up (it would eat spaces of byte-level text).
  const char* bpe = R"({"added_tokens": [], "decoder": null,
    "model": {"type": "BPE", "vocab": {"a": 0, ".": 1}, "merges": []}})";
  std::unique_ptr<Tokenizer> b;
  ASSERT_EQ(Tokenizer::FromJson(bpe, &b, clean), "");
  EXPECT_EQ(b->Decode({0, 1}), "a .");
}

// Encoding does not need the decoder: a folder whose decoder we lack still loads (its
// ids are right), and CanDecode names the decoder; Decode would throw.
TEST(TokenizerTest, ADecoderWeLackFailsDecodingNotLoading) {
  std::string text = kTokenizerJson;
  text.replace(text.find(R"("decoder": null)"), 15, R"("decoder": {"type": "CTC", "pad_token": "<pad>"})");
  TokenizerOptions options;
  options.source = "/models/x/tokenizer.json";
  std::unique_ptr<Tokenizer> t;
  ASSERT_EQ(Tokenizer::FromJson(text, &t, options), "");
  EXPECT_EQ(t->Encode("ab"), (std::vector<int32_t>{2, 7, 3}));
  EXPECT_EQ(t->CanDecode().rfind("/models/x/tokenizer.json: cannot decode: decoder.type 'CTC' is not implemented", 0), 0u)
      << t->CanDecode();
  EXPECT_THROW(t->Decode({5}), std::logic_error);
}

// Nested 200,000 deep, an added token overflowed the stack where the message dumped it
// (tokenizer_fuzz, run on that input); `tokenizers` refuses past serde_json's 128 levels.
TEST(TokenizerTest, AFileNestedBeyondSerdeJsonsDepthIsAnErrorNotACrash) {
  std::unique_ptr<Tokenizer> t;
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_EQ(Tokenizer::FromJson(R"({"added_tokens": [{"id": "x", "content": )" + deep + "}]}", &t),
            "nests deeper than 128 levels");
}

}  // namespace
}  // namespace nightshift::tokenizer
