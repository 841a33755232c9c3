// A Clock for tests whose time moves only when the test calls Advance, so leases,
// backoff, stop timeouts and hang detection are exercised without sleeping.
#ifndef NIGHTSHIFT_TESTS_COMMON_FAKE_CLOCK_H_
#define NIGHTSHIFT_TESTS_COMMON_FAKE_CLOCK_H_

#include <atomic>
#include <chrono>

#include "common/clock.h"

namespace nightshift {

class FakeClock : public Clock {
 public:
  // Starts an hour after the clock's epoch, so a default TimePoint{} is long past, as it
  // is on a real steady clock.
  FakeClock() : ticks_(std::chrono::duration_cast<Duration>(std::chrono::hours(1)).count()), start_(Now()) {}

  TimePoint Now() const override { return TimePoint(Duration(ticks_.load())); }
  // 2026-01-01T00:00:00Z when constructed, moving with Now().
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::time_point(std::chrono::seconds(1767225600)) +
           std::chrono::duration_cast<std::chrono::system_clock::duration>(Now() - start_);
  }
  void Advance(std::chrono::nanoseconds d) { ticks_ += std::chrono::duration_cast<Duration>(d).count(); }

 private:
  std::atomic<Duration::rep> ticks_;  // since the steady clock's epoch
  const TimePoint start_;
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_TESTS_COMMON_FAKE_CLOCK_H_
