// One spec, two front ends: the coordinator's (the JobSpec proto a SubmitJobRequest
// carries, through DefaultAndValidateJobSpec) and the trainer's (the same spec as JSON in
// its config, through ParseTrainConfig, as under torchrun). Both apply the rules of
// common/spec_rules/spec_rules.h; this test holds them to the same verdict, the same message
// and the same values for every field absent, zero, at its limits and just beyond, and
// checks that the config the worker writes between them carries every default.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "common/spec_rules/spec_rules.h"
#include "common/spec.h"
#include "worker/assignment.h"
#include "worker/trainer/config.h"

namespace nightshift {
namespace {

using nlohmann::json;
namespace L = spec_rules::limits;

json MinimalSpec() { return {{"model", {{"arch", "transformer_classifier"}}}, {"data", {{"path", "/d"}}}}; }

// Sets the field at `path` ("train.batching.prefetch") of a spec; null removes it.
void SetAt(json* spec, const std::string& path, const json& value) {
  json* at = spec;
  size_t from = 0;
  for (size_t dot; (dot = path.find('.', from)) != std::string::npos; from = dot + 1) {
    if (value.is_null() && !at->contains(path.substr(from, dot - from))) return;
    at = &(*at)[path.substr(from, dot - from)];
  }
  if (value.is_null()) at->erase(path.substr(from));
  else (*at)[path.substr(from)] = value;
}

// The coordinator's path; "" or its error.
std::string ThroughCoordinator(const json& spec, v1::JobSpec* out) {
  auto parsed = google::protobuf::util::JsonStringToMessage(spec.dump(), out);
  EXPECT_TRUE(parsed.ok()) << spec.dump() << ": " << parsed.ToString();  // every case is a JobSpec
  return DefaultAndValidateJobSpec(out).message();
}

json TrainerData() {
  return {{"train_shard", "/d/train.shard"}, {"val_shard", "/d/val.shard"}, {"vocab_size", 8000}, {"num_classes", 2}};
}

// The trainer's path; "" or its error.
std::string ThroughTrainer(const json& spec, trainer::TrainConfig* out) {
  json config = {{"job_id", "j-000001"}, {"checkpoint_dir", "/c"}, {"spec", spec}, {"data", TrainerData()}};
  return trainer::ParseTrainConfig(config.dump(), out);
}

// Every value the trainer takes from the spec, against the coordinator's.
void ExpectSameValues(const v1::JobSpec& p, const trainer::TrainConfig& c, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(c.model.arch, p.model().arch());
  EXPECT_EQ(c.model.path, p.model().path());
  EXPECT_EQ(c.model.init_from, p.model().init_from());
  EXPECT_EQ(c.model.layers, p.model().layers());
  EXPECT_EQ(c.model.d_model, p.model().d_model());
  EXPECT_EQ(c.model.heads, p.model().heads());
  EXPECT_EQ(c.model.ffn, p.model().ffn());
  EXPECT_EQ(c.model.dropout, p.model().dropout());
  EXPECT_EQ(c.model.attention_dropout, p.model().attention_dropout());
  EXPECT_EQ(c.model.max_len, p.model().max_len());
  const v1::AdapterSpec& a = p.model().adapter();
  EXPECT_EQ(c.model.adapter.type, a.type());
  EXPECT_EQ(c.model.adapter.r, a.r());
  EXPECT_EQ(c.model.adapter.alpha, a.alpha());
  EXPECT_EQ(c.model.adapter.dropout, a.dropout());
  EXPECT_EQ(c.model.adapter.init_from, a.init_from());
  const v1::TrainSpec& t = p.train();
  EXPECT_EQ(c.train.epochs, t.epochs());
  EXPECT_EQ(c.train.optimizer, t.optimizer());
  EXPECT_EQ(c.train.lr, t.lr());
  EXPECT_EQ(c.train.weight_decay, t.weight_decay());
  EXPECT_EQ(c.train.warmup_steps, t.warmup_steps());
  EXPECT_EQ(c.train.seed, t.seed());
  EXPECT_EQ(c.train.batch_size, t.batching().batch_size());
  const int64_t max_tokens = spec_rules::ParseMaxTokens(t.batching().max_tokens());
  EXPECT_EQ(c.train.max_tokens_auto, max_tokens == -1);
  EXPECT_EQ(c.train.max_tokens, std::max<int64_t>(max_tokens, 0));
  EXPECT_EQ(c.train.prefetch, t.batching().prefetch());
  EXPECT_EQ(c.train.precision, t.precision());
  EXPECT_EQ(c.train.grad_clip, t.grad_clip());
  EXPECT_EQ(c.train.activation_checkpointing, t.activation_checkpointing());
  EXPECT_EQ(c.train.checkpoint_every_blocks, spec_rules::ActivationCheckpointEvery(t.activation_checkpointing()));
  EXPECT_EQ(c.train.max_steps, t.max_steps());
  EXPECT_EQ(c.train.threads, t.threads());
  EXPECT_EQ(c.data_parallel.world_size, p.resources().world_size());
  EXPECT_EQ(c.data_parallel.timeout_seconds, p.resources().timeout_seconds());
  EXPECT_EQ(c.data_parallel.bucket_mb, p.resources().bucket_mb());
  EXPECT_EQ(c.data_parallel.sharding, p.resources().sharding());
  EXPECT_EQ(c.device, p.resources().device());
  EXPECT_EQ(c.checkpoint.every_steps, p.checkpoint().every_steps());
  EXPECT_EQ(c.checkpoint.every_seconds, p.checkpoint().every_seconds());
  EXPECT_EQ(c.checkpoint.keep_last, p.checkpoint().keep_last());
}

// The values to try in one field: absent, 0 and, for numbers, each limit and just beyond;
// for strings, each choice, another word, too long and a control character.
std::vector<json> CasesFor(const spec_rules::SpecField& f) {
  std::vector<json> cases = {nullptr};
  const std::string path = f.path;
  switch (f.type) {
    case spec_rules::FieldType::kInt:
      for (double x : {0.0, f.min, f.max, f.min - 1, f.max + 1}) cases.push_back(static_cast<int64_t>(x));
      break;
    case spec_rules::FieldType::kReal:
      cases.insert(cases.end(), {0.0, f.min, std::nextafter(f.min, -HUGE_VAL), std::nextafter(f.max, -HUGE_VAL), f.max,
                                 std::nextafter(f.max, HUGE_VAL), 0.5});
      break;
    case spec_rules::FieldType::kUint:
      cases.insert(cases.end(), {0, 1, uint64_t{1} << 53});
      break;
    case spec_rules::FieldType::kString: {
      cases.insert(cases.end(), {"", "another", std::string(static_cast<size_t>(f.max) + 1, 'a'), "a\tb"});
      for (size_t from = 0; *f.choices != '\0';) {
        const std::string choices = f.choices;
        const size_t bar = choices.find('|', from);
        cases.push_back(choices.substr(from, bar - from));
        if (bar == std::string::npos) break;
        from = bar + 1;
      }
      if (path == L::kMaxTokens.path)
        cases.insert(cases.end(), {"auto", "511", "512", "0", "-4", "1099511627776", "1099511627777"});
      if (path == L::kActivationCheckpointing.path) cases.insert(cases.end(), {"every_2", "every_0", "every_10000"});
      break;
    }
  }
  return cases;
}

TEST(SpecContractTest, OneVerdictOneMessageOneValueOnBothPaths) {
  int accepted = 0, refused = 0;
  for (const spec_rules::SpecField& f : spec_rules::SpecFields()) {
    for (const json& value : CasesFor(f)) {
      json spec = MinimalSpec();
      SetAt(&spec, f.path, value);
      const std::string what = std::string(f.path) + " = " + value.dump();
      v1::JobSpec proto;
      const std::string coordinator = ThroughCoordinator(spec, &proto);
      trainer::TrainConfig config;
      const std::string trainer = ThroughTrainer(spec, &config);
      EXPECT_EQ(trainer, coordinator.empty() ? "" : "config: spec." + coordinator) << what;
      if (coordinator.empty() && trainer.empty()) ExpectSameValues(proto, config, what);
      (coordinator.empty() ? accepted : refused)++;
    }
  }
  // Both verdicts are exercised, across every field.
  EXPECT_GT(accepted, 80);
  EXPECT_GT(refused, 80);
}

// The worker writes the coordinator's resolved spec into the trainer's config with every
// default filled in, and the trainer reads back the very values.
TEST(SpecContractTest, TheWorkerHandsTheTrainerEveryDefault) {
  for (const json& spec : {MinimalSpec(), json::parse(R"({"model": {"arch": "gpt_lm", "d_model": 64, "dropout": 0},
          "data": {"path": "/d", "format": "jsonl"}, "train": {"batching": {"max_tokens": "auto"}, "seed": "7"},
          "checkpoint": {"every_steps": 0}})")}) {
    v1::Assignment assignment;
    assignment.mutable_task()->set_job_id("j-000001");
    ASSERT_EQ(ThroughCoordinator(spec, assignment.mutable_spec()), "");
    const json config = TrainerConfig(assignment, TrainerData(), "/c", true);
    for (const spec_rules::SpecField& f : spec_rules::SpecFields()) {
      if (f.absent == spec_rules::Absent::kZero && *f.text_default == '\0') continue;  // no default to fill
      const std::string path = f.path;
      // filled only with an adapter (below) or with early stopping's metric
      if (path.rfind("model.adapter.", 0) == 0 || path.rfind("train.early_stopping.", 0) == 0) continue;
      const json* at = &config["spec"];
      for (size_t from = 0, dot = 0; dot != std::string::npos; from = dot + 1) {
        dot = path.find('.', from);
        const std::string key = path.substr(from, dot == std::string::npos ? dot : dot - from);
        at = at->contains(key) ? &(*at)[key] : nullptr;
        if (at == nullptr) break;
      }
      EXPECT_TRUE(at != nullptr && !at->is_null()) << path << " missing from " << config["spec"].dump();
    }
    trainer::TrainConfig parsed;
    ASSERT_EQ(trainer::ParseTrainConfig(config.dump(), &parsed), "");
    ExpectSameValues(assignment.spec(), parsed, spec.dump());
  }
}

// An adapter's settings take their defaults when its type is set, on both sides.
TEST(SpecContractTest, AnAdapterTakesItsDefaultsOnBothSides) {
  const json spec = json::parse(R"({"model": {"pretrained": "/m", "adapter": {"type": "lora", "dropout": 0.05}},
      "data": {"path": "/d", "format": "jsonl"}})");
  v1::Assignment assignment;
  assignment.mutable_task()->set_job_id("j-000001");
  ASSERT_EQ(ThroughCoordinator(spec, assignment.mutable_spec()), "");
  EXPECT_EQ(assignment.spec().model().adapter().r(), L::kAdapterR.fallback);
  EXPECT_EQ(assignment.spec().model().adapter().alpha(), L::kAdapterAlpha.fallback);
  const json config = TrainerConfig(assignment, TrainerData(), "/c", true);
  EXPECT_EQ(config["spec"]["model"]["adapter"]["r"], 8) << config["spec"].dump();
  trainer::TrainConfig parsed;
  ASSERT_EQ(trainer::ParseTrainConfig(config.dump(), &parsed), "");
  EXPECT_EQ(parsed.model.adapter.type, "lora");
  EXPECT_EQ(parsed.model.adapter.r, L::kAdapterR.fallback);
  EXPECT_EQ(parsed.model.adapter.alpha, L::kAdapterAlpha.fallback);
  EXPECT_EQ(parsed.model.adapter.dropout, 0.05);
  json typeless = spec;
  typeless["model"]["adapter"].erase("type");
  v1::JobSpec refused;
  EXPECT_EQ(ThroughCoordinator(typeless, &refused),
            "model.adapter.type: missing (lora) while other model.adapter fields are set");
}

// What only the JSON front end can meet: a key the JobSpec does not have, a wrong type.
TEST(SpecContractTest, TheTrainerRefusesWhatTheCoordinatorCouldNotParse) {
  trainer::TrainConfig c;
  json spec = MinimalSpec();
  spec["model"]["layres"] = 3;
  EXPECT_EQ(ThroughTrainer(spec, &c), "config: spec.model.layres: unknown field");
  spec = MinimalSpec();
  spec["train"] = {{"batching", 5}};
  EXPECT_EQ(ThroughTrainer(spec, &c), "config: spec.train.batching: must be an object, got 5");
  spec = MinimalSpec();
  spec["model"]["layers"] = "three";
  EXPECT_EQ(ThroughTrainer(spec, &c), "config: spec.model.layers: must be an integer, got \"three\"");
  spec = MinimalSpec();
  spec["train"] = {{"gradClip", 0.5}};  // lowerCamelCase, as protobuf JSON allows
  ASSERT_EQ(ThroughTrainer(spec, &c), "");
  EXPECT_EQ(c.train.grad_clip, 0.5);
}

}  // namespace
}  // namespace nightshift
