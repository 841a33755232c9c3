#include "common/job_store.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace nightshift {
namespace {

TEST(JobStoreTest, CloseAndReopenGivesBackEveryJob) {
  const std::string dir = testing::TempDir() + "/jobstore." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int i = 1; i <= 50; ++i) {
      v1::Job job;
      job.set_id("j-" + std::to_string(1000 + i));
      job.set_submit_seq(i);
      job.set_state(i % 3 == 0 ? v1::SUCCEEDED : v1::QUEUED);
      (*job.mutable_metrics())["val_accuracy"] = i / 100.0;
      ASSERT_TRUE((*store)->Put(job, /*sync=*/true).ok());
    }
    // Overwrite one: the newest record wins.
    v1::Job job;
    job.set_id("j-1007");
    job.set_submit_seq(7);
    job.set_state(v1::FAILED);
    job.set_error("boom");
    ASSERT_TRUE((*store)->Put(job, true).ok());
  }
  auto store = JobStore::Open(dir);
  ASSERT_TRUE(store.ok());
  StoredJobs stored;
  ASSERT_TRUE((*store)->LoadAll(&stored).ok());
  const std::vector<v1::Job>& jobs = stored.jobs;
  ASSERT_EQ(jobs.size(), 50u);
  for (const auto& job : jobs) {
    int i = static_cast<int>(job.submit_seq());
    EXPECT_EQ(job.id(), "j-" + std::to_string(1000 + i));
    if (i == 7) {
      EXPECT_EQ(job.state(), v1::FAILED);
      EXPECT_EQ(job.error(), "boom");
    } else {
      EXPECT_EQ(job.state(), i % 3 == 0 ? v1::SUCCEEDED : v1::QUEUED);
      EXPECT_DOUBLE_EQ(job.metrics().at("val_accuracy"), i / 100.0);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(JobStoreTest, MetricsLiveApartFromJobsAndSurviveReopen) {
  const std::string dir = testing::TempDir() + "/jobstore-metrics." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    v1::Job job;
    job.set_id("j-000001");
    ASSERT_TRUE((*store)->Put(job, true).ok());
    v1::JobMetrics m;
    m.set_job_id("j-000001");
    auto* a = m.add_attempts();
    a->set_stride(2);
    for (int i = 0; i < 300; ++i) {
      auto* p = a->add_train();
      p->set_step(2 * i);
      p->set_loss(1.0 / (i + 1));
    }
    (*a->add_evals()->mutable_metrics())["val_accuracy"] = 0.75;
    ASSERT_TRUE((*store)->PutMetrics(m, false).ok());
    v1::JobMetrics none;
    EXPECT_EQ((*store)->GetMetrics("j-000002", &none).code(), Status::kNotFound);
  }
  auto store = JobStore::Open(dir);
  ASSERT_TRUE(store.ok());
  StoredJobs stored;
  ASSERT_TRUE((*store)->LoadAll(&stored).ok());
  const std::vector<v1::Job>& jobs = stored.jobs;
  EXPECT_EQ(jobs.size(), 1u);  // the history is not a job
  v1::JobMetrics m;
  ASSERT_TRUE((*store)->GetMetrics("j-000001", &m).ok());
  ASSERT_EQ(m.attempts_size(), 1);
  EXPECT_EQ(m.attempts(0).train_size(), 300);
  EXPECT_EQ(m.attempts(0).train(299).step(), 598);
  EXPECT_DOUBLE_EQ(m.attempts(0).evals(0).metrics().at("val_accuracy"), 0.75);
  std::filesystem::remove_all(dir);
}

// A record that does not parse (a torn write, a bad disk, a hand edit) is moved aside
// with its bytes kept, and every other record loads.
TEST(JobStoreTest, ARecordThatDoesNotParseIsMovedAsideAndTheRestLoad) {
  const std::string dir = testing::TempDir() + "/jobstore-corrupt." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const std::string garbage = "\x0a\xff\xff\xff\xff\xff not a job";
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (const char* id : {"j-000001", "j-000003"}) {
      v1::Job job;
      job.set_id(id);
      ASSERT_TRUE((*store)->Put(job, true).ok());
    }
  }
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "job/j-000002", garbage).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "metrics/j-000001", garbage).ok());
  }
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok());
    StoredJobs stored;
    ASSERT_TRUE((*store)->LoadAll(&stored).ok());
    ASSERT_EQ(stored.jobs.size(), 2u);
    EXPECT_EQ(stored.jobs[1].id(), "j-000003");
    EXPECT_EQ(stored.moved_aside, std::vector<std::string>{"j-000002"});
    v1::JobMetrics m;
    Status history = (*store)->GetMetrics("j-000001", &m);
    EXPECT_EQ(history.code(), Status::kDataLoss);
    EXPECT_NE(history.message().find("metrics/j-000001"), std::string::npos) << history.message();
    // Moved, not loaded again: the next start finds nothing to move.
    ASSERT_TRUE((*store)->LoadAll(&stored).ok());
    EXPECT_TRUE(stored.moved_aside.empty());
    EXPECT_EQ((*store)->GetMetrics("j-000001", &m).code(), Status::kNotFound);
  }
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::OpenForReadOnly(rocksdb::Options(), dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string value;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), "corrupt/job/j-000002", &value).ok());
  EXPECT_EQ(value, garbage);  // kept for a person to look at
  EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), "job/j-000002", &value).IsNotFound());
  EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), "corrupt/metrics/j-000001", &value).ok());
  db.reset();
  std::filesystem::remove_all(dir);
}

// A deleted job leaves neither its record nor its history, and its number stays taken.
TEST(JobStoreTest, DeleteRemovesTheRecordAndHistoryAndKeepsTheHighestNumber) {
  const std::string dir = testing::TempDir() + "/jobstore-delete." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok());
    for (int seq : {1, 2}) {
      v1::Job job;
      job.set_id("j-00000" + std::to_string(seq));
      job.set_submit_seq(seq);
      ASSERT_TRUE((*store)->Put(job, true).ok());
      v1::JobMetrics m;
      m.set_job_id(job.id());
      ASSERT_TRUE((*store)->PutMetrics(m, true).ok());
    }
    v1::Job second;
    second.set_id("j-000002");
    second.set_submit_seq(2);
    ASSERT_TRUE((*store)->Delete(second, true).ok());
  }
  auto store = JobStore::Open(dir);
  ASSERT_TRUE(store.ok());
  StoredJobs stored;
  ASSERT_TRUE((*store)->LoadAll(&stored).ok());
  ASSERT_EQ(stored.jobs.size(), 1u);
  EXPECT_EQ(stored.jobs[0].id(), "j-000001");
  EXPECT_EQ(stored.deleted_seq, 2u);
  v1::JobMetrics m;
  EXPECT_EQ((*store)->GetMetrics("j-000002", &m).code(), Status::kNotFound);
  EXPECT_TRUE((*store)->GetMetrics("j-000001", &m).ok());
  std::filesystem::remove_all(dir);
}

// A sweep's deletion keeps its number apart from the jobs': the job's deleted_seq stays.
TEST(JobStoreTest, DeleteSweepRemovesItsRecordAndKeepsTheHighestSweepNumber) {
  const std::string dir = testing::TempDir() + "/jobstore-delete-sweep." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  {
    auto store = JobStore::Open(dir);
    ASSERT_TRUE(store.ok());
    for (int seq : {1, 2}) {
      v1::Sweep sweep;
      sweep.set_id("s-00000" + std::to_string(seq));
      sweep.set_submit_seq(seq);
      ASSERT_TRUE((*store)->PutSweep(sweep, true).ok());
      if (seq == 2) ASSERT_TRUE((*store)->DeleteSweep(sweep, true).ok());
    }
  }
  auto store = JobStore::Open(dir);
  ASSERT_TRUE(store.ok());
  std::vector<v1::Sweep> sweeps;
  std::vector<std::string> aside;
  uint64_t deleted = 0;
  ASSERT_TRUE((*store)->LoadSweeps(&sweeps, &aside, &deleted).ok());
  ASSERT_EQ(sweeps.size(), 1u);
  EXPECT_EQ(sweeps[0].id(), "s-000001");
  EXPECT_EQ(deleted, 2u);
  StoredJobs stored;
  ASSERT_TRUE((*store)->LoadAll(&stored).ok());
  EXPECT_EQ(stored.deleted_seq, 0u);
  std::filesystem::remove_all(dir);
}

TEST(JobStoreTest, UnwritableDirectoryIsAnError) {
  auto store = JobStore::Open("/proc/nightshift-cannot-exist");
  EXPECT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("/proc/nightshift-cannot-exist"), std::string::npos);
}

}  // namespace
}  // namespace nightshift
