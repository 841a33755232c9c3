// Data parallelism end to end: a coordinator and three one-slot workers, each keeping
// checkpoints on its own disk (no shared checkpoint root), run a world_size 2 job; it
// survives SIGKILL of a rank and the loss of rank 0's whole worker with the weights of
// an uninterrupted run; a job larger than the cluster waits without blocking smaller ones.
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

// The job's exported weights (model.safetensors of its final model folder).
std::string FinalWeights(Cluster& cluster, const v1::Job& job) {
  return ReadAll(cluster.dir() + "/" + job.model().worker() + "/checkpoints/" + job.id() + "/model/model.safetensors");
}

// The step attempt `attempt` resumed from, as the job's events say (-1: none).
int64_t ResumedStep(const v1::Job& job, int attempt) {
  for (const auto& ev : job.events())
    if (ev.attempt() == attempt && ev.reason().rfind("attempt " + std::to_string(attempt) + " resumed from step", 0) == 0)
      return ev.step();
  return -1;
}

// Waits until the job runs attempt `attempt` and has a checkpoint of it: past the step
// it resumed from (which a restart's trainer reports first), past 0 for attempt 0.
v1::Job WaitForCheckpoint(Cluster& cluster, const std::string& id, int attempt) {
  v1::Job job;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  while (std::chrono::steady_clock::now() < deadline) {
    EXPECT_TRUE(cluster.Get(id, &job).ok());
    const int64_t past = attempt == 0 ? 0 : ResumedStep(job, attempt);
    if (job.state() == v1::RUNNING && job.attempt() == attempt && past >= 0 && job.checkpoint_step() > past) break;
    EXPECT_NE(job.state(), v1::FAILED) << job.reason();
    EXPECT_NE(job.state(), v1::SUCCEEDED) << "finished before the fault; make the job longer";
    if (IsTerminal(job.state())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return job;
}

std::string WorkerOfRank(const v1::Job& job, int rank) {
  for (const auto& p : job.placements())
    if (rank >= p.first_rank() && rank < p.first_rank() + p.num_ranks()) return p.worker();
  return "";
}

// Three one-slot workers, each with its own disk. An uninterrupted run first; then the
// same job with rank 1's trainer SIGKILLed, and later the whole worker of rank 0 (the
// daemon, and its trainer with it, as a node loss). Each time the job resumes from the
// newest checkpoint a surviving rank holds (every worker's first rank writes one; a new
// worker receives it over the process group) and it ends with the uninterrupted run's
// weights, bit for bit.
TEST(DdpE2eTest, TwoRanksWithoutSharedStorageSurviveARankKillAndTheLossOfRankZerosWorker) {
  Cluster cluster("ddp");
  const std::string data = cluster.MakeData(150);
  // The default backoff (1 s): the restart after rank 0's worker died goes where it is
  // not, as the dead worker has been silent for more than two heartbeats by then.
  cluster.StartCoordinator({"--restart-backoff-seconds", "1"});
  cluster.UseOwnDisks();
  for (const char* name : {"w1", "w2", "w3"}) cluster.StartWorker(name, 1);

  // Larger than the cluster: waits, with the reason, and blocks nobody.
  v1::Job big;
  ASSERT_TRUE(cluster.Submit(DdpSpec(data, 4, 20), &big).ok());

  v1::Job reference;
  ASSERT_TRUE(cluster.Submit(DdpSpec(data, 2, 120), &reference).ok());
  reference = cluster.WaitForEnd(reference.id(), 300);
  ASSERT_EQ(reference.state(), v1::SUCCEEDED) << reference.reason() << " / " << reference.error();
  const std::string reference_weights = FinalWeights(cluster, reference);
  ASSERT_FALSE(reference_weights.empty());

  v1::Job job;
  grpc::Status s = cluster.Submit(DdpSpec(data, 2, 120), &job);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string id = job.id();

  // After the first checkpoint, SIGKILL rank 1's trainer.
  job = WaitForCheckpoint(cluster, id, 0);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  ASSERT_EQ(job.placements_size(), 2) << "the 2 ranks should be on two workers";
  const std::string attempt0 = cluster.dir() + "/" + WorkerOfRank(job, 1) + "/jobs/" + id + "/attempt-0/";
  const pid_t victim = Cluster::FindProcess({"nightshift-trainer", attempt0});
  ASSERT_GT(victim, 0) << "no trainer under " << attempt0;
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto killed_at = std::chrono::steady_clock::now();
  job = cluster.WaitFor(id, 60, [](const v1::Job& j) { return j.attempt() >= 1 || IsTerminal(j.state()); });
  const double to_restart = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  ASSERT_EQ(job.attempt(), 1) << "the attempt did not fail within 60 s of the kill";
  EXPECT_LT(to_restart, 20) << "the failure took longer than the timeout to notice";

  // Once attempt 1 checkpointed, kill the whole worker of its rank 0.
  job = WaitForCheckpoint(cluster, id, 1);
  ASSERT_EQ(job.state(), v1::RUNNING) << job.reason();
  const int64_t checkpoint_at_kill = job.checkpoint_step();
  const std::string rank0 = WorkerOfRank(job, 0);
  const pid_t rank0_trainer = Cluster::FindProcess({"nightshift-trainer", cluster.dir() + "/" + rank0 + "/jobs/" + id});
  cluster.worker(static_cast<size_t>(rank0[1] - '1')).Kill(SIGKILL);
  if (rank0_trainer > 0) ::kill(rank0_trainer, SIGKILL);
  const auto worker_killed_at = std::chrono::steady_clock::now();
  job = cluster.WaitFor(id, 60, [](const v1::Job& j) { return ResumedStep(j, 2) >= 0 || IsTerminal(j.state()); });
  const double to_resume = std::chrono::duration<double>(std::chrono::steady_clock::now() - worker_killed_at).count();

  v1::Job done = cluster.WaitForEnd(id, 300);
  ASSERT_EQ(done.state(), v1::SUCCEEDED) << done.reason() << " / " << done.error();
  EXPECT_EQ(done.restarts(), 2) << "the restart after the worker loss went back to it";
  EXPECT_GE(ResumedStep(done, 1), 10);
  EXPECT_GE(ResumedStep(done, 2), checkpoint_at_kill) << "attempt 2 did not resume from the newest checkpoint";
  for (const auto& p : done.placements()) EXPECT_NE(p.worker(), rank0);
  EXPECT_EQ(done.checkpoint_step(), 120);
  EXPECT_TRUE(FinalWeights(cluster, done) == reference_weights)
      << "the interrupted run's final weights differ from the uninterrupted run's";
  std::printf("ddp without shared storage: rank 1 killed -> attempt 1 %.1f s later, resumed from step %lld; "
              "rank 0's worker %s killed at checkpoint %lld -> attempt 2 resumed from step %lld %.1f s later; "
              "SUCCEEDED with the uninterrupted run's weights: %s\n",
              to_restart, static_cast<long long>(ResumedStep(done, 1)), rank0.c_str(),
              static_cast<long long>(checkpoint_at_kill), static_cast<long long>(ResumedStep(done, 2)), to_resume,
              FinalWeights(cluster, done) == reference_weights ? "yes" : "no");

  // Both ranks of the last attempt resumed from the same step, each from its own disk.
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
  EXPECT_NE(big.reason().find("needs 4 slots; the cluster has"), std::string::npos) << big.reason();
}

}  // namespace
}  // namespace nightshift::testing_e2e
