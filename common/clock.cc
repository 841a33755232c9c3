#include "common/clock.h"

namespace nightshift {
namespace {

class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  std::chrono::system_clock::time_point WallNow() const override { return std::chrono::system_clock::now(); }
};

}  // namespace

Clock* Clock::Real() {
  static SteadyClock* clock = new SteadyClock;  // never deleted: usable until exit
  return clock;
}

}  // namespace nightshift
