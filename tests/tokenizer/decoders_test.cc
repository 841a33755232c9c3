// Each decoder of decoders.cc against the reference: every expected text below is what
// `tokenizers` 0.23.3 gives for the same decoder and tokens
// (tokenizers.decoders.<Type>(...).decode(tokens), the decoder's JSON as its __getstate__
// writes it). Byte-level tokens are written as GPT-2's byte table spells the bytes
// ("\u0120" is a space, "\u00c3" the byte C3, ...).
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer/components.h"

namespace nightshift::tokenizer {
namespace {

using Tokens = std::vector<std::string>;

// The text `config`'s decoder makes of `tokens` (the chain's tokens, joined).
std::string Decode(const Json& config, Tokens tokens) {
  std::unique_ptr<Decoder> d;
  const Error e = NewDecoder(config, &d);
  EXPECT_EQ(e, "") << config.dump();
  if (d == nullptr) return "<no decoder>";
  d->DecodeChain(&tokens);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

constexpr char kFffd[] = "\xEF\xBF\xBD";  // U+FFFD

std::string Fffd(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += kFffd;
  return s;
}

TEST(DecodersTest, ByteLevelMapsTheByteTableBackAndReadsTheBytesLossily) {
  const Json bl = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  EXPECT_EQ(Decode(bl, {"Hello", "\u0120world", "\u010a"}), "Hello world\n");
  // U+4E2D is E4 B8 AD: two of its bytes are one ill-formed sequence, one U+FFFD.
  EXPECT_EQ(Decode(bl, {"\u00e4\u00b8"}), kFffd);
  EXPECT_EQ(Decode(bl, {"\u00e4\u00b8", "\u0143"}), "\u4e2d");  // the character split across tokens
  // A token with a character outside the table (a space) is its own UTF-8, whole.
  EXPECT_EQ(Decode(bl, {"Hello", " world", "\u0120x"}), "Hello world x");
  EXPECT_EQ(Decode(bl, {"<|endoftext|>", "a"}), "<|endoftext|>a");
  // ED A0 80 (a surrogate), FF, C3: five maximal subparts.
  EXPECT_EQ(Decode(bl, {"\u00ed\u0142\u0122", "\u00ff", "\u00c3"}), Fffd(5));
  EXPECT_EQ(Decode(bl, {"\u00c3", "\u00a9"}), "\u00e9");
  EXPECT_EQ(Decode(bl, {"\u00f0\u0141\u013a", "x", "\u0122"}), Fffd(1) + "x" + Fffd(1));  // F0 9F 98: one subpart
  // "é" is in the table (byte E9, a lone lead byte), then C3: two.
  EXPECT_EQ(Decode(bl, {"\u00e9", "\u00c3"}), Fffd(2));
  EXPECT_EQ(Decode(bl, {}), "");
}

TEST(DecodersTest, GptCharToByteInvertsTheTable) {
  EXPECT_EQ(GptCharToByte(U'\u0120'), ' ');
  EXPECT_EQ(GptCharToByte(U'\u010a'), '\n');
  EXPECT_EQ(GptCharToByte(U'\u0100'), 0);
  EXPECT_EQ(GptCharToByte(U'\u0143'), 0xAD);  // the last of the 68 moved bytes
  EXPECT_EQ(GptCharToByte(U'a'), 'a');
  EXPECT_EQ(GptCharToByte(U' '), -1);
  EXPECT_EQ(GptCharToByte(U'\u00ad'), -1);  // moved to U+0143
  EXPECT_EQ(GptCharToByte(U'\u0144'), -1);
}

TEST(DecodersTest, MetaspaceDropsEveryReplacementOfTheFirstTokenUnlessNever) {
  const auto ms = [](const char* scheme, const char* replacement = "\u2581") {
    return Json{{"type", "Metaspace"}, {"replacement", replacement}, {"prepend_scheme", scheme}, {"split", true}};
  };
  EXPECT_EQ(Decode(ms("always"), {"\u2581Hey", "\u2581friend!"}), "Hey friend!");
  EXPECT_EQ(Decode(ms("always"), {"\u2581\u2581a", "\u2581b"}), "a b");  // both of the first token's
  EXPECT_EQ(Decode(ms("always"), {"a\u2581b", "\u2581"}), "ab ");
  EXPECT_EQ(Decode(ms("always"), {}), "");
  EXPECT_EQ(Decode(ms("first"), {"\u2581Hey", "\u2581friend!"}), "Hey friend!");
  EXPECT_EQ(Decode(ms("never"), {"\u2581Hey", "\u2581friend!"}), " Hey friend!");
  EXPECT_EQ(Decode(ms("never"), {"\u2581\u2581a", "\u2581b"}), "  a b");
  EXPECT_EQ(Decode(ms("always", "_"), {"_Hey", "_my_friend", "\u2581"}), "Hey my friend\u2581");
  // tokenizers < 0.19 wrote add_prefix_space instead of prepend_scheme.
  EXPECT_EQ(Decode({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}},
                   {"\u2581a"}),
            " a");
}

TEST(DecodersTest, ReplaceReplacesEveryMatchInEachToken) {
  const Json space = {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}};
  EXPECT_EQ(Decode(space, {"\u2581a\u2581\u2581b", "c\u2581"}), " a  bc ");
  EXPECT_EQ(Decode(space, {"ab"}), "ab");
  // Matches do not overlap; `content` is literal.
  EXPECT_EQ(Decode({{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", "$1"}}, {"aabab", "ba"}),
            "a$1$1ba");
  // A regex, token by token (the match does not cross tokens).
  EXPECT_EQ(Decode({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", "_"}}, {"a  b\tc", " x", "$1"}),
            "a_b_c_x$1");
}

TEST(DecodersTest, ByteFallbackJoinsRunsOfByteTokensOrGivesOneReplacementEach) {
  const Json bf = {{"type", "ByteFallback"}};
  EXPECT_EQ(Decode(bf, {"Hey", "friend!"}), "Heyfriend!");
  EXPECT_EQ(Decode(bf, {"<0x61>"}), "a");
  EXPECT_EQ(Decode(bf, {"<0xE5>"}), kFffd);
  EXPECT_EQ(Decode(bf, {"<0xE5>", "<0x8f>"}), Fffd(2));
  EXPECT_EQ(Decode(bf, {"<0xE5>", "<0x8f>", "<0xab>"}), "\u53eb");
  EXPECT_EQ(Decode(bf, {"<0xE5>", "<0x8f>", "<0xab>", "a"}), "\u53eb" "a");
  EXPECT_EQ(Decode(bf, {"<0xE5>", "<0x8f>", "a"}), Fffd(2) + "a");
  // Not byte tokens: a bad digit, three digits; "+f" is 15 to Rust's from_str_radix.
  EXPECT_EQ(Decode(bf, {"<0xZZ>", "<0x+f>", "<0x41>", "<0x4>", "<0x041>"}), "<0xZZ>\x0f" "A<0x4><0x041>");
  // A run that is partly valid is replaced whole, byte by byte.
  EXPECT_EQ(Decode(bf, {"<0xC3>", "<0xA9>", "<0xFF>", "x"}), Fffd(3) + "x");
}

TEST(DecodersTest, FuseJoinsAllTokens) {
  const Json fuse = {{"type", "Fuse"}};
  std::unique_ptr<Decoder> d;
  ASSERT_EQ(NewDecoder(fuse, &d), "");
  Tokens tokens = {"a", "b", " c"};
  d->DecodeChain(&tokens);
  EXPECT_EQ(tokens, Tokens{"ab c"});
  EXPECT_EQ(Decode(fuse, {}), "");
}

TEST(DecodersTest, StripTakesAtMostStartAndStopCharactersOffEachToken) {
  const auto strip = [](const char* content, int start, int stop) {
    return Json{{"type", "Strip"}, {"content", content}, {"start", start}, {"stop", stop}};
  };
  EXPECT_EQ(Decode(strip(" ", 1, 0), {"  a", " b ", "c"}), " ab c");
  EXPECT_EQ(Decode(strip(" ", 1, 0), {" "}), "");
  EXPECT_EQ(Decode(strip("H", 2, 1), {"HHHeyHH", "xH", "aHHH", "HHH"}), "HeyHxaHH");
  EXPECT_EQ(Decode(strip(" ", 0, 2), {"a   ", " b", "  "}), "a  b");
  // The reference panics here (start and stop overlap on a token of `content` only:
  // "slice index starts at 1 but ends at 0"); we give the token with them all off.
  EXPECT_EQ(Decode(strip("H", 2, 1), {"H", "HH", "xHH"}), "xH");
}

TEST(DecodersTest, WordPieceJoinsContinuationsAndCleansUpEachToken) {
  EXPECT_EQ(Decode({{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", false}},
                   {"##uelo", "Ara", "##\u00faj", "##o", "No", "##guera"}),
            "##uelo Ara\u00fajo Noguera");
  const Json clean = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  EXPECT_EQ(Decode(clean, {"hello", ",", "i", "do", "not", "think", "it", "'", "s", "a", "don", "'", "t", ".", "?", "n't",
                           "'m", "'ve", "'re"}),
            "hello, i do not think it ' s a don ' t.?n't'm've're");
  // " do not" -> " don't" only inside one token.
  EXPECT_EQ(Decode(clean, {"a", " do not", "##b", "x ' y"}), "a  don'tb x'y");
}

TEST(DecodersTest, BpeDecoderTurnsTheSuffixIntoSpaces) {
  const Json bpe = {{"type", "BPEDecoder"}, {"suffix", "</w>"}};
  EXPECT_EQ(Decode(bpe, {"hel", "lo</w>", "wor", "ld</w>"}), "hello world");
  EXPECT_EQ(Decode(bpe, {"a</w>b</w>"}), "ab");
}

// transformers 5.24's LlamaTokenizer decoder (folder.cc LlamaDecoderJson).
TEST(DecodersTest, SequenceRunsItsStepsInOrder) {
  const Json llama = LlamaDecoderJson(/*add_prefix_space=*/true);
  EXPECT_EQ(Decode(llama, {"\u2581Hey", "<0xE5>", "<0x8F>", "<0xAB>", "\u2581\u2581x"}), "Hey\u53eb  x");
  EXPECT_EQ(Decode(llama, {"\u2581\u2581a"}), " a");  // one space stripped, of the text not of each token
  EXPECT_EQ(Decode(llama, {"<0xE5>", "\u2581b"}), std::string(kFffd) + " b");
  EXPECT_EQ(Decode(llama, {"<s>", "\u2581a"}), "<s> a");
  EXPECT_EQ(Decode(LlamaDecoderJson(/*add_prefix_space=*/false), {"\u2581\u2581a"}), "  a");
}

TEST(DecodersTest, WhatIsNotImplementedOrMalformedIsNamed) {
  std::unique_ptr<Decoder> d;
  EXPECT_EQ(NewDecoder({{"type", "CTC"}}, &d).rfind("decoder.type 'CTC' is not implemented", 0), 0u);
  EXPECT_EQ(NewDecoder({{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "CTC"}}}}}, &d)
                .rfind("decoder.type 'CTC'", 0),
            0u);
  EXPECT_EQ(NewDecoder({{"type", "Strip"}, {"content", "ab"}, {"start", 1}, {"stop", 0}}, &d),
            "decoder Strip: \"content\" must be one character");
  EXPECT_EQ(NewDecoder({{"type", "Strip"}, {"content", " "}, {"start", -1}, {"stop", 0}}, &d),
            "decoder Strip: \"start\" must be a count (0 or more)");
  EXPECT_EQ(NewDecoder({{"type", "Replace"}, {"pattern", "x"}, {"content", " "}}, &d),
            "decoder Replace: \"pattern\" must be {\"String\": \"...\"} or {\"Regex\": \"...\"}");
  EXPECT_EQ(NewDecoder({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "sometimes"}}, &d),
            "decoder Metaspace: \"prepend_scheme\" must be \"always\", \"first\" or \"never\", not \"sometimes\"");
  EXPECT_EQ(NewDecoder(Json::array(), &d), "decoder: not a JSON object");
}

}  // namespace
}  // namespace nightshift::tokenizer
