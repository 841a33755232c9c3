#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

namespace nightshift::tokenizer {
namespace {

// Each pair: bytes, and what Python's bytes.decode("utf-8", errors="replace") gives (run
// on CPython 3.11): one U+FFFD per maximal subpart of an ill-formed sequence.
TEST(UnicodeTest, IllFormedUtf8ReadsAsPythonReadsIt) {
  const std::pair<std::string, std::u32string> cases[] = {
      {"\xff\xfe", U"\uFFFD\uFFFD"},
      {"\xc3\x28", U"\uFFFD("},
      {"\xe2\x82", U"\uFFFD"},                      // a truncated sequence: one
      {"\xed\xa0\x80", U"\uFFFD\uFFFD\uFFFD"},      // a surrogate: one per byte
      {"\xf0\x9f\x98", U"\uFFFD"},
      {"\xf0\x9f\x98\x80", U"\U0001F600"},
      {"\xc0\xaf", U"\uFFFD\uFFFD"},                // overlong
      {"\xf4\x90\x80\x80", U"\uFFFD\uFFFD\uFFFD\uFFFD"},  // beyond U+10FFFF
      {"a\x80" "b", U"a\uFFFDb"},
      {std::string("nul\0in", 6), std::u32string(U"nul\0in", 6)},
  };
  for (const auto& [bytes, want] : cases) EXPECT_EQ(DecodeUtf8(bytes), want) << bytes;
}

TEST(UnicodeTest, WellFormedTextRoundTrips) {
  const std::string text = "plain, caf\xc3\xa9, \xe4\xb8\xad\xe6\x96\x87, \xf0\x9f\x98\x80";
  EXPECT_EQ(EncodeUtf8(DecodeUtf8(text)), text);
  EXPECT_EQ(DecodeUtf8(text).size(), 18u);
  EXPECT_EQ(EncodeUtf8(std::u32string(1, char32_t{0xD800})), "\xef\xbf\xbd");  // not a character
}

}  // namespace
}  // namespace nightshift::tokenizer
