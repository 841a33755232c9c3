// The attempt lifecycle alone: place, start, succeed, fail with backoff, stop and requeue,
// and Tick's checks (stop timeout, hangs, gone workers), on a FakeClock.
#include "coordinator/attempts.h"

#include <gtest/gtest.h>

#include "tests/coordinator/parts.h"

namespace nightshift {
namespace {

using namespace std::chrono_literals;

class AttemptsTest : public PartsTest {
 protected:
  // A RUNNING job on worker w1 (registered here).
  JobEntry* RunningOnW1(const v1::JobSpec& spec = Spec()) {
    Register("w1");
    JobEntry* entry = Submit(spec);
    RunOn(entry, {"w1"});
    return entry;
  }
};

TEST_F(AttemptsTest, PlacedStartedAndSucceededWhenAllPartsAre) {
  Register("w1");
  Register("w2");
  JobEntry* entry = Submit(Spec(2));
  clock_.Advance(30s);
  PlaceOn(entry, {"w1", "w2"});
  v1::Job& job = entry->job;
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_EQ(job.reason(), "placed on w1 (rank 0), w2 (rank 1)");
  EXPECT_EQ(observer_.waits, std::vector<double>{30});  // since it was queued
  EXPECT_FALSE(attempts_->PartStarted(entry, job.mutable_placements(0)));
  EXPECT_EQ(job.state(), v1::SCHEDULED);
  EXPECT_TRUE(attempts_->PartStarted(entry, job.mutable_placements(1)));
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_FALSE(attempts_->PartStarted(entry, job.mutable_placements(1)));  // told already

  v1::TaskStatus done = Task(job.id(), 0, v1::TASK_SUCCEEDED);
  (*done.mutable_metrics())["val_accuracy"] = 0.9;
  EXPECT_TRUE(attempts_->PartSucceeded(entry, job.mutable_placements(1), done));
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_TRUE(job.metrics().empty());  // rank 0's metrics are the job's
  EXPECT_TRUE(attempts_->PartSucceeded(entry, job.mutable_placements(0), done));
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.metrics().at("val_accuracy"), 0.9);
  EXPECT_FALSE(attempts_->PartSucceeded(entry, job.mutable_placements(0), done));
}

// The backoff starts at restart_backoff_seconds and doubles per restart, at most 60 s.
TEST_F(AttemptsTest, ARetryableFailureRequeuesTheNextAttemptAfterADoublingBackoff) {
  options_.restart_backoff_seconds = 20;
  Build();
  Register("w1");
  JobEntry* entry = Submit(Spec(1, /*max_restarts=*/5));
  for (const int backoff : {20, 40, 60, 60}) {
    RunOn(entry, {"w1"});
    entry->job.set_master_addr("w1:29500");
    attempts_->FailAttempt(entry, "rank 0 killed by signal 9", /*user_error=*/false);
    EXPECT_EQ(entry->job.state(), v1::QUEUED);
    EXPECT_EQ(entry->not_before, clock_.Now() + Seconds(backoff));
    EXPECT_EQ(entry->job.placements_size(), 0);
    EXPECT_TRUE(entry->job.master_addr().empty());  // the next attempt's rank 0 chooses again
    EXPECT_FALSE(entry->progress_is_this_attempts);
  }
  EXPECT_EQ(entry->job.attempt(), 4);
  EXPECT_EQ(entry->job.restarts(), 4);
  EXPECT_EQ(entry->job.reason().rfind("restart 4 of 5 (newest checkpoint reported: step 0) after: rank 0", 0), 0u)
      << entry->job.reason();
  EXPECT_EQ(observer_.restarts, std::vector<std::string>(4, "rank_failed"));
}

TEST_F(AttemptsTest, AUserErrorOrNoRestartLeftFailsTheJob) {
  JobEntry* user = RunningOnW1(Spec(1, 2));
  attempts_->FailAttempt(user, "data.path '/nope' does not exist", /*user_error=*/true);
  EXPECT_EQ(user->job.state(), v1::FAILED);
  EXPECT_EQ(user->job.reason(), "data.path '/nope' does not exist");

  JobEntry* none = Submit(Spec(1, 0));
  RunOn(none, {"w1"});
  attempts_->FailAttempt(none, "killed", /*user_error=*/false);
  EXPECT_EQ(none->job.state(), v1::FAILED);
  EXPECT_EQ(none->job.reason(), "killed");

  JobEntry* one = Submit(Spec(1, 1));
  RunOn(one, {"w1"});
  attempts_->FailAttempt(one, "killed", /*user_error=*/false);
  RunOn(one, {"w1"});
  attempts_->FailAttempt(one, "killed again", /*user_error=*/false);
  EXPECT_EQ(one->job.state(), v1::FAILED);
  EXPECT_EQ(one->job.reason(), "failed after 1 restarts: killed again");
  EXPECT_EQ(one->job.error(), "killed again");
}

// Preemption is not a failure: once every part is gone the job is queued again at once,
// with no restart counted.
TEST_F(AttemptsTest, APreemptedJobIsRequeuedWhenAllItsPartsAreGone) {
  Register("w1");
  Register("w2");
  JobEntry* entry = Submit(Spec(2));
  RunOn(entry, {"w1", "w2"});
  entry->job.set_checkpoint_step(40);
  attempts_->BeginStopping(entry, v1::PREEMPTED, "preempted by j-000009 (priority 5 > 0)");
  EXPECT_EQ(entry->stopping_since, clock_.Now());
  entry->job.mutable_placements(0)->set_finished(true);
  attempts_->MaybeFinishStopping(entry);
  EXPECT_EQ(entry->job.state(), v1::PREEMPTED);  // w2's rank still runs
  entry->job.mutable_placements(1)->set_finished(true);
  attempts_->MaybeFinishStopping(entry);
  EXPECT_EQ(entry->job.state(), v1::QUEUED);
  EXPECT_EQ(entry->job.reason(), "requeued from step 40 after: preempted by j-000009 (priority 5 > 0)");
  EXPECT_EQ(entry->job.restarts(), 0);
  EXPECT_EQ(entry->job.attempt(), 1);
  EXPECT_EQ(entry->not_before, clock_.Now());
  EXPECT_TRUE(observer_.restarts.empty());
}

TEST_F(AttemptsTest, AStopThatTakesTooLongIsFinishedAtTheStopTimeout) {
  JobEntry* entry = RunningOnW1();
  attempts_->BeginStopping(entry, v1::PREEMPTED, "worker w1 is drained");
  clock_.Advance(60s);
  attempts_->ReapStopping(entry, clock_.Now());
  EXPECT_EQ(entry->job.state(), v1::PREEMPTED);
  clock_.Advance(1ms);
  attempts_->ReapStopping(entry, clock_.Now());
  EXPECT_EQ(entry->job.state(), v1::QUEUED);
}

TEST_F(AttemptsTest, AStoppingJobsPartsOnGoneWorkersAreGone) {
  JobEntry* entry = RunningOnW1();
  attempts_->BeginStopping(entry, v1::PREEMPTED, "preempted");
  clock_.Advance(11s);
  workers_->ExpireLeases(clock_.Now());  // w1 lost
  attempts_->ReapStopping(entry, clock_.Now());
  EXPECT_EQ(entry->job.state(), v1::QUEUED);
}

// A job with no progress for hang_seconds is STUCK; once its ranks are stopped it is
// restarted, and that counts as a restart.
TEST_F(AttemptsTest, AHungJobIsStuckThenRestarted) {
  v1::JobSpec spec = Spec();
  spec.mutable_restart()->set_hang_seconds(100);
  JobEntry* entry = RunningOnW1(spec);
  clock_.Advance(100s);
  EXPECT_FALSE(attempts_->DetectHang(entry, clock_.Now()));
  clock_.Advance(1s);
  EXPECT_TRUE(attempts_->DetectHang(entry, clock_.Now()));
  EXPECT_EQ(entry->job.state(), v1::STUCK);
  EXPECT_EQ(entry->job.reason(), "stuck: no progress for 101 s at step 0 (hang_seconds 100); stacks in the rank logs");
  EXPECT_FALSE(attempts_->DetectHang(entry, clock_.Now()));  // only RUNNING jobs hang
  entry->job.mutable_placements(0)->set_finished(true);
  attempts_->MaybeFinishStopping(entry);
  EXPECT_EQ(entry->job.state(), v1::QUEUED);
  EXPECT_EQ(entry->job.restarts(), 1);
  EXPECT_EQ(observer_.restarts, std::vector<std::string>{"stuck"});
}

// Without hang_seconds: ten step times, at least five minutes.
TEST_F(AttemptsTest, TheDefaultHangLimitIsTenStepTimesAndAtLeastFiveMinutes) {
  JobEntry* entry = RunningOnW1();
  clock_.Advance(300s);
  EXPECT_FALSE(attempts_->DetectHang(entry, clock_.Now()));
  entry->job.mutable_progress()->set_step_seconds(40);
  clock_.Advance(100s);
  EXPECT_FALSE(attempts_->DetectHang(entry, clock_.Now()));
  clock_.Advance(1s);
  EXPECT_TRUE(attempts_->DetectHang(entry, clock_.Now()));
}

TEST_F(AttemptsTest, AnActiveJobOnAGoneWorkerFailsItsAttempt) {
  Register("w1");
  Register("w2");
  JobEntry* entry = Submit(Spec(2));
  RunOn(entry, {"w1", "w2"});
  attempts_->FailIfWorkerGone(entry, clock_.Now());
  EXPECT_EQ(entry->job.state(), v1::RUNNING);
  clock_.Advance(6s);
  Beat("w1");
  clock_.Advance(5s);
  workers_->ExpireLeases(clock_.Now());  // w2 lost
  attempts_->FailIfWorkerGone(entry, clock_.Now());
  EXPECT_EQ(entry->job.state(), v1::QUEUED);
  EXPECT_EQ(entry->job.error(), "worker w2 lost: no heartbeat for 10 s");
  EXPECT_EQ(observer_.restarts, std::vector<std::string>{"worker_lost"});
}

}  // namespace
}  // namespace nightshift
