// The Hugging Face decoders (models/gpt2.h, llama.h for llama, mistral and qwen2; decoder.h's
// heads) against transformers itself: hf_decoders_reference.py (run here with
// NIGHTSHIFT_PYTHON) saves tiny random ...ForCausalLM and ...ForSequenceClassification
// folders and writes transformers' logits, first-step gradients and greedy continuations;
// ours must equal them (1e-4 absolute for logits, 1e-4 relative for gradients, the same
// tokens). Then packed rows against separate ones, what a bad config gives, and the
// trainer's techniques on decoders (packed rows with prompts, the out-of-memory split, data
// parallelism, bf16 autocast, dropout with activation checkpointing, whole runs resumed).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <cstdlib>
#include <functional>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "common/format/safetensors.h"
#include "tests/worker/trainer/ranks_util.h"
#include "tests/worker/trainer/reference_util.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/optim/amp.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/parallel/ddp.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/fault_injection.h"
#include "worker/trainer/models/hf_weights.h"
#include "worker/trainer/memory/oom.h"
#include "worker/trainer/train.h"
#include "worker/trainer/models/model.h"
#include "worker/trainer/models/decoder.h"
#include "worker/trainer/models/pretrained.h"

#ifndef NIGHTSHIFT_PYTHON
#define NIGHTSHIFT_PYTHON "/opt/nightshift/venv/bin/python"
#endif

namespace nightshift::trainer::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FromJson;
using testing::ReadAll;

const char* const kArchs[] = {"gpt2", "llama", "llama_tied", "mistral", "qwen2"};

class HfDecodersTest : public ::testing::Test {
 protected:
  // The reference folders, made once per version of the script and of torch, transformers
  // and tokenizers, and shared by the test processes (testing::SharedFolder).
  static void SetUpTestSuite() {
    const std::string script = std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/hf_decoders_reference.py";
    std::string error;
    const std::string command = std::string(NIGHTSHIFT_PYTHON) + " " + script + " {dir}";
    dir_ = new std::string(testing::SharedFolder("nightshift_hf_decoders", command, {script}, NIGHTSHIFT_PYTHON, &error));
    ASSERT_FALSE(dir_->empty()) << error;
    reference_ = new json(json::parse(ReadAll(*dir_ + "/reference.json")));
  }
  void SetUp() override { ASSERT_NE(reference_, nullptr) << "hf_decoders_reference.py failed"; }
  static std::string Folder(const std::string& name) { return *dir_ + "/" + name; }
  static const json& Case(const std::string& name) { return (*reference_)["cases"][name]; }
  static const json& Ref() { return *reference_; }
  // The reference batch: tokens [B, L], padding at the ends of rows.
  static Batch Inputs() {
    Batch b;
    b.tokens = FromJson(Ref()["input_ids"], torch::kLong);
    b.pad_mask = FromJson(Ref()["attention_mask"], torch::kLong).eq(0);
    b.labels = FromJson(Ref()["labels"], torch::kLong);
    b.samples = b.tokens.size(0);
    return b;
  }
  static std::shared_ptr<SequenceModel> Load(const std::string& arch, const std::string& task) {
    PretrainedOptions options;
    options.task = task == "lm" ? "causal_lm" : "classification";
    return LoadPretrained(Folder(arch + "_" + task), options);
  }
  static std::string* dir_;
  static json* reference_;
};
std::string* HfDecodersTest::dir_ = nullptr;
json* HfDecodersTest::reference_ = nullptr;

template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const PermanentError& e) {
    return e.what();
  }
  return "";
}

TEST_F(HfDecodersTest, LogitsEqualTransformersInEvaluation) {
  for (const std::string arch : kArchs) {
    for (const std::string task : {"lm", "cls"}) {
      const json& ref = Case(arch + "_" + task);
      std::shared_ptr<SequenceModel> model = Load(arch, task);
      model->eval();
      const Batch b = Inputs();
      torch::NoGradGuard no_grad;
      torch::Tensor logits = model->forward(b.tokens, b.pad_mask), expected = FromJson(ref["logits"], torch::kFloat);
      ASSERT_EQ(logits.sizes(), expected.sizes()) << arch << " " << task;
      if (task == "lm") {  // padded positions are nobody's prediction
        logits = logits.index({b.pad_mask.logical_not()});
        expected = expected.index({b.pad_mask.logical_not()});
      }
      const double diff = (logits - expected).abs().max().item<double>();
      std::printf("%-10s %-3s max |logit - transformers'| %.2e\n", arch.c_str(), task.c_str(), diff);
      EXPECT_LT(diff, 1e-4) << arch << " " << task;
    }
  }
}

// The trainer's objective (ComputeLossSum: next-token for causal LM, cross-entropy against
// the labels for classification), its mean, one backward: the gradients transformers gives
// for its own loss, relative to the largest reference entry, with and without activation
// checkpointing.
TEST_F(HfDecodersTest, FirstStepGradientsEqualTransformers) {
  for (const std::string arch : kArchs) {
    for (const std::string task : {"lm", "cls"}) {
      for (int checkpoint_every : {0, 1}) {
        const json& ref = Case(arch + "_" + task);
        std::shared_ptr<SequenceModel> model = Load(arch, task);
        model->train();
        model->set_activation_checkpointing(checkpoint_every);
        const Batch b = Inputs();
        const LossSum loss = ComputeLossSum(model->forward(b.tokens, b.pad_mask), b, task == "lm");
        EXPECT_NEAR(loss.sum.item<double>() / loss.count, ref["loss"].get<double>(), 1e-5) << arch << " " << task;
        (loss.sum / loss.count).backward();
        auto params = model->named_parameters();
        double worst = 0;
        for (const auto& [param, grad] : ref["grads"].items()) {
          ASSERT_TRUE(params.contains(param)) << arch << " " << task << " " << param;
          const torch::Tensor expected = FromJson(grad, torch::kFloat), got = params[param].grad();
          ASSERT_TRUE(got.defined()) << arch << " " << task << " " << param;
          const double rel = (got - expected).abs().max().item<double>() / expected.abs().max().item<double>();
          worst = std::max(worst, rel);
          EXPECT_LT(rel, 1e-4) << arch << " " << task << " " << param;
        }
        std::printf("%-10s %-3s checkpointing %d: max relative gradient difference %.2e\n", arch.c_str(),
                    task.c_str(), checkpoint_every, worst);
      }
    }
  }
}

// model.generate(do_sample=False): the same tokens, with the key/value cache and without.
TEST_F(HfDecodersTest, GreedyContinuationEqualsTransformersGenerate) {
  const std::vector<int64_t> prompt = Ref()["prompt"].get<std::vector<int64_t>>();
  for (const std::string arch : kArchs) {
    auto model = std::dynamic_pointer_cast<DecoderModelImpl>(Load(arch, "lm"));
    ASSERT_NE(model, nullptr);
    model->eval();
    const auto expected = Case(arch + "_lm")["generated"].get<std::vector<int64_t>>();
    const std::vector<int64_t> stop = {Ref()["eos"].get<int64_t>()};
    EXPECT_EQ(Generate(*model, prompt, Ref()["new_tokens"].get<int64_t>(), stop, /*use_cache=*/true), expected)
        << arch;
    EXPECT_EQ(Generate(*model, prompt, Ref()["new_tokens"].get<int64_t>(), stop, /*use_cache=*/false), expected)
        << arch;
  }
}

// Two samples packed into one row (positions restart, attention stays inside each) give
// each sample's logits alone.
TEST_F(HfDecodersTest, APackedRowEqualsItsSamplesRunAlone) {
  for (const std::string arch : kArchs) {
    auto model = std::dynamic_pointer_cast<DecoderModelImpl>(Load(arch, "lm"));
    model->eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor a = torch::tensor({1, 17, 42, 5, 77}, torch::kLong), c = torch::tensor({1, 9, 30}, torch::kLong);
    const torch::Tensor positions = torch::cat({torch::arange(5), torch::arange(3)}).view({1, -1});
    const torch::Tensor segments = torch::cat({torch::zeros({5}), torch::ones({3})}).to(torch::kLong).view({1, -1});
    const torch::Tensor packed = model->forward_packed(torch::cat({a, c}).view({1, -1}), positions, segments);
    const torch::Tensor alone = torch::cat({model->forward_cached(a.view({1, -1}), nullptr),
                                            model->forward_cached(c.view({1, -1}), nullptr)}, 1);
    EXPECT_LT((packed - alone).abs().max().item<double>(), 1e-5) << arch;
  }
}

TEST_F(HfDecodersTest, AnUnsupportedConfigNamesTheKeyAndValue) {
  const std::pair<std::string, std::string> cases[] = {
      {R"("rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})",
       "rope_parameters.rope_type \"linear\" is not supported"},
      {R"("hidden_act": "gelu")", "hidden_act \"gelu\" is not supported"},
      {R"("num_key_value_heads": 3)", "num_attention_heads 4 is not a multiple of num_key_value_heads 3"}};
  for (const auto& [entry, message] : cases) {
    const std::string dir = testing::FreshDir("hf_decoders_bad_config");
    fs::remove_all(dir);
    fs::copy(Folder("llama_cls"), dir, fs::copy_options::recursive);
    json c = json::parse(ReadAll(dir + "/config.json"));
    const json changes = json::parse("{" + entry + "}");
    for (const auto& [k, v] : changes.items()) c[k] = v;
    std::ofstream(dir + "/config.json") << c.dump();
    const std::string error = ErrorOf([&] { LoadPretrained(dir); });
    EXPECT_NE(error.find(dir + "/config.json: " + message), std::string::npos) << error;
  }
  PretrainedOptions lm;
  lm.task = "summarize";
  EXPECT_NE(ErrorOf([&] { LoadPretrained(Folder("gpt2_lm"), lm); }).find("model.task summarize is not available"),
            std::string::npos);
}

// A causal LM from a classifier's folder (and the reverse): the base model is the folder's,
// the other task's head is dropped, and an untied head the folder lacks is new.
TEST_F(HfDecodersTest, TheOtherTasksFolderGivesTheBaseAndANewHead) {
  PretrainedOptions lm;
  lm.task = "causal_lm";
  auto from_cls = LoadPretrained(Folder("llama_cls"), lm)->named_parameters();
  auto cls = Load("llama", "cls")->named_parameters();
  EXPECT_TRUE(torch::equal(from_cls["model.layers.1.mlp.up_proj.weight"], cls["model.layers.1.mlp.up_proj.weight"]));
  EXPECT_FALSE(from_cls.contains("score.weight"));
  const double std = from_cls["lm_head.weight"].std().item<double>();
  EXPECT_GT(std, 0.01);
  EXPECT_LT(std, 0.04);
  PretrainedOptions three_labels;
  three_labels.labels = {"ham", "spam", "eggs"};
  auto from_lm = LoadPretrained(Folder("qwen2_lm"), three_labels)->named_parameters();
  EXPECT_EQ(from_lm["score.weight"].size(0), 3);
  EXPECT_FALSE(from_lm.contains("lm_head.weight"));
}

// --- The trainer's techniques on decoders (llama_lm, gpt2_lm: the reference folders). ---

constexpr int kVocab = 96, kMaxLen = 16;

std::string LmShard() {
  static const std::string path = testing::FreshDir("hf_decoders_lm") + "/lm.shard";
  return path;
}

// A batch of LM samples with prompts (test_util.h), packed or one per row.
Batch LmBatch(const std::string& shard_path, bool packed) {
  static format::ShardReader* shard = nullptr;
  if (shard == nullptr) {
    testing::WriteSyntheticLmShard(shard_path, 12, 5, kVocab, kMaxLen, /*with_prompts=*/true);
    shard = new format::ShardReader();
    EXPECT_EQ(shard->Open(shard_path, true), "");
  }
  std::vector<uint32_t> all(shard->num_samples());
  std::iota(all.begin(), all.end(), 0u);
  return Collate(*shard, all, kMaxLen, /*pad_id=*/0, packed);
}

// chunked: training's loss (NextTokenLossSum: the head and loss a chunk at a time);
// otherwise the logits' (ComputeLossSum).
std::map<std::string, torch::Tensor> StepGradients(SequenceModel& model, const Batch& b, LossSum* loss,
                                                   bool chunked = false) {
  model.zero_grad();
  *loss = chunked ? NextTokenLossSum(model, b) : ComputeLossSum(Logits(model, b), b, /*next_token=*/true);
  loss->sum.backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model.named_parameters()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

double WorstRelative(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  double worst = 0;
  for (const auto& [name, g] : a)
    worst = std::max(worst, (g - b.at(name)).abs().max().item<double>() / std::max(b.at(name).abs().max().item<double>(), 1e-12));
  return worst;
}

// Packed rows (attention and positions kept inside each sample) take the step that one
// sample per padded row takes: the same loss over the same targets (prompts excluded),
// the same gradients; in fewer, fuller rows.
TEST_F(HfDecodersTest, PackedRowsTakeTheStepOfPaddedRows) {
  const Batch padded = LmBatch(LmShard(), false), packed = LmBatch(LmShard(), true);
  EXPECT_LT(packed.rows(), padded.rows());
  EXPECT_EQ(packed.samples, padded.samples);
  EXPECT_EQ(packed.real_tokens, padded.real_tokens);
  EXPECT_LT(LossCount(padded, true), padded.real_tokens - padded.samples) << "some samples have prompts";
  for (const std::string arch : {"llama", "gpt2"}) {
    auto model = Load(arch, "lm");
    model->train();
    LossSum a, b;
    const auto ga = StepGradients(*model, padded, &a), gb = StepGradients(*model, packed, &b);
    EXPECT_EQ(a.count, b.count) << arch;
    EXPECT_NEAR(a.sum.item<double>(), b.sum.item<double>(), 1e-4 * a.sum.item<double>()) << arch;
    EXPECT_LT(WorstRelative(gb, ga), 1e-4) << arch;
  }
}

// Training's chunked head and loss (lm_loss.h) take the step the whole logits take, on
// padded and packed rows, untied (Llama) and tied (GPT-2) heads.
TEST_F(HfDecodersTest, TheChunkedLossTakesTheStepOfTheWholeLogits) {
  for (const bool packed : {false, true}) {
    const Batch b = LmBatch(LmShard(), packed);
    for (const std::string arch : {"llama", "gpt2"}) {
      SCOPED_TRACE(arch + (packed ? " packed" : " padded"));
      auto model = Load(arch, "lm");
      LossSum whole, chunked;
      const auto gw = StepGradients(*model, b, &whole), gc = StepGradients(*model, b, &chunked, true);
      EXPECT_EQ(whole.count, chunked.count);
      EXPECT_NEAR(chunked.sum.item<double>(), whole.sum.item<double>(), 1e-6 * whole.sum.item<double>());
      EXPECT_LT(WorstRelative(gc, gw), 1e-5);
    }
  }
}

// Evaluation's chunked head (lm_loss.h) gives the loss and next-token accuracy of the whole
// logits.
TEST_F(HfDecodersTest, EvaluationOfADecoderIsTheWholeLogits) {
  const Batch b = LmBatch(LmShard(), false);
  for (const std::string arch : {"llama", "gpt2"}) {
    SCOPED_TRACE(arch);
    auto model = Load(arch, "lm");
    model->eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor logits = Logits(*model, b);
    const LossSum whole = ComputeLossSum(logits, b, true);
    const int64_t l = b.tokens.size(1);
    const int64_t correct =
        (logits.narrow(1, 0, l - 1).argmax(-1).eq(b.tokens.narrow(1, 1, l - 1)) & NextTokenTargets(b)).sum().item<int64_t>();
    format::ShardReader shard;
    ASSERT_EQ(shard.Open(LmShard(), true), "");
    std::vector<uint32_t> all(shard.num_samples());
    std::iota(all.begin(), all.end(), 0u);
    const EvalMetrics m = Evaluate(*model, shard, {all}, kMaxLen, 0, 0, /*next_token=*/true);
    EXPECT_NEAR(m.loss, whole.sum.item<double>() / double(whole.count), 1e-5);
    EXPECT_DOUBLE_EQ(m.accuracy, double(correct) / double(whole.count));
  }
}

// A packed batch that runs out of memory is split by rows into micro-batches: the same step.
TEST_F(HfDecodersTest, OutOfMemorySplitOfPackedRowsTakesTheSameStep) {
  const Batch packed = LmBatch(LmShard(), true);
  auto run = [&](const FaultInjector& faults, MicroBatchResult* result) {
    auto model = Load("llama", "lm");
    model->train();
    const double count = double(LossCount(packed, true));
    MicroBatchRunner runner{OomOptions{}};
    *result = runner.Run(
        packed,
        [&](const Batch& micro, bool, bool) {
          faults.BeforeMicroBatch(micro.padded_tokens);
          torch::Tensor loss = ComputeLossSum(Logits(*model, micro), micro, true).sum / count;
          loss.backward();
          return loss.item<double>();
        },
        [&] { model->zero_grad(); });
    std::map<std::string, torch::Tensor> grads;
    for (const auto& p : model->named_parameters()) grads[p.key()] = p.value().grad().clone();
    return grads;
  };
  MicroBatchResult whole, split;
  const auto expected = run(FaultInjector(), &whole);
  const auto got = run(FaultInjector(FaultPlan{.oom_above_tokens = 2 * kMaxLen}), &split);
  EXPECT_EQ(whole.micro_batches, 1);
  EXPECT_GE(split.micro_batches, 2);
  EXPECT_LT(WorstRelative(got, expected), 1e-5);
}

// Two ranks with half the packed rows each take the step of one rank with all of them.
TEST_F(HfDecodersTest, TwoRanksOnPackedRowsTakeTheStepOfOne) {
  const Batch packed = LmBatch(LmShard(), true);
  const int64_t half = packed.rows() / 2;
  const double count = double(LossCount(packed, true));
  const int port = testing::FreePort();
  std::vector<std::vector<torch::Tensor>> after(2);
  testing::RunRanks(2, [&](int r) {
    auto model = Load("qwen2", "lm");
    GradientSync sync(ProcessGroup::Create(testing::Options(r, 2, port)), model->parameters(), GradientSyncOptions{});
    sync.Broadcast(model->parameters());
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
    const Batch mine = SliceBatch(packed, r == 0 ? 0 : half, r == 0 ? half : packed.rows());
    // GradientSync averages over ranks: each rank's share of the whole batch's mean, x2.
    (ComputeLossSum(Logits(*model, mine), mine, true).sum * (2.0 / count)).backward();
    sync.Finish();
    opt.step();
    for (const auto& p : model->parameters()) after[r].push_back(p.detach().clone());
  });
  auto ref = Load("qwen2", "lm");
  torch::optim::SGD opt(ref->parameters(), torch::optim::SGDOptions(0.5));
  (ComputeLossSum(Logits(*ref, packed), packed, true).sum / count).backward();
  opt.step();
  const auto ref_params = ref->parameters();
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < ref_params.size(); ++i)
      EXPECT_LE((after[r][i] - ref_params[i]).abs().max().item<double>(),
                1e-5 * std::max(ref_params[i].abs().max().item<double>(), 1e-6)) << "rank " << r << " tensor " << i;
}

// --- Weights shared through the folder's mapping (hf_weights.h). ---

// kB of the "Anonymous:" line of /proc/self/smaps for the mapping that holds `address`:
// the pages of a file mapping this process has written (its private copies); -1: none.
int64_t WrittenKbOfMappingAt(const void* address) {
  std::ifstream in("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    const std::string first = line.substr(0, line.find(' '));
    if (first.find('-') != std::string::npos && first.find(':') == std::string::npos) {  // a mapping's first line
      const uintptr_t begin = std::stoull(first.substr(0, first.find('-')), nullptr, 16);
      const uintptr_t end = std::stoull(first.substr(first.find('-') + 1), nullptr, 16);
      inside = at >= begin && at < end;
    } else if (inside && first == "Anonymous:") {
      return std::stoll(line.substr(first.size()));
    }
  }
  return -1;
}

// An F32 folder's parameters are views of its mapped file: no private copy while loading,
// the loaded numbers (the logits tests), a new head of the job's own; training writes its
// own pages and never the file, which loads again unchanged.
// The bytes of each weight file of `dir` (llama_lm is sharded), by name.
std::map<std::string, std::string> WeightFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files[e.path().string()] = ReadAll(e.path().string());
  return files;
}

TEST_F(HfDecodersTest, F32WeightsAreViewsOfTheFileThatTrainingNeverWrites) {
  const auto files = WeightFiles(Folder("llama_lm"));
  ASSERT_EQ(files.size(), 5u);
  auto model = Load("llama", "lm");
  std::vector<torch::Tensor> loaded;
  for (const auto& p : model->named_parameters()) {
    EXPECT_TRUE(MappedWeightFingerprint(p.value()).has_value()) << p.key();
    loaded.push_back(p.value().detach().clone());
  }
  const void* first = model->parameters().front().data_ptr();
  EXPECT_EQ(WrittenKbOfMappingAt(first), 0);

  const Batch b = LmBatch(LmShard(), true);
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
  ComputeLossSum(Logits(*model, b), b, true).sum.backward();
  opt.step();
  EXPECT_GT(WrittenKbOfMappingAt(first), 0) << "the step wrote this process's own pages";
  EXPECT_FALSE(torch::equal(model->parameters().front(), loaded.front()));
  EXPECT_TRUE(WeightFiles(Folder("llama_lm")) == files) << "the files are never written";
  auto again = Load("llama", "lm");
  const auto params = again->parameters();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], loaded[i])) << i;

  PretrainedOptions options;  // classification with other labels: a new head, not a view
  options.labels = {"a", "b", "c"};
  auto classifier = LoadPretrained(Folder("llama_lm"), options);
  for (const auto& p : classifier->named_parameters())
    EXPECT_EQ(MappedWeightFingerprint(p.value()).has_value(), p.key().rfind("score.", 0) != 0) << p.key();
}

// Two ranks that map the same folder start data parallelism without writing a page of it
// (rank 0's copy is theirs already); a rank whose folder differs, or ranks whose weights a
// resume wrote, get rank 0's weights.
TEST_F(HfDecodersTest, RanksMappingOneFolderStartWithoutCopyingIt) {
  const std::string other = testing::FreshDir("hf_decoders_other_copy");
  fs::copy(Folder("llama_lm"), other, fs::copy_options::recursive);
  int zeroed = 0;  // the other copy's final norm is zeros
  for (auto [path, bytes] : WeightFiles(other)) {
    format::SafetensorsHeader h;
    ASSERT_EQ(format::ReadSafetensorsHeader(path, &h), "");
    for (const auto& t : h.tensors)
      if (t.name == "model.norm.weight") std::memset(&bytes[t.begin], 0, t.end - t.begin), ++zeroed;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  ASSERT_EQ(zeroed, 1);
  struct Case {
    bool same, as_loaded;  // rank 1 maps rank 0's folder; nothing wrote the weights since
  };
  for (const Case c : {Case{true, true}, Case{false, true}, Case{true, false}}) {
    const bool same = c.same;
    SCOPED_TRACE(std::string(same ? "same folder" : "rank 1's folder differs") + (c.as_loaded ? "" : ", resumed"));
    const int port = testing::FreePort();
    std::vector<std::vector<torch::Tensor>> params(2);
    std::vector<int64_t> written(2, -1);
    testing::RunRanks(2, [&](int r) {
      PretrainedOptions options;
      options.task = "causal_lm";
      auto model = LoadPretrained(r == 1 && !same ? other : Folder("llama_lm"), options);
      TrainConfig cfg;
      cfg.data_parallel.world_size = 2;
      cfg.data_parallel.timeout_seconds = 20;
      auto sync = StartDataParallel(cfg, testing::LoopbackRank(r, 2, port), *model, c.as_loaded);
      written[r] = WrittenKbOfMappingAt(model->parameters().front().data_ptr());
      for (const auto& p : model->parameters()) params[r].push_back(p.detach().clone());
      sync->group().Barrier();
    });
    if (same && c.as_loaded) EXPECT_EQ(written, (std::vector<int64_t>{0, 0}));
    else EXPECT_GT(written[1], 0) << "rank 1 took rank 0's weights";
    for (size_t i = 0; i < params[0].size(); ++i) EXPECT_TRUE(torch::equal(params[0][i], params[1][i])) << i;
  }
}

// Dropout on (GPT-2's embedding, attention and residual dropout): the explicit attention
// path, checkpointed layers recompute the same masks; at a probability too small to drop
// anything the explicit path gives SDPA's logits; bf16 autocast stays close to fp32.
TEST_F(HfDecodersTest, DropoutCheckpointingAndAutocastOnDecoders) {
  const Batch b = LmBatch(LmShard(), true);
  PretrainedOptions options;
  options.task = "causal_lm";
  options.dropout = options.attention_dropout = 0.1;
  auto model = LoadPretrained(Folder("gpt2_lm"), options);
  model->train();
  auto grads = [&](int every, uint64_t seed) {
    model->set_activation_checkpointing(every);
    torch::manual_seed(seed);
    LossSum loss;
    return StepGradients(*model, b, &loss);
  };
  const auto plain = grads(0, 7);
  EXPECT_GT(WorstRelative(grads(0, 8), plain), 1e-3) << "dropout is off";
  EXPECT_LT(WorstRelative(grads(1, 7), plain), 1e-6);

  options.dropout = 0;
  options.attention_dropout = 1e-9;
  for (const char* folder : {"gpt2_lm", "mistral_lm"}) {
    auto tiny = LoadPretrained(Folder(folder), options);
    torch::NoGradGuard no_grad;
    tiny->eval();
    const torch::Tensor sdpa = Logits(*tiny, b);
    tiny->train();
    EXPECT_LE((Logits(*tiny, b) - sdpa).abs().max().item<double>(), 1e-5) << folder;
    tiny->eval();
    AutocastRegion autocast("bf16", torch::kCPU);
    const torch::Tensor bf16 = Logits(*tiny, b).to(torch::kFloat);
    EXPECT_LE((bf16 - sdpa).abs().max().item<double>(), 0.05 * std::max(1.0, sdpa.abs().max().item<double>())) << folder;
  }
}

// A causal-LM job on packed rows with prompts, a token budget and a checkpoint every 3
// steps, killed after step 5 and resumed: the same parameters, bit for bit, as a run never
// interrupted; both report validation perplexity.
TEST_F(HfDecodersTest, ACausalLmJobResumesBitIdentical) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto config = [&](const std::string& name) {
    TrainConfig c = testing::TinyConfig(testing::FreshDir(name));
    testing::WriteSyntheticLmShard(c.data.train_shard, 40, 1, kVocab, kMaxLen, true);
    testing::WriteSyntheticLmShard(c.data.val_shard, 12, 2, kVocab, kMaxLen, true);
    c.model.arch = "pretrained";
    c.model.task = "causal_lm";
    c.model.pretrained = Folder("llama_lm");
    c.model.layers = c.model.d_model = c.model.heads = c.model.ffn = 0;
    c.model.dropout = -1;
    c.model.max_len = kMaxLen;
    c.data.vocab_size = kVocab;
    c.data.num_classes = 0;
    c.train.rows = "packed";
    c.train.max_tokens = 2 * kMaxLen;
    EXPECT_EQ(ResolvePretrained(&c), "");
    return c;
  };
  auto final_parameters = [](const TrainConfig& c) {
    return testing::LatestCheckpointParameters(*JobModel(c, /*load_weights=*/false), c.checkpoint_dir);
  };
  const TrainConfig c = config("hf_lm_resume");
  EXPECT_DEATH(testing::RunUntilAbort(c, 5), "fault injection: aborting at step 5");
  ASSERT_TRUE(fs::exists(c.checkpoint_dir + "/step-00000003/COMPLETE"));
  MemoryProgressSink resumed;
  ASSERT_EQ(RunTraining(c, RankInfo{}, resumed), kExitOk) << resumed.records.back().String("message");
  EXPECT_EQ(resumed.records.front().Number("resumed_step"), 3);
  const TrainConfig whole = config("hf_lm_whole");
  MemoryProgressSink progress;
  ASSERT_EQ(RunTraining(whole, RankInfo{}, progress), kExitOk) << progress.records.back().String("message");
  EXPECT_EQ(progress.records.back().event, "done");
  const double ppl = progress.records.back().Number("val_perplexity");
  EXPECT_GT(ppl, 1);
  EXPECT_LT(ppl, 2 * kVocab);
  const auto a = final_parameters(c), b = final_parameters(whole);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

}  // namespace
}  // namespace nightshift::trainer::hf
