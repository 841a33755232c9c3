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

TEST(JobStoreTest, UnwritableDirectoryIsAnError) {
  auto store = JobStore::Open("/proc/nightshift-cannot-exist");
  EXPECT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("/proc/nightshift-cannot-exist"), std::string::npos);
}

}  // namespace
}  // namespace nightshift
