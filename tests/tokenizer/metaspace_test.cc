// Metaspace against the reference: the words and tokens below are what `tokenizers`
// 0.23.3 gives (pre_tokenize_str, and Tokenizer.encode(...).tokens for the prepend scheme
// "first" around an added token).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer/components.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

using V = std::vector<std::string>;

std::vector<V> Words(const std::string& scheme, bool split) {
  std::unique_ptr<PreTokenizer> pre;
  EXPECT_EQ(NewMetaspacePreTokenizer(
                {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}}, &pre),
            "");
  std::vector<V> out;
  for (const char* text : {"hello  world", " lead", "\u2581x y", "", "a\tb\u00a0c"}) {
    std::vector<std::u32string> words;
    pre->Split(DecodeUtf8(text), &words);
    out.emplace_back();
    for (const auto& w : words) out.back().push_back(EncodeUtf8(w));
  }
  return out;
}

TEST(MetaspaceTest, SplitsAsTheReference) {
  const std::vector<V> always = {{"\u2581hello\u2581\u2581world"}, {"\u2581lead"}, {"\u2581x\u2581y"}, {}, {"\u2581a\tb\u00a0c"}};
  EXPECT_EQ(Words("always", false), always);
  EXPECT_EQ(Words("first", false), always);  // a whole text starts itself
  EXPECT_EQ(Words("never", false),
            (std::vector<V>{{"hello\u2581\u2581world"}, {"\u2581lead"}, {"\u2581x\u2581y"}, {}, {"a\tb\u00a0c"}}));
  EXPECT_EQ(Words("always", true), (std::vector<V>{{"\u2581hello", "\u2581", "\u2581world"}, {"\u2581lead"},
                                                   {"\u2581x", "\u2581y"}, {}, {"\u2581a\tb\u00a0c"}}));
  EXPECT_EQ(Words("never", true), (std::vector<V>{{"hello", "\u2581", "\u2581world"}, {"\u2581lead"},
                                                  {"\u2581x", "\u2581y"}, {}, {"a\tb\u00a0c"}}));
}

// "first": the prefix goes before the text's first stretch only, not after an added token.
TEST(MetaspaceTest, FirstMeansTheStartOfTheText) {
  for (const bool split : {false, true}) {
    const std::string pre = R"({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": )" +
                            std::string(split ? "true" : "false") + "}";
    const std::string json = R"({"added_tokens": [{"id": 3, "content": "<s>", "special": true}],
      "pre_tokenizer": {"type": "Sequence", "pretokenizers": [)" + pre + R"(]},
      "model": {"type": "BPE", "vocab": {"\u2581": 0, "a": 1, "\u2581a": 2, "<s>": 3, "b": 4, "\u2581b": 5},
                "merges": [["\u2581", "a"], ["\u2581", "b"]]}})";
    std::unique_ptr<Tokenizer> t;
    ASSERT_EQ(Tokenizer::FromJson(json, &t), "");
    EXPECT_EQ(t->Encode("a b"), (std::vector<int32_t>{2, 5}));
    EXPECT_EQ(t->Encode("<s>a b"), (std::vector<int32_t>{3, 1, 5}));
    EXPECT_EQ(t->Encode("a<s>b"), (std::vector<int32_t>{2, 3, 4}));
    EXPECT_EQ(t->Encode("<s> a"), (std::vector<int32_t>{3, 2}));
  }
}

TEST(MetaspaceTest, ConfigErrorsNameTheKey) {
  std::unique_ptr<PreTokenizer> out;
  EXPECT_NE(NewMetaspacePreTokenizer({{"replacement", "ab"}}, &out).find("\"replacement\""), std::string::npos);
  EXPECT_NE(NewMetaspacePreTokenizer({{"replacement", "_"}, {"prepend_scheme", "sometimes"}}, &out).find("prepend_scheme"),
            std::string::npos);
  EXPECT_NE(NewMetaspacePreTokenizer({{"replacement", "_"}, {"split", 1}}, &out).find("\"split\""), std::string::npos);
  // tokenizers < 0.19: add_prefix_space instead of prepend_scheme.
  ASSERT_EQ(NewMetaspacePreTokenizer({{"replacement", "_"}, {"add_prefix_space", false}, {"split", false}}, &out), "");
  std::vector<std::u32string> words;
  out->Split(U"a b", &words);
  EXPECT_EQ(words, std::vector<std::u32string>{U"a_b"});
}

}  // namespace
}  // namespace nightshift::tokenizer
