#include "worker/trainer/memory/activation_checkpoint.h"

#include <gtest/gtest.h>

#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/models/model.h"

namespace nightshift::trainer {
namespace {

ModelConfig DropoutModel(double attention_dropout = 0.0) {
  ModelConfig m;
  m.attention_dropout = attention_dropout;  // 0: fused attention; > 0: the explicit path
  m.layers = 3;
  m.d_model = 16;
  m.heads = 2;
  m.ffn = 32;
  m.dropout = 0.1;  // dropout on: the recompute must draw the same masks
  m.max_len = 12;
  return m;
}

// Parameter gradients of one forward/backward, the generator seeded the same way.
std::map<std::string, torch::Tensor> Gradients(TransformerClassifier& model, int every,
                                               const torch::Tensor& tokens) {
  model->zero_grad();
  model->set_activation_checkpointing(every);
  torch::manual_seed(7);
  torch::Tensor logits = model->forward(tokens, tokens.eq(0));
  torch::nn::functional::cross_entropy(logits, torch::tensor({0, 1, 1, 0}, torch::kLong)).backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model->named_parameters()) {
    EXPECT_TRUE(p.value().grad().defined()) << p.key() << " (every " << every << ")";
    if (p.value().grad().defined()) grads[p.key()] = p.value().grad().clone();
  }
  return grads;
}

void ExpectSameGradients(const std::map<std::string, torch::Tensor>& a,
                         const std::map<std::string, torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, ga] : a) {
    const torch::Tensor& gb = b.at(name);
    const double scale = std::max(ga.abs().max().item<double>(), 1e-12);
    EXPECT_LE((ga - gb).abs().max().item<double>() / scale, 1e-6) << name;
  }
}

void ExpectCheckpointedGradientsMatch(double attention_dropout) {
  torch::manual_seed(1);
  TransformerClassifier model = BuildModel(DropoutModel(attention_dropout), 40, 2, 0);
  torch::Tensor tokens = torch::randint(1, 40, {4, 10}, torch::kLong);
  tokens[0].narrow(0, 6, 4).fill_(0);  // some padding
  const auto plain = Gradients(model, 0, tokens);
  // Dropout really is on: another seed gives other gradients.
  model->zero_grad();
  torch::manual_seed(8);
  torch::nn::functional::cross_entropy(model->forward(tokens, tokens.eq(0)),
                                       torch::tensor({0, 1, 1, 0}, torch::kLong)).backward();
  EXPECT_FALSE(torch::allclose(model->named_parameters()["head.weight"].grad(), plain.at("head.weight")));

  ExpectSameGradients(plain, Gradients(model, 1, tokens));  // full
  ExpectSameGradients(plain, Gradients(model, 2, tokens));  // every_2: block 1 only
}

// Fused attention (scaled_dot_product_attention), dropout elsewhere in the block.
TEST(ActivationCheckpointTest, GradientsMatchWithDropoutAndFusedAttention) { ExpectCheckpointedGradientsMatch(0.0); }

// The explicit attention path with dropout on the attention probabilities too.
TEST(ActivationCheckpointTest, GradientsMatchWithAttentionDropout) { ExpectCheckpointedGradientsMatch(0.1); }

TEST(ActivationCheckpointTest, BackwardLeavesTheGeneratorWhereTheForwardLeftIt) {
  torch::manual_seed(3);
  TransformerClassifier model = BuildModel(DropoutModel(), 40, 2, 0);
  torch::Tensor tokens = torch::randint(1, 40, {2, 8}, torch::kLong);
  model->set_activation_checkpointing(1);
  torch::manual_seed(5);
  torch::Tensor loss = model->forward(tokens, tokens.eq(0)).sum();
  const std::string after_forward = GetCpuRngState();
  loss.backward();
  EXPECT_EQ(GetCpuRngState(), after_forward);
}

TEST(ActivationCheckpointTest, ParametersGetGradientsWhenTheInputNeedsNone) {
  torch::manual_seed(4);
  TransformerBlock block(16, 2, 32, 0.0, 0.0, /*causal=*/false);
  torch::Tensor x = torch::randn({2, 5, 16});  // does not require grad
  torch::Tensor bias = torch::zeros({2, 1, 1, 5});
  CheckpointedBlockForward([&](const torch::Tensor& in, const torch::Tensor& b) { return block->forward(in, b); },
                           x, bias)
      .sum()
      .backward();
  for (const auto& p : block->named_parameters()) EXPECT_TRUE(p.value().grad().defined()) << p.key();
}

// Records the calls a BlockPlan makes on sharded blocks, and the blocks' computations.
class RecordingBlock : public BlockParams {
 public:
  RecordingBlock(int index, std::vector<std::string>* log) : index_(index), log_(log) {}
  void Prefetch() override { log_->push_back("P" + std::to_string(index_)); }
  void Acquire() override { log_->push_back("A" + std::to_string(index_)); }
  void Release() override { log_->push_back("R" + std::to_string(index_)); }

 private:
  const int index_;
  std::vector<std::string>* log_;
};

std::vector<std::string> PlanCalls(int checkpoint_every) {
  std::vector<std::string> log;
  std::vector<RecordingBlock> blocks;
  for (int i = 0; i < 3; ++i) blocks.emplace_back(i, &log);
  BlockPlan plan;
  plan.checkpoint_every = checkpoint_every;
  for (auto& b : blocks) plan.sharded.push_back(&b);
  std::vector<torch::Tensor> weights;
  for (int i = 0; i < 3; ++i) weights.push_back(torch::full({4}, 1.0 + i).requires_grad_(true));
  torch::Tensor x = torch::ones({1, 2, 4});
  for (size_t i = 0; i < 3; ++i) {
    x = plan.Run(i, [&, i](const torch::Tensor& in, const torch::Tensor&) {
      log.push_back((torch::GradMode::is_enabled() ? "C" : "c") + std::to_string(i));
      return (in * weights[i]).tanh();
    }, x, torch::Tensor());
  }
  log.push_back("|");
  x.sum().backward();
  for (const auto& w : weights) EXPECT_TRUE(w.grad().defined());
  return log;
}

// FSDP's prefetching: every block's gather is started before the block before it
// computes (forward) or before the block after it runs its backward, so communication
// overlaps computation; each block is whole (acquired) whenever it computes.
TEST(ActivationCheckpointTest, ABlockPlanStartsTheNextBlocksGatherBeforeTheCurrentOneComputes) {
  using V = std::vector<std::string>;
  // Without checkpointing the backward gathers each block again (a hook on its output),
  // and starts the previous block's gather then.
  EXPECT_EQ(PlanCalls(0), (V{"P0", "P1", "A0", "C0", "R0", "P1", "P2", "A1", "C1", "R1", "P2", "A2", "C2", "R2", "|",
                             "A2", "P1", "A1", "P0", "A0"}));
  // Checkpointed: the forward runs without gradients; the recompute gathers the block and
  // starts the previous one's gather before it computes.
  EXPECT_EQ(PlanCalls(1), (V{"P0", "P1", "A0", "c0", "R0", "P1", "P2", "A1", "c1", "R1", "P2", "A2", "c2", "R2", "|",
                             "A2", "P1", "C2", "R2", "A1", "P0", "C1", "R1", "A0", "C0", "R0"}));
}

// The policy's spelling is the spec's (spec_rules::ActivationCheckpointEvery, spec_rules_test).
TEST(ActivationCheckpointTest, WhichBlocks) {
  EXPECT_TRUE(IsCheckpointedBlock(3, 2));
  EXPECT_FALSE(IsCheckpointedBlock(3, 0));
  EXPECT_FALSE(IsCheckpointedBlock(0, 0));
}

}  // namespace
}  // namespace nightshift::trainer
