#include "worker/progress_aggregator.h"

#include <gtest/gtest.h>

#include <cmath>

namespace nightshift {
namespace {

format::ProgressRecord Record(const std::string& event, std::map<std::string, double> numbers,
                              std::map<std::string, std::string> strings = {}) {
  return {event, std::move(numbers), std::move(strings)};
}

// This worker holds global ranks 2 and 3: rank 2 speaks for the task, both feed metrics.
TEST(ProgressAggregatorTest, TheFirstLocalRankSpeaksForTheTask) {
  ProgressAggregator agg(/*first_rank=*/2);
  v1::TaskStatus status;
  agg.Fill(&status);
  EXPECT_FALSE(status.has_progress());  // the coordinator keeps the job's own until a step comes

  EXPECT_TRUE(agg.Add(2, Record("start", {{"total_steps", 100}})));
  EXPECT_TRUE(agg.Add(2, Record("step", {{"step", 40}, {"loss", 1.5}, {"step_seconds", 0.5}, {"lr", 1e-3}})));
  EXPECT_FALSE(agg.Add(3, Record("step", {{"step", 41}, {"loss", 9.0}})));
  agg.Fill(&status);
  ASSERT_TRUE(status.has_progress());
  EXPECT_EQ(status.progress().step(), 40);
  EXPECT_EQ(status.progress().total_steps(), 100);  // from start: a step need not repeat it
  EXPECT_DOUBLE_EQ(status.progress().loss(), 1.5);
  EXPECT_DOUBLE_EQ(status.progress().eta_seconds(), 60 * 0.5);
  EXPECT_TRUE(status.progress().has_updated());

  ASSERT_EQ(agg.ranks().size(), 2u);
  EXPECT_EQ(agg.ranks().at(3).step.Number("step"), 41);
  EXPECT_TRUE(agg.ranks().at(3).checkpoint.event.empty());
}

TEST(ProgressAggregatorTest, CheckpointAndFinalMetrics) {
  ProgressAggregator agg(0);
  agg.Add(0, Record("checkpoint", {{"step", 50}, {"bytes", 1000}}, {{"path", "/ckpt/step-50"}}));
  agg.Add(0, Record("eval", {{"step", 50}, {"val_loss", 0.7}, {"val_perplexity", NAN}, {"epoch", 1}}));
  agg.Add(0, Record("done", {{"step", 60}, {"val_accuracy", 0.9}, {"train_seconds", 12}}));
  agg.Add(1, Record("done", {{"val_accuracy", 0.1}}));  // not the first rank: ignored
  v1::TaskStatus status;
  agg.Fill(&status);
  EXPECT_EQ(status.checkpoint_step(), 50);
  EXPECT_EQ(status.checkpoint_path(), "/ckpt/step-50");
  EXPECT_EQ(agg.ranks().at(0).checkpoint.Number("bytes"), 1000);
  // val_* and train_seconds only; NaN means not applicable (a classifier's perplexity).
  std::map<std::string, double> metrics(status.metrics().begin(), status.metrics().end());
  EXPECT_EQ(metrics, (std::map<std::string, double>{{"train_seconds", 12}, {"val_accuracy", 0.9}, {"val_loss", 0.7}}));
}

TEST(ProgressAggregatorTest, LastErrorOfEachRank) {
  ProgressAggregator agg(0);
  EXPECT_EQ(agg.LastError(1), "");
  agg.Add(1, Record("error", {}, {{"message", "first"}}));
  agg.Add(1, Record("error", {}, {{"message", "CUDA out of memory"}}));
  EXPECT_EQ(agg.LastError(1), "CUDA out of memory");
  EXPECT_EQ(agg.LastError(0), "");
}

// Every evaluation is forwarded (the coordinator's metric history), and the export event
// says where the model folder is.
TEST(ProgressAggregatorTest, EveryEvalAndTheExportedModel) {
  ProgressAggregator agg(0);
  agg.Add(0, Record("eval", {{"step", 10}, {"epoch", 0}, {"val_loss", 0.9}, {"val_perplexity", NAN}}));
  agg.Add(0, Record("eval", {{"step", 20}, {"epoch", 1}, {"val_loss", 0.6}, {"val_accuracy", 0.8}}));
  agg.Add(0, Record("export", {{"step", 20}}, {{"path", "/ckpt/j-1/model"}}));
  v1::TaskStatus status;
  agg.Fill(&status);
  ASSERT_EQ(status.evals_size(), 2);
  EXPECT_EQ(status.evals(0).step(), 10);
  EXPECT_EQ(status.evals(0).metrics().size(), 1u);  // NaN left out
  EXPECT_EQ(status.evals(1).epoch(), 1);
  EXPECT_DOUBLE_EQ(status.evals(1).metrics().at("val_accuracy"), 0.8);
  EXPECT_EQ(status.model_path(), "/ckpt/j-1/model");
  EXPECT_EQ(status.model_step(), 20);
  for (int i = 0; i < ProgressAggregator::kMaxEvals + 5; ++i) agg.Add(0, Record("eval", {{"step", 100.0 + i}}));
  agg.Fill(&status);
  EXPECT_EQ(status.evals_size(), ProgressAggregator::kMaxEvals);
  EXPECT_EQ(status.evals(status.evals_size() - 1).step(), 100 + ProgressAggregator::kMaxEvals + 4);
}

}  // namespace
}  // namespace nightshift
