// The recipe settings through whole runs of the trainer: train.accumulate_steps (an
// accumulated step is the full batch's step, alone and with data parallelism),
// train.schedule (the learning rate every step trained with), eval.every_steps,
// train.early_stopping and export.best.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/format/checkpoint_layout.h"
#include "tests/worker/trainer/ranks_util.h"
#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/checkpoint/checkpoint.h"
#include "worker/trainer/checkpoint/export.h"
#include "worker/trainer/optim/schedule.h"
#include "worker/trainer/run.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

namespace fs = std::filesystem;

// No dropout: a step cut into two batches draws no other masks than the whole batch.
TrainConfig Config(const std::string& name) {
  TrainConfig c = testing::TinyConfig(testing::FreshDir(name), /*n_train=*/40);
  c.model.dropout = 0;
  c.train.warmup_steps = 2;
  return c;
}

std::vector<torch::Tensor> Final(const TrainConfig& c) {
  auto model = BuildSequenceModel(c.model, c.data.vocab_size, c.data.num_classes, c.data.pad_id);
  return testing::LatestCheckpointParameters(*model, c.checkpoint_dir);
}

void ExpectClose(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double tolerance) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(1e-3, b[i].abs().max().item<double>());
    EXPECT_LE((a[i] - b[i]).abs().max().item<double>() / scale, tolerance) << "parameter " << i;
  }
}

std::vector<format::ProgressRecord> Events(const MemoryProgressSink& p, const std::string& event) {
  std::vector<format::ProgressRecord> out;
  for (const auto& r : p.records)
    if (r.event == event) out.push_back(r);
  return out;
}

// The gradients of the run's first step (after its one synchronisation, with ranks),
// through the loop's own calls (run.h); parameters without one read as zeros.
std::vector<torch::Tensor> FirstStepGradients(const TrainConfig& c, const RankInfo& rank = RankInfo{}) {
  MemoryProgressSink progress;
  std::unique_ptr<Run> run = BuildRun(c, rank, progress);
  run->OpenEpoch();
  double wait = 0;
  const StepBatches step = run->NextBatches(&wait);
  EXPECT_EQ(step.batches.size(), size_t(c.train.accumulate_steps));
  run->SetLearningRate();
  run->agreement->Begin(run->Intent());
  run->ForwardBackward(step);
  std::vector<torch::Tensor> out;
  for (const auto& p : run->model->parameters())
    out.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return out;
}

TEST(RecipeTest, AnAccumulatedStepIsTheFullBatchStep) {
  TrainConfig whole = Config("recipe_whole");
  whole.train.batch_size = 8;
  TrainConfig halves = Config("recipe_halves");
  halves.train.batch_size = 4;
  halves.train.accumulate_steps = 2;
  ExpectClose(FirstStepGradients(halves), FirstStepGradients(whole), 1e-6);
  // Whole runs: the same step count (40 samples / 8, two epochs).
  MemoryProgressSink p1, p2;
  ASSERT_EQ(RunTraining(whole, RankInfo{}, p1), kExitOk) << p1.records.back().String("message");
  ASSERT_EQ(RunTraining(halves, RankInfo{}, p2), kExitOk) << p2.records.back().String("message");
  EXPECT_EQ(p1.records.back().Number("step"), 10);
  EXPECT_EQ(p2.records.back().Number("step"), 10);
  // An epoch of 10 batches of 4 in steps of 3: 3, 3, 3, then the 1 left.
  TrainConfig thirds = Config("recipe_thirds");
  thirds.train.batch_size = 4;
  thirds.train.accumulate_steps = 3;
  MemoryProgressSink p3;
  ASSERT_EQ(RunTraining(thirds, RankInfo{}, p3), kExitOk) << p3.records.back().String("message");
  EXPECT_EQ(p3.records.back().Number("step"), 8);
}

// Two ranks of batch 2 accumulating 2 batches each: the same 8 samples per step as one
// rank's batch of 8, with one gradient synchronisation per step.
TEST(RecipeTest, AnAccumulatedStepWithDataParallelismIsTheFullBatchStep) {
  TrainConfig whole = Config("recipe_ddp_whole");
  whole.train.batch_size = 8;
  const std::vector<torch::Tensor> reference = FirstStepGradients(whole);
  TrainConfig c = Config("recipe_ddp");
  c.train.batch_size = 2;
  c.train.accumulate_steps = 2;
  c.data_parallel.world_size = 2;
  c.data_parallel.timeout_seconds = 60;
  const int port = testing::FreePort();
  std::vector<std::vector<torch::Tensor>> grads(2);
  testing::RunRanks(2, [&](int r) { grads[r] = FirstStepGradients(c, testing::LoopbackRank(r, 2, port)); });
  ExpectClose(grads[0], reference, 1e-6);
  ExpectClose(grads[1], reference, 1e-6);
}

TEST(RecipeTest, EveryStepTrainsWithTheSchedulesLearningRate) {
  for (const std::string schedule : {"linear", "cosine", "constant"}) {
    TrainConfig c = Config("recipe_schedule_" + schedule);
    c.train.schedule = schedule;
    c.train.warmup_steps = 3;
    MemoryProgressSink p;
    ASSERT_EQ(RunTraining(c, RankInfo{}, p), kExitOk) << p.records.back().String("message");
    const auto steps = Events(p, "step");
    ASSERT_FALSE(steps.empty());
    for (const auto& r : steps) {
      const int64_t step = static_cast<int64_t>(r.Number("step"));
      EXPECT_DOUBLE_EQ(r.Number("lr"), LearningRate(schedule, step - 1, 3, 10, c.train.lr)) << schedule << " step " << step;
    }
  }
}

// Evaluations every 2 steps; with a min_delta no change can beat, the first sets the best
// and the next two do not improve on it: the run ends after the third, a success that says why.
TEST(RecipeTest, EvaluatesEveryNStepsAndStopsEarlyWithTheReason) {
  TrainConfig c = Config("recipe_early");
  c.eval_every_steps = 2;
  c.train.early_stopping.metric = "val_loss";
  c.train.early_stopping.patience = 2;
  c.train.early_stopping.min_delta = 1e9;
  MemoryProgressSink p;
  ASSERT_EQ(RunTraining(c, RankInfo{}, p), kExitOk) << p.records.back().String("message");
  const auto evals = Events(p, "eval");
  ASSERT_EQ(evals.size(), 3u);
  for (size_t i = 0; i < evals.size(); ++i) EXPECT_EQ(evals[i].Number("step"), 2.0 * (i + 1));
  EXPECT_EQ(p.records.back().event, "done");
  EXPECT_EQ(p.records.back().Number("step"), 6);
  EXPECT_NE(p.records.back().String("stop_reason").find("early stopping at step 6: val_loss has not improved"),
            std::string::npos)
      << p.records.back().String("stop_reason");
  // Started again (its export cut short): it stops there again, training nothing.
  MemoryProgressSink again;
  ASSERT_EQ(RunTraining(c, RankInfo{}, again), kExitOk);
  EXPECT_TRUE(Events(again, "step").empty());
  EXPECT_EQ(again.records.back().String("stop_reason"), p.records.back().String("stop_reason"));
  // Without early stopping, the same evaluations come every 2 steps to the end (10).
  TrainConfig plain = Config("recipe_every");
  plain.eval_every_steps = 2;
  MemoryProgressSink q;
  ASSERT_EQ(RunTraining(plain, RankInfo{}, q), kExitOk);
  EXPECT_EQ(Events(q, "eval").size(), 5u);
  EXPECT_EQ(q.records.back().String("stop_reason"), "");
}

// A finished run started again (its export was cut short) evaluates its last step again
// for the export, and does not count that evaluation again: four evaluations without
// improvement under patience 5 stay four (before, the fifth ended a complete run as
// "early stopping").
TEST(RecipeTest, AFinishedRunStartedAgainDoesNotCountItsLastEvaluationTwice) {
  TrainConfig c = Config("recipe_finished_again");
  c.eval_every_steps = 2;  // evaluations at 2, 4, 6, 8, 10: counts 0 to 4
  c.train.early_stopping.metric = "val_loss";
  c.train.early_stopping.patience = 5;
  c.train.early_stopping.min_delta = 1e9;
  MemoryProgressSink first, again;
  ASSERT_EQ(RunTraining(c, RankInfo{}, first), kExitOk);
  EXPECT_EQ(first.records.back().String("stop_reason"), "");
  ASSERT_EQ(RunTraining(c, RankInfo{}, again), kExitOk);
  EXPECT_EQ(Events(again, "eval").size(), 1u);
  EXPECT_EQ(again.records.back().String("stop_reason"), "");
}

// export.best by val_loss, evaluated every 2 steps, keep_last 1; a high learning rate makes
// the loss rise after its best.
TrainConfig BestConfig(const std::string& name, int epochs) {
  TrainConfig c = Config(name);
  c.train.lr = 0.3;
  c.train.grad_clip = 0;
  c.train.epochs = epochs;
  c.eval_every_steps = 2;
  c.export_best = "val_loss";
  c.checkpoint.keep_last = 1;
  return c;
}

// The exported folder holds the parameters of the checkpoint of `step`.
void ExpectExportedIsStep(const TrainConfig& c, int64_t step) {
  auto model = BuildSequenceModel(c.model, c.data.vocab_size, c.data.num_classes, c.data.pad_id);
  CheckpointManager(CheckpointOptions{c.checkpoint_dir}).LoadModelAt(step, *model);
  const auto exported = ReadSafetensors(c.checkpoint_dir + "/model/model.safetensors");
  for (const auto& [name, t] : ExportTensors(c.model.arch, *model))
    EXPECT_TRUE(torch::equal(t, exported.at(name))) << name;
}

// export.best: the exported model is the checkpoint of the evaluation with the lowest
// val_loss, kept although keep_last 1 prunes every other.
TEST(RecipeTest, ExportBestExportsTheBestEvaluatedStep) {
  const TrainConfig c = BestConfig("recipe_best", 4);
  MemoryProgressSink p;
  ASSERT_EQ(RunTraining(c, RankInfo{}, p), kExitOk) << p.records.back().String("message");
  double best = 1e300;
  int64_t best_step = -1;
  for (const auto& r : Events(p, "eval"))
    if (r.Number("val_loss") < best) best = r.Number("val_loss"), best_step = static_cast<int64_t>(r.Number("step"));
  ASSERT_LT(best_step, 20) << "the loss did not rise after its best; this test needs it to";
  const auto exports = Events(p, "export");
  ASSERT_EQ(exports.size(), 1u);
  EXPECT_EQ(exports[0].Number("step"), best_step);
  EXPECT_EQ(CheckpointManager(CheckpointOptions{c.checkpoint_dir}).ListComplete().size(), 2u);  // the last, and the best
  ExpectExportedIsStep(c, best_step);
}

// export.best after a resume on a worker without the best step's checkpoint (the newest
// alone was fetched, or the best set aside; an unreadable one goes the same way): the job
// ends with the final model, as transformers' Trainer does when the best checkpoint is
// gone, and a warning says so; before, it failed at the end, at every retry.
TEST(RecipeTest, ExportBestWhoseCheckpointIsGoneExportsTheFinalModelWithAWarning) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto best_config = [](const std::string& name) {
    TrainConfig c = BestConfig(name, 5);  // 25 steps
    c.checkpoint.every_steps = 2;
    return c;
  };
  MemoryProgressSink whole;
  ASSERT_EQ(RunTraining(best_config("recipe_best_whole"), RankInfo{}, whole), kExitOk);
  ASSERT_LT(Events(whole, "export")[0].Number("step"), 24) << "the best must come before the last checkpoint";
  TrainConfig c = best_config("recipe_best_gone");
  EXPECT_DEATH(testing::RunUntilAbort(c, 25), "fault injection: aborting at step 25");
  std::vector<std::string> kept = CheckpointManager(CheckpointOptions{c.checkpoint_dir}).ListComplete();
  ASSERT_EQ(kept.size(), 2u) << "the best and the newest (24)";
  fs::remove_all(kept.front());  // the best's
  MemoryProgressSink p;
  ASSERT_EQ(RunTraining(c, RankInfo{}, p), kExitOk) << p.records.back().String("message");
  const auto exports = Events(p, "export");
  ASSERT_EQ(exports.size(), 1u);
  EXPECT_EQ(exports[0].Number("step"), 25);
  bool warned = false;
  for (const auto& w : Events(p, "warning"))
    warned = warned || w.String("message").find("export.best: the checkpoint of the best step") != std::string::npos;
  EXPECT_TRUE(warned);
  ExpectExportedIsStep(c, 25);
}

// The evaluation at a checkpoint step is in that checkpoint (it runs first): a run that
// dies right after a new best resumes knowing it, and exports the step an uninterrupted
// run does. Before, the checkpoint held the best before it, and the run exported another.
// Early stopping's count is in it too (counted before the new best's save).
TEST(RecipeTest, TheEvaluationAtACheckpointStepIsInItsCheckpoint) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto config = [](const std::string& name) {
    TrainConfig c = BestConfig(name, 5);  // 25 steps
    c.checkpoint.every_steps = 2;
    c.train.early_stopping.metric = "val_loss";
    c.train.early_stopping.patience = 100;  // counts, never stops
    return c;
  };
  MemoryProgressSink whole;
  ASSERT_EQ(RunTraining(config("recipe_eval_saved_whole"), RankInfo{}, whole), kExitOk);
  const int64_t best = static_cast<int64_t>(Events(whole, "export")[0].Number("step"));
  ASSERT_LT(best, 24) << "the best must come before the last checkpoint";
  TrainConfig c = config("recipe_eval_saved_cut");
  EXPECT_DEATH(testing::RunUntilAbort(c, best + 1), "fault injection: aborting at step");
  format::CheckpointManifest saved;
  ASSERT_EQ(format::ReadManifest(c.checkpoint_dir + "/" + format::StepDirName(best), &saved), "");
  EXPECT_EQ(saved.position.at("evaluated_step").get<int64_t>(), best);
  EXPECT_EQ(saved.position.at("evals_without_improvement").get<int64_t>(), 0);
  for (const auto& e : Events(whole, "eval"))
    if (e.Number("step") == best) EXPECT_EQ(saved.position.at("stop_best").get<double>(), e.Number("val_loss"));
  MemoryProgressSink p;
  ASSERT_EQ(RunTraining(c, RankInfo{}, p), kExitOk) << p.records.back().String("message");
  EXPECT_EQ(Events(p, "export")[0].Number("step"), best);
  ExpectExportedIsStep(c, best);
}

// A stop (SIGTERM) saves before the evaluation due at its step: the resumed run makes it
// first, with the values an uninterrupted run had there, and every evaluation comes once.
TEST(RecipeTest, AnEvaluationAStopSavedBeforeRunsFirstOnResume) {
  const auto config = [](const std::string& name) {
    TrainConfig c = Config(name);
    c.eval_every_steps = 1;
    return c;
  };
  MemoryProgressSink whole;
  ASSERT_EQ(RunTraining(config("recipe_stop_eval_whole"), RankInfo{}, whole), kExitOk);
  TrainConfig c = config("recipe_stop_eval_cut");
  RequestStop();  // seen after the first step
  MemoryProgressSink stopped;
  EXPECT_EQ(RunTraining(c, RankInfo{}, stopped), kExitStopped);
  ClearStopRequest();
  EXPECT_TRUE(Events(stopped, "eval").empty());
  MemoryProgressSink resumed;
  ASSERT_EQ(RunTraining(c, RankInfo{}, resumed), kExitOk) << resumed.records.back().String("message");
  const auto evals = Events(resumed, "eval"), reference = Events(whole, "eval");
  ASSERT_EQ(evals.size(), reference.size());
  for (size_t i = 0; i < evals.size(); ++i) {
    EXPECT_EQ(evals[i].Number("step"), static_cast<double>(i + 1));
    EXPECT_EQ(evals[i].Number("val_loss"), reference[i].Number("val_loss")) << "step " << i + 1;
  }
  for (const auto& r : resumed.records) {  // step 1's evaluation before step 2 trains
    if (r.event != "eval" && r.event != "step") continue;
    EXPECT_EQ(r.event, "eval");
    break;
  }
}

}  // namespace
}  // namespace nightshift::trainer
