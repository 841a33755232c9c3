// The walking skeleton, end to end, with the real binaries on loopback.
#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

std::string SmallSpec(const std::string& data_path, int max_restarts = 0) {
  return "name: e2e-small\n"
         "model: {arch: transformer_classifier, layers: 1, d_model: 32, heads: 2, ffn: 64, dropout: 0.1, max_len: 48}\n"
         "data: {format: text_dir, path: " + data_path + ", validation_fraction: 0.2, tokenizer: {vocab_size: 64}}\n"
         "train: {epochs: 3, lr: 0.003, warmup_steps: 5, seed: 7, batching: {batch_size: 16}, threads: 1}\n"
         "resources: {world_size: 1}\n"
         "checkpoint: {every_steps: 10, keep_last: 2}\n"
         "restart: {max_restarts: " + std::to_string(max_restarts) + "}\n";
}

TEST(WalkingSkeletonTest, JobSucceedsAndSurvivesCoordinatorKill) {
  Cluster cluster("skeleton");
  const std::string data = cluster.MakeData(150);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1);

  v1::Job job;
  grpc::Status s = cluster.Submit(SmallSpec(data), &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string id = job.id();
  v1::Job done = cluster.WaitForEnd(id, 300);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << " / " << done.error();
  ASSERT_TRUE(done.metrics().count("val_accuracy"));
  EXPECT_GE(done.metrics().at("val_accuracy"), 0.9);  // the classes are separable by vocabulary
  EXPECT_TRUE(done.metrics().count("val_loss"));
  EXPECT_GT(done.progress().step(), 0);
  EXPECT_GT(done.checkpoint_step(), 0);

  // The CLI shows the same job as protobuf JSON.
  std::string out;
  ASSERT_EQ(cluster.Cli({"job", "describe", id, "-o", "json"}, &out), 0) << out;
  EXPECT_NE(out.find("\"state\": \"SUCCEEDED\""), std::string::npos) << out;
  EXPECT_NE(out.find("\"val_accuracy\""), std::string::npos) << out;

  // SIGKILL the coordinator, restart it on the same data: the job is there, unchanged.
  cluster.coordinator().Kill(SIGKILL);
  cluster.StartCoordinator();
  v1::Job after;
  ASSERT_TRUE(cluster.Get(id, &after).ok());
  EXPECT_EQ(after.state(), v1::SUCCEEDED);
  EXPECT_EQ(after.metrics().at("val_accuracy"), done.metrics().at("val_accuracy"));
  EXPECT_EQ(after.events_size(), done.events_size());

  // The same file submitted again is a new job.
  v1::Job again;
  ASSERT_TRUE(cluster.Submit(SmallSpec(data), &again).ok());
  EXPECT_NE(again.id(), id);
}

TEST(WalkingSkeletonTest, BadInputIsRefusedOrFailsWithoutRetries) {
  Cluster cluster("badinput");
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1);
  v1::Job job;
  // Refused at submit, nothing stored.
  for (const auto& [spec, needle] : std::vector<std::pair<std::string, std::string>>{
           {"model: {arch: transformer_classifier}\ndata: {format: text_dir}\n", "data.path"},
           {"model: {arch: transformer_classifier}\ndata: {path: /x}\nresources: {world_size: 0}\n",
            "resources.world_size"},
           {"model: {arch: lstm}\ndata: {path: /x}\n", "model.arch"},
           {"model: {arch: transformer_classifier\ndata: [\n", "line"}}) {
    grpc::Status s = cluster.Submit(spec, &job);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << spec;
    EXPECT_NE(s.error_message().find(needle), std::string::npos) << s.error_message();
  }
  std::string out;
  ASSERT_EQ(cluster.Cli({"job", "list", "-o", "json"}, &out), 0);
  EXPECT_EQ(out.find("\"id\""), std::string::npos) << out;

  // A data path missing on the worker: FAILED, no retries, reason names the path.
  ASSERT_TRUE(cluster.Submit(SmallSpec("/nonexistent/mails", /*max_restarts=*/3), &job).ok());
  v1::Job done = cluster.WaitForEnd(job.id(), 60);
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_EQ(done.restarts(), 0);
  EXPECT_NE(done.reason().find("/nonexistent/mails"), std::string::npos) << done.reason();

  // A GPU job in a cluster without GPUs: never placed on the CPU worker; it waits, and
  // the reason says why.
  const std::string data = cluster.MakeData(20);
  std::string gpu_spec = SmallSpec(data, /*max_restarts=*/3);
  gpu_spec.replace(gpu_spec.find("resources: {world_size: 1}"), 26, "resources: {world_size: 1, device: cuda}");
  ASSERT_TRUE(cluster.Submit(gpu_spec, &job).ok());
  v1::Job waiting = cluster.WaitFor(job.id(), 30, [](const v1::Job& j) {
    return j.reason() == "resources.device is cuda but no ready worker has GPUs";
  });
  EXPECT_EQ(waiting.state(), v1::QUEUED) << waiting.reason();
  EXPECT_EQ(waiting.reason(), "resources.device is cuda but no ready worker has GPUs");
  EXPECT_EQ(waiting.placements_size(), 0);
}

TEST(WalkingSkeletonTest, TrainerCrashFailsTheJobWithTheTrainersError) {
  Cluster cluster("crash");
  const std::string data = cluster.MakeData(60);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1, {{"NIGHTSHIFT_FAULT_ABORT_AT_STEP", "3"}});
  v1::Job job;
  ASSERT_TRUE(cluster.Submit(SmallSpec(data, /*max_restarts=*/0), &job).ok());
  v1::Job done = cluster.WaitForEnd(job.id(), 120);
  EXPECT_EQ(done.state(), v1::FAILED);
  EXPECT_NE(done.error().find("SIGABRT"), std::string::npos) << done.error();
  EXPECT_NE(done.error().find("fault injection: aborting at step 3"), std::string::npos) << done.error();
  std::string out;
  cluster.Cli({"job", "describe", job.id()}, &out);
  EXPECT_NE(out.find("SIGABRT"), std::string::npos) << out;
}

}  // namespace
}  // namespace nightshift::testing_e2e
