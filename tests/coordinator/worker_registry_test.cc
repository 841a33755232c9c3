// The worker registry alone: leases, lateness, our own outage, cordons, evictions and
// what heartbeats record, on a FakeClock.
#include "coordinator/worker_registry.h"

#include <gtest/gtest.h>

#include "tests/coordinator/parts.h"

namespace nightshift {
namespace {

using namespace std::chrono_literals;

class WorkerRegistryTest : public PartsTest {
 protected:
  v1::WorkerState StateOf(const std::string& name) { return workers_->Find(name)->info.state(); }
  void Expire() { workers_->ExpireLeases(clock_.Now()); }
  // Workers w1 and w2, registered now, under a grace of 60 s for our own outages.
  void TwoWorkersAndAGraceOfAMinute() {
    options_.outage_grace_seconds = 60;
    Build();
    Register("w1");
    Register("w2");
  }
};

TEST_F(WorkerRegistryTest, AWorkerSilentForALeaseIsLostAndAHeartbeatRenewsIt) {
  Register("w1");
  clock_.Advance(6s);
  Beat("w1");
  clock_.Advance(10s);  // exactly a lease since the heartbeat: not yet
  Expire();
  EXPECT_EQ(StateOf("w1"), v1::WORKER_READY);
  clock_.Advance(1ms);
  Expire();
  EXPECT_EQ(StateOf("w1"), v1::WORKER_LOST);
  EXPECT_TRUE(workers_->Gone("w1", clock_.Now()));
  // A lost worker's heartbeats are refused until it registers again.
  HeartbeatReply reply;
  EXPECT_EQ(workers_->Heartbeat("w1", clock_.Now(), {}, nullptr, {}, &reply).code(), Status::kNotFound);
  EXPECT_EQ(workers_->Heartbeat("w9", clock_.Now(), {}, nullptr, {}, &reply).code(), Status::kNotFound);
  Register("w1");
  EXPECT_EQ(StateOf("w1"), v1::WORKER_READY);
  EXPECT_FALSE(workers_->Gone("w1", clock_.Now()));
}

TEST_F(WorkerRegistryTest, AnUnknownWorkerIsGoneOnlyOneLeaseAfterWeBeganServing) {
  // After our own restart a worker we do not know yet may still be coming back: its lease
  // counts from the first tick (or registration), not from the registry's making.
  clock_.Advance(30s);  // the store loading
  EXPECT_FALSE(workers_->Gone("w1", clock_.Now()));
  Expire();  // the first tick
  clock_.Advance(10s);
  EXPECT_FALSE(workers_->Gone("w1", clock_.Now()));
  clock_.Advance(1ms);
  EXPECT_TRUE(workers_->Gone("w1", clock_.Now()));
}

// Late: silent for three of its usual gaps, at least two heartbeat intervals (0.5 s here),
// at most half a lease (5 s).
TEST_F(WorkerRegistryTest, LatenessFollowsTheWorkersUsualGapWithinItsBounds) {
  Register("fast");
  Register("usual");
  Register("slow");
  for (int i = 0; i < 20; ++i) {
    clock_.Advance(100ms);
    Beat("fast");
    if (i % 10 == 9) Beat("usual");  // every second
  }
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(4s);
    Beat("slow");
  }
  const auto late = [&](const std::string& name, std::chrono::milliseconds silent) {
    return workers_->Late(*workers_->Find(name), workers_->Find(name)->last_seen + silent);
  };
  EXPECT_FALSE(late("fast", 500ms));  // 3 gaps are 0.3 s: two intervals count
  EXPECT_TRUE(late("fast", 501ms));
  EXPECT_FALSE(late("usual", 3000ms));
  EXPECT_TRUE(late("usual", 3001ms));
  EXPECT_FALSE(late("slow", 5000ms));  // 3 gaps are 12 s: half a lease caps it
  EXPECT_TRUE(late("slow", 5001ms));
}

// With two or more workers, a silence of all of them for half a lease is ours: nobody is
// lost until the grace ends; when one is back, every one gets a full lease again.
TEST_F(WorkerRegistryTest, WhenNoWorkerReachesUsNoneIsLostUntilTheGraceEnds) {
  TwoWorkersAndAGraceOfAMinute();
  clock_.Advance(30s);
  EXPECT_FALSE(workers_->ExpireLeases(clock_.Now()));
  EXPECT_TRUE(workers_->in_outage());
  EXPECT_EQ(StateOf("w1"), v1::WORKER_READY);
  EXPECT_EQ(StateOf("w2"), v1::WORKER_READY);
  Beat("w1");
  EXPECT_TRUE(workers_->ExpireLeases(clock_.Now()));  // the outage is over
  EXPECT_FALSE(workers_->in_outage());
  clock_.Advance(10s);
  Beat("w1");
  Expire();
  EXPECT_EQ(StateOf("w2"), v1::WORKER_READY);  // a full lease from the outage's end
  clock_.Advance(1ms);
  Expire();
  EXPECT_EQ(StateOf("w2"), v1::WORKER_LOST);
}

TEST_F(WorkerRegistryTest, AfterTheOutageGraceEveryoneSilentIsLost) {
  TwoWorkersAndAGraceOfAMinute();
  clock_.Advance(60s);
  Expire();
  EXPECT_TRUE(workers_->in_outage());
  clock_.Advance(1ms);
  Expire();
  EXPECT_FALSE(workers_->in_outage());
  EXPECT_EQ(StateOf("w1"), v1::WORKER_LOST);
  EXPECT_EQ(StateOf("w2"), v1::WORKER_LOST);
}

TEST_F(WorkerRegistryTest, OneSilentWorkerIsNeverAnOutage) {
  Register("w1");
  clock_.Advance(11s);
  Expire();
  EXPECT_FALSE(workers_->in_outage());
  EXPECT_EQ(StateOf("w1"), v1::WORKER_LOST);
}

TEST_F(WorkerRegistryTest, CordonDrainAndUncordonAndTheyOutliveARegistration) {
  Register("w1");
  EXPECT_EQ(workers_->Cordon("w9", false).status().code(), Status::kNotFound);
  EXPECT_EQ(workers_->MarkDraining("w9").status().code(), Status::kNotFound);
  auto cordoned = workers_->Cordon("w1", /*uncordon=*/false);
  ASSERT_TRUE(cordoned.ok());
  EXPECT_TRUE(cordoned->cordoned());
  EXPECT_FALSE(cordoned->draining());
  auto draining = workers_->MarkDraining("w1");
  ASSERT_TRUE(draining.ok());
  EXPECT_TRUE(draining->cordoned());
  EXPECT_TRUE(draining->draining());
  Register("w1");  // the worker restarted: the operator's cordon stays
  EXPECT_TRUE(workers_->Find("w1")->info.cordoned());
  auto uncordoned = workers_->Cordon("w1", /*uncordon=*/true);
  ASSERT_TRUE(uncordoned.ok());
  EXPECT_FALSE(uncordoned->cordoned());
  EXPECT_FALSE(uncordoned->draining());
}

TEST_F(WorkerRegistryTest, QueuedEvictionsAreHandedToTheNextHeartbeatOnce) {
  Register("w1");
  Register("w2");
  EXPECT_EQ(workers_->QueueEviction("w9", "k", false).status().code(), Status::kNotFound);
  EXPECT_EQ(workers_->QueueEviction("", "k1", false).value(), 2);
  EXPECT_EQ(workers_->QueueEviction("w1", "", /*all=*/true).value(), 1);
  HeartbeatReply first = Beat("w1");
  EXPECT_EQ(first.evict_cache_keys, std::vector<std::string>{"k1"});
  EXPECT_TRUE(first.evict_cache_all);
  HeartbeatReply second = Beat("w1");
  EXPECT_TRUE(second.evict_cache_keys.empty());
  EXPECT_FALSE(second.evict_cache_all);
  HeartbeatReply other = Beat("w2");
  EXPECT_EQ(other.evict_cache_keys, std::vector<std::string>{"k1"});
  EXPECT_FALSE(other.evict_cache_all);
}

// Each heartbeat replaces the tasks and the held checkpoints; the cache report only when
// it carries one.
TEST_F(WorkerRegistryTest, AHeartbeatRecordsTasksCheckpointsAndTheCacheItCarries) {
  Register("w1");
  v1::CacheReport cache;
  cache.add_entries()->set_key("k1");
  HeartbeatReply reply;
  ASSERT_TRUE(workers_->Heartbeat("w1", clock_.Now(), {Task("j-1", 0, v1::TASK_RUNNING)}, &cache,
                                  {}, &reply).ok());
  Beat("w1", {{"j-1", 40}});
  const WorkerEntry& w = *workers_->Find("w1");
  EXPECT_EQ(w.info.tasks_size(), 0);
  EXPECT_EQ(w.held, (std::map<std::string, int64_t>{{"j-1", 40}}));
  ASSERT_EQ(w.cache.entries_size(), 1);
  auto caches = workers_->ListCache("w1");
  ASSERT_EQ(caches.size(), 1u);
  EXPECT_EQ(caches[0].report().entries(0).key(), "k1");
  EXPECT_EQ(workers_->ListCache("").size(), 1u);
  EXPECT_TRUE(workers_->ListCache("w9").empty());
  EXPECT_EQ(w.info.last_heartbeat().seconds(), 1767225600);  // the FakeClock's time of day
}

TEST_F(WorkerRegistryTest, ARegistrationNeedsANameAndSlotsInRange) {
  v1::WorkerInfo w;
  EXPECT_EQ(WorkerRegistry::CheckRegistration(w).code(), Status::kInvalidArgument);
  w.set_name("w1");
  w.set_slots(1025);
  EXPECT_EQ(WorkerRegistry::CheckRegistration(w).code(), Status::kInvalidArgument);
  w.set_slots(-1);
  EXPECT_EQ(WorkerRegistry::CheckRegistration(w).code(), Status::kInvalidArgument);
  w.set_slots(1024);
  EXPECT_TRUE(WorkerRegistry::CheckRegistration(w).ok());
}

// Identities: a live worker's name cannot be taken over from another host (its jobs'
// logs, models and checkpoints would be fetched from there) until its lease ends or an
// admin removes it; a worker token's log address must be on the host it calls from.
TEST_F(WorkerRegistryTest, ALiveWorkerCannotBeReRegisteredFromAnotherHost) {
  v1::WorkerInfo w;
  w.set_name("w1");
  w.set_slots(1);
  w.set_log_address("10.0.0.1:7000");
  const RegistrationSource home{"10.0.0.1", /*admin=*/false};
  ASSERT_TRUE(workers_->Register(w, home, "k1").ok());
  // The attacker, with w1's token, from 10.0.0.66, its own log address.
  v1::WorkerInfo impostor = w;
  impostor.set_log_address("10.0.0.66:7000");
  const RegistrationSource elsewhere{"10.0.0.66", /*admin=*/false};
  Status s = workers_->Register(impostor, elsewhere, "k2");
  EXPECT_EQ(s.code(), Status::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("nightshift worker remove w1"), std::string::npos) << s.ToString();
  EXPECT_EQ(workers_->Find("w1")->info.log_address(), "10.0.0.1:7000");
  EXPECT_EQ(workers_->Find("w1")->file_key, "k1");
  // From its own host (a restart), it may.
  ASSERT_TRUE(workers_->Register(w, home, "k3").ok());
  EXPECT_EQ(workers_->Find("w1")->file_key, "k3");
  // A log address on another host than the caller's is refused for a worker token...
  s = workers_->Register(impostor, home, "k4");
  EXPECT_EQ(s.code(), Status::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("log_address"), std::string::npos) << s.ToString();
  // ...and an admin may set it.
  EXPECT_TRUE(workers_->Register(impostor, RegistrationSource{"10.0.0.1", /*admin=*/true}, "k5").ok());
  ASSERT_TRUE(workers_->Register(w, home, "k6").ok());
  // After its lease ends, the name may register from elsewhere.
  clock_.Advance(11s);
  Expire();
  ASSERT_EQ(StateOf("w1"), v1::WORKER_LOST);
  EXPECT_TRUE(workers_->Register(impostor, elsewhere, "k7").ok());
  // An admin's removal ends a live registration at once.
  EXPECT_TRUE(workers_->Remove("w1").ok());
  EXPECT_EQ(workers_->Find("w1"), nullptr);
  EXPECT_EQ(workers_->Remove("w1").code(), Status::kNotFound);
  EXPECT_TRUE(workers_->Register(w, home, "k8").ok());
}

TEST_F(WorkerRegistryTest, AWorkerLostForTheForgetTimeIsForgotten) {
  options_.forget_workers_after_seconds = 3600;
  Build();
  Register("w1");
  Register("w2");
  clock_.Advance(11s);
  Beat("w2");
  Expire();
  ASSERT_EQ(StateOf("w1"), v1::WORKER_LOST);
  clock_.Advance(3589s);  // 3600 s since its last heartbeat: not yet
  Beat("w2");
  Expire();
  EXPECT_NE(workers_->Find("w1"), nullptr);
  clock_.Advance(1s);
  Beat("w2");
  Expire();
  EXPECT_EQ(workers_->Find("w1"), nullptr);
  EXPECT_NE(workers_->Find("w2"), nullptr);
  EXPECT_TRUE(workers_->Gone("w1", clock_.Now()));
}

}  // namespace
}  // namespace nightshift
