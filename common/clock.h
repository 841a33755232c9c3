// Clock: where the coordinator and the worker read the time, so tests can move it
// instead of sleeping (LevelDB's Env idea, for time alone).
//
// Now(), steady time: leases, restart backoff, stop timeouts, hang detection and stalled
// checkpoint copies are intervals on it. WallNow(), the time of day that the coordinator
// writes into records (a job's created, updated and event times, a worker's last
// heartbeat) and measures queue waits against. The progress times and ETAs that workers
// stamp come from their own clocks and are not read through it.
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
  // May jump (NTP, an operator). Thread-safe.
  virtual std::chrono::system_clock::time_point WallNow() const = 0;

  // std::chrono::steady_clock and system_clock. Shared and never deleted.
  static Clock* Real();
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_CLOCK_H_
