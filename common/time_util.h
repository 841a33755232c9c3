// Timestamps for protobuf messages and durations in seconds.
#ifndef NIGHTSHIFT_COMMON_TIME_UTIL_H_
#define NIGHTSHIFT_COMMON_TIME_UTIL_H_

#include <google/protobuf/timestamp.pb.h>

#include <chrono>

namespace nightshift {

inline google::protobuf::Timestamp NowTimestamp() {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::system_clock::now().time_since_epoch()).count();
  google::protobuf::Timestamp ts;
  ts.set_seconds(ns / 1000000000);
  ts.set_nanos(static_cast<int32_t>(ns % 1000000000));
  return ts;
}

inline double SecondsSince(const google::protobuf::Timestamp& ts) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::system_clock::now().time_since_epoch()).count();
  return (ns - (ts.seconds() * 1000000000LL + ts.nanos())) / 1e9;
}

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_TIME_UTIL_H_
