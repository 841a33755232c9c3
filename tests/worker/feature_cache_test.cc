#include "worker/feature_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/worker/test_dirs.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

class FeatureCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testdirs::FreshTestDir("fcache");
    testdirs::WriteTinyCorpus(dir_ + "/data", 5);
    options_.path = dir_ + "/data";
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<FeatureCache> Open(int64_t max_bytes = 0) {
    auto c = FeatureCache::Open({dir_ + "/cache", max_bytes});
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(c.value());
  }
  // A build that writes `bytes` bytes and counts its calls.
  FeatureCache::BuildFn Builder(int bytes = 1000) {
    return [this, bytes](const std::string& out) {
      builds_++;
      fs::create_directories(out);
      std::ofstream(out + "/train.shard") << std::string(bytes, 'x');
      std::ofstream(out + "/meta.json") << "{\"train_samples\": 8, \"val_samples\": 2}";
      return Status::OK();
    };
  }

  std::string dir_;
  PrepOptions options_;
  std::atomic<int> builds_{0};
};

TEST_F(FeatureCacheTest, SecondAcquireIsAHitAndSurvivesReopen) {
  auto cache = Open();
  auto key = cache->KeyFor(options_);
  ASSERT_TRUE(key.ok());
  bool hit = true;
  auto lease = cache->Acquire(key.value(), options_.path, Builder(), &hit);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_FALSE(hit);
  EXPECT_TRUE(fs::exists(lease.value()->dir() + "/train.shard"));
  lease.value().reset();
  auto again = cache->Acquire(key.value(), options_.path, Builder(), &hit);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(hit);
  EXPECT_EQ(builds_, 1);
  again.value().reset();
  v1::CacheReport report = cache->Report();
  EXPECT_EQ(report.stats().hits(), 1);
  EXPECT_EQ(report.stats().misses(), 1);
  ASSERT_EQ(report.entries_size(), 1);
  EXPECT_EQ(report.entries(0).train_samples(), 8);

  cache.reset();
  cache = Open();
  EXPECT_EQ(cache->KeyFor(options_).value(), key.value());  // same key in another process life
  ASSERT_TRUE(cache->Acquire(key.value(), options_.path, Builder(), &hit).ok());
  EXPECT_TRUE(hit);
  EXPECT_EQ(builds_, 1);
}

TEST_F(FeatureCacheTest, OptionsOrOneInputFileChangeTheKey) {
  auto cache = Open();
  const std::string key = cache->KeyFor(options_).value();
  PrepOptions other = options_;
  other.vocab_size = options_.vocab_size + 1;
  EXPECT_NE(cache->KeyFor(other).value(), key);
  // Same size, new content: the stat shortcut sees the new mtime and re-hashes.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::ofstream(dir_ + "/data/spam/3") << "spam9";
  EXPECT_NE(cache->KeyFor(options_).value(), key);
  // The key names no path: the same contents elsewhere give the same key.
  std::ofstream(dir_ + "/data/spam/3") << "spam3";
  const std::string restored = cache->KeyFor(options_).value();
  EXPECT_EQ(restored, key);
  fs::copy(dir_ + "/data", dir_ + "/copy", fs::copy_options::recursive);
  PrepOptions copy = options_;
  copy.path = dir_ + "/copy";
  EXPECT_EQ(cache->KeyFor(copy).value(), key);
}

// A writer who rewrites a file with other bytes of the same size and sets its mtime back
// to the nanosecond (utimensat: anyone who may write the file may) cannot make the stat
// shortcut keep the old bytes' hash: the ctime moved, and the file is hashed again.
TEST_F(FeatureCacheTest, AFileRewrittenKeepingSizeAndMtimeIsHashedAgain) {
  auto cache = Open();
  const std::string path = dir_ + "/data/spam/3";
  const std::string key = cache->KeyFor(options_).value();
  struct stat before;
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  std::ofstream(path) << "spam9";  // the same size
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  struct stat after;
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  ASSERT_EQ(after.st_size, before.st_size);
  ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  ASSERT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  const std::string rewritten = cache->KeyFor(options_).value();
  EXPECT_NE(rewritten, key);
}

TEST_F(FeatureCacheTest, FlippedByteIsDetectedAndRebuilt) {
  auto cache = Open();
  const std::string key = cache->KeyFor(options_).value();
  bool hit;
  std::string dir = cache->Acquire(key, options_.path, Builder(), &hit).value()->dir();
  {
    std::fstream f(dir + "/train.shard", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500);
    f.put('y');
  }
  auto lease = cache->Acquire(key, options_.path, Builder(), &hit);
  ASSERT_TRUE(lease.ok());
  EXPECT_FALSE(hit);
  EXPECT_EQ(builds_, 2);
  std::ifstream in(lease.value()->dir() + "/train.shard");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, std::string(1000, 'x'));
}

TEST_F(FeatureCacheTest, InterruptedBuildLeavesNoEntry) {
  {
    auto cache = Open();
    const std::string key = cache->KeyFor(options_).value();
    // A build that "crashes" half-way: files written, then failure.
    bool hit;
    auto r = cache->Acquire(key, options_.path,
                            [](const std::string& out) {
                              fs::create_directories(out);
                              std::ofstream(out + "/train.shard") << "partial";
                              return Status::Internal("killed");
                            },
                            &hit);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(cache->Report().entries_size(), 0);
  }
  // And a leftover folder from a real crash is removed at the next open.
  fs::create_directories(dir_ + "/cache/abc.building-1-1");
  auto cache = Open();
  EXPECT_FALSE(fs::exists(dir_ + "/cache/abc.building-1-1"));
  bool hit = true;
  ASSERT_TRUE(cache->Acquire(cache->KeyFor(options_).value(), options_.path, Builder(), &hit).ok());
  EXPECT_FALSE(hit);
}

TEST_F(FeatureCacheTest, ConcurrentAcquiresBuildOnce) {
  auto cache = Open();
  const std::string key = cache->KeyFor(options_).value();
  auto slow = [this](const std::string& out) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return Builder()(out);
  };
  std::vector<std::thread> threads;
  std::atomic<int> hits{0}, ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      bool hit = false;
      auto lease = cache->Acquire(key, options_.path, slow, &hit);
      ok += lease.ok();
      hits += hit;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(builds_, 1);
  EXPECT_EQ(hits, 3);
}

TEST_F(FeatureCacheTest, EvictionKeepsTheBudgetAndSparesEntriesInUse) {
  auto cache = Open(/*max_bytes=*/2500);  // room for two 1000-byte entries (+ meta)
  bool hit;
  std::vector<std::shared_ptr<CacheLease>> held;
  std::vector<std::string> keys;
  for (int v = 0; v < 4; ++v) {
    PrepOptions o = options_;
    o.vocab_size = 100 + v;
    keys.push_back(cache->KeyFor(o).value());
    auto lease = cache->Acquire(keys.back(), o.path, Builder(), &hit);
    ASSERT_TRUE(lease.ok());
    if (v == 0) held.push_back(lease.value());  // the first stays in use
    EXPECT_LE(cache->Report().stats().bytes(), 2500 + (v == 0 ? 0 : 1100)) << v;
  }
  auto report = cache->Report();
  EXPECT_LE(report.stats().bytes(), 2500);
  std::set<std::string> left;
  for (const auto& e : report.entries()) left.insert(e.key());
  EXPECT_TRUE(left.count(keys[0]));  // in use: never evicted, though least recently used
  EXPECT_TRUE(left.count(keys[3]));  // the newest
  EXPECT_GT(report.stats().evictions(), 0);
  EXPECT_EQ(cache->Evict(keys[0]).code(), Status::kFailedPrecondition);
  held.clear();
  EXPECT_TRUE(cache->Evict(keys[0]).ok());
  EXPECT_EQ(cache->EvictAll(), 1);
  EXPECT_EQ(cache->Report().entries_size(), 0);
}

}  // namespace
}  // namespace nightshift
