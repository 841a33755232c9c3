// The coordinator's parts wired as Coordinator wires them, over a FakeJobStore and a
// FakeClock, for the parts' own tests. Tests run on one thread, so they call the parts
// without the Coordinator's mutex (its role: nobody else touches them meanwhile).
#ifndef NIGHTSHIFT_TESTS_COORDINATOR_PARTS_H_
#define NIGHTSHIFT_TESTS_COORDINATOR_PARTS_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "coordinator/attempts.h"
#include "coordinator/checkpoint_records.h"
#include "coordinator/job_table.h"
#include "coordinator/placer.h"
#include "coordinator/task_reports.h"
#include "coordinator/worker_registry.h"
#include "tests/common/fake_clock.h"
#include "tests/common/fake_job_store.h"

namespace nightshift {

// Records what the parts tell metrics.
class RecordingObserver : public CoordinatorObserver {
 public:
  void JobScheduled(double queue_wait_seconds) override { waits.push_back(queue_wait_seconds); }
  void JobRestarted(const std::string& reason) override { restarts.push_back(reason); }
  void RecordMovedAside(const std::string& key) override { moved_aside.push_back(key); }
  void CheckpointClaimsIgnored(int n) override { claims_ignored += n; }
  std::vector<double> waits;
  int claims_ignored = 0;
  std::vector<std::string> restarts;
  std::vector<std::string> moved_aside;
};

class PartsTest : public testing::Test {
 protected:
  PartsTest() {
    options_.lease_seconds = 10;
    options_.heartbeat_interval_ms = 250;
    options_.restart_backoff_seconds = 1;
    options_.stop_timeout_seconds = 60;
    options_.observer = &observer_;
    Build();
  }
  // (Re)builds every part from options_ (the parts copy them: change options_, then call
  // this), over the same disk: a coordinator restart.
  void Build() {
    placer_.reset();
    reports_.reset();
    attempts_.reset();
    jobs_ = std::make_unique<JobTable>(std::make_unique<FakeJobStore>(disk_), &clock_);
    workers_ = std::make_unique<WorkerRegistry>(options_, &clock_);
    attempts_ = std::make_unique<Attempts>(options_, &clock_, jobs_.get(), workers_.get());
    reports_ = std::make_unique<TaskReports>(&clock_, jobs_.get(), attempts_.get());
    placer_ = std::make_unique<Placer>(jobs_.get(), workers_.get(), attempts_.get());
  }

  static v1::JobSpec Spec(int world_size = 1, int max_restarts = 2) {
    v1::JobSpec spec;
    spec.set_name("test");
    spec.mutable_resources()->set_world_size(world_size);
    spec.mutable_restart()->set_max_restarts(max_restarts);
    return spec;
  }
  // A new QUEUED job; its entry.
  JobEntry* Submit(const v1::JobSpec& spec = Spec(), const std::string& owner = "") {
    auto job = jobs_->Submit(spec, owner, "", /*max_unfinished=*/1000);
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    return job.ok() ? jobs_->Find(job->id()) : nullptr;
  }
  void Register(const std::string& name, int slots = 1, int gpus = 0, int64_t memory_bytes = 0) {
    v1::WorkerInfo w;
    w.set_name(name);
    w.set_slots(slots);
    w.set_memory_bytes(memory_bytes);
    w.set_log_address(name + ":7000");
    for (int i = 0; i < gpus; ++i) w.add_gpus();
    EXPECT_TRUE(workers_->Register(w, RegistrationSource{}, "key-" + name).ok());
  }
  // The manifest digest tests give a checkpoint of `step` (any other stands for a
  // tampered one).
  static std::string Digest(int64_t step) { return "manifest-of-step-" + std::to_string(step); }
  // A heartbeat that lists no task; `held`: job id -> newest checkpoint on its disk (with
  // Digest(step)). Its claims are judged as the Coordinator judges them.
  HeartbeatReply Beat(const std::string& name, const std::map<std::string, int64_t>& held = {}) {
    std::vector<v1::HeldCheckpoint> checkpoints;
    for (const auto& [job, step] : held) {
      checkpoints.emplace_back().set_job_id(job);
      checkpoints.back().set_step(step);
      checkpoints.back().set_manifest_sha256(Digest(step));
    }
    HeartbeatReply reply;
    EXPECT_TRUE(workers_->Heartbeat(name, clock_.Now(), {}, nullptr, checkpoints, &reply).ok());
    observer_.CheckpointClaimsIgnored(placer_->JudgeClaims(name));
    return reply;
  }
  // `worker`, running the job's current attempt, reports writing checkpoint `step`.
  void ReportCheckpoint(JobEntry* entry, const std::string& worker, int64_t step) {
    v1::TaskStatus s = Task(entry->job.id(), entry->job.attempt(), v1::TASK_RUNNING);
    s.set_checkpoint_step(step);
    s.set_checkpoint_manifest_sha256(Digest(step));
    HeartbeatReply ignored;
    reports_->Handle(worker, s, &ignored);
  }
  static v1::TaskStatus Task(const std::string& job, int attempt, v1::TaskState state) {
    v1::TaskStatus s;
    s.mutable_task()->set_job_id(job);
    s.mutable_task()->set_attempt(attempt);
    s.set_state(state);
    return s;
  }
  // Places the job's ranks on `workers`, `ranks_each` on each: SCHEDULED.
  void PlaceOn(JobEntry* entry, const std::vector<std::string>& workers, int ranks_each = 1) {
    std::vector<SchedPart> parts;
    for (size_t i = 0; i < workers.size(); ++i)
      parts.push_back({workers[i], static_cast<int>(i) * ranks_each, ranks_each});
    attempts_->Place(entry, parts);
  }
  // Places the job on `workers` and marks every part started: RUNNING.
  void RunOn(JobEntry* entry, const std::vector<std::string>& workers) {
    PlaceOn(entry, workers);
    for (auto& p : *entry->job.mutable_placements()) attempts_->PartStarted(entry, &p);
    ASSERT_EQ(entry->job.state(), v1::RUNNING);
  }

  FakeClock clock_;
  RecordingObserver observer_;
  CoordinatorOptions options_;
  std::shared_ptr<FakeJobStore::Disk> disk_ = std::make_shared<FakeJobStore::Disk>();
  std::unique_ptr<JobTable> jobs_;
  std::unique_ptr<WorkerRegistry> workers_;
  std::unique_ptr<Attempts> attempts_;
  std::unique_ptr<TaskReports> reports_;
  std::unique_ptr<Placer> placer_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_TESTS_COORDINATOR_PARTS_H_
