#include "worker/trainer/fault_injection.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "worker/trainer/memory/oom.h"

namespace nightshift::trainer {
namespace {

TEST(FaultInjectionTest, TheDefaultPlanDoesNothing) {
  const FaultInjector off;
  for (int64_t step = 1; step < 1000; step += 7) {
    off.BeforeStep(step);
    off.BeforeMicroBatch(step * 1000000);
    EXPECT_FALSE(off.PoisonsLoss(step));
  }
}

TEST(FaultInjectionTest, OutOfMemoryAboveTheLimitLooksLikeTheAllocatorsError) {
  const FaultInjector faults(FaultPlan{.oom_above_tokens = 64});
  faults.BeforeMicroBatch(64);
  try {
    faults.BeforeMicroBatch(65);
    FAIL() << "no error above the limit";
  } catch (const std::exception& e) {
    EXPECT_TRUE(IsOutOfMemory(e)) << e.what();
    EXPECT_NE(std::string(e.what()).find("NIGHTSHIFT_FAULT_OOM_ABOVE_TOKENS=64"), std::string::npos);
  }
}

TEST(FaultInjectionTest, NanLossFromAStepOn) {
  const FaultInjector faults(FaultPlan{.nan_loss_from_step = 4});
  EXPECT_FALSE(faults.PoisonsLoss(3));
  EXPECT_TRUE(faults.PoisonsLoss(4));
  EXPECT_TRUE(faults.PoisonsLoss(40));
  // nan_losses: the first two steps so poisoned, then none (a roll-back's repeated steps run clean).
  const FaultInjector twice(FaultPlan{.nan_loss_from_step = 4, .nan_losses = 2});
  EXPECT_FALSE(twice.PoisonsLoss(3));
  EXPECT_TRUE(twice.PoisonsLoss(4));
  EXPECT_TRUE(twice.PoisonsLoss(5));
  EXPECT_FALSE(twice.PoisonsLoss(6));
  EXPECT_FALSE(twice.PoisonsLoss(4));
}

TEST(FaultInjectionDeathTest, AbortsBeforeThatStepOnly) {
  const FaultInjector faults(FaultPlan{.abort_at_step = 3});
  faults.BeforeStep(2);
  faults.BeforeStep(4);
  EXPECT_DEATH(faults.BeforeStep(3), "fault injection: aborting at step 3");
}

}  // namespace
}  // namespace nightshift::trainer
