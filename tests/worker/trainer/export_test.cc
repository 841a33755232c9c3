#include "worker/trainer/export.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/batching.h"
#include "worker/trainer/checkpoint.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FreshDir;
using testing::TinyConfig;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TrainConfig ConfigFor(const std::string& arch, const std::string& dir) {
  TrainConfig c = TinyConfig(dir);
  c.model.arch = arch;
  c.model.layers = 2;
  if (arch == "gpt_lm") c.data.num_classes = 0;
  c.data.class_names = arch == "gpt_lm" ? std::vector<std::string>{} : std::vector<std::string>{"ham", "spam"};
  return c;
}

std::shared_ptr<SequenceModel> Model(const TrainConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  return BuildSequenceModel(c.model, c.data.vocab_size, c.data.num_classes, c.data.pad_id);
}

// Export, read back into a model initialised differently: every parameter equal, and the
// same logits.
TEST(ExportTest, EachArchitectureRoundTripsExactly) {
  for (const std::string arch : {"transformer_classifier", "gpt_lm"}) {
    const std::string dir = FreshDir("export-" + arch);
    const TrainConfig c = ConfigFor(arch, dir);
    std::shared_ptr<SequenceModel> trained = Model(c, 1), fresh = Model(c, 2);
    ExportModel(dir + "/model", c, *trained, ExportInfo{"j-1", 42, {{"val_accuracy", 0.75}}, ""});
    ASSERT_EQ(VerifyModelFolder(dir + "/model"), "") << arch;
    LoadExportTensors(arch, ReadSafetensors(dir + "/model/model.safetensors"), *fresh);
    const auto a = trained->named_parameters(), b = fresh->named_parameters();
    for (const auto& p : a) EXPECT_TRUE(torch::equal(p.value(), b[p.key()])) << arch << " " << p.key();
    trained->eval();
    fresh->eval();
    const torch::Tensor tokens = torch::randint(4, testing::kVocab, {3, 10});
    const torch::Tensor mask = torch::zeros({3, 10}, torch::kBool);
    EXPECT_TRUE(torch::equal(trained->forward(tokens, mask), fresh->forward(tokens, mask))) << arch;
  }
}

TEST(ExportTest, GptLmIsStoredUnderGpt2NamesWithConv1DWeights) {
  const std::string dir = FreshDir("export-gpt2-names");
  const TrainConfig c = ConfigFor("gpt_lm", dir);
  std::shared_ptr<SequenceModel> model = Model(c, 3);
  const auto tensors = ExportTensors("gpt_lm", *model);
  const int64_t d = c.model.d_model;
  ASSERT_TRUE(tensors.count("transformer.wte.weight"));
  EXPECT_EQ(tensors.at("transformer.wpe.weight").sizes(), (std::vector<int64_t>{c.model.max_len, d}));
  EXPECT_EQ(tensors.at("transformer.h.1.attn.c_attn.weight").sizes(), (std::vector<int64_t>{d, 3 * d}));
  EXPECT_EQ(tensors.at("transformer.h.0.mlp.c_fc.weight").sizes(), (std::vector<int64_t>{d, c.model.ffn}));
  EXPECT_EQ(tensors.at("transformer.h.0.mlp.c_proj.weight").sizes(), (std::vector<int64_t>{c.model.ffn, d}));
  EXPECT_TRUE(tensors.count("transformer.ln_f.bias"));
  for (const auto& [name, t] : tensors) EXPECT_EQ(name.rfind("transformer.", 0), 0u) << name << ": not GPT-2's";
  EXPECT_EQ(tensors.size(), 4u + 12u * c.model.layers) << "wte, wpe, ln_f x2, 12 per block; no head (tied)";

  ExportModel(dir + "/model", c, *model, ExportInfo{"j-1", 5, {}, ""});
  const json config = json::parse(ReadAll(dir + "/model/config.json"));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["n_embd"], d);
  EXPECT_EQ(config["activation_function"], "gelu_new");
  EXPECT_EQ(config["tensor_names"], "gpt2");
}

// The safetensors layout, read by hand: u64 little-endian header length, JSON header,
// data 8-aligned right after it, each tensor's bytes at its offsets.
TEST(ExportTest, SafetensorsLayoutIsTheStandardOne) {
  std::map<std::string, torch::Tensor> tensors = {{"b", torch::arange(6, torch::kFloat32).view({2, 3})},
                                                  {"a", torch::tensor({1.5f})}};
  const std::string bytes = SafetensorsBytes(tensors);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  ASSERT_EQ((8 + n) % 8, 0u);
  const json header = json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["a"]["dtype"], "F32");
  EXPECT_EQ(header["b"]["shape"], json::array({2, 3}));
  EXPECT_EQ(header["a"]["data_offsets"], json::array({0, 4}));
  EXPECT_EQ(header["b"]["data_offsets"], json::array({4, 28}));
  float v = 0;
  std::memcpy(&v, bytes.data() + 8 + n + 4 + 5 * 4, 4);
  EXPECT_EQ(v, 5.0f);
  EXPECT_EQ(bytes.size(), 8 + n + 28);

  const std::string path = FreshDir("safetensors") + "/t.safetensors";
  std::ofstream(path, std::ios::binary) << bytes;
  const auto back = ReadSafetensors(path);
  EXPECT_TRUE(torch::equal(back.at("b"), tensors["b"]));
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 4);
  EXPECT_THROW(ReadSafetensors(path), std::runtime_error) << "a truncated file";
}

TEST(ExportTest, VerifyNamesTheFileThatChanged) {
  const std::string dir = FreshDir("export-verify");
  const TrainConfig c = ConfigFor("transformer_classifier", dir);
  std::ofstream(dir + "/tokenizer.model") << "not really a sentencepiece model";
  ExportModel(dir + "/model", c, *Model(c, 4), ExportInfo{"j-1", 1, {}, dir + "/tokenizer.model"});
  ASSERT_EQ(VerifyModelFolder(dir + "/model"), "");
  EXPECT_EQ(ReadAll(dir + "/model/tokenizer.model"), "not really a sentencepiece model");
  {
    std::fstream f(dir + "/model/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('x');
  }
  EXPECT_NE(VerifyModelFolder(dir + "/model").find("model.safetensors does not match its sha1"), std::string::npos)
      << VerifyModelFolder(dir + "/model");
  fs::remove(dir + "/model/config.json");
  EXPECT_NE(VerifyModelFolder(dir + "/model").find("config.json is missing"), std::string::npos);
}

// A finished run leaves checkpoint_dir/model: whole, with the labels, the final metrics
// (those of the done event) and the tokenizer beside the shards; pruning keeps it.
TEST(ExportTest, AFinishedRunExportsItsModel) {
  const std::string dir = FreshDir("export-run");
  TrainConfig c = ConfigFor("transformer_classifier", dir);
  c.checkpoint.keep_last = 1;
  std::ofstream(dir + "/tokenizer.model") << "spm";
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  const std::string model = c.checkpoint_dir + "/model";
  ASSERT_EQ(VerifyModelFolder(model), "");
  const json config = json::parse(ReadAll(model + "/config.json"));
  EXPECT_EQ(config["format"], "nightshift-model");
  EXPECT_EQ(config["labels"], json::array({"ham", "spam"}));
  EXPECT_EQ(config["job_id"], "j-test");
  const format::ProgressRecord& done = progress.records.back();
  ASSERT_EQ(done.event, "done");
  EXPECT_EQ(config["step"].get<double>(), done.numbers.at("step"));
  EXPECT_EQ(config["metrics"]["val_accuracy"].get<double>(), done.numbers.at("val_accuracy"));
  EXPECT_TRUE(fs::exists(model + "/tokenizer.model"));
  bool exported = false;
  for (const auto& r : progress.records) exported |= r.event == "export" && r.strings.at("path") == model;
  EXPECT_TRUE(exported) << "no export event";
  EXPECT_EQ(CheckpointManager(CheckpointOptions{c.checkpoint_dir, 0, 0, 1}).ListComplete().size(), 1u);
}

// `job artifacts --step N`: a kept checkpoint exports with that step's weights (not the
// final model's), its step in config.json; a step not kept fails naming the kept ones.
TEST(ExportTest, AKeptCheckpointExportsWithItsStepsWeights) {
  const std::string dir = FreshDir("export-step");
  const TrainConfig c = ConfigFor("transformer_classifier", dir);  // checkpoints every 3 steps
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(c, RankInfo{}, progress), kExitOk);
  ASSERT_GE(CheckpointManager(CheckpointOptions{c.checkpoint_dir}).ListComplete().size(), 2u);

  ExportCheckpoint(dir + "/step-3", c, 3);
  ASSERT_EQ(VerifyModelFolder(dir + "/step-3"), "");
  const json config = json::parse(ReadAll(dir + "/step-3/config.json"));
  EXPECT_EQ(config["step"], 3);
  EXPECT_EQ(config["labels"], json::array({"ham", "spam"}));
  std::shared_ptr<SequenceModel> at3 = Model(c, 7), exported = Model(c, 8), final_model = Model(c, 9);
  CheckpointManager(CheckpointOptions{c.checkpoint_dir}).LoadModelAt(3, *at3);
  LoadExportTensors(c.model.arch, ReadSafetensors(dir + "/step-3/model.safetensors"), *exported);
  LoadExportTensors(c.model.arch, ReadSafetensors(c.checkpoint_dir + "/model/model.safetensors"), *final_model);
  const auto want = at3->named_parameters(), got = exported->named_parameters(), last = final_model->named_parameters();
  bool differs_from_final = false;
  for (const auto& p : want) {
    EXPECT_TRUE(torch::equal(p.value(), got[p.key()])) << p.key();
    differs_from_final |= !torch::equal(p.value(), last[p.key()]);
  }
  EXPECT_TRUE(differs_from_final) << "step 3 exported the final model's weights";

  try {
    ExportCheckpoint(dir + "/step-4", c, 4);
    ADD_FAILURE() << "step 4 was never saved";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no complete checkpoint at step 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("kept: 3, 6"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir + "/step-4"));
}

// model.init_from: the first step's loss is the exported model's loss on that batch (no
// dropout, so the forward is deterministic); sizes that differ fail naming the field.
TEST(ExportTest, AJobInitialisedFromAnExportStartsAtItsLoss) {
  const std::string dir = FreshDir("init-from");
  TrainConfig a = ConfigFor("transformer_classifier", dir);
  a.model.dropout = 0;
  MemoryProgressSink first;
  ASSERT_EQ(RunTraining(a, RankInfo{}, first), kExitOk);
  const std::string exported = a.checkpoint_dir + "/model";

  TrainConfig b = a;
  b.checkpoint_dir = dir + "/checkpoints-b";
  b.model.init_from = exported;
  b.train.max_steps = 1;
  b.train.seed = 99;  // another data order and initialisation: the weights come from the export
  MemoryProgressSink second;
  ASSERT_EQ(RunTraining(b, RankInfo{}, second), kExitOk);
  double reported = NAN;
  for (const auto& r : second.records)
    if (r.event == "step" && r.Number("step") == 1) reported = r.Number("loss");

  std::shared_ptr<SequenceModel> model = Model(a, 5);
  LoadExportTensors(a.model.arch, ReadSafetensors(exported + "/model.safetensors"), *model);
  format::ShardReader shard;
  ASSERT_EQ(shard.Open(b.data.train_shard, false), "");
  std::vector<uint32_t> lengths(shard.num_samples());
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = std::min<uint32_t>(shard.length(i), b.model.max_len);
  BatchPlanOptions plan;
  plan.batch_size = b.train.batch_size;
  const Batch batch = Collate(shard, PlanEpoch(lengths, plan, b.train.seed, 0, 0, 1)[0], b.model.max_len, b.data.pad_id);
  model->train();
  const double expected =
      ComputeLossSum(model->forward(batch.tokens, batch.pad_mask), batch, false).sum.item<double>() / batch.samples;
  EXPECT_NEAR(reported, expected, 1e-5 * std::abs(expected));

  TrainConfig c = b;
  c.checkpoint_dir = dir + "/checkpoints-c";
  c.model.d_model = 32;
  c.model.ffn = 64;
  MemoryProgressSink refused;
  EXPECT_EQ(RunTraining(c, RankInfo{}, refused), kExitPermanent);
  EXPECT_NE(refused.records.back().strings.at("message").find("spec.model.d_model is 32 but the exported model's "
                                                               "d_model is 16"),
            std::string::npos)
      << refused.records.back().strings.at("message");
}

TEST(ExportTest, AClassifierStartsFromAGptLmTrunkWithANewHead) {
  const std::string dir = FreshDir("init-trunk");
  const TrainConfig lm = ConfigFor("gpt_lm", dir);
  std::shared_ptr<SequenceModel> gpt = Model(lm, 6);
  ExportModel(dir + "/gpt", lm, *gpt, ExportInfo{"j-lm", 1, {}, ""});
  TrainConfig cls = ConfigFor("transformer_classifier", dir);
  std::shared_ptr<SequenceModel> classifier = Model(cls, 7);
  const torch::Tensor head_before = classifier->named_parameters()["head.weight"].clone();
  InitFromExport(dir + "/gpt", cls, *classifier);
  auto theirs = gpt->named_parameters(), ours = classifier->named_parameters();
  for (const auto& p : ours) {
    if (p.key().rfind("head.", 0) == 0) continue;
    EXPECT_TRUE(torch::equal(p.value(), theirs[p.key()])) << p.key();
  }
  EXPECT_TRUE(torch::equal(ours["head.weight"], head_before)) << "the head stays new";
}

}  // namespace
}  // namespace nightshift::trainer
