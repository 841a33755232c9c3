// Data parallelism end to end: a coordinator and two one-slot workers, each keeping
// checkpoints on its own disk (no shared checkpoint root), run a world_size 2 job across
// both; SIGKILL of one rank's trainer restarts the job from the newest checkpoint either
// rank holds (rank 0 wrote it; the other receives it over the process group); a job
// larger than the cluster waits without blocking smaller ones.
#include <gtest/gtest.h>


#include <sstream>

#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

std::string DdpSpec(const std::string& data_path, int world_size, int max_steps) {
  return "name: e2e-ddp\n"
         "model: {arch: transformer_classifier, layers: 2, d_model: 64, heads: 2, ffn: 128, dropout: 0.1, max_len: 48}\n"
         "data: {format: text_dir, path: " + data_path + ", validation_fraction: 0.2, tokenizer: {vocab_size: 64}}\n"
         "train: {epochs: 200, max_steps: " + std::to_string(max_steps) +
         ", lr: 0.003, warmup_steps: 5, seed: 7, batching: {batch_size: 16}, threads: 1}\n"
         "resources: {world_size: " + std::to_string(world_size) + ", timeout_seconds: 10, bucket_mb: 1}\n"
         "checkpoint: {every_steps: 10, keep_last: 2}\n"
         "restart: {max_restarts: 2}\n";
}

TEST(DdpE2eTest, TwoRanksOnTwoWorkersSurviveARankKill) {
  Cluster cluster("ddp");
  const std::string data = cluster.MakeData(150);
  cluster.StartCoordinator();
  cluster.UseOwnDisks();
  cluster.StartWorker("w1", 1);
  cluster.StartWorker("w2", 1);

  // Larger than the cluster: waits, with the reason, and blocks nobody.
  v1::Job big;
  ASSERT_TRUE(cluster.Submit(DdpSpec(data, 3, 20), &big).ok());

  v1::Job job;
  grpc::Status s = cluster.Submit(DdpSpec(data, 2, 120), &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string id = job.id();

  // Wait for the first checkpoint, then SIGKILL rank 1's trainer.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(cluster.Get(id, &job).ok());
    if (job.state() == v1::RUNNING && job.checkpoint_step() >= 10) break;
    ASSERT_NE(job.state(), v1::FAILED) << job.reason();
    ASSERT_NE(job.state(), v1::SUCCEEDED) << "finished before the kill; make the job longer";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  ASSERT_EQ(job.placements_size(), 2) << "the 2 ranks should be on both workers";
  std::string rank1_worker;
  for (const auto& p : job.placements()) {
    EXPECT_EQ(p.num_ranks(), 1);
    if (p.first_rank() == 1) rank1_worker = p.worker();
  }
  ASSERT_FALSE(rank1_worker.empty());
  const std::string attempt0 = cluster.dir() + "/" + rank1_worker + "/jobs/" + id + "/attempt-0/";
  const pid_t victim = Cluster::FindProcess({"nightshift-trainer", attempt0});
  ASSERT_GT(victim, 0) << "no trainer under " << attempt0;
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto killed_at = std::chrono::steady_clock::now();

  // The attempt fails promptly (no rank waits past the 10 s timeout), then restarts.
  while (std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(60)) {
    ASSERT_TRUE(cluster.Get(id, &job).ok());
    if (job.attempt() >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const double to_restart =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  ASSERT_GE(job.attempt(), 1) << "the attempt did not fail within 60 s of the kill";
  EXPECT_LT(to_restart, 20) << "the failure took longer than the timeout to notice";

  v1::Job done = cluster.WaitForEnd(id, 300);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << " / " << done.error();
  EXPECT_EQ(done.restarts(), 1);
  EXPECT_EQ(done.checkpoint_step(), 120);
  bool restarted_from_checkpoint = false;
  for (const auto& ev : done.events())
    if (ev.attempt() == 1 && ev.reason().find("attempt 1 resumed from step") != std::string::npos && ev.step() >= 10)
      restarted_from_checkpoint = true;
  EXPECT_TRUE(restarted_from_checkpoint);
  ASSERT_TRUE(done.metrics().count("val_accuracy"));
  EXPECT_GE(done.metrics().at("val_accuracy"), 0.9);

  // Both ranks of the second attempt resumed from the same step, each from its own disk.
  std::vector<std::string> resumed;
  for (const auto& p : done.placements()) {
    const std::string log = ReadAll(cluster.dir() + "/" + p.worker() + "/jobs/" + id + "/attempt-" +
                                    std::to_string(done.attempt()) + "/rank-" +
                                    std::to_string(p.first_rank()) + ".log");
    const size_t at = log.rfind("resumed from ");  // the last: after a checkpoint was received
    ASSERT_NE(at, std::string::npos) << log;
    const std::string line = log.substr(at, log.find('\n', at) - at);
    resumed.push_back(line.substr(line.rfind(" (step ")));
    EXPECT_NE(log.find("data parallel: rank"), std::string::npos) << log;
  }
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[0], resumed[1]);

  // The big job is still waiting, and says why.
  ASSERT_TRUE(cluster.Get(big.id(), &big).ok());
  EXPECT_EQ(big.state(), v1::QUEUED);
  EXPECT_NE(big.reason().find("needs 3 slots; the cluster has 2"), std::string::npos) << big.reason();
}

}  // namespace
}  // namespace nightshift::testing_e2e
