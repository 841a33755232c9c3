// Sharded data parallelism through the service (issue 43): a job whose parameters,
// gradients and AdamW state do not fit in resources.memory_gb per rank fails unsharded,
// before its first step, naming the limit; the same job with resources.sharding: full on
// 4 ranks keeps a quarter of that state per rank and succeeds under the same limit. The
// scheduler places those ranks only on a worker with 2 GiB per slot (--memory-gb over
// --cpu-slots).
#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

// 16 blocks of 9.4M parameters (d_model 512, ffn 8192): about 151M parameters. Unsharded a
// rank needs 2.8 GiB for them, their gradients (twice: DDP's all-reduce buckets hold a
// copy), and AdamW's moments; sharded full over 4 ranks, 0.56 GiB of shards plus two
// blocks' gathered parameters and gradients (0.14 GiB) and the layers outside the blocks.
// The limit, 2 GiB of RLIMIT_DATA, lies between, with room for what a process holds
// before any model (LibTorch's and CUDA's libraries, thread stacks, malloc arenas: about
// 0.5 GiB here) and for the whole model each rank builds once before it keeps its shards
// (0.56 GiB). Measured with `full`: at most 1.5 GiB on ranks 1 to 3, 1.7 GiB on rank 0,
// which also writes the checkpoint and the export (a block at a time).
std::string Spec(const std::string& data, const std::string& sharding) {
  return "model: {arch: transformer_classifier, layers: 16, d_model: 512, heads: 8, ffn: 8192, max_len: 8}\n"
         "data: {path: " + data + ", tokenizer: {vocab_size: 64}}\n"
         "train: {max_steps: 2, batching: {batch_size: 1}, threads: 1}\n"
         "resources: {world_size: 4, memory_gb: 2, sharding: " + sharding + "}\n"
         "restart: {max_restarts: 2}\n";
}

TEST(ShardingE2E, AStateOverTheLimitFailsUnshardedAndFitsShardedFullOnFourRanks) {
  Cluster cluster("sharding-memory");
  const std::string data = cluster.MakeData(8);
  cluster.StartCoordinator();
  cluster.StartWorker("small", 4, {}, {"--memory-gb", "4"});
  v1::Job job;
  ASSERT_TRUE(cluster.Submit(Spec(data, "none"), &job).ok());
  job = cluster.WaitFor(job.id(), 30, [](const v1::Job& j) { return j.reason().find("memory_gb") != std::string::npos; });
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.reason(), "resources.memory_gb is 2 per rank, but no ready worker has that much per slot (the most: "
                          "1 GiB, its memory over its slots)");
  cluster.StartWorker("w1", 4, {}, {"--memory-gb", "8"});
  job = cluster.WaitForEnd(job.id(), 240);
  ASSERT_GT(job.placements_size(), 0);
  EXPECT_EQ(job.placements(0).worker(), "w1");
  EXPECT_EQ(job.state(), v1::FAILED) << job.error();
  EXPECT_EQ(job.restarts(), 0) << job.error();  // what a retry would meet again is not retried
  EXPECT_NE(job.error().find("resources.memory_gb: rank"), std::string::npos) << job.error();
  EXPECT_NE(job.error().find("more than its 2.00 GiB limit"), std::string::npos) << job.error();
  ASSERT_TRUE(cluster.Submit(Spec(data, "full"), &job).ok());
  job = cluster.WaitForEnd(job.id(), 300);
  EXPECT_EQ(job.state(), v1::SUCCEEDED) << job.error();
  EXPECT_EQ(job.restarts(), 0) << job.error();
}

}  // namespace
}  // namespace nightshift::testing_e2e
