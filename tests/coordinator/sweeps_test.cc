// coordinator/sweeps.h and the coordinator calls it makes, on an in-process coordinator
// (no servers): trials made up to the parallelism and once across a restart; a held job is
// not placed until released; a cancelled sweep cancels every job it made and makes no more;
// a Hold or Release whose pass was not written is undone from the record; a trial that
// trained its last step is not paused; a sweep that fails stops its paused trials, and a
// stop whose pass was not written is STOPPED all the same.
#include "coordinator/sweeps.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "tests/common/fake_clock.h"
#include "coordinator/sweep_spec.h"

namespace nightshift {
namespace {

class SweepsTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/sweeps." + std::to_string(::getpid()) + "." +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    options_.data_dir = dir_;
    options_.restart_backoff_seconds = 0;
    options_.clock = &clock_;
    Reopen();
  }
  void TearDown() override {
    c_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Reopen() {
    c_.reset();
    auto c = Coordinator::Open(options_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(c.value());
  }
  v1::Sweep Submit(const std::string& method, int trials, int parallelism) {
    StatusOr<v1::SweepSpec> spec = LoadSweepSpec(
        "base: {model: {arch: transformer_classifier}, data: {path: /data}}\n"
        "search: {train.lr: {log_uniform: [1.0e-4, 1.0e-2]}}\nmetric: val_loss\nmethod: " + method +
        "\nmax_trials: " + std::to_string(trials) + "\nparallelism: " + std::to_string(parallelism) +
        (method == "asha" ? "\nasha: {min_steps: 10}\n" : "\n"));
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    StatusOr<v1::Sweep> sweep = c_->SubmitSweep(*spec, "alice");
    EXPECT_TRUE(sweep.ok()) << sweep.status().ToString();
    return *sweep;
  }
  // Worker w1 with `slots` slots, a pass of the runner over `sweep_id`, and the trials it
  // made placed on w1; the sweep's record then.
  v1::Sweep PlaceTrials(const std::string& sweep_id, int slots) {
    v1::WorkerInfo worker;
    worker.set_name("w1");
    worker.set_slots(slots);
    EXPECT_TRUE(c_->Register(worker).ok());
    EXPECT_TRUE(SweepRunner(c_.get()).Pass().ok());
    c_->Tick();
    EXPECT_TRUE(c_->Heartbeat("w1", {}).ok());
    StatusOr<v1::Sweep> sweep = c_->GetSweep(sweep_id);
    EXPECT_TRUE(sweep.ok());
    return sweep.ok() ? *sweep : v1::Sweep();
  }
  struct Eval {
    int64_t step;
    double val_loss;
    int epoch = 0;
  };
  // What w1 reports of attempt 0 of `job`: `state`, at `step` of `total_steps`, `evals`.
  static v1::TaskStatus Report(const std::string& job, v1::TaskState state, int64_t step, int64_t total_steps,
                               const std::vector<Eval>& evals) {
    v1::TaskStatus s;
    s.mutable_task()->set_job_id(job);
    s.mutable_task()->set_attempt(0);
    s.set_state(state);
    s.mutable_progress()->set_step(step);
    s.mutable_progress()->set_total_steps(total_steps);
    for (const Eval& eval : evals) {
      v1::EvalPoint* e = s.add_evals();
      e->set_step(eval.step);
      e->set_epoch(eval.epoch);
      (*e->mutable_metrics())["val_loss"] = eval.val_loss;
    }
    return s;
  }
  std::vector<v1::Job> Jobs() {
    JobQuery q;
    StatusOr<JobPage> page = c_->List(q);
    EXPECT_TRUE(page.ok());
    return page.ok() ? page->jobs : std::vector<v1::Job>{};
  }

  FakeClock clock_;
  std::string dir_;
  CoordinatorOptions options_;
  std::unique_ptr<Coordinator> c_;
};

// SubmitSweep with a request id, as the CLI and the client retry it after a lost reply:
// the same id (same owner) gets the sweep the first call made, across a restart too; the
// same id with another sweep is refused naming request_id; another owner's id is theirs.
TEST_F(SweepsTest, ARetriedSubmissionGetsTheSweepTheFirstMade) {
  const auto spec = [](int trials) {
    StatusOr<v1::SweepSpec> s = LoadSweepSpec(
        "base: {model: {arch: transformer_classifier}, data: {path: /data}}\n"
        "search: {train.lr: {log_uniform: [1.0e-4, 1.0e-2]}}\nmetric: val_loss\nmethod: random\nmax_trials: " +
        std::to_string(trials) + "\n");
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return *s;
  };
  StatusOr<v1::Sweep> first = c_->SubmitSweep(spec(3), "alice", "req-1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  StatusOr<v1::Sweep> again = c_->SubmitSweep(spec(3), "alice", "req-1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id(), first->id());
  Reopen();
  again = c_->SubmitSweep(spec(3), "alice", "req-1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id(), first->id());
  EXPECT_EQ(c_->ListSweeps(nullptr).size(), 1u);

  const Status other = c_->SubmitSweep(spec(4), "alice", "req-1").status();
  EXPECT_EQ(other.code(), Status::kInvalidArgument);
  EXPECT_NE(other.message().find("request_id"), std::string::npos) << other.ToString();
  StatusOr<v1::Sweep> bobs = c_->SubmitSweep(spec(3), "bob", "req-1");
  ASSERT_TRUE(bobs.ok());
  EXPECT_NE(bobs->id(), first->id());
  EXPECT_EQ(c_->SubmitSweep(spec(3), "alice", "no spaces").status().code(), Status::kInvalidArgument);
  StatusOr<v1::Sweep> fresh = c_->SubmitSweep(spec(3), "alice", "");  // no id: always a new sweep
  ASSERT_TRUE(fresh.ok());
  EXPECT_NE(fresh->id(), first->id());
  EXPECT_EQ(c_->ListSweeps(nullptr).size(), 3u);
}

TEST_F(SweepsTest, TrialsAreMadeUpToTheParallelismAndOnceAcrossARestart) {
  const v1::Sweep sweep = Submit("random", 3, 2);
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  std::vector<v1::Job> jobs = Jobs();
  ASSERT_EQ(jobs.size(), 2u);  // two at a time: both still queued
  for (const v1::Job& j : jobs) {
    EXPECT_EQ(j.sweep_id(), sweep.id());
    EXPECT_EQ(j.owner(), "alice");
  }
  Reopen();
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  EXPECT_EQ(Jobs().size(), 2u);
  StatusOr<v1::Sweep> stored = c_->GetSweep(sweep.id());
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->trials_size(), 2);
  EXPECT_EQ(stored->trials(0).params().at("train.lr"), TrialParams(stored->spec(), 0).at("train.lr"));
  // A trial made by a pass whose record was lost is found again by its request id.
  StatusOr<v1::JobSpec> spec = TrialSpec(stored->spec(), TrialParams(stored->spec(), 1));
  ASSERT_TRUE(spec.ok());
  spec->set_name("sweep-t1");
  StatusOr<v1::Job> again = c_->SubmitTrial(*spec, "alice", sweep.id() + "-t1", sweep.id());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id(), stored->trials(1).job_id());
}

TEST_F(SweepsTest, AHeldJobIsNotPlacedUntilReleased) {
  v1::WorkerInfo worker;
  worker.set_name("w1");
  worker.set_slots(1);
  ASSERT_TRUE(c_->Register(worker).ok());
  const v1::Sweep sweep = Submit("random", 1, 1);
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  const std::string id = Jobs().at(0).id();
  ASSERT_TRUE(c_->Hold(id, "sweep " + sweep.id() + ": paused at rung 0").ok());
  c_->Tick();
  StatusOr<v1::Job> job = c_->Get(id);
  EXPECT_EQ(job->state(), v1::QUEUED);
  EXPECT_EQ(job->reason(), "sweep " + sweep.id() + ": paused at rung 0");
  ASSERT_TRUE(c_->Release(id).ok());
  c_->Tick();
  job = c_->Get(id);
  EXPECT_EQ(job->state(), v1::SCHEDULED) << job->reason();
  EXPECT_TRUE(job->held_by().empty());
  // Held while placed: stopped as a preemption, requeued held.
  ASSERT_TRUE(c_->Hold(id, "sweep " + sweep.id() + ": paused at rung 1").ok());
  job = c_->Get(id);
  EXPECT_EQ(job->state(), v1::PREEMPTED);
  EXPECT_EQ(job->restarts(), 0);
}

TEST_F(SweepsTest, ACancelledSweepCancelsEveryJobItMadeAndMakesNoMore) {
  const v1::Sweep sweep = Submit("random", 4, 2);
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  // A trial made after the runner read the record (the race with a cancel).
  StatusOr<v1::JobSpec> spec = TrialSpec(sweep.spec(), TrialParams(sweep.spec(), 2));
  ASSERT_TRUE(spec.ok());
  StatusOr<v1::Job> late = c_->SubmitTrial(*spec, "alice", sweep.id() + "-t2", sweep.id());
  ASSERT_TRUE(late.ok());
  StatusOr<v1::Sweep> cancelled = c_->CancelSweep(sweep.id());
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  for (const v1::Job& j : Jobs()) EXPECT_EQ(j.state(), v1::CANCELLED) << j.id();
  EXPECT_EQ(Jobs().size(), 3u);
  spec = TrialSpec(sweep.spec(), TrialParams(sweep.spec(), 3));
  EXPECT_EQ(c_->SubmitTrial(*spec, "alice", sweep.id() + "-t3", sweep.id()).status().code(),
            Status::kFailedPrecondition);
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  EXPECT_EQ(Jobs().size(), 3u);
  EXPECT_EQ(c_->GetSweep(sweep.id())->state(), v1::CANCELLED);
}

TEST_F(SweepsTest, AHoldOrReleaseThatThePassDidNotWriteIsUndoneFromTheRecord) {
  const v1::Sweep sweep = Submit("asha", 2, 2);
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  std::vector<v1::Job> jobs = Jobs();
  ASSERT_EQ(jobs.size(), 2u);
  // Trial 0 held, but its record says running; trial 1's record says paused, its job is not held.
  ASSERT_TRUE(c_->Hold(jobs[0].id(), "a pass that was not written").ok());
  v1::Sweep record = *c_->GetSweep(sweep.id());
  record.mutable_trials(1)->set_state(v1::TRIAL_PAUSED);
  record.mutable_trials(1)->set_rung(0);
  ASSERT_TRUE(c_->UpdateSweep(record).ok());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  EXPECT_TRUE(c_->Get(jobs[0].id())->held_by().empty());
  EXPECT_EQ(c_->Get(jobs[1].id())->held_by(), "sweep " + sweep.id() + ": paused at rung 0");
}

// A sweep that fails (a trial it cannot make: here its request id is taken by another of
// the owner's jobs, with another spec) promotes no paused trial any more: each is STOPPED
// and its job CANCELLED, not left QUEUED and held for ever (counted against the owner's
// job limit, and out of CancelSweep's reach once the sweep has ended).
TEST_F(SweepsTest, AFailedSweepStopsItsPausedTrials) {
  const v1::Sweep sweep = Submit("asha", 3, 2);
  const v1::Sweep made = PlaceTrials(sweep.id(), 2);
  ASSERT_EQ(made.trials_size(), 2);
  const std::string t0 = made.trials(0).job_id(), t1 = made.trials(1).job_id();
  StatusOr<v1::JobSpec> other = TrialSpec(sweep.spec(), TrialParams(sweep.spec(), 0));
  ASSERT_TRUE(other.ok());
  other->set_name("not-a-trial");
  ASSERT_TRUE(c_->Submit(*other, "alice", sweep.id() + "-t2").ok());
  // t0 best at rung 0; t1 worse: paused there, which makes room for trial 2, which fails.
  ASSERT_TRUE(c_->ReportTask("w1", Report(t0, v1::TASK_RUNNING, 10, 100, {{10, 0.5}})).ok());
  ASSERT_TRUE(c_->ReportTask("w1", Report(t1, v1::TASK_RUNNING, 10, 100, {{10, 0.7}})).ok());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  const v1::Sweep after = *c_->GetSweep(sweep.id());
  EXPECT_EQ(after.state(), v1::FAILED) << after.reason();
  EXPECT_NE(after.reason().find("request_id"), std::string::npos) << after.reason();
  ASSERT_EQ(after.trials_size(), 2);
  EXPECT_EQ(after.trials(0).state(), v1::TRIAL_RUNNING);
  EXPECT_EQ(c_->Get(t0)->state(), v1::RUNNING);  // a running trial runs on to its end
  EXPECT_EQ(after.trials(1).state(), v1::TRIAL_STOPPED);
  const v1::Job stopped = *c_->Get(t1);
  EXPECT_EQ(stopped.state(), v1::CANCELLED) << stopped.reason();
  EXPECT_EQ(stopped.reason().rfind("sweep " + sweep.id() + ": stopped at rung 0", 0), 0u) << stopped.reason();
  // Nothing is left for a later pass (it reads no ended sweep) or CancelSweep (refused).
  EXPECT_EQ(c_->CancelSweep(sweep.id()).status().code(), Status::kFailedPrecondition);
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  EXPECT_EQ(c_->GetSweep(sweep.id())->trials(1).state(), v1::TRIAL_STOPPED);
}

// The sweep cancels a paused trial's job to stop it before it writes its record: a pass
// that got only as far as the cancel (a crash) leaves the record RUNNING with the trial
// PAUSED. The next pass reads that cancel as the stop it was, not as the owner's.
TEST_F(SweepsTest, AStopWhoseRecordWasNotWrittenIsAStopAfterAll) {
  const v1::Sweep sweep = Submit("asha", 2, 2);
  const v1::Sweep made = PlaceTrials(sweep.id(), 2);
  ASSERT_EQ(made.trials_size(), 2);
  const std::string t0 = made.trials(0).job_id(), t1 = made.trials(1).job_id();
  ASSERT_TRUE(c_->ReportTask("w1", Report(t0, v1::TASK_RUNNING, 10, 100, {{10, 0.5}})).ok());
  ASSERT_TRUE(c_->ReportTask("w1", Report(t1, v1::TASK_RUNNING, 10, 100, {{10, 0.7}})).ok());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  ASSERT_EQ(c_->GetSweep(sweep.id())->trials(1).state(), v1::TRIAL_PAUSED);
  ASSERT_TRUE(c_->ReportTask("w1", Report(t0, v1::TASK_SUCCEEDED, 100, 100, {{10, 0.5}, {100, 0.3}})).ok());
  // What the pass that ended the sweep did before it crashed.
  ASSERT_TRUE(c_->Cancel(t1, "sweep " + sweep.id() + ": stopped at rung 0").ok());
  ASSERT_EQ(c_->GetSweep(sweep.id())->trials(1).state(), v1::TRIAL_PAUSED);
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  const v1::Sweep after = *c_->GetSweep(sweep.id());
  EXPECT_EQ(after.trials(0).state(), v1::TRIAL_COMPLETED);
  EXPECT_EQ(after.trials(1).state(), v1::TRIAL_STOPPED);
  EXPECT_EQ(after.state(), v1::SUCCEEDED) << after.reason();
  // The owner's own cancel of a paused trial stays a cancel.
  const v1::Sweep mine = Submit("asha", 2, 2);
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  const std::string job = c_->GetSweep(mine.id())->trials(0).job_id();
  v1::Sweep record = *c_->GetSweep(mine.id());
  record.mutable_trials(0)->set_state(v1::TRIAL_PAUSED);
  record.mutable_trials(0)->set_rung(0);
  ASSERT_TRUE(c_->UpdateSweep(record).ok());
  ASSERT_TRUE(c_->Cancel(job, "not needed").ok());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  EXPECT_EQ(c_->GetSweep(mine.id())->trials(0).state(), v1::TRIAL_CANCELLED);
}

// A trial whose job has trained its last step is not paused: pausing saves no step (its
// job is writing its model when the pass reads the evaluation), so it completes, and its
// values still count at their rungs. The CI saw a trial "paused at rung 3 (step 400)" of 400.
TEST_F(SweepsTest, ATrialThatTrainedItsLastStepCompletesInsteadOfPausing) {
  const v1::Sweep sweep = Submit("asha", 4, 4);
  const v1::Sweep made = PlaceTrials(sweep.id(), 4);
  std::vector<std::string> job;  // by trial index
  for (const v1::Trial& t : made.trials()) job.push_back(t.job_id());
  ASSERT_EQ(job.size(), 4u);
  // Each trial evaluated at step 10 (rung 0): t0 first and best; t1 worse, at step 10 of
  // 100; t2 worse, already at its last step 20 when the pass reads its evaluation; t3
  // worse, evaluated at its last step.
  const auto report = [&](const std::string& id, double value, int64_t step, int64_t total_steps,
                          v1::TaskState state) {
    ASSERT_TRUE(c_->ReportTask("w1", Report(id, state, step, total_steps, {{10, value}})).ok());
  };
  report(job[0], 0.5, 10, 100, v1::TASK_RUNNING);
  report(job[1], 0.7, 10, 100, v1::TASK_RUNNING);
  report(job[2], 0.9, 20, 20, v1::TASK_RUNNING);
  report(job[3], 0.8, 10, 10, v1::TASK_RUNNING);
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  v1::Sweep after = *c_->GetSweep(sweep.id());
  EXPECT_EQ(after.trials(0).state(), v1::TRIAL_RUNNING);
  EXPECT_EQ(after.trials(1).state(), v1::TRIAL_PAUSED);
  EXPECT_NE(c_->Get(job[1])->held_by().find("paused at rung 0 (step 10"), std::string::npos);
  int told = 0;
  for (const v1::SweepEvent& e : after.events())
    told += e.text().find("trained every step it had: not paused at rung 0") != std::string::npos;
  EXPECT_EQ(told, 2);
  for (int i : {2, 3}) {
    EXPECT_EQ(after.trials(i).state(), v1::TRIAL_RUNNING) << i;
    EXPECT_TRUE(c_->Get(job[i])->held_by().empty()) << i;
    EXPECT_EQ(after.trials(i).rung_values_size(), 1) << i;  // recorded at rung 0 all the same
    report(job[i], i == 2 ? 0.9 : 0.8, i == 2 ? 20 : 10, i == 2 ? 20 : 10, v1::TASK_SUCCEEDED);
  }
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  after = *c_->GetSweep(sweep.id());
  for (int i : {2, 3}) {
    EXPECT_EQ(after.trials(i).state(), v1::TRIAL_COMPLETED) << i;
    EXPECT_EQ(c_->Get(job[i])->state(), v1::SUCCEEDED) << i;
  }
}

// An ASHA trial's ranks wait at its rungs by steps: its job and assignment list them
// (asha.min_steps 10, eta 4: 10, 40, 160, ...; none for a random sweep's trial), and once
// the runner lets an evaluation go on, every heartbeat answer that lists the task tells
// its worker the judged step. A paused trial is told nothing: it is stopped.
TEST_F(SweepsTest, AnAshaTrialIsToldItsRungsAndEachJudgementThatLetsItGoOn) {
  const v1::Sweep random = Submit("random", 1, 1);
  const v1::Sweep sweep = Submit("asha", 2, 2);
  v1::WorkerInfo worker;
  worker.set_name("w1");
  worker.set_slots(3);
  ASSERT_TRUE(c_->Register(worker).ok());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  c_->Tick();
  StatusOr<HeartbeatReply> placed = c_->Heartbeat("w1", {});
  ASSERT_TRUE(placed.ok());
  ASSERT_EQ(placed->start.size(), 3u);
  const std::string t0 = c_->GetSweep(sweep.id())->trials(0).job_id(), t1 = c_->GetSweep(sweep.id())->trials(1).job_id();
  for (const v1::Assignment& a : placed->start) {
    const std::vector<int64_t> steps(a.await_steps().begin(), a.await_steps().end());
    if (a.task().job_id() == c_->GetSweep(random.id())->trials(0).job_id()) {
      EXPECT_TRUE(steps.empty());
    } else {
      ASSERT_GE(steps.size(), 3u) << a.task().job_id();
      EXPECT_EQ(std::vector<int64_t>(steps.begin(), steps.begin() + 3), (std::vector<int64_t>{10, 40, 160}));
    }
  }
  const std::string plain = c_->GetSweep(random.id())->trials(0).job_id();
  const std::vector<v1::TaskStatus> running = {Report(t0, v1::TASK_RUNNING, 10, 1000, {{10, 0.5}}),
                                               Report(t1, v1::TASK_RUNNING, 10, 1000, {{10, 0.7}}),
                                               Report(plain, v1::TASK_RUNNING, 10, 1000, {{10, 0.6}})};
  StatusOr<HeartbeatReply> before = c_->Heartbeat("w1", running);
  ASSERT_TRUE(before.ok());
  EXPECT_TRUE(before->judged.empty());  // not judged yet: the ranks keep waiting
  EXPECT_TRUE(before->stop.empty());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  EXPECT_EQ(c_->Get(t0)->judged_step(), 10);
  EXPECT_EQ(c_->Get(t1)->judged_step(), 0);
  EXPECT_NE(c_->Get(t1)->held_by().find("paused at rung 0"), std::string::npos) << c_->Get(t1)->DebugString();
  StatusOr<HeartbeatReply> after = c_->Heartbeat("w1", running);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->judged.size(), 1u);
  EXPECT_EQ(after->judged[0].task().job_id(), t0);
  EXPECT_EQ(after->judged[0].step(), 10);
  ASSERT_EQ(after->stop.size(), 1u);
  EXPECT_EQ(after->stop[0].job_id(), t1);
  Reopen();  // the record keeps both
  EXPECT_EQ(c_->Get(t0)->judged_step(), 10);
  EXPECT_EQ(c_->Get(t0)->await_steps(1), 40);
  // An evaluation without the sweep's metric (nothing to judge) still lets the ranks go
  // on at once, not at the end of their wait.
  v1::TaskStatus without = Report(t0, v1::TASK_RUNNING, 40, 1000, {{10, 0.5}, {40, 0}});
  without.mutable_evals(1)->mutable_metrics()->clear();
  (*without.mutable_evals(1)->mutable_metrics())["val_accuracy"] = 0.9;
  ASSERT_TRUE(c_->ReportTask("w1", without).ok());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  EXPECT_EQ(c_->Get(t0)->judged_step(), 40);
}

// Rungs by epochs (asha.min_epochs): an evaluation at the end of epoch e (from 0) counts
// e + 1 epochs, not its step; the events name the epoch.
TEST_F(SweepsTest, RungsByEpochsJudgeEachEpochsEvaluation) {
  StatusOr<v1::SweepSpec> spec = LoadSweepSpec(
      "base: {model: {arch: transformer_classifier}, data: {path: /data}, train: {epochs: 8}}\n"
      "search: {train.lr: {log_uniform: [1.0e-4, 1.0e-2]}}\nmetric: val_loss\nmethod: asha\nmax_trials: 2\n"
      "parallelism: 2\nasha: {min_epochs: 1, reduction_factor: 2}\n");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  StatusOr<v1::Sweep> sweep = c_->SubmitSweep(*spec, "alice");
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  const v1::Sweep made = PlaceTrials(sweep->id(), 2);
  ASSERT_EQ(made.trials_size(), 2);
  const v1::Job trial = *c_->Get(made.trials(0).job_id());  // its ranks wait after epochs 1, 2 and 4 of 8
  EXPECT_EQ(trial.await_steps_size(), 0);
  EXPECT_EQ(std::vector<int64_t>(trial.await_epochs().begin(), trial.await_epochs().end()),
            (std::vector<int64_t>{1, 2, 4}));
  // 7 steps an epoch: trial 0 at the ends of epochs 0 and 1 (rungs at 1 and 2 epochs).
  ASSERT_TRUE(
      c_->ReportTask("w1", Report(made.trials(0).job_id(), v1::TASK_RUNNING, 14, 100, {{7, 0.5, 0}, {14, 0.4, 1}}))
          .ok());
  ASSERT_TRUE(c_->ReportTask("w1", Report(made.trials(1).job_id(), v1::TASK_RUNNING, 7, 100, {{7, 0.7, 0}})).ok());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  const v1::Sweep after = *c_->GetSweep(sweep->id());
  EXPECT_EQ(after.trials(0).state(), v1::TRIAL_RUNNING);
  EXPECT_EQ(after.trials(0).rung(), 1);
  EXPECT_EQ(after.trials(0).rung_values_size(), 2);  // by steps (7, 14) it would have passed 4 rungs
  EXPECT_EQ(after.trials(1).state(), v1::TRIAL_PAUSED);
  EXPECT_NE(c_->Get(made.trials(1).job_id())->held_by().find("paused at rung 0 (epoch 1, step 7, val_loss 0.7"),
            std::string::npos)
      << c_->Get(made.trials(1).job_id())->held_by();
}

// The sweep runner's cue (CoordinatorOptions::on_trial_evaluation): once per report that
// brings an ASHA trial evaluations the coordinator did not have, by ReportTask or
// Heartbeat; not for the same evaluations again, nor for a random sweep's trial (its
// runner acts on trials' ends, which the poll finds), nor for a job outside any sweep.
TEST_F(SweepsTest, AReportWithAnAshaTrialsNewEvaluationCuesTheRunner) {
  int cues = 0;
  options_.on_trial_evaluation = [&cues] { ++cues; };
  Reopen();
  const v1::Sweep random = Submit("random", 1, 1);
  const v1::Sweep asha = Submit("asha", 1, 1);
  StatusOr<v1::JobSpec> plain_spec = TrialSpec(random.spec(), TrialParams(random.spec(), 0));
  ASSERT_TRUE(plain_spec.ok());
  StatusOr<v1::Job> plain = c_->Submit(*plain_spec, "alice");  // not a trial
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  const std::string trial = PlaceTrials(asha.id(), 3).trials(0).job_id();
  const std::string random_trial = c_->GetSweep(random.id())->trials(0).job_id();
  const auto status = [](const std::string& id, const std::vector<int64_t>& steps) {
    std::vector<Eval> evals;
    for (int64_t step : steps) evals.push_back({step, 0.5});
    return Report(id, v1::TASK_RUNNING, steps.back(), 100, evals);
  };
  ASSERT_TRUE(c_->ReportTask("w1", status(trial, {10})).ok());
  EXPECT_EQ(cues, 1);
  ASSERT_TRUE(c_->ReportTask("w1", status(trial, {10})).ok());  // nothing new
  ASSERT_TRUE(c_->ReportTask("w1", status(plain->id(), {10, 20})).ok());
  ASSERT_TRUE(c_->ReportTask("w1", status(random_trial, {10, 20})).ok());
  EXPECT_EQ(cues, 1);
  ASSERT_TRUE(c_->Heartbeat("w1", {status(trial, {10, 20}), status(plain->id(), {10, 20, 30})}).ok());
  EXPECT_EQ(cues, 2);
}

// A trial that completes with a NaN metric is never the sweep's best (every comparison
// with NaN is false: first in order, it would have stayed best).
TEST_F(SweepsTest, ANaNIsNeverTheBest) {
  const v1::Sweep sweep = Submit("random", 2, 2);
  const v1::Sweep made = PlaceTrials(sweep.id(), 2);
  ASSERT_EQ(made.trials_size(), 2);
  for (int i : {0, 1})
    ASSERT_TRUE(c_->ReportTask("w1", Report(made.trials(i).job_id(), v1::TASK_SUCCEEDED, 10, 10,
                                            {{10, i == 0 ? std::nan("") : 0.9}}))
                    .ok());
  ASSERT_TRUE(SweepRunner(c_.get()).Pass().ok());
  const v1::Sweep after = *c_->GetSweep(sweep.id());
  EXPECT_EQ(after.trials(0).state(), v1::TRIAL_COMPLETED);
  EXPECT_EQ(after.state(), v1::SUCCEEDED);
  EXPECT_EQ(after.best_job_id(), made.trials(1).job_id()) << after.reason();
}

}  // namespace
}  // namespace nightshift
