// coordinator/sweep_spec.h: a sweep file read and checked (every choice and both ends of
// every range set on the base must be a valid job spec, errors naming the key), trials'
// params (grid in order, random drawn from (seed, index) alone), and a trial's job spec.
#include "coordinator/sweep_spec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace nightshift {
namespace {

const char kBase[] =
    "base:\n"
    "  model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 48}\n"
    "  data: {path: /data/x, tokenizer: {vocab_size: 64}}\n"
    "  train: {max_steps: 400, batching: {batch_size: 8}}\n";

std::string Sweep(const std::string& rest) { return std::string(kBase) + rest; }

TEST(SweepSpecTest, AnAshaSweepIsRead) {
  StatusOr<v1::SweepSpec> spec = LoadSweepSpec(Sweep(
      "search:\n  train.lr: {log_uniform: [1.0e-4, 1.0e-2]}\n  train.warmup_steps: {choices: [0, 20]}\n"
      "method: asha\nmetric: val_accuracy\ndirection: maximize\nmax_trials: 16\nparallelism: 4\nseed: 3\n"
      "asha: {min_steps: 50, reduction_factor: 3}\n"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->method(), "asha");
  EXPECT_TRUE(spec->maximize());
  EXPECT_EQ(spec->max_trials(), 16);
  EXPECT_EQ(spec->parallelism(), 4);
  EXPECT_EQ(spec->asha().min_steps(), 50);
  EXPECT_EQ(spec->asha().reduction_factor(), 3);
  ASSERT_EQ(spec->params_size(), 2);
  EXPECT_EQ(spec->params(0).field(), "train.lr");
  EXPECT_EQ(spec->params(0).kind(), "log_uniform");
  // Trials: drawn from (seed, index) alone, within the range, different across indices.
  std::set<std::string> lrs;
  for (int i = 0; i < 16; ++i) {
    auto p = TrialParams(*spec, i);
    EXPECT_EQ(p, TrialParams(*spec, i));
    const double lr = std::stod(p["train.lr"]);
    EXPECT_GE(lr, 1e-4);
    EXPECT_LE(lr, 1e-2);
    EXPECT_TRUE(p["train.warmup_steps"] == "0" || p["train.warmup_steps"] == "20");
    lrs.insert(p["train.lr"]);
  }
  EXPECT_EQ(lrs.size(), 16u);
  // The trial's spec: the params set, evaluations at every rung.
  StatusOr<v1::JobSpec> job = TrialSpec(*spec, {{"train.lr", "0.003"}, {"train.warmup_steps", "20"}});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_DOUBLE_EQ(job->train().lr(), 0.003);
  EXPECT_EQ(job->train().warmup_steps(), 20);
  EXPECT_EQ(job->train().max_steps(), 400);
  EXPECT_EQ(job->eval().every_steps(), 50);
}

// Rungs by epochs: min_epochs instead of min_steps; a trial evaluates at each epoch's end
// (the base's eval.every_steps cleared), whatever the base said.
TEST(SweepSpecTest, AshaRungsCountEpochsWithMinEpochs) {
  StatusOr<v1::SweepSpec> spec = LoadSweepSpec(
      std::string(kBase) + "  eval: {every_steps: 30}\n" +
      "search:\n  train.lr: {log_uniform: [1.0e-4, 1.0e-2]}\nmethod: asha\nmetric: val_loss\nmax_trials: 4\n"
      "asha: {min_epochs: 2}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->asha().min_epochs(), 2);
  EXPECT_EQ(spec->asha().min_steps(), 0);
  StatusOr<v1::JobSpec> job = TrialSpec(*spec, TrialParams(*spec, 0));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->eval().every_steps(), 0);

  for (const auto& [asha, expected] : std::vector<std::pair<std::string, std::string>>{
           {"{min_steps: 50, min_epochs: 2}", "asha.min_epochs: rungs count steps (min_steps) or epochs"},
           {"{min_epochs: 0}", "asha.min_epochs: must be in [1, 1000000]"},
           {"{reduction_factor: 3}", "asha.min_steps: must be in"}}) {
    StatusOr<v1::SweepSpec> bad = LoadSweepSpec(
        Sweep("search:\n  train.lr: {choices: [0.01]}\nmethod: asha\nmetric: val_loss\nmax_trials: 2\nasha: " +
              asha + "\n"));
    ASSERT_FALSE(bad.ok()) << asha;
    EXPECT_EQ(bad.status().message().rfind(expected, 0), 0u) << bad.status().message();
  }
}

TEST(SweepSpecTest, AGridVisitsEveryPointOnceLastParamFastest) {
  StatusOr<v1::SweepSpec> spec = LoadSweepSpec(Sweep(
      "search:\n  train.lr: {choices: [0.001, 0.01]}\n  train.warmup_steps: {int: [0, 2]}\n"
      "method: grid\nmetric: val_loss\n"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(GridSize(*spec), 6);
  EXPECT_EQ(spec->max_trials(), 6);  // the grid's size
  std::set<std::pair<std::string, std::string>> seen;
  for (int i = 0; i < 6; ++i) {
    auto p = TrialParams(*spec, i);
    seen.insert({p["train.lr"], p["train.warmup_steps"]});
  }
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(TrialParams(*spec, 0)["train.warmup_steps"], "0");
  EXPECT_EQ(TrialParams(*spec, 1)["train.warmup_steps"], "1");
  EXPECT_EQ(TrialParams(*spec, 3)["train.lr"], "0.01");
}

TEST(SweepSpecTest, ASearchSpaceOutsideTheSpecsRulesIsRefusedNamingTheKey) {
  struct Case {
    std::string rest, expected;
  };
  const std::vector<Case> cases = {
      {"search:\n  train.lrr: {choices: [1]}\nmethod: random\nmetric: val_loss\nmax_trials: 2\n", "search.train.lrr"},
      {"search:\n  train.lr: {uniform: [-1, 0.1]}\nmethod: random\nmetric: val_loss\nmax_trials: 2\n",
       "search.train.lr: -1: train.lr"},
      {"search:\n  model.arch: {choices: [bert]}\nmethod: random\nmetric: val_loss\nmax_trials: 2\n",
       "search.model.arch: not searchable"},
      {"search:\n  train.lr: {uniform: [0.1, 0.01]}\nmethod: random\nmetric: val_loss\nmax_trials: 2\n",
       "search.train.lr.uniform: low must be below high"},
      {"search:\n  train.lr: {uniform: [0.01, 0.1]}\nmethod: grid\nmetric: val_loss\n",
       "search.train.lr: a grid takes choices or int ranges"},
      {"search:\n  train.lr: {choices: [0.01]}\nmethod: asha\nmetric: val_loss\nmax_trials: 2\n", "asha: method asha needs"},
      {"search:\n  train.lr: {choices: [0.01]}\nmethod: random\nmetric: val_loss\nmax_trials: 2\nparallelism: 3\n",
       "parallelism: must be in [1, max_trials]"},
      {"search:\n  train.lr: {choices: [0.01]}\nmethod: bayes\nmetric: val_loss\n", "method: must be grid, random or asha"},
      {"search:\n  train.lr: {choices: [0.01]}\nmethod: random\nmax_trials: 2\n", "metric:"},
      {"search:\n  train.lr: {choices: [0.01]}\nmethod: random\nmetric: val_loss\nmax_trials: 2\nbudget: 3\n",
       "budget: not a sweep field"},
      // A misspelt metric (never reported: ASHA would pause nothing, no trial be best).
      {"search:\n  train.lr: {choices: [0.01]}\nmethod: random\nmetric: val_acuracy\nmax_trials: 2\n",
       "metric: 'val_acuracy' is not an evaluation metric (val_loss|val_accuracy|val_f1|val_perplexity)"},
      // A field's values as a mapping without their kind (choices: left out): a key that is a list.
      {"search:\n  train.lr: {[0.01, 0.1]}\nmethod: random\nmetric: val_loss\nmax_trials: 2\n", "sweep: line "},
  };
  for (const Case& c : cases) {
    StatusOr<v1::SweepSpec> spec = LoadSweepSpec(Sweep(c.rest));
    ASSERT_FALSE(spec.ok()) << c.rest;
    EXPECT_EQ(spec.status().code(), Status::kInvalidArgument);
    EXPECT_EQ(spec.status().message().rfind(c.expected, 0), 0u) << spec.status().message();
  }
  StatusOr<v1::SweepSpec> no_base = LoadSweepSpec("search: {train.lr: {choices: [1]}}\nmethod: random\nmetric: x\n");
  EXPECT_EQ(no_base.status().message().rfind("base:", 0), 0u) << no_base.status().message();
}

// An alias in the base shares its anchor's node: a search of the aliased field must not
// carry its values into the anchor (priority, model.arch: what SubmitSweep permits on the
// base alone).
TEST(SweepSpecTest, AnAliasInTheBaseCannotCarryASearchIntoPriorityOrArch) {
  StatusOr<v1::SweepSpec> priority = LoadSweepSpec(
      "base:\n"
      "  priority: &p 0\n"
      "  model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 48}\n"
      "  data: {path: /data/x, tokenizer: {vocab_size: 64}}\n"
      "  train: {max_steps: 400, warmup_steps: *p, batching: {batch_size: 8}}\n"
      "search:\n  train.warmup_steps: {choices: [0, 1000000]}\nmethod: grid\nmetric: val_loss\n");
  ASSERT_TRUE(priority.ok()) << priority.status().ToString();
  StatusOr<v1::JobSpec> trial = TrialSpec(*priority, TrialParams(*priority, 1));
  ASSERT_TRUE(trial.ok()) << trial.status().ToString();
  EXPECT_EQ(trial->train().warmup_steps(), 1000000);
  EXPECT_EQ(trial->priority(), 0);

  StatusOr<v1::SweepSpec> arch = LoadSweepSpec(
      "base:\n"
      "  model: {arch: &a transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 48}\n"
      "  data: {path: /data/x, text_field: *a, tokenizer: {vocab_size: 64}}\n"
      "  train: {max_steps: 400, batching: {batch_size: 8}}\n"
      "search:\n  data.text_field: {choices: [transformer_classifier, torchscript]}\nmethod: grid\n"
      "metric: val_loss\n");
  ASSERT_TRUE(arch.ok()) << arch.status().ToString();
  trial = TrialSpec(*arch, TrialParams(*arch, 1));
  ASSERT_TRUE(trial.ok()) << trial.status().ToString();
  EXPECT_EQ(trial->data().text_field(), "torchscript");
  EXPECT_EQ(trial->model().arch(), "transformer_classifier");
}

}  // namespace
}  // namespace nightshift
