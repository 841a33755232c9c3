#include "common/spec_rules/spec_rules.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace nightshift::spec_rules {
namespace {

namespace L = limits;

// The least a spec must say: the architecture and the data.
SpecValues Minimal() {
  SpecValues v;
  v.Set(L::kArch, std::string("transformer_classifier"));
  v.Set(L::kDataPath, std::string("/d"));
  return v;
}

std::optional<SpecError> Apply(SpecValues v) { return ApplySpecRules(&v); }

TEST(SpecRulesTest, AbsentFieldsTakeTheirDefaults) {
  SpecValues v = Minimal();
  ASSERT_FALSE(ApplySpecRules(&v));
  EXPECT_EQ(v.Text(L::kName), "job");
  EXPECT_EQ(v.Int(L::kLayers), 2);
  EXPECT_EQ(v.Int(L::kDModel), 128);
  EXPECT_EQ(v.Int(L::kFfn), 512);  // 4 x d_model
  EXPECT_EQ(v.Real(L::kDropout), 0.1);
  EXPECT_EQ(v.Real(L::kValidationFraction), 0.2);
  EXPECT_EQ(v.Int(L::kVocabSize), 8000);
  EXPECT_EQ(v.Text(L::kFormat), "text_dir");
  EXPECT_FALSE(v.Has(L::kLabelField));  // text_dir: labels come from folder names
  EXPECT_EQ(v.Uint(L::kSeed), 1234u);
  EXPECT_EQ(v.Int(L::kBatchSize), 32);
  EXPECT_EQ(v.Text(L::kActivationCheckpointing), "none");
  EXPECT_EQ(v.Int(L::kWorldSize), 1);
  EXPECT_EQ(v.Text(L::kDevice), "auto");
  EXPECT_EQ(v.Int(L::kEverySteps), 200);
  EXPECT_FALSE(v.Has(L::kMaxRestarts));  // 0: no default to fill
}

// kFallback: 0 means the default. kDefault (`optional` in the proto): an explicit 0 stays.
TEST(SpecRulesTest, ZeroIsTheDefaultOnlyWhereTheTableSaysSo) {
  SpecValues v = Minimal();
  v.Set(L::kLayers, int64_t{0});
  v.Set(L::kDropout, 0.0);
  v.Set(L::kEverySteps, int64_t{0});
  v.Set(L::kSeed, uint64_t{0});
  ASSERT_FALSE(ApplySpecRules(&v));
  EXPECT_EQ(v.Int(L::kLayers), 2);
  EXPECT_EQ(v.Real(L::kDropout), 0.0);
  EXPECT_EQ(v.Int(L::kEverySteps), 0);
  EXPECT_EQ(v.Uint(L::kSeed), 1234u);
  SpecValues zero_world = Minimal();
  zero_world.Set(L::kWorldSize, int64_t{0});
  auto e = Apply(zero_world);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->Text(), "resources.world_size: must be in [1, 4096], got 0");
}

// Each number at its limits is taken; just beyond them, refused naming the field.
TEST(SpecRulesTest, NumbersAtTheirLimitsAndJustBeyond) {
  for (const SpecField& f : SpecFields()) {
    if (f.type != FieldType::kInt && f.type != FieldType::kReal) continue;
    auto with = [&](double x) {
      SpecValues v = Minimal();
      if (f.type == FieldType::kInt) v.Set(f, static_cast<int64_t>(x));
      else v.Set(f, x);
      const std::string path = f.path;
      if (path.rfind("model.adapter.", 0) == 0) {  // an adapter's numbers: on a Hugging Face model
        v.Set(L::kArch, std::string("pretrained"));
        v.Set(L::kPretrained, std::string("/m"));
        v.Set(L::kAdapterType, std::string("lora"));
      }
      if (path.rfind("train.early_stopping.", 0) == 0) v.Set(L::kEarlyStoppingMetric, std::string("val_loss"));
      if (path == L::kHeads.path) {  // a d_model it divides, where one is in range
        v.Set(L::kDModel, static_cast<int64_t>(std::min(std::max(x, 1.0), L::kDModel.max)));
      } else if (path != L::kDModel.path) {
        v.Set(L::kDModel, int64_t{4096});
      }
      return Apply(v);
    };
    const double below = f.type == FieldType::kInt ? f.min - 1 : std::nextafter(f.min, -HUGE_VAL);
    const double top = f.max_exclusive ? std::nextafter(f.max, -HUGE_VAL) : f.max;
    const double above = f.max_exclusive ? f.max : (f.type == FieldType::kInt ? f.max + 1 : std::nextafter(f.max, HUGE_VAL));
    for (double ok : {f.min, top}) {
      if (ok == 0 && f.absent == Absent::kFallback) continue;  // 0 is the default there
      auto e = with(ok);
      EXPECT_TRUE(!e || e->field != f.path) << f.path << " = " << ok << ": " << e->Text();
    }
    for (double bad : {below, above}) {
      if (bad == 0 && f.absent == Absent::kFallback) continue;
      auto e = with(bad);
      ASSERT_TRUE(e) << f.path << " = " << bad << " accepted";
      EXPECT_EQ(e->field, f.path) << e->Text();
    }
  }
}

TEST(SpecRulesTest, MessagesSayTheRangeAndWhatCame) {
  SpecValues v = Minimal();
  v.Set(L::kPrefetch, int64_t{65});
  EXPECT_EQ(Apply(v)->Text(), "train.batching.prefetch: must be in [1, 64], got 65");
  v = Minimal();
  v.Set(L::kDropout, 1.0);
  EXPECT_EQ(Apply(v)->Text(), "model.dropout: must be in [0, 1), got 1");
  v = Minimal();
  v.Set(L::kLr, std::nan(""));
  EXPECT_EQ(Apply(v)->Text(), "train.lr: must be in [0, 10] (0: the default), got nan");
  v = Minimal();
  v.Set(L::kMaxSteps, int64_t{1} << 41);
  EXPECT_EQ(Apply(v)->Text(), "train.max_steps: must be in [0, 1099511627776] (0: no limit), got 2199023255552");
}

TEST(SpecRulesTest, StringsAreChoicesOfTheirRowAndOneShortLine) {
  SpecValues v = Minimal();
  v.Set(L::kPrecision, std::string("fp8"));
  EXPECT_EQ(Apply(v)->Text(), "train.precision: unknown precision 'fp8' (expected fp32, bf16 or fp16)");
  v = Minimal();
  v.Set(L::kArch, std::string(""));
  EXPECT_EQ(Apply(v)->Text(), "model.arch: missing (one of transformer_classifier, gpt_lm, torchscript or pretrained)");
  v = Minimal();
  v.Set(L::kName, std::string(129, 'a'));
  EXPECT_EQ(Apply(v)->Text(), "name: longer than 128 bytes");
  v = Minimal();
  v.Set(L::kInitFrom, std::string(4097, 'a'));
  EXPECT_EQ(Apply(v)->Text(), "model.init_from: longer than 4096 bytes");
  v = Minimal();
  v.Set(L::kDataPath, std::string("a\nb"));
  EXPECT_EQ(Apply(v)->Text(), "data.path: contains a control character");
  v = Minimal();
  v.Set(L::kDataPath, std::string(""));
  EXPECT_EQ(Apply(v)->field, "data.path");
}

TEST(SpecRulesTest, RulesAcrossFields) {
  SpecValues v = Minimal();
  v.Set(L::kHeads, int64_t{3});
  EXPECT_EQ(Apply(v)->Text(), "model.heads: must be positive and divide model.d_model (128)");
  v = Minimal();
  v.Set(L::kArch, std::string("torchscript"));
  EXPECT_EQ(Apply(v)->field, "model.path");
  v = Minimal();
  v.Set(L::kMaxTokens, std::string("511"));
  EXPECT_EQ(Apply(v)->Text(), "train.batching.max_tokens: must be at least model.max_len (512) so every sample fits");
  v = Minimal();
  v.Set(L::kMaxTokens, std::string("512"));
  EXPECT_FALSE(Apply(v));
  v = Minimal();
  v.Set(L::kFormat, std::string("jsonl"));
  ASSERT_FALSE(ApplySpecRules(&v));
  EXPECT_EQ(v.Text(L::kTextField), "text");
  EXPECT_EQ(v.Text(L::kLabelField), "label");
  v = Minimal();
  v.Set(L::kArch, std::string("gpt_lm"));
  v.Set(L::kFormat, std::string("jsonl"));
  ASSERT_FALSE(ApplySpecRules(&v));
  EXPECT_FALSE(v.Has(L::kLabelField));  // a language model has no labels
}

// model.pretrained: config.json has the sizes and the dropout, the folder the tokenizer;
// the native classifier alone pools, and a task is the pretrained model's alone.
TEST(SpecRulesTest, APretrainedFolderLeavesItsSizesToConfigJson) {
  SpecValues v;
  v.Set(L::kPretrained, std::string("/models/bert"));
  v.Set(L::kDataPath, std::string("/d"));
  ASSERT_FALSE(ApplySpecRules(&v));
  EXPECT_EQ(v.Text(L::kArch), "pretrained");
  EXPECT_EQ(v.Text(L::kTask), "classification");
  EXPECT_EQ(v.Text(L::kTokenizerType), "pretrained");
  for (const SpecField& f : {L::kLayers, L::kDModel, L::kHeads, L::kFfn}) EXPECT_EQ(v.Int(f), 0) << f.path;
  EXPECT_FALSE(v.Has(L::kDropout));
  EXPECT_EQ(v.Text(L::kPooling), "");
  EXPECT_EQ(v.Int(L::kMaxLen), 512);
  SpecValues again = v;  // the trainer applies the rules to what the coordinator resolved
  ASSERT_FALSE(ApplySpecRules(&again));
  EXPECT_EQ(again.all(), v.all());

  SpecValues w = v;
  w.Set(L::kLayers, int64_t{200});
  EXPECT_EQ(Apply(w)->Text(), "model.layers: must be in [1, 128], got 200");
  w = v;
  w.Set(L::kArch, std::string("gpt_lm"));
  EXPECT_EQ(Apply(w)->field, "model.arch");
  w = v;
  w.Set(L::kInitFrom, std::string("/m"));
  EXPECT_EQ(Apply(w)->field, "model.init_from");
  w = v;
  w.Set(L::kPooling, std::string("mean"));
  EXPECT_EQ(Apply(w)->field, "model.pooling");
  w = v;
  w.Set(L::kTokenizerType, std::string("sentencepiece"));
  EXPECT_EQ(Apply(w)->field, "data.tokenizer.type");
  w = v;
  w.Set(L::kTask, std::string("generation"));
  EXPECT_EQ(Apply(w)->Text(), "model.task: unknown task 'generation' (expected classification or causal_lm)");

  SpecValues n = Minimal();
  ASSERT_FALSE(ApplySpecRules(&n));
  EXPECT_EQ(n.Text(L::kPooling), "cls");
  EXPECT_EQ(n.Text(L::kTokenizerType), "sentencepiece");
  n = Minimal();
  n.Set(L::kTask, std::string("classification"));
  EXPECT_EQ(Apply(n)->Text(), "model.task: only with model.pretrained");
  n = Minimal();
  n.Set(L::kTokenizerType, std::string("pretrained"));
  EXPECT_EQ(Apply(n)->field, "data.tokenizer.type");
  n = Minimal();
  n.Set(L::kArch, std::string("pretrained"));
  EXPECT_EQ(Apply(n)->field, "model.pretrained");
  n = Minimal();
  n.Set(L::kArch, std::string("gpt_lm"));
  n.Set(L::kPooling, std::string("mean"));
  EXPECT_EQ(Apply(n)->Text(), "model.pooling: only for model.arch transformer_classifier");
}

TEST(SpecRulesTest, MaxTokensAndActivationCheckpointingSpellings) {
  EXPECT_EQ(ParseMaxTokens(""), 0);
  EXPECT_EQ(ParseMaxTokens("auto"), -1);
  EXPECT_EQ(ParseMaxTokens("4096"), 4096);
  EXPECT_EQ(ParseMaxTokens("1099511627776"), int64_t{1} << 40);
  for (const char* bad : {"0", "-5", " 4096", "4096 ", "lots", "1099511627777", "99999999999999999999"})
    EXPECT_EQ(ParseMaxTokens(bad), -2) << bad;
  EXPECT_EQ(ActivationCheckpointEvery("none"), 0);
  EXPECT_EQ(ActivationCheckpointEvery("full"), 1);
  EXPECT_EQ(ActivationCheckpointEvery("every_3"), 3);
  EXPECT_EQ(ActivationCheckpointEvery("every_9999"), 9999);
  for (const char* bad : {"", "every_", "every_0", "every_10000", "every_2x", "every_-1", "sometimes"})
    EXPECT_EQ(ActivationCheckpointEvery(bad), -1) << bad;
}

}  // namespace
}  // namespace nightshift::spec_rules
