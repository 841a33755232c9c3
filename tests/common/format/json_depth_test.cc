// JsonDepthWithin (common/format/json_depth.h): brackets count outside strings only, and
// the limit is inclusive.
#include "common/format/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace nightshift::format {
namespace {

TEST(JsonDepthTest, CountsArraysAndObjectsOutsideStrings) {
  EXPECT_TRUE(JsonDepthWithin("1"));
  EXPECT_TRUE(JsonDepthWithin(R"({"a": [1, {"b": []}]})", 4));
  EXPECT_FALSE(JsonDepthWithin(R"({"a": [1, {"b": []}]})", 3));
  EXPECT_TRUE(JsonDepthWithin(R"(["[[[[", "\"[[[["])", 1)) << "brackets in strings, escaped quotes";
  EXPECT_TRUE(JsonDepthWithin(R"([[]] [[]] [[]])", 2)) << "depth, not count";
  EXPECT_TRUE(JsonDepthWithin(std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']')));
  EXPECT_FALSE(JsonDepthWithin(std::string(kMaxJsonDepth + 1, '[') + std::string(kMaxJsonDepth + 1, ']')));
  EXPECT_FALSE(JsonDepthWithin(std::string(1 << 20, '{')));
}

}  // namespace
}  // namespace nightshift::format
