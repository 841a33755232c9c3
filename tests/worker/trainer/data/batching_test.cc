#include "worker/trainer/data/batching.h"

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

TEST(PlanEpochTest, RanksGetDisjointSamplesAndEqualBatchCountsAndNoneIsDropped) {
  auto lengths = RandomLengths(1001, 5);
  // Budgets from many batches down to one batch for the whole epoch.
  for (int64_t max_tokens : {int64_t{0}, int64_t{700}, int64_t{1} << 40})
    for (int world : {2, 3, 4}) {
      BatchPlanOptions options;
      options.batch_size = 8;
      options.max_tokens = max_tokens;
      std::multiset<uint32_t> seen;
      size_t batches = 0;
      for (int r = 0; r < world; ++r) {
        const BatchPlan plan = PlanEpoch(lengths, options, 9, 1, r, world);
        if (r == 0) batches = plan.size();
        EXPECT_EQ(plan.size(), batches) << "rank " << r << " of " << world << ", budget " << max_tokens;
        EXPECT_GT(plan.size(), 0u);
        for (const auto& b : plan) {
          if (max_tokens > 0) EXPECT_LE(PaddedTokens(b, lengths), max_tokens);
          seen.insert(b.begin(), b.end());
        }
      }
      EXPECT_EQ(seen.size(), lengths.size()) << "world " << world << ", budget " << max_tokens;
      EXPECT_EQ(std::set<uint32_t>(seen.begin(), seen.end()).size(), seen.size()) << "a sample twice";
    }
}

// 36 samples in batches of 8: one rank deals [8 8 8 8 4], two halve the first to divide
// by 2 ([4 4 8 8 8 4]), four halve two more ([4 4 4 4 4 4 8 4]). A resume on another number
// of ranks goes on after the samples trained, not after as many batches: two ranks' first
// step each (two batches of 4) is one rank's first batch; four ranks' first step (16
// samples) is three batches of two ranks', which no whole step of each of them ends at.
TEST(PlanEpochTest, AResumeOnAnotherWorldSizeGoesOnAfterTheSamplesTrained) {
  const std::vector<uint32_t> lengths(36, 5);
  BatchPlanOptions options;
  options.batch_size = 8;
  ASSERT_EQ(PlanEpoch(lengths, options, 3, 0, 0, 2).size(), 3u);
  EXPECT_EQ(BatchesDoneOnResize(lengths, options, 3, 0, /*from=*/2, /*done=*/1, /*to=*/1), 1);  // not 2
  EXPECT_EQ(BatchesDoneOnResize(lengths, options, 3, 0, 1, 1, 2), 1);
  EXPECT_EQ(BatchesDoneOnResize(lengths, options, 3, 0, 4, 1, 2), -1);  // 16 samples: 3 batches of 2 ranks'
  EXPECT_EQ(BatchesDoneOnResize(lengths, options, 3, 0, 4, 2, 2), 3);   // the whole epoch
  EXPECT_EQ(BatchesDoneOnResize(lengths, options, 3, 0, 2, 3, 1), 5);   // the same
  EXPECT_EQ(BatchesDoneOnResize(lengths, options, 3, 0, 2, 0, 4), 0);
  const std::vector<uint32_t> even(32, 5);  // 4 batches whatever the ranks: as many batches
  EXPECT_EQ(BatchesDoneOnResize(even, options, 3, 0, 4, 1, 2), 2);
  EXPECT_EQ(BatchesDoneOnResize(even, options, 3, 0, 2, 1, 4), -1);  // 2 batches: half a step of 4
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

// Language-model samples packed into rows of max_len in order (next-fit): positions restart
// and segments count up inside a row; the targets skip each sample's first token and its
// prompt (the shard's label), and padding.
TEST(CollateTest, PackedRowsKeepSamplesApartAndSkipPrompts) {
  const std::string path = ::testing::TempDir() + "/collate_lm_" + std::to_string(::getpid()) + ".shard";
  format::ShardWriter writer(32, 0);
  writer.Add(1, -1, {2, 5, 6});          // plain text
  writer.Add(2, 2, {2, 7, 8, 9});        // prompt of 2 tokens
  writer.Add(3, -1, {2, 10, 11, 12, 13, 14});
  ASSERT_EQ(writer.WriteFile(path), "");
  format::ShardReader shard;
  ASSERT_EQ(shard.Open(path, true), "");
  const Batch b = Collate(shard, {0, 1, 2}, /*max_len=*/8, /*pad_id=*/0, /*packed=*/true);
  EXPECT_EQ(b.rows(), 2);  // 3 + 4 tokens, then 6
  EXPECT_EQ(b.samples, 3);
  // Rows are as long as the longest (7 tokens), padding at the end.
  EXPECT_TRUE(torch::equal(b.tokens, torch::tensor({2, 5, 6, 2, 7, 8, 9, 2, 10, 11, 12, 13, 14, 0}, torch::kLong)
                                         .view({2, 7})));
  EXPECT_TRUE(torch::equal(b.positions, torch::tensor({0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 0}, torch::kLong)
                                            .view({2, 7})));
  EXPECT_TRUE(torch::equal(b.segments.narrow(1, 0, 7), torch::tensor({0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, -1},
                                                                     torch::kLong).view({2, 7})));
  const auto targets = torch::tensor({0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0}, torch::kBool).view({2, 7});
  EXPECT_TRUE(torch::equal(b.target_mask, targets));
  EXPECT_EQ(b.real_tokens, 13);
  EXPECT_EQ(b.padded_tokens, 14);

  // One sample per row: the same targets, row by row.
  const Batch padded = Collate(shard, {0, 1, 2}, 8, 0);
  EXPECT_FALSE(padded.segments.defined());
  EXPECT_EQ(padded.target_mask.sum().item<int64_t>(), targets.sum().item<int64_t>());
}

// Packed plans: every sample once, each batch's rows (rebuilt by next-fit, as Collate does)
// within max_len, as many rows per batch as the budget holds (but one batch), and the rows
// full: best-fit decreasing, and next-fit rebuilds its rows rather than cutting new ones.
TEST(PlanEpochTest, PackedBatchesHoldTheBudgetsRows) {
  std::vector<uint32_t> lengths = RandomLengths(500, 9);
  for (auto& l : lengths) l = std::min<uint32_t>(l, 64);
  BatchPlanOptions options;
  options.pack_len = 64;
  options.max_tokens = 4 * 64;
  const BatchPlan plan = PlanEpoch(lengths, options, 1, 0, 0, 1);
  ExpectEachSampleOnce(plan, lengths.size());
  int64_t tokens = 0, rows_total = 0, short_batches = 0;
  for (size_t b = 0; b < plan.size(); ++b) {
    int64_t rows = 0, used = 64;
    for (uint32_t i : plan[b]) {
      if (used + lengths[i] > 64) ++rows, used = 0;
      used += lengths[i];
      tokens += lengths[i];
    }
    rows_total += rows;
    short_batches += rows < 4;
    EXPECT_LE(rows, 4);
  }
  EXPECT_LE(short_batches, 1);
  // (next-fit in shuffled order fills about 88% here)
  EXPECT_GT(double(tokens) / double(rows_total * 64), 0.98) << tokens << " tokens in " << rows_total << " rows";
}

}  // namespace
}  // namespace nightshift::trainer
