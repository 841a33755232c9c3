// WordPiece against the reference: the ids below are what `tokenizers` 0.23.3 (Python,
// /opt/nightshift/venv) gave for each word with a Tokenizer holding only
// models.WordPiece(vocab, ...) (no normalizer, no pre-tokenizer), pasted.
#include "tokenizer/components.h"

#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace nightshift::tokenizer {
namespace {

using namespace std::string_literals;

struct WordCase {
  std::string word;
  std::vector<int32_t> ids;
};

// The vocabulary of these cases: id = position.
const std::string kVocab[] = {
    "[UNK]"s, "un"s, "##aff"s, "##able"s, "unaff"s, "play"s, "##ing"s, "##s"s, "##play"s, "a"s,
    "##a"s, "aa"s, "##aaa"s, "\u00E9"s, "##\u00E9"s, "e"s, "##\u0301"s, "\u65E5"s, "##\u672C"s,
    "\U0001F600"s, "##\U0001F600"s, "x"s, "##x"s, "##"s, "#"s, "###"s, "ing"s, "s"s,
    "\u2581y"s, "##\u2581"s
};

// The reference's ids: WordPiece(vocab, unk_token="[UNK]") (prefix "##", 100 chars).
const WordCase kDefault[] = {
    {"unaffable"s, {4, 3}},
    {"unaff"s, {4}},
    {"playing"s, {5, 6}},
    {"plays"s, {5, 7}},
    {"playplaying"s, {5, 8, 6}},
    {"ingplay"s, {26, 8}},
    {"a"s, {9}},
    {"aaaaaa"s, {11, 12, 10}},
    {"aaaa"s, {11, 10, 10}},
    {"aaaaaaa"s, {11, 12, 10, 10}},
    {"\u00E9"s, {13}},
    {"\u00E9\u00E9"s, {13, 14}},
    {"\u00E9e\u0301"s, {0}},
    {"e\u0301"s, {15, 16}},
    {"\u65E5\u672C"s, {17, 18}},
    {"\u672C"s, {0}},
    {"\u65E5\u672C\u65E5"s, {0}},
    {"\U0001F600\U0001F600\U0001F600"s, {19, 20, 20}},
    {"#"s, {24}},
    {"##"s, {23}},
    {"###"s, {25}},
    {"####"s, {25, 25}},
    {"##x"s, {22}},
    {"s"s, {27}},
    {"q"s, {0}},
    {"unq"s, {0}},
    {"playq"s, {0}},
    {"x\u2581y"s, {0}},
    {"\u2581y"s, {28}},
};

// The reference's ids with max_input_chars_per_word=5.
const WordCase kShortWords[] = {
    {"aaaaa"s, {11, 12}},
    {"aaaaaa"s, {0}},
    {"\u00E9\u00E9\u00E9\u00E9"s, {13, 14, 14, 14}},
    {"\u00E9\u00E9\u00E9\u00E9\u00E9"s, {13, 14, 14, 14, 14}},
    {"\u00E9\u00E9\u00E9\u00E9\u00E9\u00E9"s, {0}},
    {"xxxxxx"s, {0}},
    {"\u65E5\u672C\u65E5\u672C\u65E5"s, {0}},
};

// The reference's ids with continuing_subword_prefix="".
const WordCase kNoPrefix[] = {
    {"unaff"s, {4}},
    {"aaa"s, {11, 9}},
    {"aa##a"s, {11, 10}},
    {"playing"s, {5, 26}},
    {"###"s, {25}},
    {"x##x"s, {21, 22}},
};

Json Config(const std::string& prefix, size_t max_chars) {
  Json vocab = Json::object();
  for (size_t id = 0; id < std::size(kVocab); ++id) vocab[kVocab[id]] = id;
  return Json{{"type", "WordPiece"},
              {"unk_token", "[UNK]"},
              {"continuing_subword_prefix", prefix},
              {"max_input_chars_per_word", max_chars},
              {"vocab", vocab}};
}

std::unique_ptr<Model> Make(const Json& config) {
  std::unique_ptr<Model> model;
  EXPECT_EQ(NewWordPiece(config, &model), "");
  return model;
}

std::vector<int32_t> Ids(const Model& model, const std::string& word) {
  std::vector<int32_t> ids = {-7};  // Tokenize appends: what is there stays
  model.Tokenize(DecodeUtf8(word), &ids);
  EXPECT_EQ(ids.front(), -7);
  return std::vector<int32_t>(ids.begin() + 1, ids.end());
}

template <size_t N>
void ExpectCases(const Json& config, const WordCase (&cases)[N]) {
  const auto model = Make(config);
  ASSERT_NE(model, nullptr);
  for (const WordCase& c : cases) EXPECT_EQ(Ids(*model, c.word), c.ids) << c.word;
}

TEST(WordPieceTest, GreedyLongestMatchFirstAsTheReference) {
  ExpectCases(Config("##", 100), kDefault);
}

TEST(WordPieceTest, WordsLongerThanMaxInputCharsAreUnknownInCodePoints) {
  ExpectCases(Config("##", 5), kShortWords);  // é counts one, not two bytes
  // The reference, with kVocab and 100 characters: 100 x are x and 99 ##x; 101 or 150 x
  // are [UNK]; with max_input_chars_per_word=0 any word is [UNK].
  const auto model = Make(Config("##", 100));
  std::vector<int32_t> hundred(100, 22);
  hundred[0] = 21;
  EXPECT_EQ(Ids(*model, std::string(100, 'x')), hundred);
  EXPECT_EQ(Ids(*model, std::string(101, 'x')), std::vector<int32_t>{0});
  EXPECT_EQ(Ids(*model, std::string(150, 'x')), std::vector<int32_t>{0});
  EXPECT_EQ(Ids(*Make(Config("##", 0)), "x"), std::vector<int32_t>{0});
}

TEST(WordPieceTest, EmptyPrefixAsTheReference) {
  ExpectCases(Config("", 100), kNoPrefix);
}

TEST(WordPieceTest, AnEmptyWordHasNoIds) {
  EXPECT_EQ(Ids(*Make(Config("##", 100)), ""), std::vector<int32_t>{});
}

TEST(WordPieceTest, VocabularyLookups) {
  const auto model = Make(Config("##", 100));
  EXPECT_EQ(model->VocabSize(), std::size(kVocab));
  EXPECT_EQ(model->TokenToId("##aff"), 2);
  EXPECT_EQ(model->TokenToId("\U0001F600"), 19);
  EXPECT_EQ(model->TokenToId("aff"), -1);
}

TEST(WordPieceTest, RefusesWhatItCannotServe) {
  Json config = Config("##", 100);
  const std::pair<std::string, std::string> missing[] = {
      {"unk_token", "missing key \"unk_token\""},
      {"continuing_subword_prefix", "missing key \"continuing_subword_prefix\""},
      {"max_input_chars_per_word", "missing key \"max_input_chars_per_word\""},
      {"vocab", "missing key \"vocab\""}};
  for (const auto& [key, message] : missing) {
    Json broken = config;
    broken.erase(key);
    std::unique_ptr<Model> model;
    EXPECT_NE(NewWordPiece(broken, &model).find(message), std::string::npos) << key;
    EXPECT_EQ(model, nullptr);
  }
  const std::pair<Json, std::string> bad[] = {
      {Json{{"max_input_chars_per_word", -1}}, "\"max_input_chars_per_word\" must be"},
      {Json{{"vocab", Json{{"a", -1}}}}, "id of \"a\" must be"},
      {Json{{"vocab", Json{{"a", "0"}}}}, "id of \"a\" must be"},
      // The reference fails each word it cannot split then; we refuse the file.
      {Json{{"unk_token", "<unk>"}}, "unk_token \"<unk>\" is not in \"vocab\""}};
  for (const auto& [patch, message] : bad) {
    Json broken = config;
    broken.update(patch);
    std::unique_ptr<Model> model;
    const Error error = NewWordPiece(broken, &model);
    EXPECT_NE(error.find(message), std::string::npos) << patch << "\n" << error;
  }
}

}  // namespace
}  // namespace nightshift::tokenizer
