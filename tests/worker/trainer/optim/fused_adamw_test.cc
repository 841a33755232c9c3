// FusedAdamW (fused_adamw.h) against torch::optim::AdamW: the same parameters and moments
// after steps with weight decay, a changing learning rate and a parameter without a
// gradient at one step; the state of either resumes in the other; amsgrad is AdamW's own.
#include "worker/trainer/optim/fused_adamw.h"

#include <gtest/gtest.h>

#include <sstream>
#include <vector>

namespace nightshift::trainer {
namespace {

using torch::optim::AdamW;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

std::vector<torch::Tensor> Params() {
  torch::manual_seed(3);
  return {torch::randn({64, 48}).requires_grad_(true), torch::randn({48}).requires_grad_(true),
          torch::randn({7, 3, 5}).requires_grad_(true)};
}

// Gradients of step `step` (the second parameter has none at step 2), then a step at a
// learning rate that changes per step as the trainer's schedule changes it.
void Step(torch::optim::Optimizer& opt, std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  for (size_t i = 0; i < params.size(); ++i)
    params[i].mutable_grad() = step == 2 && i == 1 ? torch::Tensor() : torch::randn(params[i].sizes()) * (i + 1);
  for (auto& group : opt.param_groups()) static_cast<AdamWOptions&>(group.options()).lr(1e-2 / (step + 1));
  opt.step();
}

// Rounding apart: the fused kernel updates exp_avg as a lerp, a few ulps from AdamW's
// mul-add on values of order 1.
void ExpectSame(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                torch::optim::Optimizer& got_opt, torch::optim::Optimizer& want_opt) {
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-6, 1e-7)) << "parameter " << i << ": largest difference "
                                                               << (got[i] - want[i]).abs().max().item<float>();
    const auto& g = static_cast<AdamWParamState&>(*got_opt.state().at(got[i].unsafeGetTensorImpl()));
    const auto& w = static_cast<AdamWParamState&>(*want_opt.state().at(want[i].unsafeGetTensorImpl()));
    EXPECT_EQ(g.step(), w.step()) << "parameter " << i;
    EXPECT_TRUE(torch::allclose(g.exp_avg(), w.exp_avg(), 1e-6, 1e-6)) << "exp_avg of parameter " << i << ": "
        << (g.exp_avg() - w.exp_avg()).abs().max().item<float>() << " of " << w.exp_avg().abs().max().item<float>();
    EXPECT_TRUE(torch::allclose(g.exp_avg_sq(), w.exp_avg_sq(), 1e-6, 1e-10)) << "exp_avg_sq of parameter " << i;
  }
}

TEST(FusedAdamWTest, StepsAsAdamWDoes) {
  auto fused_params = Params(), plain_params = Params();
  FusedAdamW fused(fused_params, AdamWOptions(1e-2).weight_decay(0.1));
  AdamW plain(plain_params, AdamWOptions(1e-2).weight_decay(0.1));
  for (int step = 0; step < 6; ++step) {
    Step(fused, fused_params, step);
    Step(plain, plain_params, step);
  }
  ExpectSame(fused_params, plain_params, fused, plain);
  EXPECT_EQ(static_cast<AdamWParamState&>(*fused.state().at(fused_params[1].unsafeGetTensorImpl())).step(), 5)
      << "a parameter without a gradient does not step";
  EXPECT_FALSE(torch::allclose(fused_params[0], Params()[0])) << "the parameters moved";
}

// A checkpoint of one, loaded into the other, continues as the uninterrupted run does.
TEST(FusedAdamWTest, EitherResumesTheOthersState) {
  for (bool fused_first : {true, false}) {
    auto params = Params(), straight_params = Params();
    std::unique_ptr<AdamW> first = fused_first ? std::make_unique<FusedAdamW>(params, AdamWOptions(1e-2).weight_decay(0.1))
                                               : std::make_unique<AdamW>(params, AdamWOptions(1e-2).weight_decay(0.1));
    AdamW straight(straight_params, AdamWOptions(1e-2).weight_decay(0.1));
    for (int step = 0; step < 3; ++step) {
      Step(*first, params, step);
      Step(straight, straight_params, step);
    }
    std::stringstream saved;
    {
      torch::serialize::OutputArchive archive;
      first->save(archive);
      archive.save_to(saved);
    }
    std::unique_ptr<AdamW> second = fused_first ? std::make_unique<AdamW>(params, AdamWOptions(1e-2).weight_decay(0.1))
                                                : std::make_unique<FusedAdamW>(params, AdamWOptions(1e-2).weight_decay(0.1));
    torch::serialize::InputArchive archive;
    archive.load_from(saved);
    second->load(archive);
    for (int step = 3; step < 6; ++step) {
      Step(*second, params, step);
      Step(straight, straight_params, step);
    }
    SCOPED_TRACE(fused_first ? "FusedAdamW, then AdamW" : "AdamW, then FusedAdamW");
    ExpectSame(params, straight_params, *second, straight);
  }
}

TEST(FusedAdamWTest, AmsgradIsAdamWsOwnStep) {
  auto fused_params = Params(), plain_params = Params();
  FusedAdamW fused(fused_params, AdamWOptions(1e-2).amsgrad(true));
  AdamW plain(plain_params, AdamWOptions(1e-2).amsgrad(true));
  for (int step = 0; step < 3; ++step) {
    Step(fused, fused_params, step);
    Step(plain, plain_params, step);
  }
  for (size_t i = 0; i < fused_params.size(); ++i) EXPECT_TRUE(torch::equal(fused_params[i], plain_params[i]));
}

}  // namespace
}  // namespace nightshift::trainer
