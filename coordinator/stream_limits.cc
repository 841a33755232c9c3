#include "coordinator/stream_limits.h"

namespace nightshift {

StatusOr<StreamLimits::Slot> StreamLimits::Open(const std::string& user) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_user_.find(user);
  const int mine = it == by_user_.end() ? 0 : it->second;
  if (mine >= options_.per_user)
    return Status::ResourceExhausted("user '" + user + "' already has " + std::to_string(mine) +
                                     " open streams (watch, logs, artifacts), the limit per user "
                                     "(--max-streams-per-user " + std::to_string(options_.per_user) +
                                     "); close one first");
  if (total_ >= options_.total)
    return Status::ResourceExhausted("the coordinator already serves " + std::to_string(total_) +
                                     " open streams (watch, logs, artifacts), its limit (--max-streams " +
                                     std::to_string(options_.total) + "); try again later");
  ++by_user_[user];
  ++total_;
  return Slot(this, user);
}

void StreamLimits::Close(const std::string& user) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_user_.find(user);
  if (it != by_user_.end() && --it->second == 0) by_user_.erase(it);
  --total_;
}

int StreamLimits::OpenOf(const std::string& user) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_user_.find(user);
  return it == by_user_.end() ? 0 : it->second;
}

int StreamLimits::OpenTotal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_;
}

}  // namespace nightshift
