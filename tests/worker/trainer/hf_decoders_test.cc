// The Hugging Face decoders (models/gpt2.h, llama.h for llama, mistral and qwen2; decoder.h's
// heads) against transformers itself: hf_decoders_reference.py (run here with
// NIGHTSHIFT_PYTHON) saves tiny random ...ForCausalLM and ...ForSequenceClassification
// folders and writes transformers' logits, first-step gradients and greedy continuations;
// ours must equal them (1e-4 absolute for logits, 1e-4 relative for gradients, the same
// tokens). Then packed rows against separate ones, and what a bad config gives.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/worker/trainer/reference_util.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/model.h"
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
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::FreshDir("hf_decoders"));
    const std::string script = (fs::path(__FILE__).parent_path() / "hf_decoders_reference.py").string();
    const std::string command = std::string(NIGHTSHIFT_PYTHON) + " " + script + " " + *dir_ + " > " + *dir_ + "/log 2>&1";
    const int rc = std::system(command.c_str());
    ASSERT_EQ(rc, 0) << command << ":\n" << ReadAll(*dir_ + "/log");
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
    EXPECT_EQ(GreedyGenerate(*model, prompt, Ref()["new_tokens"].get<int64_t>(), stop, /*use_cache=*/true), expected)
        << arch;
    EXPECT_EQ(GreedyGenerate(*model, prompt, Ref()["new_tokens"].get<int64_t>(), stop, /*use_cache=*/false), expected)
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
    Segments segments;
    segments.positions = torch::cat({torch::arange(5), torch::arange(3)}).view({1, -1});
    segments.ids = torch::cat({torch::zeros({5}), torch::ones({3})}).to(torch::kLong).view({1, -1});
    const torch::Tensor packed = model->forward_packed(torch::cat({a, c}).view({1, -1}), segments);
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
    const std::string dir = Folder("bad_config");
    fs::remove_all(dir);
    fs::copy(Folder("llama_cls"), dir);
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

}  // namespace
}  // namespace nightshift::trainer::hf
