#include "coordinator/scheduler.h"

#include <gtest/gtest.h>

namespace nightshift {
namespace {

int RanksPlaced(const std::vector<SchedPart>& parts) {
  int n = 0;
  for (const auto& p : parts) n += p.num_ranks;
  return n;
}

TEST(SchedulerTest, FifoWithinPriorityAndHigherPriorityFirst) {
  auto r = Schedule({{"a", 1, 0, 1}, {"b", 1, 0, 2}, {"c", 1, 5, 3}}, {{"w1", 2, 2}});
  EXPECT_TRUE(r.placed.count("c"));  // highest priority, though submitted last
  EXPECT_TRUE(r.placed.count("a"));  // then the oldest
  EXPECT_FALSE(r.placed.count("b"));
  EXPECT_NE(r.waiting.at("b").find("waiting for 1 free slots"), std::string::npos);
}

TEST(SchedulerTest, GangIsAllOrNothing) {
  auto r = Schedule({{"big", 3, 0, 1}}, {{"w1", 2, 1}, {"w2", 2, 1}});
  EXPECT_TRUE(r.placed.empty());
  EXPECT_NE(r.waiting.at("big").find("2 free now"), std::string::npos);
}

TEST(SchedulerTest, PacksOntoFewestWorkers) {
  // Fits on one worker: best fit picks the tightest one.
  auto r = Schedule({{"j", 2, 0, 1}}, {{"w1", 4, 4}, {"w2", 2, 2}, {"w3", 8, 3}});
  ASSERT_EQ(r.placed.at("j").size(), 1u);
  EXPECT_EQ(r.placed.at("j")[0].worker, "w2");
  // Spans workers: largest free first, ranks contiguous.
  r = Schedule({{"k", 5, 0, 1}}, {{"w1", 2, 2}, {"w2", 4, 3}, {"w3", 2, 2}});
  const auto& parts = r.placed.at("k");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].worker, "w2");
  EXPECT_EQ(parts[0].first_rank, 0);
  EXPECT_EQ(parts[0].num_ranks, 3);
  EXPECT_EQ(parts[1].first_rank, 3);
  EXPECT_EQ(RanksPlaced(parts), 5);
}

TEST(SchedulerTest, ImpossibleJobDoesNotBlockTheQueue) {
  auto r = Schedule({{"huge", 10, 0, 1}, {"small", 1, 0, 2}}, {{"w1", 2, 2}});
  EXPECT_FALSE(r.placed.count("huge"));
  EXPECT_EQ(r.waiting.at("huge"), "needs 10 slots; the cluster has 2");
  EXPECT_TRUE(r.placed.count("small"));
}

TEST(SchedulerTest, WaitingJobHoldsUpLaterJobs) {
  // "big" could run once slots free up: later small jobs must not overtake it forever.
  auto r = Schedule({{"big", 2, 0, 1}, {"small", 1, 0, 2}}, {{"w1", 2, 1}});
  EXPECT_TRUE(r.placed.empty());
  EXPECT_EQ(r.waiting.at("small"), "queued behind big");
}

TEST(SchedulerTest, NoDoubleBookingWithinOnePass) {
  auto r = Schedule({{"a", 1, 0, 1}, {"b", 1, 0, 2}, {"c", 1, 0, 3}}, {{"w1", 2, 2}});
  EXPECT_EQ(r.placed.size(), 2u);
  EXPECT_TRUE(r.waiting.count("c"));
}

}  // namespace
}  // namespace nightshift
