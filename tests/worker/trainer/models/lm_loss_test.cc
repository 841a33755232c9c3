// The chunked head + cross-entropy (lm_loss.h) against the unchunked one: the loss sum and
// the gradients of the hidden states and of the head, for chunks of one token, of a size
// that does not divide the tokens, of all of them and of the default size; tokens that do
// not count (-100) count nothing; under bf16 autocast it stays as close to the unchunked
// bf16 path as that path is to fp32.
#include "worker/trainer/models/lm_loss.h"

#include <gtest/gtest.h>

#include "worker/trainer/optim/amp.h"

namespace nightshift::trainer {
namespace {

namespace F = torch::nn::functional;

struct Result {
  torch::Tensor loss, grad_hidden, grad_weight;
};

// hidden [N, D], weight [V, D], targets [N] with every third -100; one backward.
Result LossAndGradients(bool chunked, int64_t chunk, const char* precision = "fp32") {
  torch::manual_seed(7);
  const int64_t n = 37, d = 16, v = 101;
  torch::Tensor hidden = torch::randn({n, d}).requires_grad_(true);
  torch::Tensor weight = (torch::randn({v, d}) * 0.3).requires_grad_(true);
  torch::Tensor targets = torch::randint(0, v, {n}, torch::kLong);
  targets.index_put_({torch::arange(0, n, 3)}, -100);
  torch::Tensor loss;
  {
    AutocastRegion autocast(precision, torch::Device(torch::kCPU));
    loss = chunked ? LinearCrossEntropySum(hidden, weight, targets, chunk)
                   : F::cross_entropy(torch::matmul(hidden, weight.t()).to(torch::kFloat), targets,
                                      F::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(-100));
  }
  loss.backward();
  return {loss.detach(), hidden.grad(), weight.grad()};
}

double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-12);
}

TEST(LinearCrossEntropySumTest, EqualsTheUnchunkedLossAndGradients) {
  const Result want = LossAndGradients(false, 0);
  for (const int64_t chunk : {int64_t{1}, int64_t{5}, int64_t{37}, int64_t{0}}) {
    SCOPED_TRACE(chunk);
    const Result got = LossAndGradients(true, chunk);
    EXPECT_EQ(got.loss.scalar_type(), torch::kFloat);
    EXPECT_LT(RelativeError(got.loss, want.loss), 1e-6);
    EXPECT_LT(RelativeError(got.grad_hidden, want.grad_hidden), 1e-5);
    EXPECT_LT(RelativeError(got.grad_weight, want.grad_weight), 1e-5);
  }
}

// A frozen head (an adapter's base): the hidden states' gradient as before, none for it.
TEST(LinearCrossEntropySumTest, AFrozenHeadGetsNoGradientAndTheSameHiddenGradient) {
  const Result want = LossAndGradients(false, 0);
  torch::manual_seed(7);
  const int64_t n = 37, d = 16, v = 101;
  torch::Tensor hidden = torch::randn({n, d}).requires_grad_(true);
  torch::Tensor weight = torch::randn({v, d}) * 0.3;  // as LossAndGradients draws them
  torch::Tensor targets = torch::randint(0, v, {n}, torch::kLong);
  targets.index_put_({torch::arange(0, n, 3)}, -100);
  LinearCrossEntropySum(hidden, weight, targets, 5).backward();
  EXPECT_LT(RelativeError(hidden.grad(), want.grad_hidden), 1e-5);
  EXPECT_FALSE(weight.grad().defined());
}

// Evaluation's sums: the loss of the whole logits and how many counted argmaxes hit.
TEST(LinearCrossEntropySumTest, EvalSumsAreTheWholeLogits) {
  torch::manual_seed(3);
  torch::Tensor hidden = torch::randn({29, 8}), weight = torch::randn({50, 8});
  torch::Tensor targets = torch::randint(0, 50, {29}, torch::kLong);
  torch::Tensor logits = torch::matmul(hidden, weight.t());
  targets[0] = logits[0].argmax().item<int64_t>();  // at least one hit
  targets[1] = -100;
  const torch::Tensor counted = targets.ne(-100);
  const double want_loss = F::cross_entropy(logits, targets, F::CrossEntropyFuncOptions().reduction(torch::kSum).ignore_index(-100)).item<double>();
  const int64_t want_correct = (logits.argmax(-1).eq(targets) & counted).sum().item<int64_t>();
  for (const int64_t chunk : {int64_t{1}, int64_t{4}, int64_t{0}}) {
    const LmEvalSums got = LinearCrossEntropyEval(hidden, weight, targets, chunk);
    EXPECT_NEAR(got.loss_sum, want_loss, 1e-5 * want_loss) << chunk;
    EXPECT_EQ(got.correct, want_correct) << chunk;
    EXPECT_GE(got.correct, 1);
  }
}

TEST(LinearCrossEntropySumTest, TokensThatDoNotCountAddNothing) {
  torch::Tensor hidden = torch::randn({4, 8}).requires_grad_(true);
  torch::Tensor weight = torch::randn({10, 8});
  LinearCrossEntropySum(hidden, weight, torch::full({4}, int64_t{-100}), 2).backward();
  EXPECT_EQ(hidden.grad().abs().sum().item<double>(), 0.0);
  EXPECT_EQ(LinearCrossEntropySum(hidden, weight, torch::full({4}, int64_t{-100})).item<double>(), 0.0);
}

TEST(LinearCrossEntropySumTest, Bf16AutocastMatchesTheUnchunkedBf16Path) {
  const Result fp32 = LossAndGradients(false, 0), unchunked = LossAndGradients(false, 0, "bf16"), chunked = LossAndGradients(true, 5, "bf16");
  const double bf16_error = RelativeError(unchunked.grad_weight, fp32.grad_weight);
  EXPECT_GT(bf16_error, 0.0) << "autocast ran the matmul in bf16";
  EXPECT_LT(RelativeError(chunked.loss, unchunked.loss), 1e-2);
  EXPECT_LT(RelativeError(chunked.grad_hidden, unchunked.grad_hidden), 2e-2);
  EXPECT_LT(RelativeError(chunked.grad_weight, unchunked.grad_weight), 2e-2);
  EXPECT_EQ(chunked.grad_weight.scalar_type(), torch::kFloat);
}

}  // namespace
}  // namespace nightshift::trainer
