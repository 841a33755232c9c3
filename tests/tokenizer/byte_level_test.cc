#include <chrono>
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

using namespace std::literals;

struct CodePointRange {
  char32_t first, last;
};
#include "tests/tokenizer/byte_level_onig_classes.inc"

std::unique_ptr<PreTokenizer> MakeByteLevel(bool add_prefix_space, bool use_regex = true) {
  std::unique_ptr<PreTokenizer> out;
  const Json config = {{"type", "ByteLevel"},
                       {"add_prefix_space", add_prefix_space},
                       {"trim_offsets", true},
                       {"use_regex", use_regex}};
  const Error e = NewByteLevelPreTokenizer(config, &out);
  EXPECT_EQ(e, "");
  return out;
}

std::vector<std::u32string> Split(const PreTokenizer& pre, std::u32string_view text) {
  std::vector<std::u32string> words;
  pre.Split(std::u32string(text), &words);
  return words;
}

struct Case {
  std::u32string_view text;
  std::vector<std::u32string> words;
};

void ExpectSplits(const PreTokenizer& pre, const std::vector<Case>& cases) {
  for (const Case& c : cases)
    EXPECT_EQ(Split(pre, c.text), c.words) << EncodeUtf8(c.text);
}

// All expected words below are the reference's: `tokenizers` 0.23.3,
// [w for w, _ in pre_tokenizers.ByteLevel(add_prefix_space=..., use_regex=...)
//  .pre_tokenize_str(text)].

// Contractions (case-sensitive), runs of spaces and newlines (`\s+(?!\S)` leaves the last
// space to the next word), accents, combining marks, CJK, emoji, controls, zero-width
// characters, every kind of Unicode space, digits of other scripts, U+FFFD.
TEST(ByteLevelTest, SplitsAsTheReferenceWithoutPrefixSpace) {
  ExpectSplits(*MakeByteLevel(false), {
      {U"Hello my friend, how is your day going?"sv, {U"Hello", U"Ġmy", U"Ġfriend", U",", U"Ġhow", U"Ġis", U"Ġyour", U"Ġday", U"Ġgoing", U"?"}},
      {U""sv, {}},
      {U" "sv, {U"Ġ"}},
      {U"  "sv, {U"ĠĠ"}},
      {U"a"sv, {U"a"}},
      {U" a"sv, {U"Ġa"}},
      {U"  a"sv, {U"Ġ", U"Ġa"}},
      {U"a  b"sv, {U"a", U"Ġ", U"Ġb"}},
      {U"a   b  "sv, {U"a", U"ĠĠ", U"Ġb", U"ĠĠ"}},
      {U"a\n\nb"sv, {U"a", U"Ċ", U"Ċ", U"b"}},
      {U"a \n b"sv, {U"a", U"ĠĊ", U"Ġb"}},
      {U"\n"sv, {U"Ċ"}},
      {U"Hello there\nHello there"sv, {U"Hello", U"Ġthere", U"Ċ", U"Hello", U"Ġthere"}},
      {U"I'm HE'S they're WE'VE i'd you'll 'S 'T x's"sv, {U"I", U"'m", U"ĠHE", U"'", U"S", U"Ġthey", U"'re", U"ĠWE", U"'", U"VE", U"Ġi", U"'d", U"Ġyou", U"'ll", U"Ġ'", U"S", U"Ġ'", U"T", U"Ġx", U"'s"}},
      {U"caf\u00E9 na\u00EFve \u00C5ngstr\u00F6m"sv, {U"cafÃ©", U"ĠnaÃ¯ve", U"ĠÃħngstrÃ¶m"}},
      {U"e\u0301\u0301x"sv, {U"e", U"ÌģÌģ", U"x"}},
      {U"\u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \u4E2D\u6587"sv, {U"æĹ¥æľ¬èªŀãĥĨãĤŃãĤ¹ãĥĪ", U"Ġä¸Ńæĸĩ"}},
      {U"\U0001F642\U0001F44D\U0001F3FD emoji\U0001F642x"sv, {U"ðŁĻĤðŁĳįðŁı½", U"Ġemoji", U"ðŁĻĤ", U"x"}},
      {U"a\u0000b\u0007c"sv, {U"a", U"Ā", U"b", U"ć", U"c"}},
      {U"zero\u200Bwidth\uFEFFbom"sv, {U"zero", U"âĢĭ", U"width", U"ï»¿", U"bom"}},
      {U"tab\tx\vy\fz\rw\u0085v\u00A0u\u1680t\u180Es\u2000r\u2028q\u2029p\u202Fo\u205Fn\u3000m"sv, {U"tab", U"ĉ", U"x", U"ċ", U"y", U"Č", U"z", U"č", U"w", U"Âħ", U"v", U"Âł", U"u", U"áļĢ", U"t", U"áłİ", U"s", U"âĢĢ", U"r", U"âĢ¨", U"q", U"âĢ©", U"p", U"âĢ¯", U"o", U"âģŁ", U"n", U"ãĢĢ", U"m"}},
      {U"123 4567 \u0663\u0664 \u216B \u00BD x\u00B2"sv, {U"123", U"Ġ4567", U"ĠÙ£Ù¤", U"Ġâħ«", U"ĠÂ½", U"Ġx", U"Â²"}},
      {U"\uFFFD\uFFFD a\uFFFD"sv, {U"ï¿½ï¿½", U"Ġa", U"ï¿½"}},
      {U"$$$ ... !!!a"sv, {U"$$$", U"Ġ...", U"Ġ!!!", U"a"}},
      {U"a1b2"sv, {U"a", U"1", U"b", U"2"}},
      {U"  \t\n  x  \n"sv, {U"ĠĠĉĊĠ", U"Ġx", U"ĠĠĊ"}},
      {U"don't"sv, {U"don", U"'t"}},
      {U" 's"sv, {U"Ġ'", U"s"}},
      {U"'s'"sv, {U"'s", U"'"}},
      {U"'ll've"sv, {U"'ll", U"'ve"}},
      {U"'LL"sv, {U"'", U"LL"}},
      {U"a'"sv, {U"a", U"'"}},
// True,True
  });
}

TEST(ByteLevelTest, PrefixSpaceOnlyWhenTheTextDoesNotStartWithU0020) {
  ExpectSplits(*MakeByteLevel(true), {
      {U"Hello my friend, how is your day going?"sv, {U"ĠHello", U"Ġmy", U"Ġfriend", U",", U"Ġhow", U"Ġis", U"Ġyour", U"Ġday", U"Ġgoing", U"?"}},
      {U""sv, {}},
      {U"a"sv, {U"Ġa"}},
      {U" a"sv, {U"Ġa"}},
      {U"  a"sv, {U"Ġ", U"Ġa"}},
      {U"\n"sv, {U"ĠĊ"}},
      {U"Hello there\nHello there"sv, {U"ĠHello", U"Ġthere", U"Ċ", U"Hello", U"Ġthere"}},
      {U"e\u0301\u0301x"sv, {U"Ġe", U"ÌģÌģ", U"x"}},
      {U"a\u0000b\u0007c"sv, {U"Ġa", U"Ā", U"b", U"ć", U"c"}},
      {U"tab\tx\vy\fz\rw\u0085v\u00A0u\u1680t\u180Es\u2000r\u2028q\u2029p\u202Fo\u205Fn\u3000m"sv, {U"Ġtab", U"ĉ", U"x", U"ċ", U"y", U"Č", U"z", U"č", U"w", U"Âħ", U"v", U"Âł", U"u", U"áļĢ", U"t", U"áłİ", U"s", U"âĢĢ", U"r", U"âĢ¨", U"q", U"âĢ©", U"p", U"âĢ¯", U"o", U"âģŁ", U"n", U"ãĢĢ", U"m"}},
      {U"\uFFFD\uFFFD a\uFFFD"sv, {U"Ġï¿½ï¿½", U"Ġa", U"ï¿½"}},
      {U"don't"sv, {U"Ġdon", U"'t"}},
      {U" 's"sv, {U"Ġ'", U"s"}},
      {U"'s'"sv, {U"Ġ'", U"s", U"'"}},
      {U"\u00A0x"sv, {U"Ġ", U"Âł", U"x"}},  // only U+0020 counts as a space there
      {U"\tx"sv, {U"Ġ", U"ĉ", U"x"}},
      {U"\u3000x"sv, {U"Ġ", U"ãĢĢ", U"x"}},
  });
}

TEST(ByteLevelTest, WithoutRegexTheTextIsOneWord) {
  ExpectSplits(*MakeByteLevel(true, /*use_regex=*/false), {
      {U"Hello my friend, how is your day going?"sv, {U"ĠHelloĠmyĠfriend,ĠhowĠisĠyourĠdayĠgoing?"}},
      {U""sv, {}},
      {U"  a"sv, {U"ĠĠa"}},
      {U"a   b  "sv, {U"ĠaĠĠĠbĠĠ"}},
      {U"tab\tx\vy\fz\rw\u0085v\u00A0u\u1680t\u180Es\u2000r\u2028q\u2029p\u202Fo\u205Fn\u3000m"sv, {U"ĠtabĉxċyČzčwÂħvÂłuáļĢtáłİsâĢĢrâĢ¨qâĢ©pâĢ¯oâģŁnãĢĢm"}},
      {U"  \t\n  x  \n"sv, {U"ĠĠĉĊĠĠxĠĠĊ"}},
  });
}

// GPT-2's byte table, for every byte that UTF-8 can hold (not C0, C1, F5..FF): the
// reference's one word for U+0000..U+007F, then for code points whose UTF-8 holds every
// continuation byte and every lead byte.
TEST(ByteLevelTest, BytesMapAsGpt2sTable) {
  const auto pre = MakeByteLevel(false, /*use_regex=*/false);
  std::u32string ascii;
  for (char32_t c = 0; c < 0x80; ++c) ascii.push_back(c);
  EXPECT_EQ(Split(*pre, ascii), std::vector<std::u32string>{
      U"ĀāĂăĄąĆćĈĉĊċČčĎďĐđĒēĔĕĖėĘęĚěĜĝĞğĠ!\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUV"
      U"WXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~ġ"});
  std::u32string multi;
  for (char32_t c = 0x80; c < 0xC0; ++c) multi.push_back(c);
  for (char32_t i = 1; i < 0x20; ++i) multi.push_back(0x80 + 0x40 * i);
  for (char32_t i = 1; i < 16; ++i)
    if (i != 13) multi.push_back(0x1000 * i);
  multi += U"\u0800\uD000\U00010000\U00040000\U00080000\U000C0000\U00100000";
  EXPECT_EQ(Split(*pre, multi), std::vector<std::u32string>{
      U"ÂĢÂģÂĤÂĥÂĦÂħÂĨÂĩÂĪÂīÂĬÂĭÂĮÂįÂİÂıÂĲÂĳÂĴÂĵÂĶÂķÂĸÂĹÂĺÂĻÂļÂĽÂľÂĿÂŀÂŁÂłÂ¡Â¢Â£Â¤Â¥"
      U"Â¦Â§Â¨Â©ÂªÂ«Â¬ÂŃÂ®Â¯Â°Â±Â²Â³Â´ÂµÂ¶Â·Â¸Â¹ÂºÂ»Â¼Â½Â¾Â¿ÃĢÄĢÅĢÆĢÇĢÈĢÉĢÊĢËĢÌĢÍĢÎĢÏĢÐĢ"
      U"ÑĢÒĢÓĢÔĢÕĢÖĢ×ĢØĢÙĢÚĢÛĢÜĢÝĢÞĢßĢàłĢà¡ĢáĢĢâĢĢãĢĢäĢĢåĢĢæĢĢçĢĢèĢĢéĢĢêĢĢëĢĢìĢĢîĢĢïĢĢ"
      U"àłĢíĢĢðĲĢĢñĢĢĢòĢĢĢóĢĢĢôĢĢĢ"});
}

bool InRanges(char32_t c, const CodePointRange* begin, const CodePointRange* end) {
  for (const CodePointRange* r = begin; r != end; ++r)
    if (c >= r->first && c <= r->last) return true;
  return false;
}

// Which class GPT-2's pattern puts `c` in, asked of our pre-tokenizer the way the table
// was asked of the reference.
char ClassOf(const PreTokenizer& pre, char32_t c) {
  if (Split(pre, std::u32string{U'a', c}).size() == 1) return 'L';
  if (Split(pre, std::u32string{U'1', c}).size() == 1) return 'N';
  if (Split(pre, std::u32string{U'!', c, U'!'}).size() == 3) return 's';
  return '-';
}

// \s, \p{L} and \p{N} from ICU equal Oniguruma's for every code point ICU knows. Code
// points ICU (72: Unicode 15.0) leaves unassigned are skipped: Oniguruma's tables are
// Unicode 16's, so the 5004 characters new in 16 (Garay, Kirat Rai, Egyptian hieroglyphs
// extended-A, ...) are letters or numbers there and punctuation-like here.
TEST(ByteLevelTest, UnicodeClassesAreTheReferences) {
  const auto pre = MakeByteLevel(false);
  int checked = 0;
  int differ = 0;
  for (char32_t c = 0; c <= 0x10FFFF; ++c) {
    if ((c >= 0xD800 && c <= 0xDFFF) || u_charType(static_cast<UChar32>(c)) == U_UNASSIGNED)
      continue;
    char want = '-';
    if (InRanges(c, std::begin(kOnigLetter), std::end(kOnigLetter))) want = 'L';
    if (InRanges(c, std::begin(kOnigNumber), std::end(kOnigNumber))) want = 'N';
    if (InRanges(c, std::begin(kOnigSpace), std::end(kOnigSpace))) want = 's';
    const char got = ClassOf(*pre, c);
    ++checked;
    if (got != want && ++differ <= 20)
      ADD_FAILURE() << "U+" << std::hex << static_cast<uint32_t>(c) << ": reference " << want
                    << ", ours " << got;
  }
  EXPECT_EQ(differ, 0);
  EXPECT_GT(checked, 280000);  // every assigned code point, private use included
}

// Long runs stay linear and whole: the reference gives 1, 99999 and 2 characters for
// "a" + 100000 spaces + "b", one word for a million letters, one for 100000 newlines.
TEST(ByteLevelTest, LongRunsSplitAsTheReference) {
  const auto pre = MakeByteLevel(false);
  const auto start = std::chrono::steady_clock::now();
  const auto spaced = Split(*pre, U"a" + std::u32string(100000, U' ') + U"b");
  ASSERT_EQ(spaced.size(), 3u);
  EXPECT_EQ(spaced[1], std::u32string(99999, U'Ġ'));
  EXPECT_EQ(spaced[2], U"Ġb");
  const auto letters = Split(*pre, std::u32string(1000000, U'x'));
  ASSERT_EQ(letters.size(), 1u);
  EXPECT_EQ(letters[0].size(), 1000000u);
  EXPECT_EQ(Split(*pre, std::u32string(100000, U'\n')),
            std::vector<std::u32string>{std::u32string(100000, U'Ċ')});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(ByteLevelTest, SplitsTheSameOnSeveralThreads) {
  const auto pre = MakeByteLevel(true);
  const std::u32string text = U"I'm HE'S caf\u00E9  \n\n\U0001F642 123 don't";
  const auto want = Split(*pre, text);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) wrong[t] += Split(*pre, text) != want;
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

// As the reference's serde: add_prefix_space and trim_offsets are required booleans,
// use_regex an optional one (default true); other keys are ignored.
TEST(ByteLevelTest, ConfigIsCheckedAsTheReferenceChecksIt) {
  std::unique_ptr<PreTokenizer> out;
  EXPECT_NE(NewByteLevelPreTokenizer(Json{{"type", "ByteLevel"}}, &out), "");
  EXPECT_NE(NewByteLevelPreTokenizer(Json{{"type", "ByteLevel"}, {"add_prefix_space", true}}, &out), "");
  EXPECT_NE(NewByteLevelPreTokenizer(
                Json{{"add_prefix_space", nullptr}, {"trim_offsets", true}}, &out), "");
  EXPECT_NE(NewByteLevelPreTokenizer(
                Json{{"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", "yes"}}, &out),
            "");
  EXPECT_EQ(NewByteLevelPreTokenizer(
                Json{{"add_prefix_space", false}, {"trim_offsets", false}, {"extra", 1}}, &out), "");
  EXPECT_EQ(Split(*out, U"a b"), (std::vector<std::u32string>{U"a", U"Ġb"}));  // regex on
}

}  // namespace
}  // namespace nightshift::tokenizer
