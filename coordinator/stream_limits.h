// StreamLimits: caps on the long-lived streams the JobService serves (WatchJob,
// StreamLogs, GetArtifacts), per user and in all, so that no caller can hold a thousand
// of them open: each one holds a server thread, and a log or artifact stream a relay to
// a worker too. A stream takes a slot when it opens and gives it back when it ends.
//
// Thread-safe: every method takes mu_.
#ifndef NIGHTSHIFT_COORDINATOR_STREAM_LIMITS_H_
#define NIGHTSHIFT_COORDINATOR_STREAM_LIMITS_H_

#include <map>
#include <mutex>
#include <string>

#include "common/status.h"

namespace nightshift {

struct StreamLimitOptions {
  int per_user = 64;  // open streams of one user (insecure mode: everyone is one user, "");
                      // --max-streams-per-user
  int total = 1024;   // open streams of everyone together; --max-streams
};

class StreamLimits {
 public:
  // One open stream; gives its slot back when destroyed. Move-only.
  class Slot {
   public:
    Slot(Slot&& other) noexcept : limits_(other.limits_), user_(std::move(other.user_)) { other.limits_ = nullptr; }
    Slot& operator=(Slot&&) = delete;
    Slot(const Slot&) = delete;
    ~Slot() {
      if (limits_ != nullptr) limits_->Close(user_);
    }

   private:
    friend class StreamLimits;
    Slot(StreamLimits* limits, std::string user) : limits_(limits), user_(std::move(user)) {}
    StreamLimits* limits_;  // not owned; null once moved from
    std::string user_;
  };

  explicit StreamLimits(StreamLimitOptions options) : options_(options) {}

  // A slot for one more stream of `user`, or RESOURCE_EXHAUSTED naming the limit that is
  // full. The StreamLimits must outlive the slot.
  StatusOr<Slot> Open(const std::string& user);

  // Streams open now, of `user` and in all.
  int OpenOf(const std::string& user) const;
  int OpenTotal() const;

 private:
  void Close(const std::string& user);

  const StreamLimitOptions options_;  // constant after construction
  mutable std::mutex mu_;
  std::map<std::string, int> by_user_;  // GUARDED_BY(mu_): users with open streams only
  int total_ = 0;                       // GUARDED_BY(mu_)
};

}  // namespace nightshift

#endif  // NIGHTSHIFT_COORDINATOR_STREAM_LIMITS_H_
