// The agent's logic through a fake coordinator: registration, heartbeats, cache orders,
// assignments, stops and the re-sending of results. Tasks are real; their trainer is a
// /bin/sh script that sleeps at most 30 s and is stopped well before.
#include "worker/agent.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <future>
#include <thread>

#include "common/format/checkpoint_layout.h"
#include "common/format/progress.h"
#include "common/crypto/sha256.h"
#include "tests/worker/fake_coordinator_client.h"
#include "tests/worker/test_dirs.h"
#include "worker/assignment.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

class AgentTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testdirs::FreshTestDir("agent");
    data_ = dir_ + "-data";  // outside the work dir: a job reads nothing inside the worker's own folders
    fs::remove_all(data_);
    testdirs::WriteTinyCorpus(data_, 2);
    auto cache = FeatureCache::Open({dir_ + "/cache", 0});
    ASSERT_TRUE(cache.ok()) << cache.status().ToString();
    cache_ = std::move(cache.value());
    options_.name = "w1";
    options_.coordinator = "fake";
    options_.work_dir = dir_;
    options_.cpu_slots = 2;
    options_.log_address = "127.0.0.1:7000";
    options_.data_roots = {"/"};  // what --allow-any-path gives: the test's data is in a temporary folder
    options_.stop_grace_seconds = 5;
  }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove_all(data_);
  }

  std::unique_ptr<Agent> NewAgent() {
    auto fake = std::make_unique<FakeCoordinatorClient>();
    fake_ = fake.get();
    return std::make_unique<Agent>(options_, cache_.get(), std::move(fake));
  }
  // An assignment of job `job_id`'s `ranks` ranks (all here) on the test's corpus.
  v1::Assignment Assignment(const std::string& job_id, int ranks = 1) const {
    v1::Assignment a;
    a.mutable_task()->set_job_id(job_id);
    a.set_first_rank(0);
    a.set_num_ranks(ranks);
    a.set_world_size(ranks);
    a.mutable_spec()->mutable_data()->set_path(data_);
    a.mutable_spec()->mutable_data()->set_format("text_dir");
    return a;
  }
  // A new agent, registered, whose next `times` heartbeats' answers start `a`.
  std::unique_ptr<Agent> AgentAssigned(const v1::Assignment& a, int times = 1) {
    auto agent = NewAgent();
    agent->RunOnce();
    v1::HeartbeatResponse start;
    *start.add_start() = a;
    fake_->heartbeat_responses.assign(times, start);
    return agent;
  }
  // Turns of the agent until `done` holds, for at most 20 s.
  static bool RunUntil(Agent* agent, const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      agent->RunOnce();
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // A complete cache entry for `options`, as a build would leave it; returns its key.
  std::string CacheEntryFor(const PrepOptions& options) {
    auto key = cache_->KeyFor(options);
    EXPECT_TRUE(key.ok()) << key.status().ToString();
    bool hit = false;
    auto lease = cache_->Acquire(
        key.value(), options.path,
        [](const std::string& out) {
          fs::create_directories(out);
          std::ofstream(out + "/train.shard") << "shard";
          std::ofstream(out + "/meta.json") << R"({"vocab_size": 100, "train_samples": 3, "val_samples": 1})";
          return Status::OK();
        },
        &hit);
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    return key.value();
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_, data_;
  WorkerOptions options_;
  std::unique_ptr<FeatureCache> cache_;
  FakeCoordinatorClient* fake_ = nullptr;  // owned by the agent
};

TEST_F(AgentTest, RegistersUntilItCanAndAgainWhenTheCoordinatorForgetsIt) {
  options_.memory_bytes = int64_t{12} << 30;
  auto agent = NewAgent();
  fake_->register_statuses = {Status::Unavailable("coordinator down")};
  agent->RunOnce();
  agent->RunOnce();
  ASSERT_EQ(fake_->registers.size(), 2u);
  EXPECT_TRUE(fake_->heartbeats.empty());  // no heartbeat before a registration succeeds
  EXPECT_EQ(fake_->registers[1].name(), "w1");
  EXPECT_EQ(fake_->registers[1].slots(), 2);
  EXPECT_EQ(fake_->registers[1].memory_bytes(), int64_t{12} << 30);
  EXPECT_EQ(fake_->registers[1].log_address(), "127.0.0.1:7000");

  agent->RunOnce();
  agent->RunOnce();
  ASSERT_EQ(fake_->heartbeats.size(), 2u);
  EXPECT_EQ(fake_->heartbeats[0].name(), "w1");
  EXPECT_TRUE(fake_->heartbeats[0].has_cache());   // the first carries the cache report
  EXPECT_FALSE(fake_->heartbeats[1].has_cache());  // unchanged: not again within 30 s

  fake_->heartbeat_statuses = {Status::Unavailable("timeout")};
  agent->RunOnce();  // a lost heartbeat keeps the registration
  agent->RunOnce();
  EXPECT_EQ(fake_->registers.size(), 2u);
  fake_->heartbeat_statuses = {Status::NotFound("unknown worker w1")};
  agent->RunOnce();  // the coordinator restarted and does not know us
  agent->RunOnce();
  EXPECT_EQ(fake_->registers.size(), 3u);
  EXPECT_EQ(fake_->heartbeats.size(), 5u);
}

// A worker of a cluster allocation registers under its job and attempt, and Run returns
// by itself once the coordinator releases it (the attempt is over), with no stop asked.
// An ordinary worker ignores a release.
TEST_F(AgentTest, AWorkerOfAnAllocationRegistersUnderItAndEndsWhenReleased) {
  options_.allocation.set_job_id("job-7");
  options_.allocation.set_attempt(2);
  options_.allocation.set_cluster_id("1234");
  auto agent = NewAgent();
  v1::HeartbeatResponse release;
  release.set_release(true);
  fake_->heartbeat_responses = {v1::HeartbeatResponse(), release};
  std::atomic<bool> stop{false};
  auto run = std::async(std::launch::async, [&] { agent->Run(&stop); });
  const bool returned = run.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  stop = true;  // (only if it did not return by itself)
  run.wait();
  EXPECT_TRUE(returned) << "Run did not end when released";
  EXPECT_TRUE(agent->released());
  ASSERT_FALSE(fake_->registers.empty());
  EXPECT_EQ(fake_->registers[0].allocation().job_id(), "job-7");
  EXPECT_EQ(fake_->registers[0].allocation().attempt(), 2);
  EXPECT_EQ(fake_->registers[0].allocation().cluster_id(), "1234");
  EXPECT_EQ(fake_->heartbeats.size(), 2u);

  options_.allocation.Clear();
  auto ordinary = NewAgent();
  fake_->heartbeat_responses = {release};
  ordinary->RunOnce();
  ordinary->RunOnce();
  EXPECT_FALSE(ordinary->released());
  EXPECT_FALSE(fake_->registers[0].has_allocation());
}

// The coordinator's lease sets how long each call may take: half of it, 1 to 30 s, so a
// call stuck on a slow link ends while a later heartbeat can still keep the lease.
TEST_F(AgentTest, CallsWaitAtMostHalfTheCoordinatorsLease) {
  auto agent = NewAgent();
  fake_->register_response.set_lease_ms(5000);
  agent->RunOnce();
  EXPECT_EQ(fake_->deadline, std::chrono::milliseconds(2500));
  EXPECT_EQ(CallDeadline(600), std::chrono::milliseconds(1000));
  EXPECT_EQ(CallDeadline(600000), std::chrono::milliseconds(30000));
}

TEST_F(AgentTest, CacheEvictionsAreCarriedOutAndTheNextHeartbeatReportsThem) {
  PrepOptions a, b;
  a.path = b.path = data_;
  b.vocab_size = a.vocab_size + 1;
  const std::string key_a = CacheEntryFor(a), key_b = CacheEntryFor(b);
  ASSERT_NE(key_a, key_b);
  auto agent = NewAgent();
  agent->RunOnce();  // registers
  v1::HeartbeatResponse evict_a, evict_all;
  evict_a.add_evict_cache_keys(key_a);
  evict_all.set_evict_cache_all(true);
  fake_->heartbeat_responses = {evict_a, {}, evict_all, {}};

  agent->RunOnce();
  EXPECT_EQ(fake_->heartbeats[0].cache().entries_size(), 2);
  ASSERT_EQ(cache_->Report().entries_size(), 1);
  EXPECT_EQ(cache_->Report().entries(0).key(), key_b);
  agent->RunOnce();
  ASSERT_TRUE(fake_->heartbeats[1].has_cache());  // it changed: sent at once
  ASSERT_EQ(fake_->heartbeats[1].cache().entries_size(), 1);
  EXPECT_EQ(fake_->heartbeats[1].cache().entries(0).key(), key_b);
  agent->RunOnce();
  EXPECT_EQ(cache_->Report().entries_size(), 0);
  agent->RunOnce();
  ASSERT_TRUE(fake_->heartbeats[3].has_cache());
  EXPECT_EQ(fake_->heartbeats[3].cache().entries_size(), 0);
}

// The coordinator may be restarting when a task ends: the result is sent again every
// turn, and the task heartbeated, until a report of it is acknowledged.
TEST_F(AgentTest, AResultIsResentUntilAcknowledged) {
  auto agent = NewAgent();
  agent->RunOnce();
  v1::HeartbeatResponse start;
  v1::Assignment* a = start.add_start();
  a->mutable_task()->set_job_id("../escape");  // refused at once (a user error)
  a->set_num_ranks(1);
  a->set_world_size(1);
  fake_->heartbeat_responses = {start};
  fake_->report_statuses = {Status::Unavailable("restarting"), Status::Unavailable("restarting")};
  ASSERT_TRUE(RunUntil(agent.get(), [&] {
    return fake_->reports.size() >= 3 && fake_->heartbeats.back().tasks_size() == 0;
  }));
  for (const v1::ReportTaskRequest& r : fake_->reports) {
    EXPECT_EQ(r.name(), "w1");
    EXPECT_EQ(r.status().task().job_id(), "../escape");
    EXPECT_EQ(r.status().state(), v1::TASK_FAILED);
    EXPECT_TRUE(r.status().user_error());
    EXPECT_NE(r.status().error().find("not a plain name"), std::string::npos) << r.status().error();
  }
  int heartbeated_failed = 0;
  for (const v1::HeartbeatRequest& h : fake_->heartbeats)
    heartbeated_failed += h.tasks_size() == 1 && h.tasks(0).state() == v1::TASK_FAILED;
  EXPECT_GE(heartbeated_failed, 2);  // held while its report was refused
  const size_t reports = fake_->reports.size();
  agent->RunOnce();
  agent->RunOnce();
  EXPECT_EQ(fake_->reports.size(), reports);  // acknowledged: let go
}

// The coordinator repeats an assignment until the worker reports it: one task, one
// process per rank. A stop in a heartbeat answer reaches every rank (SIGTERM).
TEST_F(AgentTest, ARepeatedAssignmentStartsOnceAndAStopReachesItsRanks) {
  v1::Assignment a = Assignment("job-1", 2);
  CacheEntryFor(PrepOptionsFor(a.spec(), options_.data_roots));  // no nightshift-prepare needed
  const std::string ranks_file = dir_ + "/ranks";
  options_.trainer_path = dir_ + "/fake-trainer";
  std::ofstream(options_.trainer_path) << "#!/bin/sh\n"
                                       << "trap 'echo stopped $RANK >> " << ranks_file << "; exit 0' TERM\n"
                                       << "echo started $RANK >> " << ranks_file << "\n"
                                       << "echo '{\"event\":\"start\",\"total_steps\":10}' >&3\n"
                                       << "echo '{\"event\":\"step\",\"step\":1,\"loss\":2.5}' >&3\n"
                                       << "sleep 30 &\nwait\n";
  ::chmod(options_.trainer_path.c_str(), 0755);

  auto agent = AgentAssigned(a, 3);
  auto running_at_step_1 = [&] {
    for (const auto& r : fake_->reports)
      if (r.status().state() == v1::TASK_RUNNING && r.status().progress().step() == 1) return true;
    return false;
  };
  auto both_started = [&] {  // and so ready for SIGTERM: each set its trap first
    const std::string ranks = Read(ranks_file);
    return ranks.find("started 0\n") != std::string::npos && ranks.find("started 1\n") != std::string::npos;
  };
  ASSERT_TRUE(RunUntil(agent.get(), [&] { return running_at_step_1() && both_started(); })) << Read(ranks_file);
  EXPECT_TRUE(agent->IsRunning("job-1"));
  const v1::TaskStatus& running = fake_->reports.back().status();
  EXPECT_TRUE(running.cache_hit());
  EXPECT_EQ(running.master_addr().rfind("127.0.0.1:", 0), 0u) << running.master_addr();

  v1::HeartbeatResponse stop;
  stop.add_stop()->set_job_id("job-1");
  fake_->heartbeat_responses.push_back(stop);
  ASSERT_TRUE(RunUntil(agent.get(), [&] { return !agent->IsRunning("job-1"); }));
  const std::string ranks = Read(ranks_file);
  for (const char* line : {"started 0\n", "started 1\n", "stopped 0\n", "stopped 1\n"}) {
    const size_t at = ranks.find(line);
    EXPECT_NE(at, std::string::npos) << line << " in\n" << ranks;
    EXPECT_EQ(ranks.find(line, at + 1), std::string::npos) << line << " twice in\n" << ranks;
  }
  // Ranks that exit 0 on SIGTERM (they checkpointed) end the task SUCCEEDED.
  ASSERT_TRUE(RunUntil(agent.get(), [&] { return fake_->reports.back().status().state() == v1::TASK_SUCCEEDED; }));
}

// A worker of a cluster allocation that the cluster stops (its time limit's or a
// preemption's SIGTERM) reports its task once more after the ranks stopped: the checkpoint
// they wrote while stopping reaches the coordinator before the worker exits (a time slice
// is judged by it), as RUNNING: the ranks' exit 143 is the cluster's stop, and the
// allocation's end says how the attempt ended.
TEST_F(AgentTest, AnAllocationWorkerStoppedByTheClusterReportsTheCheckpointWrittenWhileStopping) {
  options_.allocation.set_job_id("job-1");
  options_.allocation.set_cluster_id("100");
  v1::Assignment a = Assignment("job-1");
  CacheEntryFor(PrepOptionsFor(a.spec(), options_.data_roots));
  options_.trainer_path = dir_ + "/fake-trainer";
  std::ofstream(options_.trainer_path) << "#!/bin/sh\n"
                                       << "trap 'echo \"{\\\"event\\\":\\\"checkpoint\\\",\\\"step\\\":7}\" >&3; exit 143' TERM\n"
                                       << "echo '{\"event\":\"start\",\"total_steps\":10}' >&3\n"
                                       << "echo '{\"event\":\"step\",\"step\":5,\"loss\":2.5}' >&3\n"
                                       << "sleep 30 &\nwait\n";
  ::chmod(options_.trainer_path.c_str(), 0755);
  auto agent = AgentAssigned(a);
  ASSERT_TRUE(RunUntil(agent.get(), [&] {
    return !fake_->reports.empty() && fake_->reports.back().status().progress().step() == 5;
  }));
  const std::atomic<bool> stop{true};  // SIGTERM to the worker
  agent->Run(&stop);
  const v1::TaskStatus& last = fake_->reports.back().status();
  EXPECT_EQ(last.state(), v1::TASK_RUNNING);
  EXPECT_EQ(last.checkpoint_step(), 7);
  EXPECT_FALSE(agent->IsRunning("job-1"));
}

// Issue 45: an evaluation goes to the coordinator at once, not at the next interval (an
// ASHA sweep judges trials by them, and a trial it pauses trains on until its stop comes
// back), and a heartbeat follows kFollowUp later to fetch the decision; then the agent is
// back to its interval.
TEST_F(AgentTest, AnEvaluationIsSentAtOnceAndItsAnswerFetchedSoonAfter) {
  v1::Assignment a = Assignment("job-1");
  CacheEntryFor(PrepOptionsFor(a.spec(), options_.data_roots));
  const std::string go = dir_ + "/go";
  options_.trainer_path = dir_ + "/fake-trainer";
  std::ofstream(options_.trainer_path) << "#!/bin/sh\n"
                                       << "trap 'exit 0' TERM\n"
                                       << "echo '{\"event\":\"start\",\"total_steps\":10}' >&3\n"
                                       << "echo '{\"event\":\"step\",\"step\":1,\"loss\":2.5}' >&3\n"
                                       << "while [ ! -e " << go << "1 ]; do sleep 0.02; done\n"
                                       << "echo '{\"event\":\"eval\",\"step\":1,\"val_loss\":0.5}' >&3\n"
                                       << "while [ ! -e " << go << "2 ]; do sleep 0.02; done\n"
                                       << "echo '{\"event\":\"eval\",\"step\":1,\"val_loss\":0.4}' >&3\n"
                                       << "sleep 30 &\nwait\n";
  ::chmod(options_.trainer_path.c_str(), 0755);
  auto agent = AgentAssigned(a);
  ASSERT_TRUE(RunUntil(agent.get(), [&] {
    return !fake_->reports.empty() && fake_->reports.back().status().progress().step() == 1;
  }));
  agent->RunOnce();
  EXPECT_FALSE(agent->HeartbeatDueEarly());  // nothing new: the interval's turn

  const auto wait_due = [&] {  // until the trainer's line reaches the task
    for (int i = 0; i < 500; ++i) {
      if (agent->HeartbeatDueEarly()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  // The first evaluation's heartbeat fails (the coordinator is away): no heartbeat is due
  // early after it (no storm against a coordinator that is down, no follow-up); the next
  // turn's heartbeat carries the evaluation.
  std::ofstream(go + "1") << "";
  ASSERT_TRUE(wait_due()) << "an evaluation did not make the next heartbeat due";
  fake_->heartbeat_statuses.push_back(Status::Unavailable("down"));
  agent->RunOnce();
  std::this_thread::sleep_for(Agent::kFollowUp + std::chrono::milliseconds(50));
  EXPECT_FALSE(agent->HeartbeatDueEarly());
  agent->RunOnce();
  ASSERT_EQ(fake_->heartbeats.back().tasks_size(), 1);
  EXPECT_EQ(fake_->heartbeats.back().tasks(0).evals_size(), 1);
  // The second goes out at once and is followed up.
  std::ofstream(go + "2") << "";
  ASSERT_TRUE(wait_due()) << "an evaluation did not make the next heartbeat due";
  agent->RunOnce();
  ASSERT_EQ(fake_->heartbeats.back().tasks_size(), 1);
  EXPECT_EQ(fake_->heartbeats.back().tasks(0).evals_size(), 2);
  std::this_thread::sleep_for(Agent::kFollowUp + std::chrono::milliseconds(50));
  EXPECT_TRUE(agent->HeartbeatDueEarly());  // the follow-up for the coordinator's answer
  agent->RunOnce();
  std::this_thread::sleep_for(Agent::kFollowUp + std::chrono::milliseconds(50));
  EXPECT_FALSE(agent->HeartbeatDueEarly());  // one follow-up only
}

// An ASHA trial's ranks wait at their rungs (Assignment.await_steps) for the coordinator's
// judgement: the trainer's config names the steps and the file to watch, and a judgement
// in a heartbeat answer is written there (the fake trainer exits 0 once it reads step 5).
TEST_F(AgentTest, AJudgementInAHeartbeatAnswerReachesTheRanksWaitingAtTheirRung) {
  v1::Assignment a = Assignment("job-1");
  a.add_await_steps(5);
  CacheEntryFor(PrepOptionsFor(a.spec(), options_.data_roots));
  options_.trainer_path = dir_ + "/fake-trainer";
  std::ofstream(options_.trainer_path)
      << "#!/bin/sh\n"
      << "judged=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); "
         "print(c[\"judged_file\"] if c[\"await_steps\"] == [5] else \"\")' \"$2\")\n"
      << "[ -n \"$judged\" ] || exit 3\n"
      << "echo '{\"event\":\"eval\",\"step\":5,\"val_loss\":0.5}' >&3\n"
      << "while ! grep -qx 5 \"$judged\" 2>/dev/null; do sleep 0.02; done\n";
  ::chmod(options_.trainer_path.c_str(), 0755);
  auto agent = AgentAssigned(a);
  ASSERT_TRUE(RunUntil(agent.get(), [&] {
    return !fake_->heartbeats.empty() && fake_->heartbeats.back().tasks_size() == 1 &&
           fake_->heartbeats.back().tasks(0).evals_size() == 1;
  })) << "the trainer never reached its rung";
  v1::HeartbeatResponse judged;
  v1::TaskJudged* j = judged.add_judged();
  *j->mutable_task() = a.task();
  j->set_step(5);
  fake_->heartbeat_responses.assign(1, judged);
  ASSERT_TRUE(RunUntil(agent.get(), [&] {
    return !fake_->reports.empty() && fake_->reports.back().status().state() == v1::TASK_SUCCEEDED;
  })) << (fake_->reports.empty() ? "no report" : fake_->reports.back().status().DebugString());
}

// Issue 40: a task resumes only from a checkpoint the coordinator vouches for. Before the
// ranks start, the job's local checkpoint that matches no recorded digest (here a newer
// step, as a tampered or planted one would be) is set aside, and the worker says so; the
// trainer sees only the vouched one. The checkpoint the trainer then reports goes up with
// the digest of its manifest as the worker reads it from its own disk.
TEST_F(AgentTest, ATaskSeesOnlyTheLocalCheckpointsTheCoordinatorVouchesFor) {
  const std::string job_dir = dir_ + "/checkpoints/job-1";
  auto write_checkpoint = [&](int64_t step, const std::string& manifest) {
    const std::string dir = job_dir + "/" + format::StepDirName(step);
    fs::create_directories(dir);
    std::ofstream(dir + "/manifest.json") << manifest;
    std::ofstream(dir + "/COMPLETE") << step << "\n";
  };
  write_checkpoint(40, "{\"recorded\": 40}");
  write_checkpoint(50, "{\"planted\": 50}");
  v1::Assignment a = Assignment("job-1");
  v1::HeldCheckpoint* verified = a.add_verified_checkpoints();
  verified->set_job_id("job-1");
  verified->set_step(40);
  verified->set_manifest_sha256(crypto::Sha256Hex("{\"recorded\": 40}"));
  CacheEntryFor(PrepOptionsFor(a.spec(), options_.data_roots));
  const std::string seen = dir_ + "/seen";
  options_.trainer_path = dir_ + "/fake-trainer";
  std::ofstream(options_.trainer_path) << "#!/bin/sh\n"
                                       << "ls " << job_dir << " > " << seen << "\n"
                                       << "echo '{\"event\":\"checkpoint\",\"step\":40,\"path\":\"/elsewhere\"}' >&3\n"
                                       << "echo '{\"event\":\"done\"}' >&3\n";
  ::chmod(options_.trainer_path.c_str(), 0755);
  auto agent = AgentAssigned(a);
  ASSERT_TRUE(RunUntil(agent.get(), [&] {
    return !fake_->reports.empty() && fake_->reports.back().status().state() == v1::TASK_SUCCEEDED;
  }));
  EXPECT_EQ(Read(seen).find("step-00000050"), std::string::npos) << Read(seen);
  EXPECT_NE(Read(seen).find("step-00000040"), std::string::npos) << Read(seen);
  EXPECT_TRUE(fs::exists(job_dir + "/unverified/step-00000050/manifest.json"));
  const v1::TaskStatus& done = fake_->reports.back().status();
  EXPECT_NE(done.checkpoint_check().find("set aside local checkpoint step 50"), std::string::npos)
      << done.checkpoint_check();
  EXPECT_NE(done.checkpoint_check().find("the newest local checkpoint is step 40"), std::string::npos)
      << done.checkpoint_check();
  EXPECT_EQ(done.checkpoint_step(), 40);
  EXPECT_EQ(done.checkpoint_manifest_sha256(), crypto::Sha256Hex("{\"recorded\": 40}"));
}

// A trainer that exits with kTrainerExitPermanent (a restart would fail the same way:
// ranks disagree on the data, a checkpoint of another configuration) is reported as a
// user error, so the coordinator fails the job at once; any other failure is not.
TEST_F(AgentTest, ATrainerThatWouldFailAgainIsReportedAsAUserError) {
  for (const int code : {format::kTrainerExitPermanent, 1}) {
    v1::Assignment a = Assignment("job-" + std::to_string(code));
    CacheEntryFor(PrepOptionsFor(a.spec(), options_.data_roots));
    options_.trainer_path = dir_ + "/fake-trainer-" + std::to_string(code);
    std::ofstream(options_.trainer_path) << "#!/bin/sh\n"
                                         << "echo '{\"event\":\"error\",\"permanent\":1,\"message\":\"ranks disagree\"}' >&3\n"
                                         << "exit " << code << "\n";
    ::chmod(options_.trainer_path.c_str(), 0755);
    auto agent = AgentAssigned(a);
    auto failed = [&]() -> const v1::TaskStatus* {
      for (const auto& r : fake_->reports)
        if (r.status().task().job_id() == a.task().job_id() && r.status().state() == v1::TASK_FAILED) return &r.status();
      return nullptr;
    };
    ASSERT_TRUE(RunUntil(agent.get(), [&] { return failed() != nullptr; })) << code;
    EXPECT_EQ(failed()->user_error(), code == format::kTrainerExitPermanent) << code;
    EXPECT_NE(failed()->error().find("ranks disagree"), std::string::npos) << failed()->error();
  }
}

// A shared checkpoint root is writable by every owner and job ids are predictable: another
// user may make <root>/<job id> first (here writable by all, with a checkpoint planted in
// it) for the job to resume from or write into. The task refuses the folder before data
// preparation or any rank, naming it with its mode, as an error no other worker of that
// root could get past (user_error: the job fails without restarts).
TEST_F(AgentTest, ATaskRefusesACheckpointFolderOtherUsersCanWriteTo) {
  options_.checkpoint_root = dir_ + "/shared";
  const std::string job_dir = options_.checkpoint_root + "/job-1";
  fs::create_directories(job_dir + "/" + format::StepDirName(90));
  std::ofstream(job_dir + "/" + format::StepDirName(90) + "/COMPLETE") << "90\n";
  ASSERT_EQ(::chmod(job_dir.c_str(), 0777), 0);
  const std::string ran = dir_ + "/trainer-ran";
  options_.trainer_path = dir_ + "/fake-trainer";
  std::ofstream(options_.trainer_path) << "#!/bin/sh\ntouch " << ran << "\necho '{\"event\":\"done\"}' >&3\n";
  ::chmod(options_.trainer_path.c_str(), 0755);
  const v1::Assignment a = Assignment("job-1");
  CacheEntryFor(PrepOptionsFor(a.spec(), options_.data_roots));  // nothing else in the way
  auto agent = AgentAssigned(a);
  ASSERT_TRUE(RunUntil(agent.get(), [&] { return !fake_->reports.empty(); }));
  const v1::TaskStatus& done = fake_->reports.back().status();
  EXPECT_EQ(done.state(), v1::TASK_FAILED);
  EXPECT_TRUE(done.user_error());
  const std::string named = fs::path(job_dir).lexically_normal().string();  // as CheckpointRoot() makes it
  EXPECT_NE(done.error().find(named + " (owner uid " + std::to_string(::geteuid()) + ", mode 0777)"),
            std::string::npos)
      << done.error();
  EXPECT_FALSE(fs::exists(ran));
  struct stat st;
  ASSERT_EQ(::stat(job_dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0777u);  // refused as found, not taken over
}

// The task makes its job's checkpoint folder before its ranks start, mode 0700 whatever
// the umask: under the usual 022 every other owner sharing the root could read it.
TEST_F(AgentTest, ATaskMakesItsCheckpointFolderPrivate) {
  options_.checkpoint_root = dir_ + "/shared";
  const std::string job_dir = options_.checkpoint_root + "/job-1";
  v1::Assignment a = Assignment("job-1");
  CacheEntryFor(PrepOptionsFor(a.spec(), options_.data_roots));
  const std::string seen = dir_ + "/seen";
  options_.trainer_path = dir_ + "/fake-trainer";
  std::ofstream(options_.trainer_path) << "#!/bin/sh\nstat -c %a " << job_dir << " > " << seen
                                       << "\necho '{\"event\":\"done\"}' >&3\n";
  ::chmod(options_.trainer_path.c_str(), 0755);
  const mode_t umask_was = ::umask(022);
  auto agent = AgentAssigned(a);
  const bool finished = RunUntil(agent.get(), [&] {
    return !fake_->reports.empty() && fake_->reports.back().status().state() == v1::TASK_SUCCEEDED;
  });
  ::umask(umask_was);
  ASSERT_TRUE(finished) << (fake_->reports.empty() ? "no report" : fake_->reports.back().status().DebugString());
  EXPECT_EQ(Read(seen), "700\n");
  struct stat st;
  ASSERT_EQ(::lstat(job_dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, ::geteuid());
}

}  // namespace
}  // namespace nightshift
