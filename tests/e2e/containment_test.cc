// A job's processes run the user's code, contained (worker/launcher.h): within the host
// memory its spec allows (resources.memory_gb), failing the job naming that limit, not
// retried as a machine fault; and without the worker's token in their environment.
#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

// A model whose weights and AdamW state (about 1.5 GiB) do not fit in 1 GiB: the rank
// fails allocating, at once, with the limit named; max_restarts 2 is not used.
TEST(ContainmentE2E, AJobOverItsMemoryLimitFailsNamingItWithoutRetries) {
  Cluster cluster("memory-limit");
  const std::string data = cluster.MakeData(8);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1);
  v1::Job job;
  ASSERT_TRUE(cluster.Submit("model: {arch: transformer_classifier, layers: 4, d_model: 1024, heads: 8, ffn: 16384, "
                             "max_len: 32}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 1, batching: {batch_size: 4}, threads: 1}\n"
                             "resources: {memory_gb: 1}\nrestart: {max_restarts: 2}\n", &job).ok());
  job = cluster.WaitForEnd(job.id(), 240);
  EXPECT_EQ(job.state(), v1::FAILED) << job.error();
  EXPECT_EQ(job.restarts(), 0) << job.error();
  EXPECT_NE(job.error().find("exceeded its memory limit, resources.memory_gb = 1"), std::string::npos) << job.error();
  EXPECT_NE(job.error().find("can't allocate memory"), std::string::npos) << job.error();
  // The same limit leaves room for a small model: the limit is what failed the first.
  ASSERT_TRUE(cluster.Submit("model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 32}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 1, batching: {batch_size: 4}, threads: 1}\n"
                             "resources: {memory_gb: 1}\n", &job).ok());
  job = cluster.WaitForEnd(job.id(), 240);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.error();
}

// The worker got its token through NIGHTSHIFT_TOKEN (as a container would): a rank does
// not see it. The rank's environment is read from /proc while it runs.
TEST(ContainmentE2E, ARankDoesNotSeeTheWorkersToken) {
  Cluster cluster("token-env");
  const std::string data = cluster.MakeData(60);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1, {{"NIGHTSHIFT_TOKEN", "worker-secret-in-env"}});
  v1::Job job;
  ASSERT_TRUE(cluster.Submit("model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 48}\n"
                             "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
                             "train: {epochs: 300, batching: {batch_size: 8}, threads: 1}\n", &job).ok());
  v1::Job now;
  for (int i = 0; i < 600 && now.state() != v1::RUNNING; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cluster.Get(job.id(), &now);
  }
  ASSERT_EQ(now.state(), v1::RUNNING);
  // The trainer's pid: the process whose command line names this job's config.
  std::string environ_text;
  for (int i = 0; i < 100 && environ_text.empty(); ++i) {
    for (const auto& p : fs::directory_iterator("/proc")) {
      std::ifstream cmdline(p.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(cmdline)), {});
      if (cmd.find("nightshift-trainer") == std::string::npos || cmd.find(job.id()) == std::string::npos) continue;
      std::ifstream env(p.path() / "environ");
      environ_text.assign((std::istreambuf_iterator<char>(env)), {});
    }
    if (environ_text.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_FALSE(environ_text.empty()) << "no trainer of " << job.id() << " found in /proc";
  EXPECT_NE(environ_text.find("NIGHTSHIFT_JOB_ID=" + job.id()), std::string::npos);
  EXPECT_EQ(environ_text.find("worker-secret-in-env"), std::string::npos);
  EXPECT_EQ(environ_text.find("NIGHTSHIFT_TOKEN"), std::string::npos);
  v1::CancelJobRequest cancel;
  cancel.set_id(job.id());
  grpc::ClientContext ctx;
  v1::Job out;
  cluster.jobs()->CancelJob(&ctx, cancel, &out);
  cluster.WaitForEnd(job.id(), 60);
}

}  // namespace
}  // namespace nightshift::testing_e2e
