#include "worker/trainer/models/dropout.h"

#include <gtest/gtest.h>

#include <limits>

namespace nightshift::trainer {
namespace {

TEST(DropoutTest, KeepsOneMinusPAndScalesTheSurvivors) {
  torch::manual_seed(1);
  const int64_t n = 1 << 20;
  const torch::Tensor y = Dropout(torch::ones({n}), 0.1, /*training=*/true);
  const double dropped = y.eq(0).sum().item<double>() / n;
  EXPECT_NEAR(dropped, 0.1, 0.002);  // binomial sd 0.0003
  const torch::Tensor kept = y.masked_select(y.ne(0));
  EXPECT_TRUE(torch::allclose(kept, torch::full_like(kept, 1.0 / 0.9)));
  // Not a pattern: neighbours are independent (drop-after-drop about p of the time).
  const torch::Tensor d = y.eq(0);
  const double both = (d.narrow(0, 0, n - 1) & d.narrow(0, 1, n - 1)).sum().item<double>() / n;
  EXPECT_NEAR(both, 0.01, 0.001);
}

TEST(DropoutTest, MasksAreAPureFunctionOfTheGeneratorStateAndNotOfThreads) {
  const torch::Tensor x = torch::randn({64, 1000});
  torch::manual_seed(7);
  torch::set_num_threads(1);
  const torch::Tensor a = Dropout(x, 0.3, true);
  const torch::Tensor next = Dropout(x, 0.3, true);
  torch::manual_seed(7);
  torch::set_num_threads(2);
  const torch::Tensor b = Dropout(x, 0.3, true);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, next)) << "each call draws a new mask";
  // Another stream (rank) from the same generator state: other masks.
  torch::manual_seed(7);
  SetDropoutStream(1);
  const torch::Tensor other = Dropout(x, 0.3, true);
  SetDropoutStream(0);
  EXPECT_FALSE(torch::equal(a, other));
}

TEST(DropoutTest, NonFiniteValuesStayVisible) {
  torch::manual_seed(2);
  const torch::Tensor y = Dropout(torch::full({1000}, std::numeric_limits<float>::quiet_NaN()), 0.5, true);
  EXPECT_TRUE(y.isnan().all().item<bool>()) << "dropped NaNs too, as in F::dropout";
}

TEST(DropoutTest, BackwardAppliesTheForwardsMask) {
  torch::manual_seed(3);
  const torch::Tensor x = (torch::rand({32, 4, 17, 17}) + 0.5).requires_grad_(true);
  const torch::Tensor y = Dropout(x.transpose(2, 3), 0.25, true);  // a non-contiguous input
  const torch::Tensor g = torch::randn_like(y);
  y.backward(g);
  const torch::Tensor keep = y.ne(0);
  const torch::Tensor expected = torch::where(keep, g / 0.75, torch::zeros_like(g)).transpose(2, 3);
  EXPECT_TRUE(torch::allclose(x.grad(), expected));
  EXPECT_TRUE(torch::allclose(y, torch::where(keep, x.transpose(2, 3) / 0.75, torch::zeros_like(g))));
}

TEST(DropoutTest, IdentityInEvalModeOrWithoutProbabilityAndOtherDtypes) {
  const torch::Tensor x = torch::randn({5, 7});
  EXPECT_TRUE(Dropout(x, 0.5, /*training=*/false).is_same(x));
  EXPECT_TRUE(Dropout(x, 0.0, true).is_same(x));
  EXPECT_TRUE(Dropout(x, 1.0, true).eq(0).all().item<bool>());
  const torch::Tensor bf = Dropout(torch::ones({4096}, torch::kBFloat16), 0.5, true);
  EXPECT_EQ(bf.scalar_type(), torch::kBFloat16);
  EXPECT_NEAR(bf.eq(0).sum().item<double>() / 4096, 0.5, 0.05);
  EXPECT_TRUE(bf.masked_select(bf.ne(0)).eq(2).all().item<bool>());
}

}  // namespace
}  // namespace nightshift::trainer
