// What workers report, taken into the records: fencing by attempt, starting parts,
// stopping ones, rank 0's address and progress, and the step an attempt resumed from.
#include "coordinator/task_reports.h"

#include <gtest/gtest.h>

#include "tests/coordinator/parts.h"

namespace nightshift {
namespace {

class TaskReportsTest : public PartsTest {
 protected:
  HeartbeatReply Handle(const std::string& worker, const v1::TaskStatus& status) {
    HeartbeatReply reply;
    reports_->Handle(worker, status, &reply);
    return reply;
  }
};

// A live task that is not a part of a job's current attempt is stopped; nothing changes.
TEST_F(TaskReportsTest, AReportOfAnotherAttemptOrAnUnknownJobOnlyStopsItsTask) {
  Register("w1");
  JobEntry* entry = Submit();
  RunOn(entry, {"w1"});
  const uint64_t version = entry->version;
  EXPECT_EQ(Handle("w1", Task(entry->job.id(), 7, v1::TASK_RUNNING)).stop.size(), 1u);
  EXPECT_EQ(Handle("w1", Task("j-999999", 0, v1::TASK_PREPARING)).stop.size(), 1u);
  EXPECT_TRUE(Handle("w1", Task(entry->job.id(), 7, v1::TASK_FAILED)).stop.empty());  // gone already
  EXPECT_EQ(entry->version, version);
  EXPECT_EQ(entry->job.state(), v1::RUNNING);
  // A worker the job is not placed on.
  EXPECT_EQ(Handle("w2", Task(entry->job.id(), 0, v1::TASK_RUNNING)).stop.size(), 1u);
}

// Rank 0 starts first; the other ranks once it has reported the rendezvous address. A
// part the heartbeat no longer lists, after it ran, fails the attempt.
TEST_F(TaskReportsTest, ReconcileStartsRankZeroFirstAndFailsAPartThatVanished) {
  Register("w1");
  Register("w2");
  JobEntry* entry = Submit(Spec(2));
  PlaceOn(entry, {"w1", "w2"});
  HeartbeatReply other;
  reports_->Reconcile("w2", /*reported=*/false, entry, &other);
  EXPECT_TRUE(other.start.empty());  // no rendezvous address yet
  HeartbeatReply first;
  reports_->Reconcile("w1", false, entry, &first);
  ASSERT_EQ(first.start.size(), 1u);
  EXPECT_EQ(first.start[0].first_rank(), 0);
  EXPECT_EQ(first.start[0].world_size(), 2);
  v1::TaskStatus running = Task(entry->job.id(), 0, v1::TASK_RUNNING);
  running.set_master_addr("w1:29500");
  Handle("w1", running);
  EXPECT_EQ(entry->job.master_addr(), "w1:29500");
  reports_->Reconcile("w2", false, entry, &other);
  ASSERT_EQ(other.start.size(), 1u);
  EXPECT_EQ(other.start[0].master_addr(), "w1:29500");
  HeartbeatReply listed;
  reports_->Reconcile("w1", /*reported=*/true, entry, &listed);
  EXPECT_TRUE(listed.start.empty());
  reports_->Reconcile("w1", false, entry, &listed);  // w1 restarted: its rank is gone
  EXPECT_EQ(entry->job.state(), v1::QUEUED);
  EXPECT_EQ(entry->job.error(), "worker w1 no longer runs rank 0 (it restarted)");
  EXPECT_EQ(observer_.restarts, std::vector<std::string>{"worker_restarted"});
}

// A stopping job: live ranks are told to stop (a STUCK one's stacks dumped first); a
// rank that ended is gone, and the checkpoint it wrote on SIGTERM is kept.
TEST_F(TaskReportsTest, AStoppingJobsRanksAreStoppedAndItsLastCheckpointKept) {
  Register("w1");
  JobEntry* entry = Submit();
  RunOn(entry, {"w1"});
  attempts_->BeginStopping(entry, v1::STUCK, "stuck");
  HeartbeatReply alive = Handle("w1", Task(entry->job.id(), 0, v1::TASK_RUNNING));
  EXPECT_EQ(alive.stop.size(), 1u);
  EXPECT_EQ(alive.dump_stacks.size(), 1u);
  v1::TaskStatus ended = Task(entry->job.id(), 0, v1::TASK_FAILED);
  ended.set_checkpoint_step(120);
  ended.set_checkpoint_path("/ckpt/step-120");
  EXPECT_TRUE(Handle("w1", ended).stop.empty());
  EXPECT_EQ(entry->job.checkpoint_step(), 120);
  EXPECT_EQ(entry->job.state(), v1::QUEUED);  // restarted from it
  EXPECT_EQ(entry->job.restarts(), 1);
}

// A stopping job (held, say, by a sweep that paused it) whose ranks all exited 0 trained
// its last step before the stop took effect: it SUCCEEDED with rank 0's results (metrics,
// model, progress), neither requeued (its finished work discarded) nor held, whether a
// part succeeded before the stop or after it, and across a coordinator restart between
// two parts' reports. One part's stopped rank (exit 143, a TASK_FAILED) requeues it.
TEST_F(TaskReportsTest, AStoppingJobWhoseRanksAllFinishedSucceedsInsteadOfBeingRequeued) {
  enum Case { kBothAfterTheStop, kOneStopped, kFirstBeforeTheStop };
  for (const Case c : {kBothAfterTheStop, kOneStopped, kFirstBeforeTheStop}) {
    SCOPED_TRACE(c);
    Register("w1");
    Register("w2");
    JobEntry* entry = Submit(Spec(2));
    const std::string id = entry->job.id();
    RunOn(entry, {"w1", "w2"});
    v1::TaskStatus done = Task(id, 0, v1::TASK_SUCCEEDED);
    (*done.mutable_metrics())["val_loss"] = 0.25;
    done.set_model_path("/ckpt/" + id + "/model");
    done.set_model_step(400);
    done.mutable_progress()->set_step(400);
    if (c == kFirstBeforeTheStop) Handle("w1", done);
    entry->job.set_held_by("sweep s-1: paused at rung 0");
    attempts_->BeginStopping(entry, v1::PREEMPTED, "sweep s-1: paused at rung 0");
    if (c != kFirstBeforeTheStop) {
      EXPECT_TRUE(Handle("w1", done).stop.empty());
      EXPECT_EQ(entry->job.state(), v1::PREEMPTED);  // rank 1 not gone yet
      // The coordinator restarts before rank 1's report: rank 0's success was written.
      Build();
      ASSERT_TRUE(jobs_->Load().ok());
      Register("w1");
      Register("w2");
      entry = jobs_->Find(id);
      ASSERT_NE(entry, nullptr);
    }
    Handle("w2", Task(id, 0, c == kOneStopped ? v1::TASK_FAILED : v1::TASK_SUCCEEDED));
    if (c != kOneStopped) {
      EXPECT_EQ(entry->job.state(), v1::SUCCEEDED);
      EXPECT_EQ(entry->job.reason(), "all ranks finished before the stop took effect (sweep s-1: paused at rung 0)");
      EXPECT_EQ(entry->job.metrics().at("val_loss"), 0.25);
      EXPECT_EQ(entry->job.model().path(), "/ckpt/" + id + "/model");
      EXPECT_EQ(entry->job.model().step(), 400);
      EXPECT_EQ(entry->job.progress().step(), 400);
      EXPECT_TRUE(entry->job.held_by().empty());
      EXPECT_EQ(entry->job.attempt(), 0);
    } else {
      EXPECT_EQ(entry->job.state(), v1::QUEUED);
      EXPECT_EQ(entry->job.attempt(), 1);
      EXPECT_EQ(entry->job.held_by(), "sweep s-1: paused at rung 0");
      EXPECT_EQ(entry->job.restarts(), 0);  // a preemption, not a failure
    }
    // The record on disk says the same.
    Build();
    ASSERT_TRUE(jobs_->Load().ok());
    entry = jobs_->Find(id);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->job.state(), c == kOneStopped ? v1::QUEUED : v1::SUCCEEDED);
  }
}

TEST_F(TaskReportsTest, RankZerosReportIsTheJobsProgressCacheUseAndModel) {
  Register("w1");
  JobEntry* entry = Submit();
  RunOn(entry, {"w1"});
  clock_.Advance(std::chrono::seconds(5));
  v1::TaskStatus status = Task(entry->job.id(), 0, v1::TASK_RUNNING);
  status.mutable_progress()->set_step(30);
  status.set_cache_key("k1");
  status.set_cache_hit(true);
  status.set_checkpoint_step(20);
  const uint64_t version = entry->version;
  Handle("w1", status);
  EXPECT_EQ(entry->version, version + 1);  // written once, unsynced
  EXPECT_EQ(entry->job.progress().step(), 30);
  EXPECT_EQ(entry->job.data_cache().key(), "k1");
  EXPECT_EQ(entry->job.data_cache().worker(), "w1");
  EXPECT_EQ(entry->job.checkpoint_step(), 20);
  EXPECT_EQ(entry->last_advance, clock_.Now());
  EXPECT_EQ(entry->history.attempts_size(), 1);
  status.mutable_progress()->set_step(25);  // older than what was taken: not taken
  Handle("w1", status);
  EXPECT_EQ(entry->job.progress().step(), 30);

  v1::TaskStatus done = Task(entry->job.id(), 0, v1::TASK_SUCCEEDED);
  done.set_model_path("/models/j-000001");
  done.set_model_step(40);
  Handle("w1", done);
  EXPECT_EQ(entry->job.state(), v1::SUCCEEDED);
  EXPECT_EQ(entry->job.model().worker(), "w1");
  EXPECT_EQ(entry->job.model().step(), 40);
}

// The step an attempt resumed from is told once per attempt, and becomes the job's
// checkpoint when it differs from the newest reported.
TEST_F(TaskReportsTest, TheStepAnAttemptResumedFromIsRecordedOnce) {
  Register("w1");
  JobEntry* entry = Submit();
  RunOn(entry, {"w1"});
  v1::TaskStatus old = Task(entry->job.id(), 0, v1::TASK_RUNNING);
  old.set_checkpoint_step(50);
  old.mutable_progress()->set_step(55);
  Handle("w1", old);
  attempts_->FailAttempt(entry, "killed", /*user_error=*/false);
  RunOn(entry, {"w1"});
  v1::TaskStatus resumed = Task(entry->job.id(), 1, v1::TASK_RUNNING);
  resumed.set_resumed_step(40);  // step 50 was unreadable
  resumed.mutable_progress()->set_step(41);
  Handle("w1", resumed);
  EXPECT_EQ(entry->job.checkpoint_step(), 40);
  EXPECT_TRUE(entry->job.checkpoint_path().empty());
  EXPECT_EQ(entry->job.progress().step(), 41);  // the new attempt's replay, below step 55
  int told = 0;
  for (const auto& ev : entry->job.events())
    told += ev.reason() == "attempt 1 resumed from step 40; the newest checkpoint reported was step 50";
  Handle("w1", resumed);
  int again = 0;
  for (const auto& ev : entry->job.events()) again += ev.reason().rfind("attempt 1 ", 0) == 0;
  EXPECT_EQ(told, 1);
  EXPECT_EQ(again, 1);
}

// The first report of an attempt may come late, once the attempt has checkpointed after
// resuming (a busy worker, a slow link): its own newer checkpoint is no reason to call the
// resumed step stale, nor to take the job's checkpoint back to it. (Seen on Slurm: a
// restart resumed from step 90 recorded "the newest checkpoint reported was step 120" and
// set the job's checkpoint back to 90.)
TEST_F(TaskReportsTest, ALateFirstReportWithNewerCheckpointsKeepsThemAndTellsNoMismatch) {
  Register("w1");
  JobEntry* entry = Submit();
  RunOn(entry, {"w1"});
  v1::TaskStatus old = Task(entry->job.id(), 0, v1::TASK_RUNNING);
  old.set_checkpoint_step(90);
  old.mutable_progress()->set_step(95);
  Handle("w1", old);
  attempts_->FailAttempt(entry, "peer died", /*user_error=*/false);
  RunOn(entry, {"w1"});
  v1::TaskStatus late = Task(entry->job.id(), 1, v1::TASK_RUNNING);
  late.set_resumed_step(90);
  late.set_checkpoint_step(120);
  late.set_checkpoint_path("/ckpt/j-000001/step-00000120");
  late.mutable_progress()->set_step(125);
  Handle("w1", late);
  EXPECT_EQ(entry->job.checkpoint_step(), 120);
  EXPECT_EQ(entry->job.checkpoint_path(), "/ckpt/j-000001/step-00000120");
  int told = 0;
  for (const auto& ev : entry->job.events()) told += ev.reason() == "attempt 1 resumed from step 90";
  EXPECT_EQ(told, 1);
}

}  // namespace
}  // namespace nightshift
