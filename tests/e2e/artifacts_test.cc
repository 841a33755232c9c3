// The trained model out and the run's history (issue 17), with the real binaries on
// loopback: a finished job's model folder downloaded with `nightshift job artifacts` and
// verified; the refusals (another user's job, no model yet, a corrupted file: an error and
// no partial folder); the metric history across a SIGKILL and restart of the coordinator.
#include <gtest/gtest.h>

#include "common/model_folder.h"
#include "coordinator/auth.h"
#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

std::string Spec(const std::string& data, int epochs) {
  return "name: e2e-artifacts\n"
         "model: {arch: transformer_classifier, layers: 1, d_model: 32, heads: 2, ffn: 64, max_len: 32}\n"
         "data: {format: text_dir, path: " + data + ", validation_fraction: 0.2, tokenizer: {vocab_size: 64}}\n"
         "train: {epochs: " + std::to_string(epochs) +
         ", lr: 0.003, warmup_steps: 2, seed: 7, batching: {batch_size: 8}, threads: 1}\n"
         "checkpoint: {every_steps: 10, keep_last: 2}\n";
}

grpc::Status Metrics(Cluster& c, const std::string& id, v1::JobMetrics* out) {
  v1::GetJobMetricsRequest req;
  req.set_id(id);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return c.jobs()->GetJobMetrics(&ctx, req, out);
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename().string());
  return names;
}

TEST(ArtifactsE2eTest, MetricHistorySurvivesCoordinatorSigkill) {
  Cluster cluster("metrics-history");
  const std::string data = cluster.MakeData(60);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1);
  v1::Job job;
  ASSERT_TRUE(cluster.Submit(Spec(data, 4), &job).ok());
  const std::string id = job.id();
  // Past the first epoch's evaluation (12 steps an epoch).
  v1::JobMetrics before;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Metrics(cluster, id, &before).ok() && before.attempts_size() > 0 && before.attempts(0).evals_size() >= 1 &&
        before.attempts(0).train_size() >= 5)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(before.attempts_size(), 0);
  ASSERT_GE(before.attempts(0).evals_size(), 1);
  cluster.coordinator().Kill(SIGKILL);
  cluster.StartCoordinator({}, /*same_port=*/true);
  v1::JobMetrics restarted;
  ASSERT_TRUE(Metrics(cluster, id, &restarted).ok());
  ASSERT_GT(restarted.attempts_size(), 0);
  // Everything it had told before the kill is still there.
  EXPECT_GE(restarted.attempts(0).evals_size(), before.attempts(0).evals_size());
  EXPECT_EQ(restarted.attempts(0).evals(0).DebugString(), before.attempts(0).evals(0).DebugString());
  EXPECT_EQ(restarted.attempts(0).train(0).DebugString(), before.attempts(0).train(0).DebugString());

  job = cluster.WaitForEnd(id, 120);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  v1::JobMetrics after;
  ASSERT_TRUE(Metrics(cluster, id, &after).ok());
  ASSERT_EQ(after.attempts_size(), 1);
  const v1::AttemptMetrics& a = after.attempts(0);
  ASSERT_EQ(a.evals_size(), 4) << a.DebugString();  // one per epoch, the final one included
  for (int i = 1; i < a.evals_size(); ++i) EXPECT_GT(a.evals(i).step(), a.evals(i - 1).step());
  EXPECT_DOUBLE_EQ(a.evals(3).metrics().at("val_accuracy"), job.metrics().at("val_accuracy"));
  EXPECT_LE(a.train_size(), 256);
  EXPECT_GE(a.train(a.train_size() - 1).step(), a.evals(2).step());
  for (const auto& t : a.train()) EXPECT_GT(t.loss(), 0);

  std::string out;
  EXPECT_EQ(cluster.Cli({"job", "metrics", id}, &out), 0) << out;
  EXPECT_NE(out.find("Attempt 0: 4 evaluations"), std::string::npos) << out;
  EXPECT_NE(out.find("val_accuracy"), std::string::npos) << out;
  EXPECT_EQ(cluster.Cli({"-o", "csv", "job", "metrics", id}, &out), 0) << out;
  EXPECT_EQ(out.rfind("attempt,step,epoch,metric,value\n", 0), 0u) << out;
}

// The recipe through the service: evaluations every 4 steps, early stopping (a min_delta
// nothing beats: the first evaluation sets the best, the next two do not improve) and
// export.best. The job SUCCEEDS with the reason in its events, and the model downloaded
// is the evaluation with the lowest val_loss, whose checkpoint outlived keep_last 1.
TEST(ArtifactsE2eTest, EarlyStoppingEndsTheJobAndTheBestEvaluationIsTheModel) {
  Cluster cluster("recipe");
  const std::string data = cluster.MakeData(60);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1);
  v1::Job job;
  ASSERT_TRUE(cluster
                  .Submit("name: e2e-recipe\n"
                          "model: {arch: transformer_classifier, layers: 1, d_model: 32, heads: 2, ffn: 64, max_len: 32}\n"
                          "data: {format: text_dir, path: " + data + ", validation_fraction: 0.2, tokenizer: {vocab_size: 64}}\n"
                          "train: {epochs: 6, lr: 0.3, grad_clip: 0, warmup_steps: 0, seed: 7, batching: {batch_size: 8},"
                          " threads: 1, early_stopping: {metric: val_loss, patience: 2, min_delta: 1000}}\n"
                          "eval: {every_steps: 4}\n"
                          "export: {best: val_loss}\n"
                          "checkpoint: {every_steps: 5, keep_last: 1}\n",
                          &job)
                  .ok());
  job = cluster.WaitForEnd(job.id(), 120);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  std::string events;
  bool told = false;
  for (const auto& e : job.events()) {
    events += e.reason() + "\n";
    told = told || e.reason().rfind("early stopping at step 12: val_loss has not improved", 0) == 0;
  }
  EXPECT_TRUE(told) << events;
  EXPECT_EQ(job.progress().step(), 12);
  v1::JobMetrics metrics;
  ASSERT_TRUE(Metrics(cluster, job.id(), &metrics).ok());
  ASSERT_EQ(metrics.attempts_size(), 1);
  const auto& evals = metrics.attempts(0).evals();
  ASSERT_EQ(evals.size(), 3) << metrics.DebugString();
  int64_t best_step = -1;
  double best = 1e300;
  for (const auto& e : evals)
    if (e.metrics().at("val_loss") < best) best = e.metrics().at("val_loss"), best_step = e.step();
  EXPECT_EQ(job.model().step(), best_step);
  const std::string dl = cluster.dir() + "/downloads";
  std::string out;
  ASSERT_EQ(cluster.Cli({"job", "artifacts", job.id(), "--output", dl + "/model"}, &out), 0) << out;
  EXPECT_TRUE(VerifyModelFolder(dl + "/model").ok());
  EXPECT_EQ(ModelFolderStep(dl + "/model"), best_step);
}

// Needs the trainer's export (worker/trainer/checkpoint/export.h): the job's model/ folder and its
// "export" event.
TEST(ArtifactsE2eTest, AFinishedJobsModelDownloadsVerifiedAndACorruptedFileIsRefused) {
  Cluster cluster("artifacts");
  const std::string data = cluster.MakeData(60);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1);
  v1::Job job;
  ASSERT_TRUE(cluster.Submit(Spec(data, 1), &job).ok());  // 13 steps; checkpoints at 10 and 13
  job = cluster.WaitForEnd(job.id(), 120);
  ASSERT_EQ(job.state(), v1::SUCCEEDED) << job.reason();
  const std::string id = job.id();
  ASSERT_FALSE(job.model().path().empty()) << "the trainer reported no export";
  EXPECT_EQ(job.model().worker(), "w1");
  EXPECT_EQ(job.model().step(), job.progress().step());

  const std::string dl = cluster.dir() + "/downloads";
  std::string out;
  ASSERT_EQ(cluster.Cli({"job", "artifacts", id, "--output", dl + "/model"}, &out), 0) << out;
  EXPECT_TRUE(VerifyModelFolder(dl + "/model").ok());
  for (const char* name : {"model.safetensors", "config.json", "tokenizer.model", "checksums.json"})
    EXPECT_TRUE(fs::exists(dl + "/model/" + name)) << name;
  EXPECT_EQ(Entries(dl), std::vector<std::string>{"model"});

  // A kept checkpoint, exported on request by the worker's trainer: its own step and
  // weights; a step that is not kept is refused naming those that are.
  ASSERT_EQ(cluster.Cli({"job", "artifacts", id, "--step", "10", "--output", dl + "/step10"}, &out), 0) << out;
  EXPECT_TRUE(VerifyModelFolder(dl + "/step10").ok());
  EXPECT_EQ(ModelFolderStep(dl + "/step10"), 10);
  EXPECT_EQ(ModelFolderStep(dl + "/model"), 13);
  EXPECT_NE(ReadAll(dl + "/step10/model.safetensors"), ReadAll(dl + "/model/model.safetensors"));
  EXPECT_TRUE(fs::exists(dl + "/step10/tokenizer.model"));
  EXPECT_EQ(cluster.Cli({"job", "artifacts", id, "--step", "7", "--output", dl + "/step7"}, &out), 3) << out;
  EXPECT_NE(out.find("kept: 10, 13"), std::string::npos) << out;
  fs::remove_all(dl + "/step10");

  // One byte of the weights changes on the worker's disk: the download is refused.
  const std::string weights = job.model().path() + "/model.safetensors";
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.get(c);
    f.seekp(100);
    f.put(static_cast<char>(c ^ 1));
  }
  EXPECT_EQ(cluster.Cli({"job", "artifacts", id, "--output", dl + "/again"}, &out), 5) << out;
  EXPECT_NE(out.find("model.safetensors"), std::string::npos) << out;
  EXPECT_EQ(Entries(dl), std::vector<std::string>{"model"});  // no partial folder
}

TEST(ArtifactsE2eTest, AnotherUsersJobAndAJobWithoutAModelAreRefused) {
  Cluster cluster("artifacts-refused");
  const std::string tokens = cluster.dir() + "/tokens";
  {
    std::ofstream f(tokens);
    f << Sha256Hex("alice-secret") << " user alice\n" << Sha256Hex("bob-secret") << " user bob\n";
  }
  cluster.StartCoordinator({"--token-file", tokens});
  const std::string data = cluster.MakeData(10);
  const std::string spec = cluster.dir() + "/job.yaml";
  std::ofstream(spec) << Spec(data, 1);
  std::string out;
  ASSERT_EQ(cluster.Cli({"--token", "alice-secret", "job", "submit", spec}, &out), 0) << out;
  const std::string id = out.substr(0, out.find('\n'));
  const std::string dl = cluster.dir() + "/downloads";
  fs::create_directories(dl);
  // No worker: the job stays QUEUED, with no model.
  EXPECT_EQ(cluster.Cli({"--token", "alice-secret", "job", "artifacts", id, "--output", dl + "/m"}, &out), 3) << out;
  EXPECT_NE(out.find("FAILED_PRECONDITION"), std::string::npos) << out;
  EXPECT_NE(out.find("QUEUED"), std::string::npos) << out;
  EXPECT_EQ(cluster.Cli({"--token", "bob-secret", "job", "artifacts", id, "--output", dl + "/m"}, &out), 3) << out;
  EXPECT_NE(out.find("PERMISSION_DENIED"), std::string::npos) << out;
  EXPECT_EQ(cluster.Cli({"--token", "bob-secret", "job", "metrics", id}, &out), 3) << out;
  EXPECT_NE(out.find("PERMISSION_DENIED"), std::string::npos) << out;
  EXPECT_TRUE(Entries(dl).empty());
}

}  // namespace
}  // namespace nightshift::testing_e2e
