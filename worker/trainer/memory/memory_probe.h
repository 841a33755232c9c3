// max_tokens: auto — before training, find the largest token budget whose worst-case
// batch (samples of model.max_len tokens) fits the memory target.
//
// Search: batches of 1, 2, 4, ... max_len-long rows until the peak memory of one
// forward + backward passes target_fraction x limit (or runs out of memory, or reaches
// the cap), then bisect between the last fitting and the first failing row count. A row
// count whose peak, drawn on the line through the two largest fitting probes, would pass
// the target is not run: it counts as too big, as it would have once run (memory grows
// linearly with the rows of max_len tokens), so once two probes fitted the search runs
// nothing that the line puts past the target, let alone out of memory.
// Result: margin x (rows that fit x max_len), at least max_len.
// Units: bytes of process memory on the CPU (peak resident set, VmHWM), bytes of
// allocated device memory on CUDA; tokens are padded tokens (rows x max_len).
// Invariants: the caller's run function must leave no state behind (the trainer saves
// and restores the generator state and clears gradients around the probe); an
// out-of-memory error during a probe counts as "does not fit".
#ifndef NIGHTSHIFT_WORKER_TRAINER_MEMORY_MEMORY_PROBE_H_
#define NIGHTSHIFT_WORKER_TRAINER_MEMORY_MEMORY_PROBE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace nightshift::trainer {

// The bytes of a "Key:  1234 kB" line of a /proc file (e.g. "/proc/self/status",
// "VmHWM:"); -1 when the file or the key is absent.
int64_t ProcBytes(const char* path, const char* key);

// Peak memory since the last reset.
class MemoryMeter {
 public:
  virtual ~MemoryMeter() = default;
  virtual void ResetPeak() = 0;
  virtual int64_t PeakBytes() = 0;
};

// The process's peak resident set (VmHWM; reset by returning free heap to the kernel
// (malloc_trim) and writing "5" to /proc/self/clear_refs; where that is refused,
// getrusage's ru_maxrss, which never goes down).
std::unique_ptr<MemoryMeter> NewHostMemoryMeter();

// Bytes this process may use on the host: `limit_bytes` when > 0 (--memory-limit or
// NIGHTSHIFT_MEMORY_LIMIT_BYTES), else its resident set now plus its share of
// MemAvailable (`local_ranks` trainers of one job probe on this host at once).
int64_t HostMemoryLimit(int64_t limit_bytes, int local_ranks = 1);

struct ProbeOptions {
  int64_t limit_bytes = 0;       // memory the run may use (> 0)
  double target_fraction = 0.8;  // peak may reach this fraction of limit_bytes
  double margin = 0.9;           // the budget is this fraction of what fitted
  int64_t max_len = 512;         // tokens per worst-case row
  int64_t cap_tokens = 0;        // no budget above this (e.g. the whole epoch); 0: none
  // Lockstep, for ranks whose probes meet in collectives (sharding full gathers each
  // block): given this rank's answer (a row count may run; it fitted), every rank's (true
  // when all said true). Every rank calls it for each row count (once when it may not run,
  // twice when it ran), in the same order, so all run the same probes. Default: this
  // rank's answer. A probe that runs out of memory inside a collective on one rank in
  // lockstep must issue the rest of them before it throws (the trainer's probe does:
  // oom.h's CatchUp), or it leaves the others there.
  std::function<bool(bool)> agree = [](bool yes) { return yes; };
};

struct ProbeResult {
  int64_t max_tokens = 0;       // the chosen budget (padded tokens)
  int64_t peak_bytes = 0;       // peak of the largest fitting probe
  int64_t target_bytes = 0;
  int probes = 0;               // forward+backward runs done
  int predicted = 0;            // row counts judged too big from the line, not run
};

// `run(rows)`: one forward + backward of `rows` rows of max_len tokens. Throws
// std::runtime_error when not even one row fits.
ProbeResult ProbeMaxTokens(const ProbeOptions& options, MemoryMeter& meter,
                           const std::function<void(int64_t rows)>& run);

}  // namespace nightshift::trainer

#endif  // NIGHTSHIFT_WORKER_TRAINER_MEMORY_MEMORY_PROBE_H_
