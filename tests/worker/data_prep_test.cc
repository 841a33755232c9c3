#include "worker/data_prep.h"

#include <gtest/gtest.h>
#include <unistd.h>

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

}  // namespace
}  // namespace nightshift
