// The trainer's techniques on Hugging Face models (models/pretrained.h), each against the
// same model without it: activation checkpointing (RNG-exact, dropout on), bf16 autocast,
// the out-of-memory split, data parallelism, exact resume, and whole runs with a token
// budget. The folders are hf_models_reference.py's tiny random BERT, RoBERTa and DistilBERT
// (every dropout 0 in their config.json; the tests turn it on where it matters).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/worker/trainer/ranks_util.h"
#include "tests/worker/trainer/reference_util.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/optim/amp.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/checkpoint/export.h"
#include "worker/trainer/parallel/ddp.h"
#include "worker/trainer/fault_injection.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/models/pretrained.h"
#include "worker/trainer/memory/oom.h"
#include "worker/trainer/train.h"

#ifndef NIGHTSHIFT_PYTHON
#define NIGHTSHIFT_PYTHON "/opt/nightshift/venv/bin/python"
#endif

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;
using testing::FreshDir;
using testing::RunUntilAbort;

const char* const kArchs[] = {"bert", "roberta", "distilbert"};
const std::vector<std::string> kLabels = {"no", "yes"};

class HfTrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::EncoderFoldersWithTokenizers(NIGHTSHIFT_SOURCE_DIR, NIGHTSHIFT_PYTHON, &error_));
    ok_ = !dir_->empty();
  }
  void SetUp() override {
    ASSERT_TRUE(ok_) << error_;
    torch::set_num_threads(1);
  }
  static std::string Folder(const std::string& arch) { return *dir_ + "/" + arch; }

  // TinyConfig's synthetic run (vocabulary 32, classes no/yes) on folder `arch`.
  static TrainConfig PretrainedConfig(const std::string& name, const std::string& arch) {
    TrainConfig c = testing::TinyConfig(FreshDir(name));
    c.model.arch = "pretrained";
    c.model.pretrained = Folder(arch);
    c.model.layers = c.model.d_model = c.model.heads = c.model.ffn = 0;  // config.json's
    c.model.dropout = -1;
    c.model.attention_dropout = 0;
    c.data.class_names = kLabels;
    EXPECT_EQ(hf::ResolvePretrained(&c), "");
    return c;
  }
  static std::string* dir_;
  static bool ok_;
  static std::string error_;
};
std::string* HfTrainTest::dir_ = nullptr;
bool HfTrainTest::ok_ = false;
std::string HfTrainTest::error_;

// Rows of ids in [3, 100) of lengths 10, 7, 4 and 10, padding (id 0) at the end.
std::pair<torch::Tensor, torch::Tensor> Rows() {
  torch::manual_seed(3);
  torch::Tensor tokens = torch::randint(3, 100, {4, 10}, torch::kLong);
  torch::Tensor pad = torch::zeros({4, 10}, torch::kBool);
  pad[1].narrow(0, 7, 3).fill_(true);
  pad[2].narrow(0, 4, 6).fill_(true);
  return {tokens.masked_fill(pad, 0), pad};
}
const torch::Tensor& Targets() {
  static const torch::Tensor t = torch::tensor({0, 1, 1, 0}, torch::kLong);
  return t;
}

std::map<std::string, torch::Tensor> Gradients(SequenceModel& model, int every, uint64_t seed) {
  const auto [tokens, pad] = Rows();
  model.zero_grad();
  model.set_activation_checkpointing(every);
  torch::manual_seed(seed);
  F::cross_entropy(model.forward(tokens, pad), Targets()).backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model.named_parameters())
    if (p.value().grad().defined()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

double MaxRelativeDifference(const std::map<std::string, torch::Tensor>& a,
                             const std::map<std::string, torch::Tensor>& b, std::string* where) {
  double worst = 0;
  for (const auto& [name, ga] : a) {
    const double d = (ga - b.at(name)).abs().max().item<double>() /
                     std::max(b.at(name).abs().max().item<double>(), 1e-12);
    if (d > worst) worst = d, *where = name;
  }
  return worst;
}

// Dropout on everywhere (hidden, attention probabilities, classifier): the recompute of a
// checkpointed layer draws the same masks, so the gradients are those of the plain model.
TEST_F(HfTrainTest, ActivationCheckpointingIsRngExactWithDropoutOn) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    hf::PretrainedOptions options;
    options.labels = kLabels;
    options.dropout = options.attention_dropout = 0.1;
    std::shared_ptr<SequenceModel> model = hf::LoadPretrained(Folder(arch), options);
    model->train();
    const auto plain = Gradients(*model, 0, 7);
    std::string where;
    EXPECT_GT(MaxRelativeDifference(Gradients(*model, 0, 8), plain, &where), 1e-3) << "dropout is off";
    for (int every : {1, 2}) {
      const auto checkpointed = Gradients(*model, every, 7);
      ASSERT_EQ(checkpointed.size(), plain.size());
      EXPECT_LE(MaxRelativeDifference(checkpointed, plain, &where), 1e-6) << "every " << every << ": " << where;
    }
  }
}

// With dropout on the attention probabilities the CPU takes the explicit path (common.h);
// at a probability too small to drop anything (below dropout.h's 2^-24 resolution) it
// must give what SDPA gives.
TEST_F(HfTrainTest, TheExplicitAttentionPathEqualsSdpa) {
  const auto [tokens, pad] = Rows();
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    hf::PretrainedOptions options;
    options.attention_dropout = 1e-9;
    std::shared_ptr<SequenceModel> model = hf::LoadPretrained(Folder(arch), options);
    model->eval();
    const torch::Tensor sdpa = model->forward(tokens, pad);
    model->train();  // every other dropout of these folders is 0
    const torch::Tensor explicit_path = model->forward(tokens, pad);
    EXPECT_LE((explicit_path - sdpa).abs().max().item<double>(), 1e-5);
  }
}

// bf16 autocast: the logits within bf16's rounding of fp32's; the gradients finite.
TEST_F(HfTrainTest, Bf16AutocastStaysCloseToFp32) {
  const auto [tokens, pad] = Rows();
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    std::shared_ptr<SequenceModel> model = hf::LoadPretrained(Folder(arch));
    model->eval();
    torch::Tensor fp32 = model->forward(tokens, pad);
    torch::Tensor bf16;
    {
      AutocastRegion autocast("bf16", torch::kCPU);
      bf16 = model->forward(tokens, pad).to(torch::kFloat);
    }
    EXPECT_LE((bf16 - fp32).abs().max().item<double>(), 0.05 * std::max(1.0, fp32.abs().max().item<double>()));
    model->train();
    {
      AutocastRegion autocast("bf16", torch::kCPU);
      F::cross_entropy(model->forward(tokens, pad).to(torch::kFloat), torch::tensor({0, 1, 2, 0})).backward();
    }
    for (const auto& p : model->named_parameters())
      EXPECT_TRUE(p.value().grad().isfinite().all().item<bool>()) << p.key();
  }
}

// One SGD step of folder `arch`'s model on Rows(), through `runner` (micro-batches when
// `faults` runs it out of memory); the parameters after it.
std::vector<torch::Tensor> OneStep(const std::string& folder, MicroBatchRunner& runner, const FaultInjector& faults,
                                   MicroBatchResult* result) {
  std::shared_ptr<SequenceModel> model = hf::LoadPretrained(folder);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
  const auto [tokens, pad] = Rows();
  Batch batch;
  batch.tokens = tokens;
  batch.pad_mask = pad;
  batch.labels = Targets();
  batch.samples = 4;
  batch.padded_tokens = tokens.numel();
  batch.real_tokens = (~pad).sum().item<int64_t>();
  *result = runner.Run(
      batch,
      [&](const Batch& micro, bool, bool) {
        faults.BeforeMicroBatch(micro.padded_tokens);
        torch::Tensor loss = F::cross_entropy(model->forward(micro.tokens, micro.pad_mask), micro.labels,
                                              F::CrossEntropyFuncOptions().reduction(torch::kSum)) / 4.0;
        loss.backward();
        return loss.item<double>();
      },
      [&] { opt.zero_grad(); });
  opt.step();
  std::vector<torch::Tensor> params;
  for (const auto& p : model->parameters()) params.push_back(p.detach().clone());
  return params;
}

TEST_F(HfTrainTest, OutOfMemorySplitTakesTheSameStep) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    MicroBatchRunner plain(OomOptions{}), split(OomOptions{});
    MicroBatchResult r0, r1;
    const auto expected = OneStep(Folder(arch), plain, FaultInjector(), &r0);
    const auto got = OneStep(Folder(arch), split, FaultInjector(FaultPlan{.oom_above_tokens = 15}), &r1);
    EXPECT_EQ(r0.micro_batches, 1);
    EXPECT_GE(r1.micro_batches, 3);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE((got[i] - expected[i]).abs().max().item<double>(),
                1e-5 * std::max(expected[i].abs().max().item<double>(), 1e-6)) << i;
  }
}

// One SGD step (lr 0.5) of `ref` on the whole batch, updating `params`, against every
// rank's parameters after its step of half the batch.
void ExpectEveryRankTookTheWholeBatchStep(const std::vector<std::vector<torch::Tensor>>& after, SequenceModel& ref,
                                          const std::vector<torch::Tensor>& params, const torch::Tensor& tokens,
                                          const torch::Tensor& pad) {
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.5));
  F::cross_entropy(ref.forward(tokens, pad), Targets()).backward();
  opt.step();
  const auto ref_params = ref.parameters();
  for (size_t r = 0; r < after.size(); ++r)
    for (size_t i = 0; i < ref_params.size(); ++i)
      EXPECT_LE((after[r][i] - ref_params[i]).abs().max().item<double>(),
                1e-5 * std::max(ref_params[i].abs().max().item<double>(), 1e-6)) << "rank " << r << " tensor " << i;
}

// Two ranks with two rows each take the step one rank takes with all four.
TEST_F(HfTrainTest, TwoRanksTakeTheStepOfOneWithTheCombinedBatch) {
  const auto [tokens, pad] = Rows();
  const int port = testing::FreePort();
  std::vector<std::vector<torch::Tensor>> after(2);
  testing::RunRanks(2, [&](int r) {
    std::shared_ptr<SequenceModel> model = hf::LoadPretrained(Folder("roberta"));
    GradientSync sync(ProcessGroup::Create(testing::Options(r, 2, port)), model->parameters(), GradientSyncOptions{});
    sync.Broadcast(model->parameters());
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
    F::cross_entropy(model->forward(tokens.narrow(0, 2 * r, 2), pad.narrow(0, 2 * r, 2)), Targets().narrow(0, 2 * r, 2))
        .backward();
    sync.Finish();
    opt.step();
    for (const auto& p : model->parameters()) after[r].push_back(p.detach().clone());
  });
  std::shared_ptr<SequenceModel> ref = hf::LoadPretrained(Folder("roberta"));
  ExpectEveryRankTookTheWholeBatchStep(after, *ref, ref->parameters(), tokens, pad);
}

std::vector<torch::Tensor> FinalParameters(const TrainConfig& c) {
  return testing::LatestCheckpointParameters(*hf::JobModel(c, /*load_weights=*/!c.model.adapter.type.empty()), c.checkpoint_dir);
}

// Killed after the checkpoint of step 3 and resumed, with dropout on (the generator is
// restored too): the same parameters, bit for bit, as a run never interrupted.
// `c` killed at step 5 and resumed (from step 3) against `whole`, the same run never
// interrupted in another folder: the same parameters, bit for bit.
void ExpectResumeBitIdentical(const TrainConfig& c, const TrainConfig& whole) {
  EXPECT_DEATH(RunUntilAbort(c, 5), "fault injection: aborting at step 5");
  ASSERT_TRUE(fs::exists(c.checkpoint_dir + "/step-00000003/COMPLETE"));
  MemoryProgressSink resumed;
  ASSERT_EQ(RunTraining(c, RankInfo{}, resumed), kExitOk) << resumed.records.back().String("message");
  EXPECT_EQ(resumed.records.front().Number("resumed_step"), 3);
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(whole, RankInfo{}, progress), kExitOk);
  const auto a = FinalParameters(c), b = FinalParameters(whole);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

TEST_F(HfTrainTest, AResumedRunEndsBitIdenticalToAnUninterruptedOne) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TrainConfig c = PretrainedConfig("hf_resume", "distilbert");
  c.model.dropout = 0.1;
  TrainConfig whole = PretrainedConfig("hf_resume_reference", "distilbert");
  whole.model.dropout = 0.1;
  ExpectResumeBitIdentical(c, whole);
}

// Whole runs with a token budget, every architecture: the budget is the one asked for
// and the run ends with a checkpoint of the model's own parameter names.
TEST_F(HfTrainTest, RunsWithATokenBudgetEndInACheckpoint) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    TrainConfig c = PretrainedConfig(std::string("hf_budget_") + arch, arch);
    c.train.max_tokens = 48;
    MemoryProgressSink progress;
    ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk) << progress.records.back().String("message");
    EXPECT_EQ(progress.records.front().Number("max_tokens"), 48);
    EXPECT_EQ(progress.records.back().event, "done");
    EXPECT_GT(progress.records.back().Number("val_accuracy"), 0);
    EXPECT_EQ(FinalParameters(c).size(), hf::JobModel(c, false)->parameters().size());
  }
}

// A LoRA adapter (models/lora.h) on the frozen base, through whole runs: only the updates
// and the head move, a killed run resumes bit-identical, and the export is the adapter
// alone, as PEFT saves one (tests/worker/trainer/models/lora_test.cc loads it in PEFT).
TrainConfig LoraConfig(TrainConfig c) {
  c.model.adapter.type = "lora";
  c.model.adapter.r = 4;
  c.model.adapter.alpha = 8;
  return c;
}

TEST_F(HfTrainTest, ALoraRunTrainsOnlyTheAdapterAndTheHeadAndExportsTheAdapter) {
  TrainConfig c = LoraConfig(PretrainedConfig("hf_lora", "bert"));
  c.train.lr = 1e-2;
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk) << progress.records.back().String("message");
  hf::AttachedAdapter attached;
  std::shared_ptr<SequenceModel> trained = hf::JobModel(c, /*load_weights=*/true, &attached);
  testing::LatestCheckpointParameters(*trained, c.checkpoint_dir);
  // The checkpoint holds what trains and its optimizer state, not the frozen base.
  int64_t trainable_bytes = 0;
  for (const auto& p : trained->parameters())
    if (p.requires_grad()) trainable_bytes += p.numel() * 4;
  const auto kept = CheckpointManager(CheckpointOptions{c.checkpoint_dir}).ListComplete();
  ASSERT_FALSE(kept.empty());
  EXPECT_LT(fs::file_size(fs::path(kept.back()) / "model.pt"), trainable_bytes + 64 * 1024);
  EXPECT_LT(fs::file_size(fs::path(kept.back()) / "optimizer.pt"), 2 * trainable_bytes + 64 * 1024);
  EXPECT_EQ(attached.trainable_parameters * 4, trainable_bytes);
  EXPECT_EQ(attached.adapted.size(), 4u);  // query and value in two layers (PEFT's default for bert)
  hf::PretrainedOptions options;
  options.labels = kLabels;
  std::shared_ptr<SequenceModel> base = hf::LoadPretrained(Folder("bert"), options);
  auto base_params = base->named_parameters();
  int moved = 0, lora = 0;
  for (const auto& p : trained->named_parameters()) {
    const bool is_lora = p.key().find(".lora_") != std::string::npos;
    lora += is_lora;
    if (is_lora || p.key().rfind("classifier.", 0) == 0) {
      EXPECT_TRUE(p.value().requires_grad()) << p.key();
      if (p.key().find("lora_B") != std::string::npos || p.key().rfind("classifier.", 0) == 0)
        moved += p.value().abs().sum().item<double>() > 0;
      continue;
    }
    EXPECT_FALSE(p.value().requires_grad()) << p.key();
    EXPECT_TRUE(torch::equal(p.value(), base_params[p.key()])) << p.key() << " is frozen but moved";
  }
  EXPECT_EQ(lora, 8);                       // A and B of each
  EXPECT_GE(moved, 4 + 2);                  // every B left zero, and the head
  const std::string model_dir = c.checkpoint_dir + "/model";
  EXPECT_TRUE(fs::exists(model_dir + "/adapter_config.json"));
  EXPECT_TRUE(fs::exists(model_dir + "/adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(model_dir + "/model.safetensors")) << "the export is the adapter, not the model";
  // The exported adapter, read back through model.adapter.init_from, is the trained one.
  TrainConfig again = c;
  again.model.adapter.init_from = model_dir;
  std::shared_ptr<SequenceModel> reloaded = hf::JobModel(again, /*load_weights=*/true);
  auto reloaded_params = reloaded->named_parameters();
  for (const auto& p : trained->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), reloaded_params[p.key()])) << p.key();
}

// model.base_precision bf16 through a whole run: it trains, resumes to the same end, and
// exports an adapter of float32 tensors.
TEST_F(HfTrainTest, ALoraRunOnABf16BaseTrainsAndResumesExactly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TrainConfig c = LoraConfig(PretrainedConfig("hf_lora_bf16", "bert"));
  c.model.base_precision = "bf16";
  TrainConfig whole = LoraConfig(PretrainedConfig("hf_lora_bf16_reference", "bert"));
  whole.model.base_precision = "bf16";
  ExpectResumeBitIdentical(c, whole);
  const auto adapter = ReadSafetensors(c.checkpoint_dir + "/model/adapter_model.safetensors");
  EXPECT_FALSE(adapter.empty());
  for (const auto& [name, t] : adapter) EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name;
}

TEST_F(HfTrainTest, AResumedLoraRunEndsBitIdenticalToAnUninterruptedOne) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  TrainConfig c = LoraConfig(PretrainedConfig("hf_lora_resume", "roberta"));
  c.model.adapter.dropout = 0.1;
  TrainConfig whole = LoraConfig(PretrainedConfig("hf_lora_resume_reference", "roberta"));
  whole.model.adapter.dropout = 0.1;
  ExpectResumeBitIdentical(c, whole);
}

// Data parallelism reduces the adapter's gradients only: two ranks take the step of one.
TEST_F(HfTrainTest, TwoLoraRanksTakeTheStepOfOneWithTheCombinedBatch) {
  const auto [tokens, pad] = Rows();
  const int port = testing::FreePort();
  auto adapted = [&] {
    HfConfig config;
    std::shared_ptr<SequenceModel> model = hf::LoadPretrained(Folder("distilbert"), {}, &config);
    hf::AdapterConfig adapter;
    adapter.lora.r = 4;
    adapter.target_modules = {"q_lin", "v_lin", "lin1"};
    hf::AttachLora(*model, config, "classification", adapter);
    // The same A and B (B non-zero) on every rank and in the reference, drawn from no
    // generator: the ranks are threads of this process.
    torch::NoGradGuard no_grad;
    double k = 0;
    for (auto& p : model->named_parameters())
      if (p.key().find(".lora_") != std::string::npos)
        p.value().copy_(torch::sin(torch::arange(p.value().numel(), torch::kFloat) * 0.37 + k++).reshape(p.value().sizes()) *
                        0.1);
    return model;
  };
  auto trainable = [](SequenceModel& m) {
    std::vector<torch::Tensor> out;
    for (const auto& p : m.parameters())
      if (p.requires_grad()) out.push_back(p);
    return out;
  };
  std::vector<std::vector<torch::Tensor>> after(2);
  testing::RunRanks(2, [&](int r) {
    std::shared_ptr<SequenceModel> model = adapted();
    GradientSync sync(ProcessGroup::Create(testing::Options(r, 2, port)), model->parameters(), GradientSyncOptions{});
    torch::optim::SGD opt(trainable(*model), torch::optim::SGDOptions(0.5));
    F::cross_entropy(model->forward(tokens.narrow(0, 2 * r, 2), pad.narrow(0, 2 * r, 2)), Targets().narrow(0, 2 * r, 2))
        .backward();
    sync.Finish();
    opt.step();
    for (const auto& p : model->parameters()) after[r].push_back(p.detach().clone());
  });
  std::shared_ptr<SequenceModel> ref = adapted();
  ExpectEveryRankTookTheWholeBatchStep(after, *ref, trainable(*ref), tokens, pad);
}

// The spec against config.json: a size that differs, a max_len beyond the position table
// and a tokenizer larger than the embedding fail naming the field and the key.
TEST_F(HfTrainTest, TheSpecMustAgreeWithConfigJson) {
  TrainConfig c = PretrainedConfig("hf_spec", "roberta");
  EXPECT_EQ(c.model.layers, 2);
  EXPECT_GT(c.model.d_model, 0);
  TrainConfig bad = c;
  bad.model.layers = 3;
  EXPECT_NE(hf::ResolvePretrained(&bad).find("model.layers: 3 differs from " + Folder("roberta") +
                                             "/config.json's num_hidden_layers 2"),
            std::string::npos);
  bad = c;
  bad.model.max_len = 100000;
  EXPECT_NE(hf::ResolvePretrained(&bad).find("model.max_len: 100000 is longer than"), std::string::npos);
  bad = c;
  bad.data.vocab_size = 5000;
  EXPECT_NE(hf::ResolvePretrained(&bad).find("the tokenizer has 5000 tokens"), std::string::npos);
  bad = c;
  bad.model.pretrained = *dir_ + "/nowhere";
  EXPECT_NE(hf::ResolvePretrained(&bad).find("model.pretrained: " + *dir_ + "/nowhere/config.json"), std::string::npos);
}

}  // namespace
}  // namespace nightshift::trainer
