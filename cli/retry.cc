#include "cli/retry.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

namespace nightshift::cli {

bool IsRetryable(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

std::string NewRequestId() {
  std::random_device rd;
  std::uniform_int_distribution<int> digit(0, 15);
  std::string id(32, '0');
  for (char& c : id) c = "0123456789abcdef"[digit(rd)];
  return id;
}

grpc::Status CallWithRetry(const RetryPolicy& policy,
                           const std::function<grpc::Status(std::chrono::system_clock::time_point)>& attempt,
                           int* attempts) {
  using Seconds = std::chrono::duration<double>;
  const auto end = std::chrono::steady_clock::now() + Seconds(policy.retry_for_seconds);
  std::mt19937_64 rng(std::random_device{}());
  double backoff = policy.first_backoff_seconds;
  int n = 0;
  for (;;) {
    const double left = Seconds(end - std::chrono::steady_clock::now()).count();
    const double budget = std::min(policy.attempt_seconds, std::max(left, 1.0));
    const auto deadline = std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(Seconds(budget));
    grpc::Status status = attempt(deadline);
    ++n;
    if (attempts != nullptr) *attempts = n;
    if (status.ok() || !IsRetryable(status)) return status;
    const double wait = std::uniform_real_distribution<double>(backoff / 2, backoff)(rng);
    if (std::chrono::steady_clock::now() + Seconds(wait) >= end) return status;
    std::fprintf(stderr, "note: %s; attempt %d failed, retrying in %.1f s\n", status.error_message().c_str(), n,
                 wait);
    std::this_thread::sleep_for(Seconds(wait));
    backoff = std::min(backoff * 2, policy.max_backoff_seconds);
  }
}

}  // namespace nightshift::cli
