// Exports of kept checkpoints on request (worker/checkpoint_export.h) with a stand-in for
// nightshift-trainer (a script that takes its time): one export at a time, a second
// request answered at once instead of waiting behind it, and what is exported already
// served while an export runs.
#include "worker/checkpoint_export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/worker/test_dirs.h"

namespace nightshift {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointExporterTest, ASecondExportIsRefusedAtOnceWhileOneRuns) {
  const std::string dir = testdirs::FreshTestDir("ckpt_export");
  fs::create_directories(dir + "/work/jobs/j-000001/attempt-0");
  std::ofstream(dir + "/work/jobs/j-000001/attempt-0/trainer-config.json") << "{}";
  fs::create_directories(dir + "/ckpt/j-000001/model-step-10");
  std::ofstream(dir + "/ckpt/j-000001/model-step-10/checksums.json") << "{}";
  // The stand-in: `--config C --export-step N --export-dir D`; D appears after 3 s.
  const std::string trainer = dir + "/slow-trainer";
  std::ofstream(trainer) << "#!/bin/sh\nsleep 3\nmkdir -p \"$6\" && echo '{}' > \"$6/checksums.json\"\n";
  ::chmod(trainer.c_str(), 0755);
  CheckpointExporter exporter({dir + "/work", dir + "/ckpt", trainer, 30});

  StatusOr<std::string> first = Status::Internal("not run");
  std::thread slow([&] { first = exporter.FolderAt("j-000001", 20); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Before, this waited for the first export and then ran its own.
  const StatusOr<std::string> second = exporter.FolderAt("j-000001", 30);
  EXPECT_EQ(second.status().code(), Status::kUnavailable) << second.status().ToString();
  EXPECT_FALSE(fs::exists(dir + "/ckpt/j-000001/model-step-30"));
  const StatusOr<std::string> done = exporter.FolderAt("j-000001", 10);  // exported before
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  EXPECT_EQ(done.value(), dir + "/ckpt/j-000001/model-step-10");
  slow.join();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(fs::exists(dir + "/ckpt/j-000001/model-step-20/checksums.json"));
}

}  // namespace
}  // namespace nightshift
