#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <unicode/uchar.h>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

struct CodePointRange {
  char32_t first, last;
};
#include "tests/tokenizer/byte_level_onig_classes.inc"

bool InRanges(char32_t c, const CodePointRange* begin, const CodePointRange* end) {
  for (const CodePointRange* r = begin; r != end; ++r)
    if (c >= r->first && c <= r->last) return true;
  return false;
}

// Llama 3's and Qwen2's expressions, as their tokenizer.json files hold them.
constexpr char kLlama3[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr char kQwen2[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::unique_ptr<PreTokenizer> MakeSplit(const Json& pattern, const std::string& behavior, bool invert) {
  std::unique_ptr<PreTokenizer> out;
  const Json config = {{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", invert}};
  const Error e = NewSplitPreTokenizer(config, &out);
  EXPECT_EQ(e, "") << config.dump();
  return out;
}

std::vector<std::string> Words(const PreTokenizer& pre, std::u32string_view text) {
  std::vector<std::u32string> words;
  pre.Split(std::u32string(text), &words);
  std::vector<std::string> out;
  for (const auto& w : words) out.push_back(EncodeUtf8(w));
  return out;
}

using V = std::vector<std::string>;

// All expected words below are the reference's: `tokenizers` 0.23.3,
// [w for w, _ in pre_tokenizers.Split(pattern, behavior, invert).pre_tokenize_str(text)].
TEST(SplitTest, Llama3PatternSplitsAsTheReference) {
  const auto pre = MakeSplit({{"Regex", kLlama3}}, "Isolated", false);
  EXPECT_EQ(Words(*pre, U"Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(Words(*pre, U"I'M DON'T we'Ll  it'S"), (V{"I", "'M", " DON", "'T", " we", "'Ll", " ", " it", "'S"}));
  EXPECT_EQ(Words(*pre, U"1234567 12"), (V{"123", "456", "7", " ", "12"}));
  EXPECT_EQ(Words(*pre, U"  leading\r\n\r\n  x\n\n"), (V{" ", " leading", "\r\n\r\n", " ", " x", "\n\n"}));
  EXPECT_EQ(Words(*pre, U"a\u00a0b\u2003c\u0085d\u000be"),
            (V{"a", "\u00a0b", "\u2003c", "\u0085d", "\u000be"}));
  EXPECT_EQ(Words(*pre, U"\u4e2d\u6587 caf\u00e9!!\n?"), (V{"\u4e2d\u6587", " caf\u00e9", "!!\n", "?"}));
  EXPECT_EQ(Words(*pre, U":-) ...\n\n"), (V{":-)", " ...\n\n"}));
  EXPECT_EQ(Words(*pre, U"x\u017fs 's"), (V{"x\u017fs", " '", "s"}));
}

TEST(SplitTest, Qwen2PatternSplitsDigitsOneByOne) {
  const auto pre = MakeSplit({{"Regex", kQwen2}}, "Isolated", false);
  EXPECT_EQ(Words(*pre, U"1234567 12"), (V{"1", "2", "3", "4", "5", "6", "7", " ", "1", "2"}));
  EXPECT_EQ(Words(*pre, U"I'M DON'T we'Ll  it'S"), (V{"I", "'M", " DON", "'T", " we", "'Ll", " ", " it", "'S"}));
}

struct BehaviorCase {
  const char* behavior;
  bool invert;
  V string_words;  // "-" on "a--b-c-"
  V prefix_words;  // "-" on "-x"
  V regex_words;   // \d on "ab12c3"
};

TEST(SplitTest, BehaviorsAndInvertAsTheReference) {
  const std::vector<BehaviorCase> cases = {
      {"Removed", false, {"a", "b", "c"}, {"x"}, {"ab", "c"}},
      {"Removed", true, {"-", "-", "-", "-"}, {"-"}, {"1", "2", "3"}},
      {"Isolated", false, {"a", "-", "-", "b", "-", "c", "-"}, {"-", "x"}, {"ab", "1", "2", "c", "3"}},
      {"Isolated", true, {"a", "-", "-", "b", "-", "c", "-"}, {"-", "x"}, {"ab", "1", "2", "c", "3"}},
      {"MergedWithPrevious", false, {"a-", "-", "b-", "c-"}, {"-", "x"}, {"ab1", "2", "c3"}},
      {"MergedWithPrevious", true, {"a", "-", "-b", "-c", "-"}, {"-x"}, {"ab", "1", "2c", "3"}},
      {"MergedWithNext", false, {"a", "-", "-b", "-c", "-"}, {"-x"}, {"ab", "1", "2c", "3"}},
      {"MergedWithNext", true, {"a-", "-", "b-", "c-"}, {"-", "x"}, {"ab1", "2", "c3"}},
      {"Contiguous", false, {"a", "--", "b", "-", "c", "-"}, {"-", "x"}, {"ab", "12", "c", "3"}},
      {"Contiguous", true, {"a", "--", "b", "-", "c", "-"}, {"-", "x"}, {"ab", "12", "c", "3"}},
  };
  for (const BehaviorCase& c : cases) {
    const auto literal = MakeSplit({{"String", "-"}}, c.behavior, c.invert);
    EXPECT_EQ(Words(*literal, U"a--b-c-"), c.string_words) << c.behavior << " " << c.invert;
    EXPECT_EQ(Words(*literal, U"-x"), c.prefix_words) << c.behavior << " " << c.invert;
    const auto regex = MakeSplit({{"Regex", "\\d"}}, c.behavior, c.invert);
    EXPECT_EQ(Words(*regex, U"ab12c3"), c.regex_words) << c.behavior << " " << c.invert;
  }
}

// A String pattern is literal (regex characters included); an empty one matches nowhere.
TEST(SplitTest, StringPatternIsLiteral) {
  EXPECT_EQ(Words(*MakeSplit({{"String", ".*"}}, "Removed", false), U"a.*b.c"), (V{"a", "b.c"}));
  EXPECT_EQ(Words(*MakeSplit({{"String", ""}}, "Removed", false), U"abc"), (V{"abc"}));
}

// \s from Oniguruma (White_Space) for every code point ICU knows (see byte_level_test for
// the code points that are new in Unicode 16): "!X!" is three words iff X is a space.
TEST(SplitTest, WhiteSpaceClassIsTheReferences) {
  const auto pre = MakeSplit({{"Regex", "\\s+|[^\\S]"}}, "Isolated", false);
  int differ = 0;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if ((c >= 0xD800 && c <= 0xDFFF) || u_charType(static_cast<UChar32>(c)) == U_UNASSIGNED) continue;
    const bool want = c == U' ' || InRanges(c, std::begin(kOnigSpace), std::end(kOnigSpace));
    const bool got = Words(*pre, std::u32string{U'!', c, U'!'}).size() == 3;
    if (got != want && ++differ <= 20)
      ADD_FAILURE() << "U+" << std::hex << static_cast<uint32_t>(c) << ": reference " << want << ", ours " << got;
  }
  EXPECT_EQ(differ, 0);
}

TEST(SplitTest, OnigurumaEscapesAreTranslated) {
  std::string out;
  EXPECT_EQ(OnigurumaToIcu(R"([^\s\p{L}]\S\\s)", &out), "");
  EXPECT_EQ(out, R"([^\p{White_Space}\p{L}]\P{White_Space}\\s)");
  EXPECT_NE(OnigurumaToIcu(R"(\h+)", &out), "");
}

TEST(SplitTest, SplitsTheSameOnSeveralThreads) {
  const auto pre = MakeSplit({{"Regex", kLlama3}}, "Isolated", false);
  const std::u32string text = U"I'm HE'S caf\u00E9  \n\n\U0001F642 12345 don't";
  const auto want = Words(*pre, text);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) wrong[t] += Words(*pre, text) != want;
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

// Errors name the key: pattern, behavior, invert, and a pattern ICU cannot compile.
TEST(SplitTest, ConfigErrorsNameTheKey) {
  std::unique_ptr<PreTokenizer> out;
  const auto error = [&](Json config) { return NewSplitPreTokenizer(config, &out); };
  EXPECT_NE(error({{"pattern", "x"}, {"behavior", "Isolated"}, {"invert", false}}).find("\"pattern\""),
            std::string::npos);
  EXPECT_NE(error({{"pattern", {{"Regex", "x"}}}, {"behavior", "Split"}, {"invert", false}}).find("\"behavior\""),
            std::string::npos);
  EXPECT_NE(error({{"pattern", {{"Regex", "x"}}}, {"behavior", "Isolated"}}).find("\"invert\""), std::string::npos);
  EXPECT_NE(error({{"pattern", {{"Regex", "(x"}}}, {"behavior", "Isolated"}, {"invert", false}}).find("compile"),
            std::string::npos);
}

}  // namespace
}  // namespace nightshift::tokenizer
