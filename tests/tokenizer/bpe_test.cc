#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tokenizer/components.h"
#include "tokenizer/unicode.h"

namespace nightshift::tokenizer {
namespace {

using namespace std::literals;
using Ids = std::vector<int32_t>;

// A BPE model's tokenizer.json object: vocab, merges and any other fields.
Json BpeConfig(const Json& vocab, const Json& merges, const Json& fields = Json::object()) {
  Json config = fields;
  config["type"] = "BPE";
  config["vocab"] = vocab;
  config["merges"] = merges;
  return config;
}

std::unique_ptr<Model> MakeBpe(const Json& config) {
  std::unique_ptr<Model> out;
  const Error e = NewBpe(config, &out);
  EXPECT_EQ(e, "") << config.dump();
  return out;
}

// The ids of `text` split at spaces, as the reference's WhitespaceSplit pre-tokenizer
// (enough for these ASCII-space texts) followed by the model.
Ids Encode(const Model& model, std::string_view text) {
  Ids ids;
  const std::u32string all = DecodeUtf8(text);
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(U' ', start);
    if (end == std::u32string::npos) end = all.size();
    model.Tokenize(all.substr(start, end - start), &ids);
    start = end + 1;
  }
  return ids;
}

// The expected ids in this file are the reference's: `tokenizers` 0.23.3,
// Tokenizer.from_str(tokenizer.json with this model and a WhitespaceSplit
// pre-tokenizer).encode(text).ids.

const Json kAbcd = {{"<unk>", 0}, {"a", 1},   {"b", 2},    {"c", 3},   {"d", 4},    {"ab", 5},
                    {"bc", 6},    {"abc", 7}, {"cd", 8}, {"abcd", 9}, {"bcd", 10}};

TEST(BpeTest, LowerRankMergesFirstWhereverItIs) {
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(kAbcd, {"b c", "a b"})), "abc abcd"), (Ids{1, 6, 1, 6, 4}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(kAbcd, {"a b", "b c"})), "abc abcd"), (Ids{5, 3, 5, 3, 4}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(kAbcd, {"a b", "c d", "ab cd", "b c", "a bc"})),
                   "abcd abc bcd"),
            (Ids{9, 5, 3, 2, 8}));
}

// Equal ranks (the same pair several times in a word) merge leftmost first: "aaaaa" is
// aa aa a, not a aa aa.
TEST(BpeTest, EqualRanksMergeLeftmostFirst) {
  const Json vocab = {{"a", 0}, {"aa", 1}, {"aaa", 2}, {"aaaa", 3}};
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, {"a a"})), "aaaaa"), (Ids{1, 1, 0}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, {"a a", "aa a"})), "aaaaa"), (Ids{1, 2}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, {"a a", "aa aa", "aa a"})), "aaaaaaa"), (Ids{3, 2}));
}

// Both merges forms; "#version" lines skipped; a pair listed twice keeps its later rank.
TEST(BpeTest, MergesInBothFormsAndListedTwice) {
  const Json pairs = Json::array({Json::array({"b", "c"}), Json::array({"a", "bc"})});
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(kAbcd, pairs)), "abc"), (Ids{7}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(kAbcd, {"#version: 0.2", "b c", "a bc"})), "abc"), (Ids{7}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(kAbcd, {"b c", "a b", "a bc", "b c"})), "abc"), (Ids{5, 3}));
}

TEST(BpeTest, UnknownCharacters) {
  // No unk_token: an unknown character vanishes.
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(kAbcd, {"a b"})), "axb x"), (Ids{5}));
  const Json unk = {{"unk_token", "<unk>"}};
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(kAbcd, {"a b"}, unk)), "axxb"), (Ids{1, 0, 0, 2}));
  const Json fused = {{"unk_token", "<unk>"}, {"fuse_unk", true}};
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(kAbcd, {"a b"}, fused)), "axxbx xx"), (Ids{1, 0, 2, 0, 0}));
}

TEST(BpeTest, ContinuingSubwordPrefixAndEndOfWordSuffix) {
  const Json vocab = {{"a", 0},     {"##b", 1},   {"##c", 2},     {"ab", 3},
                      {"abc", 4},   {"b", 5},     {"c", 6},       {"c</w>", 7},
                      {"##c</w>", 8}, {"ab</w>", 9}, {"##b</w>", 10}};
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, {"a ##b", "ab ##c"},
                                      {{"continuing_subword_prefix", "##"}})),
                   "abc ab b"),
            (Ids{4, 3, 5}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, {"a ##b"},
                                      {{"continuing_subword_prefix", "##"},
                                       {"end_of_word_suffix", "</w>"}})),
                   "ab abc c"),
            (Ids{0, 10, 3, 8, 7}));
  // The merge's result is left + right less the prefix's length, prefix or not: a xyb -> ab.
  EXPECT_TRUE(MakeBpe(BpeConfig({{"a", 0}, {"xyb", 1}, {"ab", 2}}, {"a xyb"},
                                {{"continuing_subword_prefix", "##"}})) != nullptr);
}

// ignore_merges: a word found whole in the vocabulary (without the suffix) is one token.
TEST(BpeTest, IgnoreMerges) {
  const Json vocab = {{"a", 0}, {"b", 1}, {"c", 2}, {"abc", 3}, {"ab", 4}};
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, {"a b"}, {{"ignore_merges", true}})), "abc ab"),
            (Ids{3, 4}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, {"a b"})), "abc"), (Ids{4, 2}));
  const Json suffixed = {{"a", 0}, {"b", 1}, {"ab", 2}, {"ab</w>", 3}, {"b</w>", 4}};
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(suffixed, {"a b"},
                                      {{"ignore_merges", true}, {"end_of_word_suffix", "</w>"}})),
                   "ab"),
            (Ids{2}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(suffixed, {"a b"}, {{"end_of_word_suffix", "</w>"}})), "ab"),
            (Ids{0, 4}));
}

// byte_fallback: an unknown character becomes its bytes' <0xHH> tokens when all exist,
// else the unknown token. The reference adds the bytes at once and a pending unknown
// token after them (so "ü" before "é" comes out after it), and the bytes are those of the
// character with its continuing_subword_prefix.
TEST(BpeTest, ByteFallback) {
  const Json vocab = {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}, {"<0x78>", 4}};
  const Json fallback = {{"byte_fallback", true}, {"unk_token", "<unk>"}};
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, Json::array(), fallback)), "a\xc3\xa9x\xc3\xa9"),
            (Ids{1, 2, 3, 4, 2, 3}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig({{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}}, Json::array(),
                                      fallback)),
                   "a\xc3\xa9" "a"),
            (Ids{1, 0, 1}));
  Json fused = fallback;
  fused["fuse_unk"] = true;
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, Json::array(), fused)),
                   "a\xc3\xbc\xc3\xa9\xc3\xbc" "a"),
            (Ids{1, 2, 3, 0, 1}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, Json::array(), fallback)),
                   "a\xc3\xbc\xc3\xa9\xc3\xbc" "a"),
            (Ids{1, 2, 3, 0, 0, 1}));
  Json prefixed = fallback;
  prefixed["continuing_subword_prefix"] = "#";
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig({{"<unk>", 0}, {"a", 1}, {"<0x23>", 2}, {"<0x78>", 3}},
                                      Json::array(), prefixed)),
                   "ax"),
            (Ids{1, 2, 3}));
  EXPECT_EQ(Encode(*MakeBpe(BpeConfig(vocab, Json::array(), {{"byte_fallback", true}})),
                   "a\xc3\xbc" "a"),
            (Ids{1, 1}));
}

// What the reference refuses at load (an error or a panic) is refused; so are dropout
// (random merges) and an unk_token outside the vocabulary (the reference fails later, at
// the first unknown character, which Tokenize cannot report).
TEST(BpeTest, RefusesWhatTheReferenceRefuses) {
  std::unique_ptr<Model> out;
  EXPECT_NE(NewBpe(Json{{"type", "BPE"}, {"vocab", kAbcd}}, &out), "");
  EXPECT_NE(NewBpe(Json{{"type", "BPE"}, {"merges", Json::array()}}, &out), "");
  EXPECT_NE(NewBpe(BpeConfig({{"a", -1}}, Json::array()), &out), "");
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, {"a x"}), &out), "");          // x not in the vocab
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, {"a c"}), &out), "");          // ac not in the vocab
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, {"a"}), &out), "");
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, {"a  b"}), &out), "");
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, Json::array({Json::array({"a", "b", "c"})})), &out), "");
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, Json::array({Json::array({"a", "b"}), "ab c"})), &out), "");
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, {"a b"}, {{"continuing_subword_prefix", "##"}}), &out), "");
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, {"a b"}, {{"dropout", 0.5}}), &out), "");
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, {"a b"}, {{"unk_token", "<zz>"}}), &out), "");
  EXPECT_NE(NewBpe(BpeConfig(kAbcd, {"a b"}, {{"fuse_unk", "yes"}}), &out), "");
  const Json fine = {{"dropout", 0.0}, {"unk_token", nullptr}, {"fuse_unk", nullptr},
                     {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"extra", 1}};
  ASSERT_EQ(NewBpe(BpeConfig(kAbcd, {"a b"}, fine), &out), "");
  EXPECT_EQ(Encode(*out, "abc"), (Ids{5, 3}));
  EXPECT_EQ(out->VocabSize(), 11u);
  EXPECT_EQ(out->TokenToId("abcd"), 9);
  EXPECT_EQ(out->TokenToId("zz"), -1);
}

// A byte-level BPE trained by the reference (BpeTrainer(vocab_size=300,
// initial_alphabet=ByteLevel.alphabet()) on a few lines of mail-like text, behind
// ByteLevel(add_prefix_space=False)), and its ids for hard texts.
constexpr char kTinyByteLevelBpe[] = R"json(
{"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
 "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
 "vocab": {
  "!": 0, "\"": 1, "#": 2, "$": 3, "%": 4, "&": 5, "'": 6, "(": 7, ")": 8, "*": 9, "+": 10,
  ",": 11, "-": 12, ".": 13, "/": 14, "0": 15, "1": 16, "2": 17, "3": 18, "4": 19, "5": 20,
  "6": 21, "7": 22, "8": 23, "9": 24, ":": 25, ";": 26, "<": 27, "=": 28, ">": 29, "?": 30,
  "@": 31, "A": 32, "B": 33, "C": 34, "D": 35, "E": 36, "F": 37, "G": 38, "H": 39, "I": 40,
  "J": 41, "K": 42, "L": 43, "M": 44, "N": 45, "O": 46, "P": 47, "Q": 48, "R": 49, "S": 50,
  "T": 51, "U": 52, "V": 53, "W": 54, "X": 55, "Y": 56, "Z": 57, "[": 58, "\\": 59, "]": 60,
  "^": 61, "_": 62, "`": 63, "a": 64, "b": 65, "c": 66, "d": 67, "e": 68, "f": 69, "g": 70,
  "h": 71, "i": 72, "j": 73, "k": 74, "l": 75, "m": 76, "n": 77, "o": 78, "p": 79, "q": 80,
  "r": 81, "s": 82, "t": 83, "u": 84, "v": 85, "w": 86, "x": 87, "y": 88, "z": 89, "{": 90,
  "|": 91, "}": 92, "~": 93, "¡": 94, "¢": 95, "£": 96, "¤": 97, "¥": 98, "¦": 99, "§": 100,
  "¨": 101, "©": 102, "ª": 103, "«": 104, "¬": 105, "®": 106, "¯": 107, "°": 108, "±": 109,
  "²": 110, "³": 111, "´": 112, "µ": 113, "¶": 114, "·": 115, "¸": 116, "¹": 117, "º": 118,
  "»": 119, "¼": 120, "½": 121, "¾": 122, "¿": 123, "À": 124, "Á": 125, "Â": 126, "Ã": 127,
  "Ä": 128, "Å": 129, "Æ": 130, "Ç": 131, "È": 132, "É": 133, "Ê": 134, "Ë": 135, "Ì": 136,
  "Í": 137, "Î": 138, "Ï": 139, "Ð": 140, "Ñ": 141, "Ò": 142, "Ó": 143, "Ô": 144, "Õ": 145,
  "Ö": 146, "×": 147, "Ø": 148, "Ù": 149, "Ú": 150, "Û": 151, "Ü": 152, "Ý": 153, "Þ": 154,
  "ß": 155, "à": 156, "á": 157, "â": 158, "ã": 159, "ä": 160, "å": 161, "æ": 162, "ç": 163,
  "è": 164, "é": 165, "ê": 166, "ë": 167, "ì": 168, "í": 169, "î": 170, "ï": 171, "ð": 172,
  "ñ": 173, "ò": 174, "ó": 175, "ô": 176, "õ": 177, "ö": 178, "÷": 179, "ø": 180, "ù": 181,
  "ú": 182, "û": 183, "ü": 184, "ý": 185, "þ": 186, "ÿ": 187, "Ā": 188, "ā": 189, "Ă": 190,
  "ă": 191, "Ą": 192, "ą": 193, "Ć": 194, "ć": 195, "Ĉ": 196, "ĉ": 197, "Ċ": 198, "ċ": 199,
  "Č": 200, "č": 201, "Ď": 202, "ď": 203, "Đ": 204, "đ": 205, "Ē": 206, "ē": 207, "Ĕ": 208,
  "ĕ": 209, "Ė": 210, "ė": 211, "Ę": 212, "ę": 213, "Ě": 214, "ě": 215, "Ĝ": 216, "ĝ": 217,
  "Ğ": 218, "ğ": 219, "Ġ": 220, "ġ": 221, "Ģ": 222, "ģ": 223, "Ĥ": 224, "ĥ": 225, "Ħ": 226,
  "ħ": 227, "Ĩ": 228, "ĩ": 229, "Ī": 230, "ī": 231, "Ĭ": 232, "ĭ": 233, "Į": 234, "į": 235,
  "İ": 236, "ı": 237, "Ĳ": 238, "ĳ": 239, "Ĵ": 240, "ĵ": 241, "Ķ": 242, "ķ": 243, "ĸ": 244,
  "Ĺ": 245, "ĺ": 246, "Ļ": 247, "ļ": 248, "Ľ": 249, "ľ": 250, "Ŀ": 251, "ŀ": 252, "Ł": 253,
  "ł": 254, "Ń": 255, "he": 256, "re": 257, "am": 258, "ll": 259, "Ã©": 260, "ðŁ": 261,
  "Ġhe": 262, "llo": 263, "er": 264, "or": 265, "ow": 266, "pam": 267, "spam": 268,
  "the": 269, "um": 270, "Ġd": 271, "Ġf": 272, "Ġi": 273, "Ġw": 274, "Ġthe": 275, "!!": 276,
  "02": 277, "12": 278, "ck": 279, "en": 280, "in": 281, "ick": 282, "ld": 283, "ou": 284,
  "ve": 285, "you": 286, "ãĤ": 287, "ãĥ": 288, "Ġh": 289, "Ġm": 290, "Ġn": 291, "Ġspam": 292,
  "Ġyou": 293, "Ġhere": 294, "Ġhello": 295, "orld": 296, "Ġis": 297, "Ġworld": 298, "'m": 299},
 "merges": [
  ["h", "e"], ["r", "e"], ["a", "m"], ["l", "l"], ["Ã", "©"], ["ð", "Ł"], ["Ġ", "he"],
  ["ll", "o"], ["e", "r"], ["o", "r"], ["o", "w"], ["p", "am"], ["s", "pam"], ["t", "he"],
  ["u", "m"], ["Ġ", "d"], ["Ġ", "f"], ["Ġ", "i"], ["Ġ", "w"], ["Ġ", "the"], ["!", "!"],
  ["0", "2"], ["1", "2"], ["c", "k"], ["e", "n"], ["i", "n"], ["i", "ck"], ["l", "d"],
  ["o", "u"], ["v", "e"], ["y", "ou"], ["ã", "Ĥ"], ["ã", "ĥ"], ["Ġ", "h"], ["Ġ", "m"],
  ["Ġ", "n"], ["Ġ", "spam"], ["Ġ", "you"], ["Ġhe", "re"], ["Ġhe", "llo"], ["or", "ld"],
  ["Ġi", "s"], ["Ġw", "orld"], ["'", "m"]]}
)json";

std::unique_ptr<Model> TinyModel() { return MakeBpe(Json::parse(kTinyByteLevelBpe)); }

std::unique_ptr<PreTokenizer> Gpt2PreTokenizer() {
  std::unique_ptr<PreTokenizer> out;
  EXPECT_EQ(NewByteLevelPreTokenizer(
                Json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}},
                &out),
            "");
  return out;
}

Ids EncodeByteLevel(const PreTokenizer& pre, const Model& model, std::u32string_view text) {
  std::vector<std::u32string> words;
  pre.Split(std::u32string(text), &words);
  Ids ids;
  for (const auto& word : words) model.Tokenize(word, &ids);
  return ids;
}

struct Case {
  std::u32string_view text;
  Ids ids;
};

const std::vector<Case>& HardTexts() {
  static const auto* cases = new std::vector<Case>{
      {U"Hello my friend, how is your day going?"sv,
       {39, 68, 263, 290, 88, 272, 81, 72, 280, 67, 11, 289, 266, 297, 293, 81, 271, 64, 88, 220,
        70, 78, 281, 70, 30}},
      {U"I'm HE'S they're WE'VE i'd you'll 'S 'T x's"sv,
       {40, 299, 220, 39, 36, 6, 50, 275, 88, 6, 257, 220, 54, 36, 6, 53, 36, 273, 6, 67, 293, 6,
        259, 220, 6, 50, 220, 6, 51, 220, 87, 6, 82}},
      {U"hello   world\n\n spam!!!"sv,
       {256, 263, 220, 220, 298, 198, 198, 292, 276, 0}},
      {U"caf\u00E9 na\u00EFve \u00C5ngstr\u00F6m"sv,
       {66, 64, 69, 260, 291, 64, 127, 107, 285, 220, 127, 227, 77, 70, 82, 83, 81, 127, 114, 76}},
      {U"e\u0301\u0301x"sv,
       {68, 136, 223, 136, 223, 87}},
      {U"\u65E5\u672C\u8A9E\u30C6\u30AD\u30B9\u30C8 \u4E2D\u6587"sv,
       {162, 245, 98, 162, 250, 105, 164, 103, 252, 288, 228, 287, 255, 287, 117, 288, 230, 220,
        160, 116, 255, 162, 244, 229}},
      {U"\U0001F642\U0001F44D\U0001F3FD emoji\U0001F642x"sv,
       {261, 247, 224, 261, 239, 235, 261, 237, 121, 220, 68, 76, 78, 73, 72, 261, 247, 224, 87}},
      {U"a\u0000b\u0007c"sv,
       {64, 188, 65, 195, 66}},
      {U"zero\u200Bwidth\uFEFFbom"sv,
       {89, 264, 78, 158, 222, 233, 86, 72, 67, 83, 71, 171, 119, 123, 65, 78, 76}},
      {U"123 4567 \u0663\u0664 \u216B \u00BD x\u00B2"sv,
       {278, 18, 220, 19, 20, 21, 22, 220, 149, 96, 149, 97, 220, 158, 227, 104, 220, 126, 121, 220,
        87, 126, 110}},
      {U"\uFFFD\uFFFD a\uFFFD"sv,
       {171, 123, 121, 171, 123, 121, 220, 64, 171, 123, 121}},
      {U"  \t\n  x  \n"sv,
       {220, 220, 197, 198, 220, 220, 87, 220, 220, 198}},
      {U"The DOG'S bone"sv,
       {51, 256, 220, 35, 46, 38, 6, 50, 220, 65, 78, 77, 68}},
      {U"spam spam spam spam"sv,
       {268, 292, 292, 292}},
  };
  return *cases;
}

// Tokenizer(model, pre_tokenizer=ByteLevel(add_prefix_space=False)).encode(text).ids.
TEST(BpeTest, ByteLevelBpeGivesTheReferencesIds) {
  const auto pre = Gpt2PreTokenizer();
  const auto model = TinyModel();
  EXPECT_EQ(model->VocabSize(), 300u);
  for (const Case& c : HardTexts())
    EXPECT_EQ(EncodeByteLevel(*pre, *model, c.text), c.ids) << EncodeUtf8(c.text);
  // "hello" * 60, one word of 300 characters (longer than the cache keeps): 60 x [256, 263].
  Ids want;
  for (int i = 0; i < 60; ++i) want.insert(want.end(), {256, 263});
  std::u32string long_word;
  for (int i = 0; i < 60; ++i) long_word += U"hello";
  EXPECT_EQ(EncodeByteLevel(*pre, *model, long_word), want);
  EXPECT_EQ(EncodeByteLevel(*pre, *model, long_word), want);  // and again, not from a cache
}

// Tokenize is const and shares a word cache: several threads on one model give the ids
// that one thread gives, cache cold or warm.
TEST(BpeTest, SameIdsOnSeveralThreads) {
  const auto pre = Gpt2PreTokenizer();
  const auto model = TinyModel();
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round)
        for (const Case& c : HardTexts())
          wrong[t] += EncodeByteLevel(*pre, *model, c.text) != c.ids;
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace nightshift::tokenizer
