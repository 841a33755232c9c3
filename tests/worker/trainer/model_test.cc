#include "worker/trainer/model.h"

#include <gtest/gtest.h>

namespace nightshift::trainer {
namespace {

ModelConfig SmallModel() {
  ModelConfig m;
  m.layers = 2;
  m.d_model = 16;
  m.heads = 4;
  m.ffn = 32;
  m.dropout = 0.1;
  m.max_len = 20;
  return m;
}

TEST(TransformerClassifierTest, OutputShape) {
  torch::manual_seed(1);
  TransformerClassifier model = BuildModel(SmallModel(), 50, 3, 0);
  torch::Tensor tokens = torch::randint(1, 50, {5, 7}, torch::kLong);
  torch::Tensor logits = model->forward(tokens, tokens.eq(0));
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{5, 3}));
  logits.sum().backward();
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(p.value().grad().defined()) << p.key();
}

TEST(TransformerClassifierTest, PaddingDoesNotChangeTheClsOutput) {
  torch::manual_seed(2);
  TransformerClassifier model = BuildModel(SmallModel(), 50, 2, 0);
  model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor short_tokens = torch::tensor({2, 11, 17, 23, 9}, torch::kLong).view({1, 5});
  torch::Tensor padded = torch::zeros({1, 16}, torch::kLong);
  padded.narrow(1, 0, 5).copy_(short_tokens);
  torch::Tensor a = model->forward(short_tokens, short_tokens.eq(0));
  torch::Tensor b = model->forward(padded, padded.eq(0));
  EXPECT_TRUE(torch::allclose(a, b, /*rtol=*/0, /*atol=*/1e-5)) << a << b;
  // The same sample inside a batch with a longer neighbour.
  torch::Tensor batch = torch::zeros({2, 12}, torch::kLong);
  batch[0].narrow(0, 0, 5).copy_(short_tokens[0]);
  batch[1].fill_(7);
  torch::Tensor c = model->forward(batch, batch.eq(0)).narrow(0, 0, 1);
  EXPECT_TRUE(torch::allclose(a, c, 0, 1e-5)) << a << c;
}

TEST(TransformerClassifierTest, DropoutOnlyInTraining) {
  torch::manual_seed(3);
  TransformerClassifier model = BuildModel(SmallModel(), 50, 2, 0);
  torch::Tensor tokens = torch::randint(1, 50, {4, 9}, torch::kLong);
  model->eval();
  EXPECT_TRUE(torch::equal(model->forward(tokens, tokens.eq(0)), model->forward(tokens, tokens.eq(0))));
  model->train();
  EXPECT_FALSE(torch::equal(model->forward(tokens, tokens.eq(0)), model->forward(tokens, tokens.eq(0))));
}

TEST(TransformerClassifierTest, OtherArchitecturesFailClearly) {
  ModelConfig m = SmallModel();
  m.arch = "gpt_lm";
  try {
    BuildModel(m, 50, 2, 0);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "model.arch gpt_lm not supported by this trainer yet");
  }
}

}  // namespace
}  // namespace nightshift::trainer
