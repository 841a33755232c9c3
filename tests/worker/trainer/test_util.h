// Tiny synthetic data and configs for the trainer tests.
#ifndef NIGHTSHIFT_TESTS_WORKER_TRAINER_TEST_UTIL_H_
#define NIGHTSHIFT_TESTS_WORKER_TRAINER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

#include "common/format/checkpoint_layout.h"
#include "common/format/shard.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/config.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/progress_sink.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer::testing {

constexpr int kVocab = 32, kPad = 0, kBos = 2, kEos = 3, kSignal = 5;

// A fresh, empty directory under the test temp dir. Its name carries the first process's
// id, passed on through the environment so that a "threadsafe" death-test child (which
// re-runs the test body in a new process) uses the same directory as its parent.
inline std::string FreshDir(const std::string& name) {
  if (std::getenv("NIGHTSHIFT_TRAINER_TEST_RUN") == nullptr)
    setenv("NIGHTSHIFT_TRAINER_TEST_RUN", std::to_string(::getpid()).c_str(), 1);
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : ::testing::TempDir()) /
                              ("nightshift_trainer_" + name + "_" + std::getenv("NIGHTSHIFT_TRAINER_TEST_RUN"));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Classifier samples: bos, then `min_len - 1 .. max_len - 1` tokens in [6, kVocab); class 1
// samples contain kSignal somewhere. Deterministic in `seed`. classes: the shard's class
// count (labels stay 0 and 1).
inline void WriteSyntheticShard(const std::string& path, int n, uint64_t seed, int min_len = 4,
                                int max_len = 12, int classes = 2) {
  std::mt19937_64 rng(seed);
  format::ShardWriter writer(kVocab, static_cast<uint32_t>(classes));
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng() % 2);
    const int len = min_len + static_cast<int>(rng() % (max_len - min_len + 1));
    std::vector<int32_t> tokens{kBos};
    for (int k = 1; k < len; ++k) tokens.push_back(6 + static_cast<int32_t>(rng() % (kVocab - 6)));
    if (label == 1) tokens[1 + rng() % (len - 1)] = kSignal;
    writer.Add(seed * 100000 + i, label, tokens);
  }
  ASSERT_EQ(writer.WriteFile(path), "");
}

// Language-model samples (a shard without classes) of ids in [6, vocab): bos, then 3 to
// max_len - 1 tokens. with_prompts: about half have a prompt (label = its length in
// tokens, 1 to half the sample), the rest -1 (plain text). Deterministic in `seed`.
inline void WriteSyntheticLmShard(const std::string& path, int n, uint64_t seed, int vocab, int max_len,
                                  bool with_prompts) {
  std::mt19937_64 rng(seed);
  format::ShardWriter writer(static_cast<uint32_t>(vocab), 0);
  for (int i = 0; i < n; ++i) {
    const int len = 4 + static_cast<int>(rng() % static_cast<uint64_t>(max_len - 3));
    std::vector<int32_t> tokens{kBos};
    for (int k = 1; k < len; ++k) tokens.push_back(6 + static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab - 6)));
    const int prompt = with_prompts && rng() % 2 == 0 ? 1 + static_cast<int>(rng() % static_cast<uint64_t>(len / 2)) : -1;
    writer.Add(seed * 100000 + i, prompt, tokens);
  }
  ASSERT_EQ(writer.WriteFile(path), "");
}

// A small classifier run over fresh shards in `dir`: n_train samples, batch 8, 2 epochs.
inline TrainConfig TinyConfig(const std::string& dir, int n_train = 40, int n_val = 16) {
  TrainConfig c;
  c.job_id = "j-test";
  c.model.layers = 1;
  c.model.d_model = 16;
  c.model.heads = 2;
  c.model.ffn = 32;
  c.model.dropout = 0.1;
  c.model.max_len = 16;
  c.train.epochs = 2;
  c.train.lr = 3e-3;
  c.train.warmup_steps = 2;
  c.train.batch_size = 8;
  c.train.threads = 1;
  c.checkpoint.every_steps = 3;
  c.checkpoint.keep_last = 10;
  c.data.train_shard = dir + "/train.shard";
  c.data.val_shard = dir + "/val.shard";
  c.data.vocab_size = kVocab;
  c.data.num_classes = 2;
  c.data.pad_id = kPad;
  c.data.bos_id = kBos;
  c.data.eos_id = kEos;
  c.checkpoint_dir = dir + "/checkpoints";
  WriteSyntheticShard(c.data.train_shard, n_train, 1);
  WriteSyntheticShard(c.data.val_shard, n_val, 2);
  return c;
}

// The parameters of the newest complete checkpoint in `checkpoint_dir`, loaded into `model`
// (built as the run built it).
inline std::vector<torch::Tensor> LatestCheckpointParameters(torch::nn::Module& model, const std::string& checkpoint_dir) {
  std::vector<torch::Tensor> trainable;  // as the run builds its optimizer
  for (const auto& p : model.parameters())
    if (p.requires_grad()) trainable.push_back(p);
  torch::optim::AdamW optimizer(trainable, torch::optim::AdamWOptions(1e-3));
  RunPosition position;
  EXPECT_TRUE(CheckpointManager(CheckpointOptions{checkpoint_dir, 0, 0, 10}).LoadLatest(model, optimizer, &position));
  std::vector<torch::Tensor> params;
  for (const auto& p : model.parameters()) params.push_back(p.detach().clone());
  return params;
}

// Records, and truncates <folder>/step-N/model.pt the first time the checkpoint of a step
// in `damaged` is reported: a disk's damage after the save ("" folder: none).
struct DamagingProgressSink : MemoryProgressSink {
  std::string folder;
  std::set<int64_t> damaged;
  void Emit(const format::ProgressRecord& r) override {
    MemoryProgressSink::Emit(r);
    const int64_t step = r.event == "checkpoint" ? static_cast<int64_t>(r.Number("step")) : -1;
    if (folder.empty() || damaged.erase(step) == 0) return;
    std::filesystem::resize_file(folder + "/" + format::StepDirName(step) + "/model.pt", 10);
  }
};

// Trains `c` with NIGHTSHIFT_FAULT_ABORT_AT_STEP's effect: never returns (abort(), no core
// file). For EXPECT_DEATH.
inline void RunUntilAbort(const TrainConfig& c, int64_t abort_at_step) {
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  RankInfo rank;
  rank.faults.abort_at_step = abort_at_step;
  MemoryProgressSink progress;
  RunTraining(c, rank, progress);
}

}  // namespace nightshift::trainer::testing

#endif  // NIGHTSHIFT_TESTS_WORKER_TRAINER_TEST_UTIL_H_
