#include "worker/trainer/checkpoint/export.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/io/atomic_file.h"
#include "common/crypto/sha256.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/data/batching.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/models/pretrained.h"
#include "worker/trainer/train.h"

#ifndef NIGHTSHIFT_PYTHON
#define NIGHTSHIFT_PYTHON "/opt/nightshift/venv/bin/python"
#endif

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

// Runs `args` with the venv's python; "" or the command and its output.
std::string RunPython(const std::string& args, const std::string& log) {
  const std::string command = std::string(NIGHTSHIFT_PYTHON) + " " + args + " > " + log + " 2>&1";
  return std::system(command.c_str()) == 0 ? "" : command + ":\n" + ReadAll(log);
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
    LoadExportTensors(arch, HfWeights::OpenFile(dir + "/model/model.safetensors"), *fresh);
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
  const std::string path = FreshDir("safetensors") + "/t.safetensors";
  const std::string digest = WriteSafetensors(path, tensors);
  std::string bytes;
  ASSERT_EQ(io::ReadRegularFile(path, 1 << 20, &bytes), "");
  EXPECT_EQ(digest, crypto::Sha256Hex(bytes));
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
  EXPECT_NE(VerifyModelFolder(dir + "/model").find("model.safetensors does not match its sha256"), std::string::npos)
      << VerifyModelFolder(dir + "/model");
  fs::remove(dir + "/model/config.json");
  EXPECT_NE(VerifyModelFolder(dir + "/model").find("config.json is missing"), std::string::npos);
}

// model.init_from names a user's folder: its checksums.json and its files are the
// attacker's. A name that climbs out ("../../../../dev/zero" would be read without end),
// a listed file swapped for a symbolic link to a file outside, and a file larger than
// checksums.json says are refused before anything is read past the stated size.
TEST(ExportTest, VerifyReadsOnlyPlainRegularFilesOfTheFolder) {
  const std::string dir = FreshDir("export-verify-attack");
  const TrainConfig c = ConfigFor("transformer_classifier", dir);
  std::ofstream(dir + "/tokenizer.model") << "tokenizer";
  ExportModel(dir + "/model", c, *Model(c, 4), ExportInfo{"j-1", 1, {}, dir + "/tokenizer.model"});
  ASSERT_EQ(VerifyModelFolder(dir + "/model"), "");
  const std::string sums = ReadAll(dir + "/model/checksums.json");
  json climbing = json::parse(sums);
  climbing["files"]["../../../../dev/zero"] = {{"bytes", 1LL << 40}, {"sha256", std::string(64, '0')}};
  std::ofstream(dir + "/model/checksums.json", std::ios::trunc) << climbing.dump();
  EXPECT_NE(VerifyModelFolder(dir + "/model").find("'../../../../dev/zero', which is not a plain file name"),
            std::string::npos) << VerifyModelFolder(dir + "/model");
  std::ofstream(dir + "/model/checksums.json", std::ios::trunc) << sums;

  std::ofstream(dir + "/outside") << "tokenizer";  // the same bytes, outside the folder
  fs::remove(dir + "/model/tokenizer.model");
  fs::create_symlink(dir + "/outside", dir + "/model/tokenizer.model");
  EXPECT_NE(VerifyModelFolder(dir + "/model").find("tokenizer.model is a symbolic link (not followed)"),
            std::string::npos) << VerifyModelFolder(dir + "/model");
  fs::remove(dir + "/model/tokenizer.model");
  std::ofstream(dir + "/model/tokenizer.model") << "tokenizer and then some";
  EXPECT_NE(VerifyModelFolder(dir + "/model").find("more than the 9 allowed"), std::string::npos)
      << VerifyModelFolder(dir + "/model");
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
  LoadExportTensors(c.model.arch, HfWeights::OpenFile(dir + "/step-3/model.safetensors"), *exported);
  LoadExportTensors(c.model.arch, HfWeights::OpenFile(c.checkpoint_dir + "/model/model.safetensors"), *final_model);
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
  LoadExportTensors(a.model.arch, HfWeights::OpenFile(exported + "/model.safetensors"), *model);
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

namespace {

// A model.pretrained job's config for the Hugging Face folder `source`, resolved as the
// trainer resolves it, with labels other than the folder's (so the head is new).
TrainConfig PretrainedJob(const std::string& source) {
  TrainConfig c;
  c.job_id = "j-hf";
  c.model.arch = "pretrained";
  c.model.pretrained = source;
  c.model.layers = c.model.d_model = c.model.heads = c.model.ffn = 0;
  c.model.max_len = 32;
  c.model.dropout = 0.2;
  c.data.class_names = {"neg", "pos"};
  c.data.num_classes = 2;
  c.data.vocab_size = 0;
  return c;
}

// The job's model as training leaves it: every parameter moved from where it started.
std::shared_ptr<SequenceModel> TrainedClassifier(const TrainConfig& c) {
  torch::manual_seed(5);
  std::shared_ptr<SequenceModel> model = hf::JobModel(c, /*load_weights=*/true);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.1);
  return model;
}

}  // namespace

// arch pretrained: the export is the folder transformers saves for the fine-tuned model:
// its own tensor names in F32, config.json with the architecture and the data's labels
// (and ours beside), the source's tokenizer files, SHA-256 checksums. Then transformers
// loads it (model and tokenizer) with the data's labels, and its logits equal
// nightshift-predict's within 1e-4, its ids --tokens' (hf_folder_test.py check).
TEST(ExportTest, PretrainedExportIsAFolderTransformersLoads) {
  const std::string dir = FreshDir("export-pretrained");
  const fs::path tests = fs::path(__FILE__).parent_path().parent_path().parent_path();
  const std::string script = (tests / "predict" / "hf_folder_test.py").string();
  ASSERT_EQ(RunPython(script + " make " + dir + "/source", dir + "/make.log"), "");
  std::string exports;
  for (const std::string arch : {"bert", "roberta", "distilbert"}) {
    TrainConfig c = PretrainedJob(dir + "/source/" + arch);
    ASSERT_EQ(hf::ResolvePretrained(&c), "") << arch;
    std::shared_ptr<SequenceModel> model = TrainedClassifier(c);
    const std::string out = dir + "/export-" + arch;
    ExportModel(out, c, *model, ExportInfo{"j-hf", 7, {{"val_accuracy", 0.5}}, ""});
    ASSERT_EQ(VerifyModelFolder(out), "") << arch;

    const auto tensors = ReadSafetensors(out + "/model.safetensors");
    const auto params = model->named_parameters();
    EXPECT_EQ(tensors.size(), params.size()) << arch;
    for (const auto& p : params) {
      ASSERT_TRUE(tensors.count(p.key())) << arch << ": " << p.key() << " not exported under its own name";
      EXPECT_TRUE(torch::equal(tensors.at(p.key()), p.value())) << arch << ": " << p.key();
    }
    const json config = json::parse(ReadAll(out + "/config.json"));
    const json source = json::parse(ReadAll(c.model.pretrained + "/config.json"));
    const std::string cls = arch == "bert" ? "Bert" : arch == "roberta" ? "Roberta" : "DistilBert";
    EXPECT_EQ(config["architectures"], json::array({cls + "ForSequenceClassification"}));
    EXPECT_EQ(config["id2label"], json({{"0", "neg"}, {"1", "pos"}}));
    EXPECT_EQ(config["label2id"], json({{"neg", 0}, {"pos", 1}}));
    EXPECT_EQ(config["vocab_size"], source["vocab_size"]) << "the model's, not the tokenizer's";
    EXPECT_EQ(config[arch == "distilbert" ? "dropout" : "hidden_dropout_prob"], 0.2) << "the job's dropout";
    EXPECT_EQ(config["dtype"], "float32");
    EXPECT_EQ(config["format"], kModelFormat);
    EXPECT_EQ(config["arch"], "pretrained");
    EXPECT_EQ(config["max_len"], 32);
    EXPECT_EQ(config["labels"], json::array({"neg", "pos"}));
    EXPECT_EQ(config["step"], 7);
    for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
      EXPECT_EQ(ReadAll(out + "/" + name), ReadAll(c.model.pretrained + "/" + name)) << arch << " " << name;
    EXPECT_FALSE(fs::exists(out + "/tokenizer.model"));
    const json sums = json::parse(ReadAll(out + "/checksums.json"));
    EXPECT_EQ(sums["algorithm"], "sha256");
    EXPECT_EQ(sums["files"].size(), 4u) << sums.dump();
    EXPECT_EQ(sums["files"]["config.json"]["sha256"].get<std::string>().size(), 64u);
    exports += " " + out;
  }
#ifdef NIGHTSHIFT_PREDICT_BIN
  EXPECT_EQ(RunPython(script + " check " + NIGHTSHIFT_PREDICT_BIN + exports, dir + "/check.log"), "");
#else
  GTEST_SKIP() << "nightshift-predict is not built: transformers against it not checked";
#endif
}

// A folder written before SHA-256 (checksums.json "sha1") still verifies; a file that
// differs from its sha1 is named.
TEST(ExportTest, Sha1FoldersStillVerify) {
  const std::string dir = FreshDir("export-sha1");
  const std::string model = dir + "/model";
  fs::create_directories(model);
  std::ofstream(model + "/config.json") << "{}";
  // sha1("{}"), as Python's hashlib gives it.
  std::ofstream(model + "/checksums.json")
      << R"({"algorithm": "sha1", "files": {"config.json": {"bytes": 2, "sha1": "bf21a9e8fbc5a3846fb05b4fa0859e0917b2202f"}}})";
  EXPECT_EQ(VerifyModelFolder(model), "");
  std::ofstream(model + "/config.json") << "[]";
  EXPECT_NE(VerifyModelFolder(model).find("config.json does not match its sha1"), std::string::npos)
      << VerifyModelFolder(model);
  std::ofstream(model + "/checksums.json") << R"({"algorithm": "md5", "files": {}})";
  EXPECT_NE(VerifyModelFolder(model).find("md5"), std::string::npos) << VerifyModelFolder(model);
}

// model.init_from does not take a Hugging Face export: model.pretrained does.
TEST(ExportTest, InitFromRefusesAPretrainedExport) {
  const std::string dir = FreshDir("export-init-pretrained");
  std::ofstream(dir + "/config.json") << R"({"format": "nightshift-model", "version": 1, "arch": "pretrained"})";
  std::ofstream(dir + "/checksums.json") << R"({"algorithm": "sha256", "files": {}})";
  const TrainConfig c = ConfigFor("transformer_classifier", dir);
  try {
    InitFromExport(dir, c, *Model(c, 1));
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("model.pretrained"), std::string::npos) << e.what();
  }
}

}  // namespace nightshift::trainer
