// A job's checkpoint folder (common/format/checkpoint_layout.h): step folder names both
// ways, the steps with their COMPLETE marker, and the one job-id rule.
#include "common/format/checkpoint_layout.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace nightshift::format {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointLayoutTest, StepFolderNamesGoBothWays) {
  EXPECT_EQ(StepDirName(123), "step-00000123");
  EXPECT_EQ(StepOfDirName("step-00000123"), 123);
  EXPECT_EQ(StepOfDirName(StepDirName(123456789012LL)), 123456789012LL);
  for (const char* other : {"step-", "step-12a", "steps-1", ".incoming-step-00000001", "step-1234567890123456789"})
    EXPECT_EQ(StepOfDirName(other), -1) << other;
}

TEST(CheckpointLayoutTest, OnlyStepsWithTheirMarkerAreComplete) {
  const fs::path job = fs::path(::testing::TempDir()) / "layout_job";
  fs::remove_all(job);
  for (int64_t step : {30, 10, 20}) {
    fs::create_directories(job / StepDirName(step));
    if (step != 20) std::ofstream(job / StepDirName(step) / kCheckpointComplete) << step;
  }
  fs::create_directories(job / ".incoming-step-00000040");
  EXPECT_EQ(CompleteSteps(job.string()), (std::vector<int64_t>{10, 30}));
  RemoveCheckpoint((job / StepDirName(30)).string());
  EXPECT_EQ(CompleteSteps(job.string()), (std::vector<int64_t>{10}));
  EXPECT_FALSE(fs::exists(job / StepDirName(30)));
  EXPECT_TRUE(CompleteSteps((job / "missing").string()).empty());
}

TEST(CheckpointLayoutTest, AJobIdIsAPlainShortName) {
  for (const char* ok : {"j-000001", "job_7", "A", "j-999999"}) EXPECT_TRUE(IsJobId(ok)) << ok;
  for (const char* bad : {"", ".", "..", "../escape", "j/1", "j.1", ".hidden", "j 1", "j\n1"})
    EXPECT_FALSE(IsJobId(bad)) << bad;
  EXPECT_TRUE(IsJobId(std::string(64, 'j')));
  EXPECT_FALSE(IsJobId(std::string(65, 'j')));
}

}  // namespace
}  // namespace nightshift::format
