// Resuming refuses checkpoints of another run configuration.
#include <gtest/gtest.h>

#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

TEST(FingerprintTest, ResumeRefusesAnotherSeedBatchingOrModel) {
  TrainConfig c = testing::TinyConfig(testing::FreshDir("fingerprint"));
  c.train.max_steps = 2;
  MemoryProgressSink first;
  ASSERT_EQ(RunTraining(c, RankInfo{}, first), kExitOk);

  for (int change = 0; change < 3; ++change) {
    TrainConfig other = c;
    other.train.max_steps = 4;
    if (change == 0) other.train.seed += 1;
    if (change == 1) other.train.batch_size = 4;
    if (change == 2) other.model.ffn = 64;
    MemoryProgressSink p;
    EXPECT_EQ(RunTraining(other, RankInfo{}, p), kExitPermanent) << change;  // a restart cannot help
    EXPECT_EQ(p.records.back().Number("permanent"), 1) << change;
    EXPECT_NE(p.records.back().String("message").find("another run configuration"), std::string::npos)
        << p.records.back().String("message");
  }
  // The same configuration resumes.
  TrainConfig same = c;
  same.train.max_steps = 4;
  MemoryProgressSink p;
  ASSERT_EQ(RunTraining(same, RankInfo{}, p), kExitOk);
  EXPECT_EQ(p.records.front().Number("resumed_step"), 2);
}

TEST(FingerprintTest, NamesEveryPart) {
  const std::string f = RunFingerprint(7, 32, 0, true, {"train=1/2/3"}, "model=x");
  EXPECT_EQ(f, "seed=7;batch_size=32;max_tokens=auto;train=1/2/3;model=x");
}

}  // namespace
}  // namespace nightshift::trainer
