#include "worker/gpu_inventory.h"

#include <dlfcn.h>

#include <algorithm>

namespace nightshift {
namespace {

// The NVML library, loaded at run time (nvml.h is not needed: the ABI is stable C, and
// NvmlMemory / NvmlUtilization have its structs' layouts).
struct Nvml {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*handle)(unsigned int, void**) = nullptr;
  int (*name)(void*, char*, unsigned int) = nullptr;
  int (*memory)(void*, NvmlMemory*) = nullptr;
  int (*utilization)(void*, NvmlUtilization*) = nullptr;

  // Loads and initialises NVML; false (and nothing to clean up) when it is absent.
  bool Open() {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return false;
    init = reinterpret_cast<decltype(init)>(dlsym(lib, "nvmlInit_v2"));
    shutdown = reinterpret_cast<decltype(shutdown)>(dlsym(lib, "nvmlShutdown"));
    count = reinterpret_cast<decltype(count)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
    handle = reinterpret_cast<decltype(handle)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    name = reinterpret_cast<decltype(name)>(dlsym(lib, "nvmlDeviceGetName"));
    memory = reinterpret_cast<decltype(memory)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    utilization = reinterpret_cast<decltype(utilization)>(dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    if (!init || !shutdown || !count || !handle || !name || !memory || !utilization || init() != 0) {
      dlclose(lib);
      lib = nullptr;
      return false;
    }
    return true;
  }
  NvmlApi Api() const { return {count, handle, name, memory, utilization}; }
  ~Nvml() {
    if (lib != nullptr) {
      shutdown();
      dlclose(lib);
    }
  }
};

}  // namespace

std::vector<v1::GpuInfo> DiscoverGpus(const NvmlApi& nvml) {
  std::vector<v1::GpuInfo> gpus;
  unsigned int n = 0;
  if (nvml.count(&n) != 0) return gpus;
  for (unsigned int i = 0; i < n; ++i) {
    void* dev = nullptr;
    if (nvml.handle(i, &dev) != 0) continue;
    char name[96] = {0};
    nvml.name(dev, name, sizeof(name) - 1);
    NvmlMemory mem;
    nvml.memory(dev, &mem);
    v1::GpuInfo g;
    g.set_index(static_cast<int>(i));
    g.set_name(name);
    g.set_memory_bytes(static_cast<int64_t>(mem.total));
    gpus.push_back(g);
  }
  return gpus;
}

std::vector<GpuUsage> SampleGpus(const NvmlApi& nvml) {
  std::vector<GpuUsage> out;
  unsigned int n = 0;
  if (nvml.count(&n) != 0) return out;
  for (unsigned int i = 0; i < n; ++i) {
    void* dev = nullptr;
    if (nvml.handle(i, &dev) != 0) continue;
    NvmlMemory mem;
    NvmlUtilization util;
    nvml.memory(dev, &mem);
    nvml.utilization(dev, &util);
    out.push_back({static_cast<int>(i), util.gpu / 100.0, static_cast<int64_t>(mem.used),
                   static_cast<int64_t>(mem.total)});
  }
  return out;
}

std::vector<v1::GpuInfo> DiscoverGpus() {
  Nvml nvml;
  return nvml.Open() ? DiscoverGpus(nvml.Api()) : std::vector<v1::GpuInfo>{};
}

StatusOr<std::vector<v1::GpuInfo>> VisibleGpus(const std::vector<v1::GpuInfo>& all, const char* visible) {
  if (visible == nullptr) return all;
  std::vector<v1::GpuInfo> kept;
  const std::string list = visible;
  size_t start = 0;
  while (start < list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string entry = list.substr(start, comma - start);
    start = comma + 1;
    auto it = std::find_if(all.begin(), all.end(), [&](const v1::GpuInfo& g) { return std::to_string(g.index()) == entry; });
    if (it == all.end())
      return Status::FailedPrecondition("CUDA_VISIBLE_DEVICES: '" + entry + "' is not the index of a GPU here (" +
                                        std::to_string(all.size()) + " found)");
    kept.push_back(*it);
  }
  return kept;
}

std::vector<GpuUsage> SampleGpus() {
  Nvml nvml;
  return nvml.Open() ? SampleGpus(nvml.Api()) : std::vector<GpuUsage>{};
}

GpuAllocator::GpuAllocator(const std::vector<v1::GpuInfo>& gpus) {
  for (const auto& g : gpus) free_.insert(g.index());
}

std::vector<int> GpuAllocator::Take(int n) {
  std::lock_guard<std::mutex> lock(mu_);
  if (n <= 0 || static_cast<int>(free_.size()) < n) return {};
  std::vector<int> out;
  for (auto it = free_.begin(); static_cast<int>(out.size()) < n; it = free_.erase(it)) out.push_back(*it);
  return out;
}

void GpuAllocator::Release(const std::vector<int>& indices) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.insert(indices.begin(), indices.end());
}

int GpuAllocator::free_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_.size());
}

}  // namespace nightshift
