// coordinator/tracking.h's pure parts: the spec as params, and the points past a run's
// cursors (every attempt, every evaluation, nothing twice, the downsampled curve's new
// points only). The reporter against a real MLflow server: tests/e2e/tracking_test.cc.
#include "coordinator/tracking.h"

#include <gtest/gtest.h>

#include <map>

namespace nightshift {
namespace {

TEST(TrackingTest, TheSpecBecomesDottedParamsWithLongValuesCut) {
  v1::JobSpec spec;
  spec.set_name("lr-sweep");
  spec.mutable_train()->set_lr(0.002);
  spec.mutable_model()->set_arch("llama");
  spec.mutable_data()->set_path(std::string(7000, 'x'));
  std::map<std::string, std::string> params;
  for (const MlflowPair& p : SpecParams(spec)) EXPECT_TRUE(params.emplace(p.key, p.value).second) << p.key;
  EXPECT_EQ(params["name"], "lr-sweep");
  EXPECT_EQ(params["train.lr"], "0.002");
  EXPECT_EQ(params["model.arch"], "llama");
  ASSERT_EQ(params["data.path"].size(), kMlflowParamValueBytes);
  EXPECT_EQ(params["data.path"].substr(kMlflowParamValueBytes - 3), "...");
}

TEST(TrackingTest, EachOwnerHasAnExperimentOfTheirName) {
  EXPECT_EQ(ExperimentName("nightshift/{owner}", "alice"), "nightshift/alice");
  EXPECT_EQ(ExperimentName("{owner}: {owner}'s runs", "bob"), "bob: bob's runs");
  EXPECT_EQ(ExperimentName("nightshift/{owner}", ""), "nightshift/anonymous");  // insecure mode
  EXPECT_EQ(ExperimentName("shared", "alice"), "shared");
}

// A grant on the one experiment of a pattern without {owner} would let every owner read
// every job's run: the two flags are refused together, naming both.
TEST(TrackingTest, AnOwnersPermissionNeedsAnExperimentPerOwner) {
  EXPECT_TRUE(CheckOwnerPermission("nightshift/{owner}", "READ").ok());
  EXPECT_TRUE(CheckOwnerPermission("shared", "").ok());
  const Status refused = CheckOwnerPermission("shared", "READ");
  EXPECT_EQ(refused.code(), Status::kInvalidArgument);
  EXPECT_NE(refused.message().find("--mlflow-owner-permission READ: --mlflow-experiment 'shared' names no {owner}"),
            std::string::npos)
      << refused.ToString();
}

v1::TrainPoint Point(int64_t step, double loss, int64_t time_ms) {
  v1::TrainPoint t;
  t.set_step(step);
  t.set_loss(loss);
  t.set_lr(0.1);
  t.set_time_ms(time_ms);
  return t;
}

std::vector<std::pair<int64_t, double>> Of(const std::vector<MlflowMetric>& points, const std::string& key) {
  std::vector<std::pair<int64_t, double>> out;
  for (const MlflowMetric& m : points)
    if (m.key == key) out.emplace_back(m.step, m.value);
  return out;
}

TEST(TrackingTest, EveryPointIsSentOnceAcrossAttemptsAndEvaluations) {
  v1::JobMetrics m;
  v1::AttemptMetrics* a0 = m.add_attempts();
  a0->set_attempt(0);
  *a0->add_train() = Point(10, 2.0, 1000);
  *a0->add_train() = Point(20, 1.5, 2000);
  v1::EvalPoint* e = a0->add_evals();
  e->set_step(20);
  (*e->mutable_metrics())["val_loss"] = 1.7;
  (*e->mutable_metrics())["val_accuracy"] = 0.6;
  v1::TrackedRun run;
  std::vector<MlflowMetric> points = NewPoints(m, 1, &run);
  EXPECT_EQ(Of(points, "loss"), (std::vector<std::pair<int64_t, double>>{{10, 2.0}, {20, 1.5}}));
  EXPECT_EQ(Of(points, "learning_rate").size(), 2u);
  EXPECT_EQ(Of(points, "val_loss"), (std::vector<std::pair<int64_t, double>>{{20, 1.7}}));
  EXPECT_EQ(Of(points, "val_accuracy"), (std::vector<std::pair<int64_t, double>>{{20, 0.6}}));
  EXPECT_EQ(points[0].timestamp_ms, 1000);
  EXPECT_EQ(points.back().timestamp_ms, 1);  // an evaluation without a time: the fallback
  EXPECT_TRUE(NewPoints(m, 1, &run).empty());  // nothing twice

  // The curve downsampled (step 10 dropped), a new point, and a second attempt that
  // resumed from step 15: only what is new goes, the new attempt's from its first point.
  a0->mutable_train()->DeleteSubrange(0, 1);
  *a0->add_train() = Point(40, 1.2, 3000);
  v1::AttemptMetrics* a1 = m.add_attempts();
  a1->set_attempt(1);
  *a1->add_train() = Point(16, 1.6, 4000);
  points = NewPoints(m, 1, &run);
  EXPECT_EQ(Of(points, "loss"), (std::vector<std::pair<int64_t, double>>{{40, 1.2}, {16, 1.6}}));
  EXPECT_TRUE(Of(points, "val_loss").empty());
  ASSERT_EQ(run.attempts_size(), 2);
  EXPECT_EQ(run.attempts(0).train_step(), 40);
  EXPECT_EQ(run.attempts(0).evals(), 1);
  EXPECT_EQ(run.attempts(1).train_step(), 16);
}

}  // namespace
}  // namespace nightshift
