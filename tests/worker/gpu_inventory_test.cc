#include "worker/gpu_inventory.h"

#include <gtest/gtest.h>

namespace nightshift {
namespace {

TEST(GpuInventoryTest, WithoutADriverThereAreNoGpusAndNoCrash) {
  // CI machines have no NVIDIA driver: NVML is absent and both calls return nothing.
  // On a GPU machine they return one entry per device, with a name and memory.
  for (const auto& g : DiscoverGpus()) {
    EXPECT_FALSE(g.name().empty());
    EXPECT_GT(g.memory_bytes(), 0);
  }
  EXPECT_EQ(SampleGpus().size(), DiscoverGpus().size());
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
