#include "worker/trainer/optim/amp.h"

#include <gtest/gtest.h>

#include <limits>

#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/optim/schedule.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

using testing::FreshDir;
using testing::TinyConfig;

GradScalerOptions Fp16(int64_t growth_interval) {
  GradScalerOptions o;
  o.enabled = true;
  o.init_scale = 1024;
  o.growth_interval = growth_interval;
  return o;
}

TEST(GradScalerTest, InfiniteGradientSkipsThatStepAndHalvesTheScale) {
  GradScaler scaler(Fp16(2000));
  torch::Tensor w = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.1));
  int steps_applied = 0;
  for (int i = 0; i < 3; ++i) {
    opt.zero_grad();
    torch::Tensor loss = (w * w).sum();
    if (i == 1) loss = loss + w[0] * std::numeric_limits<float>::infinity();  // injected inf gradient
    scaler.Scale(loss).backward();
    const bool finite = scaler.UnscaleAndCheckFinite({w});
    if (i != 1) EXPECT_TRUE(torch::allclose(w.grad(), 2 * w.detach())) << "unscaled back";
    scaler.Update(!finite);
    if (finite) { opt.step(); ++steps_applied; }
    EXPECT_EQ(finite, i != 1) << i;
    EXPECT_EQ(scaler.scale(), i == 0 ? 1024 : 512) << i;
  }
  EXPECT_EQ(steps_applied, 2);
}

TEST(GradScalerTest, ScaleDoublesAfterTheGrowthInterval) {
  GradScaler scaler(Fp16(3));
  for (int i = 0; i < 2; ++i) scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 2048);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  scaler.Update(false);
  scaler.Update(true);  // an overflow resets the count
  scaler.Update(false);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 1024);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 2048);
}

TEST(GradScalerTest, DisabledIsTheIdentity) {
  GradScaler scaler(GradScalerOptions{});
  torch::Tensor loss = torch::tensor(3.0);
  EXPECT_EQ(scaler.Scale(loss).item<double>(), 3.0);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 1.0);
}

TEST(NanGuardTest, SkipsThenRollsBackThenFails) {
  NanGuard guard(3);
  using A = NanGuard::Action;
  EXPECT_EQ(guard.Observe(true), A::kStep);
  EXPECT_EQ(guard.Observe(false), A::kSkip);
  EXPECT_EQ(guard.Observe(false), A::kSkip);
  EXPECT_EQ(guard.Observe(true), A::kStep);  // the run resets
  EXPECT_EQ(guard.Observe(false), A::kSkip);
  EXPECT_EQ(guard.Observe(false), A::kSkip);
  EXPECT_EQ(guard.Observe(false), A::kRollBack);
  EXPECT_EQ(guard.Observe(false), A::kSkip);
  EXPECT_EQ(guard.Observe(false), A::kSkip);
  EXPECT_EQ(guard.Observe(false), A::kFail);
  EXPECT_EQ(guard.skipped_steps(), 8);
}

TEST(AmpTest, PrecisionIsCheckedAgainstTheDevice) {
  EXPECT_EQ(CheckPrecision("bf16", torch::kCPU), "");
  EXPECT_EQ(CheckPrecision("fp32", torch::kCPU), "");
  EXPECT_NE(CheckPrecision("fp16", torch::kCPU).find("needs a CUDA device"), std::string::npos);
  EXPECT_EQ(CheckPrecision("fp16", torch::Device(torch::kCUDA, 0)), "");
}

TEST(AmpTest, AutocastRegionCastsMatmulsAndRestores) {
  torch::Tensor a = torch::randn({4, 4}), b = torch::randn({4, 4});
  {
    AutocastRegion region("bf16", torch::kCPU);
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    {
      AutocastRegion fp32("fp32", torch::kCPU);  // nothing changes
      EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kBFloat16);
    }
  }
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
}

TEST(AmpTest, Bf16TrainingLearnsTheEasyTask) {
  // The easy task of TrainTest.LearnsAnEasyTaskAndReportsProgress, in bf16, with dropout.
  TrainConfig c = TinyConfig(FreshDir("bf16"), /*n_train=*/480, /*n_val=*/100);
  c.model.d_model = 32;
  c.model.ffn = 64;
  c.train.precision = "bf16";
  c.train.epochs = 3;
  c.train.lr = 5e-3;
  c.train.warmup_steps = 10;
  c.checkpoint.every_steps = 0;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  std::vector<double> losses;
  for (const auto& r : progress.records)
    if (r.event == "step") {
      losses.push_back(r.Number("loss"));
      EXPECT_EQ(r.String("precision"), "bf16");
      EXPECT_EQ(r.Number("skipped_steps"), 0);
    }
  ASSERT_GE(losses.size(), 2u);
  EXPECT_LT(losses.back(), losses.front());
  ASSERT_EQ(progress.records.back().event, "done");
  EXPECT_GE(progress.records.back().Number("val_accuracy"), 0.9);
}

TEST(AmpTest, NonFiniteLossesRollBackOnceThenFail) {
  TrainConfig c = TinyConfig(FreshDir("nan"));  // 5 batches an epoch
  c.train.epochs = 3;
  c.checkpoint.every_steps = 2;  // steps 4-8 not finite: back to step 6; 7-11: fail
  RankInfo rank;
  rank.faults.nan_loss_from_step = 4;
  MemoryProgressSink progress;
  EXPECT_EQ(RunTraining(c, rank, progress), kExitError);
  bool rolled_back = false;
  double skipped = 0;
  for (const auto& r : progress.records) {
    if (r.event == "warning" && r.String("message").find("rolled back") != std::string::npos) rolled_back = true;
    if (r.event == "step") skipped = std::max(skipped, r.Number("skipped_steps"));
  }
  EXPECT_TRUE(rolled_back);
  EXPECT_GE(skipped, 5);
  ASSERT_EQ(progress.records.back().event, "error");
  EXPECT_NE(progress.records.back().String("message").find("again after rolling back"), std::string::npos);
}

// A skipped step does not advance the schedule, as transformers' Trainer steps its
// scheduler only when the optimizer stepped (optimizer_step_was_skipped: an fp16 overflow,
// which a non-finite loss is too): steps 3 and 4 skipped, step 5 trains at step 3's rate.
TEST(AmpTest, ASkippedStepDoesNotAdvanceTheSchedule) {
  TrainConfig c = TinyConfig(FreshDir("nan-schedule"));  // 5 batches an epoch, 2 epochs
  c.train.schedule = "linear";
  c.train.warmup_steps = 4;
  RankInfo rank;
  rank.faults.nan_loss_from_step = 3;
  rank.faults.nan_losses = 2;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, rank, progress), kExitOk) << progress.records.back().String("message");
  int checked = 0;
  for (const auto& r : progress.records) {
    if (r.event != "step") continue;
    const int64_t step = static_cast<int64_t>(r.Number("step"));
    const int64_t optimizer_steps = step - 1 - (step > 3) - (step > 4);
    EXPECT_DOUBLE_EQ(r.Number("lr"), LearningRate("linear", optimizer_steps, 4, 10, c.train.lr)) << "step " << step;
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

// A roll-back past a damaged newest checkpoint (step 8, damaged once written: back to 6)
// writes step 8 again when the run gets there (before, that save was taken as done and the
// damaged one stayed the newest).
TEST(AmpTest, ARollBackPastADamagedCheckpointWritesItsStepAgain) {
  TrainConfig c = TinyConfig(FreshDir("nan-damaged"));  // 5 batches an epoch, 2 epochs
  c.checkpoint.every_steps = 2;
  c.checkpoint.keep_last = 10;
  RankInfo rank;
  rank.faults.nan_loss_from_step = 5;  // steps 5-9: the fifth in a row rolls back
  rank.faults.nan_losses = 5;
  testing::DamagingProgressSink progress;
  progress.folder = c.checkpoint_dir;
  progress.damaged = {8};
  ASSERT_EQ(RunTraining(c, rank, progress), kExitOk) << progress.records.back().String("message");
  int saves_of_8 = 0;
  for (const auto& r : progress.records) saves_of_8 += r.event == "checkpoint" && r.Number("step") == 8;
  EXPECT_EQ(saves_of_8, 2);
  auto model = BuildSequenceModel(c.model, c.data.vocab_size, c.data.num_classes, c.data.pad_id);
  EXPECT_NO_THROW(CheckpointManager(CheckpointOptions{c.checkpoint_dir}).LoadModelAt(8, *model));
}

// The guard's counts are in the checkpoint: a run that rolled back once, then died and
// resumed, fails at its next streak as the uninterrupted run would, without a second
// roll-back (before, a resume forgot the first and rolled back again).
TEST(AmpTest, ARollBackIsRememberedAcrossAResume) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TrainConfig c = TinyConfig(FreshDir("nan-resume"));  // 5 batches an epoch
  c.train.epochs = 5;
  c.checkpoint.every_steps = 2;
  const auto roll_back_then_die = [](const TrainConfig& config) {
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    RankInfo rank;
    rank.faults.nan_loss_from_step = 4;  // steps 4-8: a streak of 5, rolled back once
    rank.faults.nan_losses = 5;
    rank.faults.abort_at_step = 14;
    MemoryProgressSink p;
    RunTraining(config, rank, p);
  };
  EXPECT_DEATH(roll_back_then_die(c), "fault injection: aborting at step 14");
  RankInfo rank;
  rank.faults.nan_loss_from_step = 13;  // every step from the resumed one on
  MemoryProgressSink progress;
  EXPECT_EQ(RunTraining(c, rank, progress), kExitError);
  int rolled_back = 0;
  for (const auto& r : progress.records)
    if (r.event == "warning" && r.String("message").find("rolled back") != std::string::npos) ++rolled_back;
  EXPECT_EQ(rolled_back, 0);
  ASSERT_EQ(progress.records.back().event, "error");
  EXPECT_NE(progress.records.back().String("message").find("again after rolling back"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::trainer
