#include "common/spec.h"

#include <gtest/gtest.h>

namespace nightshift {
namespace {

const char* kGood = R"(name: spam-classifier
model: {arch: transformer_classifier, layers: 2, d_model: 128, heads: 4, ffn: 512, dropout: 0.1, max_len: 512}
data:
  format: text_dir
  path: data/spamassassin
  validation_fraction: 0.2
  tokenizer: {type: sentencepiece, vocab_size: 8000}
train: {epochs: 2, optimizer: adamw, lr: 0.001, weight_decay: 0.01, warmup_steps: 100, seed: 1234,
        batching: {batch_size: 32}, precision: fp32}
resources: {world_size: 1}
checkpoint: {every_steps: 200, keep_last: 3}
restart: {max_restarts: 3}
)";

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(SpecTest, LoadsTheIssueExample) {
  auto spec = LoadJobSpec(kGood);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model().arch(), "transformer_classifier");
  EXPECT_EQ(spec->model().ffn(), 512);
  EXPECT_DOUBLE_EQ(spec->model().dropout(), 0.1);
  EXPECT_EQ(spec->data().tokenizer().vocab_size(), 8000);
  EXPECT_EQ(spec->train().seed(), 1234u);
  EXPECT_EQ(spec->train().batching().batch_size(), 32);
  EXPECT_EQ(spec->resources().world_size(), 1);
  EXPECT_EQ(spec->restart().max_restarts(), 3);
  // Defaults are filled.
  EXPECT_EQ(spec->train().batching().prefetch(), 2);
  EXPECT_EQ(spec->train().activation_checkpointing(), "none");
}

TEST(SpecTest, JsonIsAccepted) {
  auto spec = LoadJobSpec(R"({"model": {"arch": "transformer_classifier"}, "data": {"path": "/d"},
                              "train": {"batching": {"max_tokens": 16384}}})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(MaxTokensOf(spec->train().batching()), 16384);
  EXPECT_EQ(spec->resources().world_size(), 1);  // absent: one rank
  EXPECT_EQ(spec->model().ffn(), 512);            // 4 x d_model
}

void ExpectInvalid(const std::string& text, const std::string& needle) {
  auto spec = LoadJobSpec(text);
  ASSERT_FALSE(spec.ok()) << "accepted: " << text;
  EXPECT_EQ(spec.status().code(), Status::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(needle), std::string::npos) << spec.status().message();
}

TEST(SpecTest, MissingDataPathNamesTheField) {
  ExpectInvalid(Replace(kGood, "  path: data/spamassassin\n", ""), "data.path");
}

TEST(SpecTest, WorldSizeZeroIsRefusedWithItsLine) {
  ExpectInvalid(Replace(kGood, "world_size: 1", "world_size: 0"), "resources.world_size (line 10)");
}

TEST(SpecTest, DataParallelDefaultsAndLimits) {
  auto spec = LoadJobSpec(kGood);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->resources().timeout_seconds(), 300);
  EXPECT_EQ(spec->resources().bucket_mb(), 25);
  ExpectInvalid(Replace(kGood, "world_size: 1", "world_size: 2, timeout_seconds: -5"),
                "resources.timeout_seconds (line 10)");
  ExpectInvalid(Replace(kGood, "world_size: 1", "world_size: 2, bucket_mb: 2048"), "resources.bucket_mb");
}

TEST(SpecTest, UnknownArchIsRefused) {
  ExpectInvalid(Replace(kGood, "arch: transformer_classifier", "arch: resnet"), "model.arch (line 2)");
}

TEST(SpecTest, YamlThatDoesNotParseNamesTheLine) {
  ExpectInvalid("name: x\nmodel: {arch: transformer_classifier\ndata: [", "line ");
  ExpectInvalid("name: x\nmodel: {arch: transformer_classifier\ndata: [", "does not parse");
}

TEST(SpecTest, UnknownFieldAndWrongTypeAreRefused) {
  ExpectInvalid(Replace(kGood, "dropout: 0.1", "dropuot: 0.1"), "model.dropuot (line 2): unknown field");
  ExpectInvalid(Replace(kGood, "layers: 2", "layers: two"), "model.layers");
  ExpectInvalid(Replace(kGood, "heads: 4", "heads: 3"), "model.heads");
  ExpectInvalid(Replace(kGood, "batch_size: 32", "max_tokens: lots"), "train.batching.max_tokens");
  ExpectInvalid(Replace(kGood, "precision: fp32", "precision: fp8"), "train.precision");
  ExpectInvalid("", "empty");
  ExpectInvalid("- a\n- b\n", "mapping");
}

}  // namespace
}  // namespace nightshift
