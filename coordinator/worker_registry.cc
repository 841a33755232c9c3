#include "coordinator/worker_registry.h"

#include <algorithm>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <chrono>

#include "common/log.h"
#include "common/time_util.h"
#include "coordinator/limits.h"

namespace nightshift {

WorkerRegistry::WorkerRegistry(const CoordinatorOptions& options, Clock* clock)
    : options_(options), clock_(clock) {}

Status WorkerRegistry::CheckRegistration(const v1::WorkerInfo& worker) {
  if (worker.name().empty()) return Status::InvalidArgument("name: a worker needs a name");
  NS_RETURN_IF_ERROR(CheckWorkerInfo(worker));
  if (worker.slots() < 0 || worker.slots() > 1024) return Status::InvalidArgument("slots: must be in [0, 1024]");
  return Status::OK();
}

namespace {

// The host of HOST:PORT or [HOST]:PORT; "" when there is no port.
std::string HostOf(const std::string& address) {
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    return close == std::string::npos ? "" : address.substr(1, close - 1);
  }
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? "" : address.substr(0, colon);
}

// Whether `host` (an IP literal, or a name resolved here) is the address `peer`.
bool SameHost(const std::string& host, const std::string& peer) {
  if (host == peer) return true;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool same = false;
  for (addrinfo* a = found; a != nullptr && !same; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* ip = a->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                                             : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    same = ::inet_ntop(a->ai_family, ip, text, sizeof(text)) != nullptr && peer == text;
  }
  ::freeaddrinfo(found);
  return same;
}

}  // namespace

Status WorkerRegistry::Register(const v1::WorkerInfo& worker, const RegistrationSource& from,
                                const std::string& file_key) {
  if (!serving_since_) serving_since_ = clock_->Now();
  auto it = workers_.find(worker.name());
  const bool known = it != workers_.end() && it->second.info.state() == v1::WORKER_READY;
  if (!from.admin && !from.peer_host.empty() && !worker.log_address().empty() &&
      !SameHost(HostOf(worker.log_address()), from.peer_host))
    return Status::PermissionDenied("log_address: " + worker.log_address() + " is not on " + from.peer_host +
                                    ", where worker " + worker.name() + " calls from (an admin may set any)");
  if (known && !from.peer_host.empty() && !it->second.peer_host.empty() && it->second.peer_host != from.peer_host)
    return Status::FailedPrecondition("worker " + worker.name() + " is registered from " + it->second.peer_host +
                                      " and its lease has not ended; a worker of that name from " + from.peer_host +
                                      " may register once it has, or after `nightshift worker remove " +
                                      worker.name() + "`");
  WorkerEntry& w = workers_[worker.name()];
  w.peer_host = from.peer_host;
  w.file_key = file_key;
  w.info.set_name(worker.name());
  w.info.set_state(v1::WORKER_READY);
  w.info.set_slots(worker.slots());
  w.info.set_memory_bytes(worker.memory_bytes());
  w.info.set_log_address(worker.log_address());
  w.info.mutable_gpus()->CopyFrom(worker.gpus());
  if (worker.has_allocation()) *w.info.mutable_allocation() = worker.allocation();
  else w.info.clear_allocation();
  *w.info.mutable_last_heartbeat() = ToTimestamp(clock_->WallNow());
  w.last_seen = clock_->Now();
  NS_INFO("worker " << worker.name() << (known ? " re-registered" : " registered") << " with "
                    << worker.slots() << " slots, " << worker.tasks_size() << " running tasks"
                    << (from.peer_host.empty() ? "" : ", from " + from.peer_host));
  return Status::OK();
}

Status WorkerRegistry::Remove(const std::string& name) {
  if (workers_.erase(name) == 0) return Status::NotFound("no worker " + name + " (see `nightshift worker list`)");
  NS_WARN("worker " << name << " removed by an admin: its tasks count as lost");
  return Status::OK();
}

Status WorkerRegistry::Heartbeat(const std::string& name, Clock::TimePoint now,
                                 const std::vector<v1::TaskStatus>& tasks, const v1::CacheReport* cache,
                                 const std::vector<v1::HeldCheckpoint>& checkpoints, HeartbeatReply* reply) {
  auto wit = workers_.find(name);
  if (wit == workers_.end() || wit->second.info.state() != v1::WORKER_READY)
    return Status::NotFound("worker " + name + " is not registered");
  WorkerEntry& worker = wit->second;
  const double gap = std::chrono::duration<double>(now - worker.last_seen).count();
  worker.heartbeat_gap_seconds =
      worker.heartbeat_gap_seconds == 0 ? gap : 0.8 * worker.heartbeat_gap_seconds + 0.2 * gap;
  worker.last_seen = now;
  *worker.info.mutable_last_heartbeat() = ToTimestamp(clock_->WallNow());
  worker.info.clear_tasks();
  for (const auto& status : tasks) *worker.info.add_tasks() = status.task();
  if (cache != nullptr) worker.cache = *cache;
  worker.held.clear();
  worker.held_manifest.clear();
  for (const auto& h : checkpoints) {
    worker.held[h.job_id()] = h.step();
    worker.held_manifest[h.job_id()] = h.manifest_sha256();
  }
  reply->evict_cache_keys.swap(worker.evict_keys);
  reply->evict_cache_all = worker.evict_all;
  worker.evict_all = false;
  return Status::OK();
}

const WorkerEntry* WorkerRegistry::Find(const std::string& name) const {
  auto it = workers_.find(name);
  return it == workers_.end() ? nullptr : &it->second;
}

bool WorkerRegistry::Late(const WorkerEntry& w, Clock::TimePoint now) const {
  const double limit = std::max(2 * options_.heartbeat_interval_ms / 1000.0, 3 * w.heartbeat_gap_seconds);
  return now - w.last_seen > Seconds(std::min(limit, options_.lease_seconds / 2));
}

bool WorkerRegistry::Gone(const std::string& name, Clock::TimePoint now) const {
  auto it = workers_.find(name);
  if (it == workers_.end()) return serving_since_ && now - *serving_since_ > Seconds(options_.lease_seconds);
  return it->second.info.state() == v1::WORKER_LOST;
}

bool WorkerRegistry::ExpireLeases(Clock::TimePoint now) {
  if (!serving_since_) serving_since_ = now;
  for (auto it = workers_.begin(); it != workers_.end();) {
    const bool forget = it->second.info.state() == v1::WORKER_LOST &&
                        now - it->second.last_seen > Seconds(options_.forget_workers_after_seconds);
    if (forget) NS_INFO("worker " << it->first << " forgotten: lost for over " << options_.forget_workers_after_seconds << " s");
    it = forget ? workers_.erase(it) : std::next(it);
  }
  // Workers heartbeat every fraction of a second: when none has for half a lease, the
  // silence is this side's (a cut link, a stalled host), and declaring them all lost would
  // restart every running job for nothing. They keep training and keep their results.
  int ready = 0;
  Clock::TimePoint newest = Clock::TimePoint::min();
  for (const auto& [name, w] : workers_) {
    if (w.info.state() != v1::WORKER_READY) continue;
    ++ready;
    newest = std::max(newest, w.last_seen);
  }
  const bool silent = ready >= 2 && now - newest > Seconds(options_.lease_seconds / 2);
  const bool own_outage = silent && now - newest <= Seconds(options_.outage_grace_seconds);
  // The parentheses matter: NS_WARN streams its argument, and `<<` binds before `?:`.
  if (own_outage != in_outage_)
    NS_WARN((own_outage ? "no worker has reached the coordinator for half a lease: treating it as this "
                          "coordinator's outage; no worker is declared lost for up to --outage-grace-seconds"
                        : "workers reach the coordinator again (or the outage grace is over)"));
  // When it ends (the first worker is back), every worker gets a full lease to come back
  // too, as after a restart.
  const bool outage_over = in_outage_ && !silent;
  if (outage_over)
    for (auto& [name, w] : workers_) w.last_seen = std::max(w.last_seen, now);
  in_outage_ = own_outage;
  if (own_outage) return outage_over;
  for (auto& [name, w] : workers_) {
    if (w.info.state() == v1::WORKER_READY && now - w.last_seen > Seconds(options_.lease_seconds)) {
      w.info.set_state(v1::WORKER_LOST);
      NS_WARN("worker " << name << " lost: no heartbeat for " << options_.lease_seconds << " s");
    }
  }
  return outage_over;
}

StatusOr<WorkerEntry*> WorkerRegistry::Known(const std::string& name) {
  auto it = workers_.find(name);
  if (it == workers_.end()) return Status::NotFound("no worker " + name + " (see `nightshift worker list`)");
  return &it->second;
}

StatusOr<v1::WorkerInfo> WorkerRegistry::Cordon(const std::string& name, bool uncordon) {
  auto known = Known(name);
  if (!known.ok()) return known.status();
  WorkerEntry* w = known.value();
  w->info.set_cordoned(!uncordon);
  if (uncordon) w->info.set_draining(false);
  NS_INFO("worker " << name << (uncordon ? " uncordoned" : " cordoned"));
  return w->info;
}

StatusOr<v1::WorkerInfo> WorkerRegistry::MarkDraining(const std::string& name) {
  auto known = Known(name);
  if (!known.ok()) return known.status();
  WorkerEntry* w = known.value();
  w->info.set_cordoned(true);
  w->info.set_draining(true);
  return w->info;
}

StatusOr<int> WorkerRegistry::QueueEviction(const std::string& worker, const std::string& key, bool all) {
  if (!worker.empty() && !workers_.count(worker)) return Status::NotFound("no worker " + worker);
  int n = 0;
  for (auto& [name, w] : workers_) {
    if (!worker.empty() && name != worker) continue;
    if (all) w.evict_all = true;
    else w.evict_keys.push_back(key);
    ++n;
  }
  return n;
}

std::vector<v1::WorkerCache> WorkerRegistry::ListCache(const std::string& worker) const {
  std::vector<v1::WorkerCache> caches;
  for (const auto& [name, w] : workers_) {
    if (!worker.empty() && name != worker) continue;
    v1::WorkerCache& wc = caches.emplace_back();
    wc.set_worker(name);
    *wc.mutable_report() = w.cache;
  }
  return caches;
}

}  // namespace nightshift
