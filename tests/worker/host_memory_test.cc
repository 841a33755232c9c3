// HostMemoryBytes on made-up /proc and /sys/fs/cgroup folders: MemTotal, lowered by the
// lowest cgroup limit (v2 memory.max, v1 memory.limit_in_bytes) on the way to the root.
#include "worker/host_memory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace nightshift {
namespace {

namespace fs = std::filesystem;

class HostMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("host_memory." + std::to_string(::getpid()));
    fs::remove_all(root_);
    Write("proc/meminfo", "MemTotal:       24683772 kB\nMemFree:         1000 kB\n");
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    fs::create_directories((root_ / path).parent_path());
    std::ofstream(root_ / path) << text;
  }
  int64_t Bytes() { return HostMemoryBytes((root_ / "proc").string(), (root_ / "cgroup").string()); }
  fs::path root_;
};

constexpr int64_t kMemTotal = int64_t{24683772} * 1024;

TEST_F(HostMemoryTest, MemTotalWithoutACgroupLimit) {
  EXPECT_EQ(Bytes(), kMemTotal);  // no /proc/self/cgroup
  Write("proc/self/cgroup", "0::/system.slice/worker.service\n");
  Write("cgroup/system.slice/worker.service/memory.max", "max\n");
  EXPECT_EQ(Bytes(), kMemTotal);
  Write("cgroup/memory.max", "99999999999999\n");  // above MemTotal
  EXPECT_EQ(Bytes(), kMemTotal);
}

TEST_F(HostMemoryTest, TheLowestLimitOnTheWayToTheRootOnCgroupV2) {
  Write("proc/self/cgroup", "0::/slurm/uid_0/job_12/step_0\n");
  Write("cgroup/slurm/uid_0/job_12/step_0/memory.max", "max\n");
  Write("cgroup/slurm/uid_0/job_12/memory.max", "8589934592\n");  // the job's --mem=8G
  Write("cgroup/slurm/memory.max", "17179869184\n");
  EXPECT_EQ(Bytes(), int64_t{8} << 30);
}

TEST_F(HostMemoryTest, TheMemoryControllersLimitOnAHybridCgroupV1Host) {
  Write("proc/self/cgroup", "4:cpu,memory:/process_api/abc\n0::/\n");
  Write("cgroup/memory/process_api/abc/memory.limit_in_bytes", "9223372036854771712\n");  // none
  Write("cgroup/memory/process_api/memory.limit_in_bytes", "4294967296\n");
  EXPECT_EQ(Bytes(), int64_t{4} << 30);
}

}  // namespace
}  // namespace nightshift
