// The placer alone: the scheduler's snapshot (late, cordoned and lost workers; backoff;
// holders of the newest checkpoint, among the claims the job's records vouch for), its
// result applied, and the checkpoint copies planned for a job whose ranks all sit on one
// worker.
#include "coordinator/placer.h"

#include "common/file_access.h"

#include <gtest/gtest.h>

#include "tests/coordinator/parts.h"

namespace nightshift {
namespace {

using namespace std::chrono_literals;

class PlacerTest : public PartsTest {
 protected:
  // w1 runs a one-rank job, has reported writing its checkpoint at `step` and holds it;
  // its id.
  std::string RunningOnW1WithCheckpoint(int64_t step, const v1::JobSpec& spec = Spec()) {
    Register("w1");
    JobEntry* entry = Submit(spec);
    RunOn(entry, {"w1"});
    ReportCheckpoint(entry, "w1", step);
    Beat("w1", {{entry->job.id(), step}});
    return entry->job.id();
  }
  std::vector<v1::CheckpointCopy> CopiesFor(const std::string& target) {
    HeartbeatReply reply;
    placer_->AddCheckpointCopies(target, clock_.Now(), &reply);
    return reply.copy_checkpoints;
  }
};

TEST_F(PlacerTest, TheNewestHoldersAreTheReadyWorkersWithTheHighestVouchedStep) {
  Register("w1");
  Register("w2");
  Register("w3");
  Register("w4");
  JobEntry* entry = Submit();
  const std::string id = entry->job.id();
  EXPECT_TRUE(placer_->NewestHolders(id).empty());
  for (const auto& [worker, step] : std::map<std::string, int64_t>{{"w1", 20}, {"w2", 40}, {"w3", 40}})
    RecordHolder(&entry->job, worker, step, Digest(step));
  Beat("w1", {{id, 20}});
  Beat("w2", {{id, 40}});
  Beat("w3", {{id, 40}});
  Beat("w4", {{id, 90}});  // no record says so
  EXPECT_EQ(placer_->NewestHolders(id), (std::vector<std::string>{"w2", "w3"}));
  clock_.Advance(10s);
  Beat("w1", {{id, 20}});
  Beat("w2", {{id, 40}});
  Beat("w4", {{id, 90}});
  clock_.Advance(1ms);
  workers_->ExpireLeases(clock_.Now());  // w3 lost
  EXPECT_EQ(placer_->NewestHolders(id), std::vector<std::string>{"w2"});
  EXPECT_EQ(observer_.claims_ignored, 1);  // w4's claim, counted once
}

// Issue 40: a worker (any worker token) claiming a huge step of another owner's queued
// job does not attract it: the job goes to the worker that holds what the job committed,
// and the claim is logged and counted once, not at every heartbeat. A claim of the
// recorded step with another manifest (a tampered checkpoint) does not count either.
TEST_F(PlacerTest, AClaimNoRecordVouchesForAttractsNoJobAndIsCounted) {
  Register("a-attacker", 4);
  Register("w1", 4);
  JobEntry* entry = Submit(Spec(), "alice");
  const std::string id = entry->job.id();
  RecordHolder(&entry->job, "w1", 10, Digest(10));
  Beat("w1", {{id, 10}});
  Beat("a-attacker", {{id, 1000000000}});
  EXPECT_EQ(placer_->NewestHolders(id), std::vector<std::string>{"w1"});
  EXPECT_EQ(observer_.claims_ignored, 1);
  Beat("a-attacker", {{id, 1000000000}});
  EXPECT_EQ(observer_.claims_ignored, 1);
  std::vector<v1::HeldCheckpoint> tampered(1);
  tampered[0].set_job_id(id);
  tampered[0].set_step(10);
  tampered[0].set_manifest_sha256("another manifest");
  HeartbeatReply reply;
  ASSERT_TRUE(workers_->Heartbeat("a-attacker", clock_.Now(), {}, nullptr, tampered, &reply).ok());
  EXPECT_EQ(placer_->JudgeClaims("a-attacker"), 1);
  EXPECT_EQ(placer_->NewestHolders(id), std::vector<std::string>{"w1"});
  placer_->SchedulingPass(clock_.Now(), ScheduleOptions{});
  ASSERT_EQ(entry->job.placements_size(), 1);
  EXPECT_EQ(entry->job.placements(0).worker(), "w1");
}

// A worker that wrote the job's checkpoints and died before reporting its last saves
// (the trainer pruned the reported ones) still resumes the job from them: its claim of a
// step newer than every record is recorded. A worker that only holds a copy, or never
// held any of the job's checkpoints, gains nothing by such a claim.
TEST_F(PlacerTest, TheWritersClaimOfANewerStepIsRecordedAndNoOneElses) {
  Register("w1");
  Register("w2");
  Register("w3");
  JobEntry* entry = Submit();
  const std::string id = entry->job.id();
  RecordHolder(&entry->job, "w1", 20, Digest(20));
  RecordHolder(&entry->job, "w2", 20, Digest(20), /*copied=*/true);
  Beat("w2", {{id, 60}});
  Beat("w3", {{id, 70}});
  EXPECT_EQ(observer_.claims_ignored, 2);
  Beat("w1", {{id, 40}});
  EXPECT_TRUE(Vouched(entry->job, "w1", 40, Digest(40)));
  EXPECT_EQ(placer_->NewestHolders(id), std::vector<std::string>{"w1"});
  EXPECT_EQ(NewestRecordedStep(entry->job), 40);
  EXPECT_EQ(observer_.claims_ignored, 2);
}

// A job's first checkpoint, committed on the worker running it, which restarted before its
// trainer reported the step: the worker's claim records it (the next attempt resumes from
// it, not from step 0). Another worker's claim does not.
TEST_F(PlacerTest, TheRunningWorkersClaimOfTheFirstCheckpointIsRecorded) {
  Register("w1");
  Register("w2");
  JobEntry* entry = Submit();
  const std::string id = entry->job.id();
  RunOn(entry, {"w1"});
  Beat("w2", {{id, 60}});
  EXPECT_EQ(NewestRecordedStep(entry->job), 0);
  Beat("w1", {{id, 50}});
  EXPECT_TRUE(Vouched(entry->job, "w1", 50, Digest(50)));
  EXPECT_EQ(NewestRecordedStep(entry->job), 50);
  EXPECT_EQ(observer_.claims_ignored, 1);  // w2's
}

// A restart placed where no worker of the attempt holds the newest recorded step is told
// every recorded digest and where to fetch that step from (a ready, vouched holder);
// placed on the holder itself, it fetches nothing.
TEST_F(PlacerTest, AnAssignmentWithoutTheNewestCheckpointIsToldWhereToFetchIt) {
  Register("w1");
  Register("w2");
  JobEntry* entry = Submit();
  const std::string id = entry->job.id();
  RecordHolder(&entry->job, "w1", 20, Digest(20));
  RecordHolder(&entry->job, "w1", 30, Digest(30));
  Beat("w1", {{id, 30}});
  PlaceOn(entry, {"w2"});
  v1::Assignment a;
  a.mutable_task()->set_job_id(id);
  a.set_first_rank(0);
  placer_->AddResumeSources(&a);
  ASSERT_EQ(a.verified_checkpoints_size(), 2);
  EXPECT_EQ(a.verified_checkpoints(1).step(), 30);
  EXPECT_EQ(a.verified_checkpoints(1).manifest_sha256(), Digest(30));
  ASSERT_TRUE(a.has_fetch_checkpoint());
  EXPECT_EQ(a.fetch_checkpoint().step(), 30);
  EXPECT_EQ(a.fetch_checkpoint().source_worker(), "w1");
  EXPECT_EQ(a.fetch_checkpoint().source_address(), "w1:7000");
  EXPECT_EQ(a.fetch_checkpoint().manifest_sha256(), Digest(30));
  EXPECT_EQ(a.fetch_checkpoint().capability(), ReadCheckpointCapability("key-w1", id));
  v1::Assignment on_holder;
  on_holder.mutable_task()->set_job_id(id);
  entry->job.mutable_placements(0)->set_worker("w1");
  placer_->AddResumeSources(&on_holder);
  EXPECT_EQ(on_holder.verified_checkpoints_size(), 2);
  EXPECT_FALSE(on_holder.has_fetch_checkpoint());
}

// The copy goes to one other worker where the job could resume: the one holding the
// newest copy already, else the first by name; it is asked again until it has the step.
TEST_F(PlacerTest, ACheckpointIsCopiedToOneOtherWorkerUntilItHoldsTheStep) {
  const std::string id = RunningOnW1WithCheckpoint(50);
  Register("w2");
  Register("w3");
  EXPECT_TRUE(CopiesFor("w1").empty());  // the source itself
  const std::vector<v1::CheckpointCopy> copies = CopiesFor("w2");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].job_id(), id);
  EXPECT_EQ(copies[0].step(), 50);
  EXPECT_EQ(copies[0].source_worker(), "w1");
  EXPECT_EQ(copies[0].source_address(), "w1:7000");
  EXPECT_TRUE(CopiesFor("w3").empty());
  Beat("w3", {{id, 30}});  // an older step no record vouches for: nothing changes
  EXPECT_EQ(CopiesFor("w2").size(), 1u);
  RecordHolder(&jobs_->Find(id)->job, "w3", 30, Digest(30), /*copied=*/true);  // an earlier copy it made
  Beat("w3", {{id, 30}});  // w3 has an older copy: it keeps the job's copies from now on
  EXPECT_TRUE(CopiesFor("w2").empty());
  ASSERT_EQ(CopiesFor("w3").size(), 1u);
  Beat("w3", {{id, 50}});  // the copy ordered, verified there: now a holder
  EXPECT_TRUE(Vouched(jobs_->Find(id)->job, "w3", 50, Digest(50)));
  EXPECT_TRUE(CopiesFor("w3").empty());  // it holds the step
}

TEST_F(PlacerTest, NoCopyGoesWhereTheJobCouldNotResume) {
  v1::JobSpec cuda = Spec();
  cuda.mutable_resources()->set_device("cuda");
  const std::string id = RunningOnW1WithCheckpoint(50, cuda);
  Register("a-cordoned");
  ASSERT_TRUE(workers_->Cordon("a-cordoned", false).ok());
  Register("b-cpu-only");
  Register("c-late", 1, /*gpus=*/1);
  Register("d-gpu", 1, /*gpus=*/1);
  EXPECT_TRUE(CopiesFor("a-cordoned").empty());
  EXPECT_TRUE(CopiesFor("b-cpu-only").empty());
  EXPECT_EQ(CopiesFor("c-late").size(), 1u);
  clock_.Advance(1s);  // c-late is silent for two heartbeat intervals and more
  Beat("w1", {{id, 50}});
  Beat("b-cpu-only");
  Beat("d-gpu");
  EXPECT_TRUE(CopiesFor("c-late").empty());
  EXPECT_EQ(CopiesFor("d-gpu").size(), 1u);
}

// Under a cluster every worker is some attempt's allocation: a copy there would hand one
// job's checkpoint, and the key to read it, to another job's worker.
TEST_F(PlacerTest, UnderAClusterNoCopyGoesToAnotherAllocationsWorker) {
  RunningOnW1WithCheckpoint(50);
  Register("w2");
  ASSERT_EQ(CopiesFor("w2").size(), 1u);  // our own workers: w2 keeps a copy
  Placer allocated(jobs_.get(), workers_.get(), attempts_.get(), /*allocated_only=*/true);
  HeartbeatReply reply;
  allocated.AddCheckpointCopies("w2", clock_.Now(), &reply);
  EXPECT_TRUE(reply.copy_checkpoints.empty());
}

TEST_F(PlacerTest, AJobOnTwoWorkersHasNoCopyPlanned) {
  Register("w1");
  Register("w2");
  Register("w3");
  JobEntry* entry = Submit(Spec(2));
  RunOn(entry, {"w1", "w2"});
  Beat("w1", {{entry->job.id(), 50}});
  EXPECT_TRUE(CopiesFor("w3").empty());
}

// A late worker offers no free slots (and so no preemption), a cordoned one is left out,
// a job in its restart backoff is not pending, and holders of the newest checkpoint are
// named.
TEST_F(PlacerTest, TheSnapshotOffersOnlyWhatMayBeUsedNow) {
  Register("late", 2);
  Register("cordoned", 2);
  ASSERT_TRUE(workers_->Cordon("cordoned", false).ok());
  Register("w1", 4);
  JobEntry* running = Submit(Spec(1));
  RunOn(running, {"w1"});
  JobEntry* backoff = Submit(Spec(1));
  backoff->not_before = clock_.Now() + 1s;
  const std::string queued = Submit(Spec(2))->job.id();
  clock_.Advance(600ms);
  RecordHolder(&jobs_->Find(queued)->job, "w1", 10, Digest(10));
  Beat("w1", {{queued, 10}});
  Beat("cordoned");
  Placer::Snapshot s = placer_->SnapshotForScheduler(clock_.Now());
  ASSERT_EQ(s.pending.size(), 1u);
  EXPECT_EQ(s.pending[0].id, queued);
  EXPECT_EQ(s.pending[0].holders, std::vector<std::string>{"w1"});
  ASSERT_EQ(s.workers.size(), 2u);
  EXPECT_EQ(s.workers[0].name, "late");
  EXPECT_EQ(s.workers[0].free_slots, 0);
  EXPECT_EQ(s.workers[1].name, "w1");
  EXPECT_EQ(s.workers[1].free_slots, 3);
  EXPECT_TRUE(s.any_late);
  ASSERT_EQ(s.running.size(), 1u);
  EXPECT_EQ(s.running[0].id, running->job.id());
  clock_.Advance(400ms);
  EXPECT_EQ(placer_->SnapshotForScheduler(clock_.Now()).pending.size(), 2u);  // the backoff is over
}

// A running job's end is its reported eta counted from when the coordinator took the
// report, on the coordinator's clock: the worker's own stamp (progress.updated, here a
// day off) does not enter.
TEST_F(PlacerTest, ARunningJobEndsItsEtaAfterTheReportOnTheCoordinatorsClock) {
  Register("w1");
  JobEntry* running = Submit();
  RunOn(running, {"w1"});
  v1::TaskStatus report = Task(running->job.id(), running->job.attempt(), v1::TASK_RUNNING);
  report.mutable_progress()->set_step(10);
  report.mutable_progress()->set_eta_seconds(1000);
  report.mutable_progress()->mutable_updated()->set_seconds(
      std::chrono::duration_cast<std::chrono::seconds>(clock_.WallNow().time_since_epoch()).count() - 86400);
  HeartbeatReply reply;
  reports_->Handle("w1", report, &reply);
  clock_.Advance(900s);
  Placer::Snapshot s = placer_->SnapshotForScheduler(clock_.Now());
  ASSERT_EQ(s.running.size(), 1u);
  EXPECT_DOUBLE_EQ(s.running[0].ends_in_seconds, 100);
  clock_.Advance(200s);
  EXPECT_DOUBLE_EQ(placer_->SnapshotForScheduler(clock_.Now()).running[0].ends_in_seconds, 0);
}

TEST_F(PlacerTest, ASchedulingPassPlacesAndSaysWhyTheOthersWait) {
  Register("w1", 2);
  JobEntry* fits = Submit(Spec(2));
  JobEntry* too_big = Submit(Spec(3));
  placer_->SchedulingPass(clock_.Now(), ScheduleOptions{});
  EXPECT_EQ(fits->job.state(), v1::SCHEDULED);
  EXPECT_EQ(too_big->job.state(), v1::QUEUED);
  EXPECT_NE(too_big->job.reason(), "accepted");
  const uint64_t version = too_big->version;
  placer_->SchedulingPass(clock_.Now(), ScheduleOptions{});
  EXPECT_EQ(too_big->version, version);  // the same reason is not written again
}

// The memory a worker registered with, over its slots, is what one rank there may use
// (scheduler.h): a job whose resources.memory_gb is more waits naming it.
TEST_F(PlacerTest, AWorkersMemoryPerSlotBoundsTheRanksItTakes) {
  Register("w1", 2, 0, int64_t{16} << 30);
  v1::JobSpec fits = Spec(2), too_big = Spec(1);
  fits.mutable_resources()->set_memory_gb(8);
  too_big.mutable_resources()->set_memory_gb(8.5);
  JobEntry* a = Submit(too_big);
  JobEntry* b = Submit(fits);
  Placer::Snapshot s = placer_->SnapshotForScheduler(clock_.Now());
  ASSERT_EQ(s.workers.size(), 1u);
  EXPECT_DOUBLE_EQ(s.workers[0].memory_gb_per_slot, 8);
  EXPECT_DOUBLE_EQ(s.pending[0].memory_gb, 8.5);
  placer_->SchedulingPass(clock_.Now(), ScheduleOptions{});
  EXPECT_EQ(a->job.state(), v1::QUEUED);
  EXPECT_NE(a->job.reason().find("resources.memory_gb is 8.5 per rank"), std::string::npos) << a->job.reason();
  EXPECT_EQ(b->job.state(), v1::SCHEDULED) << b->job.reason();
}

TEST_F(PlacerTest, AHigherPriorityJobPreemptsAndIsPlacedOnceTheVictimStopped) {
  Register("w1", 1);
  JobEntry* low = Submit(Spec(1));
  RunOn(low, {"w1"});
  v1::JobSpec urgent = Spec(1);
  urgent.set_priority(5);
  JobEntry* high = Submit(urgent);
  placer_->SchedulingPass(clock_.Now(), ScheduleOptions{/*preemption=*/false});
  EXPECT_EQ(low->job.state(), v1::RUNNING);
  placer_->SchedulingPass(clock_.Now(), ScheduleOptions{});
  EXPECT_EQ(low->job.state(), v1::PREEMPTED);
  EXPECT_EQ(low->job.reason(), "preempted by " + high->job.id() + " (priority 5 > 0)");
  EXPECT_EQ(high->job.state(), v1::QUEUED);
}

// Another owner's job is not named to the victim: its id and priority are that owner's.
TEST_F(PlacerTest, AVictimIsNotToldWhichOfAnotherUsersJobsPreemptedIt) {
  Register("w1", 1);
  JobEntry* low = Submit(Spec(1), "bob");
  RunOn(low, {"w1"});
  v1::JobSpec urgent = Spec(1);
  urgent.set_priority(5);
  JobEntry* high = Submit(urgent, "alice");
  ScheduleOptions best_effort_below_1;  // bob's priority 0: preemptible by another owner's job
  best_effort_below_1.preemptible_below = 1;
  placer_->SchedulingPass(clock_.Now(), best_effort_below_1);
  EXPECT_EQ(low->job.state(), v1::PREEMPTED);
  EXPECT_EQ(low->job.reason(), "preempted by a job of another user");
  for (const auto& event : low->job.events()) EXPECT_EQ(event.reason().find(high->job.id()), std::string::npos);
}

// A GPU job preempts with no reservation in the pass (scheduler.h): the victim names it.
TEST_F(PlacerTest, AGpuJobPreemptsOnAGpuWorkerAndTheVictimNamesIt) {
  Register("gpu1", 1, /*gpus=*/1);
  Register("cpu1", 1);
  JobEntry* low = Submit(Spec(1));
  RunOn(low, {"gpu1"});
  v1::JobSpec urgent = Spec(1);
  urgent.set_priority(5);
  urgent.mutable_resources()->set_device("cuda");
  JobEntry* high = Submit(urgent);
  placer_->SchedulingPass(clock_.Now(), ScheduleOptions{});
  EXPECT_EQ(low->job.state(), v1::PREEMPTED);
  EXPECT_EQ(low->job.reason(), "preempted by " + high->job.id() + " (priority 5 > 0)");
  EXPECT_EQ(high->job.state(), v1::QUEUED);
}

}  // namespace
}  // namespace nightshift
