// Retrying a call that may have reached the coordinator: for calls that are safe to
// repeat (SubmitJob with one request_id throughout), UNAVAILABLE and DEADLINE_EXCEEDED
// are tried again with exponential backoff and jitter, for a bounded time.
#ifndef NIGHTSHIFT_CLI_RETRY_H_
#define NIGHTSHIFT_CLI_RETRY_H_

#include <grpcpp/support/status.h>

#include <chrono>
#include <functional>
#include <string>

namespace nightshift::cli {

struct RetryPolicy {
  double retry_for_seconds = 60;     // no new attempt starts after this long; 0: one attempt
  double first_backoff_seconds = 0.2;  // the wait before the 2nd attempt; doubles each time
  double max_backoff_seconds = 5;    // the longest wait between two attempts
  double attempt_seconds = 30;       // deadline of one attempt (cut to the time left, at least 1 s)
};

// Whether a failed call may succeed when repeated: nobody answered (in time).
bool IsRetryable(const grpc::Status& status);

// A random id for one logical request (32 hex digits), for SubmitJobRequest.request_id.
std::string NewRequestId();

// Calls `attempt(deadline)` until it returns a status that is OK or not retryable, or
// the policy's time is up; each wait is a random time in [b/2, b] for the current
// backoff b. Returns the last status; *attempts (if not null) counts the calls.
grpc::Status CallWithRetry(const RetryPolicy& policy,
                           const std::function<grpc::Status(std::chrono::system_clock::time_point)>& attempt,
                           int* attempts = nullptr);

}  // namespace nightshift::cli

#endif  // NIGHTSHIFT_CLI_RETRY_H_
