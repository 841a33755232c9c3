#include "worker/trainer/models/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

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

// Either pooling (cls: the first position; mean: the mean over the real tokens).
void ExpectPaddingChangesNothing(const std::string& pooling) {
  SCOPED_TRACE(pooling);
  torch::manual_seed(2);
  ModelConfig m = SmallModel();
  m.pooling = pooling;
  TransformerClassifier model = BuildModel(m, 50, 2, 0);
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

TEST(TransformerClassifierTest, PaddingChangesNeitherPooling) {
  ExpectPaddingChangesNothing("cls");
  ExpectPaddingChangesNothing("mean");
  // The two poolings read different things.
  torch::manual_seed(2);
  ModelConfig m = SmallModel();
  TransformerClassifier cls = BuildModel(m, 50, 2, 0);
  m.pooling = "mean";
  torch::manual_seed(2);
  TransformerClassifier mean = BuildModel(m, 50, 2, 0);
  cls->eval(), mean->eval();
  torch::Tensor tokens = torch::randint(1, 50, {3, 9}, torch::kLong);
  EXPECT_FALSE(torch::allclose(cls->forward(tokens, tokens.eq(0)), mean->forward(tokens, tokens.eq(0))));
  m.pooling = "max";
  EXPECT_THROW(BuildModel(m, 50, 2, 0), std::runtime_error);
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

// Logits and parameter gradients of one forward/backward on `tokens` (padding: 0).
// `weight` (broadcast to the logits) picks what the loss sees.
std::pair<torch::Tensor, std::map<std::string, torch::Tensor>> LogitsAndGradients(SequenceModel& model,
                                                                                  const torch::Tensor& tokens,
                                                                                  const torch::Tensor& weight) {
  model.zero_grad();
  torch::Tensor logits = model.forward(tokens, tokens.eq(0));
  (logits * weight * torch::linspace(-1, 1, logits.numel()).view(logits.sizes())).sum().backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model.named_parameters()) grads[p.key()] = p.value().grad().clone();
  return {logits.detach(), grads};
}

// The largest difference relative to the largest magnitude of `want`.
double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-12);
}

// scaled_dot_product_attention (the path taken without attention dropout) against the
// explicit scores / softmax / matmul path, in fp32, with padding in the batch. The fused
// kernel sums in another order (online softmax), so equal to within 1e-5 relative.
void ExpectFusedAttentionEqualsExplicit(const std::string& arch) {
  ModelConfig m = SmallModel();
  m.arch = arch;
  m.dropout = 0.0;  // deterministic forward: the two paths see the same numbers
  torch::manual_seed(11);
  std::shared_ptr<SequenceModel> model = BuildSequenceModel(m, 50, arch == "gpt_lm" ? 0 : 3, 0);
  auto* trunk = dynamic_cast<TransformerTrunk*>(model.get());
  ASSERT_NE(trunk, nullptr);
  torch::Tensor tokens = torch::randint(1, 50, {4, 13}, torch::kLong);
  tokens[1].narrow(0, 5, 8).fill_(0);
  tokens[3].narrow(0, 9, 4).fill_(0);
  // Language models: only real positions carry meaning (padded ones predict nothing, as
  // in ComputeLossSum), so only they enter the loss and the comparison.
  torch::Tensor real = arch == "gpt_lm" ? tokens.ne(0).unsqueeze(-1).to(torch::kFloat) : torch::ones({1});
  const auto fused = LogitsAndGradients(*model, tokens, real);
  trunk->set_force_explicit_attention(true);
  const auto explicit_path = LogitsAndGradients(*model, tokens, real);
  EXPECT_LE(RelativeError(fused.first * real, explicit_path.first * real), 1e-5) << arch << " logits";
  for (const auto& [name, g] : explicit_path.second)
    EXPECT_LE(RelativeError(fused.second.at(name), g), 1e-5) << arch << " gradient of " << name;
  EXPECT_FALSE(torch::equal(fused.first, explicit_path.first)) << "the two paths should be different code";
}

TEST(AttentionTest, FusedEqualsExplicitForTheClassifier) { ExpectFusedAttentionEqualsExplicit("transformer_classifier"); }
TEST(AttentionTest, FusedEqualsExplicitForTheCausalLanguageModel) { ExpectFusedAttentionEqualsExplicit("gpt_lm"); }

TEST(FlopsTest, SixPerParameterPlusAttention) {
  ModelConfig m = SmallModel();  // 2 layers, d_model 16, ffn 32
  m.arch = "gpt_lm";
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(1000, m, 10), 6.0 * 1000 + 12.0 * 2 * 16 * 10);
  m.arch = "torchscript";
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(1000, m, 10), 6.0 * 1000);
  // The classifier: the parameters of a real model; its last block counts per token only
  // its key/value projections, the rest once per row of 10 tokens.
  m.arch = "transformer_classifier";
  TransformerClassifier model = BuildModel(m, 50, 3, 0);
  int64_t p = 0;
  for (const auto& named : model->named_parameters())
    if (named.key() != "tok_emb.weight" && named.key() != "pos_emb.weight") p += named.value().numel();
  const double block = 2 * 32 + (3 * 256 + 48) + (256 + 16) + 2 * (16 * 32) + 32 + 16;  // 2,224
  const double kv = 2 * 256 + 32;
  EXPECT_DOUBLE_EQ(p, 2 * block + 32 + (16 * 3 + 3));  // two blocks, final norm, head
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(p, m, 10),
                   6.0 * (block + kv) + 12.0 * 16 * 10 + (6.0 * (p - block - kv) + 12.0 * 16 * 10) / 10);
  m.pooling = "mean";  // the last block computes every position
  EXPECT_DOUBLE_EQ(TrainingFlopsPerToken(p, m, 10), 6.0 * p + 12.0 * 2 * 16 * 10);
}

// The classifier's last block computes position 0 alone (forward_first): the same output
// and the same gradients, for the block's parameters and its input, as the whole block.
TEST(AttentionTest, FirstPositionOnlyEqualsTheWholeBlock) {
  for (double attention_dropout : {0.0, 0.1}) {
    torch::manual_seed(12);
    TransformerBlock block(16, 4, 32, /*dropout=*/0.0, attention_dropout, /*causal=*/false);
    block->eval();  // no dropout anywhere: both compute the same function
    for (bool explicit_path : {false, true}) {
      block->set_force_explicit_attention(explicit_path);
      torch::Tensor x = torch::randn({3, 9, 16}, torch::requires_grad());
      torch::Tensor pad = torch::zeros({3, 9}, torch::kBool);
      pad[1].narrow(0, 4, 5).fill_(true);
      torch::Tensor bias = torch::zeros({3, 9}).masked_fill_(pad, -INFINITY).view({3, 1, 1, 9});
      torch::Tensor weight = torch::randn({3, 1, 16});
      block->zero_grad();
      torch::Tensor whole = block->forward(x, bias).narrow(1, 0, 1);
      (whole * weight).sum().backward();
      std::map<std::string, torch::Tensor> want;
      for (const auto& p : block->named_parameters()) want[p.key()] = p.value().grad().clone();
      torch::Tensor want_x = x.grad().clone();
      block->zero_grad();
      x.grad().zero_();
      torch::Tensor first = block->forward_first(x, bias);
      (first * weight).sum().backward();
      ASSERT_EQ(first.sizes(), whole.sizes());
      EXPECT_LE(RelativeError(first, whole), 1e-5) << "explicit " << explicit_path;
      EXPECT_LE(RelativeError(x.grad(), want_x), 1e-5) << "explicit " << explicit_path;
      for (const auto& p : block->named_parameters())
        EXPECT_LE(RelativeError(p.value().grad(), want.at(p.key())), 1e-5) << p.key() << " explicit " << explicit_path;
    }
  }
}

TEST(SequenceModelTest, UnknownArchitecturesFailClearly) {
  ModelConfig m = SmallModel();
  m.arch = "lstm";
  try {
    BuildSequenceModel(m, 50, 2, 0);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(), "model.arch lstm is not supported (use transformer_classifier, gpt_lm or torchscript)");
  }
  m.arch = "torchscript";  // without model.path
  EXPECT_THROW(BuildSequenceModel(m, 50, 2, 0), std::runtime_error);
}

}  // namespace
}  // namespace nightshift::trainer
