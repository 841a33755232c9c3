#include "coordinator/scheduler.h"

#include <algorithm>

namespace nightshift {

ScheduleResult Schedule(std::vector<SchedJob> jobs, std::vector<SchedWorker> workers) {
  ScheduleResult result;
  std::sort(jobs.begin(), jobs.end(), [](const SchedJob& a, const SchedJob& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.submit_seq < b.submit_seq;
  });
  int total = 0;
  for (const auto& w : workers) total += w.total_slots;

  bool blocked = false;
  std::string blocked_by;
  for (const SchedJob& job : jobs) {
    if (job.world_size > total) {
      result.waiting[job.id] = "needs " + std::to_string(job.world_size) +
                               " slots; the cluster has " + std::to_string(total);
      continue;
    }
    if (blocked) {
      result.waiting[job.id] = "queued behind " + blocked_by;
      continue;
    }
    int free = 0;
    for (const auto& w : workers) free += w.free_slots;
    if (free < job.world_size) {
      result.waiting[job.id] = "waiting for " + std::to_string(job.world_size) +
                               " free slots (" + std::to_string(free) + " free now)";
      blocked = true;
      blocked_by = job.id;
      continue;
    }
    std::vector<SchedPart> parts;
    // Best fit on a single worker.
    SchedWorker* best = nullptr;
    for (auto& w : workers) {
      if (w.free_slots >= job.world_size && (best == nullptr || w.free_slots < best->free_slots)) best = &w;
    }
    if (best != nullptr) {
      parts.push_back({best->name, 0, job.world_size});
      best->free_slots -= job.world_size;
    } else {
      std::vector<SchedWorker*> order;
      for (auto& w : workers) if (w.free_slots > 0) order.push_back(&w);
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
    }
    result.placed[job.id] = std::move(parts);
  }
  return result;
}

}  // namespace nightshift
