// Timestamps for protobuf messages and durations in seconds.
#ifndef NIGHTSHIFT_COMMON_TIME_UTIL_H_
#define NIGHTSHIFT_COMMON_TIME_UTIL_H_

#include <google/protobuf/timestamp.pb.h>

#include <chrono>

namespace nightshift {

inline google::protobuf::Timestamp ToTimestamp(std::chrono::system_clock::time_point t) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  google::protobuf::Timestamp ts;
  ts.set_seconds(ns / 1000000000);
  ts.set_nanos(static_cast<int32_t>(ns % 1000000000));
  return ts;
}

inline google::protobuf::Timestamp NowTimestamp() { return ToTimestamp(std::chrono::system_clock::now()); }

// Seconds from `ts` to `now`: the caller's time of day (the coordinator's is its Clock's
// WallNow, so no default reads the system clock behind a fake one).
inline double SecondsSince(const google::protobuf::Timestamp& ts, std::chrono::system_clock::time_point now) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  return (ns - (ts.seconds() * 1000000000LL + ts.nanos())) / 1e9;
}

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_TIME_UTIL_H_
