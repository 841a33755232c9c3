#include "worker/data_prep.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/format/shard.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

// Two classes of short texts with distinct vocabularies.
void MakeTextDir(const std::string& root, int per_class) {
  const char* words[2][6] = {{"meeting", "project", "lunch", "report", "agenda", "thanks"},
                             {"winner", "prize", "free", "money", "click", "offer"}};
  const char* labels[2] = {"ham", "spam"};
  for (int c = 0; c < 2; ++c) {
    fs::create_directories(root + "/" + labels[c]);
    for (int i = 0; i < per_class; ++i) {
      std::ofstream f(root + "/" + labels[c] + "/" + std::to_string(i) + ".txt");
      for (int k = 0; k < 5 + i % 7; ++k) f << words[c][(i + k) % 6] << (k % 3 ? " " : "\n");
      f << "\xff latin1 byte";
    }
  }
}

TEST(DataPrepTest, BuildsTokenizerAndShards) {
  const std::string dir = testing::TempDir() + "/prep." + std::to_string(::getpid());
  fs::remove_all(dir);
  MakeTextDir(dir + "/data", 60);
  PrepOptions options;
  options.path = dir + "/data";
  options.max_len = 16;
  options.vocab_size = 40;
  auto first = PrepareData(options, dir + "/out", 2);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->class_names, (std::vector<std::string>{"ham", "spam"}));
  EXPECT_EQ(first->train_samples + first->val_samples, 120u);
  EXPECT_GT(first->val_samples, 10u);

  format::ShardReader train;
  ASSERT_EQ(train.Open(dir + "/out/train.shard", true), "");
  EXPECT_EQ(train.num_samples(), first->train_samples);
  for (uint64_t i = 0; i < train.num_samples(); ++i) {
    ASSERT_GE(train.length(i), 2u);
    ASSERT_LE(train.length(i), 16u);
    EXPECT_EQ(train.tokens(i)[0], kBosId);
    for (uint64_t k = 0; k < train.length(i); ++k) ASSERT_LT(train.tokens(i)[k], first->vocab_size);
  }

  format::ShardReader val;
  ASSERT_EQ(val.Open(dir + "/out/val.shard", true), "");
  EXPECT_EQ(val.num_samples(), first->val_samples);
  int64_t histogram_total = 0;
  for (int64_t n : first->length_histogram) histogram_total += n;
  EXPECT_EQ(histogram_total, 120);
  EXPECT_TRUE(fs::exists(dir + "/out/tokenizer.model"));
  EXPECT_TRUE(fs::exists(dir + "/out/meta.json"));
  fs::remove_all(dir);
}

TEST(DataPrepTest, MissingPathIsNotFoundNamingThePath) {
  PrepOptions options;
  options.path = "/no/such/dir";
  auto r = PrepareData(options, testing::TempDir() + "/prep-missing", 1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::kNotFound);
  EXPECT_NE(r.status().message().find("/no/such/dir"), std::string::npos);
}

// Limits on what preparation reads (a user's data is not trusted to be small): each is
// an INVALID_ARGUMENT (a user error) naming the file and the line, found before the data
// is read whole.
class DataPrepLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/prep-limits." + std::to_string(::getpid()) + "." +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.path = dir_ + "/data.jsonl";
    options_.format = "jsonl";
    options_.label_field = "label";
    options_.max_len = 16;
    options_.vocab_size = 40;
  }
  void TearDown() override { fs::remove_all(dir_); }
  Status Prepare() {
    auto r = PrepareData(options_, dir_ + "/out", 2);
    return r.ok() ? Status::OK() : r.status();
  }
  std::string dir_;
  PrepOptions options_;
};

TEST_F(DataPrepLimitsTest, AJsonlLineOfOneGibIsRefusedAfterTheLimitNamingItsLine) {
  {
    std::ofstream f(options_.path, std::ios::binary);
    f << R"({"text": "a short one", "label": "ham"})" << "\n";
  }
  // Line 2: 1 GiB of zero bytes and no newline, as a sparse file (nothing written to disk).
  const auto size = fs::file_size(options_.path);
  fs::resize_file(options_.path, size + (uint64_t{1} << 30));
  const auto start = std::chrono::steady_clock::now();
  const Status s = Prepare();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.code(), Status::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message(), options_.path + " line 2 is longer than 16777216 bytes, the longest line this worker reads");
  EXPECT_LT(seconds, 5) << "read on past the limit";
}

TEST_F(DataPrepLimitsTest, ALineAtTheLimitIsReadAndOneByteMoreIsNot) {
  const std::string line = R"({"text": "a", "label": "ham"})";  // 29 bytes
  {
    std::ofstream f(options_.path, std::ios::binary);
    for (int i = 0; i < 40; ++i) f << (i % 2 ? R"({"text": "b", "label": "eggs"})" : line) << "\n";
  }
  options_.max_line_bytes = 30;
  EXPECT_TRUE(Prepare().ok()) << Prepare().ToString();
  options_.max_line_bytes = 29;
  EXPECT_EQ(Prepare().message(), options_.path + " line 2 is longer than 29 bytes, the longest line this worker reads");
}

TEST_F(DataPrepLimitsTest, OneHundredThousandLabelsAreRefusedAtTheLineThatPassesTheLimit) {
  {
    std::ofstream f(options_.path, std::ios::binary);
    for (int i = 0; i < 100000; ++i) f << R"({"text": "t", "label": "l)" << i << "\"}\n";
  }
  const Status s = Prepare();
  EXPECT_EQ(s.code(), Status::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message(), options_.path +
                             " line 10001: label 'l10000' is one more than the 10000 distinct labels a classifier "
                             "may have (data.label_field)");
}

// A label nested 200,000 deep overflowed the stack where it was dumped to a string.
TEST_F(DataPrepLimitsTest, ALineNestedBeyondSerdeJsonsDepthIsRefusedNamingItsLine) {
  {
    std::ofstream f(options_.path, std::ios::binary);
    f << R"({"text": "a", "label": "ham"})" << "\n";
    f << R"({"text": "b", "label": )" << std::string(200000, '[') << std::string(200000, ']') << "}\n";
  }
  const Status s = Prepare();
  EXPECT_EQ(s.code(), Status::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message(), options_.path + " line 2: nests deeper than 128 levels");
}

// model.pretrained's config.json is read for the padding id: a model_type that is not a
// string threw out of PrepareData (json::value), and a pad_token_id past an int32 was cut
// to one.
TEST_F(DataPrepLimitsTest, APretrainedConfigOfTheWrongShapeIsAnErrorNotAnException) {
  {
    std::ofstream f(options_.path, std::ios::binary);
    for (int i = 0; i < 20; ++i) f << R"({"text": "a b", "label": ")" << (i % 2 ? "x" : "y") << "\"}\n";
  }
  const std::string folder = dir_ + "/bert";
  fs::create_directories(folder);
  std::ofstream(folder + "/tokenizer.json") << R"({"model": {"type": "WordPiece", "unk_token": "[UNK]",
      "continuing_subword_prefix": "##", "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "a": 1, "b": 2}}})";
  options_.pretrained = folder;
  std::ofstream(folder + "/config.json") << R"({"model_type": ["roberta"], "pad_token_id": 2})";
  Status s;
  ASSERT_NO_THROW(s = Prepare());
  EXPECT_TRUE(s.ok()) << s.ToString();
  std::ofstream(folder + "/config.json") << R"({"model_type": "bert", "pad_token_id": 4294967296})";
  ASSERT_NO_THROW(s = Prepare());
  EXPECT_EQ(s.message(), "model.pretrained: " + folder + "/config.json: pad_token_id 4294967296 is not a token id");
}

TEST_F(DataPrepLimitsTest, TextDirFoldersBeyondTheLabelLimitAreRefusedNamingTheFolder) {
  const std::string data = dir_ + "/folders";
  for (uint32_t i = 0; i <= format::kMaxClasses; ++i) {
    const std::string label = data + "/" + std::to_string(100000 + i);
    fs::create_directories(label);
    std::ofstream(label + "/a.txt") << "x";
  }
  options_.path = data;
  options_.format = "text_dir";
  const Status s = Prepare();
  EXPECT_EQ(s.code(), Status::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message(), data + "/110000: one more label (sub-folder) than the 10000 a classifier may have");
}

TEST_F(DataPrepLimitsTest, TheBytesReadInAllAreBoundedByTheWorkersLimit) {
  {
    std::ofstream f(options_.path, std::ios::binary);
    for (int i = 0; i < 100; ++i) f << R"({"text": "some text", "label": ")" << (i % 2 ? "a" : "b") << "\"}\n";
  }
  // 36 bytes a line, its newline included: line 28 passes 1000 bytes.
  options_.max_input_bytes = 1000;
  Status s = Prepare();
  EXPECT_EQ(s.code(), Status::kInvalidArgument) << s.ToString();
  EXPECT_EQ(s.message(), options_.path + " line 28: data.path " + options_.path +
                             " holds more than the 1000 bytes this worker reads for one job (its --max-prep-bytes)");
  options_.max_input_bytes = 3700;
  EXPECT_TRUE(Prepare().ok()) << Prepare().ToString();

  // text_dir: every file's bytes count.
  MakeTextDir(dir_ + "/text", 30);
  options_.path = dir_ + "/text";
  options_.format = "text_dir";
  options_.max_input_bytes = 500;
  s = Prepare();
  EXPECT_EQ(s.code(), Status::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("holds more than the 500 bytes this worker reads for one job"), std::string::npos)
      << s.message();
  EXPECT_EQ(s.message().rfind(dir_ + "/text/", 0), 0u) << "names the file: " << s.message();
}

}  // namespace
}  // namespace nightshift
