// LoRA (models/lora.h) against PEFT itself: tests/support/lora_reference.py saves a tiny
// random model of each architecture with transformers, puts a PEFT LoRA adapter on it with
// B non-zero (PEFT's default targets, named ones, all-linear, rslora, GPT-2's Conv1D) and
// writes PEFT's logits, first-step gradients and trainable-parameter count. Here the same
// base and adapter folder go through LoadPretrained, AttachLora and LoadPeftAdapter (the
// path of model.adapter.init_from); our export is then loaded back by PEFT.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/worker/trainer/reference_util.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/checkpoint/export.h"
#include "worker/trainer/errors.h"
#include "worker/trainer/models/lora.h"
#include "worker/trainer/models/pretrained.h"
#include "worker/trainer/optim/amp.h"

namespace nightshift::trainer::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FromJson;
using testing::ReadAll;

const char* const kCases[] = {"bert", "roberta", "distilbert", "gpt2", "llama", "mistral", "qwen2"};

class LoraTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string script = std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/lora_reference.py";
    std::string error;
    dir_ = new std::string(testing::SharedFolder("nightshift_lora", std::string(NIGHTSHIFT_PYTHON) + " " + script + " {dir}",
                                                 // the scripts, and the pins (peft's version among them)
                                                 {script, std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/hf_models_reference.py",
                                                  std::string(NIGHTSHIFT_SOURCE_DIR) + "/tests/support/hf_decoders_reference.py",
                                                  std::string(NIGHTSHIFT_SOURCE_DIR) + "/scripts/requirements.txt"},
                                                 NIGHTSHIFT_PYTHON, &error));
    ASSERT_FALSE(dir_->empty()) << error;
    reference_ = new json(json::parse(ReadAll(*dir_ + "/reference.json")));
  }
  void SetUp() override { ASSERT_NE(reference_, nullptr) << "lora_reference.py failed"; }
  static const json& Case(const std::string& name) { return (*reference_)["cases"][name]; }
  static std::string Base(const std::string& name) { return *dir_ + "/" + name + "/base"; }
  static std::string Adapter(const std::string& name) { return *dir_ + "/" + name + "/adapter"; }

  // The case's base model with PEFT's adapter on it, as model.adapter.init_from builds it.
  static std::shared_ptr<SequenceModel> WithPeftAdapter(const std::string& name, AttachedAdapter* attached = nullptr) {
    HfConfig config;
    std::shared_ptr<SequenceModel> model = LoadPretrained(Base(name), {}, &config);
    const AdapterConfig adapter = ReadPeftAdapterConfig(Adapter(name));
    AttachedAdapter a = AttachLora(*model, config, "classification", adapter);
    LoadPeftAdapter(Adapter(name), *model);
    if (attached) *attached = a;
    return model;
  }
  static std::pair<torch::Tensor, torch::Tensor> Inputs(const json& ref) {
    return {FromJson(ref["input_ids"], torch::kLong), FromJson(ref["attention_mask"], torch::kLong).eq(0)};
  }
  static std::string* dir_;
  static json* reference_;
};
std::string* LoraTest::dir_ = nullptr;
json* LoraTest::reference_ = nullptr;

double MaxRelative(const torch::Tensor& got, const torch::Tensor& expected) {
  return (got - expected).abs().max().item<double>() / expected.abs().max().item<double>();
}

TEST_F(LoraTest, LogitsAndTrainableCountEqualPeft) {
  for (const std::string name : kCases) {
    const json& ref = Case(name);
    AttachedAdapter attached;
    std::shared_ptr<SequenceModel> model = WithPeftAdapter(name, &attached);
    model->eval();
    auto [tokens, pad_mask] = Inputs(ref);
    torch::NoGradGuard no_grad;
    const double rel = MaxRelative(model->forward(tokens, pad_mask), FromJson(ref["logits"], torch::kFloat));
    std::printf("%-10s %zu adapted projections, %lld trainable, max relative |logit - PEFT's| %.2e\n", name.c_str(),
                attached.adapted.size(), static_cast<long long>(attached.trainable_parameters), rel);
    EXPECT_LT(rel, 1e-5) << name;
    EXPECT_EQ(attached.trainable_parameters, ref["trainable"].get<int64_t>()) << name;
  }
}

// Cross-entropy in training mode (every dropout 0), one backward: every trainable tensor's
// gradient (the updates' A and B, the head) equals PEFT's; the frozen base has none.
TEST_F(LoraTest, FirstStepGradientsEqualPeft) {
  for (const std::string name : kCases) {
    for (int checkpoint_every : {0, 1}) {
      const json& ref = Case(name);
      std::shared_ptr<SequenceModel> model = WithPeftAdapter(name);
      model->train();
      model->set_activation_checkpointing(checkpoint_every);
      auto [tokens, pad_mask] = Inputs(ref);
      torch::nn::functional::cross_entropy(model->forward(tokens, pad_mask), FromJson(ref["targets"], torch::kLong))
          .backward();
      size_t trainable = 0;
      for (const auto& p : model->named_parameters()) {
        if (!p.value().requires_grad()) {
          EXPECT_FALSE(p.value().grad().defined()) << name << " " << p.key() << " is frozen but has a gradient";
          continue;
        }
        ++trainable;
        ASSERT_TRUE(ref["grads"].contains(p.key())) << name << ": PEFT does not train " << p.key();
        ASSERT_TRUE(p.value().grad().defined()) << name << " " << p.key();
        EXPECT_LT(MaxRelative(p.value().grad(), FromJson(ref["grads"][p.key()], torch::kFloat)), 1e-4)
            << name << " " << p.key() << " checkpointing " << checkpoint_every;
      }
      EXPECT_EQ(trainable, ref["grads"].size()) << name;
    }
  }
}

// Our export, loaded by PeftModel.from_pretrained on the same base, gives our logits.
TEST_F(LoraTest, ExportLoadsInPeftWithOurLogits) {
  for (const std::string name : kCases) {
    const json& ref = Case(name);
    AttachedAdapter attached;
    std::shared_ptr<SequenceModel> model = WithPeftAdapter(name, &attached);
    {  // move every trainable tensor, so that the export is ours and not a copy of PEFT's file
      torch::NoGradGuard no_grad;
      for (auto& p : model->parameters())
        if (p.requires_grad()) p.mul_(1.5);
    }
    model->eval();
    auto [tokens, pad_mask] = Inputs(ref);
    torch::Tensor ours;
    {
      torch::NoGradGuard no_grad;
      ours = model->forward(tokens, pad_mask);
    }
    const std::string out = testing::FreshDir("lora_export_" + name);
    AdapterConfig exported = ReadPeftAdapterConfig(Adapter(name));
    exported.target_modules = attached.target_modules;
    exported.modules_to_save = attached.modules_to_save;
    ExportPeftAdapter(out + "/adapter", *model, exported, "classification", Base(name));
    const std::string inputs = out + "/inputs.json";
    std::ofstream(inputs) << json{{"input_ids", ref["input_ids"]}, {"attention_mask", ref["attention_mask"]}}.dump();
    const std::string command = std::string(NIGHTSHIFT_PYTHON) + " " + NIGHTSHIFT_SOURCE_DIR +
                                "/tests/support/lora_reference.py --check " + Base(name) + " " + out + "/adapter " +
                                inputs + " > " + out + "/peft.json 2> " + out + "/peft.log";
    ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n" << ReadAll(out + "/peft.log");
    const torch::Tensor peft = FromJson(json::parse(ReadAll(out + "/peft.json"))["logits"], torch::kFloat);
    const double rel = MaxRelative(ours, peft);
    std::printf("%-10s max relative |our logit - PEFT's on our export| %.2e\n", name.c_str(), rel);
    EXPECT_LT(rel, 1e-5) << name;
  }
}

// export.merge: the adapter folded into the weights (MergeLora), exported as a full
// model, is PEFT's merge_and_unload() and loads in transformers with its logits.
TEST_F(LoraTest, TheMergedExportIsPeftsMergeAndUnload) {
  for (const std::string name : kCases) {
    const json& ref = Case(name);
    std::shared_ptr<SequenceModel> model = WithPeftAdapter(name);
    model->eval();
    auto [tokens, pad_mask] = Inputs(ref);
    torch::Tensor unmerged, merged;
    {
      torch::NoGradGuard no_grad;
      unmerged = model->forward(tokens, pad_mask);
      MergeLora(*model);
      merged = model->forward(tokens, pad_mask);
    }
    for (const auto& p : model->named_parameters())
      EXPECT_EQ(p.key().find("lora_"), std::string::npos) << name << ": " << p.key() << " left after merging";
    EXPECT_LT(MaxRelative(merged, unmerged), 1e-5) << name;
    const std::string out = testing::FreshDir("lora_merged_" + name);
    // The export copies the base's tokenizer; these bases have none, so a copy gets a stand-in.
    fs::copy(Base(name), out + "/base", fs::copy_options::recursive);
    std::ofstream(out + "/base/tokenizer.json") << "{}";
    TrainConfig c;
    c.model.arch = "pretrained";
    c.model.pretrained = out + "/base";
    c.model.task = "classification";
    c.model.dropout = -1;  // config.json's
    const json base_config = json::parse(ReadAll(Base(name) + "/config.json"));
    c.data.num_classes = base_config.contains("id2label") ? static_cast<int>(base_config["id2label"].size()) : 2;
    for (int i = 0; i < c.data.num_classes; ++i) c.data.class_names.push_back("c" + std::to_string(i));
    ExportModel(out + "/merged", c, *model, ExportInfo{});
    const std::string inputs = out + "/inputs.json";
    std::ofstream(inputs) << json{{"input_ids", ref["input_ids"]}, {"attention_mask", ref["attention_mask"]}}.dump();
    const std::string command = std::string(NIGHTSHIFT_PYTHON) + " " + NIGHTSHIFT_SOURCE_DIR +
                                "/tests/support/lora_reference.py --check-merged " + Base(name) + " " + Adapter(name) +
                                " " + out + "/merged " + inputs + " > " + out + "/peft.json 2> " + out + "/peft.log";
    ASSERT_EQ(std::system(command.c_str()), 0) << command << "\n" << ReadAll(out + "/peft.log");
    const json peft = json::parse(ReadAll(out + "/peft.json"));
    EXPECT_LT(peft["max_relative_weight_difference"].get<double>(), 1e-5) << name;
    const torch::Tensor loaded = FromJson(peft["logits"], torch::kFloat);
    const torch::Tensor reference = FromJson(peft["peft_logits"], torch::kFloat);
    std::printf("%-10s merged: max relative |ours in transformers - merge_and_unload()| %.2e\n", name.c_str(),
                MaxRelative(loaded, reference));
    EXPECT_LT(MaxRelative(loaded, reference), 1e-5) << name;
    EXPECT_LT(MaxRelative(merged, reference), 1e-5) << name;
  }
}

// model.base_precision bf16: the frozen projections and embeddings keep half the bytes
// and compute in bf16 (only the norms stay float32); the adapter and the head stay
// float32 and train. Logits and the adapter's gradients stay within bf16's rounding of
// the float32 base's (PEFT's own bf16 base computes everything in bf16, so it is no
// closer a reference).
TEST_F(LoraTest, AHalfPrecisionBaseKeepsItsProjectionsAndEmbeddingsInBf16WithinItsRounding) {
  for (const std::string name : {"llama", "gpt2", "bert"}) {
    const json& ref = Case(name);
    auto [tokens, pad_mask] = Inputs(ref);
    const auto run = [&](bool half, int64_t* frozen_bytes) {
      std::shared_ptr<SequenceModel> model = WithPeftAdapter(name);
      if (half) CastFrozenBase(*model, torch::kBFloat16);
      *frozen_bytes = 0;
      for (const auto& p : model->named_parameters()) {
        if (p.value().requires_grad()) EXPECT_EQ(p.value().scalar_type(), torch::kFloat32) << p.key();
        else *frozen_bytes += p.value().numel() * p.value().element_size();
        std::string lower = p.key();
        std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
        const bool norm = lower.find("norm") != std::string::npos || lower.find("ln_") != std::string::npos;
        if (half && !p.value().requires_grad() && !norm)
          EXPECT_EQ(p.value().scalar_type(), torch::kBFloat16) << name << " " << p.key();
      }
      model->train();
      torch::Tensor logits = model->forward(tokens, pad_mask);
      torch::nn::functional::cross_entropy(logits, torch::zeros({logits.size(0)}, torch::kLong)).backward();
      std::vector<torch::Tensor> grads;
      for (const auto& p : model->parameters())
        if (p.requires_grad()) grads.push_back(p.grad().clone());
      return std::make_pair(logits.detach(), grads);
    };
    int64_t full_bytes = 0, half_bytes = 0;
    const auto [full_logits, full_grads] = run(false, &full_bytes);
    const auto [half_logits, half_grads] = run(true, &half_bytes);
    EXPECT_LT(half_bytes, full_bytes * 3 / 4) << name;  // the projections are most of the base
    EXPECT_LT(MaxRelative(half_logits, full_logits), 3e-2) << name;
    ASSERT_EQ(half_grads.size(), full_grads.size());
    for (size_t i = 0; i < half_grads.size(); ++i) EXPECT_LT(MaxRelative(half_grads[i], full_grads[i]), 1e-1) << name << " " << i;
  }
}

// train.precision bf16 (autocast) over a bf16 base: a frozen projection's output stays
// bf16 (the next op would cast it down again), with the very values the bf16 base gives
// outside autocast and casts back to float32; its update computes under autocast as
// autocast computes any Linear.
TEST_F(LoraTest, AHalfPrecisionBaseUnderAutocastKeepsItsOutputInBf16) {
  torch::manual_seed(7);
  Projection projection(torch::nn::LinearOptions(48, 24).bias(true));
  Conv1D conv(48, 24);
  LoraOptions lora;
  lora.r = 4;
  lora.alpha = 8;
  projection->AttachLora(lora);
  conv->AttachLora(lora);
  for (torch::Tensor* t : {&projection->weight, &projection->bias, &conv->weight, &conv->bias}) t->requires_grad_(false);
  torch::nn::Module host;  // CastFrozenBase walks a model's submodules
  host.register_module("projection", projection);
  host.register_module("conv", conv);
  CastFrozenBase(host, torch::kBFloat16);
  ASSERT_EQ(projection->weight.scalar_type(), torch::kBFloat16);
  const torch::Tensor x = torch::randn({5, 48});
  const auto check = [&](const std::function<torch::Tensor(const torch::Tensor&)>& f, const char* what) {
    const torch::Tensor plain = f(x);
    torch::Tensor autocast;
    {
      AutocastRegion region("bf16", torch::kCPU);
      autocast = f(x);
    }
    EXPECT_EQ(plain.scalar_type(), torch::kFloat32) << what;
    EXPECT_EQ(autocast.scalar_type(), torch::kBFloat16) << what;
    EXPECT_LT((autocast.to(torch::kFloat) - plain).abs().max().item<double>(),
              1e-2 * plain.abs().max().item<double>()) << what;
  };
  {
    torch::NoGradGuard no_grad;  // B zero: the update adds nothing yet
    check([&](const torch::Tensor& in) { return projection->forward(in); }, "projection");
    check([&](const torch::Tensor& in) { return conv->forward(in); }, "conv1d");
  }
  // Without an update the base's output is bit for bit the plain path's, cast.
  Projection bare(torch::nn::LinearOptions(48, 24).bias(true));
  bare->weight.requires_grad_(false);
  bare->bias.requires_grad_(false);
  host.register_module("bare", bare);
  CastFrozenBase(host, torch::kBFloat16);
  const torch::Tensor plain = bare->forward(x);
  AutocastRegion region("bf16", torch::kCPU);
  EXPECT_TRUE(torch::equal(bare->forward(x).to(torch::kFloat), plain));
  // An input several projections read is cast once for them under autocast (the values
  // each would have cast it to), and left as it is for float32 weights.
  const torch::Tensor shared = AsProjectionInput(x, bare->weight);
  EXPECT_EQ(shared.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(shared, x.to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(bare->forward(shared).to(torch::kFloat), plain));
  EXPECT_TRUE(AsProjectionInput(x, torch::ones({24, 48})).is_same(x));
}

// A BF16 folder under a bf16 base (PretrainedOptions::base_dtype, as model.base_precision
// sets it): the frozen projections are views of the mapped file (shared by a worker's
// ranks, never converted through float32), the same bits as loading it in float32 and
// casting after, and so the same logits; an F32 folder converts straight into bf16 to
// the same bits as the cast; what trains is float32.
TEST_F(LoraTest, ABf16FolderIsMappedAsTheBf16BaseWithTheBitsOfTheCastOne) {
  for (const std::string name : {"llama", "gpt2", "bert"}) {
    const std::string bf16 = *dir_ + "/" + name + "/base-bf16";
    fs::create_directories(bf16);
    fs::copy_file(Base(name) + "/config.json", bf16 + "/config.json", fs::copy_options::overwrite_existing);
    std::map<std::string, torch::Tensor> half;
    for (const auto& [key, t] : ReadSafetensors(Base(name) + "/model.safetensors")) half[key] = t.to(torch::kBFloat16);
    WriteSafetensors(bf16 + "/model.safetensors", half);

    const AdapterConfig adapter = ReadPeftAdapterConfig(Adapter(name));
    const auto build = [&](const std::string& dir, torch::ScalarType base_dtype) {
      HfConfig config;
      PretrainedOptions options;
      options.base_dtype = base_dtype;
      std::shared_ptr<SequenceModel> model = LoadPretrained(dir, options, &config);
      AttachLora(*model, config, "classification", adapter);
      LoadPeftAdapter(Adapter(name), *model);
      CastFrozenBase(*model, torch::kBFloat16);
      model->eval();
      return model;
    };
    // Each folder loaded as before (float32 parameters, cast after) and into bf16 ones.
    const auto cast = build(bf16, torch::kFloat32);
    const auto mapped = build(bf16, torch::kBFloat16);
    const auto f32_cast = build(Base(name), torch::kFloat32);
    const auto converted = build(Base(name), torch::kBFloat16);  // the F32 file converted in
    auto cast_params = cast->named_parameters(), converted_params = converted->named_parameters();
    auto f32_cast_params = f32_cast->named_parameters();
    int views = 0;
    for (const auto& p : mapped->named_parameters()) {
      const torch::Tensor& t = p.value();
      if (t.requires_grad()) {
        EXPECT_EQ(t.scalar_type(), torch::kFloat32) << name << " " << p.key();
        continue;
      }
      if (t.scalar_type() == torch::kBFloat16) {
        EXPECT_TRUE(MappedWeightFingerprint(t).has_value()) << name << " " << p.key() << " is a copy";
        ++views;
      }
      EXPECT_EQ(t.scalar_type(), cast_params[p.key()].scalar_type()) << name << " " << p.key();
      EXPECT_TRUE(torch::equal(t, cast_params[p.key()])) << name << " " << p.key();
      EXPECT_TRUE(torch::equal(converted_params[p.key()], f32_cast_params[p.key()])) << name << " " << p.key();
    }
    EXPECT_GT(views, 4) << name;
    auto [tokens, pad_mask] = Inputs(Case(name));
    EXPECT_TRUE(torch::equal(mapped->forward(tokens, pad_mask), cast->forward(tokens, pad_mask))) << name;
  }
}

TEST_F(LoraTest, ATargetThatMatchesNothingIsNamedWithTheCandidates) {
  HfConfig config;
  std::shared_ptr<SequenceModel> model = LoadPretrained(Base("llama"), {}, &config);
  AdapterConfig adapter;
  adapter.target_modules = {"q_proj", "qkv"};
  try {
    AttachLora(*model, config, "classification", adapter);
    FAIL() << "no error";
  } catch (const PermanentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.adapter.target_modules: qkv matches no projection"), std::string::npos) << what;
    EXPECT_NE(what.find("gate_proj"), std::string::npos) << what;  // the candidates are listed
    EXPECT_EQ(what.find("q_proj matches no"), std::string::npos) << what;  // q_proj matched
  }
  HfConfig distil;
  model = LoadPretrained(Base("distilbert"), {}, &distil);
  EXPECT_THROW(AttachLora(*model, distil, "classification", AdapterConfig{}), PermanentError);  // no default targets
}

// A new adapter (not from a folder) starts as the base model: B is zero.
TEST_F(LoraTest, ANewAdapterLeavesTheLogitsOfTheBase) {
  HfConfig config;
  std::shared_ptr<SequenceModel> model = LoadPretrained(Base("gpt2"), {}, &config);
  model->eval();
  auto [tokens, pad_mask] = Inputs(Case("gpt2"));
  torch::NoGradGuard no_grad;
  const torch::Tensor before = model->forward(tokens, pad_mask);
  AdapterConfig adapter;
  adapter.target_modules = {"all-linear"};
  const AttachedAdapter attached = AttachLora(*model, config, "classification", adapter);
  EXPECT_EQ(attached.adapted.size(), 8u);  // c_attn, attn.c_proj, c_fc, mlp.c_proj in two blocks; not score
  EXPECT_TRUE(torch::equal(model->forward(tokens, pad_mask), before));
}

// Sharding full loads a folder after the adapter is attached (JobModel's `later`, then
// LoadHfWeights), so that each block can be cut as the load passes it. With a new head
// (other labels than the folder's), a fresh adapter and a bf16 base whose modules_to_save
// include one of its projections, that gives every parameter the value a load before the
// adapter gives: the head drawn before the adapter's A matrices, the saved projection
// rounded through bf16 as its load into the bf16 base rounds it.
TEST_F(LoraTest, ALoadDeferredUntilTheAdapterIsAttachedHoldsWhatAnEagerLoadHolds) {
  TrainConfig c;
  c.model.arch = "pretrained";
  c.model.pretrained = Base("llama");
  c.model.task = "classification";
  c.model.dropout = -1;
  c.data.num_classes = 3;
  c.data.class_names = {"x", "y", "z"};  // not the folder's: a new head
  c.model.adapter.type = "lora";
  c.model.adapter.r = 4;
  c.model.adapter.alpha = 8;
  c.model.adapter.target_modules = {"q_proj", "v_proj"};
  c.model.adapter.modules_to_save = {"score", "o_proj"};
  c.model.base_precision = "bf16";
  torch::manual_seed(7);
  const std::shared_ptr<SequenceModel> eager = JobModel(c, /*load_weights=*/true);
  torch::manual_seed(7);
  DeferredWeights later;
  const std::shared_ptr<SequenceModel> deferred = JobModel(c, /*load_weights=*/true, nullptr, &later);
  ASSERT_TRUE(later.weights.has_value());
  EXPECT_FALSE(later.rules.written.empty());  // the new head, and the adapter's A and B
  EXPECT_FALSE(later.rules.round_through.empty());  // the saved o_proj of the bf16 base
  LoadHfWeights(*later.weights, later.rules, *deferred);
  const auto want = eager->named_parameters();
  const auto got = deferred->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& p : want) {
    const torch::Tensor* g = got.find(p.key());
    ASSERT_NE(g, nullptr) << p.key();
    EXPECT_EQ(g->scalar_type(), p.value().scalar_type()) << p.key();
    EXPECT_TRUE(torch::equal(*g, p.value())) << p.key();
  }
}

}  // namespace
}  // namespace nightshift::trainer::hf
