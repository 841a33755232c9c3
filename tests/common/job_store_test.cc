#include "common/job_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

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
  std::vector<v1::Job> jobs;
  ASSERT_TRUE((*store)->LoadAll(&jobs).ok());
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
  std::vector<v1::Job> jobs;
  ASSERT_TRUE((*store)->LoadAll(&jobs).ok());
  EXPECT_EQ(jobs.size(), 1u);  // the history is not a job
  v1::JobMetrics m;
  ASSERT_TRUE((*store)->GetMetrics("j-000001", &m).ok());
  ASSERT_EQ(m.attempts_size(), 1);
  EXPECT_EQ(m.attempts(0).train_size(), 300);
  EXPECT_EQ(m.attempts(0).train(299).step(), 598);
  EXPECT_DOUBLE_EQ(m.attempts(0).evals(0).metrics().at("val_accuracy"), 0.75);
  std::filesystem::remove_all(dir);
}

TEST(JobStoreTest, UnwritableDirectoryIsAnError) {
  auto store = JobStore::Open("/proc/nightshift-cannot-exist");
  EXPECT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("/proc/nightshift-cannot-exist"), std::string::npos);
}

}  // namespace
}  // namespace nightshift
