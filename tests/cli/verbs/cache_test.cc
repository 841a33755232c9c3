// nightshift cache ...: requests, output and exit codes against a fake coordinator.
#include <gtest/gtest.h>

#include "tests/cli/fake_coordinator.h"

namespace nightshift::cli {
namespace {

using testing::FakeCoordinator;
using testing::RunCli;

TEST(CacheVerbsTest, ListHasOneRowPerEntry) {
  FakeCoordinator fake;
  auto r = RunCli({"cache", "list"}, fake.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "WORKER       KEY                                     BYTES  SAMPLES IN_USE  BUILD_S  DATA\n"
            "w1           0123456789abcdef0123456789abcdef      2000000     1000      1      8.0  data/spamassassin\n"
            "w1           fedcba9876543210fedcba9876543210      1000000      100      0      4.3  /data/lm.jsonl\n");
  ASSERT_EQ(fake.admin.cache_lists.size(), 1u);
  EXPECT_EQ(fake.admin.cache_lists[0].worker(), "");
}

TEST(CacheVerbsTest, StatsHasOneRowPerWorkerAndPassesTheWorkerFilter) {
  FakeCoordinator fake;
  auto r = RunCli({"cache", "stats", "--worker", "w1"}, fake.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out,
            "WORKER        ENTRIES        BYTES    MAX_BYTES   HITS MISSES    BUILD_S      SAVED_S\n"
            "w1                  2      3000000   1073741824      7      2       12.3         40.5\n"
            "w2                  0            0            0      0      0        0.0          0.0\n");
  EXPECT_EQ(fake.admin.cache_lists[0].worker(), "w1");
  r = RunCli({"cache", "stats", "-o", "json"}, fake.Channel());
  EXPECT_NE(r.out.find("\"build_seconds_saved\": 40.5"), std::string::npos) << r.out;
}

TEST(CacheVerbsTest, EvictTakesAKeyOrAllButNotBoth) {
  FakeCoordinator fake;
  auto r = RunCli({"cache", "evict", "--all"}, fake.Channel());
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "eviction queued for 2 worker(s)\n");
  r = RunCli({"cache", "evict", "k1", "--worker", "w1"}, fake.Channel());
  EXPECT_EQ(r.out, "eviction queued for 1 worker(s)\n");
  ASSERT_EQ(fake.admin.evictions.size(), 2u);
  EXPECT_TRUE(fake.admin.evictions[0].all());
  EXPECT_EQ(fake.admin.evictions[0].key(), "");
  EXPECT_EQ(fake.admin.evictions[1].key(), "k1");
  EXPECT_EQ(fake.admin.evictions[1].worker(), "w1");
  EXPECT_FALSE(fake.admin.evictions[1].all());

  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{{"cache", "evict"},
                                                                            {"cache", "evict", "k1", "--all"}}) {
    r = RunCli(args, fake.Channel());
    EXPECT_EQ(r.code, 2);
    EXPECT_EQ(r.err, "error: cache evict takes a KEY or --all\n");
  }
  EXPECT_EQ(fake.admin.evictions.size(), 2u);  // nothing sent
}

TEST(CacheVerbsTest, RefusedExits3) {
  FakeCoordinator fake;
  fake.admin.fail = grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "admin only");
  for (const char* verb : {"list", "stats"}) {
    auto r = RunCli({"cache", verb}, fake.Channel());
    EXPECT_EQ(r.code, 3) << verb;
    EXPECT_EQ(r.err, "error: PERMISSION_DENIED: admin only\n") << verb;
  }
  EXPECT_EQ(RunCli({"cache", "evict", "--all"}, fake.Channel()).code, 3);
}

}  // namespace
}  // namespace nightshift::cli
