// Errors as values across module boundaries, LevelDB-style. The codes match gRPC's so a
// Status becomes a grpc::Status without a table. Messages name the job, file or field.
#ifndef NIGHTSHIFT_COMMON_STATUS_H_
#define NIGHTSHIFT_COMMON_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <utility>

namespace nightshift {

class Status {
 public:
  enum Code {
    kOk = 0,
    kCancelled = 1,
    kInvalidArgument = 3,
    kDeadlineExceeded = 4,
    kNotFound = 5,
    kPermissionDenied = 7,
    kResourceExhausted = 8,
    kFailedPrecondition = 9,
    kInternal = 13,
    kUnavailable = 14,
    kDataLoss = 15,  // corruption
    kUnauthenticated = 16,
  };

  Status() = default;
  static Status OK() { return Status(); }
  static Status Cancelled(std::string m) { return Status(kCancelled, std::move(m)); }
  static Status InvalidArgument(std::string m) { return Status(kInvalidArgument, std::move(m)); }
  static Status NotFound(std::string m) { return Status(kNotFound, std::move(m)); }
  static Status FailedPrecondition(std::string m) { return Status(kFailedPrecondition, std::move(m)); }
  static Status Internal(std::string m) { return Status(kInternal, std::move(m)); }
  static Status Unavailable(std::string m) { return Status(kUnavailable, std::move(m)); }
  static Status DeadlineExceeded(std::string m) { return Status(kDeadlineExceeded, std::move(m)); }
  static Status PermissionDenied(std::string m) { return Status(kPermissionDenied, std::move(m)); }
  static Status Unauthenticated(std::string m) { return Status(kUnauthenticated, std::move(m)); }
  static Status ResourceExhausted(std::string m) { return Status(kResourceExhausted, std::move(m)); }
  static Status IOError(std::string m) { return Status(kInternal, "I/O error: " + std::move(m)); }
  static Status Corruption(std::string m) { return Status(kDataLoss, "corruption: " + std::move(m)); }

  bool ok() const { return code_ == kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  Code code_ = kOk;
  std::string message_;
};

template <typename T>
class StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) { assert(!status_.ok()); }  // NOLINT
  StatusOr(T value) : value_(std::move(value)) {}                                  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return *value_; }
  const T& value() const { return *value_; }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

#define NS_RETURN_IF_ERROR(expr)       \
  do {                                 \
    ::nightshift::Status _s = (expr);  \
    if (!_s.ok()) return _s;           \
  } while (0)

}  // namespace nightshift

#endif  // NIGHTSHIFT_COMMON_STATUS_H_
