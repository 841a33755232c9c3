// Clock: where the coordinator and the worker read the time, so tests can move it
// instead of sleeping (LevelDB's Env idea, for time alone).
//
// Steady time only: leases, restart backoff, stop timeouts, hang detection and stalled
// checkpoint copies are intervals on it. The wall-clock timestamps written into jobs (created, updated,
// events) and the progress ETAs that workers stamp are not read through it.
#ifndef NIGHTSHIFT_COMMON_CLOCK_H_
#define NIGHTSHIFT_COMMON_CLOCK_H_

#include <chrono>

namespace nightshift {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  // Never goes back. Thread-safe.
  virtual TimePoint Now() const = 0;

  // std::chrono::steady_clock. Shared and never deleted.
  static Clock* Real();
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_CLOCK_H_
