// Device choice, staging and memory statistics. On a machine without a GPU (CI) these
// exercise the CPU paths and the refusals; on a GPU node the CUDA ones.
#include "worker/trainer/device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace nightshift::trainer {
namespace {

TEST(DeviceTest, AutoTakesAGpuOnlyWhenOneIsVisible) {
  torch::Device d = torch::kCUDA;
  ASSERT_EQ(PickDevice("auto", 0, &d), "");
  EXPECT_EQ(d.is_cuda(), VisibleCudaDevices() > 0) << d;
  ASSERT_EQ(PickDevice("", 0, &d), "");  // absent means auto
  EXPECT_EQ(d.is_cuda(), VisibleCudaDevices() > 0) << d;
}

TEST(DeviceTest, CpuIsAlwaysTheCpu) {
  torch::Device d = torch::kCUDA;
  ASSERT_EQ(PickDevice("cpu", 3, &d), "");
  EXPECT_TRUE(d.is_cpu());
}

TEST(DeviceTest, CudaWithoutAVisibleGpuIsRefusedWithTheReason) {
  if (VisibleCudaDevices() > 0) {
    torch::Device d = torch::kCPU;
    ASSERT_EQ(PickDevice("cuda", 1, &d), "");
    EXPECT_TRUE(d.is_cuda());
    EXPECT_EQ(d.index(), 1 % VisibleCudaDevices());
    return;
  }
  torch::Device d = torch::kCPU;
  const std::string err = PickDevice("cuda", 0, &d);
  EXPECT_NE(err.find("spec.resources.device is cuda"), std::string::npos) << err;
  EXPECT_NE(err.find(BuiltWithCuda() ? "shows the trainer no GPU" : "CPU-only LibTorch"), std::string::npos) << err;
  EXPECT_TRUE(d.is_cpu()) << "untouched on error";
}

TEST(DeviceTest, UnknownDeviceNamesTheField) {
  torch::Device d = torch::kCPU;
  EXPECT_EQ(PickDevice("tpu", 0, &d), "spec.resources.device must be auto, cpu or cuda, got \"tpu\"");
}

TEST(DeviceTest, CpuStagingKeepsTheSameTensors) {
  Batch b;
  b.tokens = torch::arange(12, torch::kLong).view({3, 4});
  b.pad_mask = torch::zeros({3, 4}, torch::kBool);
  b.labels = torch::tensor({0, 1, 0}, torch::kLong);
  void* before = b.tokens.data_ptr();
  Batch staged = NewBatchStager(torch::kCPU)(b);
  EXPECT_EQ(staged.tokens.data_ptr(), before);
  EXPECT_TRUE(torch::equal(staged.labels, b.labels));
  EXPECT_EQ(ToDevice(b, torch::kCPU).tokens.data_ptr(), before);
}

TEST(DeviceTest, CpuMemoryFallsBackToTheHostFigures) {
  const DeviceMemory m = GetDeviceMemory(torch::kCPU);
  EXPECT_EQ(m.allocated, 0);
  EXPECT_EQ(m.reserved, 0);
  EXPECT_EQ(m.peak, 0);
  // The peak is the process's high-water mark: touching 256 MiB raises it that much.
  const int64_t before = PeakMemoryBytes(torch::kCPU);
  EXPECT_GT(before, 0);
  {
    std::vector<char> big(256 << 20);
    std::memset(big.data(), 1, big.size());
    EXPECT_GE(PeakMemoryBytes(torch::kCPU), int64_t{200} << 20);
  }
  EXPECT_EQ(MemoryLimit(torch::kCPU, 12345, 1), 12345);  // --memory-limit wins
  EXPECT_GT(MemoryLimit(torch::kCPU, 0, 1), int64_t{64} << 20);
  EXPECT_NE(NewMemoryMeter(torch::kCPU), nullptr);
  ReleaseCachedMemory(torch::kCPU);  // a no-op that must not throw
}

TEST(DeviceTest, CpuPeakIsTheMeasuredGemmRate) {
  EXPECT_DOUBLE_EQ(PeakFlops(torch::kCPU, "fp32", 1.5e11), 1.5e11);
  EXPECT_DOUBLE_EQ(PeakFlops(torch::kCPU, "bf16", 1.5e11), 1.5e11);
}

}  // namespace
}  // namespace nightshift::trainer
