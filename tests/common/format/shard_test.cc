#include "common/format/shard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace nightshift::format {
namespace {

std::string TempPath(const std::string& name) {
  return testing::TempDir() + "/" + name + "." + std::to_string(::getpid());
}

TEST(ShardTest, RoundTripsSamples) {
  ShardWriter w(100, 2);
  w.Add(11, 0, {2, 5, 6});
  w.Add(12, 1, {2});
  w.Add(13, 1, {2, 7, 8, 9, 99});
  const std::string path = TempPath("roundtrip.shard");
  ASSERT_EQ(w.WriteFile(path), "");
  ShardReader r;
  ASSERT_EQ(r.Open(path, /*verify_checksum=*/true), "");
  ASSERT_EQ(r.num_samples(), 3u);
  EXPECT_EQ(r.header().vocab_size, 100u);
  EXPECT_EQ(r.header().num_classes, 2u);
  EXPECT_EQ(r.length(0), 3u);
  EXPECT_EQ(r.length(1), 1u);
  EXPECT_EQ(r.length(2), 5u);
  EXPECT_EQ(r.tokens(2)[4], 99);
  EXPECT_EQ(r.label(1), 1);
  EXPECT_EQ(r.id(2), 13u);
  std::remove(path.c_str());
}

TEST(ShardTest, TruncatedFileIsRefusedWithItsName) {
  ShardWriter w(100, 2);
  w.Add(1, 0, {2, 3, 4, 5});
  const std::string path = TempPath("truncated.shard");
  ASSERT_EQ(w.WriteFile(path), "");
  ASSERT_EQ(::truncate(path.c_str(), 70), 0);
  ShardReader r;
  std::string err = r.Open(path, false);
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  EXPECT_NE(err.find(path), std::string::npos) << err;
  ASSERT_EQ(::truncate(path.c_str(), 10), 0);
  ShardReader r2;
  EXPECT_NE(r2.Open(path, false).find("truncated"), std::string::npos);
  std::remove(path.c_str());
}

TEST(ShardTest, FlippedByteFailsChecksum) {
  ShardWriter w(100, 2);
  w.Add(1, 0, {2, 3, 4, 5});
  const std::string path = TempPath("flipped.shard");
  ASSERT_EQ(w.WriteFile(path), "");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);
    f.put('\x7f');
  }
  ShardReader unchecked;
  EXPECT_EQ(unchecked.Open(path, false), "");
  ShardReader checked;
  EXPECT_NE(checked.Open(path, true).find("checksum"), std::string::npos);
  std::remove(path.c_str());
}

TEST(ShardTest, BadMagicIsRefused) {
  const std::string path = TempPath("magic.shard");
  std::ofstream(path) << std::string(200, 'x');
  ShardReader r;
  EXPECT_NE(r.Open(path, false).find("magic"), std::string::npos);
  std::remove(path.c_str());
}

TEST(SplitTest, IsStableAndNearTheFraction) {
  int val = 0;
  for (int i = 0; i < 10000; ++i) {
    std::string id = "ham/" + std::to_string(i) + ".txt";
    bool v = InValidationSplit(id, 1234, 0.2);
    EXPECT_EQ(v, InValidationSplit(id, 1234, 0.2));
    val += v;
  }
  EXPECT_NEAR(val / 10000.0, 0.2, 0.015);
  // A different seed gives a different split.
  int same = 0;
  for (int i = 0; i < 1000; ++i) {
    std::string id = std::to_string(i);
    same += InValidationSplit(id, 1, 0.5) == InValidationSplit(id, 2, 0.5);
  }
  EXPECT_LT(same, 600);
  // Known value: the hash is the same on every machine and run (FNV-1a of "a").
  EXPECT_EQ(StableHash64(std::string("a")), 0xaf63dc4c8601ec8cULL);
}

}  // namespace
}  // namespace nightshift::format
