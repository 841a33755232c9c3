#include "worker/trainer/parallel/step_agreement.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "tests/worker/trainer/ranks_util.h"

namespace nightshift::trainer {
namespace {

using testing::FreePort;
using testing::Options;
using testing::RunRanks;

TEST(StepAgreementTest, OneRankDecidesFromItsOwnAnswers) {
  StepAgreement agreement(nullptr);
  agreement.Begin(StepIntent{});
  OomVote vote = agreement.Vote(false, false, 0.7);
  EXPECT_FALSE(vote.any_oom);
  EXPECT_TRUE(agreement.decision().loss_finite);
  EXPECT_FALSE(agreement.decision().stop);
  EXPECT_FALSE(agreement.decision().save);

  agreement.Begin(StepIntent{.stop = true, .save = true});
  agreement.Vote(false, false, std::numeric_limits<double>::quiet_NaN());
  EXPECT_FALSE(agreement.decision().loss_finite);
  EXPECT_TRUE(agreement.decision().stop);
  EXPECT_TRUE(agreement.decision().save);

  agreement.Begin(StepIntent{.poison_loss = true});
  agreement.Vote(false, false, 0.7);
  EXPECT_FALSE(agreement.decision().loss_finite) << "fault injection poisons a finite loss";

  // An out-of-memory attempt's loss means nothing: it does not count as not finite.
  agreement.Begin(StepIntent{});
  vote = agreement.Vote(true, true, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(vote.any_oom);
  EXPECT_TRUE(vote.any_unsplittable);
  EXPECT_TRUE(agreement.decision().loss_finite);
}

// Each rank wants something different of the step; one vote (one all-reduce) tells
// every rank all of it, and a rank's out-of-memory error makes the others retry.
TEST(StepAgreementTest, EveryRankLearnsEveryOtherRanksAnswersFromOneVote) {
  const int port = FreePort();
  std::vector<StepDecision> decided(3);
  std::vector<std::vector<bool>> retried(3);
  RunRanks(3, [&](int r) {
    torch::nn::Linear layer(4, 2);
    GradientSync sync(ProcessGroup::Create(Options(r, 3, port)), layer->parameters(), GradientSyncOptions{});
    StepAgreement agreement(&sync);
    agreement.Begin(StepIntent{.stop = r == 2, .save = r == 0});
    // Attempt 1: rank 1 runs out of memory. Attempt 2: rank 1's loss is NaN.
    for (int attempt = 0; attempt < 2; ++attempt) {
      const bool oom = attempt == 0 && r == 1;
      if (!oom) layer->forward(torch::ones({3, 4})).sum().backward();
      const double loss = attempt == 1 && r == 1 ? std::numeric_limits<double>::quiet_NaN() : 1.0;
      retried[r].push_back(agreement.Vote(oom, false, loss).any_oom);
      layer->zero_grad();
    }
    decided[r] = agreement.decision();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(retried[r], (std::vector<bool>{true, false})) << "rank " << r;
    EXPECT_FALSE(decided[r].loss_finite) << "rank " << r << ": rank 1's NaN counts for all";
    EXPECT_TRUE(decided[r].stop) << "rank " << r << ": rank 2's SIGTERM counts for all";
    EXPECT_TRUE(decided[r].save) << "rank " << r << ": rank 0's due checkpoint counts for all";
  }
}

}  // namespace
}  // namespace nightshift::trainer
