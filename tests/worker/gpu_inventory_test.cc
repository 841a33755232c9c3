#include "worker/gpu_inventory.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace nightshift {
namespace {

// An NVML with three devices, the second of which cannot be opened.
NvmlApi FakeNvml(int* count_status) {
  static char devices[3];
  NvmlApi api;
  api.count = [count_status](unsigned int* n) {
    *n = 3;
    return *count_status;
  };
  api.handle = [](unsigned int i, void** dev) {
    if (i == 1) return 999;  // NVML_ERROR_UNKNOWN
    *dev = &devices[i];
    return 0;
  };
  api.name = [](void* dev, char* out, unsigned int len) {
    std::snprintf(out, len, "NVIDIA H200 #%d", static_cast<int>(static_cast<char*>(dev) - devices));
    return 0;
  };
  api.memory = [](void* dev, NvmlMemory* m) {
    const int i = static_cast<int>(static_cast<char*>(dev) - devices);
    m->total = (140ull << 30) + i;
    m->used = (1ull << 30) * (i + 1);
    m->free = m->total - m->used;
    return 0;
  };
  api.utilization = [](void* dev, NvmlUtilization* u) {
    u->gpu = static_cast<char*>(dev) == &devices[0] ? 37 : 100;
    return 0;
  };
  return api;
}

TEST(GpuInventoryTest, ReadsEveryDeviceNvmlAnswersFor) {
  int status = 0;
  const NvmlApi nvml = FakeNvml(&status);
  const std::vector<v1::GpuInfo> gpus = DiscoverGpus(nvml);
  ASSERT_EQ(gpus.size(), 2u);  // device 1's handle failed: left out, indices kept
  EXPECT_EQ(gpus[0].index(), 0);
  EXPECT_EQ(gpus[0].name(), "NVIDIA H200 #0");
  EXPECT_EQ(gpus[0].memory_bytes(), int64_t{140} << 30);
  EXPECT_EQ(gpus[1].index(), 2);
  EXPECT_EQ(gpus[1].name(), "NVIDIA H200 #2");
  EXPECT_EQ(gpus[1].memory_bytes(), (int64_t{140} << 30) + 2);
  const std::vector<GpuUsage> usage = SampleGpus(nvml);
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_DOUBLE_EQ(usage[0].utilization, 0.37);
  EXPECT_EQ(usage[0].memory_used, int64_t{1} << 30);
  EXPECT_EQ(usage[1].index, 2);
  EXPECT_DOUBLE_EQ(usage[1].utilization, 1.0);
  EXPECT_EQ(usage[1].memory_used, int64_t{3} << 30);
  EXPECT_EQ(usage[1].memory_total, (int64_t{140} << 30) + 2);
}

TEST(GpuInventoryTest, AFailedCountMeansNoGpus) {
  int status = 999;
  const NvmlApi nvml = FakeNvml(&status);
  EXPECT_TRUE(DiscoverGpus(nvml).empty());
  EXPECT_TRUE(SampleGpus(nvml).empty());
}

TEST(GpuInventoryTest, AllocatorHandsOutEachGpuOnce) {
  std::vector<v1::GpuInfo> gpus(4);
  for (int i = 0; i < 4; ++i) gpus[i].set_index(i);
  GpuAllocator a(gpus);
  EXPECT_EQ(a.Take(3), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(a.Take(2).empty());  // only one left: all or nothing
  EXPECT_EQ(a.free_count(), 1);
  a.Release({1});
  EXPECT_EQ(a.Take(2), (std::vector<int>{1, 3}));
  EXPECT_EQ(a.free_count(), 0);
}

}  // namespace
}  // namespace nightshift

namespace nightshift {
namespace {

// Slurm's gres plugin sets CUDA_VISIBLE_DEVICES to the allocation's GPUs by index: only
// those are offered; unset means all, empty none, and an index the node lacks is an error
// naming the variable: the node's (FAILED_PRECONDITION: the worker exits 1, tried again
// elsewhere), not a bad flag's (exit 2, which fails a Kubernetes Job for good).
TEST(GpuInventoryTest, OnlyTheGpusCudaVisibleDevicesNamesAreOffered) {
  std::vector<v1::GpuInfo> all(4);
  for (int i = 0; i < 4; ++i) all[i].set_index(i);
  auto visible = VisibleGpus(all, "3,1");
  ASSERT_TRUE(visible.ok()) << visible.status().ToString();
  ASSERT_EQ(visible->size(), 2u);
  EXPECT_EQ((*visible)[0].index(), 3);
  EXPECT_EQ((*visible)[1].index(), 1);
  EXPECT_EQ(VisibleGpus(all, nullptr)->size(), 4u);
  EXPECT_TRUE(VisibleGpus(all, "")->empty());
  const Status bad = VisibleGpus(all, "0,7").status();
  EXPECT_EQ(bad.code(), Status::kFailedPrecondition);
  EXPECT_NE(bad.message().find("CUDA_VISIBLE_DEVICES: '7'"), std::string::npos) << bad.ToString();
}

}  // namespace
}  // namespace nightshift
