#include "common/spec.h"

#include "common/spec_rules/spec_rules.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <functional>
#include <set>

namespace nightshift {
namespace {

const char* kGood = R"(name: spam-classifier
model: {arch: transformer_classifier, layers: 2, d_model: 128, heads: 4, ffn: 512, dropout: 0.1, max_len: 512}
data:
  format: text_dir
  path: data/spamassassin
  validation_fraction: 0.2
  tokenizer: {type: sentencepiece, vocab_size: 8000}
train: {epochs: 2, optimizer: adamw, lr: 0.001, weight_decay: 0.01, warmup_steps: 100, seed: 1234,
        batching: {batch_size: 32}, precision: fp32}
resources: {world_size: 1}
checkpoint: {every_steps: 200, keep_last: 3}
restart: {max_restarts: 3}
)";

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(SpecTest, LoadsTheIssueExample) {
  auto spec = LoadJobSpec(kGood);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model().arch(), "transformer_classifier");
  EXPECT_EQ(spec->model().ffn(), 512);
  EXPECT_DOUBLE_EQ(spec->model().dropout(), 0.1);
  EXPECT_EQ(spec->data().tokenizer().vocab_size(), 8000);
  EXPECT_EQ(spec->train().seed(), 1234u);
  EXPECT_EQ(spec->train().batching().batch_size(), 32);
  EXPECT_EQ(spec->resources().world_size(), 1);
  EXPECT_EQ(spec->restart().max_restarts(), 3);
  // Defaults are filled.
  EXPECT_EQ(spec->train().batching().prefetch(), 2);
  EXPECT_EQ(spec->train().activation_checkpointing(), "none");
}

TEST(SpecTest, JsonIsAccepted) {
  auto spec = LoadJobSpec(R"({"model": {"arch": "transformer_classifier"}, "data": {"path": "/d"},
                              "train": {"batching": {"max_tokens": 16384}}})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec_rules::ParseMaxTokens(spec->train().batching().max_tokens()), 16384);
  EXPECT_EQ(spec->resources().world_size(), 1);  // absent: one rank
  EXPECT_EQ(spec->model().ffn(), 512);            // 4 x d_model
}

void ExpectInvalid(const std::string& text, const std::string& needle) {
  auto spec = LoadJobSpec(text);
  ASSERT_FALSE(spec.ok()) << "accepted: " << text;
  EXPECT_EQ(spec.status().code(), Status::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(needle), std::string::npos) << spec.status().message();
}

TEST(SpecTest, MissingDataPathNamesTheField) {
  ExpectInvalid(Replace(kGood, "  path: data/spamassassin\n", ""), "data.path");
}

TEST(SpecTest, WorldSizeZeroIsRefusedWithItsLine) {
  ExpectInvalid(Replace(kGood, "world_size: 1", "world_size: 0"), "resources.world_size (line 10)");
}

TEST(SpecTest, DataParallelDefaultsAndLimits) {
  auto spec = LoadJobSpec(kGood);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->resources().timeout_seconds(), 300);
  EXPECT_EQ(spec->resources().bucket_mb(), 25);
  ExpectInvalid(Replace(kGood, "world_size: 1", "world_size: 2, timeout_seconds: -5"),
                "resources.timeout_seconds (line 10)");
  ExpectInvalid(Replace(kGood, "world_size: 1", "world_size: 2, bucket_mb: 2048"), "resources.bucket_mb");
  EXPECT_EQ(spec->resources().sharding(), "none");
  auto sharded = LoadJobSpec(Replace(kGood, "world_size: 1", "world_size: 2, sharding: optimizer"));
  ASSERT_TRUE(sharded.ok()) << sharded.status().ToString();
  EXPECT_EQ(sharded->resources().sharding(), "optimizer");
  ExpectInvalid(Replace(kGood, "world_size: 1", "world_size: 2, sharding: zero3"), "resources.sharding");
  EXPECT_EQ(LoadJobSpec(Replace(kGood, "world_size: 1", "world_size: 2, sharding: full"))->resources().sharding(), "full");
  auto full_auto = LoadJobSpec(Replace(Replace(kGood, "world_size: 1", "world_size: 2, sharding: full"), "batch_size: 32",
                                      "max_tokens: auto"));
  ASSERT_TRUE(full_auto.ok()) << full_auto.status().ToString();  // probed in lockstep (memory_probe.h)
}

TEST(SpecTest, UnknownArchIsRefused) {
  ExpectInvalid(Replace(kGood, "arch: transformer_classifier", "arch: resnet"), "model.arch (line 2)");
}

TEST(SpecTest, YamlThatDoesNotParseNamesTheLine) {
  ExpectInvalid("name: x\nmodel: {arch: transformer_classifier\ndata: [", "line ");
  ExpectInvalid("name: x\nmodel: {arch: transformer_classifier\ndata: [", "does not parse");
}

TEST(SpecTest, UnknownFieldAndWrongTypeAreRefused) {
  ExpectInvalid(Replace(kGood, "dropout: 0.1", "dropuot: 0.1"), "model.dropuot (line 2): unknown field");
  ExpectInvalid(Replace(kGood, "layers: 2", "layers: two"), "model.layers");
  ExpectInvalid(Replace(kGood, "heads: 4", "heads: 3"), "model.heads");
  ExpectInvalid(Replace(kGood, "batch_size: 32", "max_tokens: lots"), "train.batching.max_tokens");
  ExpectInvalid(Replace(kGood, "precision: fp32", "precision: fp8"), "train.precision");
  ExpectInvalid("", "empty");
  ExpectInvalid("- a\n- b\n", "mapping");
  // A field given twice (yaml-cpp keeps both; the later won silently), also in its other spelling.
  ExpectInvalid(Replace(kGood, "lr: 0.001,", "lr: 0.001, lr: 0.01,"), "train.lr (line 8): given twice (first on line 8)");
  ExpectInvalid("model: {arch: transformer_classifier}\ndata: {path: /d}\ntrain:\n  grad_clip: 1\n  gradClip: 2\n",
                "train.gradClip (line 5): given twice (first on line 4)");
}

// Fields whose 0 is a value are optional: absent means the documented default, an
// explicit 0 stays 0.
TEST(SpecTest, AbsentMeansTheDefaultAndZeroMeansZero) {
  auto absent = LoadJobSpec("model: {arch: transformer_classifier}\ndata: {path: /d}\n");
  ASSERT_TRUE(absent.ok()) << absent.status().message();
  EXPECT_DOUBLE_EQ(absent->model().dropout(), 0.1);
  EXPECT_DOUBLE_EQ(absent->train().weight_decay(), 0.01);
  EXPECT_EQ(absent->train().warmup_steps(), 100);
  EXPECT_DOUBLE_EQ(absent->train().grad_clip(), 1.0);
  EXPECT_EQ(absent->checkpoint().every_steps(), 200);
  EXPECT_EQ(absent->train().batching().prefetch(), 2);
  auto zero = LoadJobSpec(
      "model: {arch: transformer_classifier, dropout: 0}\ndata: {path: /d}\n"
      "train: {warmup_steps: 0, weight_decay: 0, grad_clip: 0}\ncheckpoint: {every_steps: 0}\n");
  ASSERT_TRUE(zero.ok()) << zero.status().message();
  EXPECT_EQ(zero->model().dropout(), 0.0);
  EXPECT_EQ(zero->train().warmup_steps(), 0);
  EXPECT_EQ(zero->train().weight_decay(), 0.0);
  EXPECT_EQ(zero->train().grad_clip(), 0.0);
  EXPECT_EQ(zero->checkpoint().every_steps(), 0);
  ExpectInvalid(Replace(kGood, "batching: {batch_size: 32}", "batching: {batch_size: 32, prefetch: 65}"),
                "must be in [1, 64], got 65");
}

// model.task causal_lm: packed rows by default, no label field; prompt / completion pairs
// and packed rows are for it alone.
TEST(SpecTest, CausalLmPacksByDefaultAndTakesPromptCompletionPairs) {
  const std::string lm = "model: {pretrained: /m/llama, task: causal_lm}\ndata: {format: jsonl, path: /d.jsonl}\n";
  auto spec = LoadJobSpec(lm);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->model().arch(), "pretrained");
  EXPECT_EQ(spec->train().batching().rows(), "packed");
  EXPECT_EQ(spec->data().label_field(), "");
  EXPECT_EQ(spec->data().text_field(), "text");
  auto pairs = LoadJobSpec(Replace(lm, "path: /d.jsonl", "path: /d.jsonl, text_field: prompt, completion_field: completion"));
  ASSERT_TRUE(pairs.ok()) << pairs.status().ToString();
  EXPECT_EQ(pairs->data().completion_field(), "completion");
  auto padded = LoadJobSpec(lm + "train: {batching: {rows: padded}}\n");
  ASSERT_TRUE(padded.ok()) << padded.status().ToString();
  EXPECT_EQ(padded->train().batching().rows(), "padded");

  auto classifier = LoadJobSpec("model: {pretrained: /m/llama}\ndata: {path: /d}\n");
  ASSERT_TRUE(classifier.ok()) << classifier.status().ToString();
  EXPECT_EQ(classifier->model().task(), "classification");
  EXPECT_EQ(classifier->train().batching().rows(), "padded");
  ExpectInvalid("model: {pretrained: /m/llama}\ndata: {path: /d}\ntrain: {batching: {rows: packed}}\n",
                "packed only with model.task causal_lm");
  ExpectInvalid(lm + "train: {batching: {rows: tight}}\n", "train.batching.rows");
  ExpectInvalid("model: {pretrained: /m/bert}\ndata: {format: jsonl, path: /d, completion_field: c}\n",
                "only with model.task causal_lm");
  ExpectInvalid("model: {pretrained: /m/llama, task: causal_lm}\ndata: {path: /d, completion_field: c}\n",
                "only with data.format jsonl");
  ExpectInvalid("model: {pretrained: /m/llama, task: summarize}\ndata: {path: /d}\n", "model.task");
  ExpectInvalid("model: {arch: gpt_lm, task: causal_lm}\ndata: {path: /d}\n", "only with model.pretrained");
}

// The documented examples (deploy/examples/*.yaml) are specs the coordinator takes.
TEST(SpecTest, TheDeployExamplesLoad) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(NIGHTSHIFT_SOURCE_DIR) + "/deploy/examples")) {
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    auto spec = LoadJobSpec(text.str());
    EXPECT_TRUE(spec.ok()) << e.path() << ": " << spec.status().ToString();
    ++n;
  }
  EXPECT_GE(n, 3);
}

TEST(SpecTest, DeviceDefaultsToAutoAndMustBeKnown) {
  auto spec = LoadJobSpec(kGood);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->resources().device(), "auto");
  EXPECT_EQ(spec->model().attention_dropout(), 0.0);
  ExpectInvalid(Replace(kGood, "resources: {world_size: 1}", "resources: {world_size: 1, device: gpu}"),
                "resources.device");
}

// The proto path (SubmitJobRequest.spec) is checked as strictly as YAML.
v1::JobSpec GoodProto() {
  auto spec = LoadJobSpec(kGood);
  EXPECT_TRUE(spec.ok());
  return spec.value();
}

Status Validate(const std::function<void(v1::JobSpec*)>& mutate) {
  v1::JobSpec spec = GoodProto();
  mutate(&spec);
  return DefaultAndValidateJobSpec(&spec);
}

TEST(SpecTest, ProtoPathRefusesNonFiniteAndOutOfRangeNumbers) {
  const double nan = std::nan(""), inf = HUGE_VAL;
  EXPECT_TRUE(Validate([](v1::JobSpec*) {}).ok());
  struct Case {
    const char* field;
    std::function<void(v1::JobSpec*)> mutate;
  } cases[] = {
      {"train.lr", [&](v1::JobSpec* s) { s->mutable_train()->set_lr(nan); }},
      {"train.lr", [&](v1::JobSpec* s) { s->mutable_train()->set_lr(inf); }},
      {"model.dropout", [&](v1::JobSpec* s) { s->mutable_model()->set_dropout(nan); }},
      {"model.attention_dropout", [&](v1::JobSpec* s) { s->mutable_model()->set_attention_dropout(1.0); }},
      {"resources.device", [](v1::JobSpec* s) { s->mutable_resources()->set_device("tpu"); }},
      {"data.validation_fraction", [&](v1::JobSpec* s) { s->mutable_data()->set_validation_fraction(nan); }},
      {"train.weight_decay", [&](v1::JobSpec* s) { s->mutable_train()->set_weight_decay(inf); }},
      {"train.grad_clip", [&](v1::JobSpec* s) { s->mutable_train()->set_grad_clip(nan); }},
      {"train.warmup_steps", [](v1::JobSpec* s) { s->mutable_train()->set_warmup_steps(-1); }},
      {"train.max_steps", [](v1::JobSpec* s) { s->mutable_train()->set_max_steps(int64_t{1} << 50); }},
      {"checkpoint.every_seconds", [](v1::JobSpec* s) { s->mutable_checkpoint()->set_every_seconds(1 << 30); }},
      {"priority", [](v1::JobSpec* s) { s->set_priority(2000000000); }},
      {"data.max_samples", [](v1::JobSpec* s) { s->mutable_data()->set_max_samples(-5); }},
      {"train.batching.max_tokens", [](v1::JobSpec* s) { s->mutable_train()->mutable_batching()->set_max_tokens("99999999999999999999"); }},
      {"train.batching.max_tokens", [](v1::JobSpec* s) { s->mutable_train()->mutable_batching()->set_max_tokens(" 4096"); }},
      {"train.activation_checkpointing", [](v1::JobSpec* s) { s->mutable_train()->set_activation_checkpointing("every_2x"); }},
  };
  for (const auto& c : cases) {
    Status s = Validate(c.mutate);
    EXPECT_EQ(s.code(), Status::kInvalidArgument) << c.field;
    EXPECT_EQ(s.message().rfind(c.field, 0), 0u) << s.message();
  }
}

TEST(SpecTest, ProtoPathRefusesUnknownFieldsAndBadStrings) {
  Status s = Validate([](v1::JobSpec* spec) {
    spec->mutable_model()->GetReflection()->MutableUnknownFields(spec->mutable_model())->AddVarint(99, 1);
  });
  EXPECT_EQ(s.code(), Status::kInvalidArgument);
  EXPECT_NE(s.message().find("model"), std::string::npos) << s.message();
  s = Validate([](v1::JobSpec* spec) { spec->mutable_data()->set_path(std::string("data\0/etc", 9)); });
  EXPECT_EQ(s.message().rfind("data.path", 0), 0u) << s.message();
  s = Validate([](v1::JobSpec* spec) { spec->set_name("evil\nname"); });
  EXPECT_EQ(s.message().rfind("name", 0), 0u) << s.message();
  s = Validate([](v1::JobSpec* spec) { spec->mutable_data()->set_path(std::string(5000, 'a')); });
  EXPECT_EQ(s.message().rfind("data.path", 0), 0u) << s.message();
  s = Validate([](v1::JobSpec* spec) { spec->set_name(std::string(200, 'a')); });
  EXPECT_EQ(s.message().rfind("name", 0), 0u) << s.message();
}

// Every field of the JobSpec has a row in the rules' table (common/spec_rules/spec_rules.h),
// of its type, and an `optional` field is exactly one whose absence differs from its 0;
// every row names a field. A field added to the proto without a row fails here.
void WalkFields(const google::protobuf::Descriptor* message, const std::string& prefix,
                std::set<std::string>* seen) {
  using google::protobuf::FieldDescriptor;
  for (int i = 0; i < message->field_count(); ++i) {
    const FieldDescriptor* field = message->field(i);
    const std::string path = prefix + field->name();
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      WalkFields(field->message_type(), path + ".", seen);
      continue;
    }
    seen->insert(path);
    const spec_rules::SpecField* row = spec_rules::FindSpecField(path);
    if (row == nullptr) {
      ADD_FAILURE() << path << ": a JobSpec field with no row in common/spec_rules/spec_rules.h";
      continue;
    }
    spec_rules::FieldType type = spec_rules::FieldType::kString;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
      case FieldDescriptor::CPPTYPE_INT64: type = spec_rules::FieldType::kInt; break;
      case FieldDescriptor::CPPTYPE_UINT64: type = spec_rules::FieldType::kUint; break;
      case FieldDescriptor::CPPTYPE_DOUBLE: type = spec_rules::FieldType::kReal; break;
      case FieldDescriptor::CPPTYPE_STRING: type = spec_rules::FieldType::kString; break;
      case FieldDescriptor::CPPTYPE_BOOL: type = spec_rules::FieldType::kBool; break;
      default: ADD_FAILURE() << path << ": a field type the rules do not take";
    }
    EXPECT_EQ(static_cast<int>(row->type), static_cast<int>(type)) << path;
    EXPECT_EQ(field->has_presence(), row->absent == spec_rules::Absent::kDefault)
        << path << ": `optional` in the proto exactly when absent and 0 differ in the table";
  }
}

TEST(SpecTest, EveryFieldHasARowAndEveryRowAField) {
  std::set<std::string> seen;
  WalkFields(v1::JobSpec::descriptor(), "", &seen);
  for (const spec_rules::SpecField& row : spec_rules::SpecFields())
    EXPECT_TRUE(seen.count(row.path)) << row.path << ": a row for a field the JobSpec does not have";
  EXPECT_EQ(seen.size(), spec_rules::SpecFields().size());
}

TEST(SpecTest, DeeplyNestedYamlIsRefusedNotACrash) {
  std::string deep = "name: " + std::string(100000, '[') ;
  auto spec = LoadJobSpec(deep);
  EXPECT_FALSE(spec.ok());
}

}  // namespace
}  // namespace nightshift
