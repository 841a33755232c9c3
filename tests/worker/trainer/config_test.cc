#include "worker/trainer/config.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace nightshift::trainer {
namespace {

const char* kConfig = R"({
  "job_id": "j-000001", "attempt": 2,
  "spec": {
    "name": "spam",
    "model": {"arch": "transformer_classifier", "layers": 3, "d_model": 64, "heads": 4,
              "dropout": 0.2, "max_len": 256},
    "train": {"epochs": 2, "lr": 0.0005, "seed": "99", "max_steps": "1000",
              "batching": {"max_tokens": "4096", "prefetch": 4}, "gradClip": 0.5},
    "data": {"path": "/corpus", "max_samples": "0"},
    "checkpoint": {"every_steps": 50, "keep_last": 2}
  },
  "data": {"train_shard": "/d/train.shard", "val_shard": "/d/val.shard", "vocab_size": 8000,
           "num_classes": 2, "pad_id": 0, "bos_id": 2, "eos_id": 3, "class_names": ["ham", "spam"]},
  "checkpoint_dir": "/d/ckpt",
  "data_roots": ["/data", "/models"]
})";

TEST(ConfigTest, ParsesTheWorkerJson) {
  TrainConfig c;
  ASSERT_EQ(ParseTrainConfig(kConfig, &c), "");
  EXPECT_EQ(c.job_id, "j-000001");
  EXPECT_EQ(c.attempt, 2);
  EXPECT_EQ(c.model.layers, 3);
  EXPECT_EQ(c.model.ffn, 256);  // 4 x d_model when absent
  EXPECT_EQ(c.train.seed, 99u);
  EXPECT_EQ(c.train.max_steps, 1000);
  EXPECT_EQ(c.train.max_tokens, 4096);
  EXPECT_EQ(c.train.prefetch, 4);
  EXPECT_EQ(c.train.grad_clip, 0.5);  // lowerCamelCase accepted
  EXPECT_EQ(c.train.warmup_steps, 100);  // default
  EXPECT_EQ(c.checkpoint.every_steps, 50);
  EXPECT_EQ(c.checkpoint.keep_last, 2);
  EXPECT_EQ(c.data.class_names, (std::vector<std::string>{"ham", "spam"}));
  EXPECT_EQ(c.checkpoint_dir, "/d/ckpt");
  EXPECT_TRUE(c.checkpoint_dir_shared);  // absent: rank 0 alone writes, as before the field
  EXPECT_EQ(c.model.data_roots, (std::vector<std::string>{"/data", "/models"}));
}

std::string ErrorFor(const std::string& from, const std::string& to) {
  std::string text = kConfig;
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  TrainConfig c;
  return ParseTrainConfig(text, &c);
}

TEST(ConfigTest, ErrorsNameTheField) {
  EXPECT_EQ(ErrorFor(R"(["/data", "/models"])", R"("/data")"),
            "config: config.data_roots: must be a list of strings, got \"/data\"");
  EXPECT_EQ(ErrorFor(R"("heads": 4)", R"("heads": 5)"),
            "config: spec.model.heads: must be positive and divide model.d_model (64)");
  EXPECT_EQ(ErrorFor(R"("seed": "99")", R"("seed": "x9")"),
            "config: spec.train.seed: must be a non-negative integer, got \"x9\"");
  EXPECT_EQ(ErrorFor(R"("max_tokens": "4096")", R"("max_tokens": "lots")"),
            "config: spec.train.batching.max_tokens: 'lots' is not a positive integer or auto");
  EXPECT_EQ(ErrorFor(R"("dropout": 0.2)", R"("dropout": 1.5)"), "config: spec.model.dropout: must be in [0, 1), got 1.5");
  EXPECT_EQ(ErrorFor(R"("layers": 3)", R"("layrs": 3)"), "config: spec.model.layrs: unknown field");
  EXPECT_NE(ErrorFor(R"("vocab_size": 8000)", R"("vocab_size": "big")").find("data.vocab_size"), std::string::npos);
  EXPECT_NE(ErrorFor(R"("checkpoint_dir": "/d/ckpt")", R"("x": 1)").find("checkpoint_dir"), std::string::npos);
  EXPECT_NE(ErrorFor(R"("checkpoint_dir": "/d/ckpt")", R"("checkpoint_dir": "/d/ckpt", "checkpoint_dir_shared": 1)")
                .find("config.checkpoint_dir_shared: must be true or false"), std::string::npos);
  EXPECT_NE(ErrorFor("{", "[").find("not valid JSON"), std::string::npos);
}

// The spec's rules are the coordinator's own (common/spec_rules/spec_rules.h;
// tests/common/spec_contract_test.cc holds the two paths to one verdict).
TEST(ConfigTest, TheSpecsRulesApply) {
  EXPECT_EQ(ErrorFor(R"("prefetch": 4)", R"("prefetch": 65)"),
            "config: spec.train.batching.prefetch: must be in [1, 64], got 65");
  EXPECT_EQ(ErrorFor(R"("arch": "transformer_classifier", )", ""),
            "config: spec.model.arch: missing (one of transformer_classifier, gpt_lm, torchscript or pretrained)");
  EXPECT_EQ(ErrorFor(R"("prefetch": 4)", R"("prefetch": 64)"), "");
  TrainConfig c;  // 0 means the default where the table gives one
  std::string text = kConfig;
  text.replace(text.find(R"("prefetch": 4)"), 13, R"("prefetch": 0)");
  ASSERT_EQ(ParseTrainConfig(text, &c), "");
  EXPECT_EQ(c.train.prefetch, spec_rules::limits::kPrefetch.fallback);
}

TEST(ConfigTest, MaxTokensAutoAndEmpty) {
  TrainConfig c;
  std::string text = kConfig;
  text.replace(text.find("\"4096\""), 6, "\"auto\"");
  ASSERT_EQ(ParseTrainConfig(text, &c), "");
  EXPECT_TRUE(c.train.max_tokens_auto);
  EXPECT_EQ(c.train.max_tokens, 0);
}

TEST(RankInfoTest, ReadsTorchrunEnvironment) {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  RankInfo r;
  ASSERT_EQ(ReadRankInfo(&r), "");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.master_addr, "10.0.0.1");
  EXPECT_EQ(r.master_port, 29500);
  setenv("RANK", "4", 1);
  EXPECT_NE(ReadRankInfo(&r).find("RANK"), std::string::npos);
  setenv("WORLD_SIZE", "two", 1);
  EXPECT_NE(ReadRankInfo(&r).find("WORLD_SIZE"), std::string::npos);
  for (const char* v : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) unsetenv(v);
}

}  // namespace
}  // namespace nightshift::trainer
