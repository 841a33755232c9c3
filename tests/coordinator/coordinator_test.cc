// Coordinator logic without servers: the worker protocol is driven by direct calls.
#include "coordinator/coordinator.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "common/spec.h"
#include "common/time_util.h"
#include "coordinator/limits.h"
#include "coordinator/metrics.h"
#include "coordinator/metric_history.h"
#include "tests/common/fake_clock.h"
#include "tests/common/fake_job_store.h"

namespace nightshift {
namespace {

using namespace std::chrono_literals;

// What `curl` gets from http://127.0.0.1:<port>/metrics.
std::string Scrape(int port) {
  std::string out;
  FILE* curl = ::popen(("curl -sf http://127.0.0.1:" + std::to_string(port) + "/metrics").c_str(), "r");
  if (curl == nullptr) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), curl)) > 0;) out.append(buf, n);
  ::pclose(curl);
  return out;
}

class CoordinatorTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/coord." + std::to_string(::getpid()) + "." +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    options_.data_dir = dir_;
    options_.lease_seconds = 0.3;
    options_.restart_backoff_seconds = 0;
    options_.clock = &clock_;  // time moves only when a test advances it
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
  v1::JobSpec Spec(int world_size = 1, int max_restarts = 2) {
    auto spec = LoadJobSpec("model: {arch: transformer_classifier}\ndata: {path: /data}\n");
    EXPECT_TRUE(spec.ok());
    spec->mutable_resources()->set_world_size(world_size);
    spec->mutable_restart()->set_max_restarts(max_restarts);
    return spec.value();
  }
  void RegisterWorker(const std::string& name, int slots) {
    v1::WorkerInfo worker;
    worker.set_name(name);
    worker.set_slots(slots);
    ASSERT_TRUE(c_->Register(worker).ok());
  }
  HeartbeatReply Heartbeat(const std::string& name, const std::vector<v1::TaskStatus>& tasks = {}) {
    auto reply = c_->Heartbeat(name, tasks);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? std::move(reply.value()) : HeartbeatReply{};
  }
  static v1::TaskStatus Status(const std::string& job, int attempt, v1::TaskState state) {
    v1::TaskStatus s;
    s.mutable_task()->set_job_id(job);
    s.mutable_task()->set_attempt(attempt);
    s.set_state(state);
    return s;
  }
  void Report(const std::string& worker, const v1::TaskStatus& status) {
    ASSERT_TRUE(c_->ReportTask(worker, status).ok());
  }
  v1::JobState StateOf(const std::string& id) { return c_->Get(id)->state(); }
  // What `metrics` (the coordinator's observer) serve on a port of their own, with the
  // coordinator's gauges; "" when no server could start.
  std::string ScrapeMetrics(CoordinatorMetrics* metrics) {
    auto server = MetricsServer::Start("127.0.0.1:0");
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (!server.ok()) return "";
    metrics->Serve(server.value().get(), c_.get());
    return Scrape(server.value()->port());
  }
  // A one-rank job RUNNING on a one-slot worker w1 (registered here); its id.
  std::string RunningJobOnW1() {
    RegisterWorker("w1", 1);
    const std::string id = c_->Submit(Spec())->id();
    c_->Tick();
    Heartbeat("w1");
    Report("w1", Status(id, 0, v1::TASK_RUNNING));
    return id;
  }

  std::string dir_;
  FakeClock clock_;
  CoordinatorOptions options_;
  std::unique_ptr<Coordinator> c_;
};

// Every time the coordinator writes or measures comes from its Clock: with a fake one,
// records carry the fake time of day and the queue wait grows only as it is advanced.
TEST_F(CoordinatorTest, RecordTimesAndQueueWaitsComeFromTheCoordinatorsClock) {
  const auto at_submit = clock_.WallNow();
  const v1::Job job = c_->Submit(Spec()).value();
  EXPECT_EQ(job.created().seconds(),
            std::chrono::duration_cast<std::chrono::seconds>(at_submit.time_since_epoch()).count());
  EXPECT_EQ(job.created().seconds(), 1767225600);  // FakeClock's 2026-01-01, not today
  ASSERT_EQ(job.events_size(), 1);
  EXPECT_EQ(job.events(0).time().seconds(), job.created().seconds());
  EXPECT_EQ(c_->Stats().oldest_queued_seconds, 0);
  clock_.Advance(std::chrono::seconds(90));
  EXPECT_DOUBLE_EQ(c_->Stats().oldest_queued_seconds, 90);
  RegisterWorker("w1", 1);
  c_->Tick();
  const v1::Job placed = c_->Get(job.id()).value();
  EXPECT_EQ(placed.state(), v1::SCHEDULED);
  EXPECT_EQ(placed.events(placed.events_size() - 1).time().seconds(), 1767225600 + 90);
  EXPECT_EQ(placed.updated().seconds(), 1767225600 + 90);
  const std::vector<v1::WorkerInfo> workers = c_->ListWorkers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].last_heartbeat().seconds(), 1767225600 + 90);
}

// A submission retried with its request id (the reply was lost) gets the job the first
// call created, also from a coordinator restarted over the same RocksDB store.
TEST_F(CoordinatorTest, RetriedSubmitReturnsTheFirstJobAlsoAfterARestart) {
  auto first = c_->Submit(Spec(), "alice", "req-1");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->request_id(), "req-1");
  auto again = c_->Submit(Spec(), "alice", "req-1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id(), first->id());
  Reopen();
  auto after_restart = c_->Submit(Spec(), "alice", "req-1");
  ASSERT_TRUE(after_restart.ok()) << after_restart.status().ToString();
  EXPECT_EQ(after_restart->id(), first->id());
  auto page = c_->List(JobQuery{});
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->jobs.size(), 1u);
  // A new id is a new job; ids are per owner, so bob's "req-1" is his own.
  EXPECT_NE(c_->Submit(Spec(), "alice", "req-2")->id(), first->id());
  EXPECT_NE(c_->Submit(Spec(), "bob", "req-1")->id(), first->id());
  // Without an id every call is a new job.
  EXPECT_NE(c_->Submit(Spec(), "alice")->id(), c_->Submit(Spec(), "alice")->id());
  EXPECT_EQ(c_->List(JobQuery{})->jobs.size(), 5u);
}

TEST_F(CoordinatorTest, RequestIdReusedWithAnotherSpecIsRefusedNamingIt) {
  const std::string id = c_->Submit(Spec(1), "alice", "req-1")->id();
  auto other = c_->Submit(Spec(2), "alice", "req-1");
  ASSERT_EQ(other.status().code(), Status::kInvalidArgument);
  EXPECT_EQ(other.status().message().rfind("request_id: ", 0), 0u) << other.status().message();
  EXPECT_NE(other.status().message().find(id), std::string::npos) << other.status().message();
  auto bad = c_->Submit(Spec(), "alice", "has space");
  ASSERT_EQ(bad.status().code(), Status::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("request_id: ", 0), 0u) << bad.status().message();
  EXPECT_EQ(c_->Submit(Spec(), "alice", std::string(129, 'a')).status().code(), Status::kInvalidArgument);
  EXPECT_EQ(c_->List(JobQuery{})->jobs.size(), 1u);
}

// The retry of an accepted job is not a new job, so the per-user limit does not refuse it.
TEST_F(CoordinatorTest, RetryOfAnAcceptedJobIsNotCountedAgainstTheLimit) {
  options_.max_jobs_per_user = 1;
  Reopen();
  const std::string id = c_->Submit(Spec(), "alice", "req-1")->id();
  EXPECT_EQ(c_->Submit(Spec(), "alice", "req-2").status().code(), Status::kResourceExhausted);
  auto again = c_->Submit(Spec(), "alice", "req-1");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id(), id);
}

// Fair share through the real coordinator, not only Schedule(): with two free slots and
// alice's three jobs queued before bob's one, the second slot goes to bob.
TEST_F(CoordinatorTest, FreeSlotsGoToTheUserHoldingFewest) {
  std::vector<std::string> alice;
  for (int i = 0; i < 3; ++i) alice.push_back(c_->Submit(Spec(), "alice")->id());
  const std::string bob = c_->Submit(Spec(), "bob")->id();
  RegisterWorker("w1", 2);
  c_->Tick();
  EXPECT_EQ(StateOf(alice[0]), v1::SCHEDULED);
  EXPECT_EQ(StateOf(bob), v1::SCHEDULED);
  EXPECT_EQ(StateOf(alice[1]), v1::QUEUED);
  EXPECT_EQ(StateOf(alice[2]), v1::QUEUED);
}

// Backfill through the real coordinator: a queued job that ran before is expected to
// take what its last attempt measured for the steps left after its checkpoint, so it
// may start in the slot that is free until the reservation of a bigger job.
TEST_F(CoordinatorTest, AJobKnownToEndBeforeTheReservationBackfills) {
  v1::JobSpec high = Spec(1);
  high.set_priority(10);
  const std::string running = c_->Submit(high)->id();
  const std::string resumed = c_->Submit(Spec(1))->id();
  RegisterWorker("w1", 2);
  c_->Tick();
  Heartbeat("w1");
  auto ends_later = Status(running, 0, v1::TASK_RUNNING);
  ends_later.mutable_progress()->set_eta_seconds(1000);  // frees its slot in 1000 s
  *ends_later.mutable_progress()->mutable_updated() = NowTimestamp();
  Report("w1", ends_later);
  auto measured = Status(resumed, 0, v1::TASK_RUNNING);
  measured.mutable_progress()->set_step(60);
  measured.mutable_progress()->set_total_steps(100);
  measured.mutable_progress()->set_step_seconds(0.5);
  measured.set_checkpoint_step(50);  // 50 steps left: 25 s
  Report("w1", measured);
  v1::JobSpec big = Spec(2);
  big.set_priority(10);
  const std::string reserved = c_->Submit(big)->id();
  c_->Tick();
  ASSERT_EQ(StateOf(reserved), v1::QUEUED);
  auto failed = Status(resumed, 0, v1::TASK_FAILED);
  failed.set_error("trainer rank 0 killed by signal 9 (SIGKILL)");
  Report("w1", failed);
  ASSERT_EQ(StateOf(resumed), v1::QUEUED);
  c_->Tick();
  EXPECT_EQ(StateOf(resumed), v1::SCHEDULED) << c_->Get(resumed)->reason();
  EXPECT_EQ(StateOf(reserved), v1::QUEUED);
}

// A FakeJobStore whose job writes (Put) fail once `budget` of them are spent: the disk then
// holds what a coordinator that crashed after that many writes left.
class JobWriteBudgetStore : public FakeJobStore {
 public:
  JobWriteBudgetStore(std::shared_ptr<Disk> disk, int budget) : FakeJobStore(std::move(disk)), budget_(budget) {}
  Status Put(const v1::Job& job, bool sync) override {
    if (budget_-- <= 0) return Status::IOError("cannot write job " + job.id() + ": the coordinator crashed");
    return FakeJobStore::Put(job, sync);
  }

 private:
  int budget_;
};

// A sweep's trial is accepted by one synced write that already names its sweep and its
// rungs: a coordinator that crashed right after it leaves no trial outside its sweep
// (CancelSweep finds it; its ranks wait at its rungs), and a retry by its request id, after
// the restart, gets that job and writes nothing.
TEST_F(CoordinatorTest, ATrialIsTaggedWithItsSweepInTheWriteThatAcceptsIt) {
  auto disk = std::make_shared<FakeJobStore::Disk>();
  const auto open_over_disk = [&](int job_writes) {
    c_.reset();
    auto opened = Coordinator::Open(options_, std::make_unique<JobWriteBudgetStore>(disk, job_writes));
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    c_ = std::move(opened.value());
  };
  open_over_disk(1);
  v1::SweepSpec spec;
  spec.set_name("lr");
  spec.set_method("asha");
  spec.set_max_trials(2);
  spec.set_parallelism(1);
  StatusOr<v1::Sweep> sweep = c_->SubmitSweep(spec, "alice");
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  StatusOr<v1::Job> trial = c_->SubmitTrial(Spec(), "alice", sweep->id() + "-t0", sweep->id(), {10, 40});
  ASSERT_TRUE(trial.ok()) << trial.status().ToString();  // one job write was enough
  EXPECT_EQ(trial->sweep_id(), sweep->id());
  ASSERT_EQ(disk->jobs.count(trial->id()), 1u);
  EXPECT_EQ(disk->jobs.at(trial->id()).sweep_id(), sweep->id());
  const auto& await = disk->jobs.at(trial->id()).await_steps();
  EXPECT_EQ(std::vector<int64_t>(await.begin(), await.end()), (std::vector<int64_t>{10, 40}));

  open_over_disk(0);  // restarted over what was written; no job write allowed
  StatusOr<v1::Job> again = c_->SubmitTrial(Spec(), "alice", sweep->id() + "-t0", sweep->id(), {10, 40});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->id(), trial->id());
  EXPECT_EQ(again->sweep_id(), sweep->id());
  ASSERT_TRUE(c_->store_status().ok());

  open_over_disk(1);
  ASSERT_TRUE(c_->CancelSweep(sweep->id()).ok());
  EXPECT_EQ(StateOf(trial->id()), v1::CANCELLED);
}

// A state change whose write fails is never acknowledged: the call that caused it fails,
// the coordinator stops (fail-stop), and a restart over the same disk shows the last
// written state, which the worker's repeated report then moves on.
TEST_F(CoordinatorTest, AFailedWriteFailsTheCallAndStopsTheCoordinator) {
  auto disk = std::make_shared<FakeJobStore::Disk>();
  auto opened = Coordinator::Open(options_, std::make_unique<FakeJobStore>(disk));
  ASSERT_TRUE(opened.ok());
  c_ = std::move(opened.value());
  const std::string id = c_->Submit(Spec())->id();
  RegisterWorker("w1", 1);
  c_->Tick();
  Heartbeat("w1", {Status(id, 0, v1::TASK_PREPARING)});
  Report("w1", Status(id, 0, v1::TASK_RUNNING));
  ASSERT_EQ(StateOf(id), v1::RUNNING);
  ASSERT_TRUE(c_->store_status().ok());

  disk->fail_writes = true;  // the disk fills up
  auto done = Status(id, 0, v1::TASK_SUCCEEDED);
  (*done.mutable_metrics())["val_accuracy"] = 0.97;
  const ::nightshift::Status s = c_->ReportTask("w1", done);
  EXPECT_EQ(s.code(), ::nightshift::Status::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  EXPECT_EQ(disk->failed_writes, 1);
  // Stopped: nothing more is accepted, told or written.
  EXPECT_EQ(c_->store_status().code(), ::nightshift::Status::kUnavailable);
  EXPECT_EQ(c_->Get(id).status().code(), ::nightshift::Status::kUnavailable);
  EXPECT_EQ(c_->Submit(Spec()).status().code(), ::nightshift::Status::kUnavailable);
  EXPECT_EQ(c_->Heartbeat("w1", {}).status().code(), ::nightshift::Status::kUnavailable);
  c_->Tick();
  EXPECT_EQ(disk->failed_writes, 1);
  EXPECT_EQ(disk->jobs.at(id).state(), v1::RUNNING) << "on disk: the last acknowledged state";

  // Restarted once the disk has room: the job is as written, and the result the worker
  // kept (it was never acknowledged) is applied when it sends it again.
  disk->fail_writes = false;
  c_.reset();
  opened = Coordinator::Open(options_, std::make_unique<FakeJobStore>(disk));
  ASSERT_TRUE(opened.ok());
  c_ = std::move(opened.value());
  EXPECT_EQ(StateOf(id), v1::RUNNING);
  RegisterWorker("w1", 1);
  Report("w1", done);
  EXPECT_EQ(StateOf(id), v1::SUCCEEDED);
  EXPECT_EQ(disk->jobs.at(id).state(), v1::SUCCEEDED);
  EXPECT_DOUBLE_EQ(disk->jobs.at(id).metrics().at("val_accuracy"), 0.97);
}

TEST_F(CoordinatorTest, JobRunsToSuccessAndSurvivesARestart) {
  auto job = c_->Submit(Spec());
  ASSERT_TRUE(job.ok());
  const std::string id = job->id();
  EXPECT_EQ(StateOf(id), v1::QUEUED);
  c_->Tick();
  EXPECT_EQ(StateOf(id), v1::QUEUED);  // no worker yet
  RegisterWorker("w1", 1);
  c_->Tick();
  EXPECT_EQ(StateOf(id), v1::SCHEDULED);
  auto resp = Heartbeat("w1");
  ASSERT_EQ(resp.start.size(), 1u);
  EXPECT_EQ(resp.start[0].task().job_id(), id);
  EXPECT_EQ(resp.start[0].world_size(), 1);
  // Repeated until the worker reports it.
  EXPECT_EQ(Heartbeat("w1").start.size(), 1u);
  EXPECT_EQ(Heartbeat("w1", {Status(id, 0, v1::TASK_PREPARING)}).start.size(), 0u);
  Report("w1", Status(id, 0, v1::TASK_RUNNING));
  EXPECT_EQ(StateOf(id), v1::RUNNING);
  auto done = Status(id, 0, v1::TASK_SUCCEEDED);
  (*done.mutable_metrics())["val_accuracy"] = 0.97;
  Report("w1", done);
  EXPECT_EQ(StateOf(id), v1::SUCCEEDED);
  Report("w1", done);  // a repeated final report changes nothing
  const v1::Job before = c_->Get(id).value();
  EXPECT_EQ(before.events_size(), 4);  // QUEUED (accepted), SCHEDULED, RUNNING, SUCCEEDED

  Reopen();
  auto after = c_->Get(id);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->state(), v1::SUCCEEDED);
  EXPECT_DOUBLE_EQ(after->metrics().at("val_accuracy"), 0.97);
  EXPECT_EQ(after->events_size(), before.events_size());
  // New ids continue after the stored ones.
  auto next = c_->Submit(Spec());
  ASSERT_TRUE(next.ok());
  EXPECT_GT(next->id(), id);
}

TEST_F(CoordinatorTest, FailureRestartsThenFails) {
  RegisterWorker("w1", 1);
  const std::string id = c_->Submit(Spec(1, /*max_restarts=*/1))->id();
  for (int attempt = 0; attempt < 2; ++attempt) {
    c_->Tick();
    ASSERT_EQ(StateOf(id), v1::SCHEDULED) << attempt;
    auto resp = Heartbeat("w1");
    ASSERT_EQ(resp.start.size(), 1u);
    EXPECT_EQ(resp.start[0].task().attempt(), attempt);
    auto failed = Status(id, attempt, v1::TASK_FAILED);
    failed.set_error("trainer rank 0 killed by signal 6 (SIGABRT)");
    Report("w1", failed);
  }
  auto job = c_->Get(id);
  EXPECT_EQ(job->state(), v1::FAILED);
  EXPECT_EQ(job->restarts(), 1);
  EXPECT_NE(job->reason().find("SIGABRT"), std::string::npos);
  EXPECT_NE(job->error().find("SIGABRT"), std::string::npos);
}

TEST_F(CoordinatorTest, UserErrorIsNotRetried) {
  RegisterWorker("w1", 1);
  const std::string id = c_->Submit(Spec(1, 3))->id();
  c_->Tick();
  Heartbeat("w1");
  auto failed = Status(id, 0, v1::TASK_FAILED);
  failed.set_error("data.path '/nope' does not exist");
  failed.set_user_error(true);
  Report("w1", failed);
  auto job = c_->Get(id);
  EXPECT_EQ(job->state(), v1::FAILED);
  EXPECT_EQ(job->restarts(), 0);
  EXPECT_NE(job->reason().find("/nope"), std::string::npos);
}

TEST_F(CoordinatorTest, CancelStopsTheRanks) {
  const std::string id = RunningJobOnW1();
  ASSERT_TRUE(c_->Cancel(id, "").ok());
  EXPECT_EQ(StateOf(id), v1::CANCELLED);
  auto resp = Heartbeat("w1", {Status(id, 0, v1::TASK_RUNNING)});
  ASSERT_EQ(resp.stop.size(), 1u);
  EXPECT_EQ(resp.stop[0].job_id(), id);
  EXPECT_EQ(c_->Cancel(id, "").status().code(), Status::kFailedPrecondition);
  // The slot is free again.
  const std::string next = c_->Submit(Spec())->id();
  c_->Tick();
  EXPECT_EQ(StateOf(next), v1::SCHEDULED);
}

TEST_F(CoordinatorTest, LostWorkerRequeuesItsJob) {
  RegisterWorker("w1", 1);
  RegisterWorker("w2", 1);
  const std::string id = c_->Submit(Spec())->id();
  c_->Tick();
  auto job = c_->Get(id);
  const std::string first = job->placements(0).worker();
  const std::string other = first == "w1" ? "w2" : "w1";
  Heartbeat(first);
  Report(first, Status(id, 0, v1::TASK_RUNNING));
  // Only the other worker keeps heartbeating.
  for (int i = 0; i < 8; ++i) {
    clock_.Advance(60ms);
    Heartbeat(other);
    c_->Tick();
  }
  job = c_->Get(id);
  EXPECT_EQ(job->attempt(), 1);
  EXPECT_EQ(job->state(), v1::SCHEDULED);
  EXPECT_EQ(job->placements(0).worker(), other);
  EXPECT_NE(job->events(job->events_size() - 2).reason().find("lost"), std::string::npos);
}

// Issue 18: the record shows the step the new attempt's trainer resumed from, not the
// checkpoint last heard of (which was on the lost worker's disk); the cut-off attempt's
// late reports, a result among them, change nothing and its ranks are told to stop.
TEST_F(CoordinatorTest, TheRecordShowsWhereTheNewAttemptResumedAndIgnoresTheOldOne) {
  RegisterWorker("w1", 1);
  RegisterWorker("w2", 1);
  const std::string id = c_->Submit(Spec())->id();
  c_->Tick();
  const std::string first = c_->Get(id)->placements(0).worker();
  const std::string other = first == "w1" ? "w2" : "w1";
  Heartbeat(first);
  v1::TaskStatus running = Status(id, 0, v1::TASK_RUNNING);
  running.set_resumed_step(0);
  running.set_checkpoint_step(120);
  Report(first, running);
  EXPECT_EQ(c_->Get(id)->checkpoint_step(), 120);
  for (int i = 0; i < 8; ++i) {  // the first worker is cut off
    clock_.Advance(60ms);
    Heartbeat(other);
    c_->Tick();
  }
  v1::Job job = c_->Get(id).value();
  ASSERT_EQ(job.attempt(), 1);
  ASSERT_EQ(job.placements(0).worker(), other);
  const std::string restart = job.events(job.events_size() - 2).reason();
  EXPECT_NE(restart.find("newest checkpoint reported: step 120"), std::string::npos) << restart;

  v1::TaskStatus resumed = Status(id, 1, v1::TASK_RUNNING);
  resumed.set_resumed_step(0);
  Heartbeat(other, {resumed});
  Heartbeat(other, {resumed});  // told once
  job = c_->Get(id).value();
  int told = 0;
  for (const auto& ev : job.events()) {
    if (ev.reason().rfind("attempt 1 ", 0) != 0) continue;
    ++told;
    EXPECT_EQ(ev.reason(), "attempt 1 started from step 0 (no checkpoint); the newest checkpoint reported was step 120");
    EXPECT_EQ(ev.step(), 0);
  }
  EXPECT_EQ(told, 1);
  EXPECT_EQ(job.checkpoint_step(), 0);

  // The cut-off worker comes back: its attempt-0 ranks are told to stop, and its result
  // (with a checkpoint and metrics) is not taken.
  RegisterWorker(first, 1);
  v1::TaskStatus stale = Status(id, 0, v1::TASK_RUNNING);
  stale.set_checkpoint_step(200);
  const HeartbeatReply reply = Heartbeat(first, {stale});
  ASSERT_EQ(reply.stop.size(), 1u);
  EXPECT_EQ(reply.stop[0].attempt(), 0);
  v1::TaskStatus stale_result = Status(id, 0, v1::TASK_SUCCEEDED);
  (*stale_result.mutable_metrics())["val_accuracy"] = 0.5;
  stale_result.set_checkpoint_step(200);
  Report(first, stale_result);
  job = c_->Get(id).value();
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.checkpoint_step(), 0);
  EXPECT_TRUE(job.metrics().empty());
}

// Issue 18, no shared checkpoint root: a job whose ranks all run on one worker has that
// worker's newest checkpoint copied to one other worker, told in its heartbeat replies
// until it reports the step; when the job's worker is lost, the restart goes to the
// worker holding the newest checkpoint, not to the best fit.
TEST_F(CoordinatorTest, AOneWorkerJobsCheckpointIsCopiedToOneOtherWorkerAndItsRestartGoesThere) {
  v1::WorkerInfo w1;
  w1.set_name("w1");
  w1.set_slots(1);
  w1.set_log_address("198.18.0.1:7001");
  ASSERT_TRUE(c_->Register(w1).ok());
  const std::string id = c_->Submit(Spec())->id();
  c_->Tick();
  Report("w1", Status(id, 0, v1::TASK_RUNNING));
  RegisterWorker("w2", 2);
  RegisterWorker("w3", 1);
  auto beat = [&](const std::string& worker, std::vector<v1::TaskStatus> tasks, int64_t held_step) {
    std::vector<v1::HeldCheckpoint> held;
    if (held_step > 0) {
      held.emplace_back().set_job_id(id);
      held.back().set_step(held_step);
      held.back().set_manifest_sha256("manifest-" + std::to_string(held_step));
    }
    auto reply = c_->Heartbeat(worker, tasks, nullptr, held);
    EXPECT_TRUE(reply.ok()) << reply.status().ToString();
    return reply.ok() ? reply->copy_checkpoints : std::vector<v1::CheckpointCopy>{};
  };
  // w1's trainer reports each checkpoint it wrote: what the coordinator records.
  const auto running = [&](int64_t step) {
    v1::TaskStatus s = Status(id, 0, v1::TASK_RUNNING);
    s.set_checkpoint_step(step);
    s.set_checkpoint_manifest_sha256("manifest-" + std::to_string(step));
    return s;
  };
  EXPECT_TRUE(beat("w2", {}, 0).empty()) << "nothing to copy before w1 holds a checkpoint";
  EXPECT_TRUE(beat("w1", {running(40)}, 40).empty());
  EXPECT_TRUE(beat("w3", {}, 0).empty()) << "one copy, on the first worker by name";
  std::vector<v1::CheckpointCopy> told = beat("w2", {}, 0);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].job_id(), id);
  EXPECT_EQ(told[0].step(), 40);
  EXPECT_EQ(told[0].source_worker(), "w1");
  EXPECT_EQ(told[0].source_address(), "198.18.0.1:7001");
  EXPECT_EQ(beat("w2", {}, 0).size(), 1u) << "told again until it holds the step";
  EXPECT_TRUE(beat("w2", {}, 40).empty());
  beat("w1", {running(50)}, 50);  // the next save: the same worker copies it
  EXPECT_TRUE(beat("w3", {}, 0).empty());
  told = beat("w2", {}, 40);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].step(), 50);
  EXPECT_TRUE(beat("w2", {}, 50).empty());

  for (int i = 0; i < 8; ++i) {  // w1 is lost
    clock_.Advance(60ms);
    beat("w2", {}, 50);
    beat("w3", {}, 0);
    c_->Tick();
  }
  const v1::Job job = c_->Get(id).value();
  ASSERT_EQ(job.attempt(), 1);
  ASSERT_EQ(job.placements_size(), 1);
  EXPECT_EQ(job.placements(0).worker(), "w2");  // best fit alone would take one-slot w3
}

// Issue 40: one worker token claiming step 10^9 of another owner's queued job does not
// attract it: the restart goes to the worker that wrote the job's checkpoint, which is
// told the digests it may resume from; the claim is counted once in
// nightshift_checkpoint_claims_ignored_total; the record survives a coordinator restart.
TEST_F(CoordinatorTest, AHugeCheckpointClaimForAnotherOwnersJobDoesNotAttractItAndIsCounted) {
  CoordinatorMetrics metrics;
  options_.observer = &metrics;
  Reopen();
  RegisterWorker("w1", 1);
  const std::string id = c_->Submit(Spec(), "alice")->id();
  c_->Tick();
  std::vector<v1::HeldCheckpoint> held(1);
  held[0].set_job_id(id);
  held[0].set_step(40);
  held[0].set_manifest_sha256("manifest-40");
  v1::TaskStatus running = Status(id, 0, v1::TASK_RUNNING);
  running.set_checkpoint_step(40);
  running.set_checkpoint_manifest_sha256("manifest-40");
  ASSERT_TRUE(c_->Heartbeat("w1", {running}, nullptr, held).ok());
  RegisterWorker("a-attacker", 1);  // first by name, as free as w1
  std::vector<v1::HeldCheckpoint> claim = held;
  claim[0].set_step(1000000000);
  claim[0].set_manifest_sha256("forged");
  ASSERT_TRUE(c_->Heartbeat("a-attacker", {}, nullptr, claim).ok());
  v1::TaskStatus failed = Status(id, 0, v1::TASK_FAILED);
  failed.set_error("rank 0 died");
  ASSERT_TRUE(c_->Heartbeat("w1", {failed}, nullptr, held).ok());  // requeued
  ASSERT_TRUE(c_->Heartbeat("a-attacker", {}, nullptr, claim).ok());
  c_->Tick();
  v1::Job job = c_->Get(id).value();
  ASSERT_EQ(job.attempt(), 1);
  ASSERT_EQ(job.placements_size(), 1);
  EXPECT_EQ(job.placements(0).worker(), "w1");
  auto reply = c_->Heartbeat("w1", {}, nullptr, held);
  ASSERT_TRUE(reply.ok());
  ASSERT_EQ(reply->start.size(), 1u);
  ASSERT_EQ(reply->start[0].verified_checkpoints_size(), 1);
  EXPECT_EQ(reply->start[0].verified_checkpoints(0).step(), 40);
  EXPECT_EQ(reply->start[0].verified_checkpoints(0).manifest_sha256(), "manifest-40");
  EXPECT_FALSE(reply->start[0].has_fetch_checkpoint());  // w1 holds it
  const std::string scraped = ScrapeMetrics(&metrics);
  EXPECT_NE(scraped.find("nightshift_checkpoint_claims_ignored_total 1"), std::string::npos) << scraped;
  c_.reset();  // before the metrics it reports to
  options_.observer = nullptr;
  Reopen();
  job = c_->Get(id).value();
  ASSERT_EQ(job.committed_checkpoints_size(), 1);
  ASSERT_EQ(job.committed_checkpoints(0).holders_size(), 1);
  EXPECT_EQ(job.committed_checkpoints(0).holders(0).worker(), "w1");
}

// After a restart a RUNNING job's worker gets one lease to register again, counted from
// the first tick, not from when the store began loading: a store that loads for longer
// than a lease restarts nothing. Once that lease is over, the worker is gone.
TEST_F(CoordinatorTest, AfterARestartWorkersGetALeaseFromTheFirstTickToRegisterAgain) {
  const std::string id = RunningJobOnW1();
  ASSERT_EQ(StateOf(id), v1::RUNNING);
  Reopen();
  clock_.Advance(std::chrono::milliseconds(600));  // two leases between the store's load and the first tick
  c_->Tick();
  EXPECT_EQ(StateOf(id), v1::RUNNING) << c_->Get(id)->reason();
  EXPECT_EQ(c_->Get(id)->attempt(), 0);
  clock_.Advance(std::chrono::milliseconds(400));  // more than a lease since that tick, and w1 silent
  c_->Tick();
  const v1::Job job = c_->Get(id).value();
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.attempt(), 1);
  const std::string why = job.events(job.events_size() - 1).reason();
  EXPECT_NE(why.find("worker w1 lost"), std::string::npos) << why;
}

// Issue 18: when no worker at all reaches the coordinator (its own host cut off), none is
// declared lost and no job restarts or goes STUCK, for up to outage_grace_seconds; then
// leases expire as usual. One silent worker among others is still lost at once
// (LostWorkerRequeuesItsJob).
TEST_F(CoordinatorTest, WhenNoWorkerReachesTheCoordinatorNoneIsLostUntilTheGraceEnds) {
  options_.outage_grace_seconds = 2;
  Reopen();
  RegisterWorker("w1", 1);
  RegisterWorker("w2", 1);
  const std::string id = c_->Submit(Spec())->id();
  c_->Tick();
  const std::string runs_it = c_->Get(id)->placements(0).worker();
  Heartbeat(runs_it, {Status(id, 0, v1::TASK_RUNNING)});
  ASSERT_EQ(StateOf(id), v1::RUNNING);
  for (int i = 0; i < 25; ++i) {  // 1.5 s of silence from both: five leases
    clock_.Advance(60ms);
    c_->Tick();
  }
  v1::Job job = c_->Get(id).value();
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.attempt(), 0);
  for (const auto& w : c_->ListWorkers()) EXPECT_EQ(w.state(), v1::WORKER_READY) << w.name();
  // Back, one worker after the other: the first ends the outage, and the one running the
  // job, still reconnecting, has a full lease from then, not from its last heartbeat.
  const std::string other = runs_it == "w1" ? "w2" : "w1";
  Heartbeat(other);
  c_->Tick();
  clock_.Advance(200ms);  // < the 300 ms lease
  c_->Tick();
  Heartbeat(runs_it, {Status(id, 0, v1::TASK_RUNNING)});
  c_->Tick();
  EXPECT_EQ(StateOf(id), v1::RUNNING);
  EXPECT_EQ(c_->Get(id)->attempt(), 0);
  // Past the grace (2 s of silence), the leases expire after all.
  for (int i = 0; i < 40; ++i) {
    clock_.Advance(60ms);
    c_->Tick();
  }
  job = c_->Get(id).value();
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_NE(job.events(job.events_size() - 1).reason().find("lost"), std::string::npos)
      << job.events(job.events_size() - 1).reason();
}

TEST_F(CoordinatorTest, JobBiggerThanTheClusterWaitsWithAReason) {
  RegisterWorker("w1", 1);
  const std::string big = c_->Submit(Spec(4))->id();
  const std::string small = c_->Submit(Spec(1))->id();
  c_->Tick();
  EXPECT_EQ(StateOf(big), v1::QUEUED);
  EXPECT_EQ(c_->Get(big)->reason(), "needs 4 slots; the cluster has 1");
  EXPECT_EQ(StateOf(small), v1::SCHEDULED);
}

TEST_F(CoordinatorTest, ListPagesInSubmitOrder) {
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(c_->Submit(Spec()).ok());
  JobQuery query;
  query.limit = 3;
  std::vector<std::string> ids;
  do {
    auto page = c_->List(query);
    ASSERT_TRUE(page.ok());
    for (const auto& j : page->jobs) ids.push_back(j.id());
    query.after_seq = page->next_after_seq;
  } while (query.after_seq != 0);
  ASSERT_EQ(ids.size(), 7u);
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  query.states.insert(v1::SUCCEEDED);
  EXPECT_EQ(c_->List(query)->jobs.size(), 0u);
}

TEST_F(CoordinatorTest, InvalidSpecIsRefusedAndNothingStored) {
  v1::JobSpec spec = Spec();
  spec.mutable_data()->clear_path();
  auto job = c_->Submit(spec);
  EXPECT_EQ(job.status().code(), Status::kInvalidArgument);
  EXPECT_EQ(c_->List(JobQuery())->jobs.size(), 0u);
}

// One job record in RocksDB that does not parse must not keep the coordinator down: it
// starts with the others, the record is moved aside and counted, and ids go on after it.
TEST_F(CoordinatorTest, ACorruptJobRecordIsMovedAsideAndTheCoordinatorStarts) {
  const std::string kept = c_->Submit(Spec())->id();
  const std::string torn = c_->Submit(Spec())->id();
  c_.reset();
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "job/" + torn, std::string("\x0a\xff\xff\xff\xff\xff", 6)).ok());
  }
  CoordinatorMetrics metrics;
  options_.observer = &metrics;
  Reopen();
  ASSERT_NE(c_, nullptr);
  EXPECT_EQ(StateOf(kept), v1::QUEUED);
  EXPECT_EQ(c_->Get(torn).status().code(), Status::kNotFound);
  EXPECT_EQ(c_->Submit(Spec())->id(), "j-000003");
  const std::string scraped = ScrapeMetrics(&metrics);
  EXPECT_NE(scraped.find("nightshift_job_store_corrupt_records_total{kind=\"job\"} 1"), std::string::npos) << scraped;
  c_.reset();  // before the metrics it reports to
  options_.observer = nullptr;
}

// Finished jobs are kept for retain_finished_days on the coordinator's clock, then
// removed from memory and the store; unfinished ones stay however old.
TEST_F(CoordinatorTest, FinishedJobsAreRemovedAfterTheRetentionPeriod) {
  const std::string done = c_->Submit(Spec())->id();
  ASSERT_TRUE(c_->Cancel(done, "").ok());
  const std::string queued = c_->Submit(Spec())->id();
  clock_.Advance(std::chrono::hours(24 * 30 - 1));
  c_->Tick();
  EXPECT_TRUE(c_->Get(done).ok());
  clock_.Advance(std::chrono::hours(2));
  c_->Tick();
  EXPECT_EQ(c_->Get(done).status().code(), Status::kNotFound);
  EXPECT_EQ(StateOf(queued), v1::QUEUED);
  Reopen();  // gone from the store too
  EXPECT_EQ(c_->Get(done).status().code(), Status::kNotFound);
  EXPECT_EQ(c_->List(JobQuery())->jobs.size(), 1u);
}

// With a tracking server (--mlflow-uri), a finished job stays, through retention and
// `job delete`, until its run there is complete (ended, or given up): nobody could end the
// run of a job that is gone.
TEST_F(CoordinatorTest, AFinishedJobStaysUntilItsTrackingRunIsComplete) {
  options_.tracking = true;
  Reopen();
  const std::string ended = c_->Submit(Spec())->id(), given_up = c_->Submit(Spec())->id();
  const std::string waiting = c_->Submit(Spec())->id();
  for (const std::string& id : {ended, given_up, waiting}) ASSERT_TRUE(c_->Cancel(id, "").ok());
  const nightshift::Status refused = c_->Delete(waiting);
  EXPECT_EQ(refused.code(), Status::kFailedPrecondition);
  EXPECT_NE(refused.message().find("MLflow run is not complete"), std::string::npos) << refused.message();
  v1::TrackedRun run;
  run.set_run_id("r1");
  run.set_ended(true);
  ASSERT_TRUE(c_->NoteTracked(ended, run).ok());
  run.set_ended(false);
  run.set_error("INVALID_PARAMETER_VALUE: too long");
  ASSERT_TRUE(c_->NoteTracked(given_up, run).ok());
  EXPECT_TRUE(c_->Delete(ended).ok());
  clock_.Advance(std::chrono::hours(24 * 31));
  c_->Tick();
  EXPECT_EQ(c_->Get(given_up).status().code(), Status::kNotFound);
  EXPECT_TRUE(c_->Get(waiting).ok());  // past the retention period, but its run is not complete
  run.set_error("");
  run.set_ended(true);
  ASSERT_TRUE(c_->NoteTracked(waiting, run).ok());
  c_->Tick();
  EXPECT_EQ(c_->Get(waiting).status().code(), Status::kNotFound);
}

// `job delete`: a finished job goes at once; one that has not finished is refused.
TEST_F(CoordinatorTest, DeleteRemovesAFinishedJobAndRefusesAnUnfinishedOne) {
  const std::string id = RunningJobOnW1();
  nightshift::Status running = c_->Delete(id);
  EXPECT_EQ(running.code(), Status::kFailedPrecondition);
  EXPECT_NE(running.message().find("RUNNING"), std::string::npos) << running.message();
  EXPECT_EQ(StateOf(id), v1::RUNNING);
  ASSERT_TRUE(c_->Cancel(id, "").ok());
  ASSERT_TRUE(c_->Delete(id).ok());
  EXPECT_EQ(c_->Get(id).status().code(), Status::kNotFound);
  EXPECT_EQ(c_->Delete(id).code(), Status::kNotFound);
  Reopen();
  EXPECT_EQ(c_->Get(id).status().code(), Status::kNotFound);
}

// A client cannot grow a job's record with a cancel reason: 3 MiB is refused, naming the
// field, and the job is not cancelled.
TEST_F(CoordinatorTest, AThreeMiBCancelReasonIsRefusedAndCancelsNothing) {
  const std::string id = c_->Submit(Spec())->id();
  auto cancelled = c_->Cancel(id, std::string(3 << 20, 'x'));
  ASSERT_EQ(cancelled.status().code(), Status::kInvalidArgument);
  EXPECT_EQ(cancelled.status().message().rfind("reason: ", 0), 0u) << cancelled.status().message();
  EXPECT_EQ(StateOf(id), v1::QUEUED);
  EXPECT_TRUE(c_->Cancel(id, std::string(limits::kCancelReasonBytes, 'x')).ok());
}

// A worker cannot grow the store through its reports: a 3 MiB error is kept truncated
// (with a marker; the failure itself is taken), a 3 MiB checkpoint path is refused and
// changes nothing, and so is a 3 MiB log address at registration.
TEST_F(CoordinatorTest, AWorkersHugeReportIsTruncatedOrRefusedNotStored) {
  const std::string id = RunningJobOnW1();
  auto huge_path = Status(id, 0, v1::TASK_RUNNING);
  huge_path.set_checkpoint_step(10);
  huge_path.set_checkpoint_path(std::string(3 << 20, 'p'));
  nightshift::Status refused = c_->ReportTask("w1", huge_path);
  EXPECT_EQ(refused.code(), Status::kInvalidArgument);
  EXPECT_EQ(refused.message().rfind("status.checkpoint_path: ", 0), 0u) << refused.message();
  EXPECT_EQ(c_->Heartbeat("w1", {huge_path}).status().code(), Status::kInvalidArgument);
  EXPECT_EQ(c_->Get(id)->checkpoint_step(), 0);

  auto failed = Status(id, 0, v1::TASK_FAILED);
  failed.set_user_error(true);
  failed.set_error("Traceback: " + std::string(3 << 20, 'e'));
  Report("w1", failed);
  const v1::Job job = c_->Get(id).value();
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_LE(job.error().size(), limits::kTaskErrorBytes);
  EXPECT_EQ(job.error().rfind("Traceback: eee", 0), 0u);
  EXPECT_NE(job.error().find(limits::kTruncatedMarker), std::string::npos);
  EXPECT_LT(job.ByteSizeLong(), 4 * limits::kTaskErrorBytes);  // the whole record stays small

  v1::WorkerInfo phantom;
  phantom.set_name("w2");
  phantom.set_slots(1);
  phantom.set_log_address(std::string(3 << 20, 'a'));
  nightshift::Status registered = c_->Register(phantom).status();
  EXPECT_EQ(registered.code(), Status::kInvalidArgument);
  EXPECT_EQ(registered.message().rfind("log_address: ", 0), 0u) << registered.message();
  EXPECT_EQ(c_->ListWorkers().size(), 1u);
}

// Bob's priority is his own business: his urgent job waits behind alice's running one
// at priority 0, and preempts his own instead once he has one running.
TEST_F(CoordinatorTest, AUsersHighPriorityPreemptsTheirOwnJobsNotAnotherUsers) {
  RegisterWorker("w1", 1);
  RegisterWorker("w2", 1);
  const std::string alices = c_->Submit(Spec(), "alice")->id();
  c_->Tick();
  Heartbeat("w1");
  Report("w1", Status(alices, 0, v1::TASK_RUNNING));
  const std::string bobs = c_->Submit(Spec(), "bob")->id();
  c_->Tick();
  Heartbeat("w2");
  Report("w2", Status(bobs, 0, v1::TASK_RUNNING));
  ASSERT_EQ(StateOf(alices), v1::RUNNING);
  ASSERT_EQ(StateOf(bobs), v1::RUNNING);
  v1::JobSpec urgent = Spec(2);
  urgent.set_priority(100);
  const std::string bobs_urgent = c_->Submit(urgent, "bob")->id();
  c_->Tick();
  EXPECT_EQ(StateOf(alices), v1::RUNNING);
  EXPECT_EQ(StateOf(bobs), v1::RUNNING);  // one slot would not do: nobody is preempted
  EXPECT_EQ(StateOf(bobs_urgent), v1::QUEUED);
  v1::JobSpec urgent_one = Spec(1);
  urgent_one.set_priority(100);
  const std::string bobs_small = c_->Submit(urgent_one, "bob")->id();
  c_->Cancel(bobs_urgent, "too big");
  c_->Tick();
  EXPECT_EQ(StateOf(alices), v1::RUNNING);
  EXPECT_EQ(StateOf(bobs), v1::PREEMPTED);
  EXPECT_NE(c_->Get(bobs)->reason().find("preempted by " + bobs_small), std::string::npos);
}

TEST_F(CoordinatorTest, HigherPriorityPreemptsAndTheVictimResumesWithoutARestart) {
  RegisterWorker("w1", 2);
  const std::string low = c_->Submit(Spec(2))->id();
  c_->Tick();
  Heartbeat("w1");
  Report("w1", Status(low, 0, v1::TASK_RUNNING));
  ASSERT_EQ(StateOf(low), v1::RUNNING);
  v1::JobSpec spec = Spec(2);
  spec.set_priority(10);
  const std::string high = c_->Submit(spec)->id();
  c_->Tick();
  EXPECT_EQ(StateOf(low), v1::PREEMPTED);
  EXPECT_NE(c_->Get(low)->reason().find("preempted by " + high), std::string::npos);
  EXPECT_EQ(StateOf(high), v1::QUEUED);  // the slots are still held until low stops
  c_->Tick();
  EXPECT_EQ(StateOf(high), v1::QUEUED);
  // The worker is told to stop it (SIGTERM: checkpoint, exit), without a stack dump.
  auto resp = Heartbeat("w1", {Status(low, 0, v1::TASK_RUNNING)});
  ASSERT_EQ(resp.stop.size(), 1u);
  EXPECT_EQ(resp.dump_stacks.size(), 0u);
  auto stopped = Status(low, 0, v1::TASK_FAILED);
  stopped.set_error("trainer rank 0 exited with status 143");
  stopped.set_checkpoint_step(42);
  Report("w1", stopped);
  auto job = c_->Get(low).value();
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.restarts(), 0);  // not a failure
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.events(job.events_size() - 1).step(), 42);  // resumes from its checkpoint
  c_->Tick();
  EXPECT_EQ(StateOf(high), v1::SCHEDULED);
  EXPECT_EQ(StateOf(low), v1::QUEUED);
  // When the high-priority job ends, the victim runs again.
  Heartbeat("w1");
  Report("w1", Status(high, 0, v1::TASK_SUCCEEDED));
  c_->Tick();
  EXPECT_EQ(StateOf(low), v1::SCHEDULED);
}

TEST_F(CoordinatorTest, HungJobIsStuckThenRestarted) {
  RegisterWorker("w1", 1);
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_restart()->set_hang_seconds(1);
  const std::string id = c_->Submit(spec)->id();
  c_->Tick();
  Heartbeat("w1");
  auto running = Status(id, 0, v1::TASK_RUNNING);
  running.mutable_progress()->set_step(5);
  Report("w1", running);
  ASSERT_EQ(StateOf(id), v1::RUNNING);
  for (int i = 0; i < 8; ++i) {  // progress stays at step 5
    clock_.Advance(100ms);
    Heartbeat("w1", {running});
    c_->Tick();
  }
  EXPECT_EQ(StateOf(id), v1::RUNNING);
  for (int i = 0; i < 6; ++i) {
    clock_.Advance(100ms);
    Heartbeat("w1", {running});
    c_->Tick();
  }
  ASSERT_EQ(StateOf(id), v1::STUCK);
  EXPECT_NE(c_->Get(id)->reason().find("at step 5"), std::string::npos);
  auto resp = Heartbeat("w1", {running});
  ASSERT_EQ(resp.stop.size(), 1u);
  ASSERT_EQ(resp.dump_stacks.size(), 1u);
  Report("w1", Status(id, 0, v1::TASK_FAILED));
  auto job = c_->Get(id).value();
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.restarts(), 1);
}

TEST_F(CoordinatorTest, DrainMovesJobsAndCordonKeepsNewWorkAway) {
  const std::string id = RunningJobOnW1();
  RegisterWorker("w2", 1);
  auto info = c_->Drain("w1");
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->cordoned());
  EXPECT_EQ(StateOf(id), v1::PREEMPTED);
  // The worker no longer lists the task: it is gone; the job goes to w2.
  Heartbeat("w1");
  EXPECT_EQ(StateOf(id), v1::QUEUED);
  c_->Tick();
  ASSERT_EQ(StateOf(id), v1::SCHEDULED);
  EXPECT_EQ(c_->Get(id)->placements(0).worker(), "w2");
  EXPECT_EQ(c_->Get(id)->restarts(), 0);
  // Cordoned w1 gets nothing new; uncordoned, it does.
  const std::string next = c_->Submit(Spec())->id();
  c_->Tick();
  EXPECT_EQ(StateOf(next), v1::QUEUED);
  ASSERT_TRUE(c_->Cordon("w1", /*uncordon=*/true).ok());
  c_->Tick();
  EXPECT_EQ(StateOf(next), v1::SCHEDULED);
  EXPECT_EQ(c_->Cordon("nope", false).status().code(), Status::kNotFound);
}

// Restart backoff on the clock: restart_backoff_seconds before the first restart, then
// twice that before the second.
// A restarted attempt replays the steps after its checkpoint: its progress is the job's
// progress (not the dead attempt's higher step), and replaying counts as advancing, so
// a healthy resumed job is not taken for hung.
TEST_F(CoordinatorTest, ARestartedAttemptsReplayIsItsProgressAndNotAHang) {
  options_.lease_seconds = 600;
  Reopen();
  RegisterWorker("w1", 1);
  v1::JobSpec spec = Spec(1, 2);
  spec.mutable_restart()->set_hang_seconds(1);
  const std::string id = c_->Submit(spec)->id();
  c_->Tick();
  Heartbeat("w1");
  auto first = Status(id, 0, v1::TASK_RUNNING);
  first.mutable_progress()->set_step(120);
  first.set_checkpoint_step(100);
  Report("w1", first);
  Report("w1", Status(id, 0, v1::TASK_FAILED));
  ASSERT_EQ(StateOf(id), v1::QUEUED);
  c_->Tick();
  Heartbeat("w1");
  for (int step = 101; step <= 115; ++step) {  // 1.5 s of replay, 0.1 s a step
    auto replay = Status(id, 1, v1::TASK_RUNNING);
    replay.mutable_progress()->set_step(step);
    replay.set_checkpoint_step(100);
    Heartbeat("w1", {replay});
    Report("w1", replay);
    EXPECT_EQ(c_->Get(id)->progress().step(), step) << "the new attempt's step, not the lost 120";
    clock_.Advance(100ms);
    c_->Tick();
    ASSERT_EQ(StateOf(id), v1::RUNNING) << "at step " << step << ": " << c_->Get(id)->reason();
  }
}

TEST_F(CoordinatorTest, RestartsWaitForTheirBackoff) {
  options_.lease_seconds = 600;  // the worker stays alive while time jumps
  options_.restart_backoff_seconds = 10;
  Reopen();
  RegisterWorker("w1", 1);
  const std::string id = c_->Submit(Spec(1, /*max_restarts=*/2))->id();
  c_->Tick();
  for (int attempt = 0; attempt < 2; ++attempt) {
    ASSERT_EQ(StateOf(id), v1::SCHEDULED) << attempt;
    Heartbeat("w1");
    Report("w1", Status(id, attempt, v1::TASK_FAILED));
    ASSERT_EQ(StateOf(id), v1::QUEUED) << attempt;
    const auto backoff = attempt == 0 ? 10s : 20s;
    clock_.Advance(backoff - 1ms);
    c_->Tick();
    EXPECT_EQ(StateOf(id), v1::QUEUED) << attempt;
    clock_.Advance(1ms);
    Heartbeat("w1");  // alive: a worker silent for two heartbeats gets no new work
    c_->Tick();
  }
  EXPECT_EQ(StateOf(id), v1::SCHEDULED);
  EXPECT_EQ(c_->Get(id)->restarts(), 2);
}

// A late worker (silent for three of its usual heartbeat gaps, two heartbeats at least)
// is not lost yet (the lease is long here) but gets no new work: a restart after its
// peer's worker died must not go back to it.
TEST_F(CoordinatorTest, ALateWorkerGetsNoNewWork) {
  options_.lease_seconds = 600;
  Reopen();
  RegisterWorker("w1", 4);  // best fit would pick w2 (one slot)
  RegisterWorker("w2", 1);
  for (int i = 0; i < 4; ++i) {  // both heartbeat every 250 ms
    clock_.Advance(250ms);
    Heartbeat("w1");
    Heartbeat("w2");
  }
  clock_.Advance(900ms);  // w2 misses three
  Heartbeat("w1");
  const std::string id = c_->Submit(Spec())->id();
  c_->Tick();
  ASSERT_EQ(StateOf(id), v1::SCHEDULED);
  EXPECT_EQ(c_->Get(id)->placements(0).worker(), "w1");
  const std::string second = c_->Submit(Spec())->id();
  clock_.Advance(1200ms);  // now both are late
  c_->Tick();
  EXPECT_EQ(StateOf(second), v1::QUEUED);
  Heartbeat("w2");
  c_->Tick();
  EXPECT_EQ(StateOf(second), v1::SCHEDULED);
  EXPECT_EQ(c_->Get(second)->placements(0).worker(), "w2");
}

// A preempted job whose worker keeps its ranks alive is requeued anyway once
// stop_timeout_seconds have passed.
TEST_F(CoordinatorTest, AStopThatTakesTooLongIsRequeuedAtTheStopTimeout) {
  options_.lease_seconds = 600;
  options_.stop_timeout_seconds = 60;
  Reopen();
  const std::string id = RunningJobOnW1();
  ASSERT_TRUE(c_->Drain("w1").ok());
  ASSERT_EQ(StateOf(id), v1::PREEMPTED);
  const auto running = Status(id, 0, v1::TASK_RUNNING);
  EXPECT_EQ(Heartbeat("w1", {running}).stop.size(), 1u);
  clock_.Advance(60s);
  c_->Tick();
  EXPECT_EQ(StateOf(id), v1::PREEMPTED);
  clock_.Advance(1ms);
  c_->Tick();
  auto job = c_->Get(id).value();
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 0);
}

// The training curve stays within kMaxTrainPoints however long the run: when full every
// second point goes and the stride doubles, so the first and the latest steps stay.
TEST(MetricHistoryTest, DownsamplesToAFewHundredPointsSpanningTheRun) {
  v1::JobMetrics m;
  for (int step = 1; step <= 10000; ++step) {
    v1::Progress p;
    p.set_step(step);
    p.set_loss(10.0 / step);
    AddTrainPoint(0, p, 1000, &m);
  }
  ASSERT_EQ(m.attempts_size(), 1);
  const v1::AttemptMetrics& a = m.attempts(0);
  EXPECT_LE(a.train_size(), kMaxTrainPoints);
  EXPECT_GE(a.train_size(), kMaxTrainPoints / 2);
  EXPECT_EQ(a.train(0).step(), 1);
  EXPECT_EQ(a.train(0).time_ms(), 1000);
  EXPECT_GE(a.train(a.train_size() - 1).step(), 10000 - a.stride());
  for (int i = 1; i < a.train_size(); ++i) EXPECT_GT(a.train(i).step(), a.train(i - 1).step());
  // The same step again (a report repeated) and step 0 ("start") add nothing.
  v1::Progress again = v1::Progress();
  again.set_step(a.train(a.train_size() - 1).step());
  EXPECT_FALSE(AddTrainPoint(0, again, 1000, &m));
  EXPECT_FALSE(AddTrainPoint(1, v1::Progress(), 1000, &m));
}

TEST(MetricHistoryTest, EvalsAreAddedOncePerStepAndAttemptsStayInOrder) {
  v1::JobMetrics m;
  google::protobuf::RepeatedPtrField<v1::EvalPoint> evals;
  for (int i = 1; i <= 2; ++i) {
    v1::EvalPoint* e = evals.Add();
    e->set_step(10 * i);
    e->set_epoch(i - 1);
    (*e->mutable_metrics())["val_accuracy"] = 0.5 + i / 10.0;
  }
  EXPECT_TRUE(AddEvals(1, evals, 1000, &m));
  EXPECT_FALSE(AddEvals(1, evals, 1000, &m));  // the worker reports all of them every time
  EXPECT_TRUE(AddEvals(0, evals, 1000, &m));
  ASSERT_EQ(m.attempts_size(), 2);
  EXPECT_EQ(m.attempts(0).attempt(), 0);
  EXPECT_EQ(m.attempts(1).attempt(), 1);
  EXPECT_EQ(m.attempts(1).evals_size(), 2);
  EXPECT_EQ(m.attempts(1).evals(1).time_ms(), 1000);  // the tracking server's timestamp
}

// What rank 0's worker reports becomes the job's history, kept per attempt, apart from
// the Job record, and there after a restart of the coordinator over the same store.
TEST_F(CoordinatorTest, MetricHistoryIsKeptPerAttemptAndSurvivesARestart) {
  const std::string id = c_->Submit(Spec(1, 2))->id();
  RegisterWorker("w1", 1);
  c_->Tick();
  Heartbeat("w1");
  for (int step = 1; step <= 30; ++step) {
    auto s = Status(id, 0, v1::TASK_RUNNING);
    s.mutable_progress()->set_step(step);
    s.mutable_progress()->set_loss(3.0 / step);
    s.mutable_progress()->set_lr(0.001);
    s.mutable_progress()->set_tokens_per_second(1000 + step);
    if (step >= 10) {
      v1::EvalPoint* e = s.add_evals();
      e->set_step(10);
      (*e->mutable_metrics())["val_loss"] = 0.7;
    }
    if (step >= 20) {
      v1::EvalPoint* e = s.add_evals();
      e->set_step(20);
      e->set_epoch(1);
      (*e->mutable_metrics())["val_loss"] = 0.5;
    }
    Report("w1", s);
  }
  // The attempt fails; the next one reports from its checkpoint.
  auto failed = Status(id, 0, v1::TASK_FAILED);
  failed.set_error("rank 0 exited with 1");
  Report("w1", failed);
  clock_.Advance(10ms);
  c_->Tick();
  Heartbeat("w1");
  ASSERT_EQ(c_->Get(id)->attempt(), 1);
  auto resumed = Status(id, 1, v1::TASK_RUNNING);
  resumed.mutable_progress()->set_step(21);
  resumed.mutable_progress()->set_loss(0.2);
  Report("w1", resumed);
  EXPECT_FALSE(c_->Get(id)->has_model());

  Reopen();
  auto m = c_->Metrics(id);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->attempts_size(), 2);
  const v1::AttemptMetrics& first = m->attempts(0);
  EXPECT_EQ(first.train_size(), 30);
  EXPECT_DOUBLE_EQ(first.train(29).loss(), 0.1);
  EXPECT_DOUBLE_EQ(first.train(29).tokens_per_second(), 1030);
  ASSERT_EQ(first.evals_size(), 2);
  EXPECT_EQ(first.evals(1).step(), 20);
  EXPECT_DOUBLE_EQ(first.evals(1).metrics().at("val_loss"), 0.5);
  EXPECT_EQ(m->attempts(1).attempt(), 1);
  EXPECT_EQ(m->attempts(1).train_size(), 1);
  EXPECT_EQ(c_->Metrics("j-999999").status().code(), Status::kNotFound);
}

TEST_F(CoordinatorTest, TheModelIsWhereRankZerosWorkerReportedIt) {
  const std::string id = c_->Submit(Spec(1))->id();
  auto none = c_->ModelOf(id);
  EXPECT_EQ(none.status().code(), Status::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("QUEUED"), std::string::npos) << none.status().message();
  v1::WorkerInfo w1;
  w1.set_name("w1");
  w1.set_slots(1);
  w1.set_log_address("127.0.0.1:1234");
  ASSERT_TRUE(c_->Register(w1).ok());
  c_->Tick();
  Heartbeat("w1");
  auto done = Status(id, 0, v1::TASK_SUCCEEDED);
  done.set_model_path("/ckpt/" + id + "/model");
  done.set_model_step(40);
  Report("w1", done);
  ASSERT_EQ(StateOf(id), v1::SUCCEEDED);
  Reopen();  // the location is in the Job record
  auto job = c_->Get(id);
  EXPECT_EQ(job->model().worker(), "w1");
  EXPECT_EQ(job->model().path(), "/ckpt/" + id + "/model");
  EXPECT_EQ(job->model().step(), 40);
  // After the restart w1 has not registered again: gone, and the error names it.
  auto where = c_->ModelOf(id);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->worker_error.code(), Status::kUnavailable);
  EXPECT_NE(where->worker_error.message().find("worker w1"), std::string::npos);
  ASSERT_TRUE(c_->Register(w1).ok());
  where = c_->ModelOf(id);
  ASSERT_TRUE(where.ok());
  EXPECT_EQ(where->worker_address, "127.0.0.1:1234");
  // Another step: a kept checkpoint, which that worker exports on request.
  auto at30 = c_->ModelOf(id, 30);
  ASSERT_TRUE(at30.ok());
  EXPECT_EQ(at30->model.step(), 30);
  EXPECT_EQ(at30->worker_address, "127.0.0.1:1234");
  EXPECT_TRUE(c_->ModelOf(id, 40).ok());
  // A job with no checkpoint reported has none to export.
  const std::string queued = c_->Submit(Spec(1))->id();
  auto none_yet = c_->ModelOf(queued, 30);
  EXPECT_EQ(none_yet.status().code(), Status::kFailedPrecondition);
  EXPECT_NE(none_yet.status().message().find("no checkpoint yet"), std::string::npos) << none_yet.status().message();
}

}  // namespace
}  // namespace nightshift
