// Checkpoints and exact resume: a run killed after a checkpoint (abort() in a child
// process, or SIGTERM) and resumed ends bit-identical to an uninterrupted run.
#include "worker/trainer/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>

#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/model.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;
using testing::FreshDir;
using testing::TinyConfig;

// The parameters of the newest complete checkpoint in config.checkpoint_dir.
std::vector<torch::Tensor> FinalParameters(const TrainConfig& c) {
  TransformerClassifier model = BuildModel(c.model, c.data.vocab_size, c.data.num_classes, c.data.pad_id);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager manager(CheckpointOptions{c.checkpoint_dir, 0, 0, 3});
  TrainPosition pos;
  EXPECT_TRUE(manager.LoadLatest(*model, optimizer, &pos));
  std::vector<torch::Tensor> params;
  for (const auto& p : model->parameters()) params.push_back(p.detach().clone());
  return params;
}

void ExpectBitIdentical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

format::ProgressRecord Find(const MemoryProgressSink& progress, const std::string& event) {
  for (const auto& r : progress.records)
    if (r.event == event) return r;
  ADD_FAILURE() << "no " << event << " event";
  return {};
}

// Runs with NIGHTSHIFT_FAULT_ABORT_AT_STEP's effect; never returns (abort()).
void RunUntilAbort(const TrainConfig& c, int64_t abort_at_step) {
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  RankInfo rank;
  rank.fault_abort_at_step = abort_at_step;
  MemoryProgressSink progress;
  RunTraining(c, rank, progress);
}

std::vector<torch::Tensor> UninterruptedRun(const std::string& name) {
  TrainConfig c = TinyConfig(FreshDir(name));
  MemoryProgressSink progress;
  EXPECT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  EXPECT_EQ(progress.records.back().event, "done");
  EXPECT_EQ(progress.records.back().Number("step"), 10);  // 40 samples / 8 x 2 epochs
  return FinalParameters(c);
}

TEST(CheckpointResumeTest, AbortAfterCheckpointThenResumeIsBitExact) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = FreshDir("abort");
  TrainConfig c = TinyConfig(dir);
  // Steps 1-4 run, a checkpoint is written at step 3, the process dies before step 5.
  EXPECT_DEATH(RunUntilAbort(c, 5), "fault injection: aborting at step 5");
  ASSERT_TRUE(fs::exists(c.checkpoint_dir + "/step-00000003/COMPLETE"));
  ASSERT_FALSE(fs::exists(c.checkpoint_dir + "/step-00000006"));
  // A newer checkpoint without its marker (a save that crashed) must be ignored.
  fs::create_directories(c.checkpoint_dir + "/step-00000009");
  std::ofstream(c.checkpoint_dir + "/step-00000009/model.pt") << "half-written";

  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  EXPECT_EQ(Find(progress, "start").Number("resumed_step"), 3);
  ExpectBitIdentical(FinalParameters(c), UninterruptedRun("abort_reference"));
}

TEST(CheckpointResumeTest, SigtermSavesExitsAndResumesBitExact) {
  const std::string dir = FreshDir("sigterm");
  TrainConfig c = TinyConfig(dir);
  c.checkpoint.every_steps = 0;  // only the SIGTERM checkpoint and the final one
  RequestStop();
  MemoryProgressSink stopped;
  EXPECT_EQ(RunTraining(c, RankInfo{}, stopped), kExitStopped);
  ClearStopRequest();
  bool saw_checkpoint = false;
  for (const auto& r : stopped.records)
    if (r.event == "checkpoint") {
      saw_checkpoint = true;
      EXPECT_EQ(r.Number("step"), 1);
      EXPECT_GT(r.Number("bytes"), 0);
    }
  EXPECT_TRUE(saw_checkpoint);

  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  EXPECT_EQ(Find(progress, "start").Number("resumed_step"), 1);
  ExpectBitIdentical(FinalParameters(c), UninterruptedRun("sigterm_reference"));
}

TEST(CheckpointResumeTest, ResumingAFinishedRunOnlyReportsDone) {
  TrainConfig c = TinyConfig(FreshDir("finished"));
  MemoryProgressSink first, second;
  ASSERT_EQ(RunTraining(c, RankInfo{}, first), kExitOk);
  ASSERT_EQ(RunTraining(c, RankInfo{}, second), kExitOk);
  for (const auto& r : second.records) EXPECT_NE(r.event, "step");
  EXPECT_EQ(second.records.back().event, "done");
  EXPECT_EQ(second.records.back().Number("val_accuracy"), first.records.back().Number("val_accuracy"));
}

TEST(CheckpointManagerTest, KeepsOnlyTheLastComplete) {
  TrainConfig c = TinyConfig(FreshDir("keep_last"));
  c.checkpoint.every_steps = 2;
  c.checkpoint.keep_last = 2;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  CheckpointManager manager(CheckpointOptions{c.checkpoint_dir, 0, 0, 2});
  std::vector<std::string> complete = manager.ListComplete();
  ASSERT_EQ(complete.size(), 2u);
  EXPECT_EQ(fs::path(complete[0]).filename(), "step-00000008");
  EXPECT_EQ(fs::path(complete[1]).filename(), "step-00000010");
  int dirs = 0;
  for (const auto& e : fs::directory_iterator(c.checkpoint_dir)) dirs += e.is_directory();
  EXPECT_EQ(dirs, 2);
}

TEST(CheckpointManagerTest, ManifestAndRngRoundTrip) {
  const std::string dir = FreshDir("manifest");
  torch::manual_seed(7);
  torch::nn::Linear model(3, 2);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager manager(CheckpointOptions{dir, 1, 0, 3});
  TrainPosition pos{42, 3, 5, GetCpuRngState(), {{"train_seconds", 1.5}}};
  torch::Tensor expected = torch::rand({4});
  SavedCheckpoint saved = manager.Save(pos, *model, optimizer);
  EXPECT_TRUE(fs::exists(saved.path + "/COMPLETE"));
  std::ifstream manifest(saved.path + "/manifest.json");
  std::string text((std::istreambuf_iterator<char>(manifest)), {});
  EXPECT_NE(text.find("\"magic\": \"nightshift-checkpoint\""), std::string::npos);

  TrainPosition loaded;
  ASSERT_TRUE(manager.LoadLatest(*model, optimizer, &loaded));
  EXPECT_EQ(loaded.step, 42);
  EXPECT_EQ(loaded.epoch, 3);
  EXPECT_EQ(loaded.batch_in_epoch, 5);
  EXPECT_EQ(loaded.metrics["train_seconds"], 1.5);
  SetCpuRngState(loaded.rng_cpu);
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
}

TEST(CheckpointManagerTest, DamagedNewestFallsBackToTheOneBefore) {
  const std::string dir = FreshDir("fallback");
  torch::manual_seed(3);
  torch::nn::Linear model(4, 3);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  CheckpointManager manager(CheckpointOptions{dir, 1, 0, 5});
  TrainPosition pos{1, 0, 1, GetCpuRngState(), {}};
  manager.Save(pos, *model, optimizer);
  const torch::Tensor weight_at_1 = model->weight.detach().clone();
  {
    torch::NoGradGuard no_grad;
    model->weight.add_(1.0);
  }
  pos.step = 2;
  SavedCheckpoint second = manager.Save(pos, *model, optimizer);
  pos.step = 3;
  SavedCheckpoint third = manager.Save(pos, *model, optimizer);

  // Step 3: truncated model file. Step 2: a flipped byte in the optimizer state.
  fs::resize_file(third.path + "/model.pt", fs::file_size(third.path + "/model.pt") / 2);
  {
    std::fstream f(second.path + "/optimizer.pt", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    char c;
    f.seekg(40);
    f.get(c);
    f.seekp(40);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  TrainPosition peeked;
  std::string path;
  ASSERT_TRUE(manager.PeekLatest(&peeked, &path));
  EXPECT_EQ(peeked.step, 1);
  TrainPosition loaded;
  ASSERT_TRUE(manager.LoadLatest(*model, optimizer, &loaded, &path));
  EXPECT_EQ(loaded.step, 1);
  EXPECT_EQ(fs::path(path).filename(), "step-00000001");
  EXPECT_TRUE(torch::equal(model->weight, weight_at_1));

  // All damaged: a clear error, not a crash.
  fs::resize_file(path + "/model.pt", 10);
  try {
    manager.LoadLatest(*model, optimizer, &loaded);
    FAIL() << "loaded a damaged checkpoint";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("none of the 3 checkpoints"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nightshift::trainer
