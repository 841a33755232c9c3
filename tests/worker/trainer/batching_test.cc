#include "worker/trainer/batching.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace nightshift::trainer {
namespace {

std::vector<uint32_t> RandomLengths(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> lengths(n);
  for (auto& l : lengths) l = 1 + static_cast<uint32_t>(rng() % 200);
  return lengths;
}

int64_t PaddedTokens(const std::vector<uint32_t>& batch, const std::vector<uint32_t>& lengths) {
  uint32_t longest = 0;
  for (uint32_t i : batch) longest = std::max(longest, lengths[i]);
  return static_cast<int64_t>(batch.size()) * longest;
}

void ExpectEachSampleOnce(const BatchPlan& plan, size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& batch : plan)
    for (uint32_t i : batch) seen[i]++;
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i;
}

TEST(PlanEpochTest, TokenBudgetNeverOverBudgetAndCoversEverySampleOnce) {
  auto lengths = RandomLengths(3000, 7);
  lengths[17] = 5000;  // longer than the budget: a batch alone
  BatchPlanOptions options;
  options.max_tokens = 1024;
  BatchPlan plan = PlanEpoch(lengths, options, 1234, 0, 0, 1);
  ExpectEachSampleOnce(plan, lengths.size());
  int64_t padded = 0, real = 0;
  for (const auto& batch : plan) {
    ASSERT_FALSE(batch.empty());
    if (std::find(batch.begin(), batch.end(), 17u) != batch.end()) {
      EXPECT_EQ(batch.size(), 1u);
      continue;
    }
    EXPECT_LE(PaddedTokens(batch, lengths), 1024);
    padded += PaddedTokens(batch, lengths);
    for (uint32_t i : batch) real += lengths[i];
  }
  EXPECT_GT(double(real) / padded, 0.9);  // pools sorted by length: little padding
}

TEST(PlanEpochTest, FixedBatchSizeChunksEverySampleOnce) {
  auto lengths = RandomLengths(103, 3);
  BatchPlanOptions options;
  options.batch_size = 10;
  BatchPlan plan = PlanEpoch(lengths, options, 1, 0, 0, 1);
  ASSERT_EQ(plan.size(), 11u);
  for (size_t b = 0; b + 1 < plan.size(); ++b) EXPECT_EQ(plan[b].size(), 10u);
  EXPECT_EQ(plan.back().size(), 3u);
  ExpectEachSampleOnce(plan, lengths.size());
}

TEST(PlanEpochTest, OrderIsAPureFunctionOfSeedAndEpoch) {
  auto lengths = RandomLengths(500, 11);
  for (int64_t max_tokens : {0, 600}) {
    BatchPlanOptions options;
    options.batch_size = 16;
    options.max_tokens = max_tokens;
    EXPECT_EQ(PlanEpoch(lengths, options, 42, 3, 0, 1), PlanEpoch(lengths, options, 42, 3, 0, 1));
    EXPECT_NE(PlanEpoch(lengths, options, 42, 3, 0, 1), PlanEpoch(lengths, options, 42, 4, 0, 1));
    EXPECT_NE(PlanEpoch(lengths, options, 42, 3, 0, 1), PlanEpoch(lengths, options, 43, 3, 0, 1));
  }
}

TEST(PlanEpochTest, RanksGetDisjointSamplesAndEqualBatchCounts) {
  auto lengths = RandomLengths(1001, 5);
  for (int64_t max_tokens : {0, 700}) {
    BatchPlanOptions options;
    options.batch_size = 8;
    options.max_tokens = max_tokens;
    BatchPlan r0 = PlanEpoch(lengths, options, 9, 1, 0, 2);
    BatchPlan r1 = PlanEpoch(lengths, options, 9, 1, 1, 2);
    EXPECT_EQ(r0.size(), r1.size());
    EXPECT_GT(r0.size(), 0u);
    std::set<uint32_t> s0;
    for (const auto& b : r0) s0.insert(b.begin(), b.end());
    for (const auto& b : r1)
      for (uint32_t i : b) EXPECT_EQ(s0.count(i), 0u) << "sample " << i << " on both ranks";
  }
}

TEST(PlanEvalTest, EverySampleOnceWithinBudget) {
  auto lengths = RandomLengths(300, 2);
  BatchPlanOptions options;
  options.max_tokens = 512;
  BatchPlan plan = PlanEval(lengths, options);
  ExpectEachSampleOnce(plan, lengths.size());
  for (const auto& b : plan) EXPECT_LE(PaddedTokens(b, lengths), 512);
}

TEST(CollateTest, PadsTruncatesAndCounts) {
  const std::string path = ::testing::TempDir() + "/collate_" + std::to_string(::getpid()) + ".shard";
  format::ShardWriter writer(16, 2);
  writer.Add(1, 0, {2, 5, 6});
  writer.Add(2, 1, {2, 7, 8, 9, 10, 11});
  ASSERT_EQ(writer.WriteFile(path), "");
  format::ShardReader shard;
  ASSERT_EQ(shard.Open(path, true), "");
  Batch b = Collate(shard, {0, 1}, /*max_len=*/4, /*pad_id=*/0);
  EXPECT_TRUE(torch::equal(b.tokens, torch::tensor({2, 5, 6, 0, 2, 7, 8, 9}, torch::kLong).view({2, 4})));
  EXPECT_TRUE(torch::equal(b.pad_mask, b.tokens.eq(0)));
  EXPECT_TRUE(torch::equal(b.labels, torch::tensor({0, 1}, torch::kLong)));
  EXPECT_EQ(b.real_tokens, 7);
  EXPECT_EQ(b.padded_tokens, 8);
  EXPECT_EQ(b.samples, 2);
}

}  // namespace
}  // namespace nightshift::trainer
