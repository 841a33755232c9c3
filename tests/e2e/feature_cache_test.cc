// The feature cache end to end: real coordinator, worker, nightshift-prepare and trainer.
#include <gtest/gtest.h>

#include "tests/e2e/cluster.h"

namespace nightshift::testing_e2e {
namespace {

std::string Spec(const std::string& data_path, int vocab_size = 64, int max_restarts = 0) {
  return "name: cache-e2e\n"
         "model: {arch: transformer_classifier, layers: 1, d_model: 16, heads: 2, ffn: 32, max_len: 32}\n"
         "data: {path: " + data_path + ", tokenizer: {vocab_size: " + std::to_string(vocab_size) + "}}\n"
         "train: {epochs: 1, batching: {batch_size: 16}, threads: 1, max_steps: 3}\n"
         "restart: {max_restarts: " + std::to_string(max_restarts) + "}\n";
}

v1::Job RunToEnd(Cluster& cluster, const std::string& spec) {
  v1::Job job;
  grpc::Status s = cluster.Submit(spec, &job);
  EXPECT_TRUE(s.ok()) << s.error_message();
  v1::Job done = cluster.WaitForEnd(job.id(), 180);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  return done;
}

TEST(FeatureCacheE2E, HitMissCorruptionAndSingleFlight) {
  Cluster cluster("cache");
  const std::string data = cluster.MakeData(40);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 2);

  v1::Job first = RunToEnd(cluster, Spec(data));
  EXPECT_FALSE(first.data_cache().hit());
  const std::string key = first.data_cache().key();
  ASSERT_FALSE(key.empty());

  // Same data and preprocessor: a hit, no tokenization (no prepare log in its job dir).
  v1::Job second = RunToEnd(cluster, Spec(data));
  EXPECT_TRUE(second.data_cache().hit());
  EXPECT_EQ(second.data_cache().key(), key);
  EXPECT_FALSE(fs::exists(cluster.dir() + "/w1/jobs/" + second.id() + "/attempt-0/prepare.log"));
  std::string out;
  ASSERT_EQ(cluster.Cli({"job", "describe", second.id()}, &out), 0);
  EXPECT_NE(out.find("cache hit " + key), std::string::npos) << out;

  // Another vocabulary size is a miss; so is one changed input file.
  v1::Job vocab = RunToEnd(cluster, Spec(data, 80));
  EXPECT_FALSE(vocab.data_cache().hit());
  EXPECT_NE(vocab.data_cache().key(), key);
  std::ofstream(data + "/spam/3.txt", std::ios::app) << " changed";
  v1::Job changed = RunToEnd(cluster, Spec(data));
  EXPECT_FALSE(changed.data_cache().hit());
  const std::string key2 = changed.data_cache().key();
  EXPECT_NE(key2, key);

  // A flipped byte in a cached shard is detected: rebuilt, and the job succeeds.
  {
    std::fstream f(cluster.dir() + "/w1/cache/" + key2 + "/train.shard", std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    f.seekp(100);
    f.put('\x55');
  }
  v1::Job rebuilt = RunToEnd(cluster, Spec(data));
  EXPECT_FALSE(rebuilt.data_cache().hit());
  EXPECT_EQ(rebuilt.data_cache().key(), key2);

  // Two jobs submitted together on a new dataset: built once.
  const std::string fresh = cluster.MakeData(30, "fresh");
  v1::Job a, b;
  ASSERT_TRUE(cluster.Submit(Spec(fresh), &a).ok());
  ASSERT_TRUE(cluster.Submit(Spec(fresh), &b).ok());
  a = cluster.WaitForEnd(a.id(), 180);
  b = cluster.WaitForEnd(b.id(), 180);
  ASSERT_EQ(a.state(), v1::SUCCEEDED);
  ASSERT_EQ(b.state(), v1::SUCCEEDED);
  EXPECT_EQ(a.data_cache().key(), b.data_cache().key());
  EXPECT_NE(a.data_cache().hit(), b.data_cache().hit()) << "exactly one of them built the entry";

  // The operator view: stats and list through the coordinator, then evict everything.
  std::this_thread::sleep_for(std::chrono::seconds(1));  // the next heartbeat carries the report
  ASSERT_EQ(cluster.Cli({"cache", "stats", "-o", "json"}, &out), 0) << out;
  EXPECT_NE(out.find("\"hits\": \"2\""), std::string::npos) << out;  // second job + one of a/b
  ASSERT_EQ(cluster.Cli({"cache", "list"}, &out), 0);
  EXPECT_NE(out.find(key2), std::string::npos) << out;
  ASSERT_EQ(cluster.Cli({"cache", "evict", "--all"}, &out), 0) << out;
  bool emptied = false;
  for (int i = 0; i < 50 && !emptied; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    cluster.Cli({"cache", "stats", "-o", "json"}, &out);
    emptied = out.find("\"entries\"") == std::string::npos;  // proto JSON omits zero
  }
  EXPECT_TRUE(emptied) << out;
}

TEST(FeatureCacheE2E, WorkerKilledDuringABuildRebuildsAfterRestart) {
  Cluster cluster("cachekill");
  const std::string data = cluster.MakeData(1500);  // a build that takes a few seconds
  cluster.StartCoordinator();
  size_t w = cluster.StartWorker("w1", 1);
  v1::Job job;
  ASSERT_TRUE(cluster.Submit(Spec(data, 2000, /*max_restarts=*/2), &job).ok());
  // Wait for the build folder to appear, then SIGKILL the worker (its prepare child dies with it).
  bool building = false;
  for (int i = 0; i < 300 && !building; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(cluster.dir() + "/w1/cache", ec))
      building |= d.path().filename().string().find(".building-") != std::string::npos;
  }
  ASSERT_TRUE(building);
  cluster.worker(w).Kill(SIGKILL);
  cluster.StartWorker("w1", 1);
  v1::Job done = cluster.WaitForEnd(job.id(), 240);
  EXPECT_EQ(done.state(), v1::SUCCEEDED) << done.reason();
  EXPECT_FALSE(done.data_cache().hit());
  // The restarted worker holds no task: the coordinator hands it the (never started)
  // assignment again, or restarts the attempt; either way the entry is built anew.
  for (const auto& d : fs::directory_iterator(cluster.dir() + "/w1/cache"))
    EXPECT_EQ(d.path().filename().string().find(".building-"), std::string::npos) << d.path();
}

// model.init_from: the cache key names the tokenizer the data was tokenized with. A folder
// whose checksums.json claims another folder's tokenizer digest (so that its own
// tokenizer's features would be cached, and served, under the other folder's key) fails
// at once, naming the mismatch; the real folder then misses nothing of its own.
TEST(FeatureCacheE2E, AFolderClaimingAnotherTokenizersDigestCannotPoisonTheCache) {
  Cluster cluster("cache-poison");
  const std::string data = cluster.MakeData(40);
  cluster.StartCoordinator();
  cluster.StartWorker("w1", 1);
  const v1::Job source = RunToEnd(cluster, Spec(data));
  const std::string model = cluster.dir() + "/checkpoints/" + source.id() + "/model";
  ASSERT_TRUE(fs::exists(model + "/tokenizer.model")) << model;
  const std::string legit = cluster.dir() + "/legit", poisoned = cluster.dir() + "/poisoned";
  fs::copy(model, legit);
  fs::copy(model, poisoned);
  {
    std::fstream f(poisoned + "/tokenizer.model", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('Z');  // another tokenizer; checksums.json still names the legit one's digest
  }
  const std::string init = "model: {arch: transformer_classifier, init_from: ";
  v1::Job job;
  std::string spec = Spec(data, 64, /*max_restarts=*/2);
  spec.replace(spec.find("model: {arch: transformer_classifier"), std::string("model: {arch: transformer_classifier").size(),
               init + poisoned);
  ASSERT_TRUE(cluster.Submit(spec, &job).ok());
  job = cluster.WaitForEnd(job.id(), 180);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.error().find("tokenizer.model does not match its sha256 in checksums.json"), std::string::npos)
      << job.error();
  spec.replace(spec.find(poisoned), poisoned.size(), legit);
  const v1::Job good = RunToEnd(cluster, spec);
  EXPECT_FALSE(good.data_cache().hit());  // nothing was cached under its key by the poisoned folder
}

}  // namespace
}  // namespace nightshift::testing_e2e
