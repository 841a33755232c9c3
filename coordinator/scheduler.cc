#include "coordinator/scheduler.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <set>
#include <tuple>
#include <unordered_map>

namespace nightshift {
namespace {

// Whether `job` may run on `w`.
bool Eligible(const SchedJob& job, const SchedWorker& w) { return !job.needs_gpu || w.gpus; }

// Places all ranks of `job` onto the eligible `workers` (which must have enough free
// slots in all).
std::vector<SchedPart> Place(const SchedJob& job, std::vector<SchedWorker>* workers) {
  std::vector<SchedPart> parts;
  // Best fit on a single worker.
  SchedWorker* best = nullptr;
  for (auto& w : *workers) {
    if (Eligible(job, w) && w.free_slots >= job.world_size && (best == nullptr || w.free_slots < best->free_slots))
      best = &w;
  }
  if (best != nullptr) {
    parts.push_back({best->name, 0, job.world_size});
    best->free_slots -= job.world_size;
    return parts;
  }
  std::vector<SchedWorker*> order;
  for (auto& w : *workers)
    if (Eligible(job, w) && w.free_slots > 0) order.push_back(&w);
  std::stable_sort(order.begin(), order.end(),
                   [](const SchedWorker* a, const SchedWorker* b) { return a->free_slots > b->free_slots; });
  int rank = 0;
  for (SchedWorker* w : order) {
    if (rank == job.world_size) break;
    int take = std::min(w->free_slots, job.world_size - rank);
    parts.push_back({w->name, rank, take});
    w->free_slots -= take;
    rank += take;
  }
  return parts;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

ScheduleResult Schedule(std::vector<SchedJob> jobs, std::vector<SchedWorker> workers,
                        const std::vector<SchedRunning>& running, const ScheduleOptions& options) {
  ScheduleResult result;
  std::unordered_map<std::string, int> known;  // worker name -> index
  int total = 0, free_total = 0;
  for (size_t i = 0; i < workers.size(); ++i) {
    known[workers[i].name] = static_cast<int>(i);
    total += workers[i].total_slots;
    free_total += workers[i].free_slots;
  }
  // Slots each running job holds on the workers that count, and each owner's share.
  std::vector<int> held(running.size(), 0);
  std::unordered_map<std::string, int64_t> usage;
  for (size_t i = 0; i < running.size(); ++i) {
    for (const auto& p : running[i].parts)
      if (known.count(p.worker)) held[i] += p.num_ranks;
    usage[running[i].owner] += held[i];
  }

  // Reservation state: once set, later jobs only backfill.
  bool reserved = false;
  double reserve_at = 0;  // seconds from now
  int shadow_extra = 0;   // slots free at reserve_at beyond what the holder needs

  // A GPU job: only GPU workers count, and it never reserves or preempts (the reservation
  // arithmetic is over all slots); it backfills like any job once a reservation exists.
  auto process_gpu = [&](const SchedJob& job) -> bool {
    int gpu_total = 0, gpu_free = 0;
    for (const auto& w : workers)
      if (w.gpus) gpu_total += w.total_slots, gpu_free += w.free_slots;
    if (job.world_size > gpu_total) {
      result.waiting[job.id] = gpu_total == 0 ? "resources.device is cuda but no ready worker has GPUs"
                                              : "needs " + std::to_string(job.world_size) +
                                                    " GPU slots; the cluster has " + std::to_string(gpu_total);
      return false;
    }
    const bool ends_before = job.expected_seconds < kUnknownSeconds && job.expected_seconds <= reserve_at;
    if (job.world_size > gpu_free || (reserved && !ends_before && job.world_size > shadow_extra)) {
      result.waiting[job.id] = "waiting for " + std::to_string(job.world_size) + " free GPU slots (" +
                               std::to_string(gpu_free) + " free now)";
      return false;
    }
    if (reserved && !ends_before) shadow_extra -= job.world_size;
    result.placed[job.id] = Place(job, &workers);
    free_total -= job.world_size;
    return true;
  };

  auto process = [&](const SchedJob& job) -> bool {
    if (job.needs_gpu) return process_gpu(job);
    if (job.world_size > total) {
      result.waiting[job.id] = "needs " + std::to_string(job.world_size) + " slots; the cluster has " +
                               std::to_string(total);
      return false;
    }
    const std::string short_of = "waiting for " + std::to_string(job.world_size) + " free slots (" +
                                 std::to_string(free_total) + " free now)";
    if (!reserved) {
      if (job.world_size <= free_total) {
        result.placed[job.id] = Place(job, &workers);
        free_total -= job.world_size;
        return true;
      }
      reserved = true;
      result.reserved_for = job.id;
      // Slots that free up soon: jobs already stopping, plus victims chosen now.
      std::vector<bool> ends_now(running.size(), false);
      int soon = free_total;
      for (size_t i = 0; i < running.size(); ++i)
        if (running[i].stopping) ends_now[i] = true, soon += held[i];
      if (options.preemption && soon < job.world_size) {
        std::vector<size_t> cand;
        for (size_t i = 0; i < running.size(); ++i)
          if (!running[i].stopping && held[i] > 0 && running[i].priority < job.priority) cand.push_back(i);
        // Lowest priority first; among equals the biggest (fewest victims), then the youngest.
        std::sort(cand.begin(), cand.end(), [&](size_t a, size_t b) {
          const SchedRunning &x = running[a], &y = running[b];
          return std::make_tuple(x.priority, -held[a], -static_cast<int64_t>(x.submit_seq)) <
                 std::make_tuple(y.priority, -held[b], -static_cast<int64_t>(y.submit_seq));
        });
        const int need = job.world_size - soon;
        std::vector<size_t> chosen;
        int got = 0;
        for (size_t i : cand) {
          if (got >= need) break;
          chosen.push_back(i);
          got += held[i];
        }
        if (got >= need) {
          // Drop victims that turned out unnecessary, most valuable first.
          for (size_t k = chosen.size(); k-- > 0;) {
            if (got - held[chosen[k]] >= need) {
              got -= held[chosen[k]];
              chosen.erase(chosen.begin() + static_cast<long>(k));
            }
          }
          std::vector<std::string> names;
          for (size_t i : chosen) {
            ends_now[i] = true;
            names.push_back(running[i].id);
            result.preempt.push_back(running[i].id);
          }
          result.waiting[job.id] = "preempting " + Join(names) + " (lower priority) to start";
        }
      }
      // When enough slots are expected to be free.
      std::vector<std::pair<double, int>> ends;
      for (size_t i = 0; i < running.size(); ++i)
        if (held[i] > 0) ends.push_back({ends_now[i] ? 0.0 : running[i].ends_in_seconds, held[i]});
      std::sort(ends.begin(), ends.end());
      int avail = free_total;
      reserve_at = kUnknownSeconds;
      shadow_extra = 0;
      for (size_t k = 0; k < ends.size() && ends[k].first < kUnknownSeconds; ++k) {
        avail += ends[k].second;
        if (avail >= job.world_size) {
          reserve_at = ends[k].first;
          // Others ending at the same moment add to the spare room.
          while (k + 1 < ends.size() && ends[k + 1].first == reserve_at) avail += ends[++k].second;
          shadow_extra = avail - job.world_size;
          break;
        }
      }
      result.reserved_in_seconds = reserve_at;
      if (!result.waiting.count(job.id)) result.waiting[job.id] = short_of;
      return false;
    }
    if (job.world_size > free_total) {
      result.waiting[job.id] = short_of;
      return false;
    }
    const bool ends_before = job.expected_seconds < kUnknownSeconds && job.expected_seconds <= reserve_at;
    if (!ends_before && job.world_size > shadow_extra) {
      result.waiting[job.id] = "queued behind " + result.reserved_for;
      return false;
    }
    if (!ends_before) shadow_extra -= job.world_size;
    result.placed[job.id] = Place(job, &workers);
    free_total -= job.world_size;
    return true;
  };

  // Priority classes, highest first; within one, fair share between owners.
  std::map<int, std::vector<SchedJob>, std::greater<int>> by_priority;
  for (auto& j : jobs) by_priority[j.priority].push_back(std::move(j));
  for (auto& [priority, level] : by_priority) {
    std::sort(level.begin(), level.end(),
              [](const SchedJob& a, const SchedJob& b) { return a.submit_seq < b.submit_seq; });
    std::unordered_map<std::string, std::deque<const SchedJob*>> queues;
    for (const auto& j : level) queues[j.owner].push_back(&j);
    // (slots held, oldest job's seq, owner): the owner holding least goes next.
    std::set<std::tuple<int64_t, uint64_t, std::string>> ready;
    for (const auto& [owner, q] : queues) ready.insert({usage[owner], q.front()->submit_seq, owner});
    while (!ready.empty()) {
      auto [used, seq, owner] = *ready.begin();
      ready.erase(ready.begin());
      auto& q = queues[owner];
      const SchedJob* job = q.front();
      q.pop_front();
      if (process(*job)) usage[owner] += job->world_size;
      if (!q.empty()) ready.insert({usage[owner], q.front()->submit_seq, owner});
    }
  }
  return result;
}

}  // namespace nightshift
