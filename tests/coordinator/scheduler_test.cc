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

TEST(SchedulerTest, GpuJobsGoToGpuWorkersOnly) {
  SchedJob gpu{"g", 2, 0, 1};
  gpu.needs_gpu = true;
  // Free CPU slots do not count for it; the CPU job may use either kind.
  auto r = Schedule({gpu, {"c", 1, 0, 2}}, {{"cpu1", 4, 4}, {"gpu1", 2, 2, /*gpus=*/true}});
  ASSERT_TRUE(r.placed.count("g"));
  ASSERT_EQ(r.placed.at("g").size(), 1u);
  EXPECT_EQ(r.placed.at("g")[0].worker, "gpu1");
  EXPECT_EQ(r.placed.at("c")[0].worker, "cpu1");
  // GPU workers full: it waits, saying for what, and CPU jobs still start.
  r = Schedule({gpu, {"c", 1, 0, 2}}, {{"cpu1", 4, 4}, {"gpu1", 2, 1, true}});
  EXPECT_FALSE(r.placed.count("g"));
  EXPECT_EQ(r.waiting.at("g"), "waiting for 2 free GPU slots (1 free now)");
  EXPECT_TRUE(r.placed.count("c"));
  // No GPU worker at all: the reason names the field.
  r = Schedule({gpu}, {{"cpu1", 4, 4}});
  EXPECT_EQ(r.waiting.at("g"), "resources.device is cuda but no ready worker has GPUs");
}

// A worker with 16 GiB over 2 slots holds ranks of up to 8 GiB (resources.memory_gb);
// one that says nothing of its memory (0) holds any.
SchedWorker WithMemory(SchedWorker w, double gb_per_slot) {
  w.memory_gb_per_slot = gb_per_slot;
  return w;
}

TEST(SchedulerTest, ARankGoesOnlyWhereItsMemoryFitsPerSlot) {
  SchedJob big{"big", 2, 0, 1};
  big.memory_gb = 12;
  const std::vector<SchedWorker> workers = {WithMemory({"small", 4, 4}, 8), WithMemory({"large", 2, 2}, 16)};
  // Best fit would take "large" anyway; a 3-rank job shows the small worker is skipped.
  SchedJob three = big;
  three.id = "three", three.world_size = 3;
  auto r = Schedule({big, {"c", 4, 0, 2}}, workers);
  ASSERT_TRUE(r.placed.count("big"));
  EXPECT_EQ(r.placed.at("big")[0].worker, "large");
  ASSERT_TRUE(r.placed.count("c"));  // no memory_gb: any worker
  EXPECT_EQ(r.placed.at("c")[0].worker, "small");
  r = Schedule({three}, workers);
  EXPECT_FALSE(r.placed.count("three"));
  EXPECT_EQ(r.waiting.at("three"), "needs 3 slots with 12 GiB; the cluster has 2");
  // The large worker busy: it waits for it, keeping its free slot (best fit would have
  // put the later job there), and the others go on elsewhere.
  r = Schedule({big, {"c", 1, 0, 2}}, {WithMemory({"small", 4, 4}, 8), WithMemory({"large", 2, 1}, 16)});
  EXPECT_EQ(r.waiting.at("big"), "waiting for 2 free slots with 12 GiB (1 free now)");
  ASSERT_TRUE(r.placed.count("c"));
  EXPECT_EQ(r.placed.at("c")[0].worker, "small");
  r = Schedule({big, {"c", 1, 0, 2}}, {WithMemory({"small", 4, 0}, 8), WithMemory({"large", 2, 1}, 16)});
  EXPECT_FALSE(r.placed.count("c"));
  // Its slots free but a reservation before it (an earlier 3-rank job): queued behind it.
  r = Schedule({{"first", 3, 0, 0}, big}, {WithMemory({"small", 4, 0}, 8), WithMemory({"large", 2, 2}, 16)});
  EXPECT_EQ(r.reserved_for, "first");
  EXPECT_EQ(r.waiting.at("big"), "queued behind first");
  // A job that cannot fit even when its workers are free keeps nothing.
  SchedJob huge = big;
  huge.id = "huge", huge.world_size = 3;
  r = Schedule({huge, {"c", 1, 0, 2}}, {WithMemory({"small", 4, 0}, 8), WithMemory({"large", 2, 1}, 16)});
  EXPECT_TRUE(r.placed.count("c"));
  // 8 GiB per rank fits both: placed as any job (across them).
  three.memory_gb = 8;
  r = Schedule({three}, {WithMemory({"small", 2, 2}, 8), WithMemory({"large", 2, 2}, 16)});
  EXPECT_EQ(RanksPlaced(r.placed.at("three")), 3);
  // A worker of unknown memory takes it; none large enough: the reason names the field.
  r = Schedule({big}, {{"unknown", 2, 2}});
  EXPECT_TRUE(r.placed.count("big"));
  r = Schedule({big}, {WithMemory({"small", 4, 4}, 8)});
  EXPECT_EQ(r.waiting.at("big"),
            "resources.memory_gb is 12 per rank, but no ready worker has that much per slot (the most: 8 GiB, its "
            "memory over its slots)");
  // A GPU job counts the GPU workers' memory only.
  big.needs_gpu = true;
  r = Schedule({big}, {WithMemory({"cpu", 4, 4}, 64), WithMemory({"gpu", 2, 2, true}, 8)});
  EXPECT_EQ(r.waiting.at("big"),
            "resources.memory_gb is 12 per rank, but no ready worker has that much per slot (the most: 8 GiB, its "
            "memory over its slots)");
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

// Issue 18: a worker whose own disk holds the job's newest checkpoint comes first, over
// best fit on one worker and over the most free slots across workers.
TEST(SchedulerTest, WorkersHoldingTheNewestCheckpointComeFirst) {
  SchedJob one{"one", 1, 0, 1};
  one.holders = {"roomy"};
  auto r = Schedule({one}, {{"tight", 1, 1}, {"roomy", 4, 4}});
  ASSERT_TRUE(r.placed.count("one"));
  EXPECT_EQ(r.placed.at("one")[0].worker, "roomy");  // best fit alone would take "tight"
  one.holders = {"gone"};  // a holder that is not offered changes nothing
  r = Schedule({one}, {{"tight", 1, 1}, {"roomy", 4, 4}});
  EXPECT_EQ(r.placed.at("one")[0].worker, "tight");

  SchedJob two{"two", 2, 0, 1};
  two.holders = {"w3"};
  r = Schedule({two}, {{"w1", 1, 1}, {"w2", 1, 1}, {"w3", 1, 1}});
  ASSERT_EQ(r.placed.at("two").size(), 2u);
  EXPECT_EQ(r.placed.at("two")[0].worker, "w3");  // rank 0 on the holder
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

TEST(SchedulerTest, PriorityClassesBeforeFairShare) {
  // Alice's high-priority jobs go first even though she holds more; then Bob.
  std::vector<SchedJob> jobs = {{"a1", 1, 5, 1, "alice"}, {"a2", 1, 5, 2, "alice"}, {"b1", 1, 0, 3, "bob"}};
  auto r = Schedule(jobs, {{"w1", 2, 2}});
  EXPECT_TRUE(r.placed.count("a1"));
  EXPECT_TRUE(r.placed.count("a2"));
  EXPECT_FALSE(r.placed.count("b1"));
}

TEST(SchedulerTest, FairShareAlternatesBetweenUsers) {
  // Alice submitted first and more, but with 2 free slots each user gets one.
  std::vector<SchedJob> jobs = {{"a1", 1, 0, 1, "alice"}, {"a2", 1, 0, 2, "alice"},
                                {"a3", 1, 0, 3, "alice"}, {"b1", 1, 0, 4, "bob"}};
  auto r = Schedule(jobs, {{"w1", 2, 2}});
  EXPECT_TRUE(r.placed.count("a1"));
  EXPECT_TRUE(r.placed.count("b1"));
  EXPECT_EQ(r.placed.size(), 2u);
}

TEST(SchedulerTest, FairShareCountsRunningSlots) {
  // Alice already holds 3 slots: Bob's later job gets the free one.
  SchedRunning alice_run{"a0", 0, 0, "alice", {{"w1", 0, 3}}};
  auto r = Schedule({{"a1", 1, 0, 1, "alice"}, {"b1", 1, 0, 2, "bob"}}, {{"w1", 4, 1}}, {alice_run});
  EXPECT_TRUE(r.placed.count("b1"));
  EXPECT_FALSE(r.placed.count("a1"));
}

TEST(SchedulerTest, BackfillsJobsThatEndBeforeTheReservation) {
  // "run" holds 3 of 4 slots until t=100; "big" needs 4 and is reserved for t=100.
  SchedRunning run{"run", 0, 0, "", {{"w1", 0, 3}}, 100};
  SchedJob big{"big", 4, 0, 1};
  SchedJob quick{"quick", 1, 0, 2, "", 50};   // ends at t=50: may go first
  SchedJob slow{"slow", 1, 0, 3, "", 500};    // would delay "big": may not
  auto r = Schedule({big, quick, slow}, {{"w1", 4, 1}}, {run});
  EXPECT_EQ(r.reserved_for, "big");
  EXPECT_EQ(r.reserved_in_seconds, 100);
  EXPECT_TRUE(r.placed.count("quick"));
  EXPECT_FALSE(r.placed.count("slow"));
  EXPECT_FALSE(r.placed.count("big"));
}

TEST(SchedulerTest, BackfillsIntoSlotsTheReservationDoesNotNeed) {
  // 6 slots, "run" holds 4 until t=100; "big" needs 5, so 1 slot is spare even then.
  SchedRunning run{"run", 0, 0, "", {{"w1", 0, 4}}, 100};
  auto r = Schedule({{"big", 5, 0, 1}, {"s1", 1, 0, 2}, {"s2", 1, 0, 3}}, {{"w1", 6, 2}}, {run});
  EXPECT_TRUE(r.placed.count("s1"));   // unknown length, but fits in the spare slot
  EXPECT_FALSE(r.placed.count("s2"));  // would take a slot "big" needs
  EXPECT_EQ(r.waiting.at("s2"), "queued behind big");
}

// Simulates a stream of small jobs arriving while a large one waits: with backfill
// the large one starts as soon as the jobs ahead of it have ended.
TEST(SchedulerTest, LargeJobIsNotStarvedBySmallJobsThatKeepArriving) {
  struct Run { std::string id; int slots; int end; };
  std::vector<Run> runs;
  std::vector<SchedJob> queue;
  uint64_t seq = 0;
  int big_started = -1, backfilled = 0;
  for (int t = 0; t < 60 && big_started < 0; ++t) {
    std::vector<Run> still;
    for (auto& r : runs) if (r.end > t) still.push_back(r);
    runs = still;
    // Two one-slot jobs of 3 time units arrive every step; the big one at t=2.
    for (int k = 0; k < 2; ++k)
      queue.push_back({"s" + std::to_string(seq), 1, 0, ++seq, "", 3});
    if (t == 2) queue.push_back({"big", 4, 0, ++seq});
    std::vector<SchedRunning> running;
    int used = 0;
    for (auto& r : runs) {
      running.push_back({r.id, 0, 0, "", {{"w1", 0, r.slots}}, double(r.end - t)});
      used += r.slots;
    }
    auto res = Schedule(queue, {{"w1", 4, 4 - used}}, running);
    std::vector<SchedJob> left;
    for (auto& j : queue) {
      if (!res.placed.count(j.id)) { left.push_back(j); continue; }
      if (j.id == "big") big_started = t;
      else if (t > 2 && big_started < 0) ++backfilled;
      runs.push_back({j.id, j.world_size, t + (j.id == "big" ? 10 : 3)});
    }
    queue = left;
  }
  EXPECT_GE(big_started, 2);
  // The six small jobs submitted before it run first (the last two end at t=6); none of
  // the ones that keep arriving after it may delay it.
  EXPECT_EQ(big_started, 6);
}

TEST(SchedulerTest, PreemptsTheLowestPriorityJob) {
  std::vector<SchedRunning> running = {{"mid", 5, 1, "", {{"w1", 0, 2}}},
                                       {"low", 1, 2, "", {{"w1", 0, 2}}}};
  auto r = Schedule({{"high", 2, 10, 3}}, {{"w1", 4, 0}}, running);
  EXPECT_EQ(r.preempt, std::vector<std::string>{"low"});
  EXPECT_FALSE(r.placed.count("high"));  // the victim stops first
  EXPECT_EQ(r.reserved_for, "high");
  // Next pass: the victim is stopping; nothing more is preempted.
  running[1].stopping = true;
  r = Schedule({{"high", 2, 10, 3}}, {{"w1", 4, 0}}, running);
  EXPECT_TRUE(r.preempt.empty());
}

TEST(SchedulerTest, PreemptsTheFewestJobs) {
  std::vector<SchedRunning> running = {{"a", 0, 1, "", {{"w1", 0, 1}}},
                                       {"b", 0, 2, "", {{"w1", 0, 1}}},
                                       {"c", 0, 3, "", {{"w1", 0, 2}}}};
  auto r = Schedule({{"high", 2, 10, 4}}, {{"w1", 4, 0}}, running);
  EXPECT_EQ(r.preempt, std::vector<std::string>{"c"});
}

TEST(SchedulerTest, NeverPreemptsEqualOrHigherPriority) {
  std::vector<SchedRunning> running = {{"same", 10, 1, "", {{"w1", 0, 2}}}};
  auto r = Schedule({{"high", 2, 10, 2}}, {{"w1", 2, 0}}, running);
  EXPECT_TRUE(r.preempt.empty());
  r = Schedule({{"high", 2, 10, 2}}, {{"w1", 2, 0}}, running, ScheduleOptions{false});
  EXPECT_TRUE(r.preempt.empty());
}

// The attacker: bob submits at a high priority to take the cluster from alice. His
// priority orders his own jobs only; alice's job at priority 0 keeps running, and only
// the best-effort class (below preemptible_below) is open to anyone.
TEST(SchedulerTest, AUsersPriorityPreemptsOnlyTheirOwnJobsOrTheBestEffortClass) {
  SchedJob bobs_urgent{"urgent", 2, 100, 9};
  bobs_urgent.owner = "bob";
  std::vector<SchedRunning> running = {{"alices", 0, 1, "alice", {{"w1", 0, 2}}}};
  auto r = Schedule({bobs_urgent}, {{"w1", 2, 0}}, running);
  EXPECT_TRUE(r.preempt.empty());
  EXPECT_EQ(r.waiting.at("urgent"), "waiting for 2 free slots (0 free now)");
  // His own job at priority 0 is his to preempt.
  running.push_back({"bobs", 0, 2, "bob", {{"w2", 0, 2}}});
  r = Schedule({bobs_urgent}, {{"w1", 2, 0}, {"w2", 2, 0}}, running);
  EXPECT_EQ(r.preempt, std::vector<std::string>{"bobs"});
  // Alice's best-effort job (priority -1, below the default class floor 0) is anyone's.
  running = {{"alices", 0, 1, "alice", {{"w1", 0, 2}}}, {"alices_spare", -1, 2, "alice", {{"w2", 0, 2}}}};
  r = Schedule({bobs_urgent}, {{"w1", 2, 0}, {"w2", 2, 0}}, running);
  EXPECT_EQ(r.preempt, std::vector<std::string>{"alices_spare"});
  // An admin-set floor of 1 opens priority 0 to everyone's higher priorities too.
  running.pop_back();
  r = Schedule({bobs_urgent}, {{"w1", 2, 0}}, running, ScheduleOptions{true, /*preemptible_below=*/1});
  EXPECT_EQ(r.preempt, std::vector<std::string>{"alices"});
}

// Why a job waits names another owner's job only as one: queued behind alice's
// reservation, bob's job is not told its id; bob's reservation preempting his own job and
// two of alice's names his own only.
TEST(SchedulerTest, TheReasonsNameOnlyTheOwnersOwnJobs) {
  SchedJob alices{"a-big", 3, 0, 0, "alice"}, bobs{"b-small", 1, 0, 1, "bob"};
  auto r = Schedule({alices, bobs}, {{"w1", 3, 2}});
  EXPECT_EQ(r.reserved_for, "a-big");
  EXPECT_EQ(r.waiting.at("b-small"), "queued behind a job of another user");
  SchedJob bobs_big{"b-big", 3, 10, 2, "bob"};
  const std::vector<SchedRunning> running = {{"a-1", 0, 0, "alice", {{"w1", 0, 1}}},
                                             {"a-2", 0, 1, "alice", {{"w1", 0, 1}}},
                                             {"b-1", 0, 2, "bob", {{"w1", 0, 1}}}};
  ScheduleOptions best_effort_below_1;  // alice's priority 0: preemptible by another owner's job
  best_effort_below_1.preemptible_below = 1;
  r = Schedule({bobs_big}, {{"w1", 3, 0}}, running, best_effort_below_1);
  EXPECT_EQ(r.preempt.size(), 3u);
  EXPECT_EQ(r.waiting.at("b-big"), "preempting b-1, 2 jobs of other users (lower priority) to start");
}

// A GPU job, or one with resources.memory_gb, preempts as the reservation holder does,
// but only jobs on the workers it may use and as many as free its slots there: a larger,
// lower-priority CPU job is left running, and the slots it frees are kept for it.
TEST(SchedulerTest, ARestrictedJobPreemptsOnlyOnTheWorkersItMayUse) {
  SchedJob gpu{"g", 2, 10, 5};
  gpu.needs_gpu = true;
  const std::vector<SchedWorker> workers = {{"cpu1", 4, 0}, {"gpu1", 3, 1, /*gpus=*/true}};
  std::vector<SchedRunning> running = {{"cpu-low", 0, 1, "", {{"cpu1", 0, 4}}},
                                       {"gpu-low", 1, 2, "", {{"gpu1", 0, 1}}},
                                       {"gpu-lower", 0, 3, "", {{"gpu1", 0, 1}}}};
  // "c" (priority 1) then takes the reservation: it may not count or choose gpu-lower
  // (its slot is kept for "g"), and stops the CPU job for its one slot instead.
  auto r = Schedule({gpu, {"c", 1, 1, 6}}, workers, running);
  EXPECT_EQ(r.preempt, (std::vector<std::string>{"gpu-lower", "cpu-low"}));  // one more GPU slot is enough
  EXPECT_EQ(r.preempted_by, (std::map<std::string, std::string>{{"gpu-lower", "g"}, {"cpu-low", "c"}}));
  EXPECT_EQ(r.waiting.at("g"), "preempting gpu-lower (lower priority) to start");
  EXPECT_FALSE(r.placed.count("g"));    // the victim stops first
  EXPECT_FALSE(r.placed.count("c"));    // the free GPU slot is kept for it
  // Next pass: the victim is stopping; nothing more is preempted.
  running[2].stopping = true;
  r = Schedule({gpu}, workers, running);
  EXPECT_TRUE(r.preempt.empty());
  EXPECT_EQ(r.waiting.at("g"), "waiting for 2 free GPU slots (1 free now)");
  // Both GPU jobs needed: the lowest priority first, the CPU job never.
  running[2].stopping = false;
  r = Schedule({gpu}, {{"cpu1", 4, 0}, {"gpu1", 2, 0, true}}, running);
  EXPECT_EQ(r.preempt, (std::vector<std::string>{"gpu-lower", "gpu-low"}));
  // Not enough even with both stopped, or preemption off: none.
  SchedJob three = gpu;
  three.world_size = 3;
  r = Schedule({three}, {{"cpu1", 4, 0}, {"gpu1", 3, 0, true}}, {running[0], running[2]});
  EXPECT_TRUE(r.preempt.empty());
  r = Schedule({gpu}, workers, running, ScheduleOptions{false});
  EXPECT_TRUE(r.preempt.empty());
  // Queued behind a reservation it could not start before anyway: it stops nobody.
  r = Schedule({{"first", 6, 20, 1}, gpu}, workers, running);
  EXPECT_EQ(r.reserved_for, "first");
  EXPECT_EQ(r.preempt, (std::vector<std::string>{"cpu-low", "gpu-lower"}));  // first's; not gpu-low for g
  EXPECT_EQ(r.preempted_by.at("gpu-lower"), "first");
  // The victim stopping in the next pass frees a slot kept for g: the reservation of a
  // job after it neither counts it nor backfills a job into it.
  running[2].stopping = true;
  SchedJob after{"after", 4, 5, 8};
  r = Schedule({gpu, after, {"small", 1, 1, 9}}, {{"cpu1", 4, 1}, {"gpu1", 3, 1, true}},
               {{"cpu-high", 50, 1, "", {{"cpu1", 0, 3}}, 100}, running[1], running[2]});
  EXPECT_EQ(r.reserved_for, "after");
  EXPECT_EQ(r.reserved_in_seconds, 100);  // when cpu-high ends, not at once
  EXPECT_FALSE(r.placed.count("small"));  // no spare slot at 100: it would delay "after"
  running[2].stopping = false;
  // A reservation held (here by another owner's job, which may not stop gpu-lower): g
  // stops nobody, even where it would start before it, since the holder, first in the
  // next pass, would count the victim's slots as free at once and take them.
  SchedJob theirs{"theirs", 2, 20, 1};
  theirs.owner = "bob";
  gpu.expected_seconds = 50;
  r = Schedule({theirs, gpu}, {{"cpu1", 4, 0}, {"gpu1", 2, 0, true}},
               {{"cpu-high", 30, 1, "bob", {{"cpu1", 0, 4}}, 200}, {"gpu-lower", 0, 3, "", {{"gpu1", 0, 2}}, 100}});
  EXPECT_EQ(r.reserved_for, "theirs");
  EXPECT_TRUE(r.preempt.empty());
  gpu.expected_seconds = kUnknownSeconds;
  // A victim of g's on both kinds of workers: its CPU slots count as freed for the
  // reservation after g (no second victim), its GPU slot is kept for g.
  r = Schedule({{"g1", 1, 10, 5, "", kUnknownSeconds, true}, {"cpu-job", 2, 5, 6}}, {{"cpu1", 4, 0}, {"gpu1", 2, 0, true}},
               {{"x", 0, 1, "", {{"cpu1", 0, 2}}}, {"w", 0, 2, "", {{"gpu1", 0, 1}}},
                {"v", 0, 3, "", {{"gpu1", 1, 1}, {"cpu1", 2, 2}}}});
  EXPECT_EQ(r.preempt, std::vector<std::string>{"v"});
  EXPECT_EQ(r.reserved_for, "cpu-job");
  EXPECT_EQ(r.reserved_in_seconds, 0);
  // Memory: a 12 GiB rank preempts on the 16 GiB worker only.
  SchedJob big{"big", 2, 5, 7};
  big.memory_gb = 12;
  r = Schedule({big}, {WithMemory({"small", 4, 0}, 8), WithMemory({"large", 2, 0}, 16)},
               {{"small-low", 0, 1, "", {{"small", 0, 4}}}, {"large-low", 0, 2, "", {{"large", 0, 2}}}});
  EXPECT_EQ(r.preempt, std::vector<std::string>{"large-low"});
  // Another owner's job above the best-effort class is not its to stop.
  big.owner = "bob";
  r = Schedule({big}, {WithMemory({"large", 2, 0}, 16)}, {{"alices", 0, 2, "alice", {{"large", 0, 2}}}});
  EXPECT_TRUE(r.preempt.empty());
}

TEST(SchedulerTest, PreemptionNotNeededWhenOnlyCapacityIsMissing) {
  // Not enough even with every lower-priority job stopped: no victims.
  std::vector<SchedRunning> running = {{"low", 0, 1, "", {{"w1", 0, 1}}}};
  auto r = Schedule({{"high", 3, 10, 2}}, {{"w1", 2, 0}, {"w2", 1, 0}}, running);
  EXPECT_TRUE(r.preempt.empty());
}

}  // namespace
}  // namespace nightshift

namespace nightshift {
namespace {

TEST(SchedulerTest, AWorkerOfAnAllocationServesItsJobAloneAheadOfEveryPolicy) {
  SchedWorker own1{"a-n1", 2, 2}, own2{"a-n2", 2, 2}, other{"b-n1", 8, 8};
  own1.reserved_for = own2.reserved_for = "a";
  other.reserved_for = "b";
  // A higher-priority job cannot take them, nor count them; "a" is placed on its own.
  auto r = Schedule({{"a", 3, 0, 2}, {"urgent", 1, 100, 1}}, {own1, own2, other, {"shared", 1, 0}});
  ASSERT_TRUE(r.placed.count("a"));
  EXPECT_EQ(RanksPlaced(r.placed.at("a")), 3);
  for (const auto& p : r.placed.at("a")) EXPECT_TRUE(p.worker == "a-n1" || p.worker == "a-n2") << p.worker;
  EXPECT_FALSE(r.placed.count("urgent"));
  EXPECT_TRUE(r.preempt.empty());
  // Allocated only: free shared slots do not place it; the reason says what it waits for.
  SchedJob c{"c", 1, 0, 3};
  c.allocated_only = true;
  c.allocation_wait = "waiting for slurm job 7 (PENDING: Priority)";
  r = Schedule({c}, {{"shared", 4, 4}});
  EXPECT_FALSE(r.placed.count("c"));
  EXPECT_EQ(r.waiting.at("c"), "waiting for slurm job 7 (PENDING: Priority)");
}

}  // namespace
}  // namespace nightshift
