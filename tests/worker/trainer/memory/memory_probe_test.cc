#include "worker/trainer/memory/memory_probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <thread>
#include <vector>

#include "tests/worker/trainer/test_util.h"
#include "worker/trainer/memory/oom.h"
#include "worker/trainer/train.h"

namespace nightshift::trainer {
namespace {

// Memory grows linearly with the rows of the probe batch: base + per_row x rows.
class FakeMeter : public MemoryMeter {
 public:
  void ResetPeak() override { peak = 0; }
  int64_t PeakBytes() override { return peak; }
  int64_t peak = 0;
};

ProbeResult Probe(int64_t limit, int64_t cap_tokens = 0) {
  FakeMeter meter;
  ProbeOptions o;
  o.limit_bytes = limit;
  o.max_len = 100;
  o.cap_tokens = cap_tokens;
  return ProbeMaxTokens(o, meter, [&](int64_t rows) { meter.peak = 1000 + 10 * rows; });
}

TEST(MemoryProbeTest, FindsTheLargestBudgetUnderTheTargetWithAMargin) {
  // target 0.8 x 2250 = 1800 bytes: 80 rows fit; 0.9 x 80 rows x 100 tokens = 7200.
  const ProbeResult r = Probe(2250);
  EXPECT_LE(r.peak_bytes, 1800);
  EXPECT_GE(r.max_tokens, 0.9 * 75 * 100);  // within the bisection's 1/16
  EXPECT_LE(r.max_tokens, 7200);
  EXPECT_LT(r.probes, 20);
  EXPECT_LT(Probe(1500).max_tokens, r.max_tokens);        // a smaller limit: a smaller budget
  EXPECT_EQ(Probe(1 << 30, 1000).max_tokens, 900);       // the cap
}

TEST(MemoryProbeTest, OutOfMemoryCountsAsTooBigAndOneRowMustFit) {
  FakeMeter meter;
  ProbeOptions o;
  o.limit_bytes = int64_t{1} << 40;
  o.max_len = 10;
  const ProbeResult r = ProbeMaxTokens(o, meter, [](int64_t rows) {
    if (rows > 12) ThrowInjectedOutOfMemory(rows * 10, 120);
  });
  EXPECT_EQ(r.max_tokens, static_cast<int64_t>(0.9 * 120));
  EXPECT_THROW(Probe(1000), std::runtime_error);  // 1010 bytes for one row > 800
}

// Memory of 1000 + 10 x rows bytes, out of memory past the 2250-byte limit (target 1800):
// once two probes fitted, no row count the line through them puts past the target runs
// (the doubling alone would run 128 rows: 2280 bytes, out of memory; the bisection 96:
// 1960), and the budget is the one found without that.
TEST(MemoryProbeTest, ARowCountPastTheTargetOnTheLineIsNotRun) {
  FakeMeter meter;
  ProbeOptions o;
  o.limit_bytes = 2250;
  o.max_len = 100;
  int64_t most = 0;
  const ProbeResult r = ProbeMaxTokens(o, meter, [&](int64_t rows) {
    most = std::max(most, rows);
    if (1000 + 10 * rows > o.limit_bytes) ThrowInjectedOutOfMemory(rows * 100, 12500);
    meter.peak = 1000 + 10 * rows;
  });
  EXPECT_LE(most, 80);
  EXPECT_GE(r.predicted, 2);
  EXPECT_EQ(r.max_tokens, Probe(2250).max_tokens);
}

// Two ranks (threads) in lockstep, rank 1 using twice the memory per row: both run the
// same row counts and end with the budget rank 1 alone would find.
TEST(MemoryProbeTest, RanksInLockstepRunTheSameProbesAndAgreeOnTheSmallerBudget) {
  std::barrier meet(2);
  bool answers[2] = {false, false};
  std::vector<int64_t> ran[2];
  ProbeResult results[2];
  const auto per_row = [](int r) { return r == 0 ? 10 : 20; };
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      FakeMeter meter;
      ProbeOptions o;
      o.limit_bytes = 2250;
      o.max_len = 100;
      o.agree = [&, r](bool yes) {
        answers[r] = yes;
        meet.arrive_and_wait();
        const bool all = answers[0] && answers[1];
        meet.arrive_and_wait();
        return all;
      };
      results[r] = ProbeMaxTokens(o, meter, [&, r](int64_t rows) {
        ran[r].push_back(rows);
        meter.peak = 1000 + per_row(r) * rows;
      });
    });
  for (std::thread& t : ranks) t.join();
  EXPECT_EQ(ran[0], ran[1]);
  EXPECT_EQ(results[0].max_tokens, results[1].max_tokens);
  FakeMeter alone;
  ProbeOptions o;
  o.limit_bytes = 2250;
  o.max_len = 100;
  EXPECT_EQ(results[1].max_tokens,
            ProbeMaxTokens(o, alone, [&](int64_t rows) { alone.peak = 1000 + 20 * rows; }).max_tokens);
  EXPECT_LT(results[1].max_tokens, Probe(2250).max_tokens);
}

TEST(MemoryProbeTest, TrainingWithAutoBudgetReportsIt) {
  // Real memory: a small limit gives a smaller budget than a large one. The limit is the
  // process's whole resident set, so it is set relative to the one of a warmed-up run.
  // (The allocator keeps freed memory resident, so no large run goes before the small one.)
  auto budget = [](int64_t extra_bytes, const std::string& name) {
    // Enough samples that the large limit is not capped at the whole epoch (the fused
    // attention kernel needs little memory per row).
    TrainConfig c = testing::TinyConfig(testing::FreshDir(name), /*n_train=*/2000);
    c.model.max_len = 64;
    c.train.max_tokens_auto = extra_bytes > 0;
    c.train.max_steps = 1;
    c.checkpoint.every_steps = 0;
    RankInfo rank;
    auto meter = NewHostMemoryMeter();
    meter->ResetPeak();
    rank.memory_limit_bytes = static_cast<int64_t>((meter->PeakBytes() + extra_bytes) / 0.8);
    MemoryProgressSink progress;
    EXPECT_EQ(RunTraining(c, rank, progress), kExitOk) << progress.records.back().String("message");
    return progress.records.front().Number("max_tokens");
  };
  budget(0, "auto_warm_up");  // a fixed-budget run: libraries and threads started
  const double small = budget(24 << 20, "auto_small"), big = budget(256 << 20, "auto_big");
  EXPECT_GE(small, 64);
  EXPECT_LT(small, big);
}

}  // namespace
}  // namespace nightshift::trainer
