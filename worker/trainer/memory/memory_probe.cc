#include "worker/trainer/memory/memory_probe.h"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "worker/trainer/memory/oom.h"

namespace nightshift::trainer {
namespace {

// A "Key:  1234 kB" line of a /proc file, in bytes (-1 if absent).
class HostMemoryMeter : public MemoryMeter {
 public:
  void ResetPeak() override {
    // Free heap goes back to the kernel first: the trainer keeps it otherwise (main.cc),
    // and the peak can only be reset to what is resident now.
    ::malloc_trim(0);
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    resettable_ = clear.good();
  }
  int64_t PeakBytes() override {
    const int64_t hwm = ProcBytes("/proc/self/status", "VmHWM:");
    if (resettable_ && hwm >= 0) return hwm;
    struct rusage usage {};
    getrusage(RUSAGE_SELF, &usage);
    return std::max<int64_t>(hwm, static_cast<int64_t>(usage.ru_maxrss) * 1024);
  }

 private:
  bool resettable_ = false;
};

}  // namespace

int64_t ProcBytes(const char* path, const char* key) {
  std::ifstream in(path);
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, n, key) == 0) return std::atoll(line.c_str() + n) * 1024;
  return -1;
}

std::unique_ptr<MemoryMeter> NewHostMemoryMeter() { return std::make_unique<HostMemoryMeter>(); }

int64_t HostMemoryLimit(int64_t limit_bytes, int local_ranks) {
  if (limit_bytes > 0) return limit_bytes;
  return std::max<int64_t>(0, ProcBytes("/proc/self/status", "VmRSS:")) +
         std::max<int64_t>(0, ProcBytes("/proc/meminfo", "MemAvailable:")) / std::max(local_ranks, 1);
}

ProbeResult ProbeMaxTokens(const ProbeOptions& o, MemoryMeter& meter,
                           const std::function<void(int64_t rows)>& run) {
  ProbeResult result;
  result.target_bytes = static_cast<int64_t>(o.target_fraction * static_cast<double>(o.limit_bytes));
  const int64_t max_len = std::max<int64_t>(o.max_len, 1);
  const int64_t cap_rows = o.cap_tokens > 0 ? std::max<int64_t>(1, o.cap_tokens / max_len) : (int64_t{1} << 40);
  // The two largest row counts that fitted, with their peaks: the line through them.
  std::pair<int64_t, int64_t> fit_a{0, 0}, fit_b{0, 0};
  const auto past_target = [&](int64_t rows) {
    if (fit_a.first == 0) return false;
    const double slope = double(fit_b.second - fit_a.second) / double(fit_b.first - fit_a.first);
    return double(fit_b.second) + std::max(0.0, slope) * double(rows - fit_b.first) > double(result.target_bytes);
  };
  // Peak of one probe (on every rank, in lockstep), or -1 when it does not fit.
  auto probe = [&](int64_t rows) -> int64_t {
    if (!o.agree(!past_target(rows))) {
      ++result.predicted;
      return -1;
    }
    ++result.probes;
    meter.ResetPeak();
    int64_t peak = -1;
    try {
      run(rows);
      peak = meter.PeakBytes();
    } catch (const std::exception& e) {
      if (!IsOutOfMemory(e)) throw;
    }
    if (!o.agree(peak >= 0 && peak <= result.target_bytes)) return -1;
    if (rows > fit_b.first) fit_a = std::exchange(fit_b, {rows, peak});
    else if (rows > fit_a.first) fit_a = {rows, peak};
    return peak;
  };

  int64_t good = 0, bad = 0;  // rows that fitted / the smallest that did not (0: none yet)
  int64_t good_peak = 0;
  for (int64_t rows = 1;; rows = std::min(rows * 2, cap_rows)) {
    const int64_t peak = probe(rows);
    if (peak < 0) { bad = rows; break; }
    good = rows;
    good_peak = peak;
    if (rows >= cap_rows) break;
  }
  if (good == 0)
    throw std::runtime_error("max_tokens: auto: one sample of " + std::to_string(max_len) +
                             " tokens does not fit in " + std::to_string(result.target_bytes) +
                             " bytes (" + std::to_string(o.target_fraction) + " of the memory limit " +
                             std::to_string(o.limit_bytes) + "); raise the limit or lower model.max_len");
  // Bisect to within 1/16 of the answer.
  while (bad > 0 && bad - good > std::max<int64_t>(1, good / 16)) {
    const int64_t mid = good + (bad - good) / 2;
    const int64_t peak = probe(mid);
    if (peak < 0) {
      bad = mid;
    } else {
      good = mid;
      good_peak = peak;
    }
  }
  result.peak_bytes = good_peak;
  result.max_tokens = std::max<int64_t>(max_len, static_cast<int64_t>(o.margin * double(good * max_len)));
  return result;
}

}  // namespace nightshift::trainer
