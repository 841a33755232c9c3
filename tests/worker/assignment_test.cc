#include "worker/assignment.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace nightshift {
namespace {

// Every field of PrepOptions comes from the spec: set each to a value that is not the
// default and every flag of nightshift-prepare's argv changes (a field added to the
// table but not mapped here would keep its default).
TEST(PrepOptionsForTest, EveryFieldComesFromTheSpec) {
  v1::JobSpec spec;
  v1::DataSpec* d = spec.mutable_data();
  d->set_path("/data/mail");
  d->set_format("jsonl");
  d->set_text_field("body");
  d->set_label_field("category");
  d->set_max_samples(99);
  d->set_validation_fraction(0.3);
  d->mutable_tokenizer()->set_vocab_size(500);
  d->set_completion_field("answer");
  spec.mutable_train()->set_seed(7);
  spec.mutable_model()->set_max_len(64);
  spec.mutable_model()->set_arch("gpt_lm");
  spec.mutable_model()->set_init_from("/data/exported");
  spec.mutable_model()->set_pretrained("/data/bert");  // not with init_from in a real spec
  const PrepOptions o = PrepOptionsFor(spec, {"/srv/data"});
  EXPECT_EQ(o.path, "/data/mail");
  EXPECT_EQ(o.format, "jsonl");
  EXPECT_EQ(o.text_field, "body");
  EXPECT_EQ(o.label_field, "category");
  EXPECT_EQ(o.completion_field, "answer");
  EXPECT_EQ(o.max_samples, 99);
  EXPECT_EQ(o.validation_fraction, 0.3);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.vocab_size, 500);
  EXPECT_EQ(o.max_len, 64);
  EXPECT_FALSE(o.classifier);
  EXPECT_EQ(o.tokenizer_model, "/data/exported/tokenizer.model");
  EXPECT_EQ(o.pretrained, "/data/bert");
  EXPECT_EQ(o.roots, std::vector<std::string>{"/srv/data"});

  const std::vector<std::string> mapped = PrepareArgs({o, "out", 2});
  const std::vector<std::string> defaults = PrepareArgs({PrepOptions{}, "out", 2});
  ASSERT_EQ(mapped.size(), defaults.size() + 2);  // + --data-root /srv/data
  for (size_t i = 0; i + 1 < defaults.size(); i += 2) {
    ASSERT_EQ(mapped[i], defaults[i]);
    if (mapped[i] == "--output-dir" || mapped[i] == "--threads") continue;
    if (mapped[i] == "--tokenizer-sha1") continue;  // from the folder's checksums.json (task.cc)
    if (mapped[i] == "--max-line-bytes" || mapped[i] == "--max-input-bytes") continue;  // the worker's limits
    EXPECT_NE(mapped[i + 1], defaults[i + 1]) << mapped[i] << " is not mapped from the spec";
  }
}

TEST(PrepOptionsForTest, ClassifierUnlessALanguageModel) {
  v1::JobSpec spec;
  for (const char* arch : {"", "transformer_classifier", "torchscript"}) {
    spec.mutable_model()->set_arch(arch);
    EXPECT_TRUE(PrepOptionsFor(spec, {}).classifier) << arch;
  }
}

v1::Assignment TwoOfFourRanks() {
  v1::Assignment a;
  a.mutable_task()->set_job_id("job-7");
  a.mutable_task()->set_attempt(3);
  a.set_first_rank(2);
  a.set_num_ranks(2);
  a.set_world_size(4);
  a.mutable_spec()->mutable_model()->set_arch("gpt_lm");
  return a;
}

TEST(RankEnvironmentTest, TorchrunVariablesAndOneGpuPerRank) {
  const v1::Assignment a = TwoOfFourRanks();
  const auto env = RankEnvironment(a, /*local_rank=*/1, "10.0.0.5:29500", /*gpus=*/{6, 4});
  EXPECT_EQ(env, (std::map<std::string, std::string>{{"RANK", "3"},
                                                     {"LOCAL_RANK", "1"},
                                                     {"WORLD_SIZE", "4"},
                                                     {"LOCAL_WORLD_SIZE", "2"},
                                                     {"MASTER_ADDR", "10.0.0.5"},
                                                     {"MASTER_PORT", "29500"},
                                                     {"NIGHTSHIFT_JOB_ID", "job-7"},
                                                     {"CUDA_VISIBLE_DEVICES", "4"},
                                                     {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"}}));
  const auto cpu = RankEnvironment(a, 0, "10.0.0.5:29500", {});
  EXPECT_EQ(cpu.at("RANK"), "2");
  EXPECT_EQ(cpu.count("CUDA_VISIBLE_DEVICES"), 0u);
  EXPECT_EQ(cpu.count("CUDA_DEVICE_ORDER"), 0u);
}

TEST(TrainerConfigTest, SpecWithProtoNamesAndDefaultsPlusWhatTheWorkerResolved) {
  const nlohmann::json data = {{"vocab_size", 100}, {"train_shard", "/cache/k/train.shard"}};
  const nlohmann::json config = TrainerConfig(TwoOfFourRanks(), data, "/ckpt/job-7", false, {"/data"});
  EXPECT_EQ(config["job_id"], "job-7");
  EXPECT_EQ(config["attempt"], 3);
  EXPECT_EQ(config["data"], data);
  EXPECT_EQ(config["checkpoint_dir"], "/ckpt/job-7");
  EXPECT_EQ(config["checkpoint_dir_shared"], false);
  EXPECT_EQ(config["data_roots"], nlohmann::json::array({"/data"}));
  EXPECT_EQ(config["spec"]["model"]["arch"], "gpt_lm");
  EXPECT_EQ(config["spec"]["model"]["max_len"], 0);  // written out although 0: the trainer applies its default
}

// What the trainer reaches of the worker's folders is what its config names: the
// attempt's folder, the cache entry and the spec's model folders read-only, its
// checkpoint folder writable.
TEST(TrainerViewTest, TheConfigsFoldersAndTheCheckpointFolder) {
  const nlohmann::json config = {
      {"checkpoint_dir", "/w/checkpoints/j-000001"},
      {"data", {{"train_shard", "/w/cache/k1/train.bin"}, {"val_shard", "/w/cache/k1/val.bin"}}},
      {"spec", {{"model", {{"pretrained", "/data/bert"}, {"init_from", ""}, {"path", ""}}}}}};
  const JobView view = TrainerView(config, "/w/jobs/j-000001/attempt-0/trainer-config.json");
  const auto has = [](const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  EXPECT_TRUE(has(view.read_only, "/w/jobs/j-000001/attempt-0"));
  EXPECT_TRUE(has(view.read_only, "/w/cache/k1"));
  EXPECT_TRUE(has(view.read_only, "/data/bert"));
  EXPECT_FALSE(has(view.read_only, "/w/checkpoints/j-000001"));
  EXPECT_EQ(view.writable, std::vector<std::string>{"/w/checkpoints/j-000001"});
  EXPECT_EQ(view.mounts, "/w/jobs/j-000001/attempt-0/.view");
}

}  // namespace
}  // namespace nightshift
