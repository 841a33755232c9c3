// The Hugging Face encoders (models/bert.h, roberta.h, distilbert.h) against transformers
// itself: hf_models_reference.py (run here with NIGHTSHIFT_PYTHON) saves tiny random
// classifiers with save_pretrained (fp32, fp16, bf16, sharded) and writes transformers'
// logits and first-step gradients; ours must equal them (1e-4 absolute for logits, 1e-4
// relative for gradients). Then what a bad folder gives: errors naming the file, key or
// tensor.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/format/safetensors.h"
#include "tests/worker/trainer/reference_util.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/models/hf_weights.h"
#include "worker/trainer/models/pretrained.h"

#ifndef NIGHTSHIFT_PYTHON
#define NIGHTSHIFT_PYTHON "/opt/nightshift/venv/bin/python"
#endif

namespace nightshift::trainer::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const char* const kCases[] = {"bert", "bert_fp16", "bert_sharded", "roberta", "distilbert", "distilbert_bf16"};

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

using testing::FromJson;
using testing::ReadAll;

// The reference folders and numbers, made once per version of the script and of torch,
// transformers and tokenizers, and shared by the test processes (testing::SharedFolder).
class HfModelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string script = std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/hf_models_reference.py";
    std::string error;
    const std::string command = std::string(NIGHTSHIFT_PYTHON) + " " + script + " {dir}";
    dir_ = new std::string(testing::SharedFolder("nightshift_hf_models", command, {script}, NIGHTSHIFT_PYTHON, &error));
    ASSERT_FALSE(dir_->empty()) << error;
    reference_ = new json(json::parse(ReadAll(*dir_ + "/reference.json")));
  }
  void SetUp() override { ASSERT_NE(reference_, nullptr) << "hf_models_reference.py failed"; }
  static std::string Folder(const std::string& name) { return *dir_ + "/" + name; }
  static const json& Case(const std::string& name) { return (*reference_)["cases"][name]; }
  // The inputs of `arch`: tokens [B, L] and pad_mask [B, L] (true at padding).
  static std::pair<torch::Tensor, torch::Tensor> Inputs(const std::string& arch) {
    const json& in = (*reference_)["inputs"][arch];
    return {FromJson(in["input_ids"], torch::kLong), FromJson(in["attention_mask"], torch::kLong).eq(0)};
  }
  static torch::Tensor Targets() { return FromJson((*reference_)["labels"], torch::kLong); }
  // A copy of reference folder `from` named `to` (of this process), to break.
  static std::string CopyOf(const std::string& from, const std::string& to) {
    const std::string dst = testing::FreshDir(to);
    fs::copy(Folder(from), dst);
    return dst;
  }
  static std::string* dir_;
  static json* reference_;
};
std::string* HfModelsTest::dir_ = nullptr;
json* HfModelsTest::reference_ = nullptr;

// The message of the PermanentError `f` throws ("" if it throws none).
template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const PermanentError& e) {
    return e.what();
  }
  return "";
}

TEST_F(HfModelsTest, LogitsEqualTransformersInEvaluation) {
  for (const std::string name : kCases) {
    const json& ref = Case(name);
    std::shared_ptr<SequenceModel> model = LoadPretrained(Folder(name));
    model->eval();
    auto [tokens, pad_mask] = Inputs(ref["arch"].get<std::string>());
    torch::NoGradGuard no_grad;
    const torch::Tensor logits = model->forward(tokens, pad_mask);
    const double diff = (logits - FromJson(ref["logits"], torch::kFloat)).abs().max().item<double>();
    std::printf("%-16s max |logit - transformers'| %.2e\n", name.c_str(), diff);
    EXPECT_LT(diff, 1e-4) << name;
  }
}

// Mean cross-entropy against the reference labels, one backward: the gradients of the
// parameters the reference lists, relative to the largest reference entry.
TEST_F(HfModelsTest, FirstStepGradientsEqualTransformers) {
  for (const std::string name : kCases) {
    for (int checkpoint_every : {0, 1}) {  // activation checkpointing changes nothing
      const json& ref = Case(name);
      std::shared_ptr<SequenceModel> model = LoadPretrained(Folder(name));
      model->train();
      model->set_activation_checkpointing(checkpoint_every);
      auto [tokens, pad_mask] = Inputs(ref["arch"].get<std::string>());
      torch::nn::functional::cross_entropy(model->forward(tokens, pad_mask), Targets()).backward();
      auto params = model->named_parameters();
      double worst = 0;
      for (const auto& [param, grad] : ref["grads"].items()) {
        ASSERT_TRUE(params.contains(param)) << param;
        const torch::Tensor expected = FromJson(grad, torch::kFloat);
        const torch::Tensor got = params[param].grad();
        ASSERT_TRUE(got.defined()) << name << " " << param;
        const double rel = (got - expected).abs().max().item<double>() / expected.abs().max().item<double>();
        worst = std::max(worst, rel);
        EXPECT_LT(rel, 1e-4) << name << " " << param;
      }
      std::printf("%-16s checkpointing %d: max relative gradient difference %.2e\n", name.c_str(), checkpoint_every, worst);
    }
  }
}

// A bare BertModel's folder (names without "bert.", no head): the encoder as saved, a new
// head initialised as transformers does (normal(0, initializer_range), zero bias).
TEST_F(HfModelsTest, ABareEncoderGetsANewHead) {
  std::shared_ptr<SequenceModel> model = LoadPretrained(Folder("bert_bare"));
  const HfWeights weights = HfWeights::Open(Folder("bert_bare"));
  auto params = model->named_parameters();
  EXPECT_TRUE(torch::equal(params["bert.pooler.dense.weight"], weights.Float("pooler.dense.weight")));
  EXPECT_TRUE(torch::equal(params["bert.encoder.layer.1.output.LayerNorm.bias"],
                           weights.Float("encoder.layer.1.output.LayerNorm.bias")));
  EXPECT_EQ(params["classifier.bias"].abs().max().item<float>(), 0.0f);
  const double std = params["classifier.weight"].std().item<double>();
  EXPECT_GT(std, 0.01);
  EXPECT_LT(std, 0.04);
}

TEST_F(HfModelsTest, AMissingFileIsNamed) {
  const std::string empty = testing::FreshDir("hf_empty");
  EXPECT_NE(ErrorOf([&] { LoadPretrained(empty); }).find(empty + "/config.json"), std::string::npos);
  const std::string dir = CopyOf("bert", "no_weights");
  fs::remove(dir + "/model.safetensors");
  EXPECT_NE(ErrorOf([&] { LoadPretrained(dir); }).find("model.safetensors"), std::string::npos);
  const std::string sharded = CopyOf("bert_sharded", "lost_shard");
  fs::remove(sharded + "/model-00003-of-00005.safetensors");
  EXPECT_NE(ErrorOf([&] { LoadPretrained(sharded); }).find("model-00003-of-00005.safetensors"), std::string::npos);
}

// With the worker's data roots (TrainConfig::data_roots), every file of the folder is
// opened beneath them: a link inside the roots is followed (a Hugging Face cache's
// snapshot links to its blobs), one that leads out is refused, whether it is a weight
// file, a shard, the shard index or config.json.
TEST_F(HfModelsTest, AFolderInsideTheRootsCannotLinkOutOfThem) {
  const std::string root = testing::FreshDir("hf_root");
  const std::string blobs = root + "/blobs", snapshot = root + "/snapshots/abc";
  fs::create_directories(blobs);
  fs::create_directories(snapshot);
  for (const char* name : {"config.json", "model.safetensors"}) {
    fs::copy_file(Folder("bert") + "/" + name, blobs + "/" + name);
    fs::create_symlink("../../blobs/" + std::string(name), snapshot + "/" + name);
  }
  HfConfig config;
  ASSERT_NE(LoadPretrained(snapshot, {}, &config, {root}), nullptr);
  EXPECT_EQ(config.model_type, "bert");

  // (the file linked, the reference folder it is in, outside the root)
  const std::pair<std::string, std::string> out_of_root[] = {{"model.safetensors", "bert"},
                                                             {"config.json", "bert"},
                                                             {"model.safetensors.index.json", "bert_sharded"},
                                                             {"model-00002-of-00005.safetensors", "bert_sharded"}};
  for (const auto& [name, source] : out_of_root) {
    SCOPED_TRACE(name);
    const std::string dir = root + "/linked";
    fs::remove_all(dir);
    fs::copy(Folder(source), dir);
    fs::remove(dir + "/" + name);
    fs::create_symlink(Folder(source) + "/" + name, dir + "/" + name);
    ASSERT_NE(LoadPretrained(dir), nullptr) << "without roots, the link is followed";
    const std::string error = ErrorOf([&] { LoadPretrained(dir, {}, nullptr, {root}); });
    EXPECT_NE(error.find(dir + "/" + name + " leads out of the data roots"), std::string::npos) << error;
  }
}

// config.json values we do not implement: the key and the value are named.
TEST_F(HfModelsTest, AnUnsupportedConfigNamesTheKeyAndValue) {
  const json base = json::parse(ReadAll(Folder("bert") + "/config.json"));
  const std::pair<std::string, json> bad[] = {{"model_type", "xlnet"}, {"hidden_act", "gelu_new"},
                                              {"position_embedding_type", "relative_key"}, {"is_decoder", true},
                                              {"hidden_size", "32"}};
  for (const auto& [key, value] : bad) {
    const std::string dir = CopyOf("bert", "bad_config");
    json c = base;
    c[key] = value;
    WriteAll(dir + "/config.json", c.dump());
    const std::string e = ErrorOf([&] { LoadPretrained(dir); });
    EXPECT_NE(e.find(dir + "/config.json: " + key), std::string::npos) << e;
    EXPECT_NE(e.find(value.is_string() ? value.get<std::string>() : value.dump()), std::string::npos) << e;
  }
}

// A header whose shape does not fit its offsets, and a file cut short: both name the file,
// the first the tensor.
TEST_F(HfModelsTest, ALyingSafetensorsHeaderIsAnError) {
  const std::string dir = CopyOf("bert", "lying");
  const std::string path = dir + "/model.safetensors";
  std::string bytes = ReadAll(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  json header = json::parse(bytes.substr(8, n));
  header["classifier.bias"]["shape"] = {4};  // 3 floats in the data
  std::string text = header.dump();
  ASSERT_LE(text.size(), n);
  text.append(n - text.size(), ' ');
  WriteAll(path, bytes.substr(0, 8) + text + bytes.substr(8 + n));
  std::string e = ErrorOf([&] { LoadPretrained(dir); });
  EXPECT_NE(e.find(path + ": classifier.bias"), std::string::npos) << e;

  WriteAll(path, bytes.substr(0, bytes.size() - 4));
  e = ErrorOf([&] { LoadPretrained(dir); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
}

// Writes `tensors` (float32) as dir/model.safetensors.
void WriteWeights(const std::string& dir, const std::map<std::string, torch::Tensor>& tensors) {
  std::vector<format::SafetensorsTensor> header;
  for (const auto& [name, t] : tensors) header.push_back({name, format::DType::kF32, t.sizes().vec(), 0, 0});
  std::string bytes = format::SafetensorsHeaderBytes(&header, {});
  for (const auto& [name, t] : tensors)
    bytes.append(static_cast<const char*>(t.contiguous().data_ptr()), t.numel() * sizeof(float));
  WriteAll(dir + "/model.safetensors", bytes);
}

TEST_F(HfModelsTest, ALeftOverOrMissingTensorIsListed) {
  const HfWeights weights = HfWeights::Open(Folder("bert"));
  std::map<std::string, torch::Tensor> tensors;
  for (const std::string& name : weights.names()) tensors[name] = weights.Float(name);

  const std::string dir = CopyOf("bert", "leftover");
  auto extra = tensors;
  extra["bert.encoder.layer.9.output.dense.weight"] = torch::zeros({32, 48});
  extra.erase("bert.pooler.dense.weight");
  WriteWeights(dir, extra);
  std::string e = ErrorOf([&] { LoadPretrained(dir); });
  EXPECT_NE(e.find("missing bert.pooler.dense.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("not used bert.encoder.layer.9.output.dense.weight"), std::string::npos) << e;

  auto half_head = tensors;  // a head is new or whole, never half
  half_head.erase("classifier.bias");
  WriteWeights(dir, half_head);
  e = ErrorOf([&] { LoadPretrained(dir); });
  EXPECT_NE(e.find("missing classifier.bias"), std::string::npos) << e;

  // A head of other labels: its shape is named.
  WriteWeights(dir, tensors);
  json c = json::parse(ReadAll(dir + "/config.json"));
  c["id2label"] = {{"0", "no"}, {"1", "yes"}};
  WriteAll(dir + "/config.json", c.dump());
  e = ErrorOf([&] { LoadPretrained(dir); });
  EXPECT_NE(e.find("classifier.weight has shape [3, 32]"), std::string::npos) << e;
}

TEST_F(HfModelsTest, AShardIndexThatLiesIsAnError) {
  const std::string dir = CopyOf("bert_sharded", "lying_index");
  json index = json::parse(ReadAll(dir + "/model.safetensors.index.json"));
  const std::string moved = index["weight_map"].begin().key();
  const std::string was = index["weight_map"][moved];
  index["weight_map"][moved] = was == "model-00002-of-00005.safetensors" ? "model-00003-of-00005.safetensors"
                                                                          : "model-00002-of-00005.safetensors";
  WriteAll(dir + "/model.safetensors.index.json", index.dump());
  const std::string e = ErrorOf([&] { LoadPretrained(dir); });
  EXPECT_NE(e.find(moved), std::string::npos) << e;
}

// kB of the "Key:" line of /proc/self/status (VmRSS, VmHWM).
int64_t StatusKb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  return -1;
}

// The BERT-base folder of the loading-memory check (110 million parameters, F32 in 100 MB
// shards, 438 MB): NIGHTSHIFT_HF_BIG_FOLDER if set, else made on demand by
// `hf_models_reference.py --bert-base` (random weights, bert-base-uncased's sizes, written
// by transformers' save_pretrained; about 8 s on 2 cores) once, into the cache where
// scripts/fetch-data.sh keeps the corpus's package ($NIGHTSHIFT_DATA_CACHE, default
// ~/.cache/nightshift), keyed like the references above (the script and the versions of
// torch, transformers and tokenizers); the folders of other keys there are removed.
std::string BigFolder(std::string* error) {
  if (const char* dir = std::getenv("NIGHTSHIFT_HF_BIG_FOLDER"); dir != nullptr && *dir != '\0') return dir;
  const char* cache = std::getenv("NIGHTSHIFT_DATA_CACHE");
  const char* home = std::getenv("HOME");
  const std::string root = cache != nullptr && *cache != '\0' ? std::string(cache)
                           : home != nullptr && *home != '\0' ? std::string(home) + "/.cache/nightshift"
                                                               : ::testing::TempDir();
  const std::string script = std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/hf_models_reference.py";
  const std::string dir = testing::SharedFolder(
      "hf_bert_base", std::string(NIGHTSHIFT_PYTHON) + " " + script + " --bert-base {dir}", {script}, NIGHTSHIFT_PYTHON,
      error, root);
  if (!dir.empty()) testing::RemoveOtherSharedFolders(root, "hf_bert_base", dir);
  return dir;
}

// Loading BERT-base raises the peak resident set by about its size on disk (issue 27: at
// most 1.2x).
TEST(HfWeightsMemory, LoadingCostsAboutTheWeightsSize) {
  std::string error;
  const std::string dir = BigFolder(&error);
  ASSERT_FALSE(dir.empty()) << error;
  uint64_t disk = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors") disk += entry.file_size();
  const int64_t before_kb = StatusKb("VmRSS");
  WriteAll("/proc/self/clear_refs", "5");  // the peak (VmHWM) starts again from here
  std::shared_ptr<SequenceModel> model = LoadPretrained(dir);
  const int64_t peak_kb = StatusKb("VmHWM");
  const double ratio = double(peak_kb - before_kb) * 1024 / double(disk);
  std::printf("%s: %.1f MB of weights, peak resident set +%.1f MB (%.2fx)\n", dir.c_str(), disk / 1e6,
              (peak_kb - before_kb) * 1024 / 1e6, ratio);
  EXPECT_LT(ratio, 1.2);
}

}  // namespace
}  // namespace nightshift::trainer::hf
