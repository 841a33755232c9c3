// LoadFolder: a folder's tokenizer.model through sentencepiece (as transformers 5.24's
// LlamaTokenizer), else its tokenizer.json. The ids of a sentencepiece folder are checked
// against transformers by equality_test.py; here, the rules around the model: which file
// is read, the prefix space, the special tokens, bos / eos, truncation, errors.
#include "tokenizer/folder.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace nightshift::tokenizer {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

void Write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A sentencepiece BPE model with Llama 2's flags, trained once for all tests.
class FolderTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    char name[] = "/tmp/folder_test.XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = new std::string(name);
    std::string corpus;
    for (int i = 0; i < 50; ++i)
      corpus += "hello world, the quick brown fox jumps over the lazy dog " + std::to_string(i * 7919) + "\n";
    Write(*dir_ + "/corpus.txt", corpus);
    const auto st = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + *dir_ + "/corpus.txt --model_prefix=" + *dir_ +
        "/sp --vocab_size=320 --model_type=bpe --byte_fallback=true --split_digits=true"
        " --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=true"
        " --allow_whitespace_only_pieces=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --minloglevel=2");
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*dir_, ec);
    delete dir_;
  }

  // A fresh folder with the model as tokenizer.model and `config` as tokenizer_config.json
  // ("": none).
  std::string Folder(const std::string& config) {
    const std::string folder = *dir_ + "/f" + std::to_string(next_++);
    fs::create_directories(folder);
    fs::copy_file(*dir_ + "/sp.model", folder + "/tokenizer.model");
    if (!config.empty()) Write(folder + "/tokenizer_config.json", config);
    return folder;
  }

  std::unique_ptr<TextTokenizer> Load(const std::string& folder) {
    std::unique_ptr<TextTokenizer> t;
    EXPECT_EQ(LoadFolder(folder, &t), "");
    return t;
  }

  // sentencepiece's own ids for `text` (with its dummy prefix).
  static Ids Pieces(const std::string& text) {
    sentencepiece::SentencePieceProcessor sp;
    EXPECT_TRUE(sp.Load(*dir_ + "/sp.model").ok());
    std::vector<int> ids;
    EXPECT_TRUE(sp.Encode(text, &ids).ok());
    return {ids.begin(), ids.end()};
  }

  static std::string Piece(int id) {
    sentencepiece::SentencePieceProcessor sp;
    EXPECT_TRUE(sp.Load(*dir_ + "/sp.model").ok());
    return sp.IdToPiece(id);
  }

  static std::string* dir_;
  static int next_;
};
std::string* FolderTest::dir_ = nullptr;
int FolderTest::next_ = 0;

Ids Cat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_F(FolderTest, TokenizerModelIsPreferredToTokenizerJson) {
  const std::string folder = Folder("");
  EXPECT_EQ(FolderTokenizerFile(folder), folder + "/tokenizer.model");
  EXPECT_EQ(FolderTokenizerInputs(folder), std::vector<std::string>{folder + "/tokenizer.model"});
  fs::remove(folder + "/tokenizer.model");
  EXPECT_EQ(FolderTokenizerFile(folder), folder + "/tokenizer.json");
  Write(folder + "/tokenizer.json", R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
    "max_input_chars_per_word": 100,
    "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hi": 3}},
    "pre_tokenizer": {"type": "WhitespaceSplit"},
    "post_processor": {"type": "BertProcessing", "cls": ["[CLS]", 1], "sep": ["[SEP]", 2]}})");
  const auto t = Load(folder);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("hi hi"), (Ids{1, 3, 3, 2}));
  EXPECT_EQ(t->IdsBefore(), Ids{1});
  EXPECT_EQ(t->IdsAfter(), Ids{2});
}

// LlamaTokenizer's defaults: <s> in front, nothing after, one U+2581 in front of the text
// unless it starts with a space (where sentencepiece alone would put two).
TEST_F(FolderTest, DefaultsAreLlamaTokenizers) {
  const auto t = Load(Folder(""));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->IdsBefore(), Ids{1});
  EXPECT_EQ(t->IdsAfter(), Ids{});
  EXPECT_EQ(t->Encode(""), Ids{1});
  EXPECT_EQ(t->Encode("hello world"), Cat({1}, Pieces("hello world")));
  EXPECT_EQ(t->Encode(" hello world"), Cat({1}, Pieces("hello world")));
  EXPECT_EQ(t->Encode("  hello"), Cat({1}, Pieces(" hello")));
  EXPECT_EQ(t->TokenToId("<s>"), 1);
  const int32_t first = Pieces("hello").front();
  EXPECT_EQ(t->TokenToId(Piece(first)), first);
  EXPECT_EQ(t->TokenToId("no such piece"), -1);
  EXPECT_EQ(t->VocabSize(), 320u);
}

// The specials in the text give their ids; legacy false puts the prefix before the text's
// first stretch only, legacy true before each stretch.
TEST_F(FolderTest, LegacyDecidesThePrefixAfterSpecialTokens) {
  const auto first = Load(Folder(R"({"legacy": false})"));
  const auto always = Load(Folder(R"({"legacy": true, "tokenizer_class": "LlamaTokenizerFast"})"));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(always, nullptr);
  EXPECT_EQ(always->Encode("hello</s>hello"), Cat(Cat({1}, Pieces("hello")), Cat({2}, Pieces("hello"))));
  const Ids after = first->Encode("hello</s>hello");
  EXPECT_EQ(Ids(after.begin(), after.begin() + 1 + Pieces("hello").size() + 1), Cat(Cat({1}, Pieces("hello")), {2}));
  EXPECT_NE(after, always->Encode("hello</s>hello"));
  EXPECT_EQ(first->Encode("<s> hello"), Cat({1, 1}, Pieces("hello")));
  EXPECT_EQ(first->Encode("<unk>"), (Ids{1, 0}));
}

TEST_F(FolderTest, BosEosAndTruncation) {
  const auto t = Load(Folder(R"({"add_bos_token": false, "add_eos_token": true, "eos_token": {"content": "</s>"}})"));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->IdsBefore(), Ids{});
  EXPECT_EQ(t->IdsAfter(), Ids{2});
  const Ids all = t->Encode("the quick brown fox jumps over the lazy dog");
  ASSERT_GT(all.size(), 5u);
  const Ids cut = t->Encode("the quick brown fox jumps over the lazy dog", 5);
  EXPECT_EQ(cut, Cat(Ids(all.begin(), all.begin() + 4), {2}));
  EXPECT_EQ(t->Encode("x", 1), Ids{2});
}

// With a tokenizer.json beside it, 5.24 takes the ids around a text from its post-processor.
TEST_F(FolderTest, TokenizerJsonPostProcessorWins) {
  const std::string folder = Folder(R"({"add_bos_token": true})");
  Write(folder + "/tokenizer.json", R"({"post_processor": {"type": "TemplateProcessing",
    "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
    "special_tokens": {"</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}})");
  EXPECT_EQ(FolderTokenizerInputs(folder), (std::vector<std::string>{folder + "/tokenizer.model",
                                                                     folder + "/tokenizer_config.json",
                                                                     folder + "/tokenizer.json"}));
  const auto t = Load(folder);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("hello"), Cat(Pieces("hello"), {2}));
}

// A LlamaTokenizer's tokenizer.json without tokenizer.model (as 5.24 saves it): the
// prepend scheme comes from tokenizer_config.json's legacy, not from the file, and the
// BPE gets byte_fallback (LlamaTokenizer.__init__ rebuilds both).
TEST_F(FolderTest, LlamaTokenizerJsonIsRebuiltAs524Does) {
  const std::string json = R"({"added_tokens": [{"id": 1, "content": "<s>", "special": true}],
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": false},
    "model": {"type": "BPE", "vocab": {"<unk>": 0, "<s>": 1, "▁": 2, "a": 3, "▁a": 4, "<0x62>": 5},
              "merges": [["▁", "a"]]}})";
  const std::string plain = *dir_ + "/json-plain", llama = *dir_ + "/json-llama", legacy = *dir_ + "/json-legacy";
  for (const std::string& folder : {plain, llama, legacy}) {
    fs::create_directories(folder);
    Write(folder + "/tokenizer.json", json);
  }
  Write(llama + "/tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer"})");
  Write(legacy + "/tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizerFast", "legacy": true})");
  EXPECT_EQ(Load(plain)->Encode("<s>a"), (Ids{1, 4}));
  EXPECT_EQ(Load(legacy)->Encode("<s>a"), (Ids{1, 4}));
  EXPECT_EQ(Load(llama)->Encode("<s>a"), (Ids{1, 3}));
  EXPECT_EQ(Load(plain)->Encode("ab"), (Ids{4}));  // no byte_fallback in the file: b is dropped
  EXPECT_EQ(Load(llama)->Encode("ab"), (Ids{4, 5}));
  // And the decoder: Replace, ByteFallback, Fuse, Strip (the file has none: tokens joined).
  EXPECT_EQ(Load(llama)->Decode({1, 4, 5}), "ab");
  EXPECT_EQ(Load(llama)->Decode({1, 4, 5}, /*skip_special_tokens=*/false), "<s> ab");
  EXPECT_EQ(Load(plain)->Decode({1, 4, 5}), "▁a <0x62>");
}

// Decoding a sentencepiece folder as 5.24's LlamaTokenizer (its `tokenizers` decoder, not
// sentencepiece's): special tokens left out when asked, U+2581 as spaces, byte pieces as
// bytes (U+FFFD per piece when they are not UTF-8), one leading space stripped unless
// add_prefix_space is false, ids of no piece skipped. equality_test.py checks the texts
// against transformers; here the rules.
TEST_F(FolderTest, DecodeIsLlamaTokenizers) {
  const auto t = Load(Folder(""));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->CanDecode(), "");
  EXPECT_EQ(t->Decode(t->Encode("hello world")), "hello world");
  EXPECT_EQ(t->Decode(t->Encode("hello world"), /*skip_special_tokens=*/false), "<s> hello world");
  EXPECT_EQ(t->Decode(t->Encode(" hello")), "hello");  // the text's own space is the prefix's
  EXPECT_EQ(t->Decode(Cat(Pieces("hello"), {2, 0})), "hello");
  EXPECT_EQ(t->Decode(Cat(Pieces("hello"), {2, 0}), false), "hello</s><unk>");
  // The euro sign is not in the corpus: three byte pieces, E2 82 AC.
  const Ids euro = t->Encode("a \u20ac");
  ASSERT_GE(euro.size(), 4u);
  EXPECT_EQ(Piece(euro.back()), "<0xAC>");
  EXPECT_EQ(t->Decode(euro), "a \u20ac");
  EXPECT_EQ(t->Decode(Ids(euro.begin(), euro.end() - 1)), "a \xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(t->Decode({euro.back()}), "\xEF\xBF\xBD");
  EXPECT_EQ(t->Decode({-3, 320, 100000}), "");
  const auto no_prefix = Load(Folder(R"({"add_prefix_space": false})"));
  ASSERT_NE(no_prefix, nullptr);
  EXPECT_EQ(no_prefix->Decode(Pieces("hello")), " hello");
}

// Ill-formed UTF-8 reads as U+FFFD, as in the other tokenizers.
TEST_F(FolderTest, IllFormedUtf8IsReplacementCharacters) {
  const auto t = Load(Folder(""));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("a\xff\xfe b"), t->Encode("a\xEF\xBF\xBD\xEF\xBF\xBD b"));
}

TEST_F(FolderTest, ErrorsNameTheFileAndKey) {
  std::unique_ptr<TextTokenizer> t;
  const std::string empty = *dir_ + "/empty";
  fs::create_directories(empty);
  EXPECT_NE(LoadFolder(empty, &t).find(empty + "/tokenizer.json"), std::string::npos);
  const std::string bad = Folder("");
  Write(bad + "/tokenizer.model", "not a model");
  EXPECT_NE(LoadFolder(bad, &t).find(bad + "/tokenizer.model"), std::string::npos);
  EXPECT_NE(LoadFolder(Folder(R"({"tokenizer_class": "T5Tokenizer"})"), &t).find("tokenizer_class"), std::string::npos);
  EXPECT_NE(LoadFolder(Folder(R"({"add_bos_token": "yes"})"), &t).find("add_bos_token"), std::string::npos);
  EXPECT_NE(LoadFolder(Folder(R"({"bos_token": "<nope>"})"), &t).find("bos_token"), std::string::npos);
  EXPECT_NE(LoadFolder(Folder("[1]"), &t).find("tokenizer_config.json"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::tokenizer
