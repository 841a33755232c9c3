// Provisioner (coordinator/provisioner.h) over a real Coordinator (RocksDB in a temp dir,
// a fake clock) and a fake cluster: what it asks the cluster for, what it records on the
// job, how an allocation's end ends the attempt, what it cancels, and that attempts run
// only on their allocation's workers, which are released when the attempt is over.
#include "coordinator/provisioner.h"

#include <gtest/gtest.h>

#include <map>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "common/spec.h"
#include "coordinator/allocation_tokens.h"
#include "coordinator/checkpoint_records.h"
#include "tests/common/fake_clock.h"

namespace nightshift {
namespace {

// The cluster as the test says it is: Submit records the request and hands out ids from
// 100; List returns `listed` (or `list_error`).
class FakeCluster : public ClusterAllocator {
 public:
  const char* name() const override { return "slurm"; }
  bool KeepsEndedAllocations() const override { return keeps_ended; }
  // As Slurm submitting as the owner: the owner, or for a job without one the coordinator's.
  std::string RunsAs(const std::string& owner) const override { return owner.empty() ? "nightshift" : owner; }
  StatusOr<std::string> Submit(const AllocationRequest& request) override {
    if (!submit_error.ok()) return submit_error;
    if (during_submit) during_submit();
    requests.push_back(request);
    return std::to_string(next_id++);
  }
  Status Cancel(const std::string& id) override {
    if (!cancel_error.ok()) return cancel_error;
    cancelled.push_back(id);
    return Status::OK();
  }
  StatusOr<std::vector<Allocation>> List() override {
    if (!list_error.ok()) return list_error;
    return listed;
  }
  StatusOr<Allocation> Lookup(const std::string& id) override {
    if (!lookup_error.ok()) return lookup_error;
    auto it = records.find(id);
    if (it == records.end()) return Status::NotFound("no record of " + id);
    return it->second;
  }
  // Lists allocation `id` of (job, attempt) in `phase`.
  Allocation& Show(const std::string& id, const std::string& job, int attempt, Allocation::Phase phase,
                   const std::string& state, const std::string& reason = "", const std::string& nodes = "") {
    for (auto& a : listed)
      if (a.id == id) {
        a.phase = phase, a.state = state, a.reason = reason, a.nodes = nodes;
        return a;
      }
    Allocation a;
    a.id = id, a.job_id = job, a.attempt = attempt, a.phase = phase, a.state = state, a.reason = reason, a.nodes = nodes;
    listed.push_back(a);
    return listed.back();
  }

  std::vector<AllocationRequest> requests;
  std::vector<std::string> cancelled;
  std::vector<Allocation> listed;
  std::map<std::string, Allocation> records;  // Lookup's: the accounting's records of ended ones
  Status submit_error, list_error, lookup_error, cancel_error;
  std::function<void()> during_submit;  // called inside Submit (sbatch takes seconds)
  int next_id = 100;
  bool keeps_ended = false;  // as Kubernetes' Jobs
};

class ProvisionerTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/prov." + std::to_string(::getpid()) + "." +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    Open();
  }
  // The coordinator on dir_ (again, after Restart) and its provisioner.
  void Open() {
    CoordinatorOptions options;
    options.data_dir = dir_;
    options.restart_backoff_seconds = restart_backoff_seconds_;
    options.cluster_allocates = true;
    options.clock = &clock_;
    auto c = Coordinator::Open(options);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(c.value());
    ProvisionerOptions p;
    p.ranks_per_node = 2;
    p.worker_command = {"/opt/nightshift/bin/nightshift-worker", "--work-dir=/scratch/ns"};
    p.coordinator_address = "198.18.0.1:7070";
    p.tokens = &tokens_;
    p.record_wait_seconds = record_wait_seconds_;
    p.release_grace_seconds = 5;
    p.clock = &clock_;
    provisioner_ = std::make_unique<Provisioner>(p, c_.get(), &cluster_);
  }
  // A coordinator restart: everything in memory gone, the job records kept.
  void Restart() {
    provisioner_.reset();
    c_.reset();
    Open();
  }
  void TearDown() override {
    provisioner_.reset();
    c_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string Submit(int world_size, const std::string& device = "cpu", int max_restarts = 3) {
    auto spec = LoadJobSpec("model: {arch: transformer_classifier}\ndata: {path: /data}\n");
    EXPECT_TRUE(spec.ok());
    spec->mutable_resources()->set_world_size(world_size);
    spec->mutable_resources()->set_device(device);
    spec->mutable_resources()->set_time_limit_minutes(45);
    spec->mutable_restart()->set_max_restarts(max_restarts);
    auto job = c_->Submit(*spec);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job->id();
  }
  // A worker started in allocation `cluster_id` for (job, attempt), or an ordinary one.
  void RegisterWorker(const std::string& name, int slots, const std::string& job = "", int attempt = 0,
                      const std::string& cluster_id = "") {
    v1::WorkerInfo w;
    w.set_name(name);
    w.set_slots(slots);
    if (!job.empty()) {
      w.mutable_allocation()->set_job_id(job);
      w.mutable_allocation()->set_attempt(attempt);
      w.mutable_allocation()->set_cluster_id(cluster_id);
    }
    ASSERT_TRUE(c_->Register(w).ok());
  }
  void Pass() { ASSERT_TRUE(provisioner_->Pass().ok()); }
  v1::Job Get(const std::string& id) { return c_->Get(id).value(); }
  bool HasEvent(const v1::Job& job, const std::string& text) {
    for (const auto& e : job.events())
      if (e.reason().find(text) != std::string::npos) return true;
    return false;
  }
  // Runs attempt `attempt` of a 3-rank job on the two workers of allocation `id`.
  void RunOnAllocation(const std::string& job, int attempt, const std::string& id) {
    cluster_.Show(id, job, attempt, Allocation::Phase::kRunning, "RUNNING", "None", "n[1-2]");
    Pass();
    RegisterWorker(job + "-a" + std::to_string(attempt) + "-n1", 2, job, attempt, id);
    RegisterWorker(job + "-a" + std::to_string(attempt) + "-n2", 2, job, attempt, id);
    c_->Tick();
    ASSERT_EQ(Get(job).state(), v1::SCHEDULED) << Get(job).reason();
  }

  // `seconds` pass in which only an ordinary worker, "bystander", reaches the coordinator:
  // the other workers' leases (10 s) run out, and it is no outage of the coordinator's own.
  void OnlyABystanderBeatsFor(int seconds) {
    if (!c_->Heartbeat("bystander", {}).ok()) RegisterWorker("bystander", 1);
    for (int i = 0; i < seconds; ++i) {
      clock_.Advance(std::chrono::seconds(1));
      ASSERT_TRUE(c_->Heartbeat("bystander", {}).ok());
      c_->Tick();
    }
  }

  // Allocation `id` of (job, attempt) gone from the cluster's list while its record (Slurm's
  // accounting) still says it runs, as when the accounting lags; returns that record.
  Allocation UnlistedButRecordedRunning(const std::string& job, int attempt, const std::string& id) {
    cluster_.listed.clear();
    Allocation record;
    record.id = id, record.job_id = job, record.attempt = attempt, record.phase = Allocation::Phase::kRunning;
    record.state = "RUNNING";
    cluster_.records[id] = record;
    return record;
  }
  // The record of `record`'s allocation now says PREEMPTED.
  void RecordPreempted(Allocation record) {
    record.phase = Allocation::Phase::kEnded, record.state = "PREEMPTED", record.end = Allocation::End::kPreempted;
    cluster_.records[record.id] = record;
  }

  // Allocation `id` of (job, attempt) ended by Slurm's NODE_FAIL, `failed` down.
  void FailNode(const std::string& job, int attempt, const std::string& id, const std::string& failed) {
    Allocation& a = cluster_.Show(id, job, attempt, Allocation::Phase::kEnded, "NODE_FAIL", "", "n[1-2]");
    a.end = Allocation::End::kNodeFail;
    a.failed_nodes = failed;
  }

  double record_wait_seconds_ = 3;  // Open's ProvisionerOptions::record_wait_seconds
  double restart_backoff_seconds_ = 0;  // Open's CoordinatorOptions::restart_backoff_seconds
  FakeClock clock_;
  const AllocationTokens tokens_{std::string(64, 'a')};
  std::string dir_;
  std::unique_ptr<Coordinator> c_;
  FakeCluster cluster_;
  std::unique_ptr<Provisioner> provisioner_;
};

// squeue lists every user's jobs, and any user may name one like ours: an allocation that
// does not run as the user its job's are submitted as is not that attempt's (the attempt
// gets its own) and is never cancelled; one of a job the coordinator does not know runs as
// the coordinator's user if ours; the one whose id sbatch gave is ours.
TEST_F(ProvisionerTest, AnotherUsersJobNamedLikeOursIsNeitherFollowedNorCancelled) {
  auto spec = LoadJobSpec("model: {arch: transformer_classifier}\ndata: {path: /data}\n");
  ASSERT_TRUE(spec.ok());
  auto job = c_->Submit(*spec, "alice");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string id = job->id();
  cluster_.Show("7", id, 0, Allocation::Phase::kPending, "PENDING", "JobHeldUser").user = "mallory";
  cluster_.Show("8", "j-000999", 0, Allocation::Phase::kRunning, "RUNNING").user = "mallory";
  cluster_.Show("9", "j-000998", 0, Allocation::Phase::kRunning, "RUNNING").user = "nightshift";
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 1u);  // "7" is not attempt 0's allocation: it asks for one
  EXPECT_EQ(Get(id).allocation().id(), "100");
  EXPECT_EQ(Get(id).allocation().reason(), "");  // not mallory's "JobHeldUser"
  // The id sbatch gave is ours whatever user Slurm names (a wrapper, a renamed account).
  cluster_.Show("100", id, 0, Allocation::Phase::kPending, "PENDING", "Priority").user = "alice@slurm";
  clock_.Advance(std::chrono::seconds(6));  // past the release grace
  Pass();
  EXPECT_EQ(Get(id).allocation().reason(), "Priority");
  EXPECT_EQ(cluster_.cancelled, std::vector<std::string>{"9"});  // ours, its job unknown: over
  // Still ours once the job is over (cancelled): the id is its record's.
  ASSERT_TRUE(c_->Cancel(id, "not needed").ok());
  Pass();
  EXPECT_EQ(cluster_.cancelled, (std::vector<std::string>{"9", "100"}));
}

// A finished job whose allocation the cluster still lists is not deleted (nor before the
// queue was read after a restart): its record keeps the owner the allocation runs as, so a
// pass cancels it, across a coordinator restart too; another user's named like it is not.
// (Before, a job deleted before its pending allocation was cancelled took its owner with
// it, and after a restart that allocation was taken for another user's and left queued.)
TEST_F(ProvisionerTest, AJobIsNotDeletedWhileTheClusterListsAnAllocationOfIt) {
  auto spec = LoadJobSpec("model: {arch: transformer_classifier}\ndata: {path: /data}\n");
  ASSERT_TRUE(spec.ok());
  auto job = c_->Submit(*spec, "alice");
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  const std::string id = job->id();
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 1u);
  cluster_.Show("100", id, 0, Allocation::Phase::kPending, "PENDING", "Priority").user = "alice";
  cluster_.Show("7", id, 1, Allocation::Phase::kPending, "PENDING", "Priority").user = "mallory";
  Pass();
  ASSERT_TRUE(c_->Cancel(id, "not needed").ok());
  const Status refused = c_->Delete(id);  // the last pass listed its allocation
  EXPECT_EQ(refused.code(), Status::kFailedPrecondition);
  EXPECT_NE(refused.message().find("the cluster still lists an allocation of it"), std::string::npos) << refused.ToString();
  clock_.Advance(std::chrono::hours(24 * 31));  // past the retention (30 days)
  c_->Tick();
  EXPECT_TRUE(c_->Get(id).ok()) << "removed at its retention's end while listed";
  // One sbatch answered but the coordinator never recorded (its record names "100"):
  // alice's by the owner the record keeps.
  cluster_.Show("55", id, 0, Allocation::Phase::kPending, "PENDING", "Priority").user = "alice";
  Restart();
  EXPECT_EQ(c_->Delete(id).code(), Status::kFailedPrecondition) << "the queue not read since the restart";
  Pass();
  EXPECT_EQ(cluster_.cancelled, (std::vector<std::string>{"100", "55"}));  // alice's, as the record says; not mallory's
  EXPECT_EQ(c_->Delete(id).code(), Status::kFailedPrecondition) << "still listed as it was cancelled";
  cluster_.listed.erase(std::remove_if(cluster_.listed.begin(), cluster_.listed.end(),
                                       [](const Allocation& a) { return a.id == "100" || a.id == "55"; }),
                        cluster_.listed.end());
  Pass();
  EXPECT_TRUE(c_->Delete(id).ok());  // mallory's named like it keeps nothing of ours
  Pass();
  EXPECT_EQ(cluster_.cancelled, (std::vector<std::string>{"100", "55"}));
}

TEST_F(ProvisionerTest, AQueuedJobGetsOneAllocationOfItsNodesAndRunsOnlyOnItsWorkers) {
  const std::string id = Submit(3);
  RegisterWorker("ordinary", 8);  // never used: the cluster allocates
  c_->Tick();
  EXPECT_EQ(Get(id).state(), v1::QUEUED);
  EXPECT_EQ(Get(id).reason(), "waiting for an allocation from the cluster");

  Pass();
  ASSERT_EQ(cluster_.requests.size(), 1u);
  const AllocationRequest& r = cluster_.requests[0];
  EXPECT_EQ(r.job_id, id);
  EXPECT_EQ(r.attempt, 0);
  EXPECT_EQ(r.nodes, 2);          // ceil(3 / 2)
  EXPECT_EQ(r.cpus_per_node, 2);  // the ranks spread evenly: 2 + 1
  EXPECT_EQ(r.gpus_per_node, 0);
  EXPECT_EQ(r.time_limit_minutes, 45);  // resources.time_limit_minutes: sbatch --time
  EXPECT_EQ(r.node_command,
            (std::vector<std::string>{"/opt/nightshift/bin/nightshift-worker", "--work-dir=/scratch/ns", "--coordinator",
                                      "198.18.0.1:7070", "--allocation-job", id, "--allocation-attempt", "0",
                                      "--cpu-slots", "2"}));
  // The attempt's own token rides beside the command, not in it (allocation_tokens.h).
  const auto opens = tokens_.Verify(r.token);
  ASSERT_TRUE(opens.has_value()) << r.token;
  EXPECT_EQ(opens->job_id, id);
  EXPECT_EQ(opens->attempt, 0);
  EXPECT_EQ(Get(id).allocation().id(), "100");
  EXPECT_TRUE(HasEvent(Get(id), "slurm job 100 SUBMITTED"));

  // Pending: nothing submitted again; the cluster's reason is the job's.
  cluster_.Show("100", id, 0, Allocation::Phase::kPending, "PENDING", "Priority");
  Pass();
  c_->Tick();
  EXPECT_EQ(cluster_.requests.size(), 1u);
  EXPECT_EQ(Get(id).reason(), "waiting for slurm job 100 (PENDING: Priority)");

  // Running; a worker of another job's allocation and one worker of its own are not enough.
  cluster_.Show("100", id, 0, Allocation::Phase::kRunning, "RUNNING", "None", "n[1-2]");
  Pass();
  RegisterWorker("other-n3", 8, "job-other", 0, "99");
  RegisterWorker(id + "-a0-n1", 2, id, 0, "100");
  c_->Tick();
  EXPECT_EQ(Get(id).state(), v1::QUEUED);
  EXPECT_EQ(Get(id).reason(), "waiting for slurm job 100 (RUNNING, on n[1-2]); 2 of 3 slots registered");
  RegisterWorker(id + "-a0-n2", 2, id, 0, "100");
  c_->Tick();
  const v1::Job placed = Get(id);
  ASSERT_EQ(placed.state(), v1::SCHEDULED);
  int ranks = 0;
  for (const auto& p : placed.placements()) {
    EXPECT_TRUE(p.worker() == id + "-a0-n1" || p.worker() == id + "-a0-n2") << p.worker();
    ranks += p.num_ranks();
  }
  EXPECT_EQ(ranks, 3);
  // A cuda job asks for GPUs: one per rank on each node.
  const std::string gpu = Submit(4, "cuda");
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 2u);
  EXPECT_EQ(cluster_.requests[1].job_id, gpu);
  EXPECT_EQ(cluster_.requests[1].nodes, 2);
  EXPECT_EQ(cluster_.requests[1].gpus_per_node, 2);
}

// A cluster whose ended allocations stay until deleted (Kubernetes: the Job, its Service
// and the token's Secret): once the attempt is over, its ended allocation is deleted, once;
// while it is the current attempt's, it is only read (its end decides the next attempt).
TEST_F(ProvisionerTest, AnEndedAllocationThatStaysListedIsDeletedOnceItsAttemptIsOver) {
  cluster_.keeps_ended = true;
  const std::string id = Submit(1);
  Pass();
  RunOnAllocation(id, 0, "100");
  cluster_.Show("100", id, 0, Allocation::Phase::kEnded, "Evicted").end = Allocation::End::kPreempted;
  Pass();
  EXPECT_EQ(Get(id).attempt(), 1);
  EXPECT_TRUE(cluster_.cancelled.empty());
  Pass();
  Pass();
  EXPECT_EQ(cluster_.cancelled, std::vector<std::string>{"100"});
}

// A worker of an attempt that is over, still heartbeating while its allocation ends, wrote
// the job's checkpoints then; its claim of a newer step than any record is not taken as
// the writer's (it would become the step the next attempt resumes from, and the holder
// it fetches from).
TEST_F(ProvisionerTest, AnOverAttemptsWorkerClaimingANewerStepIsNotRecorded) {
  const std::string id = Submit(3);
  Pass();
  RunOnAllocation(id, 0, "100");
  v1::TaskStatus s;
  s.mutable_task()->set_job_id(id);
  s.mutable_task()->set_attempt(0);
  s.set_state(v1::TASK_RUNNING);
  s.set_checkpoint_step(30);
  std::string writer;
  const v1::Job placed = Get(id);
  for (const auto& p : placed.placements())
    if (p.first_rank() == 0) writer = p.worker();
  ASSERT_TRUE(c_->ReportTask(writer, s).ok());
  ASSERT_EQ(Get(id).checkpoint_step(), 30);
  std::vector<v1::HeldCheckpoint> held(1);
  held[0].set_job_id(id);
  held[0].set_step(40);
  held[0].set_manifest_sha256("manifest-40");
  ASSERT_TRUE(c_->Heartbeat(writer, {}, nullptr, held).ok());
  ASSERT_EQ(NewestRecordedStep(Get(id)), 40) << "the running attempt's writer is recorded";
  cluster_.Show("100", id, 0, Allocation::Phase::kEnded, "PREEMPTED").end = Allocation::End::kPreempted;
  Pass();
  ASSERT_EQ(Get(id).attempt(), 1);
  held[0].set_step(90);
  held[0].set_manifest_sha256("manifest-90");
  ASSERT_TRUE(c_->Heartbeat(writer, {}, nullptr, held).ok());
  EXPECT_EQ(NewestRecordedStep(Get(id)), 40);
}

// resources.time_limit_minutes is a time slice: an attempt whose limit ends it after a new
// checkpoint goes on in a new attempt, uncounted; one that committed none since it started
// (set-up longer than the slice) counts a restart, so such slices end in FAILED instead of
// cycling for ever.
TEST_F(ProvisionerTest, ATimeLimitWithoutANewCheckpointCountsARestart) {
  const std::string id = Submit(3, "cpu", /*max_restarts=*/1);
  Pass();
  const auto checkpoint = [&](int attempt, int64_t step) {  // rank 0's report
    v1::TaskStatus s;
    s.mutable_task()->set_job_id(id);
    s.mutable_task()->set_attempt(attempt);
    s.set_state(v1::TASK_RUNNING);
    s.set_resumed_step(attempt == 0 ? 0 : 30);
    if (step > 0) s.set_checkpoint_step(step);
    const v1::Job job = Get(id);
    for (const auto& p : job.placements())
      if (p.first_rank() == 0) ASSERT_TRUE(c_->ReportTask(p.worker(), s).ok());
  };
  const auto time_limit = [&](int attempt, const std::string& cluster_id) {
    RunOnAllocation(id, attempt, cluster_id);
    checkpoint(attempt, attempt == 0 ? 30 : 0);
    cluster_.Show(cluster_id, id, attempt, Allocation::Phase::kEnded, "TIMEOUT").end = Allocation::End::kTimeLimit;
    Pass();
    return Get(id);
  };
  v1::Job job = time_limit(0, "100");  // checkpointed step 30 in its slice
  EXPECT_EQ(job.checkpoint_step(), 30);
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.reason().find("the allocation's time limit ended it (slurm job 100 TIMEOUT"), std::string::npos)
      << job.reason();
  Pass();
  job = time_limit(1, "101");  // resumed from 30, cut before its next checkpoint
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_NE(job.reason().find("resources.time_limit_minutes: attempt 1 reached its time limit without a new "
                              "checkpoint (still step 30)"),
            std::string::npos)
      << job.reason();
  Pass();
  job = time_limit(2, "102");  // again: no restart left
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_NE(job.reason().find("failed after 1 restarts: resources.time_limit_minutes: attempt 2"), std::string::npos)
      << job.reason();
}

TEST_F(ProvisionerTest, APreemptedAllocationStartsANewAttemptUncountedANodeFailureACountedOneElsewhere) {
  const std::string id = Submit(3);
  Pass();
  RunOnAllocation(id, 0, "100");
  // Slurm preempts it: a new attempt, no restart counted; its workers are released once
  // they hold no rank; the next pass asks for attempt 1's allocation.
  cluster_.Show("100", id, 0, Allocation::Phase::kEnded, "PREEMPTED").end = Allocation::End::kPreempted;
  Pass();
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::QUEUED);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.reason().find("the cluster took the allocation back (slurm job 100 PREEMPTED"), std::string::npos)
      << job.reason();
  EXPECT_TRUE(c_->Heartbeat(id + "-a0-n1", {})->release);
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 2u);
  EXPECT_EQ(cluster_.requests[1].attempt, 1);
  EXPECT_TRUE(cluster_.cancelled.empty());  // the ended one needs no scancel

  // Attempt 1 loses node n2: a counted restart, and attempt 2 keeps away from n2.
  RunOnAllocation(id, 1, "101");
  FailNode(id, 1, "101", "n2");
  cluster_.listed.back().exit_code = 143;  // the survivors stopped by SIGTERM: a node failure still
  Pass();
  job = Get(id);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_NE(job.reason().find("a node of the allocation failed"), std::string::npos) << job.reason();
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 3u);
  EXPECT_EQ(cluster_.requests[2].exclude_nodes, "n2");

  // Its workers stopped by the cluster's SIGTERM (the time limit's --signal) exit 143
  // after their ranks checkpoint: that is the cluster taking it back too.
  RunOnAllocation(id, 2, "102");
  Allocation& timed_out = cluster_.Show("102", id, 2, Allocation::Phase::kEnded, "FAILED");
  timed_out.exit_code = 143;
  Pass();
  job = Get(id);
  EXPECT_EQ(job.attempt(), 3);
  EXPECT_EQ(job.restarts(), 1);
  // Any other end before the attempt's: a counted restart.
  Pass();
  RunOnAllocation(id, 3, "103");
  cluster_.Show("103", id, 3, Allocation::Phase::kEnded, "FAILED").exit_code = 2;
  Pass();
  job = Get(id);
  EXPECT_EQ(job.attempt(), 4);
  EXPECT_EQ(job.restarts(), 2);
  EXPECT_NE(job.reason().find("the allocation ended before the attempt did (slurm job 103 FAILED: exit code 2)"),
            std::string::npos)
      << job.reason();
}

// The nodes a NODE_FAIL took out are kept in the job's record (written with the attempt's
// end): a coordinator restarted before the next allocation still asks Slurm to avoid them.
TEST_F(ProvisionerTest, FailedNodesAreStillAvoidedAfterACoordinatorRestart) {
  const std::string id = Submit(2);
  Pass();
  RunOnAllocation(id, 0, "100");
  FailNode(id, 0, "100", "n2");
  Pass();
  ASSERT_EQ(Get(id).attempt(), 1);
  EXPECT_EQ(Get(id).excluded_nodes(), "n2");
  Restart();
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 2u);
  EXPECT_EQ(cluster_.requests[1].attempt, 1);
  EXPECT_EQ(cluster_.requests[1].exclude_nodes, "n2");
  // Another failure adds its nodes (a hostlist as sinfo writes it).
  RunOnAllocation(id, 1, "101");
  FailNode(id, 1, "101", "n[3-4]");
  Pass();
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 3u);
  EXPECT_EQ(cluster_.requests[2].exclude_nodes, "n2,n[3-4]");
  EXPECT_EQ(Get(id).excluded_nodes(), "n2,n[3-4]");
}

// Had the request been impossible without the failed node, the job does not fail for
// it: the next pass asks again with every node.
TEST_F(ProvisionerTest, ARequestImpossibleWithoutTheFailedNodesIsAskedAgainWithAllOfThem) {
  const std::string id = Submit(2);
  Pass();
  RunOnAllocation(id, 0, "100");
  FailNode(id, 0, "100", "n1");
  Pass();  // attempt 1, to avoid n1
  ASSERT_EQ(Get(id).attempt(), 1);
  cluster_.submit_error = Status::InvalidArgument("sbatch refused: Requested node configuration is not available");
  EXPECT_FALSE(provisioner_->Pass().ok());
  EXPECT_EQ(Get(id).state(), v1::QUEUED);
  cluster_.submit_error = Status::OK();
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 2u);
  EXPECT_EQ(cluster_.requests[1].attempt, 1);
  EXPECT_EQ(cluster_.requests[1].exclude_nodes, "");
}

// Kubernetes: Kueue takes a running Job back by suspending it (pending again while its
// attempt runs): that is a preemption. A Job failed by the worker's bad-spec exit
// (podFailurePolicy FailJob) fails the job, with no retry.
TEST_F(ProvisionerTest, PendingAgainWhileItsAttemptRunsIsAPreemptionAndARefusedAllocationFailsTheJob) {
  const std::string id = Submit(3);
  Pass();
  RunOnAllocation(id, 0, "100");
  cluster_.Show("100", id, 0, Allocation::Phase::kPending, "Suspended", "Workload evicted: preempted");
  Pass();
  v1::Job job = Get(id);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.reason().find("the cluster took the allocation back (slurm job 100 Suspended: pending again)"),
            std::string::npos)
      << job.reason();
  Pass();  // the suspended one is over: cancelled; attempt 1 asked for
  EXPECT_EQ(cluster_.cancelled, std::vector<std::string>{"100"});
  ASSERT_EQ(cluster_.requests.size(), 2u);
  Allocation& refused = cluster_.Show("101", id, 1, Allocation::Phase::kEnded, "Failed",
                                      "PodFailurePolicy: Container worker failed with exit code 2");
  refused.end = Allocation::End::kRefused;
  Pass();
  job = Get(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.error().find("slurm job 101 failed: PodFailurePolicy"), std::string::npos) << job.error();
}

TEST_F(ProvisionerTest, WhatIsOverIsCancelledAnAllocationIsAdoptedAndNothingIsSubmittedBlind) {
  // The cluster cannot be listed: nothing is submitted.
  const std::string id = Submit(2);
  cluster_.list_error = Status::Unavailable("squeue: connection refused");
  EXPECT_FALSE(provisioner_->Pass().ok());
  EXPECT_TRUE(cluster_.requests.empty());
  // An allocation of the current attempt that we never recorded (the coordinator died
  // between sbatch and its record) is adopted, not submitted twice.
  cluster_.list_error = Status::OK();
  cluster_.Show("77", id, 0, Allocation::Phase::kPending, "PENDING", "Resources");
  Pass();
  EXPECT_TRUE(cluster_.requests.empty());
  EXPECT_EQ(Get(id).allocation().id(), "77");
  // Cancelled while pending: the allocation is cancelled, once.
  ASSERT_TRUE(c_->Cancel(id, "not needed").ok());
  Pass();
  Pass();
  EXPECT_EQ(cluster_.cancelled, std::vector<std::string>{"77"});
  // An allocation we recorded that the cluster no longer lists ended unseen: a restart.
  const std::string gone = Submit(2);
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 1u);
  cluster_.listed.clear();
  Pass();
  const v1::Job job = Get(gone);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_NE(job.reason().find("no longer listed by slurm"), std::string::npos) << job.reason();
}

// An allocation that left the list before a pass saw it end (the coordinator was down
// longer than Slurm's MinJobAge) ends as the cluster's records say (Slurm's accounting,
// sacct): preempted, a new attempt with no restart counted; a record of another attempt
// (or none) leaves it what it was before, an unseen end, counted.
TEST_F(ProvisionerTest, AnAllocationThatLeftTheListEndsAsTheClustersRecordsSay) {
  const std::string id = Submit(2);
  Pass();
  RunOnAllocation(id, 0, "100");
  cluster_.listed.clear();
  Allocation record;
  record.id = "100", record.job_id = id, record.attempt = 0, record.phase = Allocation::Phase::kEnded;
  record.state = "PREEMPTED", record.end = Allocation::End::kPreempted;
  cluster_.records["100"] = record;
  Pass();
  v1::Job job = Get(id);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.reason().find("slurm job 100 PREEMPTED"), std::string::npos) << job.reason();
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 2u);
  RunOnAllocation(id, 1, "101");
  cluster_.listed.clear();
  record.id = "101", record.attempt = 0;  // a record that is not this attempt's: not believed
  cluster_.records["101"] = record;
  Pass();
  job = Get(id);
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_NE(job.reason().find("no longer listed by slurm"), std::string::npos) << job.reason();
}

// One that left the list while the records cannot be read (Slurm's accounting down:
// Unavailable) or still show it running (slurmdbd lags) waits for them, up to
// record_wait_seconds (3 here) from the first pass that missed it: an end recorded in time
// is followed (a preemption: no restart counted); a record that never shows the end ends
// it as gone at the first pass after that.
TEST_F(ProvisionerTest, AnUnlistedAllocationWaitsABoundedTimeForItsRecord) {
  const std::string id = Submit(2);
  Pass();
  RunOnAllocation(id, 0, "100");
  cluster_.listed.clear();
  cluster_.lookup_error = Status::Unavailable("sacct --json: Problem talking to the database");
  Pass();
  EXPECT_EQ(Get(id).attempt(), 0) << "waiting for the records";
  cluster_.lookup_error = Status::OK();
  const Allocation record = UnlistedButRecordedRunning(id, 0, "100");
  Pass();
  EXPECT_EQ(Get(id).attempt(), 0) << "its record still says running";
  EXPECT_TRUE(cluster_.cancelled.empty());
  RecordPreempted(record);
  Pass();
  v1::Job job = Get(id);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.reason().find("slurm job 100 PREEMPTED"), std::string::npos) << job.reason();
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 2u);
  RunOnAllocation(id, 1, "101");
  UnlistedButRecordedRunning(id, 1, "101");
  Pass();
  clock_.Advance(std::chrono::milliseconds(2999));
  Pass();
  EXPECT_EQ(Get(id).attempt(), 1) << "2.999 s waited";
  clock_.Advance(std::chrono::milliseconds(1));
  // Given up on while its record says it runs (hidden from squeue, say): cancelled, not
  // left beside the next attempt's; the attempt ends once the cancel went through.
  cluster_.cancel_error = Status::Unavailable("scancel: slurmctld busy");
  EXPECT_FALSE(provisioner_->Pass().ok());
  EXPECT_EQ(Get(id).attempt(), 1);
  cluster_.cancel_error = Status::OK();
  Pass();
  job = Get(id);
  EXPECT_EQ(cluster_.cancelled, std::vector<std::string>{"101"});
  EXPECT_EQ(job.attempt(), 2);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_NE(job.reason().find("its record still says RUNNING"), std::string::npos) << job.reason();
}

// The wait for a record counts from the first pass that missed the allocation, across a
// coordinator restart (kept on the job: ClusterAllocation.unlisted_since), not afresh from
// each start: 2 s before the restart and 1.5 s after end the 3 s wait.
TEST_F(ProvisionerTest, TheWaitForARecordDoesNotStartAgainAfterACoordinatorRestart) {
  const std::string id = Submit(2);
  Pass();
  RunOnAllocation(id, 0, "100");
  UnlistedButRecordedRunning(id, 0, "100");
  Pass();
  EXPECT_TRUE(Get(id).allocation().has_unlisted_since());
  clock_.Advance(std::chrono::seconds(2));
  Restart();
  Pass();
  EXPECT_EQ(Get(id).attempt(), 0) << "2 s of the 3 waited";
  clock_.Advance(std::chrono::milliseconds(1500));
  Pass();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_TRUE(HasEvent(job, "its record still says RUNNING")) << job.reason();
}

// The workers of a preempted allocation are killed with it, and their leases (10 s) run out
// while the records are late to show the preemption (here 60 s allowed), before or after
// a coordinator restart: the attempt is not failed for it (a restart counted) nor judged
// stuck, and ends as the record says once it does.
TEST_F(ProvisionerTest, LostWorkersOfAnAllocationAwaitingItsRecordFailNothingByThemselves) {
  record_wait_seconds_ = 60;
  Restart();
  const std::string id = Submit(2, "cpu", /*max_restarts=*/0);
  Pass();
  RunOnAllocation(id, 0, "100");
  const Allocation record = UnlistedButRecordedRunning(id, 0, "100");
  Pass();
  EXPECT_EQ(Get(id).allocation().state(), kAllocationUnlisted);
  OnlyABystanderBeatsFor(12);
  EXPECT_EQ(Get(id).attempt(), 0) << Get(id).reason();
  EXPECT_EQ(Get(id).state(), v1::SCHEDULED) << Get(id).reason();
  Restart();  // the allocation's workers do not register again: gone one lease after the start
  Pass();
  OnlyABystanderBeatsFor(12);
  EXPECT_EQ(Get(id).attempt(), 0) << Get(id).reason();
  RecordPreempted(record);
  Pass();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::QUEUED) << job.reason();
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 0);
  EXPECT_NE(job.reason().find("slurm job 100 PREEMPTED"), std::string::npos) << job.reason();
}

// Still listed as running, a lost worker fails its attempt as any other's.
TEST_F(ProvisionerTest, ALostWorkerOfAListedAllocationFailsItsAttempt) {
  const std::string id = Submit(2);
  Pass();
  RunOnAllocation(id, 0, "100");
  Pass();
  OnlyABystanderBeatsFor(12);
  const v1::Job job = Get(id);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.restarts(), 1);
  EXPECT_TRUE(HasEvent(job, "j-000001-a0-n1 lost: no heartbeat"));
}

// A sweep's paused trial (Coordinator::Hold) gives its allocation back and gets none while
// held; released, its next attempt gets one.
// Held while its allocation is being submitted (a sweep pausing the trial during sbatch):
// the attempt moves on, so the allocation recorded late is not the attempt's and is
// cancelled, not kept idle to its time limit. The same for one adopted after a restart.
TEST_F(ProvisionerTest, AJobHeldWhileItsAllocationIsSubmittedGivesThatAllocationBack) {
  const std::string id = Submit(2);
  cluster_.during_submit = [&] { ASSERT_TRUE(c_->Hold(id, "sweep s-000001: paused at rung 0").ok()); };
  Pass();
  cluster_.during_submit = nullptr;
  ASSERT_EQ(cluster_.requests.size(), 1u);
  EXPECT_EQ(Get(id).attempt(), 1);
  EXPECT_TRUE(Get(id).allocation().id().empty());
  cluster_.Show("100", id, 0, Allocation::Phase::kPending, "PENDING", "Priority");
  Pass();
  Pass();
  EXPECT_EQ(cluster_.cancelled, std::vector<std::string>{"100"});
  EXPECT_EQ(cluster_.requests.size(), 1u);  // held: none asked for
  EXPECT_EQ(Get(id).restarts(), 0);
  // Unrecorded (the coordinator died after sbatch), held before the first pass.
  const std::string other = Submit(2);
  cluster_.listed.clear();  // "100" gone from squeue
  cluster_.Show("77", other, 0, Allocation::Phase::kPending, "PENDING", "Priority");
  Restart();
  ASSERT_TRUE(c_->Hold(other, "sweep s-000001: paused at rung 0").ok());
  Pass();
  Pass();
  EXPECT_EQ(cluster_.cancelled, (std::vector<std::string>{"100", "77"}));
  EXPECT_EQ(Get(other).restarts(), 0);
}

// A job waiting out a restart's backoff, held and released: still waits it out (the hold's
// new attempt does not start it at once).
TEST_F(ProvisionerTest, AHoldDoesNotCutARestartsBackoffShort) {
  restart_backoff_seconds_ = 60;
  Restart();
  const std::string id = Submit(2);
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 1u);
  Pass();  // recorded, then gone from the list with no record: a counted restart
  v1::Job job = Get(id);
  ASSERT_EQ(job.attempt(), 1) << job.reason();
  ASSERT_EQ(job.restarts(), 1);
  ASSERT_TRUE(c_->Hold(id, "sweep s-000001: paused at rung 0").ok());
  ASSERT_TRUE(c_->Release(id).ok());
  Pass();
  EXPECT_EQ(cluster_.requests.size(), 1u) << "in the backoff";
  clock_.Advance(std::chrono::seconds(61));
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 2u);
  EXPECT_EQ(cluster_.requests[1].attempt, 2);
}

TEST_F(ProvisionerTest, AHeldJobGivesItsAllocationBackAndGetsNoneUntilReleased) {
  const std::string id = Submit(2);
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 1u);
  cluster_.Show("100", id, 0, Allocation::Phase::kPending, "PENDING", "Priority");
  Pass();
  ASSERT_TRUE(c_->Hold(id, "sweep s-000001: paused at rung 0").ok());
  EXPECT_EQ(Get(id).attempt(), 1);
  EXPECT_EQ(Get(id).restarts(), 0);
  Pass();
  Pass();
  EXPECT_EQ(cluster_.cancelled, std::vector<std::string>{"100"});
  EXPECT_EQ(cluster_.requests.size(), 1u);
  ASSERT_TRUE(c_->Release(id).ok());
  Pass();
  ASSERT_EQ(cluster_.requests.size(), 2u);
  EXPECT_EQ(cluster_.requests[1].attempt, 1);
}

TEST_F(ProvisionerTest, AnAllocationTheClusterCanNeverRunFailsTheJobAndAnUnreachableOneIsRetried) {
  const std::string id = Submit(2);
  cluster_.submit_error = Status::Unavailable("sbatch: Unable to contact slurm controller");
  EXPECT_FALSE(provisioner_->Pass().ok());
  EXPECT_EQ(Get(id).state(), v1::QUEUED);
  cluster_.submit_error = Status::InvalidArgument(
      "sbatch refused nightshift-" + id + "-a0: sbatch: error: Batch job submission failed: Invalid partition name specified");
  Pass();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_NE(job.error().find("Invalid partition name specified"), std::string::npos) << job.error();
  EXPECT_EQ(job.restarts(), 0);
}

TEST_F(ProvisionerTest, AWorkerOfAnAllocationIsReleasedOnlyWhenItsAttemptIsOverAndItHoldsNoRank) {
  const std::string id = Submit(3);
  Pass();
  RunOnAllocation(id, 0, "100");
  RegisterWorker("ordinary", 4);
  const std::string n1 = id + "-a0-n1";
  HeartbeatReply reply = c_->Heartbeat(n1, {}).value();
  EXPECT_FALSE(reply.release);  // its attempt is current
  ASSERT_EQ(reply.start.size(), 1u);
  ASSERT_TRUE(c_->Cancel(id, "done").ok());
  v1::TaskStatus running;
  running.mutable_task()->set_job_id(id);
  running.mutable_task()->set_attempt(0);
  running.set_state(v1::TASK_RUNNING);
  EXPECT_FALSE(c_->Heartbeat(n1, {running})->release);  // still holds a rank
  EXPECT_TRUE(c_->Heartbeat(n1, {})->release);
  EXPECT_FALSE(c_->Heartbeat("ordinary", {})->release);  // ours are never released
  // Still running: its released workers get release_grace_seconds (5 here) to end it.
  Pass();
  clock_.Advance(std::chrono::milliseconds(4999));
  Pass();
  EXPECT_TRUE(cluster_.cancelled.empty());
  clock_.Advance(std::chrono::milliseconds(1));
  Pass();
  EXPECT_EQ(cluster_.cancelled, std::vector<std::string>{"100"});
}

}  // namespace
}  // namespace nightshift
