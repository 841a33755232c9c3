// The GPT-style language model and TorchScript models, alone and in the training loop.
#include <gtest/gtest.h>
#include <torch/script.h>

#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

using testing::FreshDir;
using testing::kBos;
using testing::kEos;
using testing::kVocab;

ModelConfig Gpt() {
  ModelConfig m;
  m.arch = "gpt_lm";
  m.layers = 2;
  m.d_model = 32;
  m.heads = 2;
  m.ffn = 64;
  m.dropout = 0.0;
  m.max_len = 24;
  return m;
}

// Language-model samples: bos, a repeating cycle 6 7 8 9 10 from a random phase, eos.
void WriteCycleShard(const std::string& path, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  format::ShardWriter writer(kVocab, 0);
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> tokens{kBos};
    const int len = 6 + static_cast<int>(rng() % 12), phase = static_cast<int>(rng() % 5);
    for (int k = 0; k < len; ++k) tokens.push_back(6 + (phase + k) % 5);
    tokens.push_back(kEos);
    writer.Add(seed * 1000 + i, -1, tokens);
  }
  ASSERT_EQ(writer.WriteFile(path), "");
}

TEST(GptTest, CausalLogitsAndLossOnRealTokensOnly) {
  torch::manual_seed(1);
  auto model = BuildSequenceModel(Gpt(), kVocab, 0, 0);
  model->eval();
  torch::Tensor tokens = torch::tensor({{2, 6, 7, 8, 9, 0, 0}}, torch::kLong);
  torch::Tensor changed = tokens.clone();
  changed[0][4] = 12;
  torch::Tensor a = model->forward(tokens, tokens.eq(0)), b = model->forward(changed, changed.eq(0));
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{1, 7, kVocab}));
  // Positions before the change see nothing of it.
  EXPECT_TRUE(torch::allclose(a.narrow(1, 0, 4), b.narrow(1, 0, 4), 0, 1e-5));
  EXPECT_FALSE(torch::allclose(a.narrow(1, 4, 1), b.narrow(1, 4, 1), 0, 1e-5));
  Batch batch;
  batch.tokens = tokens;
  batch.pad_mask = tokens.eq(0);
  batch.samples = 1;
  EXPECT_EQ(LossCount(batch, true), 4);  // predicts 6 7 8 9, not the padding
  const LossSum loss = ComputeLossSum(a, batch, true);
  EXPECT_EQ(loss.count, 4);
  EXPECT_TRUE(std::isfinite(loss.sum.item<double>()));
}

TEST(GptTest, LossDecreasesOnARepetitiveCorpus) {
  const std::string dir = FreshDir("gpt");
  TrainConfig c = testing::TinyConfig(dir);
  c.model = Gpt();
  c.data.num_classes = 0;
  WriteCycleShard(c.data.train_shard, 120, 1);
  WriteCycleShard(c.data.val_shard, 20, 2);
  c.train.epochs = 4;
  c.train.lr = 1e-2;
  c.train.batch_size = 8;
  c.train.warmup_steps = 5;
  c.checkpoint.every_steps = 0;
  c.train.activation_checkpointing = "full";
  c.train.checkpoint_every_blocks = 1;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk) << progress.records.back().String("message");
  std::vector<double> eval_losses;
  for (const auto& r : progress.records)
    if (r.event == "eval") {
      eval_losses.push_back(r.Number("val_loss"));
      EXPECT_NEAR(r.Number("val_perplexity"), std::exp(r.Number("val_loss")), 1e-6 * r.Number("val_perplexity"));
    }
  ASSERT_EQ(eval_losses.size(), 4u);
  EXPECT_LT(eval_losses.back(), eval_losses.front());
  EXPECT_LT(eval_losses.back(), 1.0) << "the cycle is predictable after its first token";
  const auto& done = progress.records.back();
  ASSERT_EQ(done.event, "done");
  EXPECT_GT(done.Number("val_perplexity"), 1.0);
  EXPECT_LT(done.Number("val_perplexity"), 3.0);
}

TEST(TorchScriptTest, ModuleMadeHereTrainsInTheLoop) {
  // A TorchScript classifier defined from C++ (no Python needed): mean-pooled embeddings
  // and a linear layer.
  const std::string dir = FreshDir("torchscript");
  torch::manual_seed(3);
  torch::jit::Module m("TinyClassifier");
  m.register_parameter("emb", (torch::randn({kVocab, 8}) * 0.1).requires_grad_(), false);
  m.register_parameter("w", (torch::randn({8, 2}) * 0.1).requires_grad_(), false);
  m.register_parameter("b", torch::zeros({2}).requires_grad_(), false);
  m.define(R"(
    def forward(self, tokens, pad_mask):
        x = torch.embedding(self.emb, tokens)
        keep = torch.logical_not(pad_mask).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return torch.matmul(pooled, self.w) + self.b
  )");
  const std::string path = dir + "/model.pt";
  m.save(path);

  TrainConfig c = testing::TinyConfig(dir, /*n_train=*/160, /*n_val=*/40);
  c.model.arch = "torchscript";
  c.model.path = path;
  c.train.epochs = 4;
  c.train.lr = 3e-2;
  c.checkpoint.every_steps = 0;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk) << progress.records.back().String("message");
  std::vector<double> eval_losses;
  for (const auto& r : progress.records)
    if (r.event == "eval") eval_losses.push_back(r.Number("val_loss"));
  ASSERT_EQ(eval_losses.size(), 4u);
  EXPECT_LT(eval_losses.back(), eval_losses.front());
  // Its parameters were checkpointed: the final checkpoint resumes.
  MemoryProgressSink again;
  ASSERT_EQ(RunTraining(c, RankInfo{}, again), kExitOk);
  EXPECT_GT(again.records.front().Number("resumed_step"), 0);
}

TEST(TorchScriptTest, MissingFileFailsClearly) {
  ModelConfig m;
  m.arch = "torchscript";
  m.path = "/nonexistent/model.pt";
  try {
    BuildSequenceModel(m, kVocab, 2, 0);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model.pt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nightshift::trainer
